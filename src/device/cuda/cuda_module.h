/* Internal to the CUDA module (libaccelerate-cuda.so). Not API. */
#ifndef ACC_CUDA_MODULE_H
#define ACC_CUDA_MODULE_H

#include <cuda_runtime_api.h>

#include "device/device_ops.h"

#define ACC_CHECK(call)                      \
  do {                                       \
    acc_result acc__rc_ = (call);            \
    if (acc__rc_ != ACC_OK) return acc__rc_; \
  } while (0)

typedef struct acc__cuda_ctx {
  int dev;
} acc__cuda_ctx;

/* This thread's message of the last failure; acc__cuda_fail sets it and returns rc. */
const char *acc__cuda_last_error(void);
int acc__cuda_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ACC_OK, or an acc_result with "what: CUDA's message (error name)". */
int acc__cuda_check(cudaError_t e, const char *what);

/* Kernel launchers (kernels.cu); they return the launch's cudaError_t. */
#ifdef __cplusplus
extern "C" {
#endif
cudaError_t acc__cuda_launch_sgd(const acc__sgd_args *a, cudaStream_t s);
cudaError_t acc__cuda_launch_adamw(const acc__adamw_args *a, cudaStream_t s);
cudaError_t acc__cuda_launch_unscale(float *g, size_t n, float inv, int32_t *flag, cudaStream_t s);
cudaError_t acc__cuda_launch_norm_partials(const float *g, size_t n, double *partials,
                                           cudaStream_t s);
cudaError_t acc__cuda_launch_norm_finish(const double *partials, size_t count, float max_norm,
                                         float *norm, float *coef, cudaStream_t s);
cudaError_t acc__cuda_launch_scale(float *buf, size_t n, const float *coef, cudaStream_t s);
cudaError_t acc__cuda_launch_cast(uint16_t *dst, const float *src, size_t n, int bf16,
                                  cudaStream_t s);
cudaError_t acc__cuda_launch_widen(float *dst, const uint16_t *src, size_t n, int bf16,
                                   cudaStream_t s);
cudaError_t acc__cuda_launch_axpy(float *dst, const float *src, size_t n, float a, cudaStream_t s);
cudaError_t acc__cuda_launch_clamp(float *buf, size_t n, float clip, cudaStream_t s);
cudaError_t acc__cuda_launch_round_f16(float *buf, size_t n, cudaStream_t s);
#ifdef __cplusplus
}
#endif

/* NCCL (nccl.c); acc__cuda_nccl_version is 0 without NCCL. */
int acc__cuda_nccl_version(void);
#ifdef ACC_CUDA_HAVE_NCCL
int acc__nccl_unique_id(uint8_t id[ACC__NCCL_ID_BYTES]);
int acc__nccl_init(void *ctx, void **comm, int nranks, int rank,
                   const uint8_t id[ACC__NCCL_ID_BYTES], double timeout_s);
int acc__nccl_all_reduce(void *ctx, void *comm, const void *send, void *recv, size_t count,
                         int dtype, int op, void *s);
int acc__nccl_wait(void *ctx, void *comm, void *s, double timeout_s);
int acc__nccl_destroy(void *ctx, void *comm, int abort);
int acc__nccl_check(void *ctx, void *comm);
int acc__nccl_abort(void *ctx, void *comm);
int acc__nccl_all_gather(void *ctx, void *comm, const void *send, void *recv, size_t count,
                         int dtype, void *s);
int acc__nccl_reduce_scatter(void *ctx, void *comm, const void *send, void *recv, size_t count,
                             int dtype, int op, void *s);
#endif

#endif
