/* The CUDA module's errors: this thread's last message, and CUDA's error codes as acc_result with
 * CUDA's own text (cuda_module.h). Used by cuda_device.c and nccl.c. */
#include <stdarg.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "device/cuda/cuda_module.h"

static _Thread_local char last_msg[1024];

const char *acc__cuda_last_error(void) { return last_msg; }

int acc__cuda_fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_msg, sizeof last_msg, fmt, ap);
  va_end(ap);
  return rc;
}

int acc__cuda_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return ACC_OK;
  (void)cudaGetLastError(); /* clear a sticky-free error so the next call starts clean */
  int rc = e == cudaErrorMemoryAllocation ? ACC_ERR_NOMEM
           : (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) ? ACC_ERR_NOT_SUPPORTED
                                                                           : ACC_ERR_BACKEND;
  return acc__cuda_fail(rc, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

