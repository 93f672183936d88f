/* Data loading across real processes (run by the launcher at 1, 2 and 3 processes):
 *  - skip_first_batches: the skipped epoch's length is the remaining batches, it yields exactly
 *    the batches after the skipped ones (sequential expectations computed from the sharding rule,
 *    shuffled ones against an unskipped loader), and the next epoch is whole again;
 *  - a loader over a given list of batches of different sizes: gather_for_metrics returns every
 *    sample of the list exactly once per epoch (the padding dropped), shuffled batch order too;
 *  - dispatch_batches: process 0 alone reads a stream (the stream callbacks fail on any other
 *    process), every process gets its slice, every sample is seen once per epoch, and
 *    gather_for_metrics counts the dataset exactly; split and non-split, drop_last, two epochs,
 *    skipping, and a map-style dataset read by process 0 only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acc_test.h"
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* the shared fixture has more helpers */
#endif
#include "data/data_fixture.h"

static int rank, nprocs;

/* ---- skip_first_batches ----------------------------------------------------------------------- */

static acc_dataloader *make_loader(acc_dataset *ds, int64_t bs, int shuffle, int even) {
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = bs;
  o.shuffle = shuffle;
  o.seed = 99;
  o.shard = (acc_shard_config){nprocs, rank, 0, even};
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_dataloader_create(&dl, ds, &o));
  return dl;
}

/* Sequential order, even_batches: batch j of process p is global batch g = j * np + p, whose
 * sample i is position g * bs + i of the order repeated from its start (the padding). */
static int64_t seq_expect(int64_t n, int64_t bs, int64_t j, int64_t i) {
  int64_t g = j * nprocs + rank;
  return (g * bs + i) % n;
}

static void test_skip_sequential(void) {
  const int64_t n = 11, bs = 2; /* 6 batches, the last one short */
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_map(&ds, n, fx_fields, 2, fx_fetch, NULL));
  acc_dataloader *dl = make_loader(ds, bs, 0, 1);
  const int64_t full = acc_dataloader_len(dl);
  const int64_t L = (n + bs - 1) / bs;
  CHECK(full == (L + nprocs - 1) / nprocs, "full length %lld", (long long)full);
  for (int64_t skip = 0; skip <= full + 1; skip++) {
    REQUIRE_OK(acc_dataloader_set_epoch(dl, 0));
    REQUIRE_OK(acc_dataloader_skip_first_batches(dl, skip));
    int64_t want_len = full > skip ? full - skip : 0;
    CHECK(acc_dataloader_len(dl) == want_len, "skip %lld: len %lld before the epoch, want %lld",
          (long long)skip, (long long)acc_dataloader_len(dl), (long long)want_len);
    int64_t j = 0;
    const acc_batch *b;
    for (;;) {
      REQUIRE_OK(acc_dataloader_next(dl, &b));
      if (!b) break;
      CHECK(acc_dataloader_len(dl) == want_len, "skip %lld: len %lld during the epoch",
            (long long)skip, (long long)acc_dataloader_len(dl));
      /* one process: the plain batch sampler (a short last batch, no padding) */
      int64_t want_size = nprocs > 1 ? bs : (n - (skip + j) * bs < bs ? n - (skip + j) * bs : bs);
      CHECK(b->size == want_size, "skip %lld: batch of %lld, want %lld", (long long)skip,
            (long long)b->size, (long long)want_size);
      CHECK(fx_batch_consistent(b), "fields do not match indices");
      for (int64_t i = 0; i < b->size; i++)
        CHECK(b->indices[i] == seq_expect(n, bs, skip + j, i),
              "skip %lld batch %lld sample %lld: index %lld, want %lld", (long long)skip,
              (long long)j, (long long)i, (long long)b->indices[i],
              (long long)seq_expect(n, bs, skip + j, i));
      CHECK(b->end_of_dataloader == (j == want_len - 1), "skip %lld: end_of_dataloader on %lld",
            (long long)skip, (long long)j);
      j++;
    }
    CHECK(j == want_len, "skip %lld: %lld batches, want %lld", (long long)skip, (long long)j,
          (long long)want_len);
    /* The next epoch is whole again. */
    CHECK(acc_dataloader_len(dl) == full, "skip %lld: next epoch len %lld, want %lld",
          (long long)skip, (long long)acc_dataloader_len(dl), (long long)full);
    j = 0;
    for (;;) {
      REQUIRE_OK(acc_dataloader_next(dl, &b));
      if (!b) break;
      for (int64_t i = 0; i < b->size; i++)
        CHECK(b->indices[i] == seq_expect(n, bs, j, i),
              "after skip %lld: epoch 1 batch %lld differs", (long long)skip, (long long)j);
      j++;
    }
    CHECK(j == full, "after skip %lld: next epoch has %lld batches, want %lld", (long long)skip,
          (long long)j, (long long)full);
  }
  /* mid-epoch: refused */
  REQUIRE_OK(acc_dataloader_set_epoch(dl, 0));
  const acc_batch *b;
  REQUIRE_OK(acc_dataloader_next(dl, &b));
  CHECK_ERR(acc_dataloader_skip_first_batches(dl, 1), ACC_ERR_INVALID_USAGE, "in progress");
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

/* Shuffled: the skipped loader yields what an unskipped loader yields after its first k batches,
 * epoch 2 (shuffled with seed + 2) included, then epoch 3 is whole. */
static void test_skip_shuffled(void) {
  const int64_t n = 37, bs = 3;
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_map(&ds, n, fx_fields, 2, fx_fetch, NULL));
  acc_dataloader *ref = make_loader(ds, bs, 1, 1), *dl = make_loader(ds, bs, 1, 1);
  for (int ep = 2; ep <= 3; ep++) {
    REQUIRE_OK(acc_dataloader_set_epoch(ref, ep));
    if (ep == 2) {
      REQUIRE_OK(acc_dataloader_set_epoch(dl, 2));
      REQUIRE_OK(acc_dataloader_skip_first_batches(dl, 2));
    }
    const acc_batch *rb, *b;
    int64_t k = 0, got = 0;
    for (;;) {
      REQUIRE_OK(acc_dataloader_next(ref, &rb));
      if (!rb) break;
      if (ep == 2 && k++ < 2) continue;
      REQUIRE_OK(acc_dataloader_next(dl, &b));
      CHECK(b != NULL, "epoch %d: the skipped loader ended early", ep);
      if (!b) break;
      got++;
      CHECK(b->epoch == ep, "epoch %lld, want %d", (long long)b->epoch, ep);
      CHECK(b->size == rb->size && memcmp(b->indices, rb->indices, (size_t)b->size * 8) == 0,
            "epoch %d: batch %lld differs from the unskipped loader's", ep, (long long)rb->index);
    }
    if (b) REQUIRE_OK(acc_dataloader_next(dl, &b));
    CHECK(b == NULL, "epoch %d: the skipped loader has more batches", ep);
    CHECK(got == (ep == 2 ? acc_dataloader_len(ref) - 2 : acc_dataloader_len(ref)),
          "epoch %d: %lld batches", ep, (long long)got);
  }
  acc_dataloader_destroy(ref);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

/* ---- gather every batch of an epoch through gather_for_metrics --------------------------------- */

/* Runs one epoch through the accelerator; returns the kept sample ids in *out (malloc'ed). */
static int64_t gather_epoch(acc_accelerator *acc, acc_dataloader *dl, int64_t **out,
                            int64_t *nbatches) {
  int64_t cap = 4096, total = 0;
  int64_t *all = malloc((size_t)cap * sizeof *all);
  int64_t *recv = malloc((size_t)cap * sizeof *recv);
  int64_t ids[512];
  const acc_batch *b;
  *nbatches = 0;
  for (;;) {
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    if (!b) break;
    CHECK(fx_batch_consistent(b), "batch %lld: fields do not match indices", (long long)b->index);
    for (int64_t i = 0; i < b->size; i++) ids[i] = b->indices[i];
    int64_t kept = 0;
    REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, ids, b->size, 1, ACC_I64, recv, cap, &kept));
    if (total + kept <= cap) memcpy(all + total, recv, (size_t)kept * sizeof *all);
    total += kept;
    (*nbatches)++;
  }
  free(recv);
  *out = all;
  return total;
}

/* 1 when ids[0..total) holds each of want[0..n) exactly once. */
static int exactly_once(const int64_t *ids, int64_t total, const int64_t *want, int64_t n) {
  if (total != n) return 0;
  int64_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  memcpy(a, ids, (size_t)n * sizeof *a);
  memcpy(b, want, (size_t)n * sizeof *b);
  for (int64_t i = 1; i < n; i++) /* insertion sorts: n is small */
    for (int64_t j = i; j > 0 && a[j - 1] > a[j]; j--) {
      int64_t t = a[j];
      a[j] = a[j - 1];
      a[j - 1] = t;
    }
  for (int64_t i = 1; i < n; i++)
    for (int64_t j = i; j > 0 && b[j - 1] > b[j]; j--) {
      int64_t t = b[j];
      b[j] = b[j - 1];
      b[j - 1] = t;
    }
  int ok = memcmp(a, b, (size_t)n * sizeof *a) == 0;
  free(a);
  free(b);
  return ok;
}

/* ---- a loader over a list of batches of different sizes -------------------------------------- */

static void test_batch_list(void) {
  /* 9 batches, 30 samples, sizes 1..6 (a length-bucketed epoch); ids are a scrambled subset of
   * a 40-sample dataset (samples 31..39 are never in the list). */
  static const int64_t counts[] = {3, 1, 5, 2, 6, 4, 1, 3, 5};
  int64_t idx[30];
  for (int64_t i = 0; i < 30; i++) idx[i] = (i * 7) % 31;
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_map(&ds, 40, fx_fields, 2, fx_fetch, NULL));
  for (int shuffle = 0; shuffle <= 1; shuffle++) {
    acc_accelerator *acc;
    REQUIRE_OK(acc_accelerator_create(&acc, NULL));
    acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
    o.batch_size = 0; /* no fixed size */
    o.batch_indices = idx;
    o.batch_counts = counts;
    o.num_batches = 9;
    o.shuffle = shuffle;
    o.seed = 5;
    acc_dataloader *dl;
    REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &o, &dl));
    const int64_t want_len = nprocs == 1 ? 9 : (9 + nprocs - 1) / nprocs;
    CHECK(acc_dataloader_len(dl) == want_len, "batch list: len %lld, want %lld",
          (long long)acc_dataloader_len(dl), (long long)want_len);
    for (int ep = 0; ep < 2; ep++) {
      int64_t *got, nb;
      int64_t total = gather_epoch(acc, dl, &got, &nb);
      CHECK(nb == want_len, "batch list epoch %d: %lld batches, want %lld", ep, (long long)nb,
            (long long)want_len);
      CHECK(exactly_once(got, total, idx, 30),
            "batch list shuffle %d epoch %d: gathered %lld samples, want each of the 30 once",
            shuffle, ep, (long long)total);
      free(got);
    }
    acc_dataloader_destroy(dl);
    acc_accelerator_destroy(acc);
  }
  /* Errors at creation: an index outside the dataset, split mode without a fixed size. */
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  int64_t bad_idx[3] = {0, 1, 40};
  int64_t bad_counts[2] = {2, 1};
  o.batch_size = 0;
  o.batch_indices = bad_idx;
  o.batch_counts = bad_counts;
  o.num_batches = 2;
  acc_dataloader *dl = NULL;
  CHECK_ERR(acc_dataloader_create(&dl, ds, &o), ACC_ERR_INVALID_ARGUMENT,
            "batch 1 holds sample index 40, outside the dataset's 0..39");
  bad_idx[2] = 2;
  o.shard = (acc_shard_config){2, 0, 1, 1};
  CHECK_ERR(acc_dataloader_create(&dl, ds, &o), ACC_ERR_INVALID_ARGUMENT, "split_batches` mode");
  acc_dataset_destroy(ds);
}

/* ---- dispatch_batches ------------------------------------------------------------------------- */

/* A stream 0..n-1 that only process 0 may read. */
typedef struct stream {
  int64_t n, pos, resets, last_epoch;
} stream;

static int st_next(void *const *fields, void *payload) {
  stream *s = payload;
  if (rank != 0) return -99; /* other processes must never read */
  if (s->pos >= s->n) return 0;
  return fx_fetch(s->pos++, fields, NULL) == 0 ? 1 : -1;
}

static int st_reset(int64_t epoch, void *payload) {
  stream *s = payload;
  if (rank != 0) return -99;
  s->pos = 0;
  s->resets++;
  s->last_epoch = epoch;
  return 0;
}

static int map_fetch_main_only(int64_t index, void *const *fields, void *payload) {
  (void)payload;
  if (rank != 0) return -99;
  return fx_fetch(index, fields, NULL);
}

static void check_dispatch(int64_t n, int64_t bs, int split, int drop_last, int map_style,
                           int shuffle) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.split_batches = split;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  stream s = {n, 0, 0, -1};
  acc_dataset *ds;
  if (map_style)
    REQUIRE_OK(acc_dataset_create_map(&ds, n, fx_fields, 2, map_fetch_main_only, NULL));
  else
    REQUIRE_OK(acc_dataset_create_iterable(&ds, n, fx_fields, 2, st_next, st_reset, &s));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = bs;
  o.drop_last = drop_last;
  o.dispatch_batches = 1;
  o.shuffle = shuffle;
  o.seed = 17;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &o, &dl));
  const int64_t G = split ? bs : bs * nprocs; /* samples per global batch */
  int64_t want_len;
  if (split)
    want_len = drop_last ? n / bs : (n + bs - 1) / bs;
  else {
    int64_t lb = drop_last ? n / bs : (n + bs - 1) / bs;
    want_len = drop_last ? lb / nprocs : (lb + nprocs - 1) / nprocs;
  }
  CHECK(acc_dataloader_len(dl) == want_len,
        "dispatch n %lld bs %lld split %d drop %d: len %lld, want %lld", (long long)n,
        (long long)bs, split, drop_last, (long long)acc_dataloader_len(dl), (long long)want_len);
  const int64_t expect_n = drop_last ? n / G * G : n;
  int64_t order[512];
  REQUIRE_OK(acc_sampler_order(order, n, map_style && shuffle, 17, 0));
  for (int ep = 0; ep < 2; ep++) {
    int64_t *got, nb;
    int64_t total = gather_epoch(acc, dl, &got, &nb);
    if (ep == 1 && map_style && shuffle) REQUIRE_OK(acc_sampler_order(order, n, 1, 17, 1));
    CHECK(nb == want_len,
          "dispatch n %lld bs %lld split %d drop %d epoch %d: %lld batches, want %lld",
          (long long)n, (long long)bs, split, drop_last, ep, (long long)nb, (long long)want_len);
    /* gather_for_metrics returns the stream in order: every sample once, the padding dropped. */
    int ok = total == expect_n && memcmp(got, order, (size_t)expect_n * sizeof(int64_t)) == 0;
    CHECK(ok,
          "dispatch n %lld bs %lld split %d drop %d map %d epoch %d: gathered %lld samples, "
          "want the first %lld of the epoch's order, in order",
          (long long)n, (long long)bs, split, drop_last, map_style, ep, (long long)total,
          (long long)expect_n);
    free(got);
  }
  if (rank == 0 && !map_style)
    CHECK(s.resets == 2 && s.last_epoch == 1,
          "process 0's stream was reset %lld times (epoch %lld)", (long long)s.resets,
          (long long)s.last_epoch);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
}

/* The slices of one epoch, checked sample by sample: process p gets [p*b, (p+1)*b) of every
 * global batch, and the last batch is completed with the first samples of the epoch. */
static void test_dispatch_slices(void) {
  const int64_t n = 13, bs = 2; /* non-split: global batches of 2 * np */
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  stream s = {n, 0, 0, -1};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_iterable(&ds, n, fx_fields, 2, st_next, st_reset, &s));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = bs;
  o.dispatch_batches = 1;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &o, &dl));
  const int64_t G = bs * nprocs;
  const acc_batch *b;
  int64_t g = 0;
  for (;;) {
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    if (!b) break;
    int64_t start = g * G, count = n - start < G ? n - start : G;
    int64_t per = count / nprocs;
    int padded = b->end_of_dataloader && count % nprocs != 0;
    if (padded) per++;
    CHECK(b->size == per, "global batch %lld: slice of %lld, want %lld", (long long)g,
          (long long)b->size, (long long)per);
    for (int64_t i = 0; i < b->size; i++) {
      int64_t j = rank * per + i; /* position in the (completed) global batch */
      int64_t want = j < count ? start + j : j - count; /* completion: the epoch's first samples */
      CHECK(b->indices[i] == want, "global batch %lld sample %lld: %lld, want %lld", (long long)g,
            (long long)i, (long long)b->indices[i], (long long)want);
    }
    CHECK(fx_batch_consistent(b), "global batch %lld: fields do not match", (long long)g);
    g++;
  }
  CHECK(g == (n + G - 1) / G, "%lld global batches", (long long)g);
  /* skip_first_batches on a dispatcher: the skipped batches are still read, not yielded. */
  REQUIRE_OK(acc_dataloader_skip_first_batches(dl, 1));
  CHECK(acc_dataloader_len(dl) == (n + G - 1) / G - 1, "dispatch skip: len %lld",
        (long long)acc_dataloader_len(dl));
  REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
  CHECK(b && b->indices[0] == G + rank * bs, "dispatch skip: first batch starts at %lld",
        b ? (long long)b->indices[0] : -1LL);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
}

/* A read error on process 0 reaches every process as an error (no hang); process 0's names the
 * sample, the others' say process 0 failed. The loader restarts after set_epoch. */
static int64_t fail_at = -1;
static int st_next_failing(void *const *fields, void *payload) {
  stream *s = payload;
  if (rank != 0) return -99;
  if (s->pos == fail_at) return -7;
  if (s->pos >= s->n) return 0;
  return fx_fetch(s->pos++, fields, NULL) == 0 ? 1 : -1;
}

static void test_dispatch_error(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  stream s = {20, 0, 0, -1};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_iterable(&ds, 20, fx_fields, 2, st_next_failing, st_reset, &s));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 2;
  o.dispatch_batches = 1;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &o, &dl));
  fail_at = 2 * nprocs + 1; /* inside the second global batch: read ahead with the first */
  const acc_batch *b;
  acc_result rc = acc_accelerator_next_batch(acc, dl, &b);
  CHECK(rc != ACC_OK, "a read error on process 0 must fail next_batch everywhere");
  if (rank == 0)
    CHECK(strstr(acc_last_error(), "next callback returned -7") != NULL, "process 0: %s",
          acc_last_error());
  else
    CHECK(strstr(acc_last_error(), "process 0 could not read") != NULL, "process %d: %s", rank,
          acc_last_error());
  fail_at = -1;
  REQUIRE_OK(acc_dataloader_set_epoch(dl, 0));
  int64_t *got, nb;
  int64_t total = gather_epoch(acc, dl, &got, &nb);
  CHECK(total == 20, "after the error, a restarted epoch gathers %lld samples", (long long)total);
  free(got);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
}

static void test_dispatch(void) {
  static const int64_t sizes[] = {1, 2, 5, 12, 23, 24, 31};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (int drop = 0; drop <= 1; drop++) {
      check_dispatch(sizes[i], 2, 0, drop, 0, 0);          /* non-split, stream */
      check_dispatch(sizes[i], 2 * nprocs, 1, drop, 0, 0); /* split, stream */
      check_dispatch(sizes[i], 3, 0, drop, 1, 1);          /* map-style, shuffled */
    }
  test_dispatch_slices();
  test_dispatch_error();
}

int main(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  test_skip_sequential();
  test_skip_shuffled();
  test_batch_list();
  test_dispatch();
  acc_state_destroy(st);
  return acc_test_finish("data_dist");
}
