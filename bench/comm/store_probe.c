/* store_probe: why the shared-memory backend writes into its segment with non-temporal stores.
 *
 * Two processes, bound to CPUs 0 and 1, share a mapping with one buffer per process. Each round:
 * both write their own buffer at once (from a private source), meet, then both read the other's
 * buffer into a private destination, meet. The first phase is what a collective's copy into its
 * slot does: the lines it overwrites were read by the other process one round before. Prints
 * per buffer size the median time of each phase with the backend's two copies, ordinary stores
 * (acc__shm_copy) and non-temporal stores (acc__shm_copy_nt: SSE2 movntdq + sfence), as GB/s.
 *
 * Then the round trip of one cache line between the two processes (each waits for the other's
 * counter on its own line, then bumps its own): what any collective of a few bytes costs at
 * least here, whatever its protocol.
 *
 * Run: store_probe [max_bytes] (sizes 64 KiB, x4, up to max_bytes; default 4 MiB). Not a test. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "backend/shm_impl.h" /* acc__shm_copy, acc__shm_copy_nt: the library's own copies */
#include "bench_common.h"

enum { ROUNDS = 200, WARM = 20 };

/* Both processes publish k, then wait for the other's k. */
static void meet(_Atomic long *mark, int me, long k) {
  atomic_store(&mark[me * 16], k);
  while (atomic_load(&mark[(1 - me) * 16]) < k) sched_yield();
}

/* One process's rounds; its medians (write, read) go to out[0..1]. */
static void rounds(uint8_t *map, size_t n, int me, int nt, double *out) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(me, &set);
  sched_setaffinity(0, sizeof set, &set);
  _Atomic long *mark = (_Atomic long *)map;
  uint8_t *mine = map + 4096 + (size_t)me * n, *other = map + 4096 + (size_t)(1 - me) * n;
  uint8_t *priv = malloc(n);
  double *tw = malloc(sizeof(double) * ROUNDS), *tr = malloc(sizeof(double) * ROUNDS);
  if (!priv || !tw || !tr) exit(1);
  memset(priv, me + 1, n);
  long k = 0;
  for (int i = 0; i < WARM + ROUNDS; i++) {
    meet(mark, me, ++k);
    double t0 = bench_now();
    if (nt)
      acc__shm_copy_nt(mine, priv, n);
    else
      acc__shm_copy(mine, priv, n);
    double t1 = bench_now();
    meet(mark, me, ++k);
    double t2 = bench_now();
    memcpy(priv, other, n);
    double t3 = bench_now();
    if (i >= WARM) tw[i - WARM] = t1 - t0, tr[i - WARM] = t3 - t2;
  }
  qsort(tw, ROUNDS, sizeof *tw, bench_cmp);
  qsort(tr, ROUNDS, sizeof *tr, bench_cmp);
  out[0] = tw[ROUNDS / 2], out[1] = tr[ROUNDS / 2];
  free(priv), free(tw), free(tr);
}

/* Ping-pong of a counter between the two processes, ROUNDS_PP times; process 0 reports the mean
 * round trip in ns through out. */
enum { ROUNDS_PP = 200000 };
static void ping_pong(uint8_t *map, int me, double *out) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(me, &set);
  sched_setaffinity(0, sizeof set, &set);
  _Atomic long *mine = (_Atomic long *)(map + 64 * (me + 1)), *other = (_Atomic long *)(map + 64 * (2 - me));
  double t0 = bench_now();
  for (long i = 1; i <= ROUNDS_PP; i++) {
    if (me == 0) atomic_store_explicit(mine, i, memory_order_release);
    while (atomic_load_explicit(other, memory_order_acquire) < i) {
    }
    if (me == 1) atomic_store_explicit(mine, i, memory_order_release);
  }
  if (me == 0) *out = (bench_now() - t0) / ROUNDS_PP * 1e9;
}

int main(int argc, char **argv) {
  size_t maxb = argc > 1 ? (size_t)atoll(argv[1]) : (4u << 20);
  bench_machine();
  printf("# 2 processes on CPUs 0 and 1, both writing their own buffer at once, then reading the "
         "other's; medians of %d rounds, GB/s\n", ROUNDS);
  printf("%-10s %14s %14s %14s %14s\n", "size(B)", "write plain", "write nt", "read (plain)",
         "read (nt)");
  for (size_t n = 65536; n <= maxb; n *= 4) {
    double res[2][2][2] = {{{0}}}; /* [nt][rank][write, read] */
    for (int nt = 0; nt < 2; nt++) {
      size_t bytes = 4096 + 2 * n;
      uint8_t *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (map == MAP_FAILED) return 1;
      memset(map, 0, bytes);
      double *shared = (double *)(map + 2048); /* the children's medians */
      for (int me = 0; me < 2; me++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
          rounds(map, n, me, nt, shared + 2 * me);
          _exit(0);
        }
      }
      int ok = 1, st;
      for (int me = 0; me < 2; me++) ok &= wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok) return 1;
      for (int me = 0; me < 2; me++) res[nt][me][0] = shared[2 * me], res[nt][me][1] = shared[2 * me + 1];
      munmap(map, bytes);
    }
    double g[2][2];
    for (int nt = 0; nt < 2; nt++)
      for (int k = 0; k < 2; k++) /* the slower process of the two */
        g[nt][k] = (double)n / (res[nt][0][k] > res[nt][1][k] ? res[nt][0][k] : res[nt][1][k]) / 1e9;
    printf("%-10zu %14.1f %14.1f %14.1f %14.1f\n", n, g[0][0], g[1][0], g[0][1], g[1][1]);
  }
  uint8_t *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 1;
  memset(map, 0, 4096);
  double *rt = (double *)(map + 2048);
  for (int me = 0; me < 2; me++) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      ping_pong(map, me, rt);
      _exit(0);
    }
  }
  int st;
  for (int me = 0; me < 2; me++)
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
  printf("# cache-line round trip between CPUs 0 and 1: %.0f ns (mean of %d)\n", *rt, ROUNDS_PP);
  munmap(map, 4096);
  return 0;
}
