// The device kernels of the CUDA module. The per-element arithmetic is ../kernels.h, shared with
// the cpu and fake devices; this file only maps it onto threads. Built with --fmad=false so no
// multiply-add is fused and each element gets the bits of the host code. NOT YET RUN ON A GPU.
#include <cuda_runtime.h>

#include "device/kernels.h"
#include "device/cuda/cuda_module.h"

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b < 8192 ? (b ? b : 1) : 8192);  // grid-stride loops cover the rest
}

__global__ void sgd_kernel(acc__sgd_args a) {
  if (a.skip_if && *a.skip_if) return;
  const float scale = a.grad_scale ? *a.grad_scale : 1.0f;
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < a.n;
       k += (size_t)gridDim.x * blockDim.x)
    acc__k_sgd(&a, scale, k);
}

__global__ void adamw_kernel(acc__adamw_args a) {
  if (a.skip_if && *a.skip_if) return;
  const float scale = a.grad_scale ? *a.grad_scale : 1.0f;
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < a.n;
       k += (size_t)gridDim.x * blockDim.x)
    acc__k_adamw(&a, scale, k);
}

__global__ void unscale_kernel(float *g, size_t n, float inv, int32_t *flag) {
  int found = 0;
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x) {
    if (!acc__k_finite(g[k])) found = 1;
    g[k] *= inv;
  }
  if (found) *flag = 1;  // every writer writes 1: no ordering needed
}

// One block per ACC__NORM_CHUNK elements; a fixed tree inside the block, so the result does not
// depend on scheduling (it differs in rounding from the host's sequential sum).
__global__ void norm_partials_kernel(const float *g, size_t n, double *partials) {
  __shared__ double sh[kThreads];
  const size_t start = (size_t)blockIdx.x * ACC__NORM_CHUNK;
  double s = 0.0;
  for (size_t k = start + threadIdx.x; k < start + ACC__NORM_CHUNK && k < n; k += kThreads)
    s += (double)g[k] * (double)g[k];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

// Sums the partials in order (one thread: the same order as the host).
__global__ void norm_finish_kernel(const double *partials, size_t count, float max_norm,
                                   float *norm, float *coef) {
  double total = 0.0;
  for (size_t i = 0; i < count; i++) total += partials[i];
  acc__k_norm_finish(total, max_norm, norm, coef);
}

__global__ void scale_kernel(float *buf, size_t n, const float *coef) {
  const float c = *coef;
  if (!(c < 1.0f)) return;
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    buf[k] *= c;
}

__global__ void cast_kernel(uint16_t *dst, const float *src, size_t n, int bf16) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    dst[k] = bf16 ? acc__k_f32_to_bf16(src[k]) : acc__k_f32_to_f16(src[k]);
}

__global__ void widen_kernel(float *dst, const uint16_t *src, size_t n, int bf16) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    dst[k] = bf16 ? acc__k_bf16_to_f32(src[k]) : acc__k_f16_to_f32(src[k]);
}

__global__ void clamp_kernel(float *buf, size_t n, float clip) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    buf[k] = acc__k_clamp(buf[k], clip);
}

__global__ void axpy_kernel(float *dst, const float *src, size_t n, float a) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    dst[k] = acc__k_axpy(dst[k], src[k], a);
}

__global__ void round_f16_kernel(float *buf, size_t n) {
  for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
       k += (size_t)gridDim.x * blockDim.x)
    buf[k] = acc__k_round_f16(buf[k]);
}

}  // namespace

extern "C" {

cudaError_t acc__cuda_launch_sgd(const acc__sgd_args *a, cudaStream_t s) {
  sgd_kernel<<<blocks_for(a->n), kThreads, 0, s>>>(*a);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_adamw(const acc__adamw_args *a, cudaStream_t s) {
  adamw_kernel<<<blocks_for(a->n), kThreads, 0, s>>>(*a);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_unscale(float *g, size_t n, float inv, int32_t *flag,
                                     cudaStream_t s) {
  unscale_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, n, inv, flag);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_norm_partials(const float *g, size_t n, double *partials,
                                           cudaStream_t s) {
  norm_partials_kernel<<<(unsigned)acc__norm_partials(n), kThreads, 0, s>>>(g, n, partials);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_norm_finish(const double *partials, size_t count, float max_norm,
                                         float *norm, float *coef, cudaStream_t s) {
  norm_finish_kernel<<<1, 1, 0, s>>>(partials, count, max_norm, norm, coef);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_scale(float *buf, size_t n, const float *coef, cudaStream_t s) {
  scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(buf, n, coef);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_cast(uint16_t *dst, const float *src, size_t n, int bf16,
                                  cudaStream_t s) {
  cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, bf16);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_widen(float *dst, const uint16_t *src, size_t n, int bf16,
                                   cudaStream_t s) {
  widen_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, bf16);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_clamp(float *buf, size_t n, float clip, cudaStream_t s) {
  clamp_kernel<<<blocks_for(n), kThreads, 0, s>>>(buf, n, clip);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_round_f16(float *buf, size_t n, cudaStream_t s) {
  round_f16_kernel<<<blocks_for(n), kThreads, 0, s>>>(buf, n);
  return cudaGetLastError();
}

cudaError_t acc__cuda_launch_axpy(float *dst, const float *src, size_t n, float a, cudaStream_t s) {
  axpy_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, a);
  return cudaGetLastError();
}

}  // extern "C"
