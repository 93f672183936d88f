/* Between the device layer (device.c) and its built-in implementations (host.c). Not API. */
#ifndef ACC_DEVICE_IMPL_H
#define ACC_DEVICE_IMPL_H

#include "device/device.h"

extern const acc__device_ops acc__device_cpu_ops;
extern const acc__device_ops acc__device_fake_ops;

#endif
