/* The accelerator's device context, for the tests that reach it (tests/devio). Not API. */
#ifndef ACC_TRAIN_ACCEL_DEVICE_H
#define ACC_TRAIN_ACCEL_DEVICE_H

#include "device/devctx.h"

/* The device of a valid accelerator (never NULL after a successful acc_accelerator_create). */
acc__devctx *acc__accelerator_dev(const acc_accelerator *acc);

#endif
