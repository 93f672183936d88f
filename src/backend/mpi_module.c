/* The MPI backend as a module (libaccelerate-mpi-<flavor>.so): the library services mpi.c calls, forwarded
 * to the host table the library hands over (see src/backend/module.h; the entry point that
 * receives it is mpi_entry.c). This file is compiled only into the module; when the MPI backend is linked
 * into the library (ACC_MPI_MODULE=OFF) mpi.c calls the library's own functions.
 * A new library function used by mpi.c needs a field in acc__module_host and a forwarder here. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend/module.h"

static const acc__module_host *H;

acc_result acc__verror(acc_result rc, const char *fmt, va_list ap) {
  return H->verror(rc, fmt, ap);
}

acc_result acc__error(acc_result rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  H->verror(rc, fmt, ap);
  va_end(ap);
  return rc;
}

acc_result acc__error_context(acc_result rc, const char *fmt, ...) {
  char prev[1024], head[1024];
  snprintf(prev, sizeof prev, "%s", H->last_error());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  return acc__error(rc, "%s: %s", head, prev);
}

const char *acc_last_error(void) { return H->last_error(); }
void acc__call_rec_site(acc__call_rec *r, const char *file) { H->call_rec_site(r, file); }
void acc__call_rec_describe(char *buf, size_t cap, const acc__call_rec *r) {
  H->call_rec_describe(buf, cap, r);
}
acc_result acc__hang_report_env(double *seconds) { return H->hang_report_env(seconds); }
void acc__report_line(const char *line) { H->report_line(line); }
void *acc__malloc(size_t n) { return H->malloc(n); }
void *acc__calloc(size_t count, size_t size) { return H->calloc(count, size); }
void *acc__realloc(void *p, size_t n) { return H->realloc(p, n); }
void acc__free(void *p) { H->free(p); }
double acc__now(void) { return H->now(); }
void acc__reduce_inplace(void *dst, const void *src, size_t count, acc_dtype dtype, acc_op op) {
  H->reduce_inplace(dst, src, count, dtype, op);
}
acc_result acc__env_int(const char *name, long *out, int *was_set) {
  return H->env_int(name, out, was_set);
}

size_t acc_dtype_size(acc_dtype dtype) {
  switch (dtype) {
    case ACC_F32: return 4;
    case ACC_F64: return 8;
    case ACC_F16: return 2;
    case ACC_BF16: return 2;
    case ACC_I32: return 4;
    case ACC_I64: return 8;
    case ACC_U8: return 1;
    case ACC_U64: return 8;
    default: return 0;
  }
}

void acc__mpi_module_set_host(const acc__module_host *host) { H = host; }
