/* BatchSamplerShard and IterableDatasetShard tables at 2, 3 and 4 processes. */
#include <stdint.h>
#include <string.h>

#include "acc_test.h"
#include "accelerate/data.h"

/* Renders batches as "0,1,2|3,4,5". */
static void render(const acc_batch_shard *sh, char *buf, size_t cap) {
  size_t pos = 0;
  buf[0] = '\0';
  for (int64_t b = 0; b < acc_batch_shard_count(sh); b++) {
    const int64_t *ix;
    int64_t c;
    if (acc_batch_shard_get(sh, b, &ix, &c) != ACC_OK) return;
    for (int64_t i = 0; i < c; i++)
      pos += (size_t)snprintf(buf + pos, cap - pos, "%s%lld", i == 0 ? (b ? "|" : "") : ",",
                              (long long)ix[i]);
  }
}

typedef struct shard_case {
  int64_t n, bs;
  int np, drop_last, split, even;
  const char *expect[4]; /* per process */
  int64_t len[4];        /* __len__ per process */
} shard_case;

static const shard_case cases[] = {
    /* 2 processes */
    {24, 3, 2, 0, 0, 1, {"0,1,2|6,7,8|12,13,14|18,19,20", "3,4,5|9,10,11|15,16,17|21,22,23"}, {4, 4}},
    {22, 3, 2, 0, 0, 1, {"0,1,2|6,7,8|12,13,14|18,19,20", "3,4,5|9,10,11|15,16,17|21,0,1"}, {4, 4}},
    {22, 3, 2, 1, 0, 1, {"0,1,2|6,7,8|12,13,14", "3,4,5|9,10,11|15,16,17"}, {3, 3}},
    {22, 3, 2, 0, 0, 0, {"0,1,2|6,7,8|12,13,14|18,19,20", "3,4,5|9,10,11|15,16,17|21"}, {4, 4}},
    {21, 3, 2, 0, 0, 1, {"0,1,2|6,7,8|12,13,14|18,19,20", "3,4,5|9,10,11|15,16,17|0,1,2"}, {4, 4}},
    {21, 3, 2, 0, 0, 0, {"0,1,2|6,7,8|12,13,14|18,19,20", "3,4,5|9,10,11|15,16,17"}, {4, 3}},
    {21, 3, 2, 1, 0, 1, {"0,1,2|6,7,8|12,13,14", "3,4,5|9,10,11|15,16,17"}, {3, 3}},
    {2, 3, 2, 0, 0, 1, {"0,1,0", "1,0,1"}, {1, 1}},
    {2, 3, 2, 0, 0, 0, {"0,1", ""}, {1, 0}},
    {2, 3, 2, 1, 0, 1, {"", ""}, {0, 0}},
    {21, 4, 2, 0, 1, 1, {"0,1|4,5|8,9|12,13|16,17|20,0", "2,3|6,7|10,11|14,15|18,19|1,2"}, {6, 6}},
    {21, 4, 2, 0, 1, 0, {"0,1|4,5|8,9|12,13|16,17|20", "2,3|6,7|10,11|14,15|18,19"}, {6, 6}},
    {21, 4, 2, 1, 1, 1, {"0,1|4,5|8,9|12,13|16,17", "2,3|6,7|10,11|14,15|18,19"}, {5, 5}},
    {24, 4, 2, 0, 1, 1, {"0,1|4,5|8,9|12,13|16,17|20,21", "2,3|6,7|10,11|14,15|18,19|22,23"}, {6, 6}},
    {3, 4, 2, 0, 1, 1, {"0,1", "2,0"}, {1, 1}},
    /* 3 processes */
    {20, 2, 3, 0, 0, 1, {"0,1|6,7|12,13|18,19", "2,3|8,9|14,15|0,1", "4,5|10,11|16,17|2,3"}, {4, 4, 4}},
    {20, 2, 3, 0, 0, 0, {"0,1|6,7|12,13|18,19", "2,3|8,9|14,15", "4,5|10,11|16,17"}, {4, 3, 3}},
    {20, 2, 3, 1, 0, 1, {"0,1|6,7|12,13", "2,3|8,9|14,15", "4,5|10,11|16,17"}, {3, 3, 3}},
    {17, 3, 3, 0, 0, 1, {"0,1,2|9,10,11", "3,4,5|12,13,14", "6,7,8|15,16,0"}, {2, 2, 2}},
    {17, 3, 3, 0, 0, 0, {"0,1,2|9,10,11", "3,4,5|12,13,14", "6,7,8|15,16"}, {2, 2, 2}},
    {17, 3, 3, 1, 0, 1, {"0,1,2", "3,4,5", "6,7,8"}, {1, 1, 1}},
    {18, 3, 3, 0, 0, 1, {"0,1,2|9,10,11", "3,4,5|12,13,14", "6,7,8|15,16,17"}, {2, 2, 2}},
    {14, 6, 3, 0, 1, 1, {"0,1|6,7|12,13", "2,3|8,9|0,1", "4,5|10,11|2,3"}, {3, 3, 3}},
    {14, 6, 3, 0, 1, 0, {"0,1|6,7|12,13", "2,3|8,9", "4,5|10,11"}, {3, 3, 3}},
    /* 4 processes */
    {10, 2, 4, 0, 0, 1, {"0,1|8,9", "2,3|0,1", "4,5|2,3", "6,7|4,5"}, {2, 2, 2, 2}},
    {10, 2, 4, 0, 0, 0, {"0,1|8,9", "2,3", "4,5", "6,7"}, {2, 1, 1, 1}},
    {10, 2, 4, 1, 0, 1, {"0,1", "2,3", "4,5", "6,7"}, {1, 1, 1, 1}},
    {16, 2, 4, 0, 0, 1, {"0,1|8,9", "2,3|10,11", "4,5|12,13", "6,7|14,15"}, {2, 2, 2, 2}},
    {5, 2, 4, 0, 0, 1, {"0,1", "2,3", "4,0", "1,2"}, {1, 1, 1, 1}},
    {10, 8, 4, 0, 1, 1, {"0,1|8,9", "2,3|0,1", "4,5|2,3", "6,7|4,5"}, {2, 2, 2, 2}},
    {10, 8, 4, 0, 1, 0, {"0,1|8,9", "2,3", "4,5", "6,7"}, {2, 2, 2, 2}},
    {10, 8, 4, 1, 1, 1, {"0,1", "2,3", "4,5", "6,7"}, {1, 1, 1, 1}},
};

static void test_tables(void) {
  char buf[4096];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const shard_case *k = &cases[c];
    int64_t order[64];
    for (int64_t i = 0; i < k->n; i++) order[i] = i;
    for (int p = 0; p < k->np; p++) {
      acc_shard_config cfg = {k->np, p, k->split, k->even};
      acc_batch_shard *sh = NULL;
      CHECK_OK(acc_batch_shard_create(&sh, order, k->n, k->bs, k->drop_last, &cfg));
      if (!sh) continue;
      render(sh, buf, sizeof buf);
      CHECK(strcmp(buf, k->expect[p]) == 0,
            "case %zu (n=%lld bs=%lld np=%d drop=%d split=%d even=%d) p%d: got \"%s\" want \"%s\"",
            c, (long long)k->n, (long long)k->bs, k->np, k->drop_last, k->split, k->even, p, buf,
            k->expect[p]);
      CHECK(acc_batch_shard_len(sh) == k->len[p], "case %zu p%d: len %lld want %lld", c, p,
            (long long)acc_batch_shard_len(sh), (long long)k->len[p]);
      /* len matches what is yielded, except split mode with even_batches off (documented). */
      if (!(k->split && !k->even))
        CHECK(acc_batch_shard_len(sh) == acc_batch_shard_count(sh), "case %zu p%d: len %lld yielded %lld",
              c, p, (long long)acc_batch_shard_len(sh), (long long)acc_batch_shard_count(sh));
      acc_batch_shard_destroy(sh);
    }
  }
}

/* One process: plain BatchSampler, last batch short unless drop_last. */
static void test_single_process(void) {
  char buf[256];
  int64_t order[7] = {6, 5, 4, 3, 2, 1, 0};
  acc_shard_config cfg = ACC_SHARD_CONFIG_INIT;
  acc_batch_shard *sh = NULL;
  CHECK_OK(acc_batch_shard_create(&sh, order, 7, 3, 0, &cfg));
  render(sh, buf, sizeof buf);
  CHECK(strcmp(buf, "6,5,4|3,2,1|0") == 0, "got %s", buf);
  CHECK(acc_batch_shard_len(sh) == 3, "len %lld", (long long)acc_batch_shard_len(sh));
  acc_batch_shard_destroy(sh);
  CHECK_OK(acc_batch_shard_create(&sh, order, 7, 3, 1, &cfg));
  render(sh, buf, sizeof buf);
  CHECK(strcmp(buf, "6,5,4|3,2,1") == 0, "got %s", buf);
  acc_batch_shard_destroy(sh);
  /* Padding comes from the start of the epoch's order, not from index 0. */
  acc_shard_config c2 = {2, 1, 0, 1};
  CHECK_OK(acc_batch_shard_create(&sh, order, 7, 2, 0, &c2));
  render(sh, buf, sizeof buf);
  CHECK(strcmp(buf, "4,3|0,6") == 0, "got %s", buf);
  acc_batch_shard_destroy(sh);
}

static void test_errors(void) {
  int64_t order[8] = {0};
  acc_batch_shard *sh = NULL;
  acc_shard_config split = {2, 0, 1, 1};
  CHECK_ERR(acc_batch_shard_create(&sh, order, 8, 3, 0, &split), ACC_ERR_INVALID_ARGUMENT,
            "round multiple of the number of processes (2)");
  CHECK(sh == NULL, "no shard on error");
  acc_shard_config badp = {2, 2, 0, 1};
  CHECK_ERR(acc_batch_shard_create(&sh, order, 8, 2, 0, &badp), ACC_ERR_INVALID_ARGUMENT,
            "process_index is 2");
  CHECK_ERR(acc_batch_shard_create(&sh, order, 8, 0, 0, &split), ACC_ERR_INVALID_ARGUMENT,
            "batch_size is 0");
  acc_shard_config big = {4, 0, 0, 1};
  CHECK_ERR(acc_batch_shard_create(&sh, order, 8, (int64_t)1 << 40, 0, &big), ACC_ERR_INVALID_ARGUMENT,
            "too large");
  acc_iterable_shard *it = NULL;
  CHECK_ERR(acc_iterable_shard_create(&it, (int64_t)1 << 40, 0, &big), ACC_ERR_INVALID_ARGUMENT, "too large");
  acc_shard_config split4 = {4, 0, 1, 1};
  CHECK_ERR(acc_iterable_shard_create(&it, 6, 0, &split4), ACC_ERR_INVALID_ARGUMENT,
            "`IterableDatasetShard` in `split_batches` mode");
  const int64_t *ix;
  int64_t c;
  CHECK_ERR(acc_batch_shard_get(NULL, 0, &ix, &c), ACC_ERR_INVALID_ARGUMENT, "NULL");
}

/* Runs an IterableDatasetShard over 0..n-1 and renders its yields. */
static void run_iter(int64_t n, int64_t bs, int np, int p, int drop, int split, char *buf, size_t cap) {
  acc_iterable_shard *it = NULL;
  acc_shard_config cfg = {np, p, split, 1};
  size_t pos = 0;
  buf[0] = '\0';
  if (acc_iterable_shard_create(&it, bs, drop, &cfg) != ACC_OK) {
    snprintf(buf, cap, "error: %s", acc_last_error());
    return;
  }
  const int64_t *items;
  int64_t c;
  int first = 1;
  for (int64_t e = 0; e <= n; e++) {
    int ready = e < n ? acc_iterable_shard_push(it, e, &items, &c) : acc_iterable_shard_finish(it, &items, &c);
    if (!ready) continue;
    for (int64_t i = 0; i < c; i++)
      pos += (size_t)snprintf(buf + pos, cap - pos, "%s%lld", i == 0 ? (first ? "" : "|") : ",",
                              (long long)items[i]);
    first = 0;
  }
  acc_iterable_shard_destroy(it);
}

typedef struct iter_case {
  int64_t n, bs;
  int np, drop, split;
  const char *expect[4];
} iter_case;

static void test_iterable(void) {
  static const iter_case ic[] = {
      {8, 4, 2, 0, 0, {"0,1,2,3", "4,5,6,7"}},
      {8, 4, 2, 0, 1, {"0,1|4,5", "2,3|6,7"}},
      {10, 2, 3, 0, 0, {"0,1|6,7", "2,3|8,9", "4,5|0,1"}},
      {10, 2, 3, 1, 0, {"0,1", "2,3", "4,5"}},
      {3, 2, 2, 0, 0, {"0,1", "2,0"}},
      {3, 2, 2, 1, 0, {"", ""}},
      {10, 4, 4, 0, 1, {"0|4|8", "1|5|9", "2|6|0", "3|7|1"}},
      {12, 4, 4, 0, 0, {"0,1,2,3", "4,5,6,7", "8,9,10,11", "0,1,2,3"}},
      {20, 2, 4, 0, 0, {"0,1|8,9|16,17", "2,3|10,11|18,19", "4,5|12,13|0,1", "6,7|14,15|2,3"}},
  };
  char buf[512];
  for (size_t c = 0; c < sizeof ic / sizeof ic[0]; c++)
    for (int p = 0; p < ic[c].np; p++) {
      run_iter(ic[c].n, ic[c].bs, ic[c].np, p, ic[c].drop, ic[c].split, buf, sizeof buf);
      CHECK(strcmp(buf, ic[c].expect[p]) == 0, "iter case %zu p%d: got \"%s\" want \"%s\"", c, p,
            buf, ic[c].expect[p]);
    }
  CHECK(acc_iterable_shard_len(10, 2, 0, 3) == 4, "len");
  CHECK(acc_iterable_shard_len(10, 2, 1, 3) == 2, "len drop_last");
  CHECK(acc_iterable_shard_len(8, 4, 0, 2) == 4, "len docstring");
  /* The shard resets after finish: a second epoch gives the same chunks. */
  acc_iterable_shard *it = NULL;
  acc_shard_config cfg = {2, 1, 0, 1};
  CHECK_OK(acc_iterable_shard_create(&it, 2, 0, &cfg));
  for (int ep = 0; ep < 2; ep++) {
    const int64_t *items;
    int64_t c;
    int got = 0;
    for (int64_t e = 0; e < 5; e++) got += acc_iterable_shard_push(it, 100 + e, &items, &c);
    CHECK(got == 1, "epoch %d: one full real batch", ep);
    CHECK(acc_iterable_shard_finish(it, &items, &c) == 1 && c == 2 && items[0] == 101 &&
              items[1] == 102, "epoch %d: padded chunk from the first real batch", ep);
  }
  acc_iterable_shard_destroy(it);
}

/* The union over processes of a shuffled epoch is the permutation plus exactly the padding. */
static void test_union_is_permutation(void) {
  for (int np = 2; np <= 4; np++)
    for (int64_t n = 1; n <= 40; n += 3) {
      int64_t order[64];
      CHECK_OK(acc_sampler_order(order, n, 1, 1234, 5));
      int seen[64] = {0};
      int64_t total = 0, bs = 3;
      for (int p = 0; p < np; p++) {
        acc_shard_config cfg = {np, p, 0, 1};
        acc_batch_shard *sh = NULL;
        CHECK_OK(acc_batch_shard_create(&sh, order, n, bs, 0, &cfg));
        for (int64_t b = 0; b < acc_batch_shard_count(sh); b++) {
          const int64_t *ix;
          int64_t c;
          CHECK_OK(acc_batch_shard_get(sh, b, &ix, &c));
          for (int64_t i = 0; i < c; i++) seen[ix[i]]++;
          total += c;
        }
        acc_batch_shard_destroy(sh);
      }
      int64_t L = acc_batch_sampler_len(n, bs, 0);
      int64_t per = (L + np - 1) / np;
      CHECK(total == per * np * bs, "np %d n %lld: total %lld", np, (long long)n, (long long)total);
      /* Every index at least once; the duplicates are the first (total - n) of the order. */
      int64_t pad = total - n;
      for (int64_t i = 0; i < n; i++) {
        int64_t pos_rank = i; /* position of order[i] */
        int expect = 1;
        /* padding cycles through the start of the order */
        for (int64_t k = 0; k < pad; k++)
          if (k % (n < np * bs ? n : np * bs) == pos_rank) expect++;
        CHECK(seen[order[i]] == expect, "np %d n %lld: index %lld seen %d want %d", np,
              (long long)n, (long long)order[i], seen[order[i]], expect);
      }
    }
}

/* even_batches off: no padding, so the union over processes is exactly the epoch's order (each
 * index once); with drop_last (no split) it is the first (L / np) * np batches. len == yielded
 * outside split mode; every process gets the same count with even_batches on. */
static void test_properties(void) {
  int64_t order[64];
  for (int np = 2; np <= 4; np++)
    for (int64_t bs = 1; bs <= 8; bs++)
      for (int64_t n = 0; n <= 41; n++)
        for (int split = 0; split <= 1; split++)
          for (int drop = 0; drop <= 1; drop++)
            for (int even = 0; even <= 1; even++) {
              if (split && bs % np) continue;
              CHECK_OK(acc_sampler_order(order, n, 1, (uint64_t)(n * 31 + bs), 0));
              int seen[64] = {0};
              int64_t counts[4] = {0};
              int64_t total = 0;
              for (int p = 0; p < np; p++) {
                acc_shard_config cfg = {np, p, split, even};
                acc_batch_shard *sh = NULL;
                CHECK_OK(acc_batch_shard_create(&sh, order, n, bs, drop, &cfg));
                if (!sh) return;
                counts[p] = acc_batch_shard_count(sh);
                if (!split)
                  CHECK(acc_batch_shard_len(sh) == counts[p], "np %d bs %lld n %lld drop %d even %d p%d: len %lld yielded %lld",
                        np, (long long)bs, (long long)n, drop, even, p, (long long)acc_batch_shard_len(sh), (long long)counts[p]);
                for (int64_t b = 0; b < counts[p]; b++) {
                  const int64_t *ix;
                  int64_t c;
                  CHECK_OK(acc_batch_shard_get(sh, b, &ix, &c));
                  CHECK(c <= (split ? bs / np : bs) && c > 0, "batch size %lld", (long long)c);
                  if (even) CHECK(c == (split ? bs / np : bs), "even: full batches");
                  for (int64_t i = 0; i < c; i++) seen[ix[i]]++;
                  total += c;
                }
                acc_batch_shard_destroy(sh);
              }
              if (even)
                for (int p = 1; p < np; p++) CHECK(counts[p] == counts[0], "even: same batch count");
              if (!even) {
                int64_t L = acc_batch_sampler_len(n, bs, drop);
                int64_t covered = split ? (drop ? L * bs : n) : (drop ? (L / np) * np * bs : n);
                int ok = total == covered;
                for (int64_t i = 0; i < n; i++) ok &= seen[order[i]] == (i < covered ? 1 : 0);
                CHECK(ok, "np %d bs %lld n %lld split %d drop %d: union is the order's first %lld",
                      np, (long long)bs, (long long)n, split, drop, (long long)covered);
              }
            }
}

static void test_sampler(void) {
  int64_t a[50], b[50], c[50];
  CHECK_OK(acc_sampler_order(a, 50, 1, 42, 0));
  CHECK_OK(acc_sampler_order(b, 50, 1, 42, 0));
  CHECK_OK(acc_sampler_order(c, 50, 1, 42, 1));
  CHECK(memcmp(a, b, sizeof a) == 0, "same seed+epoch, same order");
  CHECK(memcmp(a, c, sizeof a) != 0, "next epoch, new order");
  int seen[50] = {0};
  for (int i = 0; i < 50; i++) seen[a[i]]++;
  int ok = 1;
  for (int i = 0; i < 50; i++) ok &= seen[i] == 1;
  CHECK(ok, "a permutation");
  CHECK_OK(acc_sampler_order(a, 5, 0, 42, 3));
  CHECK(a[0] == 0 && a[4] == 4, "sequential");
  CHECK(acc_batch_sampler_len(10, 3, 0) == 4 && acc_batch_sampler_len(10, 3, 1) == 3, "len");
}

/* ---- BatchSamplerShard over a given list of batches of different sizes ------------------------
 * Every expected table below was worked out by hand from the BatchSamplerShard rules (docs/data.md),
 * not produced by the code under test. Lists:
 *   A: [0,1,2] [3] [4,5] [6,7,8,9] [10,11]           (no fixed batch size)
 *   B: [0,1] [2,3,4]                                 (no fixed batch size, fewer batches than processes)
 *   C: [0,1,2,3] [4,5] [6,7,8,9] [10,11,12,13] [14,15,16]   (batch_size 4: [4,5] is short mid-list)
 *   D: [0,1,2] [3,4,5] [6,7] [8,9,10] [11]           (batch_size 3: [6,7] closes a round short) */
typedef struct list_case {
  char list;
  int64_t bs; /* the sampler's batch_size; 0 = none */
  int np, drop_last, split, even;
  const char *expect[4];
  int64_t len[4];
} list_case;

static const int64_t list_a_counts[] = {3, 1, 2, 4, 2};
static const int64_t list_b_counts[] = {2, 3};
static const int64_t list_c_counts[] = {4, 2, 4, 4, 3};
static const int64_t list_d_counts[] = {3, 3, 2, 3, 1};

static const list_case list_cases[] = {
    /* A, dynamic: every round is released; padding batches are whole batches of the start. */
    {'A', 0, 2, 0, 0, 1, {"0,1,2|4,5|10,11", "3|6,7,8,9|0,1,2"}, {3, 3}},
    {'A', 0, 2, 0, 0, 0, {"0,1,2|4,5|10,11", "3|6,7,8,9"}, {3, 2}},
    {'A', 0, 2, 1, 0, 1, {"0,1,2|4,5", "3|6,7,8,9"}, {2, 2}},
    {'A', 0, 3, 0, 0, 1, {"0,1,2|6,7,8,9", "3|10,11", "4,5|0,1,2"}, {2, 2, 2}},
    {'A', 0, 3, 0, 0, 0, {"0,1,2|6,7,8,9", "3|10,11", "4,5"}, {2, 2, 1}},
    {'A', 0, 4, 0, 0, 1, {"0,1,2|10,11", "3|0,1,2", "4,5|3", "6,7,8,9|4,5"}, {2, 2, 2, 2}},
    /* B: fewer batches than processes; the list of initial batches is repeated. */
    {'B', 0, 4, 0, 0, 1, {"0,1", "2,3,4", "0,1", "2,3,4"}, {1, 1, 1, 1}},
    /* C, batch_size 4, no split: the round [0..3] [4,5] closes short, so it is never released
     * (Accelerate drops it); the last short batch is topped up from the first batches. */
    {'C', 4, 2, 0, 0, 1, {"6,7,8,9|14,15,16,0", "10,11,12,13|1,2,3,4"}, {3, 3}},
    {'C', 4, 2, 0, 0, 0, {"6,7,8,9|14,15,16", "10,11,12,13"}, {3, 2}},
    /* C, split (chunk = 4 / processes): only full batches are split, the short mid-list batch is
     * skipped, the short last one is completed with the first batch. */
    {'C', 4, 2, 0, 1, 1, {"0,1|6,7|10,11|14,15", "2,3|8,9|12,13|16,0"}, {5, 5}},
    {'C', 4, 2, 0, 1, 0, {"0,1|6,7|10,11|14,15", "2,3|8,9|12,13|16"}, {5, 5}},
    {'C', 4, 2, 1, 1, 1, {"0,1|6,7|10,11", "2,3|8,9|12,13"}, {5, 5}},
    {'C', 4, 4, 0, 1, 1, {"0|6|10|14", "1|7|11|15", "2|8|12|16", "3|9|13|0"}, {5, 5, 5, 5}},
    {'C', 4, 4, 0, 1, 0, {"0|6|10|14", "1|7|11|15", "2|8|12|16", "3|9|13"}, {5, 5, 5, 5}},
    /* D, batch_size 3, 3 processes: the first round is held back by [6,7]; at the end process 2
     * still holds [6,7] (yielded only without even_batches). */
    {'D', 3, 3, 0, 0, 1, {"8,9,10", "11,0,1", "2,3,4"}, {2, 2, 2}},
    {'D', 3, 3, 0, 0, 0, {"8,9,10", "11", "6,7"}, {2, 2, 1}},
};

static void list_of(char which, const int64_t **counts, int64_t *nb, int64_t *idx) {
  switch (which) {
    case 'A':
      *counts = list_a_counts;
      *nb = 5;
      break;
    case 'B':
      *counts = list_b_counts;
      *nb = 2;
      break;
    case 'C':
      *counts = list_c_counts;
      *nb = 5;
      break;
    default:
      *counts = list_d_counts;
      *nb = 5;
      break;
  }
  for (int64_t i = 0; i < 64; i++) idx[i] = i; /* every list holds 0, 1, 2, ... in order */
}

static void test_batch_lists(void) {
  char buf[1024];
  int64_t idx[64];
  for (size_t c = 0; c < sizeof list_cases / sizeof list_cases[0]; c++) {
    const list_case *k = &list_cases[c];
    const int64_t *counts;
    int64_t nb;
    list_of(k->list, &counts, &nb, idx);
    for (int p = 0; p < k->np; p++) {
      acc_shard_config cfg = {k->np, p, k->split, k->even};
      acc_batch_shard *sh = NULL;
      CHECK_OK(
          acc_batch_shard_create_from_batches(&sh, idx, counts, nb, k->bs, k->drop_last, &cfg));
      if (!sh) continue;
      render(sh, buf, sizeof buf);
      CHECK(strcmp(buf, k->expect[p]) == 0,
            "list case %zu (%c bs=%lld np=%d drop=%d split=%d even=%d) p%d: got \"%s\" want \"%s\"",
            c, k->list, (long long)k->bs, k->np, k->drop_last, k->split, k->even, p, buf,
            k->expect[p]);
      CHECK(acc_batch_shard_len(sh) == k->len[p], "list case %zu p%d: len %lld want %lld", c, p,
            (long long)acc_batch_shard_len(sh), (long long)k->len[p]);
      acc_batch_shard_destroy(sh);
    }
  }
  /* One process: the list as given. */
  const int64_t *counts;
  int64_t nb;
  list_of('A', &counts, &nb, idx);
  acc_shard_config one = ACC_SHARD_CONFIG_INIT;
  acc_batch_shard *sh = NULL;
  CHECK_OK(acc_batch_shard_create_from_batches(&sh, idx, counts, nb, 0, 0, &one));
  render(sh, buf, sizeof buf);
  CHECK(strcmp(buf, "0,1,2|3|4,5|6,7,8,9|10,11") == 0, "one process: %s", buf);
  acc_batch_shard_destroy(sh);
  /* Errors. */
  acc_shard_config split2 = {2, 0, 1, 1}, split3 = {3, 0, 1, 1};
  CHECK_ERR(acc_batch_shard_create_from_batches(&sh, idx, counts, nb, 0, 0, &split2),
            ACC_ERR_INVALID_ARGUMENT, "split_batches` mode, the batch size (none");
  list_of('C', &counts, &nb, idx);
  CHECK_ERR(acc_batch_shard_create_from_batches(&sh, idx, counts, nb, 4, 0, &split3),
            ACC_ERR_INVALID_ARGUMENT,
            "the batch size (4) needs to be a round multiple of the number of processes (3)");
  CHECK_ERR(acc_batch_shard_create_from_batches(&sh, idx, counts, nb, 3, 0, &one),
            ACC_ERR_INVALID_ARGUMENT, "batch 0 has 4 samples, more than the batch_size 3");
  const int64_t zero[] = {2, 0, 1};
  CHECK_ERR(acc_batch_shard_create_from_batches(&sh, idx, zero, 3, 0, 0, &one),
            ACC_ERR_INVALID_ARGUMENT, "batch 1 has 0 samples");
  CHECK_ERR(acc_batch_shard_create_from_batches(&sh, NULL, counts, 2, 0, 0, &one),
            ACC_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(sh == NULL, "no shard on error");
}

int main(void) {
  test_tables();
  test_single_process();
  test_errors();
  test_iterable();
  test_union_is_permutation();
  test_sampler();
  test_properties();
  test_batch_lists();
  return acc_test_finish("data_shard");
}
