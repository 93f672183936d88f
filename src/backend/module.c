/* The module loader (see module.h for the host/module contract). */
#include "backend/module.h"

#include "backend/store.h"
#include "core/env.h"

#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ACC_MODULE_INSTALL_DIR
#define ACC_MODULE_INSTALL_DIR "/usr/local/lib/accelerate"
#endif
#ifndef ACC_INSTALL_LIBDIR
#define ACC_INSTALL_LIBDIR "lib"
#endif

#ifdef ACC_MPI_BUILTIN
/* The MPI backend linked into the library itself (ACC_MPI_MODULE=OFF). */
static const acc__module_ops mpi_builtin = {ACC__MODULE_ABI_VERSION, ACC_VERSION_STRING,
                                            ACC_MPI_BUILTIN, acc__backend_mpi_create, NULL};
#endif

static const acc__module_host host = {
    ACC__MODULE_ABI_VERSION, ACC_VERSION_STRING, acc__verror, acc_last_error, acc__malloc,
    acc__calloc, acc__realloc, acc__free, acc__now, acc__reduce_inplace, acc__env_int,
    acc__call_rec_site, acc__call_rec_describe, acc__hang_report_env, acc__report_line,
    acc__store_set, acc__store_get, acc__store_local_addr, acc__mismatch_error,
};

#define MAX_MODULES 4
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char name[32];
  const acc__module_ops *ops;
} loaded[MAX_MODULES];

/* The directory holding the object this code is linked into: libaccelerate.so, or the program
 * for the static library. "" when unknown. */
static void self_dir(char *dir, size_t n) {
  Dl_info info;
  char path[PATH_MAX] = "";
  if (dladdr((void *)&acc__module_load, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    if (!realpath(info.dli_fname, path)) snprintf(path, sizeof path, "%s", info.dli_fname);
  } else {
    ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
    path[len > 0 ? len : 0] = '\0';
  }
  char *slash = strrchr(path, '/');
  if (slash) *slash = '\0';
  snprintf(dir, n, "%s", slash ? path : "");
}

/* Opens path and checks its entry point and tables. ACC_OK with *out set, or an error. */
/* The dynamic section of this program; absent (NULL) in a fully static (-static, non-PIE) one. */
extern ElfW(Dyn) _DYNAMIC[] __attribute__((weak));

static acc_result open_module(const char *path, const char *name, const acc__module_ops **out) {
  if (!_DYNAMIC) /* glibc's dlopen in a static program loads a second libc: it crashes */
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "cannot load the %s module %s: this program is linked fully statically (-static), and a "
                      "module needs the dynamic loader; link the program without -static (the static library "
                      "libaccelerate.a is fine), or use a backend without a module (shm, on one machine)", name, path);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return acc__error(ACC_ERR_NOT_SUPPORTED, "cannot load the %s module %s: %s", name, path,
                      why ? why : "unknown dlopen error");
  }
  dlerror();
  void *sym = dlsym(h, ACC__MODULE_ENTRY_SYMBOL);
  const char *why = dlerror();
  if (!sym || why) {
    acc_result rc = acc__error(ACC_ERR_NOT_SUPPORTED, "%s is not an accelerate module (no %s: %s)",
                               path, ACC__MODULE_ENTRY_SYMBOL, why ? why : "NULL symbol");
    dlclose(h);
    return rc;
  }
  acc__module_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry); /* object pointer -> function pointer, as POSIX allows */
  const acc__module_ops *ops = entry(&host);
  if (!ops || ops->abi_version != ACC__MODULE_ABI_VERSION || !ops->library_version ||
      strcmp(ops->library_version, ACC_VERSION_STRING) != 0 || !ops->name ||
      strcmp(ops->name, name) != 0) {
    acc_result rc = acc__error(
        ACC_ERR_NOT_SUPPORTED,
        "the %s module %s does not match this library: module ABI %u, version %s, name %s; "
        "library ABI %u, version %s (install the module built with this library)",
        name, path, ops ? ops->abi_version : 0u,
        ops && ops->library_version ? ops->library_version : "?",
        ops && ops->name ? ops->name : "?", ACC__MODULE_ABI_VERSION, ACC_VERSION_STRING);
    /* not dlclose'd: the entry may have started its runtime */
    return rc;
  }
  *out = ops; /* the handle stays open for the life of the process */
  return ACC_OK;
}

#define MAX_DIRS 6
typedef struct dir_list {
  char dir[MAX_DIRS][PATH_MAX];
  int n;
} dir_list;

static void add_dir(dir_list *l, const char *a, const char *b) {
  if (l->n == MAX_DIRS) return;
  int len = snprintf(l->dir[l->n], PATH_MAX, "%s%s", a, b);
  if (len > 0 && len < PATH_MAX) l->n++; /* a path too long for the system is skipped */
}

/* The build tree this library was compiled in, when the code runs from it: the object holding it
 * (libaccelerate.so, or a program linked with libaccelerate.a: an example, a test, a benchmark)
 * lies inside that tree. Then the modules of the same build are the ones to load. An installed
 * library (outside the tree) never looks there: it finds the installed modules. */
static int in_build_tree(const char *self, char *build, size_t cap) {
#ifdef ACC_MODULE_BUILD_DIR
  char real[PATH_MAX];
  if (!self[0] || !realpath(ACC_MODULE_BUILD_DIR, real)) return 0;
  size_t n = strlen(real);
  if (strncmp(self, real, n) != 0 || (self[n] != '/' && self[n] != '\0')) return 0;
  snprintf(build, cap, "%s", real);
  return 1;
#else
  (void)self, (void)build, (void)cap;
  return 0;
#endif
}

acc_result acc__module_find(const char *name, const char *hint, char *path, size_t cap) {
  char file[64];
  snprintf(file, sizeof file, "libaccelerate-%s.so", name);
  dir_list dirs = {.n = 0};
  const char *env = acc__env_str("ACCELERATE_MODULE_DIR");
  if (env && env[0]) {
    add_dir(&dirs, env, "");
  } else {
    char self[PATH_MAX], build[PATH_MAX];
    self_dir(self, sizeof self);
    if (in_build_tree(self, build, sizeof build)) add_dir(&dirs, build, "");
    if (self[0]) {
      add_dir(&dirs, self, "/accelerate");
      add_dir(&dirs, self, "");
      add_dir(&dirs, self, "/../" ACC_INSTALL_LIBDIR "/accelerate");
    }
    add_dir(&dirs, ACC_MODULE_INSTALL_DIR, "");
  }
  char tried[2048] = "";
  size_t used = 0;
  for (int i = 0; i < dirs.n; i++) {
    int len = snprintf(path, cap, "%s/%s", dirs.dir[i], file);
    if (len > 0 && (size_t)len < cap && access(path, F_OK) == 0) return ACC_OK;
    int n = snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", path);
    if (n > 0 && (size_t)n < sizeof tried - used) used += (size_t)n;
  }
  if (cap) path[0] = '\0';
  return acc__error(ACC_ERR_NOT_SUPPORTED,
                    "the %s module %s is not installed (looked for %s%s): %s",
                    name, file, tried, env && env[0] ? ", from ACCELERATE_MODULE_DIR" : "", hint);
}

static acc_result find_and_open(const char *name, const char *hint, const acc__module_ops **out) {
  char path[PATH_MAX + 64];
  ACC_CHECK(acc__module_find(name, hint, path, sizeof path));
  return open_module(path, name, out);
}

acc_result acc__module_load(const char *name, const char *hint, const acc__module_ops **out) {
  if (!name || strlen(name) >= sizeof loaded[0].name || !out)
    return acc__error(ACC_ERR_INTERNAL, "acc__module_load: bad module name");
#ifdef ACC_MPI_BUILTIN
  if (strcmp(name, ACC_MPI_BUILTIN) == 0) { /* "mpi-openmpi" or "mpi-mpich" */
    *out = &mpi_builtin;
    return ACC_OK;
  }
  if (strncmp(name, "mpi-", 4) == 0)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "this library has the MPI backend built in (%s), not %s: %s", ACC_MPI_BUILTIN,
                      name, hint);
#endif
  pthread_mutex_lock(&lock);
  acc_result rc = ACC_OK;
  int i = 0;
  for (; i < MAX_MODULES && loaded[i].ops; i++)
    if (strcmp(loaded[i].name, name) == 0) {
      *out = loaded[i].ops;
      goto done;
    }
  if (i == MAX_MODULES) {
    rc = acc__error(ACC_ERR_INTERNAL, "too many modules loaded (at most %d)", MAX_MODULES);
    goto done;
  }
  rc = find_and_open(name, hint, out);
  if (rc == ACC_OK) {
    snprintf(loaded[i].name, sizeof loaded[i].name, "%s", name);
    loaded[i].ops = *out;
  }
done:
  pthread_mutex_unlock(&lock);
  return rc;
}
