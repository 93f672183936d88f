/* zero_bench: ZeRO stages 0, 1 and 2 on one model (AdamW, global-norm clipping): optimizer-state
 * floats held per process, the accelerator's gradient exchange buffers per process (bucket
 * staging, stage 1's flat layout, stage 2's bucket/chunk buffer), and the time of one
 * synchronized step (gradient sync + clipping + optimizer step + parameter all-gather), median
 * over iterations. The program's own parameter and gradient arrays are the same at every stage
 * and not counted.
 * Run: accelerate launch --num_processes N [--zero_stage 1|2] zero_bench [millions_of_params] [iters]
 *      [bucket_MiB] (bucket_cap_bytes; default the accelerator's 25 MB)
 * Rank 0 prints one line: stage, processes, parameters, state floats on each process (max),
 * state bytes per process as a fraction of stage 0's (2 * params floats), exchange-buffer
 * floats (max), state + buffer floats (max), median step ms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accelerate.h"
#include "core/internal.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define TRY(call)                                                        \
  do {                                                                   \
    if ((call) != ACC_OK) {                                              \
      fprintf(stderr, "zero_bench: %s: %s\n", #call, acc_last_error()); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

int main(int argc, char **argv) {
  double millions = argc > 1 ? atof(argv[1]) : 8.0;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  double bucket_mib = argc > 3 ? atof(argv[3]) : 0.0;
  enum { NT = 7 }; /* tensors of different, odd sizes */
  size_t total = (size_t)(millions * 1e6), sizes[NT], sum = 0;
  for (int i = 0; i < NT; i++) sum += sizes[i] = total / NT + (size_t)(2 * i + 1);
  acc_accelerator *acc = NULL;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.bucket_cap_bytes = (size_t)(bucket_mib * 1048576.0);
  TRY(acc_accelerator_create(&acc, &o));
  acc_state *st = acc_accelerator_state(acc);
  int n = acc_state_num_processes(st), rank = acc_state_process_index(st);
  acc_model *m = NULL;
  TRY(acc_model_create(&m));
  float *data[NT], *grad[NT];
  for (int i = 0; i < NT; i++) {
    data[i] = malloc(sizes[i] * sizeof(float));
    grad[i] = malloc(sizes[i] * sizeof(float));
    if (!data[i] || !grad[i]) return 1;
    for (size_t k = 0; k < sizes[i]; k++) data[i][k] = 0.001f * (float)(k % 1000);
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    int64_t shape[1] = {(int64_t)sizes[i]};
    TRY(acc_model_add_parameter(m, name, data[i], grad[i], 1, shape));
  }
  acc_optimizer *opt = NULL;
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  TRY(acc_optimizer_create_adamw(&opt, m, &ao));
  TRY(acc_accelerator_prepare_model(acc, m));
  TRY(acc_accelerator_prepare_optimizer(acc, opt));
  double *t = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
  for (int it = -2; it < iters; it++) { /* two warm-up steps */
    for (int i = 0; i < NT; i++)
      for (size_t k = 0; k < sizes[i]; k++) grad[i][k] = 1e-3f * (float)((k + (size_t)rank) % 7);
    double t0 = now();
    TRY(acc_accelerator_accumulate(acc));
    TRY(acc_accelerator_backward(acc));
    float norm;
    TRY(acc_accelerator_clip_grad_norm(acc, 1.0f, 2.0, &norm));
    TRY(acc_accelerator_optimizer_step(acc, opt));
    if (it >= 0) t[it] = now() - t0;
  }
  qsort(t, (size_t)iters, sizeof *t, cmp);
  int64_t held[3] = {(int64_t)acc__optimizer_state_floats(opt), (int64_t)acc__accelerator_sync_buffer_floats(acc), 0};
  held[2] = held[0] + held[1];
  TRY(acc_accelerator_all_reduce(acc, held, held, 3, ACC_I64, ACC_MAX));
  if (rank == 0)
    printf("stage %d  processes %d  params %zu  state floats/process (max) %lld  fraction of stage 0 %.4f "
           "(1/N = %.4f)  exchange buffer floats %lld  state+buffer floats %lld  step %.2f ms\n",
           acc_accelerator_zero_stage(acc), n, sum, (long long)held[0], (double)held[0] / (2.0 * (double)sum),
           1.0 / n, (long long)held[1], (long long)held[2], 1e3 * t[iters / 2]);
  acc_optimizer_destroy(opt);
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  for (int i = 0; i < NT; i++) free(data[i]), free(grad[i]);
  free(t);
  return 0;
}
