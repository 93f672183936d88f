/* FSDP benchmark: an MLP of LAYERS square layers (WIDTH x WIDTH + bias, one unit each) trained with
 * AdamW through acc_fsdp under the strategy of FSDP_SHARDING_STRATEGY (accelerate launch --use_fsdp
 * --fsdp_sharding_strategy ...). Prints, from process 0: the median step time, the largest process's
 * peak resident memory (getrusage), and the library's accounting (acc_fsdp_memory_stats).
 * DTYPE bf16: the table is ACC_BF16 (16-bit gathered parameters and gradient buffers over float32
 * master shards); the program widens each unit's parameters into a float buffer of its own and
 * rounds its float gradients into the 16-bit buffer (what a program with bf16 storage and float
 * arithmetic does; a bf16 kernel would read them directly).
 * Usage: fsdp_bench LAYERS WIDTH BATCH STEPS [f32|bf16] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "accelerate.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define TRY(x)                                                     \
  do {                                                             \
    if ((x) != ACC_OK) {                                           \
      fprintf(stderr, "fsdp_bench: %s: %s\n", #x, acc_last_error()); \
      return 1;                                                    \
    }                                                              \
  } while (0)

int main(int argc, char **argv) {
  int L = argc > 1 ? atoi(argv[1]) : 8, W = argc > 2 ? atoi(argv[2]) : 512, B = argc > 3 ? atoi(argv[3]) : 16;
  int steps = argc > 4 ? atoi(argv[4]) : 20;
  const int bf16 = argc > 5 && strcmp(argv[5], "bf16") == 0;
  acc_accelerator *acc;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  TRY(acc_accelerator_create(&acc, &o));
  acc_state *st = acc_accelerator_state(acc);
  int rank = acc_state_process_index(st), world = acc_state_num_processes(st);
  acc_param_spec *rows = calloc((size_t)(2 * L), sizeof *rows);
  char (*names)[32] = calloc((size_t)(2 * L), 32);
  for (int l = 0; l < L; l++) {
    snprintf(names[2 * l], 32, "l%d.w", l);
    snprintf(names[2 * l + 1], 32, "l%d.b", l);
    rows[2 * l] = (acc_param_spec){names[2 * l], 2, {W, W}};
    rows[2 * l + 1] = (acc_param_spec){names[2 * l + 1], 1, {W}};
  }
  size_t per = (size_t)W * W + W, total = per * (size_t)L;
  acc_fsdp *f;
  TRY(acc_fsdp_create(acc, rows, (size_t)(2 * L), bf16 ? ACC_BF16 : ACC_F32, NULL, &f));
  for (int l = 0; l < L; l++) TRY(acc_fsdp_add_unit(f, names[2 * l], (size_t)(2 * l), 2, NULL));
  float *init = malloc(total * sizeof *init);
  for (size_t i = 0; i < total; i++) init[i] = 0.02f * (float)sin(0.37 * (double)i);
  TRY(acc_fsdp_prepare(f, init));
  free(init);
  acc_optimizer *opt;
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  ao.lr = 1e-4;
  TRY(acc_optimizer_create_adamw(&opt, acc_fsdp_model(f), &ao));
  /* activations: B x W per layer, kept for backward */
  float *act = malloc((size_t)(L + 1) * (size_t)B * (size_t)W * sizeof *act), *d = malloc((size_t)B * W * sizeof *d),
        *dn = malloc((size_t)B * W * sizeof *dn);
  double *t = malloc((size_t)steps * sizeof *t);
  /* bf16: the unit's parameters widened, its gradients in float before rounding */
  float *pw = bf16 ? malloc(per * sizeof *pw) : NULL, *gw = bf16 ? malloc(per * sizeof *gw) : NULL;
  for (int s = 0; s < steps; s++) {
    acc_barrier(st);
    double t0 = now();
    for (int i = 0; i < B * W; i++) act[i] = (float)sin(0.1 * i + rank + s);
    for (int l = 0; l < L; l++) {
      const float *p;
      if (bf16) {
        const void *h;
        TRY(acc_fsdp_unit_forward_begin_typed(f, (size_t)l, ACC_BF16, &h));
        TRY(acc_bf16_to_f32(pw, h, per));
        p = pw;
      } else {
        TRY(acc_fsdp_unit_forward_begin(f, (size_t)l, &p));
      }
      float *x = act + (size_t)l * B * W, *y = x + (size_t)B * W;
      for (int b = 0; b < B; b++)
        for (int r = 0; r < W; r++) {
          float a = p[(size_t)W * W + r];
          const float *wr = p + (size_t)r * W;
          for (int c = 0; c < W; c++) a += wr[c] * x[b * W + c];
          y[b * W + r] = a > 0 ? a : 0;
        }
      TRY(acc_fsdp_unit_forward_end(f, (size_t)l));
    }
    for (int i = 0; i < B * W; i++) d[i] = act[(size_t)L * B * W + i] / (float)(B * W);
    for (int l = L - 1; l >= 0; l--) {
      const float *p;
      float *g;
      const void *h = NULL;
      void *gh = NULL;
      if (bf16) {
        TRY(acc_fsdp_unit_backward_begin_typed(f, (size_t)l, ACC_BF16, &h, &gh));
        TRY(acc_bf16_to_f32(pw, h, per));
        memset(gw, 0, per * sizeof *gw);
        p = pw;
        g = gw;
      } else {
        TRY(acc_fsdp_unit_backward_begin(f, (size_t)l, &p, &g));
      }
      float *x = act + (size_t)l * B * W, *y = x + (size_t)B * W;
      memset(dn, 0, (size_t)B * W * sizeof *dn);
      for (int b = 0; b < B; b++)
        for (int r = 0; r < W; r++) {
          float dy = y[b * W + r] > 0 ? d[b * W + r] : 0;
          if (dy == 0) continue;
          float *gr = g + (size_t)r * W;
          const float *wr = p + (size_t)r * W;
          for (int c = 0; c < W; c++) {
            gr[c] += dy * x[b * W + c];
            dn[b * W + c] += dy * wr[c];
          }
          g[(size_t)W * W + r] += dy;
        }
      if (bf16) TRY(acc_f32_to_bf16(gh, gw, per));
      TRY(acc_fsdp_unit_backward_end(f, (size_t)l));
      memcpy(d, dn, (size_t)B * W * sizeof *d);
    }
    float norm;
    TRY(acc_fsdp_clip_grad_norm(f, 1.0f, 2.0, &norm));
    TRY(acc_optimizer_step(opt));
    TRY(acc_optimizer_zero_grad(opt));
    t[s] = now() - t0;
  }
  qsort(t, (size_t)steps, sizeof *t, cmp);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss = (double)ru.ru_maxrss / 1024.0, maxrss = 0;
  acc_all_reduce(st, &rss, &maxrss, 1, ACC_F64, ACC_MAX);
  acc_fsdp_memory m;
  acc_fsdp_memory_stats(f, &m);
  if (rank == 0) {
    double lib = (double)(m.shard_params + m.shard_grads + 2 * m.shard_params + m.pool_bytes + m.no_sync_bytes) / 1048576.0;
    printf("strategy=%d dtype=%s np=%d params=%zu median_step_s=%.4f max_peak_rss_MiB=%.1f "
           "library_MiB=%.1f (shards p+g %.1f, adamw %.1f, pool %zu buffers %.1f, peak in use %zu) full_model_state_MiB=%.1f\n",
           (int)acc_fsdp_strategy(f), bf16 ? "bf16" : "f32", world, total, t[steps / 2], maxrss, lib,
           (double)(m.shard_params + m.shard_grads) / 1048576.0, 2.0 * (double)m.shard_params / 1048576.0,
           m.pool_buffers, (double)m.pool_bytes / 1048576.0, m.pool_peak_in_use,
           16.0 * (double)total / 1048576.0);
  }
  free(pw);
  free(gw);
  acc_optimizer_destroy(opt);
  acc_fsdp_destroy(f);
  acc_accelerator_destroy(acc);
  return 0;
}
