/* Shared by the GPU benchmark programs (bench_gpu_lib.c, baseline.cu): arguments, the synthetic
 * data set, the step timer's statistics and the result line bench/gpu/run.sh reads. */
#ifndef BENCH_GPU_COMMON_H
#define BENCH_GPU_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BG_SAMPLES 60000 /* Fashion-MNIST's training set size */
#define BG_IN 784
#define BG_CLASSES 10

typedef struct bg_args {
  int batch, steps, warmup, hidden;
  double lr;
} bg_args;

static inline int bg_parse(int argc, char **argv, bg_args *a) {
  *a = (bg_args){64, 200, 20, 256, 1e-3};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batch")) a->batch = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps")) a->steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) a->warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--hidden")) a->hidden = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--lr")) a->lr = atof(argv[i + 1]);
    else {
      fprintf(stderr, "unknown option %s (--batch --steps --warmup --hidden --lr)\n", argv[i]);
      return -1;
    }
  }
  if (a->batch < 1 || a->batch > BG_SAMPLES || a->steps < 1 || a->warmup < 0 || a->hidden < 1) {
    fprintf(stderr, "invalid arguments\n");
    return -1;
  }
  return 0;
}

/* The synthetic data set, the same bytes in every program (and in train_torch.py, which uses
 * the same generator): inputs uniform in [-1, 1), labels 0..9. */
static inline uint32_t bg_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}
static inline void bg_make_data(float *x, int32_t *y) {
  uint64_t s = 12345;
  for (size_t i = 0; i < (size_t)BG_SAMPLES * BG_IN; i++)
    x[i] = (float)bg_next(&s) / 2147483648.0f - 1.0f;
  for (size_t i = 0; i < BG_SAMPLES; i++) y[i] = (int32_t)(bg_next(&s) % BG_CLASSES);
}

/* Batch k: samples [(k * batch) mod (SAMPLES - batch + 1), + batch). */
static inline size_t bg_offset(const bg_args *a, int k) {
  return ((size_t)k * (size_t)a->batch) % (size_t)(BG_SAMPLES - a->batch + 1);
}

static inline double bg_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bg_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One line for run.sh: median step time over the timed steps, samples/s at that median, the
 * most device memory in use during the run above what was in use before the model existed. */
static inline void bg_report(const char *impl, const bg_args *a, double *step_s, int n,
                             double peak_mib, double final_loss) {
  qsort(step_s, (size_t)n, sizeof *step_s, bg_cmp);
  double med = n % 2 ? step_s[n / 2] : 0.5 * (step_s[n / 2 - 1] + step_s[n / 2]);
  printf("RESULT impl=%s batch=%d median_ms=%.4f samples_per_s=%.0f peak_mib=%.1f loss=%.4f\n",
         impl, a->batch, med * 1e3, (double)a->batch / med, peak_mib, final_loss);
}

#endif
