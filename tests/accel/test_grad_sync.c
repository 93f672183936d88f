/* The gradient buckets (internal API src/train/grad_sync.h), run by the launcher at 1..4 processes:
 *  - bucket count for a given cap (reverse registration order, a parameter bigger than the cap
 *    alone in its bucket), and how many are reduced in place;
 *  - contiguous (in place) and scattered (staged) gradient buffers give bit-identical results,
 *    close to the mean computed here;
 *  - overlap=1 with grad_ready in reverse order (and in a scrambled order, and only some marked)
 *    gives the result of the non-overlapped reduction, bit for bit (runs under TSan: label tsan);
 *  - the mean is bit-identical on every rank; the same through the accelerator's grad_ready;
 *  - gradients in memory from acc_accelerator_alloc_shared (reduced in place by the shm backend)
 *    average to the same bits as private ones; an allocation /dev/shm cannot hold fails alike on
 *    every rank and leaves the group usable. */
#include <math.h>

#include "acc_test.h"
#include "train/grad_sync.h"

#define NP 5
static const size_t numel[NP] = {3, 5, 2, 7, 4}; /* 21 floats */
#define TOTAL 21

static int rank, nprocs;
static acc_state *st;

#include "accel/gmodel.h"

/* rank r's gradient element k of parameter i: values whose mean is not exact in binary */
static float grad_value(int r, int i, size_t k) {
  return 0.1f * (float)(r + 1) + 0.37f * (float)i - 0.013f * (float)k + (r % 2 ? 1e-3f : -2e-3f);
}

static void fill(gmodel *g) {
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < numel[i]; k++) g->grad[i][k] = grad_value(rank, i, k);
}

static void flat(const gmodel *g, float *out) {
  size_t o = 0;
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < numel[i]; k++) out[o++] = g->grad[i][k];
}

static void test_bucket_counts(void) {
  gmodel c, s;
  gmodel_init(&c, 0);
  gmodel_init(&s, 3);
  struct {
    size_t cap_floats, buckets, inplace_scattered;
  } cases[] = {
      /* reverse order 4,7,2,5,3: cap 8 -> [4][7][2,5][3]; cap 12 -> [4,7][2,5,3]; cap 0 floats
       * (rounded up to 1) -> one per parameter; cap 21 -> everything; cap 11 -> [4,7][2,5,3] */
      {8, 4, 3}, {12, 2, 0}, {0, 5, 5}, {21, 1, 0}, {11, 2, 0}, {6, 5, 5}, {1000, 1, 0},
  };
  for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
    acc__grad_sync *gc, *gs;
    size_t cap = cases[t].cap_floats * sizeof(float);
    REQUIRE_OK(acc__grad_sync_create(&gc, st, c.m, cap, 0));
    REQUIRE_OK(acc__grad_sync_create(&gs, st, s.m, cap, 0));
    CHECK(acc__grad_sync_num_buckets(gc) == cases[t].buckets, "cap %zu floats: %zu buckets, expected %zu",
          cases[t].cap_floats, acc__grad_sync_num_buckets(gc), cases[t].buckets);
    CHECK(acc__grad_sync_num_inplace(gc) == cases[t].buckets, "contiguous: all %zu buckets in place, got %zu",
          cases[t].buckets, acc__grad_sync_num_inplace(gc));
    CHECK(acc__grad_sync_num_buckets(gs) == cases[t].buckets, "scattered: %zu buckets", acc__grad_sync_num_buckets(gs));
    CHECK(acc__grad_sync_num_inplace(gs) == cases[t].inplace_scattered,
          "cap %zu floats, scattered: %zu in place, expected %zu (single-parameter buckets)",
          cases[t].cap_floats, acc__grad_sync_num_inplace(gs), cases[t].inplace_scattered);
    acc__grad_sync_destroy(gc);
    acc__grad_sync_destroy(gs);
  }
  /* a frozen parameter (grad NULL) takes no bucket */
  {
    acc_model *m;
    float d[4], gr[4];
    REQUIRE_OK(acc_model_create(&m));
    int64_t sh[1] = {2};
    REQUIRE_OK(acc_model_add_parameter(m, "x", d, gr, 1, sh));
    REQUIRE_OK(acc_model_add_parameter(m, "frozen", d + 2, NULL, 1, sh));
    acc__grad_sync *g;
    REQUIRE_OK(acc__grad_sync_create(&g, st, m, sizeof(float), 0));
    CHECK(acc__grad_sync_num_buckets(g) == 1, "frozen parameter: %zu buckets, expected 1", acc__grad_sync_num_buckets(g));
    CHECK_OK(acc__grad_sync_mark_ready(g, 1)); /* marking a frozen parameter is harmless */
    gr[0] = gr[1] = (float)rank;
    REQUIRE_OK(acc__grad_sync_finish(g));
    CHECK(fabsf(gr[0] - (float)(nprocs - 1) / 2.0f) < 1e-6f, "frozen model: mean %g", gr[0]);
    acc__grad_sync_destroy(g);
    acc_model_destroy(m);
  }
  CHECK_ERR(acc__grad_sync_create(NULL, st, c.m, 0, 0), ACC_ERR_INVALID_ARGUMENT, "NULL");
  gmodel_free(&c);
  gmodel_free(&s);
}

/* Reduces with the given layout / cap / overlap / marking order; writes the flat result. */
static void reduce_with(size_t gap, size_t cap_floats, int overlap, const int *order, int nmark, float *out) {
  gmodel g;
  gmodel_init(&g, gap);
  acc__grad_sync *gs;
  REQUIRE_OK(acc__grad_sync_create(&gs, st, g.m, cap_floats * sizeof(float), overlap));
  for (int step = 0; step < 3; step++) { /* several steps: the per-step bookkeeping resets */
    fill(&g);
    for (int k = 0; k < nmark; k++) REQUIRE_OK(acc__grad_sync_mark_ready(gs, (size_t)order[k]));
    if (nmark > 0) CHECK_ERR(acc__grad_sync_mark_ready(gs, (size_t)order[0]), ACC_ERR_INVALID_USAGE, "already marked ready");
    REQUIRE_OK(acc__grad_sync_finish(gs));
  }
  CHECK_ERR(acc__grad_sync_mark_ready(gs, NP), ACC_ERR_INVALID_ARGUMENT, "out of range");
  flat(&g, out);
  acc__grad_sync_destroy(gs);
  gmodel_free(&g);
}

static void test_equal_results(void) {
  /* the mean computed here in double */
  float want[TOTAL];
  size_t o = 0;
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < numel[i]; k++) {
      double s = 0;
      for (int r = 0; r < nprocs; r++) s += grad_value(r, i, k);
      want[o++] = (float)(s / nprocs);
    }
  static const int reverse[NP] = {4, 3, 2, 1, 0};
  static const int scrambled[NP] = {1, 4, 0, 3, 2};
  static const size_t caps[] = {8, 12, 1, 1000};
  for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
    float ref[TOTAL], x[TOTAL];
    reduce_with(0, caps[c], 0, NULL, 0, ref); /* contiguous, no overlap, nothing marked */
    double worst = 0;
    for (int k = 0; k < TOTAL; k++) worst = fmax(worst, fabs((double)ref[k] - want[k]) / fmax(fabs(want[k]), 1e-3));
    CHECK(worst < 1e-6, "cap %zu: relative error %g to the mean", caps[c], worst);

    reduce_with(3, caps[c], 0, NULL, 0, x);
    CHECK(memcmp(ref, x, sizeof x) == 0, "cap %zu: staged (scattered) differs from in place", caps[c]);
    reduce_with(0, caps[c], 0, reverse, NP, x);
    CHECK(memcmp(ref, x, sizeof x) == 0, "cap %zu: marked in reverse, no overlap, differs", caps[c]);
    reduce_with(0, caps[c], 1, reverse, NP, x);
    CHECK(memcmp(ref, x, sizeof x) == 0, "cap %zu: overlap with reverse marking differs", caps[c]);
    reduce_with(3, caps[c], 1, reverse, NP, x);
    CHECK(memcmp(ref, x, sizeof x) == 0, "cap %zu: overlap, scattered, differs", caps[c]);
    reduce_with(0, caps[c], 1, scrambled, NP, x);
    CHECK(memcmp(ref, x, sizeof x) == 0, "cap %zu: overlap, scrambled marking order, differs", caps[c]);
    reduce_with(0, caps[c], 1, reverse, 2, x); /* only the last two parameters marked */
    CHECK(memcmp(ref, x, sizeof x) == 0, "cap %zu: overlap, partly marked, differs", caps[c]);

    /* bit-identical on every rank */
    float all[TOTAL * 64];
    REQUIRE_OK(acc_all_gather(st, ref, all, TOTAL, ACC_F32));
    for (int r = 1; r < nprocs; r++)
      CHECK(memcmp(all, all + r * TOTAL, sizeof ref) == 0, "cap %zu: rank %d's mean differs from rank 0's", caps[c], r);
  }
}

/* The same through the public API: overlap_grad_sync + acc_accelerator_grad_ready. */
static void test_accelerator_overlap(void) {
  float results[2][TOTAL];
  for (int overlap = 0; overlap <= 1; overlap++) {
    acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
    ao.overlap_grad_sync = overlap;
    ao.bucket_cap_bytes = 8 * sizeof(float);
    ao.gradient_accumulation_steps = 2;
    acc_accelerator *acc;
    REQUIRE_OK(acc_accelerator_create(&acc, &ao));
    gmodel g;
    gmodel_init(&g, 0);
    REQUIRE_OK(acc_accelerator_prepare_model(acc, g.m));
    /* batch 1 (no sync): grad_ready is ignored, gradients stay local */
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    fill(&g);
    for (int i = NP - 1; i >= 0; i--) REQUIRE_OK(acc_accelerator_grad_ready(acc, (size_t)i));
    REQUIRE_OK(acc_accelerator_backward(acc));
    CHECK(g.grad[0][0] == grad_value(rank, 0, 0), "non-sync batch: gradients must stay local");
    /* batch 2 (sync): accumulate a second gradient, mark in reverse, backward */
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    CHECK(acc_accelerator_sync_gradients(acc), "second batch syncs");
    for (int i = NP - 1; i >= 0; i--) {
      for (size_t k = 0; k < numel[i]; k++) g.grad[i][k] += grad_value(rank, i, k);
      REQUIRE_OK(acc_accelerator_grad_ready(acc, (size_t)i));
    }
    REQUIRE_OK(acc_accelerator_backward(acc));
    flat(&g, results[overlap]);
    gmodel_free(&g);
    acc_accelerator_destroy(acc);
  }
  CHECK(memcmp(results[0], results[1], sizeof results[0]) == 0, "accelerator: overlap changes the result");
  float all[TOTAL * 64];
  REQUIRE_OK(acc_all_gather(st, results[1], all, TOTAL, ACC_F32));
  for (int r = 1; r < nprocs; r++)
    CHECK(memcmp(all, all + r * TOTAL, sizeof results[1]) == 0, "accelerator: rank %d differs", r);
}

/* A 40 KB gradient (above the one-step size) in shared memory vs in malloc'ed memory. */
static void test_accelerator_shared(void) {
  enum { N = 10001 };
  float *res[2];
  for (int shared = 0; shared <= 1; shared++) {
    acc_accelerator *acc;
    REQUIRE_OK(acc_accelerator_create(&acc, NULL));
    float *w = calloc(N, sizeof *w), *g = NULL;
    if (shared)
      REQUIRE_OK(acc_accelerator_alloc_shared(acc, N * sizeof *g, (void **)&g));
    else
      g = calloc(N, sizeof *g);
    for (size_t k = 0; k < N; k++) CHECK(g[k] == 0.0f, "alloc_shared: not zeroed at %zu", k);
    acc_model *m;
    REQUIRE_OK(acc_model_create(&m));
    int64_t shape[1] = {N};
    REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, shape));
    REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
    for (size_t k = 0; k < N; k++) g[k] = grad_value(rank, (int)(k % 5), k % 97);
    REQUIRE_OK(acc_accelerator_backward(acc));
    res[shared] = malloc(N * sizeof(float));
    memcpy(res[shared], g, N * sizeof(float));
    if (shared) {
/* ASan and TSan abort on the fallback's 1 PiB malloc instead of failing it */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
      void *huge = (void *)1;
      acc_result rc = acc_accelerator_alloc_shared(acc, (size_t)1 << 50, &huge);
      CHECK(rc == ACC_ERR_NOMEM && huge == NULL, "alloc_shared of 1 PiB: %s (expected NOMEM): %s",
            acc_result_string(rc), acc_last_error());
#endif
      float one = 1.0f;
      REQUIRE_OK(acc_all_reduce(st, &one, &one, 1, ACC_F32, ACC_SUM));
      CHECK(one == (float)nprocs, "the group after a failed shared allocation: %g", (double)one);
      REQUIRE_OK(acc_accelerator_free(acc, g));
    } else {
      free(g);
    }
    acc_accelerator_destroy(acc);
    acc_model_destroy(m);
    free(w);
  }
  CHECK(memcmp(res[0], res[1], N * sizeof(float)) == 0, "shared gradients average to other bits");
  free(res[0]), free(res[1]);
}

int main(void) {
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  test_bucket_counts();
  test_equal_results();
  test_accelerator_overlap();
  test_accelerator_shared();
  acc_state_destroy(st);
  return acc_test_finish("accel_grad_sync");
}
