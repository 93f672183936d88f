/* Cost of the call-site macros of include/accelerate/call_site.h: the same public collective
 * called through its macro (acc_call_site_begin, the call, acc_call_site_end) and without it
 * ((fn)(...)), in one process, where a collective does its checks, numbering and description
 * and then copies one float: the smallest real work, so the macro's share is the largest.
 * Rounds interleave the two forms; the medians and their ratio are printed.
 * Usage: bench_call_site [calls per round] [rounds] */
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv) {
  long calls = argc > 1 ? atol(argv[1]) : 2000000;
  int rounds = argc > 2 ? atoi(argv[2]) : 9;
  if (calls < 1 || rounds < 1 || rounds > 99) return 2;
  acc_accelerator *acc;
  if (acc_accelerator_create(&acc, NULL) != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
  float x = 1.0f;
  double with[99], without[99];
  for (int r = 0; r < rounds; r++) { /* the order alternates between rounds */
    for (int k = 0; k < 2; k++) {
      const int macro = (k == 0) == (r % 2 == 0);
      double t0 = now();
      if (macro) {
        for (long i = 0; i < calls; i++)
          if (acc_accelerator_all_reduce(acc, &x, &x, 1, ACC_F32, ACC_SUM) != ACC_OK) return 1;
      } else {
        for (long i = 0; i < calls; i++)
          if ((acc_accelerator_all_reduce)(acc, &x, &x, 1, ACC_F32, ACC_SUM) != ACC_OK) return 1;
      }
      double ns = (now() - t0) / (double)calls * 1e9;
      if (macro) with[r] = ns;
      else without[r] = ns;
    }
  }
  qsort(with, (size_t)rounds, sizeof(double), cmp);
  qsort(without, (size_t)rounds, sizeof(double), cmp);
  double w = with[rounds / 2], wo = without[rounds / 2];
  printf("acc_accelerator_all_reduce(1 x f32), 1 process, %ld calls x %d rounds (interleaved):\n",
         calls, rounds);
  printf("  with the call-site macro: median %.1f ns/call\n", w);
  printf("  without (fn)(...):        median %.1f ns/call\n", wo);
  printf("  ratio with/without: %.3f (%+.1f ns/call)\n", w / wo, w - wo);
  acc_accelerator_destroy(acc);
  return 0;
}
