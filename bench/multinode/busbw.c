#define _POSIX_C_SOURCE 200809L
/* busbw: all_reduce (f32, SUM, in place) bus bandwidth, 4 KiB .. max_bytes (x4 steps), for
 * bench/multinode/run.sh; BUSBW_OPS (comma-separated: all_reduce, broadcast, all_gather) and
 * BUSBW_MIN (smallest size in bytes, default 4096) widen it for bench/multinode/ops.sh
 * (broadcast from rank 0; all_gather: the size is each process's block). One source, two programs: busbw (accelerate-c, whichever backend
 * ACCELERATE_BACKEND picks) and mpi_busbw (-DBUSBW_MPI: plain Open MPI, MPI_Allreduce), so both
 * time exactly the same loop. Each size: warm-up calls, then `it` calls timed one by one; every
 * call's time is the slowest rank's (a max-reduce of the times after the loop), rank 0 prints
 * the median: "all_reduce size count time_us algbw busbw" (GB/s; busbw = algbw * 2(n-1)/n as
 * nccl-tests). The result of the first call is checked on every rank (n(n+1)/2 for rank+1).
 * Usage: busbw [max_bytes]   (default 64 MiB) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BUSBW_MPI
#include <mpi.h>
#else
#include "accelerate.h"
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int iters(size_t bytes) {
  if (bytes <= 65536) return 200;
  if (bytes <= (1u << 20)) return 40;
  if (bytes <= (16u << 20)) return 10;
  return 5;
}

static float *big; /* all_gather's output */

#ifdef BUSBW_MPI
static int n, rank;
static int ar(float *buf, size_t count) {
  return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS;
}
static int bc(float *buf, size_t count) {
  return MPI_Bcast(buf, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD) != MPI_SUCCESS;
}
static int ag(float *buf, size_t count) {
  return MPI_Allgather(buf, (int)count, MPI_FLOAT, big, (int)count, MPI_FLOAT, MPI_COMM_WORLD) !=
         MPI_SUCCESS;
}
static int max_times(double *t, int it) {
  return MPI_Allreduce(MPI_IN_PLACE, t, it, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS;
}
static const char *impl = "Open MPI";
#else
static int n, rank;
static acc_state *st;
static int ar(float *buf, size_t count) {
  return acc_all_reduce(st, buf, buf, count, ACC_F32, ACC_SUM) != ACC_OK;
}
static int bc(float *buf, size_t count) { return acc_broadcast(st, buf, count, ACC_F32, 0) != ACC_OK; }
static int ag(float *buf, size_t count) {
  return acc_all_gather(st, buf, big, count, ACC_F32) != ACC_OK;
}
static int max_times(double *t, int it) {
  return acc_all_reduce(st, t, t, (size_t)it, ACC_F64, ACC_MAX) != ACC_OK;
}
static const char *impl;
#endif

int main(int argc, char **argv) {
  size_t maxb = argc > 1 ? (size_t)atoll(argv[1]) : (64u << 20);
#ifdef BUSBW_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#else
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "busbw: %s\n", acc_last_error());
    return 1;
  }
  n = acc_state_num_processes(st);
  rank = acc_state_process_index(st);
  impl = acc_state_backend_name(st);
#endif
  float *buf = malloc(maxb + 4);
  big = malloc((maxb + 4) * (size_t)n);
  double *t = malloc(sizeof(double) * 200);
  int rc = 0;
  if (!buf || !t || !big) return 1;
  const char *ops = getenv("BUSBW_OPS");
  size_t minb = getenv("BUSBW_MIN") ? (size_t)atoll(getenv("BUSBW_MIN")) : 4096;
  if (!ops || !*ops) ops = "all_reduce";
  if (minb < 4) minb = 4;
  if (rank == 0) printf("# busbw %s, %d processes\n", impl, n);
  static const char *const names[3] = {"all_reduce", "broadcast", "all_gather"};
  for (int o = 0; o < 3 && !rc; o++) {
    if (!strstr(ops, names[o])) continue;
    int (*fn)(float *, size_t) = o == 0 ? ar : o == 1 ? bc : ag;
    for (size_t bytes = minb; bytes <= maxb && !rc; bytes *= 4) {
      size_t count = bytes / 4;
      int it = iters(bytes);
      for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
      if ((rc = fn(buf, count)) != 0) break;
      /* the first call's result: the sum of rank + 1; rank 0's 1; rank r's block r + 1 */
      float want = o == 0 ? (float)n * (float)(n + 1) / 2.0f : 1.0f;
      float got = o == 2 ? big[(size_t)(n - 1) * count] : buf[count - 1];
      if (o == 2) want = (float)n;
      if (buf[0] != (o == 2 ? (float)(rank + 1) : want) || got != want) {
        fprintf(stderr, "busbw: rank %d: %s gave %g, expected %g\n", rank, names[o], (double)got,
                (double)want);
        rc = 1;
        break;
      }
      for (int w = 0; w < 3 && !rc; w++) rc = fn(buf, count);
      for (int i = 0; i < it && !rc; i++) {
        double t0 = now();
        rc = fn(buf, count);
        t[i] = now() - t0;
      }
      if (rc || (rc = max_times(t, it)) != 0) break;
      qsort(t, (size_t)it, sizeof *t, cmp);
      double med = t[it / 2], alg = (double)bytes / med / 1e9;
      double f = o == 0 ? 2.0 * (n - 1) / n : o == 1 ? 1.0 : (double)(n - 1) / n;
      if (rank == 0)
        printf("%s %zu %zu %.1f %.3f %.3f\n", names[o], bytes, count, med * 1e6, alg, alg * f);
      fflush(stdout);
    }
  }
  if (rc) fprintf(stderr, "busbw: rank %d failed\n", rank);
#ifdef BUSBW_MPI
  MPI_Finalize();
#else
  if (rc) fprintf(stderr, "busbw: %s\n", acc_last_error());
  acc_state_destroy(st);
#endif
  free(buf);
  free(big);
  free(t);
  return rc;
}
