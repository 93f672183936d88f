/* Collectives in flight while the caller computes (comm_async.c). Internal: for the library's
 * layers above comm (FSDP's prefetch); docs/ARCHITECTURE.md, "The comm worker thread".
 *
 * A submitted collective runs on a worker thread of the state (started on the first submit,
 * joined by acc_state_destroy), in submission order, with everything the synchronous call gives:
 * argument checks, the call descriptor (its origin, call site and file/line are the SUBMITTING
 * thread's, captured at submit, so a mismatch names the line that asked for it), tag comparison,
 * hang reports, the collective timeout, broken-group handling. Device buffers are staged on the
 * submitting thread (the send buffer copied to host memory at submit, the result copied back at
 * wait): the worker only touches host memory and never calls the device layer.
 *
 * Order: every synchronous collective on the state first waits until no submitted one is queued
 * or running (comm.c's enter, comm_group.c's genter), so that no two threads are ever inside the
 * backend at once and every process issues its collectives in the program's order.
 *
 * Where a backend may not be called from another thread (an MPI whose provided thread level is
 * below MPI_THREAD_SERIALIZED), and with one process, the collective runs at submit time on the
 * calling thread; wait then only hands its result back. */
#ifndef ACC_COMM_ASYNC_H
#define ACC_COMM_ASYNC_H

#include <stddef.h>

#include "core/internal.h"

typedef struct acc__comm_job acc__comm_job;

/* The collectives of group.h, submitted: *out is the handle (NULL only when this returns an error:
 * out of memory, or a device staging failure, with the sentence set). Errors of the collective
 * itself come from acc__comm_async_wait. The buffers must stay untouched until the wait. */
acc_result acc__comm_async_all_gather_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc__comm_job **out, const char *file, int line);
acc_result acc__comm_async_reduce_scatter_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                             acc_dtype dtype, acc_op op, acc__comm_job **out, const char *file,
                                             int line);
acc_result acc__comm_async_all_reduce_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op, acc__comm_job **out, const char *file, int line);

#define acc__comm_async_all_gather(st, g, send, recv, count, dtype, out) \
  acc__comm_async_all_gather_at((st), (g), (send), (recv), (count), (dtype), (out), __FILE__, __LINE__)
#define acc__comm_async_reduce_scatter(st, g, send, recv, count, dtype, op, out) \
  acc__comm_async_reduce_scatter_at((st), (g), (send), (recv), (count), (dtype), (op), (out), __FILE__, __LINE__)
#define acc__comm_async_all_reduce(st, g, send, recv, count, dtype, op, out) \
  acc__comm_async_all_reduce_at((st), (g), (send), (recv), (count), (dtype), (op), (out), __FILE__, __LINE__)

/* Waits until the collective of h ended, copies a staged result back to the device, frees h and
 * returns the collective's result; its error sentence is set on the calling thread. Every handle
 * is waited exactly once, on the thread that submitted it; also after acc_state_destroy (which
 * runs every queued job before the worker ends). NULL: ACC_OK. */
acc_result acc__comm_async_wait(acc__comm_job *h);

/* 1 once the collective of h has ended on the worker (without waiting for it, and without
 * consuming h), 0 when it has not within timeout_s seconds. For tests: a caller that sees 1
 * before acc__comm_async_wait saw the collective run while it was not waiting. */
int acc__comm_async_finished(acc__comm_job *h, double timeout_s);

/* 1 when submitted collectives on st run on the worker thread, 0 when they run at submit time
 * (one process, or a backend that may only be called from its own thread). */
int acc__comm_async_overlaps(acc_state *st);

/* Waits until no submitted collective is queued or running (comm.c and comm_group.c call it first
 * in every synchronous collective; a no-op on the worker thread and before any submit). */
void acc__comm_async_drain(acc_state *st);

#endif
