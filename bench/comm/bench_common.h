/* Shared table logic of the collective benchmarks (accelerate-c and MPI versions): sizes from
 * 4 B to 64 MiB, warm-up, median of repeated timings, nccl-tests-style columns. */
#ifndef ACC_BENCH_COMMON_H
#define ACC_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bench_machine.h"

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Iterations for a message size: many for small, fewer for large (bounded run time). */
static int bench_iters(size_t bytes) {
  if (bytes <= 65536) return 2000;
  if (bytes <= (1u << 20)) return 200;
  if (bytes <= (16u << 20)) return 30;
  return 12;
}

/* Bus bandwidth factor (nccl-tests): all_reduce 2(n-1)/n, all_gather and reduce_scatter
 * (n-1)/n, broadcast 1. For all_gather and reduce_scatter the size is the per-process block. */
static double bench_bus_factor(const char *op, int n) {
  if (strcmp(op, "all_reduce") == 0) return 2.0 * (n - 1) / n;
  if (strcmp(op, "all_gather") == 0 || strcmp(op, "reduce_scatter") == 0) return (double)(n - 1) / n;
  return 1.0;
}

/* ACC_BENCH_OPS (comma-separated op names; unset: all) and ACC_BENCH_MIN (smallest size in
 * bytes; unset: 4) narrow a run to the rows an interleaved comparison needs (interleave.sh). */
static int bench_op_on(const char *op) {
  const char *l = getenv("ACC_BENCH_OPS");
  if (!l || !*l) return 1;
  size_t n = strlen(op);
  for (const char *p = l; (p = strstr(p, op)) != NULL; p += n)
    if ((p == l || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}
static size_t bench_min_bytes(void) {
  const char *m = getenv("ACC_BENCH_MIN");
  return m && atoll(m) > 4 ? (size_t)atoll(m) : 4;
}

static void bench_header(const char *impl, int n) {
  bench_machine();
  printf("# %s, %d processes; time = median over iterations (us); algbw = size/time; busbw "
         "as nccl-tests\n", impl, n);
  printf("%-11s %12s %12s %12s %10s %10s\n", "op", "size(B)", "count", "time(us)", "algbw(GB/s)",
         "busbw(GB/s)");
}

static void bench_row(const char *op, size_t bytes, size_t count, double med_s, int n) {
  double alg = med_s > 0 ? (double)bytes / med_s / 1e9 : 0;
  printf("%-11s %12zu %12zu %12.3f %10.3f %10.3f\n", op, bytes, count, med_s * 1e6, alg,
         alg * bench_bus_factor(op, n));
  fflush(stdout);
}

#endif
