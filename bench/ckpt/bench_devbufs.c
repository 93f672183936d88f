/* The program's device buffers in save_state / load_state (acc_accelerator_register_buffers with
 * device memory): chunked staging (ACCELERATE_CKPT_STAGE_BYTES, default 64 MiB) against staging
 * each buffer whole (the stage size set above the buffer's size: what the library did before),
 * interleaved round by round, on the fake device (ACCELERATE_TEST_DEVICE=fake is set here: host
 * memory behind a GPU's rules, so the copies are memcpy and the figures say what the chunking
 * itself costs, not what a GPU's PCIe copies cost). Prints per mode the median save and load
 * times and the largest host staging buffer the library used.
 * Usage: acc_bench_devbufs DIR [mib_per_buffer=256] [rounds=5]   (two F32 buffers, AdamW's m, v) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <accelerate.h>

#include "../bench_machine.h"
#include "ckpt/accel_state.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define OK(call)                                                                          \
  do {                                                                                    \
    if ((call) != ACC_OK) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, acc_last_error());    \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: acc_bench_devbufs DIR [mib_per_buffer=256] [rounds=5]\n");
    return 2;
  }
  const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 256;
  const int rounds = argc > 3 ? atoi(argv[3]) : 5;
  if (!mib || rounds < 1 || rounds > 64) return 2;
  setenv("ACCELERATE_TEST_DEVICE", "fake", 1);
  acc_accelerator *acc;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  OK(acc_accelerator_create(&acc, &o));
  const size_t n = mib << 18, bytes = n * sizeof(float); /* mib MiB of floats */
  void *m = NULL, *v = NULL;
  OK(acc_accelerator_alloc(acc, bytes, &m));
  OK(acc_accelerator_alloc(acc, bytes, &v));
  float *h = malloc(bytes);
  if (!h) return 1;
  for (size_t i = 0; i < n; i++) h[i] = (float)i * 0.5f;
  OK(acc_accelerator_memcpy(acc, m, h, bytes, ACC_COPY_HOST_TO_DEVICE));
  OK(acc_accelerator_memcpy(acc, v, h, bytes, ACC_COPY_HOST_TO_DEVICE));
  free(h);
  acc_named_buffer nb[2] = {{"m", ACC_F32, &m, n, NULL}, {"v", ACC_F32, &v, n, NULL}};
  OK(acc_accelerator_register_buffers(acc, "adamw", nb, 2));
  bench_machine();
  printf("two device buffers of %zu MiB (F32), %d interleaved rounds, fake device\n", mib, rounds);
  static const char *const modes[2] = {"whole buffer", "chunked (default 64 MiB)"};
  double save_t[2][64], load_t[2][64];
  size_t peak[2] = {0, 0};
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 2; k++) {
      if (k == 0) setenv("ACCELERATE_CKPT_STAGE_BYTES", "2147483647", 1);
      else unsetenv("ACCELERATE_CKPT_STAGE_BYTES");
      char dir[2048], cmd[4200];
      snprintf(dir, sizeof dir, "%s/devbufs_%d_%d", argv[1], r, k);
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
      if (system(cmd) != 0) return 1;
      size_t p1 = 0, p2 = 0;
      acc__own_state_stage_stats(NULL, NULL, 1);
      double t0 = now_s();
      OK(acc_accelerator_save_state(acc, dir, NULL));
      double t1 = now_s();
      acc__own_state_stage_stats(NULL, &p1, 1);
      OK(acc_accelerator_load_state(acc, dir, NULL));
      double t2 = now_s();
      acc__own_state_stage_stats(NULL, &p2, 1);
      save_t[k][r] = t1 - t0;
      load_t[k][r] = t2 - t1;
      peak[k] = p1 > p2 ? p1 : p2;
      if (system(cmd) != 0) return 1;
    }
  double ms[2], ml[2];
  for (int k = 0; k < 2; k++) {
    ms[k] = median(save_t[k], rounds);
    ml[k] = median(load_t[k], rounds);
    printf("%-26s save %.3f s  load %.3f s  (medians)  host staging %zu MiB\n", modes[k], ms[k], ml[k],
           peak[k] >> 20);
  }
  printf("chunked / whole: save %.2fx, load %.2fx, host staging %.2fx\n", ms[1] / ms[0], ml[1] / ml[0],
         (double)peak[1] / (double)peak[0]);
  acc_accelerator_free(acc, m);
  acc_accelerator_free(acc, v);
  acc_accelerator_destroy(acc);
  return 0;
}
