/* The staging hook of the collectives (comm/stage.h). */
#include <stdatomic.h>
#include <string.h>

#include "comm/stage.h"

static _Atomic(const acc__stage_ops *) stage_ops;
static _Thread_local int host_only; /* the comm worker: its callers staged the buffers */

void acc__comm_stage_host_only(int on) { host_only = on; }

void acc__comm_set_stage_ops(const acc__stage_ops *ops) {
  atomic_store_explicit(&stage_ops, ops, memory_order_release);
}

acc_result acc__comm_stage_begin(acc__devio *io, const void *a, size_t a_bytes, int copy_a, void *b,
                                 size_t b_bytes, int copy_b_in) {
  const acc__stage_ops *ops = host_only ? NULL : atomic_load_explicit(&stage_ops, memory_order_acquire);
  if (ops) return ops->begin(io, a, a_bytes, copy_a, b, b_bytes, copy_b_in);
  memset(io, 0, sizeof *io);
  io->a = a;
  io->b = b;
  return ACC_OK;
}

acc_result acc__comm_stage_end(acc__devio *io, acc_result rc, int copy_b_out) {
  const acc__stage_ops *ops = host_only ? NULL : atomic_load_explicit(&stage_ops, memory_order_acquire);
  return ops ? ops->end(io, rc, copy_b_out) : rc;
}
