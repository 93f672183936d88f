/* Device buffers in the collectives, without the collectives knowing devices. Not API.
 *
 * Every collective of comm.c that takes program buffers passes them through
 * acc__comm_stage_begin / _end. Until the device layer installs its staging (src/device/devio.c,
 * when the first accelerator that trains off the host opens its device), both only hand the
 * buffers through: one atomic load per call. Installed, device memory is copied to host buffers
 * for the CPU backend and the result copied back (devio.h says how). */
#ifndef ACC_COMM_STAGE_H
#define ACC_COMM_STAGE_H

#include <stddef.h>

#include "core/internal.h"

/* A pair of buffers of one collective: a (read: send) and b (written: recv). Either may be device
 * memory; when both are device memory and overlap (in-place forms) one host buffer covers both.
 * After acc__devio_begin, io->a and io->b are host pointers for the collective. */
typedef struct acc__devio {
  const void *a;
  void *b;
  /* staging (internal) */
  struct acc__devctx *da, *db; /* the devices of a and b (device/devctx.h) */
  const void *dev_a;
  void *dev_b;
  void *host_a, *host_b;
  size_t a_bytes, b_bytes;
  int b_in_a; /* b lies in a's host buffer */
} acc__devio;

typedef struct acc__stage_ops {
  acc_result (*begin)(acc__devio *io, const void *a, size_t a_bytes, int copy_a, void *b,
                      size_t b_bytes, int copy_b_in);
  acc_result (*end)(acc__devio *io, acc_result rc, int copy_b_out);
} acc__stage_ops;

/* Installs the staging (a static table; later calls replace it). */
void acc__comm_set_stage_ops(const acc__stage_ops *ops);

/* On this thread, the hook is bypassed from now on (on != 0): the comm worker thread, whose
 * callers staged device buffers on their own thread (comm/async.h). */
void acc__comm_stage_host_only(int on);

/* After begin, io->a and io->b are the pointers the backend reads and writes. */
acc_result acc__comm_stage_begin(acc__devio *io, const void *a, size_t a_bytes, int copy_a, void *b,
                                 size_t b_bytes, int copy_b_in);
acc_result acc__comm_stage_end(acc__devio *io, acc_result rc, int copy_b_out);

#endif
