/* The device-collective watchdog: no wait on a device collective (NCCL) may hang.
 *
 * Why a thread and not a bounded poll loop in the waiting call: the NCCL gradient path queues
 * its all-reduces on a communication stream and never waits for them itself; the host meets
 * them later in any synchronization of the compute stream (the fp16 flag, a clip norm asked for,
 * a checkpoint, acc_accelerator_synchronize, or the program's own cudaStreamSynchronize), and
 * those waits cannot all go through one polling function. So one thread per communicator
 * watches the operations in flight: it polls each one's completion (an event recorded after
 * it), the communicator's asynchronous error, the peers' liveness (the CPU backend's dead-peer
 * check) and the deadline (the collective timeout); on a failure it aborts the communicator,
 * which ends the operations in flight, so every host wait on them returns, and records the
 * failure. The next training call of the program (acc__watchdog_check) returns it and marks the
 * process group broken, as a failed CPU collective does.
 *
 * The watched communicator is an ops table, so tests drive every path with a stub (no GPU). */
#ifndef ACC_DEVICE_WATCHDOG_H
#define ACC_DEVICE_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

typedef struct acc__watchdog acc__watchdog;

typedef struct acc__wd_ops {
  /* Whether the operation behind token has completed: 1 done, 0 in flight, -1 an error (a
   * one-line message in msg). */
  int (*query)(void *ctx, void *token, char *msg, size_t cap);
  /* 1 (and a message) when the communicator reports an asynchronous error; 0 otherwise. May be
   * NULL. */
  int (*async_error)(void *ctx, char *msg, size_t cap);
  /* Aborts the communicator: the operations in flight end. Called once, under the watchdog's
   * lock (so never while the program issues an operation). */
  void (*abort)(void *ctx);
  /* Optional: called once by the watchdog's thread before its first poll (CUDA: make the
   * communicator's GPU current in that thread). */
  void (*thread_start)(void *ctx);
} acc__wd_ops;

/* Peer liveness: 1 when a peer is gone, with its rank, pid (0: unknown) and how ("died (killed
 * or crashed)", "left the process group"); 0 when every peer is alive. */
typedef int (*acc__wd_peer_fn)(void *pctx, int *rank, int *pid, char *how, size_t cap);

typedef struct acc__wd_config {
  const acc__wd_ops *ops;
  void *ctx;
  acc__wd_peer_fn peer; /* NULL: no liveness check (the deadline still holds) */
  void *pctx;
  acc_state *st;    /* marked broken by acc__watchdog_check on failure (NULL: none) */
  const char *name; /* the communicator's kind in messages, e.g. "NCCL" */
  int rank, nranks;
  double timeout_s;     /* an operation fails this long after it was issued */
  double poll_s;        /* between completion checks (0: 0.001 s) */
  double peer_period_s; /* between liveness checks (0: 0.1 s) */
  double grace_s;       /* a gone peer fails an operation still in flight this long after it
                           was first seen gone (0: 1 s): the peer may have finished its part */
} acc__wd_config;

acc_result acc__watchdog_start(acc__watchdog **out, const acc__wd_config *cfg);
/* Stops the thread and frees (operations still in flight are no longer watched). */
void acc__watchdog_stop(acc__watchdog *w);

/* Issuing an operation: begin takes the lock (ACC_OK), or returns the recorded failure; then
 * the caller issues it and either pushes it (the token it will be queried with; op and detail
 * name it in messages, e.g. "all_reduce", "gradient bucket 2"; *seq: its number, from 1) or
 * cancels (issuing failed). Both release the lock. */
acc_result acc__watchdog_begin(acc__watchdog *w);
acc_result acc__watchdog_push(acc__watchdog *w, void *token, const char *op, const char *detail,
                              uint64_t *seq);
void acc__watchdog_cancel(acc__watchdog *w);

/* ACC_OK, or the failure (its message set again in the calling thread, the group marked
 * broken). Cheap: one lock. */
acc_result acc__watchdog_check(acc__watchdog *w);
/* Waits until operation seq (and every earlier one) completed, or the watchdog failed. Bounded
 * by the watchdog's own deadline. */
acc_result acc__watchdog_wait(acc__watchdog *w, uint64_t seq);
/* Operations pushed and not yet seen complete. */
size_t acc__watchdog_in_flight(acc__watchdog *w);

/* A bounded wait for a local device operation (the host-staged path's waits): polls query(ctx)
 * (1 done, 0 not yet, -1 error with acc_last_error set) until done, an error (ACC_ERR_... of the
 * query: returned as is) or timeout_s (ACC_ERR_TIMEOUT, no message: the caller names what did
 * not finish). Spins with sched_yield for the first millisecond, then naps 20 us. */
acc_result acc__wd_poll(int (*query)(void *ctx), void *ctx, double timeout_s);

#endif
