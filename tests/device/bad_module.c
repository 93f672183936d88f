/* A device module of a future ABI version: the loader must refuse it with a clear message. */
#include "device/device_ops.h"

static const acc__device_ops ops = {42u, sizeof(acc__device_ops), "cuda"};

__attribute__((visibility("default"))) const acc__device_ops *acc_device_cuda_ops_v1(void) {
  return &ops;
}
