/* Backend conformance: every collective x dtype x op at sizes 0, 1, odd (1001) and 5 MiB,
 * against a reference computed locally from the deterministic input of every rank.
 * Uses only the acc_* API, so it runs under any backend (MPI under mpirun, shm under
 * `accelerate launch`, single in one process).
 *
 * Inputs are small integers (|v| <= 30, u8: 0..60), so sums over 4 ranks are exact in every
 * dtype (bf16 holds integers up to 256 exactly) and the reference does not depend on the order
 * in which the backend reduces. */
#include <math.h>
#include <stdint.h>

#include "acc_test.h"
#include "internal.h"

static const acc_dtype k_dtypes[] = {ACC_F32, ACC_F64, ACC_F16, ACC_BF16, ACC_I32, ACC_I64, ACC_U8};
static const acc_op k_ops[] = {ACC_SUM, ACC_MEAN, ACC_MIN, ACC_MAX};

static double input(int rank, size_t i, acc_dtype dt) {
  long v = (long)((i * 7 + (size_t)rank * 13) % 61);
  return dt == ACC_U8 ? (double)v : (double)(v - 30);
}

static void put(void *buf, size_t i, acc_dtype dt, double v) {
  switch (dt) {
    case ACC_F32: ((float *)buf)[i] = (float)v; break;
    case ACC_F64: ((double *)buf)[i] = v; break;
    case ACC_F16: ((uint16_t *)buf)[i] = acc__f32_to_f16((float)v); break;
    case ACC_BF16: ((uint16_t *)buf)[i] = acc__f32_to_bf16((float)v); break;
    case ACC_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ACC_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ACC_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: break;
  }
}

static double get(const void *buf, size_t i, acc_dtype dt) {
  switch (dt) {
    case ACC_F32: return ((const float *)buf)[i];
    case ACC_F64: return ((const double *)buf)[i];
    case ACC_F16: return acc__f16_to_f32(((const uint16_t *)buf)[i]);
    case ACC_BF16: return acc__bf16_to_f32(((const uint16_t *)buf)[i]);
    case ACC_I32: return ((const int32_t *)buf)[i];
    case ACC_I64: return (double)((const int64_t *)buf)[i];
    case ACC_U8: return ((const uint8_t *)buf)[i];
    default: return NAN;
  }
}

/* The expected reduction of element i over n ranks, rounded to dt like the library does. */
static double expected(int n, size_t i, acc_dtype dt, acc_op op) {
  double acc = input(0, i, dt);
  for (int r = 1; r < n; r++) {
    double v = input(r, i, dt);
    if (op == ACC_MIN) acc = v < acc ? v : acc;
    else if (op == ACC_MAX) acc = v > acc ? v : acc;
    else acc += v;
  }
  if (op != ACC_MEAN) return acc;
  uint64_t tmp = 0;
  switch (dt) {
    case ACC_I32: case ACC_I64: case ACC_U8: return (double)((long long)acc / n);
    case ACC_F32: return (float)((float)acc / (float)n);
    case ACC_F64: return acc / n;
    case ACC_F16: put(&tmp, 0, dt, (float)acc / (float)n); return get(&tmp, 0, dt);
    case ACC_BF16: put(&tmp, 0, dt, (float)acc / (float)n); return get(&tmp, 0, dt);
    default: return NAN;
  }
}

/* Compares count elements; reports the first mismatch only. */
static int same(const char *what, const void *got, size_t count, acc_dtype dt, double (*want)(size_t, void *),
                void *ctx) {
  for (size_t i = 0; i < count; i++) {
    double g = get(got, i, dt), w = want(i, ctx);
    if (g != w) {
      CHECK(g == w, "%s dtype %s count %zu: element %zu is %g, expected %g", what, acc_dtype_name(dt),
            count, i, g, w);
      return 0;
    }
  }
  acc_test_checks++;
  return 1;
}

typedef struct want_ctx { int n, rank; acc_dtype dt; acc_op op; size_t count; } want_ctx;
static double want_reduce(size_t i, void *c) {
  want_ctx *w = c;
  return expected(w->n, i, w->dt, w->op);
}
static double want_own(size_t i, void *c) {
  want_ctx *w = c;
  return input(w->rank, i, w->dt);
}
static double want_gathered(size_t i, void *c) {
  want_ctx *w = c;
  return input((int)(i / w->count), i % w->count, w->dt);
}

int main(void) {
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  const int n = acc_state_num_processes(st), rank = acc_state_process_index(st);
  acc_test_rank = rank;
  const char *env_n = getenv("ACC_TEST_NPROCS");
  if (env_n) CHECK(atoi(env_n) == n, "expected %s processes, the state has %d", env_n, n);
  if (rank == 0) fprintf(stderr, "conformance: %d processes, backend %s\n", n, acc_state_backend_name(st));

  CHECK_OK(acc_barrier(st));
  size_t sizes[4] = {0, 1, 1001, 0};
  for (size_t di = 0; di < sizeof k_dtypes / sizeof *k_dtypes; di++) {
    acc_dtype dt = k_dtypes[di];
    size_t es = acc_dtype_size(dt);
    sizes[3] = (size_t)5 * 1024 * 1024 / es;
    for (int si = 0; si < 4; si++) {
      size_t count = sizes[si];
      size_t alloc = count ? count : 1;
      unsigned char *send = malloc(alloc * es), *recv = malloc(alloc * es);
      unsigned char *all = malloc(alloc * es * (size_t)n);
      if (!send || !recv || !all) {
        fprintf(stderr, "out of memory\n");
        return 1;
      }
      for (size_t i = 0; i < count; i++) put(send, i, dt, input(rank, i, dt));
      want_ctx w = {n, rank, dt, ACC_SUM, count};

      for (size_t oi = 0; oi < 4; oi++) {
        w.op = k_ops[oi];
        char what[96];
        snprintf(what, sizeof what, "all_reduce %s", acc_op_name(w.op));
        memset(recv, 0xAB, alloc * es);
        CHECK_OK(acc_all_reduce(st, send, recv, count, dt, w.op));
        same(what, recv, count, dt, want_reduce, &w);
        /* in place */
        memcpy(recv, send, count * es);
        CHECK_OK(acc_all_reduce(st, recv, recv, count, dt, w.op));
        snprintf(what, sizeof what, "all_reduce in place %s", acc_op_name(w.op));
        same(what, recv, count, dt, want_reduce, &w);
        /* reduce to the last rank, then to rank 0 in place */
        int root = n - 1;
        memset(recv, 0xAB, alloc * es);
        CHECK_OK(acc_reduce(st, send, rank == root ? recv : NULL, count, dt, w.op, root));
        snprintf(what, sizeof what, "reduce to %d %s", root, acc_op_name(w.op));
        if (rank == root) same(what, recv, count, dt, want_reduce, &w);
        memcpy(recv, send, count * es);
        CHECK_OK(acc_reduce(st, recv, recv, count, dt, w.op, 0));
        snprintf(what, sizeof what, "reduce in place to 0 %s", acc_op_name(w.op));
        if (rank == 0) same(what, recv, count, dt, want_reduce, &w);
        else same("reduce leaves non-root send untouched", recv, count, dt, want_own, &w);
      }
      /* broadcast from every root */
      for (int root = 0; root < n; root++) {
        want_ctx wb = w;
        wb.rank = root;
        memcpy(recv, send, count * es);
        CHECK_OK(acc_broadcast(st, recv, count, dt, root));
        char what[64];
        snprintf(what, sizeof what, "broadcast from %d", root);
        same(what, recv, count, dt, want_own, &wb);
      }
      /* all_gather, in place too, and gather to the last rank */
      memset(all, 0xAB, alloc * es * (size_t)n);
      CHECK_OK(acc_all_gather(st, send, all, count, dt));
      same("all_gather", all, count * (size_t)n, dt, want_gathered, &w);
      memset(all, 0xAB, alloc * es * (size_t)n);
      memcpy(all + (size_t)rank * count * es, send, count * es);
      CHECK_OK(acc_all_gather(st, all + (size_t)rank * count * es, all, count, dt));
      same("all_gather in place", all, count * (size_t)n, dt, want_gathered, &w);
      memset(all, 0xAB, alloc * es * (size_t)n);
      CHECK_OK(acc_gather(st, send, rank == n - 1 ? all : NULL, count, dt, n - 1));
      if (rank == n - 1) same("gather", all, count * (size_t)n, dt, want_gathered, &w);
      free(send);
      free(recv);
      free(all);
    }
  }

  /* all_gather_bytes with uneven sizes: rank r sends (r * 3) % 5 bytes (rank 0 sends none),
   * then 5 MiB + r bytes. */
  for (int big = 0; big < 2; big++) {
    size_t mine = big ? ((size_t)5 << 20) + (size_t)rank : (size_t)(rank * 3) % 5;
    unsigned char *buf = malloc(mine ? mine : 1);
    for (size_t i = 0; i < mine; i++) buf[i] = (unsigned char)(rank * 31 + i);
    void *out = NULL;
    size_t *out_sizes = NULL;
    CHECK_OK(acc_all_gather_bytes(st, mine ? buf : NULL, mine, &out, &out_sizes));
    if (out && out_sizes) {
      size_t off = 0;
      int ok = 1;
      for (int r = 0; r < n && ok; r++) {
        size_t want = big ? ((size_t)5 << 20) + (size_t)r : (size_t)(r * 3) % 5;
        CHECK(out_sizes[r] == want, "all_gather_bytes: rank %d size %zu, expected %zu", r, out_sizes[r], want);
        for (size_t i = 0; i < want && ok; i++)
          if (((unsigned char *)out)[off + i] != (unsigned char)(r * 31 + i)) {
            CHECK(0, "all_gather_bytes: byte %zu of rank %d differs", i, r);
            ok = 0;
          }
        off += want;
      }
    }
    acc_free(out);
    acc_free(out_sizes);
    free(buf);
  }
  CHECK_OK(acc_barrier(st));
  acc_state_destroy(st);
  return acc_test_finish("conformance");
}
