/* Token-stream datasets (acc_dataset_create_tokens), run by the launcher at 1, 2 and 4 processes.
 * Each process writes its own token files (an llm.c shard, raw uint16, raw uint32) and checks:
 *  - window i is tokens [i T, i T + T] of its file, split into inputs and targets; windows never
 *    cross files; the window count per file is (n - 1) / T;
 *  - bad files: wrong magic, wrong version, truncated shard, raw size not a multiple of the
 *    width, too few tokens, a token outside vocab_size (the loader's error names file, position);
 *  - prepared with shuffling on and a global batch of 8 (8 / N per process), the windows of every
 *    process gathered in rank order are, step by step, exactly those of one unsharded loader of
 *    batch 8 (1 x 2B == 2 x B), and the order is really shuffled;
 *  - a loader position taken mid-epoch and set on a new prepared loader continues on the same
 *    windows. */
#include <stdint.h>
#include <sys/stat.h>

#include "acc_test.h"

static int rank, nprocs;
static char dir[512];
#define T 6

static uint32_t tok(int file, int64_t p) { return (uint32_t)((file * 1009 + p * 7) % 50257); }

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void write_bytes(const char *name, const void *buf, size_t n) {
  char p[600];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(buf, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", p);
    exit(1);
  }
  fclose(f);
}

/* an llm.c shard of n uint16 tokens; header fields overridable */
static void write_llmc(const char *name, int file, int64_t n, int32_t magic, int32_t version, int32_t count,
                       int64_t keep) {
  size_t bytes = 1024 + (size_t)n * 2;
  unsigned char *b = calloc(1, bytes);
  int32_t h[3] = {magic, version, count};
  memcpy(b, h, sizeof h); /* little-endian host (x86-64, aarch64) */
  for (int64_t p = 0; p < n; p++) {
    uint16_t t = (uint16_t)tok(file, p);
    memcpy(b + 1024 + 2 * p, &t, 2);
  }
  write_bytes(name, b, keep >= 0 ? (size_t)keep : bytes);
  free(b);
}

static void write_raw(const char *name, int file, int64_t n, int width) {
  unsigned char *b = calloc((size_t)n, (size_t)width);
  for (int64_t p = 0; p < n; p++) {
    uint32_t t = tok(file, p);
    if (width == 2) {
      uint16_t s = (uint16_t)t;
      memcpy(b + 2 * p, &s, 2);
    } else {
      memcpy(b + 4 * p, &t, 4);
    }
  }
  write_bytes(name, b, (size_t)n * (size_t)width);
  free(b);
}

static acc_result create(acc_dataset **ds, const char *const *names, int n, acc_token_format fmt, int64_t vocab) {
  char paths[4][600];
  const char *pp[4];
  for (int i = 0; i < n; i++) {
    path_of(paths[i], sizeof paths[i], names[i]);
    pp[i] = paths[i];
  }
  acc_token_options o = ACC_TOKEN_OPTIONS_INIT;
  o.seq_len = T;
  o.format = fmt;
  o.vocab_size = vocab;
  return acc_dataset_create_tokens(ds, pp, n, &o);
}

static void test_windows(void) {
  /* file 0: llm.c shard of 40 tokens -> 6 windows; file 1: 13 tokens -> 2 windows */
  write_llmc("a.bin", 0, 40, 20240520, 1, 40, -1);
  write_llmc("b.bin", 1, 13, 20240520, 1, 13, -1);
  const char *names[2] = {"a.bin", "b.bin"};
  acc_dataset *ds;
  REQUIRE_OK(create(&ds, names, 2, ACC_TOKENS_LLMC, 0));
  CHECK(acc_dataset_length(ds) == 8, "%lld windows, expected 6 + 2", (long long)acc_dataset_length(ds));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 8;
  lo.prefetch = 0;
  acc_dataloader *dl;
  REQUIRE_OK(acc_dataloader_create(&dl, ds, &lo));
  const acc_batch *b;
  REQUIRE_OK(acc_dataloader_next(dl, &b));
  CHECK(b && b->size == 8 && b->field_bytes[0] == 8 * T * 4, "one batch of 8 windows of %d int32", T);
  int bad = 0;
  for (int w = 0; b && w < 8; w++) {
    int file = w < 6 ? 0 : 1;
    int64_t start = (w < 6 ? w : w - 6) * T;
    const int32_t *in = (const int32_t *)b->fields[0] + w * T, *tg = (const int32_t *)b->fields[1] + w * T;
    for (int k = 0; k < T; k++) {
      if (in[k] != (int32_t)tok(file, start + k)) bad++;
      if (tg[k] != (int32_t)tok(file, start + k + 1)) bad++;
    }
  }
  CHECK(bad == 0, "%d tokens differ from the files", bad);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  /* raw formats: same tokens */
  write_raw("c.u16", 2, 25, 2);
  write_raw("d.u32", 3, 25, 4);
  const char *n16[1] = {"c.u16"}, *n32[1] = {"d.u32"};
  for (int f = 0; f < 2; f++) {
    REQUIRE_OK(create(&ds, f ? n32 : n16, 1, f ? ACC_TOKENS_U32 : ACC_TOKENS_U16, 0));
    CHECK(acc_dataset_length(ds) == 4, "raw: %lld windows, expected (25 - 1) / 6 = 4", (long long)acc_dataset_length(ds));
    REQUIRE_OK(acc_dataloader_create(&dl, ds, &lo));
    REQUIRE_OK(acc_dataloader_next(dl, &b));
    const int32_t *in = b->fields[0], *tg = b->fields[1];
    CHECK(in[3 * T] == (int32_t)tok(2 + f, 3 * T) && tg[4 * T - 1] == (int32_t)tok(2 + f, 24),
          "raw uint%d: last window", f ? 32 : 16);
    acc_dataloader_destroy(dl);
    acc_dataset_destroy(ds);
  }
}

static void test_errors(void) {
  acc_dataset *ds = NULL;
  write_llmc("magic.bin", 0, 20, 12345, 1, 20, -1);
  write_llmc("version.bin", 0, 20, 20240520, 3, 20, -1);
  write_llmc("short.bin", 0, 20, 20240520, 1, 20, 1024 + 30);
  write_raw("odd.u32", 0, 10, 2); /* 20 bytes: fine for u16, 5 u32 */
  write_raw("tiny.u16", 0, 5, 2);
  write_raw("odd3.u16", 0, 10, 2);
  const char *magic[1] = {"magic.bin"}, *ver[1] = {"version.bin"}, *sh[1] = {"short.bin"}, *tiny[1] = {"tiny.u16"};
  CHECK_ERR(create(&ds, magic, 1, ACC_TOKENS_LLMC, 0), ACC_ERR_INVALID_ARGUMENT, "magic.bin': header field 'magic'");
  CHECK_ERR(create(&ds, ver, 1, ACC_TOKENS_LLMC, 0), ACC_ERR_INVALID_ARGUMENT, "header field 'version' (int32 1) is 3");
  CHECK_ERR(create(&ds, sh, 1, ACC_TOKENS_LLMC, 0), ACC_ERR_INVALID_ARGUMENT, "'token count' (int32 2) is 20");
  CHECK_ERR(create(&ds, tiny, 1, ACC_TOKENS_U16, 0), ACC_ERR_INVALID_ARGUMENT, "hold no window of seq_len + 1 = 7");
  CHECK(ds == NULL, "no dataset on error");
  /* a raw uint16 file read as llm.c: too short for the header, the message suggests raw formats */
  CHECK_ERR(create(&ds, tiny, 1, ACC_TOKENS_LLMC, 0), ACC_ERR_INVALID_ARGUMENT, "ACC_TOKENS_U16");
  {
    char p[600];
    path_of(p, sizeof p, "odd5.u32");
    FILE *f = fopen(p, "wb");
    fwrite("abcdefghijklmnopqrstuvw", 1, 23, f);
    fclose(f);
    const char *o5[1] = {"odd5.u32"};
    CHECK_ERR(create(&ds, o5, 1, ACC_TOKENS_U32, 0), ACC_ERR_INVALID_ARGUMENT, "23 bytes, not a multiple of 4");
  }
  const char *missing[1] = {"missing.bin"};
  CHECK(create(&ds, missing, 1, ACC_TOKENS_LLMC, 0) != ACC_OK && strstr(acc_last_error(), "missing.bin"),
        "a missing file is named: %s", acc_last_error());
  acc_token_options o = ACC_TOKEN_OPTIONS_INIT;
  const char *one[1] = {"odd3.u16"};
  CHECK_ERR(acc_dataset_create_tokens(&ds, one, 1, &o), ACC_ERR_INVALID_ARGUMENT, "seq_len is 0");
  CHECK_ERR(acc_dataset_create_tokens(&ds, one, 1, NULL), ACC_ERR_INVALID_ARGUMENT, "options are required");
  /* a token outside the vocabulary: the loader's error names the file and the position */
  const char *big[1] = {"d.u32"}; /* tokens up to 50256 */
  REQUIRE_OK(create(&ds, big, 1, ACC_TOKENS_U32, 100));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 2;
  lo.prefetch = 1;
  acc_dataloader *dl;
  REQUIRE_OK(acc_dataloader_create(&dl, ds, &lo));
  const acc_batch *b;
  acc_result rc = acc_dataloader_next(dl, &b);
  CHECK(rc != ACC_OK && strstr(acc_last_error(), "d.u32' is") && strstr(acc_last_error(), "vocab_size 100"),
        "out-of-vocabulary token: %s", acc_last_error());
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

static void test_sharded(void) {
  /* 3 files, 51 + 40 + 70 tokens -> 8 + 6 + 11 = 25 windows */
  write_llmc("s0.bin", 10, 51, 20240520, 1, 51, -1);
  write_llmc("s1.bin", 11, 40, 20240520, 1, 40, -1);
  write_llmc("s2.bin", 12, 70, 20240520, 1, 70, -1);
  const char *names[3] = {"s0.bin", "s1.bin", "s2.bin"};
  acc_dataset *ds;
  REQUIRE_OK(create(&ds, names, 3, ACC_TOKENS_LLMC, 50257));
  CHECK(acc_dataset_length(ds) == 25, "%lld windows", (long long)acc_dataset_length(ds));
  const int GB = 8, B = GB / nprocs;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = B;
  lo.shuffle = 1;
  lo.seed = 1234;
  lo.drop_last = 1;
  acc_dataloader *dl, *ref;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  acc_dataloader_options ro = lo;
  ro.batch_size = GB;
  REQUIRE_OK(acc_dataloader_create(&ref, ds, &ro)); /* one process's view of the same run */
  int32_t *all = malloc((size_t)GB * T * sizeof(int32_t) * 2);
  int steps = 0, bad = 0, shuffled = 0;
  acc_dataloader_state mid = {0};
  int32_t after_mid[8 * T];
  for (;;) {
    const acc_batch *b, *r;
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    REQUIRE_OK(acc_dataloader_next(ref, &r));
    CHECK((b == NULL) == (r == NULL), "the sharded and the single loader end together (step %d)", steps);
    if (!b || !r) break;
    REQUIRE_OK(acc_all_gather(acc_accelerator_state(acc), b->fields[0], all, (size_t)B * T, ACC_I32));
    REQUIRE_OK(acc_all_gather(acc_accelerator_state(acc), b->fields[1], all + GB * T, (size_t)B * T, ACC_I32));
    if (memcmp(all, r->fields[0], (size_t)GB * T * 4) || memcmp(all + GB * T, r->fields[1], (size_t)GB * T * 4))
      bad++;
    for (int i = 0; i < GB; i++) shuffled |= r->indices[i] != steps * GB + i;
    if (steps == 1) memcpy(after_mid, b->fields[0], (size_t)B * T * 4);
    if (steps == 0) REQUIRE_OK(acc_dataloader_state_get(dl, &mid));
    steps++;
  }
  CHECK(steps == 25 / GB, "%d steps, expected %d", steps, 25 / GB);
  CHECK(bad == 0, "%d steps where %d x %d windows differ from 1 x %d", bad, nprocs, B, GB);
  CHECK(shuffled, "the order is shuffled");
  /* resumed mid-epoch on a new loader: the batch after the saved position */
  acc_dataloader *again;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &again));
  REQUIRE_OK(acc_dataloader_state_set(again, &mid));
  const acc_batch *b;
  REQUIRE_OK(acc_accelerator_next_batch(acc, again, &b));
  CHECK(b && memcmp(b->fields[0], after_mid, (size_t)B * T * 4) == 0, "resumed on the second batch");
  free(all);
  acc_dataloader_destroy(again);
  acc_dataloader_destroy(dl);
  acc_dataloader_destroy(ref);
  acc_accelerator_destroy(acc);
  acc_dataset_destroy(ds);
}

int main(int argc, char **argv) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  if (argc < 2) return 2;
  mkdir(argv[1], 0755);
  snprintf(dir, sizeof dir, "%s/np%d_r%d", argv[1], nprocs, rank);
  mkdir(dir, 0755);
  test_windows();
  test_errors();
  test_sharded();
  return acc_test_finish("data_tokens");
}
