/* Between the device layer (device.c) and its built-in implementations (host.c). Not API. */
#ifndef ACC_DEVICE_IMPL_H
#define ACC_DEVICE_IMPL_H

#include "device/device.h"

extern const acc__device_ops acc__device_cpu_ops;
extern const acc__device_ops acc__device_fake_ops;
/* Operations queued on the fake device and not yet run (ctx: its context). */
size_t acc__fake_queued(void *ctx);

/* The fake device's NCCL (fake_nccl.c): nccl_* entries of acc__device_fake_ops. A communicator
 * spans the job bound on the creating thread by acc__fake_nccl_bind (src/device/dcomm.c binds it
 * around nccl_init); each collective stages through host memory and runs the CPU collective. */
void acc__fake_nccl_bind(acc_state *st, const acc__device_ops *ops);
unsigned long long acc__fake_nccl_calls(void); /* collectives completed by this process */
int acc__fnccl_unique_id(uint8_t id[ACC__NCCL_ID_BYTES]);
int acc__fnccl_init(void *ctx, void **comm, int nranks, int rank, const uint8_t id[ACC__NCCL_ID_BYTES],
                    double timeout_s);
int acc__fnccl_all_reduce(void *ctx, void *comm, const void *send, void *recv, size_t count, int dtype,
                          int op, void *s);
int acc__fnccl_all_gather(void *ctx, void *comm, const void *send, void *recv, size_t count, int dtype,
                          void *s);
int acc__fnccl_reduce_scatter(void *ctx, void *comm, const void *send, void *recv, size_t count, int dtype,
                              int op, void *s);
int acc__fnccl_wait(void *ctx, void *comm, void *s, double timeout_s);
int acc__fnccl_check(void *ctx, void *comm);
int acc__fnccl_abort(void *ctx, void *comm);
int acc__fnccl_destroy(void *ctx, void *comm, int abort);

#endif
