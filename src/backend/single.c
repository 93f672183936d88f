/* The one-process backend: every collective is a copy. */
#include <string.h>

#include "backend/backend.h"

static acc_result single_barrier(acc__backend *be) {
  (void)be;
  return ACC_OK;
}

static acc_result single_broadcast(acc__backend *be, void *buf, size_t nbytes, int root) {
  (void)be, (void)buf, (void)nbytes, (void)root;
  return ACC_OK;
}

static acc_result single_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                                    acc_dtype dtype, acc_op op) {
  (void)be, (void)op;
  if (send != recv) memmove(recv, send, count * acc_dtype_size(dtype));
  return ACC_OK;
}

static acc_result single_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                                acc_dtype dtype, acc_op op, int root) {
  (void)root;
  return single_all_reduce(be, send, recv, count, dtype, op);
}

static acc_result single_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes) {
  (void)be;
  if (send != recv) memmove(recv, send, nbytes);
  return ACC_OK;
}

static acc_result single_gather(acc__backend *be, const void *send, void *recv, size_t nbytes,
                                int root) {
  (void)root;
  return single_all_gather(be, send, recv, nbytes);
}

static acc_result single_all_gather_v(acc__backend *be, const void *send, void *recv,
                                      const size_t *sizes) {
  (void)be;
  if (sizes[0] && send != recv) memmove(recv, send, sizes[0]);
  return ACC_OK;
}

static void single_destroy(acc__backend *be) { acc__free(be); }

static const acc__backend_ops single_ops = {
    "single",      single_barrier, single_broadcast,    single_all_reduce, single_reduce,
    single_all_gather, single_gather, single_all_gather_v, single_destroy,
    NULL, 1, /* one process: nothing to compare */
    single_all_reduce, /* reduce_scatter of one process: a copy of count elements */
    NULL,              /* all_reduce_scaled_f32: comm.c multiplies */
    NULL,              /* alloc_shared: nothing to share */
    NULL,
    NULL,              /* subgroup: comm.c answers for one machine */
    NULL,              /* all_gather_strided: only hierarchical's leaders (gloo) */
};

acc_result acc__backend_single_create(acc__backend **out) {
  acc__backend *be = acc__calloc(1, sizeof *be);
  if (!be) return ACC_ERR_NOMEM;
  be->ops = &single_ops;
  be->rank = 0;
  be->size = 1;
  *out = be;
  return ACC_OK;
}
