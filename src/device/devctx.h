/* A process's compute device: the opened device, its compute stream and where it came from
 * (placement.h). Not API. Opened once per accelerator (src/train/accelerator.c), registered with
 * devio.c so that the collectives and save_model find the device of a buffer. The device layer
 * knows nothing of what trains on it: `train` is a slot the training layer owns and frees
 * (src/train/train_optim.c) before it closes the context. */
#ifndef ACC_DEVICE_DEVCTX_H
#define ACC_DEVICE_DEVCTX_H

#include "accelerate/device.h"
#include "device/placement.h"

typedef struct acc__devctx {
  acc__device *dev;      /* always open: the cpu device when training on the CPU */
  acc__dstream *stream;  /* the compute stream (NULL on the CPU: its operations run at once) */
  acc__placement where;
  acc_device_type type;  /* CPU, CUDA or FAKE */
  struct acc__dev_train *train; /* owned by src/train/ (train.h); NULL until used */
} acc__devctx;

/* Resolves the placement for `want` (placement.h) and opens the device and its stream. */
acc_result acc__devctx_open(acc_state *st, int want, acc__devctx **out);
/* Synchronizes first; accepts NULL. The owner of `train` has freed it already. */
void acc__devctx_close(acc__devctx *d);

/* 1 when training runs on a device other than the CPU (device memory is not plain host memory). */
static inline int acc__devctx_offhost(const acc__devctx *d) {
  return d && d->type != ACC_DEVICE_CPU;
}

#endif
