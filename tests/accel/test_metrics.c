/* Metrics collectives of the Accelerator, run by the launcher at 1..4 processes:
 *  - gather_for_metrics over prepared loaders: for many dataset sizes, batch sizes,
 *    shuffle and split_batches, the concatenation of every batch's gathered sample ids is exactly
 *    the epoch's sampler order (0..n-1 unshuffled, the seeded permutation shuffled): every sample
 *    once, the even_batches padding dropped; outside a prepared loader nothing is dropped;
 *  - gather, reduce (sum / mean / max with Accelerate's documented values), pad_across_processes (end and
 *    front), and the capacity errors of gather_for_metrics and pad_across_processes. */
#include "acc_test.h"

#define MAXN 512

static int rank, nprocs;
static int64_t ids[MAXN];

/* One epoch of eval over a prepared loader; returns the samples kept in total. */
static void check_epoch(acc_accelerator *acc, int64_t n, int64_t bs, int shuffle, int split, int prefetch) {
  acc_field_desc f = {ACC_I64, 1};
  const void *data[1] = {ids};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_memory(&ds, n, &f, 1, data));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = bs;
  lo.shuffle = shuffle;
  lo.seed = 1234 + (uint64_t)rank; /* the accelerator must use process 0's seed everywhere */
  lo.prefetch = prefetch;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  int64_t want[MAXN];
  REQUIRE_OK(acc_sampler_order(want, n, shuffle, 1234, 0));

  int64_t *got = malloc(sizeof(int64_t) * (size_t)(n + 64 * 16));
  int64_t *recv = malloc(sizeof(int64_t) * (size_t)(bs * nprocs));
  int64_t total = 0, nbatches = 0;
  int overflow = 0;
  const acc_batch *b;
  for (;;) {
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    if (!b) break;
    int64_t kept = -1;
    REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, b->fields[0], b->size, 1, ACC_I64, recv,
                                                  bs * nprocs, &kept));
    if (!b->end_of_dataloader) {
      int64_t full = split ? bs : bs * nprocs;
      CHECK(kept == full, "n %lld bs %lld: batch %lld kept %lld, expected %lld (nothing dropped "
            "before the last batch)", (long long)n, (long long)bs, (long long)nbatches,
            (long long)kept, (long long)full);
    }
    if (total + kept > n) overflow = 1;
    else memcpy(got + total, recv, sizeof(int64_t) * (size_t)kept);
    total += kept;
    nbatches++;
  }
  const char *mode = split ? "split" : "no split";
  CHECK(!overflow && total == n, "n %lld bs %lld shuffle %d %s: gathered %lld samples in total, expected %lld",
        (long long)n, (long long)bs, shuffle, mode, (long long)total, (long long)n);
  if (!overflow && total == n) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (got[i] != want[i]) bad = i;
    CHECK(bad < 0, "n %lld bs %lld shuffle %d %s: sample %lld is %lld, expected %lld",
          (long long)n, (long long)bs, shuffle, mode, (long long)bad,
          (long long)(bad >= 0 ? got[bad] : 0), (long long)(bad >= 0 ? want[bad] : 0));
    /* and a permutation: every id once */
    char seen[MAXN] = {0};
    int dup = 0;
    for (int64_t i = 0; i < n; i++) {
      if (got[i] < 0 || got[i] >= n || seen[got[i]]) dup = 1;
      else seen[got[i]] = 1;
    }
    CHECK(!dup, "n %lld: a sample id is repeated or out of range", (long long)n);
  }

  /* after the loop the loader is no longer active: nothing is dropped */
  int64_t mine[3] = {rank, rank, rank}, all[3 * 64], kept = -1;
  REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, mine, 3, 1, ACC_I64, all, 3 * 64, &kept));
  CHECK(kept == 3 * nprocs, "after the epoch: kept %lld of %d", (long long)kept, 3 * nprocs);

  free(recv);
  free(got);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

static void test_gather_for_metrics(void) {
  static const int64_t sizes[] = {82, 99, 512, 1, 7, 33, 96, 100};
  static const int64_t batches[] = {16, 5};
  for (int split = 0; split <= 1; split++) {
    acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
    ao.split_batches = split;
    acc_accelerator *acc;
    REQUIRE_OK(acc_accelerator_create(&acc, &ao));
    /* before any loader: nothing is dropped, samples of different counts per process */
    int64_t mine[4] = {rank, rank, rank, rank}, all[4 * 64], kept = -1;
    int64_t cnt = rank % 2 ? 1 : 4;
    REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, mine, cnt, 1, ACC_I64, all, 4 * 64, &kept));
    int64_t expect = 0;
    for (int r = 0; r < nprocs; r++) expect += r % 2 ? 1 : 4;
    CHECK(kept == expect, "outside a loader: kept %lld, expected %lld", (long long)kept, (long long)expect);
    int64_t pos = 0, bad = 0;
    for (int r = 0; r < nprocs; r++)
      for (int64_t k = 0; k < (r % 2 ? 1 : 4); k++)
        if (all[pos++] != r) bad = 1;
    CHECK(!bad, "outside a loader: samples are not in rank order");

    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
      for (size_t bi = 0; bi < 2; bi++) {
        int64_t bs = batches[bi];
        if (split) bs = bs / nprocs * nprocs > 0 ? bs / nprocs * nprocs : nprocs; /* global, divisible */
        for (int shuffle = 0; shuffle <= 1; shuffle++)
          check_epoch(acc, sizes[si], bs, shuffle, split, si == 0 ? 2 : 0);
      }
    acc_accelerator_destroy(acc);
  }
}

/* Accelerate's 2-process example (sizes 16 and 82 -> 32, 32, 18), checked batch by batch. */
static void test_gather_for_metrics_counts(void) {
  if (nprocs != 2) return;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  acc_field_desc f = {ACC_I64, 1};
  const void *data[1] = {ids};
  static const int64_t n[] = {82, 99, 512};
  static const char *want[] = {"32,32,18,", "32,32,32,3,", NULL};
  for (int c = 0; c < 3; c++) {
    acc_dataset *ds;
    REQUIRE_OK(acc_dataset_create_memory(&ds, n[c], &f, 1, data));
    acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
    lo.batch_size = 16;
    lo.prefetch = 0;
    acc_dataloader *dl;
    REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
    char got[256] = "";
    int all32 = 1;
    const acc_batch *b;
    int64_t recv[32];
    for (;;) {
      REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
      if (!b) break;
      int64_t kept;
      REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, b->fields[0], b->size, 1, ACC_I64, recv, 32, &kept));
      if (strlen(got) < 200) snprintf(got + strlen(got), sizeof got - strlen(got), "%lld,", (long long)kept);
      if (kept != 32) all32 = 0;
    }
    if (want[c]) CHECK(strcmp(got, want[c]) == 0, "%lld samples: kept %s, expected %s", (long long)n[c], got, want[c]);
    else CHECK(all32, "512 samples: no truncation expected, got %s", got);
    acc_dataloader_destroy(dl);
    acc_dataset_destroy(ds);
  }
  acc_accelerator_destroy(acc);
}

static void test_gather_reduce(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  /* gather: concatenation in rank order */
  int32_t mine[2] = {10 * rank, 10 * rank + 1}, all[2 * 64];
  REQUIRE_OK(acc_accelerator_all_gather(acc, mine, all, 2, ACC_I32));
  int bad = 0;
  for (int r = 0; r < nprocs; r++)
    if (all[2 * r] != 10 * r || all[2 * r + 1] != 10 * r + 1) bad = 1;
  CHECK(!bad, "gather is not the rank-ordered concatenation");

  /* reduce: process p holds [2p+1, 2p+2] (p0=[1,2], p1=[3,4], the example of Accelerate's reduce docstring) */
  float x[2] = {(float)(2 * rank + 1), (float)(2 * rank + 2)}, y[2];
  float n = (float)nprocs;
  REQUIRE_OK(acc_accelerator_all_reduce(acc, x, y, 2, ACC_F32, ACC_SUM));
  CHECK(y[0] == n * n && y[1] == n * n + n, "sum [%g, %g], expected [%g, %g]", y[0], y[1], n * n, n * n + n);
  if (nprocs == 2) CHECK(y[0] == 4 && y[1] == 6, "expected sum [4,6], got [%g,%g]", y[0], y[1]);
  REQUIRE_OK(acc_accelerator_all_reduce(acc, x, y, 2, ACC_F32, ACC_MEAN));
  CHECK(y[0] == n && y[1] == n + 1, "mean [%g, %g], expected [%g, %g]", y[0], y[1], n, n + 1);
  if (nprocs == 2) CHECK(y[0] == 2 && y[1] == 3, "expected mean [2,3], got [%g,%g]", y[0], y[1]);
  REQUIRE_OK(acc_accelerator_all_reduce(acc, x, y, 2, ACC_F32, ACC_MAX));
  CHECK(y[0] == 2 * n - 1 && y[1] == 2 * n, "max [%g, %g], expected [%g, %g]", y[0], y[1], 2 * n - 1, 2 * n);
  if (nprocs == 2) CHECK(y[0] == 3 && y[1] == 4, "expected max [3,4], got [%g,%g]", y[0], y[1]);
  /* in place */
  REQUIRE_OK(acc_accelerator_all_reduce(acc, x, x, 2, ACC_F32, ACC_SUM));
  CHECK(x[0] == n * n, "in-place sum %g", x[0]);
  CHECK_ERR(acc_accelerator_all_reduce(NULL, x, y, 2, ACC_F32, ACC_SUM), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  acc_accelerator_destroy(acc);
}

static void test_pad(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  const int64_t n = 5;
  for (int pad_first = 0; pad_first <= 1; pad_first++) {
    /* main: arange(n+1); others: arange(n) -> others become [0..n-1, pad] (or [pad, 0..n-1]) */
    int64_t mine = rank == 0 ? n + 1 : n;
    float buf[8];
    for (int64_t i = 0; i < mine; i++) buf[i] = (float)i;
    int64_t out = -1;
    REQUIRE_OK(acc_accelerator_pad_across_processes(acc, buf, mine, 1, ACC_F32, -1.0, pad_first, 8, &out));
    int64_t expect = nprocs > 1 ? n + 1 : n + 1;
    CHECK(out == expect, "padded size %lld, expected %lld", (long long)out, (long long)expect);
    int bad = 0;
    for (int64_t i = 0; i < out; i++) {
      float w;
      if (rank == 0) w = (float)i;
      else if (!pad_first) w = i < n ? (float)i : -1.0f;
      else w = i == 0 ? -1.0f : (float)(i - 1);
      if (buf[i] != w) bad = 1;
    }
    CHECK(!bad, "pad_first %d: wrong padded contents (buf[%d] %g)", pad_first, (int)n, buf[n]);
  }
  /* a sample of 2 i32 elements, pad value 7, Accelerate's i64 / f16 / bf16 conversions */
  {
    int32_t b2[2 * 4];
    int64_t cnt = rank == nprocs - 1 ? 3 : 1;
    for (int64_t i = 0; i < 2 * cnt; i++) b2[i] = 100 + (int32_t)i;
    int64_t out = -1;
    REQUIRE_OK(acc_accelerator_pad_across_processes(acc, b2, cnt, 2, ACC_I32, 7, 0, 4, &out));
    CHECK(out == 3, "max count 3, got %lld", (long long)out);
    int bad = 0;
    for (int64_t i = 0; i < 6; i++)
      if (b2[i] != (i < 2 * cnt ? 100 + i : 7)) bad = 1;
    CHECK(!bad, "i32 padding of 2-element samples is wrong");
    uint16_t h[4] = {0x3c00, 0, 0, 0}; /* 1.0 in f16 */
    cnt = rank == 0 ? 3 : 1;
    REQUIRE_OK(acc_accelerator_pad_across_processes(acc, h, cnt, 1, ACC_F16, 2.0, 0, 4, &out));
    if (rank != 0) CHECK(h[1] == 0x4000 && h[2] == 0x4000, "f16 pad 2.0 -> 0x4000, got %#x", h[1]);
    uint16_t bf[4] = {0x3f80, 0, 0, 0};
    REQUIRE_OK(acc_accelerator_pad_across_processes(acc, bf, cnt, 1, ACC_BF16, -2.0, 0, 4, &out));
    if (rank != 0) CHECK(bf[1] == 0xc000, "bf16 pad -2.0 -> 0xc000, got %#x", bf[1]);
  }
  /* capacity errors (collective: every process calls, the too-small ones fail) */
  {
    float buf[8] = {0};
    int64_t mine = rank == 0 ? 6 : 5, out = -1;
    acc_result rc = acc_accelerator_pad_across_processes(acc, buf, mine, 1, ACC_F32, 0, 0, 5, &out);
    if (rank == 0) {
      CHECK(rc != ACC_OK, "capacity 5 for 6 samples must fail");
      CHECK(strstr(acc_last_error(), "buf holds 5 samples but must hold 6") != NULL, "message: %s", acc_last_error());
    } else if (nprocs > 1) {
      CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "padding 5 -> 6 with capacity 5 must fail");
      CHECK(strstr(acc_last_error(), "must hold 6") != NULL, "message: %s", acc_last_error());
    }
    int64_t s[2] = {1, 2}, r[64];
    rc = acc_accelerator_gather_for_metrics(acc, s, 2, 1, ACC_I64, r, 2 * nprocs - 1, &out);
    CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics into a too small recv must fail");
    char want[96];
    snprintf(want, sizeof want, "recv holds %d samples but %d were gathered", 2 * nprocs - 1, 2 * nprocs);
    CHECK(strstr(acc_last_error(), want) != NULL, "message: %s (expected \"%s\")", acc_last_error(), want);
    /* and the group is still usable afterwards */
    REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, s, 2, 1, ACC_I64, r, 2 * nprocs, &out));
    CHECK(out == 2 * nprocs, "kept %lld", (long long)out);
  }
  acc_accelerator_destroy(acc);
}

int main(void) {
  for (int i = 0; i < MAXN; i++) ids[i] = i;
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  test_gather_reduce();
  test_pad();
  test_gather_for_metrics_counts();
  test_gather_for_metrics();
  acc_state_destroy(st);
  return acc_test_finish("accel_metrics");
}
