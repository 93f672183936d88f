/* The device layer (device.h): argument checks and dispatch to an ops table, the loader of the
 * CUDA module, and the probe behind `accelerate env`. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "backend/module.h"
#include "device/device_impl.h"
#include "device/kernels.h"

struct acc__device {
  const acc__device_ops *ops;
  void *ctx;
  acc__device_kind kind;
  char name[32];
};

/* The result of an ops call: a module's message becomes acc_last_error() with the device name. */
static acc_result done(const acc__device *d, int rc, const char *what) {
  if (rc == ACC_OK) return ACC_OK;
  if (d->ops->last_error) {
    const char *m = d->ops->last_error();
    return acc__error((acc_result)rc, "%s: %s: %s", d->name, what, m && *m ? m : "failed");
  }
  return (acc_result)rc;
}

static acc_result check_dev(const acc__device *d, const char *fn) {
  if (!d) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: device is NULL", fn);
  return ACC_OK;
}

acc_result acc__device_open(acc__device **out, acc__device_kind kind, int ordinal) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_open: out is NULL");
  *out = NULL;
  const acc__device_ops *ops = NULL;
  switch (kind) {
    case ACC__DEVICE_CPU: ops = &acc__device_cpu_ops; break;
    case ACC__DEVICE_FAKE: ops = &acc__device_fake_ops; break;
    case ACC__DEVICE_CUDA: ACC_CHECK(acc__device_module_load("cuda", &ops)); break;
    default:
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_open: unknown device kind %d",
                        (int)kind);
  }
  acc__device *d = acc__calloc(1, sizeof *d);
  if (!d) return ACC_ERR_NOMEM;
  d->ops = ops;
  d->kind = kind;
  if (kind == ACC__DEVICE_CUDA) snprintf(d->name, sizeof d->name, "cuda:%d", ordinal);
  else if (kind == ACC__DEVICE_FAKE) snprintf(d->name, sizeof d->name, "fake:%d", ordinal);
  else snprintf(d->name, sizeof d->name, "%s", ops->name);
  acc_result rc = done(d, ops->open(ordinal, &d->ctx), "cannot open the device");
  if (rc != ACC_OK) {
    free(d);
    return rc;
  }
  *out = d;
  return ACC_OK;
}

void acc__device_close(acc__device *d) {
  if (!d) return;
  d->ops->close(d->ctx);
  free(d);
}

const char *acc__device_name(const acc__device *d) { return d ? d->name : "none"; }
acc__device_kind acc__device_get_kind(const acc__device *d) { return d->kind; }

acc_result acc__device_alloc(acc__device *d, size_t bytes, void **out) {
  ACC_CHECK(check_dev(d, "acc__device_alloc"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_alloc: out is NULL");
  *out = NULL;
  return done(d, d->ops->alloc(d->ctx, bytes, out), "alloc");
}

acc_result acc__device_free(acc__device *d, void *p) {
  ACC_CHECK(check_dev(d, "acc__device_free"));
  if (!p) return ACC_OK;
  return done(d, d->ops->free(d->ctx, p), "free");
}

acc_result acc__device_host_alloc(acc__device *d, size_t bytes, void **out) {
  ACC_CHECK(check_dev(d, "acc__device_host_alloc"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_host_alloc: out is NULL");
  *out = NULL;
  if (d->ops->host_alloc) return done(d, d->ops->host_alloc(d->ctx, bytes, out), "pinned alloc");
  *out = acc__malloc(bytes ? bytes : 1);
  if (!*out)
    return acc__error(ACC_ERR_NOMEM, "%s: cannot allocate %zu bytes of host staging memory",
                      d->name, bytes);
  return ACC_OK;
}

void acc__device_host_free(acc__device *d, void *p) {
  if (!p || check_dev(d, "acc__device_host_free") != ACC_OK) return;
  if (d->ops->host_free) (void)done(d, d->ops->host_free(d->ctx, p), "pinned free");
  else acc__free(p);
}

acc_result acc__device_is_device_ptr(acc__device *d, const void *p, int *yes) {
  ACC_CHECK(check_dev(d, "acc__device_is_device_ptr"));
  if (!yes) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_is_device_ptr: yes is NULL");
  *yes = 0;
  return done(d, d->ops->is_device_ptr(d->ctx, p, yes), "pointer query");
}

acc_result acc__dstream_create(acc__device *d, acc__dstream **out) {
  ACC_CHECK(check_dev(d, "acc__dstream_create"));
  void *s = NULL;
  ACC_CHECK(done(d, d->ops->stream_create(d->ctx, &s), "stream create"));
  *out = s;
  return ACC_OK;
}

acc_result acc__dstream_destroy(acc__device *d, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__dstream_destroy"));
  return s ? done(d, d->ops->stream_destroy(d->ctx, s), "stream destroy") : ACC_OK;
}

acc_result acc__dstream_sync(acc__device *d, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__dstream_sync"));
  return done(d, d->ops->stream_sync(d->ctx, s), "stream synchronize");
}

acc_result acc__devent_create(acc__device *d, acc__devent **out) {
  ACC_CHECK(check_dev(d, "acc__devent_create"));
  void *e = NULL;
  ACC_CHECK(done(d, d->ops->event_create(d->ctx, &e), "event create"));
  *out = e;
  return ACC_OK;
}

acc_result acc__devent_destroy(acc__device *d, acc__devent *e) {
  ACC_CHECK(check_dev(d, "acc__devent_destroy"));
  return e ? done(d, d->ops->event_destroy(d->ctx, e), "event destroy") : ACC_OK;
}

acc_result acc__devent_record(acc__device *d, acc__devent *e, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__devent_record"));
  if (!e) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__devent_record: event is NULL");
  return done(d, d->ops->event_record(d->ctx, e, s), "event record");
}

acc_result acc__dstream_wait(acc__device *d, acc__dstream *s, acc__devent *e) {
  ACC_CHECK(check_dev(d, "acc__dstream_wait"));
  if (!e) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__dstream_wait: event is NULL");
  return done(d, d->ops->stream_wait(d->ctx, s, e), "stream wait");
}

acc_result acc__devent_sync(acc__device *d, acc__devent *e) {
  ACC_CHECK(check_dev(d, "acc__devent_sync"));
  if (!e) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__devent_sync: event is NULL");
  return done(d, d->ops->event_sync(d->ctx, e), "event synchronize");
}

acc_result acc__devent_query(acc__device *d, acc__devent *e, int *is_done) {
  ACC_CHECK(check_dev(d, "acc__devent_query"));
  if (!e || !is_done)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__devent_query: event or done is NULL");
  return done(d, d->ops->event_query(d->ctx, e, is_done), "event query");
}

acc_result acc__device_copy(acc__device *d, void *dst, const void *src, size_t bytes,
                            acc__copy_kind kind, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_copy"));
  if (kind != ACC__COPY_H2D && kind != ACC__COPY_D2H && kind != ACC__COPY_D2D)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_copy: unknown copy kind %d",
                      (int)kind);
  return done(d, d->ops->copy(d->ctx, dst, src, bytes, (int)kind, s), "copy");
}

acc_result acc__device_memset(acc__device *d, void *dst, int value, size_t bytes,
                              acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_memset"));
  return done(d, d->ops->memset(d->ctx, dst, value, bytes, s), "memset");
}

acc_result acc__device_host_kernel(acc__device *d, void (*fn)(void *), void *arg) {
  ACC_CHECK(check_dev(d, "acc__device_host_kernel"));
  if (!fn) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_host_kernel: fn is NULL");
  if (!d->ops->host_kernel)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "%s: host code cannot reach this device's memory; run a device kernel on "
                      "acc_accelerator_stream instead, or copy with acc_accelerator_memcpy",
                      d->name);
  return done(d, d->ops->host_kernel(d->ctx, fn, arg), "host kernel");
}

size_t acc__device_queued(acc__device *d) {
  return d && d->kind == ACC__DEVICE_FAKE ? acc__fake_queued(d->ctx) : 0;
}

void acc__sgd_args_set(acc__sgd_args *a, double lr, double momentum, double dampening,
                       int nesterov, double weight_decay, int first) {
  a->wd = (float)weight_decay;
  a->mom = (float)momentum;
  a->damp1 = (float)(1.0 - dampening);
  a->neg_lr = (float)(-lr);
  a->has_momentum = momentum != 0.0;
  a->decay = weight_decay != 0.0;
  a->nesterov = nesterov != 0;
  a->first = first != 0;
}

void acc__adamw_args_set(acc__adamw_args *a, double lr, double beta1, double beta2, double eps,
                         double weight_decay, int64_t step) {
  const double bc1 = 1.0 - pow(beta1, (double)step);
  a->decay = (float)(1.0 - lr * weight_decay);
  a->w1 = (float)(1.0 - beta1);
  a->b2 = (float)beta2;
  a->c2 = (float)(1.0 - beta2);
  a->neg_step_size = (float)(-(lr / bc1));
  a->bc2s = (float)sqrt(1.0 - pow(beta2, (double)step));
  a->eps = (float)eps;
}

acc_result acc__device_sgd(acc__device *d, const acc__sgd_args *a, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_sgd"));
  if (!a) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_sgd: args is NULL");
  return done(d, d->ops->sgd(d->ctx, a, s), "sgd");
}

acc_result acc__device_adamw(acc__device *d, const acc__adamw_args *a, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_adamw"));
  if (!a) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_adamw: args is NULL");
  return done(d, d->ops->adamw(d->ctx, a, s), "adamw");
}

acc_result acc__device_unscale(acc__device *d, float *g, size_t n, float inv_scale,
                               int32_t *found_inf, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_unscale"));
  if (!found_inf)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_unscale: found_inf is NULL");
  return done(d, d->ops->unscale(d->ctx, g, n, inv_scale, found_inf, s), "unscale");
}

acc_result acc__device_norm_partials(acc__device *d, const float *g, size_t n, double *partials,
                                     acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_norm_partials"));
  return done(d, d->ops->norm_partials(d->ctx, g, n, partials, s), "norm partials");
}

acc_result acc__device_norm_finish(acc__device *d, const double *partials, size_t count,
                                   float max_norm, float *norm, float *coef, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_norm_finish"));
  if (!norm || !coef)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_norm_finish: norm or coef is NULL");
  if (!(max_norm >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_norm_finish: max_norm %g must be >= 0",
                      (double)max_norm);
  return done(d, d->ops->norm_finish(d->ctx, partials, count, max_norm, norm, coef, s),
              "norm finish");
}

acc_result acc__device_scale(acc__device *d, float *buf, size_t n, const float *coef,
                             acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_scale"));
  if (!coef) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_scale: coef is NULL");
  return done(d, d->ops->scale(d->ctx, buf, n, coef, s), "scale");
}

acc_result acc__device_cast(acc__device *d, uint16_t *dst, const float *src, size_t n,
                            acc_dtype dtype, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_cast"));
  if (dtype != ACC_BF16 && dtype != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc__device_cast: dtype %s is not supported (expected bf16 or f16)",
                      acc_dtype_name(dtype));
  return done(d, d->ops->cast(d->ctx, dst, src, n, (int)dtype, s), "cast");
}

acc_result acc__device_widen(acc__device *d, float *dst, const uint16_t *src, size_t n,
                             acc_dtype dtype, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_widen"));
  if (dtype != ACC_BF16 && dtype != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc__device_widen: dtype %s is not supported (expected bf16 or f16)",
                      acc_dtype_name(dtype));
  if (!d->ops->widen)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "acc__device_widen: the %s device has no widen operation",
                      acc__device_name(d));
  return done(d, d->ops->widen(d->ctx, dst, src, n, (int)dtype, s), "widen");
}

acc_result acc__device_clamp(acc__device *d, float *buf, size_t n, float clip, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_clamp"));
  if (!(clip >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__device_clamp: clip %g must be >= 0",
                      (double)clip);
  return done(d, d->ops->clamp(d->ctx, buf, n, clip, s), "clamp");
}

acc_result acc__device_axpy(acc__device *d, float *dst, const float *src, size_t n, float a,
                            acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_axpy"));
  if (!n) return ACC_OK;
  if (!d->ops->axpy)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "acc__device_axpy: the %s device has no axpy operation",
                      acc__device_name(d));
  return done(d, d->ops->axpy(d->ctx, dst, src, n, a, s), "axpy");
}

acc_result acc__device_round_f16(acc__device *d, float *buf, size_t n, acc__dstream *s) {
  ACC_CHECK(check_dev(d, "acc__device_round_f16"));
  return done(d, d->ops->round_f16(d->ctx, buf, n, s), "round_f16");
}

const acc__device_ops *acc__device_ops_of(const acc__device *d, void **ctx) {
  if (ctx) *ctx = d ? d->ctx : NULL;
  return d ? d->ops : NULL;
}

/* ---- the module loader ---------------------------------------------------------------------- */

/* This is the one place that dlopens a device module; it may later be replaced by the library's
 * generic module loader without changing its callers. */
static pthread_mutex_t module_mu = PTHREAD_MUTEX_INITIALIZER;
static const acc__device_ops *cuda_ops;
static char cuda_path[1024];

static const acc__device_ops *try_load(const char *path, const char *sym, char *why,
                                       size_t whylen) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, whylen, "%s", e ? e : "dlopen failed");
    return NULL;
  }
  acc__device_ops_fn fn;
  void *f = dlsym(h, sym);
  memcpy(&fn, &f, sizeof fn);
  if (!f) {
    snprintf(why, whylen,
             "%.900s: no symbol %s (not an accelerate-c device module of this version)", path,
             sym);
    dlclose(h);
    return NULL;
  }
  const acc__device_ops *ops = fn();
  if (!ops || ops->abi_version != ACC__DEVICE_ABI_VERSION || ops->size < sizeof(acc__device_ops)) {
    snprintf(why, whylen,
             "%.900s: device module ABI version %u (table of %u bytes), expected version %u (%zu "
             "bytes): rebuild the module with this library",
             path, ops ? ops->abi_version : 0u, ops ? ops->size : 0u, ACC__DEVICE_ABI_VERSION,
             sizeof(acc__device_ops));
    dlclose(h);
    return NULL;
  }
  return ops; /* the handle stays open for the life of the process */
}

acc_result acc__device_module_load(const char *name, const acc__device_ops **out) {
  *out = NULL;
  if (strcmp(name, "cuda") != 0)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "no device module named \"%s\" (known: cuda)", name);
  pthread_mutex_lock(&module_mu);
  if (cuda_ops) {
    *out = cuda_ops;
    pthread_mutex_unlock(&module_mu);
    return ACC_OK;
  }
  const char *file = "libaccelerate-cuda.so";
  const char *sym = ACC__DEVICE_OPS_SYMBOL("cuda");
  char cand[5][1024], not_found[1100] = "";
  int nc = 0;
  const char *env = acc__env_str("ACCELERATE_CUDA_MODULE");
  if (env && *env) {
    snprintf(cand[nc++], sizeof cand[0], "%s", env);
  } else {
    /* the same search as every other module (src/backend/module.c), then the system's library path */
    if (acc__module_find("cuda", "then the system library path", cand[nc], sizeof cand[0]) == ACC_OK)
      nc++;
    else
      snprintf(not_found, sizeof not_found, "%.1000s; ", acc_last_error());
    snprintf(cand[nc++], sizeof cand[0], "%s", file);
  }
  char msg[4096];
  size_t len = (size_t)snprintf(msg, sizeof msg, "%s", not_found);
  for (int i = 0; i < nc; i++) {
    char why[1024];
    const acc__device_ops *ops = try_load(cand[i], sym, why, sizeof why);
    if (ops) {
      cuda_ops = ops;
      char *real = realpath(cand[i], NULL); /* NULL for a bare name found by the loader */
      snprintf(cuda_path, sizeof cuda_path, "%.1000s", real ? real : cand[i]);
      free(real);
      *out = ops;
      pthread_mutex_unlock(&module_mu);
      return ACC_OK;
    }
    int k = snprintf(msg + len, sizeof msg - len, "%s%s", i ? "; " : "", why);
    if (k > 0) len += (size_t)k < sizeof msg - len ? (size_t)k : sizeof msg - len - 1;
  }
  pthread_mutex_unlock(&module_mu);
#ifdef ACC_HAVE_CUDA_MODULE
  const char *built = env && *env ? " named by ACCELERATE_CUDA_MODULE" : "";
#else
  const char *built = " (this build of accelerate-c has none: ACC_WITH_CUDA=OFF, or no nvcc when "
                      "it was configured)";
#endif
  return acc__error(ACC_ERR_NOT_SUPPORTED, "cannot load the CUDA module%s: %s", built, msg);
}

acc_result acc__device_cuda_probe(acc__device_probe_info *info) {
  memset(info, 0, sizeof *info);
#ifndef ACC_HAVE_CUDA_MODULE
  const char *env = acc__env_str("ACCELERATE_CUDA_MODULE");
  if (!env || !*env)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "no CUDA module: accelerate-c was built without CUDA (ACC_WITH_CUDA=OFF, or "
                      "no nvcc when it was configured)");
#endif
  const acc__device_ops *ops;
  ACC_CHECK(acc__device_module_load("cuda", &ops));
  pthread_mutex_lock(&module_mu);
  snprintf(info->module_path, sizeof info->module_path, "%s", cuda_path);
  pthread_mutex_unlock(&module_mu);
  int rc = ops->probe(info);
  if (rc != ACC_OK) {
    const char *m = ops->last_error();
    return acc__error((acc_result)rc, "%s", m && *m ? m : "the CUDA module's probe failed");
  }
  if (info->device_count <= 0)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "no CUDA GPU: the driver reports 0 devices");
  return ACC_OK;
}
