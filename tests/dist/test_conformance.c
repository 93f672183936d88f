/* Backend conformance, one program for every backend: every collective x dtype x op x count
 * (0, 1, 7, 1001, > 2 shm chunks and not a multiple of the process count), in place and out of
 * place, every root, against references computed locally from deterministic per-rank data.
 * Values are small integers, so every float sum is exact and the expected bits are known.
 * It uses the acc_* API only (plus acc__detect_env for the shm checks), so the same program runs
 *   - under `accelerate launch` (shm backend, or single with one process),
 *   - under mpirun with ACCELERATE_BACKEND=mpi,
 *   - started directly (single backend).
 * The shm-only checks (no segment left in /dev/shm after the rendezvous or after a shared
 * allocation; an all_reduce of shared memory takes the in-place path) run only when the
 * backend is shm. Shared allocations (acc__comm_alloc_shared) run on every backend: where the
 * backend shares no memory the buffers are malloc'ed and the results are the same.
 * ACCELERATE_BACKEND, when set, must be the backend the state picked (with more
 * than one process); ACC_TEST_NPROCS, when set, must be the number of processes.
 * Usage: test_dist_conformance [chunk_bytes]   (sets ACCELERATE_SHM_CHUNK_BYTES before joining;
 * the largest count is derived from it, so a small chunk also keeps the run fast) */
#include <dirent.h>
#include <stdint.h>

#include "acc_test.h"
#include "backend/shm_impl.h" /* shm_be: the steps a registered all_reduce takes */
#include "comm/comm.h"
#include "core/internal.h"
#include "state/state.h"

static int N, R;
static size_t CHUNK = 512 * 1024;

static int64_t ival(int rank, size_t i, int salt) {
  return (int64_t)((rank * 7 + (int64_t)i * 3 + salt) % 11) - 5;
}

static void store(acc_dtype dt, void *buf, size_t i, double v) {
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

/* Value of element i on rank r (u8: shifted to be non-negative). */
static int64_t val(acc_dtype dt, int r, size_t i, int salt) {
  int64_t v = ival(r, i, salt);
  return dt == ACC_U8 ? v + 5 : v;
}

static void fill(acc_dtype dt, void *buf, size_t count, int r, int salt) {
  for (size_t i = 0; i < count; i++) store(dt, buf, i, (double)val(dt, r, i, salt));
}

/* Expected reduction result of element i. */
static void ref_reduce(acc_dtype dt, acc_op op, void *buf, size_t count, int salt) {
  for (size_t i = 0; i < count; i++) {
    int64_t sum = 0, mn = INT64_MAX, mx = INT64_MIN;
    for (int r = 0; r < N; r++) {
      int64_t v = val(dt, r, i, salt);
      sum += v;
      if (v < mn) mn = v;
      if (v > mx) mx = v;
    }
    if (op == ACC_SUM) store(dt, buf, i, (double)sum);
    else if (op == ACC_MIN) store(dt, buf, i, (double)mn);
    else if (op == ACC_MAX) store(dt, buf, i, (double)mx);
    else {
      switch (dt) {
        case ACC_F32: case ACC_F16: case ACC_BF16: store(dt, buf, i, (double)((float)sum / (float)N)); break;
        case ACC_F64: store(dt, buf, i, (double)sum / (double)N); break;
        default: store(dt, buf, i, (double)(sum / N)); break; /* truncating, like C */
      }
    }
  }
}

static size_t first_diff(const void *a, const void *b, size_t nbytes) {
  const uint8_t *x = a, *y = b;
  for (size_t i = 0; i < nbytes; i++)
    if (x[i] != y[i]) return i;
  return (size_t)-1;
}

#define CHECK_BYTES(got, want, nbytes, ...)                                                    \
  do {                                                                                         \
    size_t d_ = first_diff((got), (want), (nbytes));                                           \
    CHECK(d_ == (size_t)-1, "byte %zu of %zu differs (got 0x%02x want 0x%02x): ", d_,         \
          (size_t)(nbytes), d_ == (size_t)-1 ? 0 : ((const uint8_t *)(got))[d_],               \
          d_ == (size_t)-1 ? 0 : ((const uint8_t *)(want))[d_]);                               \
    if (d_ != (size_t)-1) fprintf(stderr, __VA_ARGS__), fprintf(stderr, "\n");               \
  } while (0)

static const acc_dtype dtypes[] = {ACC_F32, ACC_F64, ACC_F16, ACC_BF16, ACC_I32, ACC_I64, ACC_U8};
static const acc_op ops[] = {ACC_SUM, ACC_MEAN, ACC_MIN, ACC_MAX};

static void test_reductions(acc_state *st, acc_dtype dt, size_t count, int salt) {
  size_t es = acc_dtype_size(dt), nb = count * es;
  uint8_t *send = malloc(nb + 1), *recv = malloc(nb + 1), *want = malloc(nb + 1), *want_own = malloc(nb + 1);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    acc_op op = ops[k];
    ref_reduce(dt, op, want, count, salt + (int)k);
    /* out of place */
    fill(dt, send, count, R, salt + (int)k);
    memset(recv, 0xAB, nb + 1);
    CHECK_OK(acc_all_reduce(st, send, recv, count, dt, op));
    CHECK_BYTES(recv, want, nb, "all_reduce %s %s count %zu", acc_dtype_name(dt), acc_op_name(op), count);
    CHECK(recv[nb] == 0xAB, "all_reduce wrote past the end");
    /* in place */
    fill(dt, recv, count, R, salt + (int)k);
    CHECK_OK(acc_all_reduce(st, recv, recv, count, dt, op));
    CHECK_BYTES(recv, want, nb, "in-place all_reduce %s %s count %zu", acc_dtype_name(dt),
                acc_op_name(op), count);
    /* reduce to every root; the root alternates between in place and out of place */
    for (int root = 0; root < N; root++) {
      fill(dt, send, count, R, salt + (int)k);
      memset(recv, 0xCD, nb + 1);
      int inplace = root & 1;
      if (inplace && R == root) memcpy(recv, send, nb);
      CHECK_OK(acc_reduce(st, inplace && R == root ? recv : send, R == root ? recv : NULL, count, dt, op, root));
      if (R == root)
        CHECK_BYTES(recv, want, nb, "reduce %s %s count %zu root %d", acc_dtype_name(dt),
                    acc_op_name(op), count, root);
      CHECK(recv[nb] == 0xCD, "reduce wrote past the end");
      /* the send buffer of every rank but an in-place root is left as it was */
      if (!(inplace && R == root)) {
        fill(dt, want_own, count, R, salt + (int)k);
        CHECK_BYTES(send, want_own, nb, "reduce %s %s count %zu root %d changed rank %d's send buffer",
                    acc_dtype_name(dt), acc_op_name(op), count, root, R);
      }
    }
  }
  /* acc__all_reduce_scaled (the gradient averaging of src/train): the f32 sum, each element then
   * multiplied by the scale; the same bits as acc_all_reduce SUM followed by the multiplication,
   * whether the backend folds it in (shm) or comm.c does it after the call. 1/3 is inexact. */
  const float scales[] = {0.5f, 1.0f / 3.0f};
  for (size_t k = 0; dt == ACC_F32 && k < sizeof scales / sizeof scales[0]; k++) {
    ref_reduce(dt, ACC_SUM, want, count, salt + 9);
    for (size_t i = 0; i < count; i++) ((float *)want)[i] *= scales[k];
    fill(dt, recv, count, R, salt + 9);
    recv[nb] = 0xEF;
    CHECK_OK(acc__all_reduce_scaled(st, (float *)recv, count, scales[k]));
    CHECK_BYTES(recv, want, nb, "all_reduce scaled by %g, count %zu", (double)scales[k], count);
    CHECK(recv[nb] == 0xEF, "scaled all_reduce wrote past the end");
  }
  free(send), free(recv), free(want), free(want_own);
}

/* reduce_scatter: count elements per process, send holds count * N; out of place and in place
 * (recv = this process's block of send). The expected block is the all-reduce reference's. */
static void test_reduce_scatter(acc_state *st, acc_dtype dt, size_t count, int salt) {
  size_t es = acc_dtype_size(dt), nb = count * es, total = count * (size_t)N;
  uint8_t *send = malloc(total * es + 1), *recv = malloc(nb + 1), *want = malloc(total * es + 1);
  uint8_t *orig = malloc(total * es + 1);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    acc_op op = ops[k];
    ref_reduce(dt, op, want, total, salt + (int)k);
    const uint8_t *mine = want + (size_t)R * nb;
    fill(dt, send, total, R, salt + (int)k);
    memcpy(orig, send, total * es);
    memset(recv, 0xAB, nb + 1);
    CHECK_OK(acc_reduce_scatter(st, send, recv, count, dt, op));
    CHECK_BYTES(recv, mine, nb, "reduce_scatter %s %s count %zu", acc_dtype_name(dt),
                acc_op_name(op), count);
    CHECK(recv[nb] == 0xAB, "reduce_scatter wrote past the end");
    CHECK_BYTES(send, orig, total * es, "reduce_scatter %s %s count %zu changed the send buffer",
                acc_dtype_name(dt), acc_op_name(op), count);
    /* in place: the own block of send becomes the result, the other blocks stay */
    send[total * es] = 0xCD;
    CHECK_OK(acc_reduce_scatter(st, send, send + (size_t)R * nb, count, dt, op));
    CHECK_BYTES(send + (size_t)R * nb, mine, nb, "in-place reduce_scatter %s %s count %zu",
                acc_dtype_name(dt), acc_op_name(op), count);
    CHECK(send[total * es] == 0xCD, "in-place reduce_scatter wrote past the end");
    memcpy(orig + (size_t)R * nb, mine, nb);
    CHECK_BYTES(send, orig, total * es, "in-place reduce_scatter %s %s count %zu changed another block",
                acc_dtype_name(dt), acc_op_name(op), count);
  }
  if (count > 0 && N > 1) { /* overlapping but not the in-place form: refused on every process */
    acc_result rc = acc_reduce_scatter(st, send, send + ((size_t)R * nb + es) % (total * es), count, dt, ACC_SUM);
    CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "overlapping reduce_scatter returned %d", (int)rc);
    CHECK(strstr(acc_last_error(), "overlaps") != NULL, "message: %s", acc_last_error());
  }
  free(send), free(recv), free(want), free(orig);
}

static void test_moves(acc_state *st, acc_dtype dt, size_t count, int salt) {
  size_t es = acc_dtype_size(dt), nb = count * es;
  uint8_t *buf = malloc(nb + 1), *want = malloc(nb * (size_t)N + 1), *all = malloc(nb * (size_t)N + 1);
  for (int root = 0; root < N; root++) {
    fill(dt, want, count, root, salt + root);
    if (R == root) memcpy(buf, want, nb);
    else memset(buf, 0x11, nb);
    CHECK_OK(acc_broadcast(st, buf, count, dt, root));
    CHECK_BYTES(buf, want, nb, "broadcast %s count %zu root %d", acc_dtype_name(dt), count, root);
  }
  for (int r = 0; r < N; r++) fill(dt, want + (size_t)r * nb, count, r, salt);
  fill(dt, buf, count, R, salt);
  memset(all, 0x22, nb * (size_t)N + 1);
  CHECK_OK(acc_all_gather(st, buf, all, count, dt));
  CHECK_BYTES(all, want, nb * (size_t)N, "all_gather %s count %zu", acc_dtype_name(dt), count);
  CHECK(all[nb * (size_t)N] == 0x22, "all_gather wrote past the end");
  /* in place: my part already sits at its place in recv */
  memset(all, 0x33, nb * (size_t)N);
  fill(dt, all + (size_t)R * nb, count, R, salt);
  CHECK_OK(acc_all_gather(st, all + (size_t)R * nb, all, count, dt));
  CHECK_BYTES(all, want, nb * (size_t)N, "in-place all_gather %s count %zu", acc_dtype_name(dt), count);
  for (int root = 0; root < N; root++) {
    memset(all, 0x44, nb * (size_t)N);
    CHECK_OK(acc_gather(st, buf, R == root ? all : NULL, count, dt, root));
    if (R == root)
      CHECK_BYTES(all, want, nb * (size_t)N, "gather %s count %zu root %d", acc_dtype_name(dt), count, root);
  }
  free(buf), free(want), free(all);
}

/* Checks acc_all_gather_bytes where rank r sends size_of(r) bytes (value r * 31 + i * 7). */
static void check_gather_bytes(acc_state *st, const size_t *sizes, const char *what) {
  size_t total = 0;
  for (int r = 0; r < N; r++) total += sizes[r];
  uint8_t *mine = malloc(sizes[R] + 1);
  for (size_t i = 0; i < sizes[R]; i++) mine[i] = (uint8_t)(R * 31 + i * 7);
  void *out = NULL;
  size_t *osz = NULL;
  CHECK_OK(acc_all_gather_bytes(st, sizes[R] ? mine : NULL, sizes[R], &out, &osz));
  if (out && osz) {
    size_t at = 0;
    for (int r = 0; r < N; r++) {
      CHECK(osz[r] == sizes[r], "all_gather_bytes (%s) size of rank %d: %zu, want %zu", what, r, osz[r],
            sizes[r]);
      for (size_t i = 0; i < sizes[r] && i < osz[r]; i++) {
        uint8_t w = (uint8_t)(r * 31 + i * 7);
        if (((uint8_t *)out)[at + i] != w) {
          CHECK(0, "all_gather_bytes (%s) rank %d byte %zu: %u, want %u", what, r, i, ((uint8_t *)out)[at + i], w);
          break;
        }
      }
      at += osz[r];
    }
    CHECK(at == total, "all_gather_bytes (%s) total %zu, want %zu", what, at, total);
  } else if (total) {
    CHECK(out && osz, "all_gather_bytes (%s) returned no buffer for %zu bytes", what, total);
  }
  acc_free(out);
  acc_free(osz);
  free(mine);
}

static void test_gather_bytes(acc_state *st, size_t big) {
  size_t sizes[64];
  /* rank 1 sends nothing, the last rank sends more than 2 chunks, the others a few bytes */
  for (int r = 0; r < N; r++) sizes[r] = r == 1 ? 0 : (r == N - 1 && N > 1) ? big : (size_t)(r * 37 + 3) % 50 + 1;
  check_gather_bytes(st, sizes, "uneven");
  /* rank 0 sends nothing, rank r sends (r * 3) % 5 bytes */
  for (int r = 0; r < N; r++) sizes[r] = (size_t)(r * 3) % 5;
  check_gather_bytes(st, sizes, "tiny");
  /* everyone sends more than 2 chunks, each a different size */
  for (int r = 0; r < N; r++) sizes[r] = big + (size_t)r;
  check_gather_bytes(st, sizes, "all large");
  /* everyone sends nothing */
  for (int r = 0; r < N; r++) sizes[r] = 0;
  void *out = NULL;
  size_t *osz = NULL;
  CHECK_OK(acc_all_gather_bytes(st, NULL, 0, &out, &osz));
  if (osz)
    for (int r = 0; r < N; r++) CHECK(osz[r] == 0, "size %zu", osz[r]);
  acc_free(out);
  acc_free(osz);
}

/* The segment name is unlinked once every rank attached: nothing of this job in /dev/shm. */
static void test_no_segment_left(acc_state *st) {
  CHECK_OK(acc_barrier(st));
  acc__env_info e;
  REQUIRE_OK(acc__detect_env(&e));
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  struct dirent *ent;
  while ((ent = readdir(d)))
    CHECK(!(strncmp(ent->d_name, "acc-", 4) == 0 && strstr(ent->d_name, e.job_id)),
          "/dev/shm/%s still exists after the rendezvous", ent->d_name);
  closedir(d);
}

/* Shared allocations (registered buffers): every all_reduce of a buffer inside one, in place, at
 * an offset that differs between the processes, gives the reference bits, for every dtype and
 * op and the scaled f32 sum; on shm in two steps (the in-place path), whatever the chunk. When
 * only process 0's buffer is shared the copy path runs (same bits). Counts above the one-step
 * size (16 KiB) and an odd count that does not divide by N. */
static void test_shared(acc_state *st, size_t big) {
  int shm = strcmp(acc_state_backend_name(st), "shm") == 0 && N > 1;
  size_t cap = big * 8 + 256;
  uint8_t *mem = NULL, *priv = malloc(cap), *want = malloc(cap);
  CHECK_OK(acc__comm_alloc_shared(st, cap, (void **)&mem));
  CHECK(!shm || mem != NULL, "shm backend: alloc_shared gave no memory");
  int ours = mem != NULL;
  if (!mem) mem = calloc(1, cap);
  for (size_t i = 0; i < cap; i++)
    if (mem[i] != 0) {
      CHECK(0, "shared allocation not zeroed at byte %zu", i);
      break;
    }
  if (shm) { /* more than /dev/shm holds: fails on every process alike, the group stays usable */
    void *huge = (void *)1;
    acc_result rc = acc__comm_alloc_shared(st, (size_t)1 << 50, &huge);
    CHECK(rc == ACC_ERR_NOMEM && huge == NULL, "alloc_shared of 1 PiB: %s, %p (expected NOMEM, NULL): %s",
          acc_result_string(rc), huge, acc_last_error());
    CHECK(strstr(acc_last_error(), "/dev/shm") != NULL, "the error does not name /dev/shm: %s", acc_last_error());
    CHECK_OK(acc_barrier(st));
  }
  if (shm) test_no_segment_left(st); /* each process unlinked its file */
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
    acc_dtype dt = dtypes[k];
    size_t es = acc_dtype_size(dt), count = (16384 / es + 5) | 1;
    if (count % (size_t)N == 0) count += 2;
    if (count * es > big * 4) count = big * 4 / es;
    uint8_t *buf = mem + (size_t)(R % 3) * 3 * es; /* a different offset per process */
    for (size_t j = 0; j < sizeof ops / sizeof ops[0]; j++) {
      for (int mixed = 0; mixed < 2; mixed++) {
        uint8_t *b = mixed && R != 0 ? priv : buf;
        ref_reduce(dt, ops[j], want, count, (int)(k + j + 40));
        fill(dt, b, count, R, (int)(k + j + 40));
        b[count * es] = 0x5A;
        uint64_t c0 = shm ? ((shm_be *)st->be)->counter : 0;
        CHECK_OK(acc_all_reduce(st, b, b, count, dt, ops[j]));
        CHECK_BYTES(b, want, count * es, "all_reduce of %s memory, %s %s count %zu",
                    mixed ? "partly shared" : "shared", acc_dtype_name(dt), acc_op_name(ops[j]), count);
        CHECK(b[count * es] == 0x5A, "all_reduce of shared memory wrote past the end");
        if (shm && !mixed) /* the descriptor step, the step after the reduction */
          CHECK(((shm_be *)st->be)->counter - c0 == 2, "shared all_reduce %s took %llu steps, not 2",
                acc_dtype_name(dt), (unsigned long long)(((shm_be *)st->be)->counter - c0));
      }
    }
  }
  size_t count = big | 1;
  float *f = (float *)(mem + 4 * (size_t)R);
  ref_reduce(ACC_F32, ACC_SUM, want, count, 77);
  for (size_t i = 0; i < count; i++) ((float *)want)[i] *= 1.0f / 3.0f;
  fill(ACC_F32, f, count, R, 77);
  CHECK_OK(acc__all_reduce_scaled(st, f, count, 1.0f / 3.0f));
  CHECK_BYTES(f, want, count * 4, "scaled all_reduce of shared memory, count %zu", count);
  if (ours)
    CHECK(acc__comm_free_shared(st, mem) == 1, "free_shared did not know its allocation");
  else
    free(mem);
  CHECK(acc__comm_free_shared(st, priv) == 0, "free_shared claimed malloc'ed memory");
  /* after the free: the same call on private memory takes the copy path */
  fill(ACC_F32, priv, count, R, 78);
  ref_reduce(ACC_F32, ACC_SUM, want, count, 78);
  CHECK_OK(acc_all_reduce(st, priv, priv, count, ACC_F32, ACC_SUM));
  CHECK_BYTES(priv, want, count * 4, "all_reduce after free_shared, count %zu", count);
  free(priv), free(want);
}

int main(int argc, char **argv) {
  if (argc > 1) setenv("ACCELERATE_SHM_CHUNK_BYTES", argv[1], 1);
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  N = acc_state_num_processes(st);
  R = acc_state_process_index(st);
  acc_test_rank = R;
  const char *backend = acc_state_backend_name(st);
  if (R == 0) fprintf(stderr, "conformance: %d processes, backend %s\n", N, backend);
  const char *env_n = getenv("ACC_TEST_NPROCS");
  if (env_n) CHECK(atoi(env_n) == N, "expected %s processes, the state has %d", env_n, N);
  /* ACCELERATE_BACKEND names the backend to check; unset (or auto) under `accelerate launch`
   * means shm */
  const char *want_backend = getenv("ACCELERATE_BACKEND");
  if (!want_backend || !*want_backend || strcmp(want_backend, "auto") == 0)
    want_backend = getenv("OMPI_COMM_WORLD_SIZE") ? backend : "shm";
  if (N > 1) CHECK(strcmp(backend, want_backend) == 0, "backend %s, expected %s", backend, want_backend);
  const char *cb = getenv("ACCELERATE_SHM_CHUNK_BYTES");
  if (cb) CHUNK = (size_t)atol(cb);
  if (strcmp(backend, "shm") == 0) test_no_segment_left(st);
  /* Every multi-process backend has a reduce_scatter of its own: without one comm.c would
   * all-reduce the whole buffer (size times the bytes) and keep a block. */
  if (N > 1)
    CHECK(st->be->ops->reduce_scatter != NULL,
          "backend %s has no reduce_scatter of its own (comm.c's all_reduce fallback would run)",
          backend);
  for (int i = 0; i < 3; i++) CHECK_OK(acc_barrier(st));
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
    acc_dtype dt = dtypes[k];
    size_t es = acc_dtype_size(dt);
    size_t big = 2 * CHUNK / es + 5;
    while (N > 1 && big % (size_t)N == 0) big += 2; /* odd and not a multiple of N */
    size_t counts[] = {0, 1, 7, 1001, big};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      test_reductions(st, dt, counts[c], (int)(k + c));
      test_moves(st, dt, counts[c], (int)(k * 3 + c));
      test_reduce_scatter(st, dt, counts[c], (int)(k * 5 + c));
    }
  }
  test_gather_bytes(st, 2 * CHUNK + 3);
  test_shared(st, 2 * CHUNK / 4 + 5);
  CHECK_OK(acc_barrier(st));
  acc_state_destroy(st);
  return acc_test_finish("conformance");
}
