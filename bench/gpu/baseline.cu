// The GPU training step WITHOUT accelerate-c: the same MLP kernels (examples/fashion_mnist's
// mlp_cuda.cu, cuBLAS with TF32 off), the same preloaded synthetic data, and a hand-written AdamW
// kernel (decoupled weight decay 0.01, betas 0.9/0.999, eps 1e-8, bias corrections on the host:
// the defaults of acc_adamw_options and torch.optim.AdamW). The difference with bench_gpu_lib is
// the library's overhead per step. Prints one RESULT line.
// Usage: baseline --batch B [--steps S --warmup W --hidden H --lr X]
#include <cuda_runtime.h>

#include <cmath>

#include "common.h"
#include "mlp.h"
#include "mlp_cuda.h"

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "baseline: %s: %s\n", #call, cudaGetErrorString(e_));               \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

__global__ void adamw(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1,
                      float b2, float eps, float wd, float bc1, float bc2) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i];
  float wi = w[i] * (1.0f - lr * wd);
  float mi = b1 * m[i] + (1.0f - b1) * gi;
  float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  w[i] = wi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
}

static double used_mib(void) {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return (double)(total - free_b) / (1024.0 * 1024.0);
}

int main(int argc, char **argv) {
  bg_args a;
  if (bg_parse(argc, argv, &a)) return 2;
  CK(cudaSetDevice(0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double base = used_mib(), peak = base;
  float *hx = (float *)malloc((size_t)BG_SAMPLES * BG_IN * sizeof(float));
  int32_t *hy = (int32_t *)malloc((size_t)BG_SAMPLES * sizeof(int32_t));
  if (!hx || !hy) return 1;
  bg_make_data(hx, hy);
  float *dx;
  int32_t *dy;
  CK(cudaMalloc(&dx, (size_t)BG_SAMPLES * BG_IN * sizeof(float)));
  CK(cudaMalloc(&dy, (size_t)BG_SAMPLES * sizeof(int32_t)));
  CK(cudaMemcpy(dx, hx, (size_t)BG_SAMPLES * BG_IN * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dy, hy, (size_t)BG_SAMPLES * sizeof(int32_t), cudaMemcpyHostToDevice));

  mlp_config mc = {BG_IN, a.hidden, 1, BG_CLASSES, a.batch};
  mlp *net;
  if (mlp_create(&net, &mc)) return 1;
  mlp_init(net, 42);
  size_t n = mlp_num_params(net), nbytes = n * sizeof(float);
  float *params, *grads, *m, *v;
  CK(cudaMalloc(&params, nbytes));
  CK(cudaMalloc(&grads, nbytes));
  CK(cudaMalloc(&m, nbytes));
  CK(cudaMalloc(&v, nbytes));
  CK(cudaMemcpy(params, mlp_params(net), nbytes, cudaMemcpyHostToDevice));
  CK(cudaMemset(grads, 0, nbytes));
  CK(cudaMemset(m, 0, nbytes));
  CK(cudaMemset(v, 0, nbytes));
  mlp_cuda *g;
  if (mlp_cuda_create(&g, net, params, grads, stream)) {
    fprintf(stderr, "baseline: %s\n", mlp_cuda_last_error());
    return 1;
  }
  double *times = (double *)malloc((size_t)a.steps * sizeof *times);
  if (!times) return 1;
  const float b1 = 0.9f, b2 = 0.999f;
  for (int k = 0; k < a.warmup + a.steps; k++) {
    double t0 = bg_now();
    size_t off = bg_offset(&a, k);
    if (mlp_cuda_forward(g, dx + off * BG_IN, a.batch) ||
        mlp_cuda_loss_backward(g, dx + off * BG_IN, dy + off, a.batch, 1.0f)) {
      fprintf(stderr, "baseline: %s\n", mlp_cuda_last_error());
      return 1;
    }
    int t = k + 1;
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    adamw<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(params, grads, m, v, n, (float)a.lr,
                                                           b1, b2, 1e-8f, 0.01f, bc1, bc2);
    CK(cudaGetLastError());
    CK(cudaMemsetAsync(grads, 0, nbytes, stream));
    CK(cudaStreamSynchronize(stream));
    if (k >= a.warmup) times[k - a.warmup] = bg_now() - t0;
    double u = used_mib();
    if (u > peak) peak = u;
  }
  double loss_sum = 0;
  if (mlp_cuda_take_loss(g, &loss_sum)) return 1;
  bg_report("cuda-baseline", &a, times, a.steps, peak - base,
            loss_sum / (double)(a.warmup + a.steps));
  mlp_cuda_destroy(g);
  cudaFree(params);
  cudaFree(grads);
  cudaFree(m);
  cudaFree(v);
  cudaFree(dx);
  cudaFree(dy);
  cudaStreamDestroy(stream);
  mlp_destroy(net);
  free(hx);
  free(hy);
  free(times);
  return 0;
}
