/* The mlp_cuda_* functions of mlp_cuda.h as forwarders into libfmnist_cuda.so, dlopened on the
 * first mlp_cuda_create: a run on the CPU never loads the module, so it maps neither cudart nor
 * cuBLAS (docs/PERFORMANCE.md: peak memory of the CPU job). The module is looked up in
 * $FMNIST_CUDA_MODULE, then next to the executable, then where the build put it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mlp_cuda.h"

static struct {
  void *h;
  int (*create)(mlp_cuda **, const mlp *, float *, float *, void *);
  void (*destroy)(mlp_cuda *);
  int (*forward)(mlp_cuda *, const float *, int);
  int (*loss_backward)(mlp_cuda *, const float *, const int32_t *, int, float);
  int (*hits)(mlp_cuda *, const int32_t *, int, uint8_t *);
  int (*take_loss)(mlp_cuda *, double *);
  const char *(*last_error)(void);
} mod;
static char load_error[1024];

static int try_open(const char *path) {
  if (!path || !*path) return -1;
  mod.h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!mod.h) {
    snprintf(load_error, sizeof load_error, "cannot load the CUDA part of the example: %s", dlerror());
    return -1;
  }
  return 0;
}

static int load(void) {
  if (mod.h) return 0;
  char exe[PATH_MAX], path[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  int found = try_open(getenv("FMNIST_CUDA_MODULE")) == 0;
  if (!found && n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(path, sizeof path, "%s/libfmnist_cuda.so", exe);
      found = access(path, R_OK) == 0 && try_open(path) == 0;
    }
  }
#ifdef FMNIST_CUDA_MODULE_PATH
  if (!found) found = try_open(FMNIST_CUDA_MODULE_PATH) == 0;
#endif
  if (!found) return -1;
#define SYM(f, name)                                                                           \
  if (!(*(void **)&mod.f = dlsym(mod.h, name))) {                                             \
    snprintf(load_error, sizeof load_error, "the CUDA part of the example lacks %s", name);   \
    dlclose(mod.h);                                                                           \
    mod.h = NULL;                                                                             \
    return -1;                                                                                \
  }
  SYM(create, "fmnist_module_create")
  SYM(destroy, "fmnist_module_destroy")
  SYM(forward, "fmnist_module_forward")
  SYM(loss_backward, "fmnist_module_loss_backward")
  SYM(hits, "fmnist_module_hits")
  SYM(take_loss, "fmnist_module_take_loss")
  SYM(last_error, "fmnist_module_last_error")
#undef SYM
  return 0;
}

int mlp_cuda_create(mlp_cuda **out, const mlp *m, float *d_params, float *d_grads, void *stream) {
  if (load() != 0) return -1;
  return mod.create(out, m, d_params, d_grads, stream);
}
void mlp_cuda_destroy(mlp_cuda *g) {
  if (mod.h && g) mod.destroy(g);
}
int mlp_cuda_forward(mlp_cuda *g, const float *d_x, int batch) { return mod.forward(g, d_x, batch); }
int mlp_cuda_loss_backward(mlp_cuda *g, const float *d_x, const int32_t *d_labels, int batch, float scale) {
  return mod.loss_backward(g, d_x, d_labels, batch, scale);
}
int mlp_cuda_hits(mlp_cuda *g, const int32_t *d_labels, int batch, uint8_t *d_hits) {
  return mod.hits(g, d_labels, batch, d_hits);
}
int mlp_cuda_take_loss(mlp_cuda *g, double *sum) { return mod.take_loss(g, sum); }
const char *mlp_cuda_last_error(void) { return mod.h ? mod.last_error() : load_error; }
