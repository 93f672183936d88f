/* GPU training step through accelerate-c: the Fashion-MNIST MLP (examples/fashion_mnist's CUDA
 * kernels and cuBLAS) with parameters, gradients and AdamW state on the GPU, the data set
 * preloaded in device memory, every step through the acc_accelerator calls (accumulate,
 * backward, optimizer_step, zero_grad). One process. Compare with baseline.cu (the same kernels
 * without the library) and train_torch.py (PyTorch + Accelerate). Prints one RESULT line.
 * Usage: bench_gpu_lib --batch B [--steps S --warmup W --hidden H --lr X] */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <accelerate.h>

#include "common.h"
#include "mlp.h"
#include "mlp_cuda.h"

#define TRY(call)                                                                 \
  do {                                                                            \
    if ((call) != ACC_OK) {                                                       \
      fprintf(stderr, "bench_gpu_lib: %s: %s\n", #call, acc_last_error());        \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

static double used_mib(void) {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return (double)(total - free_b) / (1024.0 * 1024.0);
}

int main(int argc, char **argv) {
  bg_args a;
  if (bg_parse(argc, argv, &a)) return 2;
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_CUDA;
  acc_accelerator *acc;
  TRY(acc_accelerator_create(&acc, &ao));
  double base = used_mib(), peak = base;

  float *hx = malloc((size_t)BG_SAMPLES * BG_IN * sizeof(float));
  int32_t *hy = malloc((size_t)BG_SAMPLES * sizeof(int32_t));
  if (!hx || !hy) return 1;
  bg_make_data(hx, hy);
  float *dx;
  int32_t *dy;
  TRY(acc_accelerator_alloc(acc, (size_t)BG_SAMPLES * BG_IN * sizeof(float), (void **)&dx));
  TRY(acc_accelerator_alloc(acc, (size_t)BG_SAMPLES * sizeof(int32_t), (void **)&dy));
  TRY(acc_accelerator_memcpy(acc, dx, hx, (size_t)BG_SAMPLES * BG_IN * sizeof(float),
                             ACC_COPY_HOST_TO_DEVICE));
  TRY(acc_accelerator_memcpy(acc, dy, hy, (size_t)BG_SAMPLES * sizeof(int32_t),
                             ACC_COPY_HOST_TO_DEVICE));

  mlp_config mc = {BG_IN, a.hidden, 1, BG_CLASSES, a.batch};
  mlp *net;
  if (mlp_create(&net, &mc)) return 1;
  mlp_init(net, 42);
  size_t nbytes = mlp_num_params(net) * sizeof(float);
  float *params, *grads;
  TRY(acc_accelerator_alloc(acc, nbytes, (void **)&params));
  TRY(acc_accelerator_alloc(acc, nbytes, (void **)&grads));
  TRY(acc_accelerator_memcpy(acc, params, mlp_params(net), nbytes, ACC_COPY_HOST_TO_DEVICE));
  mlp_cuda *g;
  if (mlp_cuda_create(&g, net, params, grads, acc_accelerator_stream(acc))) {
    fprintf(stderr, "bench_gpu_lib: %s\n", mlp_cuda_last_error());
    return 1;
  }
  acc_model *model;
  TRY(acc_model_create(&model));
  for (int t = 0; t < mlp_num_tensors(net); t++) {
    const mlp_tensor *mt = mlp_tensor_at(net, t);
    TRY(acc_model_add_parameter(model, mt->name, params + mt->offset, grads + mt->offset, mt->ndim,
                                mt->shape));
  }
  TRY(acc_accelerator_prepare_model(acc, model));
  acc_adamw_options ad = ACC_ADAMW_OPTIONS_INIT;
  ad.lr = a.lr;
  acc_optimizer *opt;
  TRY(acc_optimizer_create_adamw(&opt, model, &ad));
  TRY(acc_accelerator_prepare_optimizer(acc, opt));

  cudaStream_t stream = acc_accelerator_stream(acc);
  double *times = malloc((size_t)a.steps * sizeof *times);
  if (!times) return 1;
  double loss_sum = 0;
  for (int k = 0; k < a.warmup + a.steps; k++) {
    double t0 = bg_now();
    size_t off = bg_offset(&a, k);
    TRY(acc_accelerator_accumulate(acc));
    if (mlp_cuda_forward(g, dx + off * BG_IN, a.batch) ||
        mlp_cuda_loss_backward(g, dx + off * BG_IN, dy + off, a.batch,
                               acc_accelerator_backward_scale(acc))) {
      fprintf(stderr, "bench_gpu_lib: %s\n", mlp_cuda_last_error());
      return 1;
    }
    TRY(acc_accelerator_backward(acc));
    TRY(acc_accelerator_optimizer_step(acc, opt));
    TRY(acc_accelerator_optimizer_zero_grad(acc, opt));
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 1;
    if (k >= a.warmup) times[k - a.warmup] = bg_now() - t0;
    double u = used_mib();
    if (u > peak) peak = u;
  }
  if (mlp_cuda_take_loss(g, &loss_sum)) return 1;
  bg_report("accelerate-c", &a, times, a.steps, peak - base,
            loss_sum / (double)(a.warmup + a.steps));
  mlp_cuda_destroy(g);
  TRY(acc_accelerator_free(acc, params));
  TRY(acc_accelerator_free(acc, grads));
  TRY(acc_accelerator_free(acc, dx));
  TRY(acc_accelerator_free(acc, dy));
  acc_accelerator_destroy(acc);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  mlp_destroy(net);
  free(hx);
  free(hy);
  free(times);
  return 0;
}
