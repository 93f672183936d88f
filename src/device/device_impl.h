/* Between the device layer (device.c) and its built-in implementations (host.c). Not API. */
#ifndef ACC_DEVICE_IMPL_H
#define ACC_DEVICE_IMPL_H

#include "device/device.h"

extern const acc__device_ops acc__device_cpu_ops;
extern const acc__device_ops acc__device_fake_ops;
/* Operations queued on the fake device and not yet run (ctx: its context). */
size_t acc__fake_queued(void *ctx);

#endif
