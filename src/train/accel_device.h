/* The accelerator's device: the opened device, its compute stream and where it came from. Not
 * API. Created by acc_accelerator_create (src/accelerator.c), used by the training paths that run
 * on the device. */
#ifndef ACC_DEVICE_ACCEL_DEVICE_H
#define ACC_DEVICE_ACCEL_DEVICE_H

#include "accelerate/device.h"
#include "device/placement.h"

typedef struct acc__accel_dev {
  acc__device *dev;      /* always open: the cpu device when training on the CPU */
  acc__dstream *stream;  /* the compute stream (NULL on the CPU: its operations run at once) */
  acc__placement where;
  acc_device_type type;  /* CPU, CUDA or FAKE */
  struct acc__dev_train *train; /* training state on the device (train.h); NULL until used */
} acc__accel_dev;

/* Resolves the placement for `want` (placement.h) and opens the device and its stream. */
acc_result acc__accel_dev_open(acc_state *st, int want, acc__accel_dev **out);
void acc__accel_dev_close(acc__accel_dev *d); /* synchronizes first; accepts NULL */

/* The device of a valid accelerator (never NULL after a successful acc_accelerator_create). */
acc__accel_dev *acc__accelerator_dev(const acc_accelerator *acc);

/* 1 when training runs on a device other than the CPU (device memory is not plain host memory). */
static inline int acc__accel_dev_offhost(const acc__accel_dev *d) {
  return d && d->type != ACC_DEVICE_CPU;
}

#endif
