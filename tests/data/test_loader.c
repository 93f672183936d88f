/* Dataloader: end_of_dataloader, remainder, len, gather_for_metrics keep-counts, skip, resume,
 * iterable datasets, custom collate, errors. */
#include <stddef.h>
#include "data_fixture.h"

static acc_dataloader *mk(acc_dataset *ds, int64_t bs, int shuffle, int drop, int np, int p,
                          int split, int even, int prefetch) {
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = bs;
  o.shuffle = shuffle;
  o.seed = 1234;
  o.drop_last = drop;
  o.shard.num_processes = np;
  o.shard.process_index = p;
  o.shard.split_batches = split;
  o.shard.even_batches = even;
  o.prefetch = prefetch;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_dataloader_create(&dl, ds, &o));
  return dl;
}

/* Spec 6.4: 16 items, bs 4: end_of_dataloader only on batch index 3, each epoch. */
static void test_end_flag(void) {
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 16, fx_fields, 2, fx_fetch, NULL));
  for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
    acc_dataloader *dl = mk(ds, 4, 1, 0, 1, 0, 0, 1, prefetch);
    CHECK(acc_dataloader_len(dl) == 4, "len %lld", (long long)acc_dataloader_len(dl));
    for (int epoch = 0; epoch < 3; epoch++) {
      const acc_batch *b;
      int count = 0;
      int seen[16] = {0};
      for (;;) {
        CHECK_OK(acc_dataloader_next(dl, &b));
        if (!b) break;
        CHECK(b->index == count, "batch index %lld want %d", (long long)b->index, count);
        CHECK(b->epoch == epoch, "epoch %lld", (long long)b->epoch);
        CHECK(b->end_of_dataloader == (count == 3), "epoch %d batch %d: end flag %d", epoch, count,
              b->end_of_dataloader);
        CHECK(acc_dataloader_end_of_dataloader(dl) == (count == 3), "accessor flag");
        CHECK(acc_dataloader_remainder(dl) == 0, "remainder %lld", (long long)acc_dataloader_remainder(dl));
        CHECK(b->size == 4 && fx_batch_consistent(b), "batch contents");
        for (int i = 0; i < b->size; i++) seen[b->indices[i]]++;
        count++;
      }
      CHECK(count == 4, "epoch %d: %d batches", epoch, count);
      int perm = 1;
      for (int i = 0; i < 16; i++) perm &= seen[i] == 1;
      CHECK(perm, "epoch %d: each sample once", epoch);
      CHECK(acc_dataloader_epoch(dl) == epoch + 1, "epoch advanced to %lld", (long long)acc_dataloader_epoch(dl));
    }
    acc_dataloader_destroy(dl);
  }
  acc_dataset_destroy(ds);
}

/* Remainder = total_len % total_batch_size, -1 with drop_last; short last batch with 1 process. */
static void test_remainder(void) {
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 10, fx_fields, 2, fx_fetch, NULL));
  const acc_batch *b;
  acc_dataloader *dl = mk(ds, 4, 0, 0, 1, 0, 0, 1, 0);
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(acc_dataloader_remainder(dl) == 2, "1 proc bs 4: remainder %lld", (long long)acc_dataloader_remainder(dl));
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(b && b->size == 2 && b->end_of_dataloader && b->indices[0] == 8, "short last batch");
  acc_dataloader_destroy(dl);
  dl = mk(ds, 4, 0, 1, 1, 0, 0, 1, 0);
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(acc_dataloader_remainder(dl) == -1, "drop_last: -1");
  CHECK(acc_dataloader_len(dl) == 2, "drop_last len");
  acc_dataloader_destroy(dl);
  dl = mk(ds, 3, 0, 0, 3, 1, 0, 1, 0); /* total batch 9 */
  CHECK(acc_dataloader_total_batch_size(dl) == 9, "total batch size");
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(acc_dataloader_remainder(dl) == 1, "3 procs: remainder %lld", (long long)acc_dataloader_remainder(dl));
  acc_dataloader_destroy(dl);
  dl = mk(ds, 4, 0, 0, 2, 0, 1, 1, 0); /* split: total batch 4 */
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(acc_dataloader_remainder(dl) == 2 && b->size == 2, "split: remainder 2, per-process 2");
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

/* Spec 6.9: simulate the gather of every batch over all processes (rank order) and keep
 * acc_dataloader_gather_keep of it; the kept samples are exactly the dataset. */
static void gather_case(int64_t n, int64_t bs, int np, int split, const int64_t *want_keep, int nwant,
                        int even) {
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, n, fx_fields, 2, fx_fetch, NULL));
  acc_dataloader *dl[4];
  for (int p = 0; p < np; p++) dl[p] = mk(ds, bs, 1, 0, np, p, split, even, p % 2);
  int *seen = calloc((size_t)n, sizeof(int));
  int step = 0;
  int64_t total = 0;
  for (;;) {
    const acc_batch *b[4];
    int ended = 0;
    int64_t gathered = 0;
    int64_t cat[512];
    for (int p = 0; p < np; p++) {
      CHECK_OK(acc_dataloader_next(dl[p], &b[p]));
      if (!b[p]) {
        ended++;
        continue;
      }
      memcpy(cat + gathered, b[p]->indices, (size_t)b[p]->size * sizeof(int64_t));
      gathered += b[p]->size;
    }
    if (ended) {
      CHECK(ended == np, "all processes end together");
      break;
    }
    int64_t keep = acc_dataloader_gather_keep(dl[0], gathered);
    for (int p = 1; p < np; p++)
      CHECK(acc_dataloader_gather_keep(dl[p], gathered) == keep, "ranks agree on keep");
    CHECK(step < nwant && keep == want_keep[step], "n %lld step %d: keep %lld want %lld", (long long)n,
          step, (long long)keep, step < nwant ? (long long)want_keep[step] : -1LL);
    for (int64_t i = 0; i < keep; i++) seen[cat[i]]++;
    total += keep;
    step++;
  }
  CHECK(step == nwant, "n %lld: %d steps want %d", (long long)n, step, nwant);
  CHECK(total == n, "n %lld: kept %lld", (long long)n, (long long)total);
  int once = 1;
  for (int64_t i = 0; i < n; i++) once &= seen[i] == 1;
  CHECK(once, "n %lld: every sample kept exactly once", (long long)n);
  free(seen);
  for (int p = 0; p < np; p++) acc_dataloader_destroy(dl[p]);
  acc_dataset_destroy(ds);
}

static void test_gather_for_metrics(void) {
  const int64_t k82[] = {32, 32, 18};
  gather_case(82, 16, 2, 0, k82, 3, 1);
  const int64_t k99[] = {32, 32, 32, 3};
  gather_case(99, 16, 2, 0, k99, 4, 1);
  const int64_t k99s[] = {16, 16, 16, 16, 16, 16, 3};
  gather_case(99, 16, 2, 1, k99s, 7, 1);
  int64_t k512[16];
  for (int i = 0; i < 16; i++) k512[i] = 32;
  gather_case(512, 16, 2, 0, k512, 16, 1);
  const int64_t k3[] = {9, 9, 2}; /* 20 samples, bs 3, 3 procs: remainder 20 % 9 = 2 */
  gather_case(20, 3, 3, 0, k3, 3, 1);
  const int64_t k4[] = {8, 1}; /* 9 samples, bs 2, 4 procs */
  gather_case(9, 2, 4, 0, k4, 2, 1);
  /* even_batches off: the last batches are short instead of padded; same keep counts. */
  gather_case(82, 16, 2, 0, k82, 3, 0);
}

/* Spec 6.7: range(16), bs 4, skip 2 -> [8..11], [12..15]; later epochs are whole. */
static void test_skip(void) {
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 16, fx_fields, 2, fx_fetch, NULL));
  acc_dataloader *dl = mk(ds, 4, 0, 0, 1, 0, 0, 1, 1);
  const acc_batch *b;
  char buf[128];
  CHECK_OK(acc_dataloader_skip_first_batches(dl, 2));
  CHECK_OK(acc_dataloader_next(dl, &b));
  fx_render(b, buf, sizeof buf);
  CHECK(strcmp(buf, "8,9,10,11") == 0 && b->index == 2 && !b->end_of_dataloader, "got %s", buf);
  CHECK_ERR(acc_dataloader_skip_first_batches(dl, 1), ACC_ERR_INVALID_USAGE, "in progress");
  CHECK_OK(acc_dataloader_next(dl, &b));
  fx_render(b, buf, sizeof buf);
  CHECK(strcmp(buf, "12,13,14,15") == 0 && b->end_of_dataloader, "got %s", buf);
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(b == NULL, "end of epoch 0");
  int count = 0;
  while (acc_dataloader_next(dl, &b) == ACC_OK && b) count++;
  CHECK(count == 4, "epoch 1 is whole: %d", count);
  /* Skipping everything: the epoch is empty. */
  CHECK_OK(acc_dataloader_skip_first_batches(dl, 9));
  CHECK_OK(acc_dataloader_next(dl, &b));
  CHECK(b == NULL && acc_dataloader_epoch(dl) == 3, "empty epoch");
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

/* Resume mid-epoch: state get -> new loader -> state set -> identical remaining batches. */
static void test_resume(void) {
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 50, fx_fields, 2, fx_fetch, NULL));
  for (int np = 1; np <= 3; np++) {
    int p = np - 1;
    acc_dataloader *a = mk(ds, 3, 1, 0, np, p, 0, 1, 2);
    const acc_batch *b;
    while (acc_dataloader_next(a, &b) == ACC_OK && b) {
    }
    for (int i = 0; i < 4; i++) CHECK_OK(acc_dataloader_next(a, &b));
    acc_dataloader_state st;
    CHECK_OK(acc_dataloader_state_get(a, &st));
    CHECK(st.epoch == 1 && st.batches == 4 && st.seed == 1234, "state %lld %lld", (long long)st.epoch,
          (long long)st.batches);
    /* Reference: the rest of epoch 1 and all of epoch 2 from the original loader. */
    char ref[64][128];
    int ends[64];
    int nref = 0;
    for (int e = 0; e < 2; e++)
      while (acc_dataloader_next(a, &b) == ACC_OK && b) {
        fx_render(b, ref[nref], sizeof ref[0]);
        ends[nref++] = b->end_of_dataloader;
      }
    acc_dataloader *c = mk(ds, 3, 1, 0, np, p, 0, 1, 0);
    CHECK_OK(acc_dataloader_state_set(c, &st));
    int i = 0;
    for (int e = 0; e < 2; e++)
      while (acc_dataloader_next(c, &b) == ACC_OK && b) {
        char got[128];
        fx_render(b, got, sizeof got);
        CHECK(i < nref && strcmp(got, ref[i]) == 0 && ends[i] == b->end_of_dataloader,
              "np %d resumed batch %d: %s vs %s", np, i, got, i < nref ? ref[i] : "(none)");
        CHECK(fx_batch_consistent(b), "contents");
        i++;
      }
    CHECK(i == nref, "np %d: resumed %d batches want %d", np, i, nref);
    acc_dataloader_destroy(a);
    acc_dataloader_destroy(c);
  }
  acc_dataset_destroy(ds);
}

/* Iterable datasets: IterableDatasetShard per process; one process keeps a short last batch. */
static void test_iterable(void) {
  fx_stream s = {10, 0, -1, 0};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_iterable(&ds, 10, fx_fields, 2, fx_next, fx_reset, &s));
  const acc_batch *b;
  char buf[64];
  acc_dataloader *dl = mk(ds, 2, 0, 0, 3, 2, 0, 1, 1);
  CHECK(acc_dataloader_len(dl) == 2, "len %lld", (long long)acc_dataloader_len(dl));
  for (int epoch = 0; epoch < 2; epoch++) {
    CHECK_OK(acc_dataloader_next(dl, &b));
    fx_render(b, buf, sizeof buf);
    CHECK(strcmp(buf, "4,5") == 0 && !b->end_of_dataloader && fx_batch_consistent(b), "got %s", buf);
    CHECK(acc_dataloader_remainder(dl) == 4, "remainder %lld", (long long)acc_dataloader_remainder(dl));
    CHECK_OK(acc_dataloader_next(dl, &b));
    fx_render(b, buf, sizeof buf);
    CHECK(strcmp(buf, "0,1") == 0 && b->end_of_dataloader && fx_batch_consistent(b), "padded: got %s", buf);
    CHECK_OK(acc_dataloader_next(dl, &b));
    CHECK(b == NULL, "end");
    CHECK(s.last_reset_epoch == epoch, "reset got epoch %lld", (long long)s.last_reset_epoch);
  }
  acc_dataloader_destroy(dl);
  /* One process, bs 4: 0-3, 4-7, 8-9 (short). */
  dl = mk(ds, 4, 0, 0, 1, 0, 0, 1, 0);
  int sizes[3] = {0};
  int k = 0;
  while (acc_dataloader_next(dl, &b) == ACC_OK && b && k < 3) sizes[k++] = (int)b->size;
  CHECK(k == 3 && sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2, "sizes %d %d %d", sizes[0], sizes[1], sizes[2]);
  acc_dataloader_destroy(dl);
  /* Split, 2 procs, bs 4, skip 1 of 3 real batches: p1 yields [6,7], then [1,2] from 8,9 + 0,1. */
  dl = mk(ds, 4, 0, 0, 2, 1, 1, 1, 0);
  CHECK_OK(acc_dataloader_skip_first_batches(dl, 1));
  CHECK_OK(acc_dataloader_next(dl, &b));
  fx_render(b, buf, sizeof buf);
  CHECK(strcmp(buf, "6,7") == 0 && b->index == 1, "got %s", buf);
  CHECK_OK(acc_dataloader_next(dl, &b));
  fx_render(b, buf, sizeof buf);
  CHECK(strcmp(buf, "0,1") == 0 && b->end_of_dataloader, "got %s", buf);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

/* Custom collate for variable-length samples: field 0 holds up to 4 tokens, field 1 the length;
 * the batch pads every sample to the longest one in the batch. */
static int var_fetch(int64_t index, void *const *fields, void *payload) {
  int32_t *tok = fields[0];
  int32_t *len = fields[1];
  len[0] = (int32_t)(index % 4) + 1;
  for (int i = 0; i < 4; i++) tok[i] = i < len[0] ? (int32_t)(100 * index + i) : -7;
  return 0;
}

static int pad_collate(const void *const *samples, int64_t n, int nf, void *const *batch,
                       const size_t *cap, size_t *bytes, void *payload) {
  int32_t maxlen = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t l = *(const int32_t *)samples[i * nf + 1];
    if (l > maxlen) maxlen = l;
  }
  int32_t *out = batch[0];
  for (int64_t i = 0; i < n; i++) {
    const int32_t *tok = samples[i * nf];
    int32_t l = *(const int32_t *)samples[i * nf + 1];
    for (int32_t j = 0; j < maxlen; j++) out[i * maxlen + j] = j < l ? tok[j] : 0;
    ((int32_t *)batch[1])[i] = l;
  }
  bytes[0] = (size_t)(n * maxlen) * sizeof(int32_t);
  bytes[1] = (size_t)n * sizeof(int32_t);
  return 0;
}

static void test_collate(void) {
  acc_field_desc f[2] = {{ACC_I32, 4}, {ACC_I32, 1}};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 6, f, 2, var_fetch, NULL));
  size_t cap[2] = {4 * 4 * sizeof(int32_t), 4 * sizeof(int32_t)};
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 3;
  o.collate = pad_collate;
  o.collate_capacity = cap;
  acc_dataloader *dl = NULL;
  CHECK_OK(acc_dataloader_create(&dl, ds, &o));
  const acc_batch *b;
  CHECK_OK(acc_dataloader_next(dl, &b)); /* samples 0,1,2: lengths 1,2,3 -> padded to 3 */
  const int32_t want0[9] = {0, 0, 0, 100, 101, 0, 200, 201, 202};
  CHECK(b && b->field_bytes[0] == 9 * sizeof(int32_t) && memcmp(b->fields[0], want0, sizeof want0) == 0,
        "padded batch 0");
  CHECK_OK(acc_dataloader_next(dl, &b)); /* samples 3,4,5: lengths 4,1,2 -> padded to 4 */
  CHECK(b && b->field_bytes[0] == 12 * sizeof(int32_t) && ((const int32_t *)b->fields[0])[4] == 400 &&
            ((const int32_t *)b->fields[0])[5] == 0 && ((const int32_t *)b->fields[1])[0] == 4,
        "padded batch 1");
  acc_dataloader_destroy(dl);
  o.collate_capacity = NULL;
  CHECK_ERR(acc_dataloader_create(&dl, ds, &o), ACC_ERR_INVALID_ARGUMENT, "collate_capacity");
  acc_dataset_destroy(ds);
}

/* In-memory dataset: 5 samples of {2 x f32}, {1 x i32}. */
static void test_memory(void) {
  float x[10];
  int32_t y[5];
  for (int i = 0; i < 5; i++) {
    x[2 * i] = (float)i;
    x[2 * i + 1] = (float)i + 0.5f;
    y[i] = 10 * i;
  }
  const void *data[2] = {x, y};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 5, fx_fields, 2, data));
  CHECK(acc_dataset_length(ds) == 5, "length");
  acc_dataloader *dl = mk(ds, 2, 1, 0, 1, 0, 0, 1, 1);
  const acc_batch *b;
  int n = 0, ok = 1;
  while (acc_dataloader_next(dl, &b) == ACC_OK && b) {
    ok &= fx_batch_consistent(b);
    n += (int)b->size;
  }
  CHECK(ok && n == 5, "memory dataset batches (%d samples)", n);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  const void *nodata[2] = {x, NULL};
  CHECK_ERR(acc_dataset_create_memory(&ds, 5, fx_fields, 2, nodata), ACC_ERR_INVALID_ARGUMENT, "data[1]");
}

static void test_errors(void) {
  int64_t fail_at = 5;
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 8, fx_fields, 2, fx_fetch, &fail_at));
  for (int prefetch = 0; prefetch <= 1; prefetch++) {
    acc_dataloader *dl = mk(ds, 2, 0, 0, 1, 0, 0, 1, prefetch);
    const acc_batch *b;
    CHECK_OK(acc_dataloader_next(dl, &b));
    /* Batch 1 is fine but batch 2 (indices 4, 5) fails while batch 1 looks ahead. */
    CHECK_ERR(acc_dataloader_next(dl, &b), ACC_ERR_INVALID_ARGUMENT, "sample index 5");
    CHECK_ERR(acc_dataloader_next(dl, &b), ACC_ERR_INVALID_ARGUMENT, "set_epoch");
    fail_at = -1;
    CHECK_OK(acc_dataloader_set_epoch(dl, 0));
    int count = 0;
    while (acc_dataloader_next(dl, &b) == ACC_OK && b) count++;
    CHECK(count == 4, "restarted epoch: %d batches", count);
    fail_at = 5;
    acc_dataloader_destroy(dl);
  }
  acc_dataloader *dl = NULL;
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 3;
  o.shard.num_processes = 2;
  o.shard.split_batches = 1;
  CHECK_ERR(acc_dataloader_create(&dl, ds, &o), ACC_ERR_INVALID_ARGUMENT, "round multiple");
  o.shard.split_batches = 0;
  o.batch_size = (int64_t)1 << 40;
  CHECK_ERR(acc_dataloader_create(&dl, ds, &o), ACC_ERR_INVALID_ARGUMENT, "too large");
  acc_dataloader_options init;
  CHECK_OK(acc_dataloader_options_init(&init, ACC_DATALOADER_OPTIONS_VERSION));
  CHECK(init.size == sizeof init && init.batch_size == 1 && init.shard.num_processes == 1 &&
            init.shard.even_batches == 1 && init.prefetch == 2, "options_init defaults");
  CHECK_ERR(acc_dataloader_options_init(&init, 99), ACC_ERR_INVALID_ARGUMENT, "version 99");
  /* Version 1 callers (compiled before the batch-list and dispatch fields) get only that prefix
   * written, and a loader created from it behaves as before. */
  unsigned char v1[sizeof(acc_dataloader_options) + 8];
  memset(v1, 0xAB, sizeof v1);
  CHECK_OK(acc_dataloader_options_init((acc_dataloader_options *)(void *)v1, 1));
  const size_t v1size = offsetof(acc_dataloader_options, batch_indices);
  CHECK(((acc_dataloader_options *)(void *)v1)->size == v1size && v1[v1size] == 0xAB,
        "options_init(1) wrote past the version-1 struct");
  ((acc_dataloader_options *)(void *)v1)->batch_size = 4;
  CHECK_OK(acc_dataloader_create(&dl, ds, (acc_dataloader_options *)(void *)v1));
  CHECK(acc_dataloader_len(dl) == 2, "v1 options: len %lld", (long long)acc_dataloader_len(dl));
  acc_dataloader_destroy(dl);
  dl = NULL;
  /* dispatch_batches over several processes needs the broadcast (the accelerator supplies it) */
  o = (acc_dataloader_options)ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 2;
  o.dispatch_batches = 1;
  o.shard.num_processes = 2;
  CHECK_ERR(acc_dataloader_create(&dl, ds, &o), ACC_ERR_INVALID_ARGUMENT,
            "needs a broadcast callback");
  acc_dataloader_options zero;
  memset(&zero, 0, sizeof zero);
  CHECK_ERR(acc_dataloader_create(&dl, ds, &zero), ACC_ERR_INVALID_USAGE, "ACC_DATALOADER_OPTIONS_INIT");
  CHECK_ERR(acc_dataloader_next(NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "NULL");
  acc_dataset *bad = NULL;
  CHECK_ERR(acc_dataset_create_map(&bad, 8, fx_fields, 0, fx_fetch, NULL), ACC_ERR_INVALID_ARGUMENT, "num_fields");
  CHECK(bad == NULL, "no dataset on error");
  acc_dataset_destroy(ds);
  acc_dataloader_destroy(NULL);
  acc_dataset_destroy(NULL);
}

int main(void) {
  test_end_flag();
  test_remainder();
  test_gather_for_metrics();
  test_skip();
  test_resume();
  test_iterable();
  test_collate();
  test_memory();
  test_errors();
  return acc_test_finish("data_loader");
}
