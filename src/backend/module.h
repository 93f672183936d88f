/* Optional parts of the library that live in their own shared object (a "module") and are
 * loaded with dlopen only when a program asks for them, so that libaccelerate itself never
 * depends on their libraries. Today: the MPI backend, one module per MPI implementation
 * (libaccelerate-mpi-openmpi.so, libaccelerate-mpi-mpich.so; state/mpi_pick.c picks one). The same loader is meant for a later CUDA/NCCL module.
 *
 * The contract between the library (the host) and a module:
 *   - A module exports exactly one symbol, ACC__MODULE_ENTRY_SYMBOL, a function of type
 *     acc__module_entry_fn. The loader calls it once with the host's service table and gets the
 *     module's ops table back (or NULL when the module refuses the host).
 *   - Both tables start with abi_version and the library version string. The loader accepts a
 *     module only when both equal its own: modules see internal structures (acc__backend,
 *     acc__proc_info), so a module is only compatible with the library build it came from.
 *   - A module does not link libaccelerate. Everything it needs from the library (errors,
 *     allocation, clock, reductions) comes through acc__module_host, so a module works the same
 *     under the shared library and under the static one, and the thread-local error message is
 *     the library's own. Modules are opened RTLD_NOW | RTLD_LOCAL and never closed (the MPI
 *     runtime cannot be unloaded).
 * Bump ACC__MODULE_ABI_VERSION whenever either table, acc__backend or acc__proc_info changes. */
#ifndef ACC_MODULE_H
#define ACC_MODULE_H

#include <stdarg.h>

#include "backend/backend.h"
#include "backend/collcheck.h"

#define ACC__MODULE_ABI_VERSION 6u
#define ACC__MODULE_ENTRY_SYMBOL "acc_module_entry_v1"

/* Services the library gives a module. */
typedef struct acc__module_host {
  uint32_t abi_version; /* ACC__MODULE_ABI_VERSION */
  const char *library_version; /* ACC_VERSION_STRING */
  acc_result (*verror)(acc_result rc, const char *fmt, va_list ap);
  const char *(*last_error)(void);
  void *(*malloc)(size_t n);
  void *(*calloc)(size_t count, size_t size);
  void *(*realloc)(void *p, size_t n);
  void (*free)(void *p);
  double (*now)(void);
  void (*reduce_inplace)(void *dst, const void *src, size_t count, acc_dtype dtype, acc_op op);
  acc_result (*env_int)(const char *name, long *out, int *was_set);
  /* 2: call descriptors and hang reports (src/backend/collcheck.h) */
  void (*call_rec_site)(acc__call_rec *r, const char *file);
  void (*call_rec_describe)(char *buf, size_t cap, const acc__call_rec *r);
  acc_result (*hang_report_env)(double *seconds);
  void (*report_line)(const char *line);
  /* 3: the rendezvous store (src/backend/store.h), for modules that bootstrap through it */
  acc_result (*store_set)(struct acc__store *s, const char *key, const void *val, size_t n);
  acc_result (*store_get)(struct acc__store *s, const char *key, void **val, size_t *n,
                          double timeout_s);
  int (*store_local_addr)(struct acc__store *s, char *buf, size_t cap);
  /* 4: the mismatch error naming every process's call (collcheck.h), for modules that compare
   * the call tags themselves (checks_tags 1: gloo) */
  acc_result (*mismatch_error)(const char *what, int me, const acc__call_rec *mine,
                               const acc__call_rec *recs, int n, int rank_base);
} acc__module_host;

/* What a module offers. Fields a module does not provide are NULL. */
typedef struct acc__module_ops {
  uint32_t abi_version; /* ACC__MODULE_ABI_VERSION */
  const char *library_version; /* ACC_VERSION_STRING the module was built with */
  const char *name;            /* "mpi-openmpi", "mpi-mpich" */
  /* A communication backend (the MPI module). */
  acc_result (*backend_create)(acc__backend **out, const acc__proc_info *info);
  /* A backend over a group of the job (the gloo module: the leaders of the hierarchical
   * backend), its bootstrap keys under prefix. */
  acc_result (*backend_create_group)(acc__backend **out, const acc__proc_info *info,
                                     const char *prefix);
} acc__module_ops;

typedef const acc__module_ops *(*acc__module_entry_fn)(const acc__module_host *host);

/* Loads the module called name ("mpi-mpich" -> libaccelerate-mpi-mpich.so) once per process and returns its
 * ops table. Search order: the directory in ACCELERATE_MODULE_DIR when set (and only there);
 * otherwise the build directory the library was compiled in when the code runs from inside that
 * tree (a program of the build linked with libaccelerate.a, or the build's libaccelerate.so),
 * then <dir>/accelerate/ and <dir>/ where <dir> holds the loaded libaccelerate (or the program,
 * for the static library), then <dir>/../<libdir>/accelerate/, then the install directory. Errors (ACC_ERR_NOT_SUPPORTED) name every path tried, dlerror()'s text, and
 * `hint` (what to install). Thread-safe. */
acc_result acc__module_load(const char *name, const char *hint, const acc__module_ops **out);

/* Where acc__module_load looks for libaccelerate-<name>.so, for modules with an entry protocol of
 * their own (the CUDA device module, src/device/device.c): writes the path of the first file
 * found, or fails like acc__module_load naming every path tried and `hint`. Thread-safe. */
acc_result acc__module_find(const char *name, const char *hint, char *path, size_t cap);

#endif
