/* The shared-memory backend's algorithms (src/backend/shm_algo.c), under whatever
 * ACCELERATE_SHM_ALGO_ALL_REDUCE / _ALL_GATHER force (CMake runs it with each, at 3, 5, 8 and 16
 * processes):
 *   - all_reduce and reduce of inexact floats (f32, f64, bf16, f16 SUM; f32 MAX) at sizes on both
 *     sides of every threshold of the table give exactly the bits of the rank-order reduction
 *     (x0 op x1 op ... elementwise), which every rank computes locally from every rank's data:
 *     so every algorithm gives the same bits, and a change of the table never changes a result;
 *   - all_gather and gather of blocks of odd sizes give every rank's bytes in place;
 *   - the table itself (rank 0): every process count and size picks an algorithm of the op, the
 *     one-step limit never grows with the process count, forcing wins over the table.
 * Usage: test_dist_shm_algo [chunk_bytes] (ACCELERATE_SHM_CHUNK_BYTES before joining). */
#include <stdint.h>

#include "acc_test.h"
#include "backend/shm_impl.h"
#include "core/internal.h"

static int N, R;

static uint64_t mix(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* Rank r's element i: a float with a full mantissa in [-1, 1) times a power of two, so sums
 * round. */
static double val(int r, size_t i, int salt) {
  uint64_t h = mix(((uint64_t)r << 40) ^ ((uint64_t)i << 4) ^ (uint64_t)salt);
  double m = (double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0;
  return m * (double)(1u << (h & 7));
}

static void fill(acc_dtype dt, void *b, size_t count, int r, int salt) {
  for (size_t i = 0; i < count; i++) {
    double v = val(r, i, salt);
    switch (dt) {
      case ACC_F32: ((float *)b)[i] = (float)v; break;
      case ACC_F64: ((double *)b)[i] = v; break;
      case ACC_F16: ((uint16_t *)b)[i] = acc__f32_to_f16((float)v); break;
      default: ((uint16_t *)b)[i] = acc__f32_to_bf16((float)v); break;
    }
  }
}

static void check_reduce(acc_state *st, acc_dtype dt, acc_op op, size_t count, int salt) {
  size_t nb = count * acc_dtype_size(dt);
  uint8_t *want = malloc(nb), *x = malloc(nb), *send = malloc(nb), *recv = malloc(nb + 1);
  fill(dt, want, count, 0, salt);
  for (int r = 1; r < N; r++) { /* rank order, as the algorithms promise */
    fill(dt, x, count, r, salt);
    acc__reduce_inplace(want, x, count, dt, op);
  }
  fill(dt, send, count, R, salt);
  memset(recv, 0x5A, nb + 1);
  CHECK_OK(acc_all_reduce(st, send, recv, count, dt, op));
  CHECK(memcmp(recv, want, nb) == 0, "all_reduce %s %s count %zu: not the rank-order bits",
        acc_dtype_name(dt), acc_op_name(op), count);
  CHECK(recv[nb] == 0x5A, "all_reduce count %zu wrote past the end", count);
  CHECK_OK(acc_all_reduce(st, send, send, count, dt, op)); /* in place */
  CHECK(memcmp(send, want, nb) == 0, "in-place all_reduce %s count %zu: not the rank-order bits",
        acc_dtype_name(dt), count);
  int root = (int)(count % (size_t)N);
  fill(dt, send, count, R, salt);
  memset(recv, 0x5A, nb);
  CHECK_OK(acc_reduce(st, send, R == root ? recv : NULL, count, dt, op, root));
  if (R == root)
    CHECK(memcmp(recv, want, nb) == 0, "reduce %s count %zu root %d: not the rank-order bits",
          acc_dtype_name(dt), count, root);
  free(want), free(x), free(send), free(recv);
}

static void check_gather(acc_state *st, size_t nbytes) {
  uint8_t *send = malloc(nbytes), *recv = malloc(nbytes * (size_t)N + 1);
  for (size_t i = 0; i < nbytes; i++) send[i] = (uint8_t)mix((uint64_t)R * 1000003u + i);
  memset(recv, 0x77, nbytes * (size_t)N + 1);
  CHECK_OK(acc_all_gather(st, send, recv, nbytes, ACC_U8));
  int bad = -1;
  for (int r = 0; r < N && bad < 0; r++)
    for (size_t i = 0; i < nbytes; i++)
      if (recv[(size_t)r * nbytes + i] != (uint8_t)mix((uint64_t)r * 1000003u + i)) {
        bad = r;
        break;
      }
  CHECK(bad < 0, "all_gather of %zu bytes: rank %d's block differs", nbytes, bad);
  CHECK(recv[nbytes * (size_t)N] == 0x77, "all_gather of %zu bytes wrote past the end", nbytes);
  int root = N - 1;
  memset(recv, 0, nbytes * (size_t)N);
  CHECK_OK(acc_gather(st, send, R == root ? recv : NULL, nbytes, ACC_U8, root));
  if (R == root)
    for (int r = 0; r < N; r++)
      CHECK(recv[(size_t)r * nbytes + nbytes - 1] == (uint8_t)mix((uint64_t)r * 1000003u + nbytes - 1),
            "gather of %zu bytes: rank %d's last byte differs", nbytes, r);
  free(send), free(recv);
}

static void check_table(void) {
  for (int op = 0; op < 2; op++) {
    uint64_t prev_limit = UINT64_MAX;
    for (int n = 2; n <= 64; n++) {
      uint64_t limit = 0; /* the largest size of the cheap algorithm (onestep / slots) */
      for (uint64_t b = 1; b <= (1ull << 28); b *= 2) {
        int a = acc__shm_algo_pick(ACC__SHM_ALGO_AUTO, op, n, b);
        int ok = op == ACC__SHM_OP_ALL_REDUCE
                     ? (a == ACC__SHM_ALGO_ONESTEP || a == ACC__SHM_ALGO_BLOCKS)
                     : (a == ACC__SHM_ALGO_SLOTS || a == ACC__SHM_ALGO_STREAM);
        CHECK(ok, "table: op %d, %d processes, %llu bytes: algorithm %s is not one of the op's",
              op, n, (unsigned long long)b, acc__shm_algo_name(a));
        if (a == ACC__SHM_ALGO_ONESTEP || a == ACC__SHM_ALGO_SLOTS) limit = b;
      }
      CHECK(limit <= prev_limit, "table: op %d: the limit grows from %llu to %llu bytes at %d "
            "processes", op, (unsigned long long)prev_limit, (unsigned long long)limit, n);
      prev_limit = limit;
    }
  }
  CHECK(acc__shm_algo_pick(ACC__SHM_ALGO_BLOCKS, ACC__SHM_OP_ALL_REDUCE, 2, 4) ==
            ACC__SHM_ALGO_BLOCKS, "a forced algorithm does not win over the table");
  /* the 16-process figures this table answers (../shared/reviews/gpu-4.md): 4-16 KiB by blocks */
  CHECK(acc__shm_algo_pick(0, ACC__SHM_OP_ALL_REDUCE, 16, 4096) == ACC__SHM_ALGO_BLOCKS,
        "16 processes, 4 KiB all_reduce: not blocks");
}

int main(int argc, char **argv) {
  if (argc > 1) setenv("ACCELERATE_SHM_CHUNK_BYTES", argv[1], 1);
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  N = acc_state_num_processes(st);
  R = acc_state_process_index(st);
  acc_test_rank = R;
  if (R == 0) {
    check_table();
    const char *a = getenv("ACCELERATE_SHM_ALGO_ALL_REDUCE"), *g = getenv("ACCELERATE_SHM_ALGO_ALL_GATHER");
    fprintf(stderr, "shm_algo: %d processes, all_reduce %s, all_gather %s\n", N, a ? a : "auto",
            g ? g : "auto");
  }
  /* counts around the table's limits (256 f32 = 1 KiB .. 4096 f32 = 16 KiB), uneven blocks,
   * and more than one chunk */
  static const size_t counts[] = {1, 3, 17, 255, 256, 257, 511, 1024, 2049, 4096, 4097, 40000};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    check_reduce(st, ACC_F32, ACC_SUM, counts[k], (int)k);
    check_reduce(st, ACC_F64, ACC_SUM, counts[k], (int)k + 100);
    check_reduce(st, ACC_BF16, ACC_SUM, counts[k], (int)k + 200);
    check_reduce(st, ACC_F16, ACC_SUM, counts[k], (int)k + 300);
    check_reduce(st, ACC_F32, ACC_MAX, counts[k], (int)k + 400);
  }
  static const size_t blocks[] = {1, 5, 1000, 4099, 70001};
  for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) check_gather(st, blocks[k]);
  acc_state_destroy(st);
  fprintf(stderr, "[rank %d] shm_algo: %d checks, %d failed\n", R, acc_test_checks,
          acc_test_failures);
  return acc_test_failures ? 1 : 0;
}
