/* A device communicator over the job (src/device/dcomm.c): NCCL's all-gather, reduce-scatter and
 * all-reduce on device memory for FSDP, on the CUDA module built with NCCL or on the fake device's
 * NCCL (fake_nccl.c), with the library's checks kept: every call first compares its descriptor
 * (operation, dtype, count, the caller's origin) with every process's over the CPU backend (a
 * mismatch or a dead peer is reported there, before NCCL), and waits for its completion bounded
 * by the job's collective timeout (NCCL's communicator aborted on timeout or asynchronous error;
 * the job marked broken). Not API. */
#ifndef ACC_DEVICE_DCOMM_H
#define ACC_DEVICE_DCOMM_H

#include "accelerate/state.h"
#include "device/device.h"

typedef struct acc__dcomm acc__dcomm;

/* Collective (every process, same order). mode 0 (auto): a communicator when the job has more
 * than one process, every process's device has NCCL (CUDA module with NCCL, or the fake device)
 * and no two processes share a GPU; else *out = NULL (the caller host-stages). mode 1 (always):
 * an error instead of NULL (one process included). mode 2 (never): NULL. */
acc_result acc__dcomm_create(acc_state *st, acc__device *dev, int mode, acc__dcomm **out);
void acc__dcomm_destroy(acc__dcomm *c);

/* On stream s, after the work queued on it; complete (the buffers ready on s) when they return.
 * all_gather: recv (count x N) = every process's send (count) in rank order (in place when send
 * is this process's block of recv). reduce_scatter: recv (count) = op over the processes of this
 * process's block of send (count x N) (in place when recv is that block). The origin the caller
 * named with acc__comm_origin goes with the descriptor check (the CPU backend's tag exchange
 * compares it with the other processes'). */
acc_result acc__dcomm_all_gather(acc__dcomm *c, const void *send, void *recv, size_t count, acc_dtype dtype,
                                 acc__dstream *s);
acc_result acc__dcomm_reduce_scatter(acc__dcomm *c, const void *send, void *recv, size_t count, acc_dtype dtype,
                                     acc_op op, acc__dstream *s);
acc_result acc__dcomm_all_reduce(acc__dcomm *c, const void *send, void *recv, size_t count, acc_dtype dtype,
                                 acc_op op, acc__dstream *s);

/* Binds the job to the calling thread for the fake device's nccl_init (fake_nccl.c), until
 * acc__dcomm_bind(NULL, NULL); a no-op for the other devices. For callers that drive the ops
 * table's NCCL entries themselves (the accelerator's gradient averaging). */
void acc__dcomm_bind(acc_state *st, acc__device *dev);

/* The device module's last error (its last_error, else the library's), or dflt when empty, in
 * buf. */
const char *acc__device_module_error(const acc__device_ops *o, const char *dflt, char *buf, size_t cap);

/* Collectives the fake device's NCCL completed in this process (tests prove the path taken). */
unsigned long long acc__dcomm_fake_calls(void);

#endif
