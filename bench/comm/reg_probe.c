/* reg_probe: what an all-reduce of gradients that already live in memory every rank maps would
 * save over the backend's all_reduce of a private buffer (the "registered buffers" of issue 21).
 *
 * Started by the launcher with 2 or more processes on one machine. Each process owns a buffer
 * of `bytes` floats in one shared file (created by process 0 in /dev/shm, mapped by all after a
 * barrier). Each round: a "backward" pass writes the process's gradients (a streaming write of
 * the whole buffer, as backward leaves them), then the gradients are averaged, then an
 * "optimizer" reads them. Three ways to average, timed separately, interleaved by round:
 *   lib:   acc_all_reduce of a private buffer (ACC_SUM, then * 1/n, as the accelerator does)
 *   reg:   in place in the shared buffers: meet; reduce my block from every rank's buffer into
 *          mine (scaled); meet; copy the other blocks from their owners; meet
 *   regnt: as reg, the copies of the others' blocks with non-temporal stores
 *   push:  meet; reduce my block from every rank's buffer into mine and, with non-temporal
 *          stores, into every other rank's buffer; meet (two steps, each byte written once)
 *   libreg: the library's version of push: gradients from acc__comm_alloc_shared, averaged by
 *          acc__all_reduce_scaled (what the accelerator does with acc_accelerator_alloc_shared)
 * Prints the median all-reduce time of each and of the whole round, in microseconds.
 *
 * Run: accelerate launch -n 2 reg_probe [bytes] (default 814,120, the main job's gradients).
 * Not a test. */
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/shm_impl.h" /* acc__shm_copy_nt */
#include "comm/comm.h"      /* acc__comm_alloc_shared, acc__all_reduce_scaled */
#include "bench_common.h"

enum { ROUNDS = 400, WARM = 40, MODES = 5 };

static _Atomic long *marks;
static int me, np;

static void meet(long k) {
  atomic_store_explicit(&marks[me * 16], k, memory_order_release);
  for (int r = 0; r < np; r++)
    for (int spin = 0; atomic_load_explicit(&marks[r * 16], memory_order_acquire) < k; spin++)
      if (spin > 4096) sched_yield();
}

static void backward(float *g, size_t n, int round) {
  float v = (float)(me + 1) * 0.25f + (float)round;
  for (size_t i = 0; i < n; i++) g[i] = v + (float)(i & 1023);
}

static double optimizer(const float *g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += g[i];
  return s;
}

/* out[lo, hi) = scale * the sum of every rank's g[r][lo, hi): pairwise, so that it vectorizes. */
static void reduce_block(float *const *g, float *out, size_t lo, size_t hi, float scale) {
  const float *restrict a = g[0], *restrict b = np > 1 ? g[1] : g[0];
  float *restrict o = out;
  if (np == 1) {
    for (size_t j = lo; j < hi; j++) o[j] = a[j] * scale;
    return;
  }
  if (np == 2) {
    for (size_t j = lo; j < hi; j++) o[j] = (a[j] + b[j]) * scale;
    return;
  }
  float tmp[2048];
  for (size_t c = lo; c < hi; c += 2048) {
    size_t e = c + 2048 < hi ? c + 2048 : hi;
    for (size_t j = c; j < e; j++) tmp[j - c] = a[j] + b[j];
    for (int r = 2; r < np; r++) {
      const float *restrict x = g[r];
      for (size_t j = c; j < e; j++) tmp[j - c] += x[j];
    }
    for (size_t j = c; j < e; j++) o[j] = tmp[j - c] * scale;
  }
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 814120;
  size_t n = bytes / sizeof(float);
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "reg_probe: %s\n", acc_last_error());
    return 1;
  }
  np = acc_state_num_processes(st);
  me = acc_state_process_index(st);
  size_t stride = (n * sizeof(float) + 4095) & ~(size_t)4095;
  size_t total = 4096 + stride * (size_t)np;
  char path[128];
  const char *port = getenv("MASTER_PORT");
  snprintf(path, sizeof path, "/dev/shm/acc-reg-probe-%s", port ? port : "0");
  if (me == 0) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)total) != 0) return 1;
    close(fd);
  }
  acc_barrier(st);
  int fd = open(path, O_RDWR);
  uint8_t *map = fd < 0 ? MAP_FAILED : mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 1;
  close(fd);
  acc_barrier(st);
  if (me == 0) unlink(path);
  marks = (_Atomic long *)map;
  float *g[64];
  for (int r = 0; r < np && r < 64; r++) g[r] = (float *)(map + 4096 + stride * (size_t)r);
  float *priv = malloc(bytes), *mine = g[me], *shared = NULL;
  if (acc__comm_alloc_shared(st, bytes, (void **)&shared) != ACC_OK || !shared) {
    fprintf(stderr, "reg_probe: no shared allocation: %s\n", acc_last_error());
    return 1;
  }
  size_t blk = (n + (size_t)np - 1) / (size_t)np;
  float scale = 1.0f / (float)np;
  double *t[MODES], *w[MODES], sink = 0;
  for (int m = 0; m < MODES; m++) t[m] = malloc(sizeof(double) * ROUNDS), w[m] = malloc(sizeof(double) * ROUNDS);
  long k = 0;
  for (int i = 0; i < WARM + ROUNDS; i++) {
    for (int m = 0; m < MODES; m++) {
      acc_barrier(st);
      double t0 = bench_now();
      float *buf = m == 0 ? priv : m == 4 ? shared : mine;
      backward(buf, n, i);
      double t1 = bench_now();
      if (m == 4) {
        acc__all_reduce_scaled(st, shared, n, scale);
      } else if (m == 0) {
        acc_all_reduce(st, priv, priv, n, ACC_F32, ACC_SUM);
        for (size_t j = 0; j < n; j++) priv[j] *= scale;
      } else {
        meet(++k);
        size_t lo = (size_t)me * blk, hi = lo + blk < n ? lo + blk : n;
        reduce_block(g, mine, lo, hi, scale);
        if (m == 3) {
          for (int r = 0; r < np; r++)
            if (r != me && hi > lo) acc__shm_copy_nt(g[r] + lo, mine + lo, (hi - lo) * sizeof(float));
          meet(++k);
          goto done;
        }
        meet(++k);
        for (int r = 0; r < np; r++) {
          if (r == me) continue;
          size_t a = (size_t)r * blk, b = a + blk < n ? a + blk : n;
          if (a >= b) continue;
          if (m == 2)
            acc__shm_copy_nt(mine + a, g[r] + a, (b - a) * sizeof(float));
          else
            memcpy(mine + a, g[r] + a, (b - a) * sizeof(float));
        }
        meet(++k);
      }
    done:;
      double t2 = bench_now();
      sink += optimizer(buf, n);
      double t3 = bench_now();
      if (i >= WARM) t[m][i - WARM] = t2 - t1, w[m][i - WARM] = t3 - t0;
    }
  }
  static const char *names[MODES] = {"lib", "reg", "regnt", "push", "libreg"};
  if (me == 0) {
    bench_machine();
    printf("reg_probe: %d processes, %zu bytes, %d rounds (sink %g)\n", np, bytes, ROUNDS, sink);
    for (int m = 0; m < MODES; m++) {
      qsort(t[m], ROUNDS, sizeof(double), bench_cmp);
      qsort(w[m], ROUNDS, sizeof(double), bench_cmp);
      printf("  %-6s all-reduce %8.1f us   round %8.1f us\n", names[m], t[m][ROUNDS / 2] * 1e6,
             w[m][ROUNDS / 2] * 1e6);
    }
  }
  acc_state_destroy(st);
  return 0;
}
