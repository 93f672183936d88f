/* The token loader over several shard files (issue 33 item 5), run by the launcher at 1 and 2
 * processes with real files:
 *  cpu mode:
 *  - a glob pattern ("<dir>/shard_*.bin", as llm.c's loader takes) expands to its matches in byte
 *    order (the files are created out of order) and the shards are read as one stream in that
 *    order: the windows of every process gathered in rank order are the windows of shard 0, then
 *    shard 1, then shard 2, and no window spans two shards (a shard's tail shorter than a window
 *    is skipped); the same files listed one by one give the same stream, listed in another
 *    order, that order;
 *  - errors: a pattern matching nothing names the pattern; a matched shard with a bad header names
 *    that file; at 2 processes, processes that see different files (each process in a directory
 *    of its own, one relative pattern: a shard missing on process 1, one of another size, one
 *    extra) fail on every process with ACC_ERR_MISMATCH naming process 1 and the file;
 *  - resume across shards: save_state after a batch that crossed from shard 0 into shard 1, ten
 *    more batches, load_state, the same ten batches bit for bit (in file order and shuffled);
 *  dev mode (the strict fake device, whose memory faults when host code touches it):
 *  - host_batches = 1: every batch is host memory (read by host code; acc_batch.device_fields
 *    NULL; not a device pointer), holding exactly the tokens a default loader over the same files
 *    places in device memory (copied back with acc_accelerator_memcpy);
 *  - host_batches other than 0 or 1 is refused naming the field.
 *
 * Usage (through accelerate launch): test_token_shards cpu|dev DIR */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"

#define T 4
#define B 2
#define NSH 3

static int rank, nprocs;
static acc_accelerator *acc;
static char dir[700];
static const int64_t shard_tokens[NSH] = {103, 57, 81}; /* windows: 25, 14, 20 (tails 2, 0, 0 skipped) */

static uint16_t tok(int s, int64_t p) { return (uint16_t)(s * 1000 + p); }

static void write_shard(const char *path, int s, int64_t n, int32_t magic) {
  size_t bytes = 1024 + (size_t)n * 2;
  unsigned char *b = calloc(1, bytes);
  int32_t h[3] = {magic, 1, (int32_t)n};
  memcpy(b, h, sizeof h);
  for (int64_t p = 0; p < n; p++) {
    uint16_t t = tok(s, p);
    memcpy(b + 1024 + 2 * p, &t, 2);
  }
  FILE *f = fopen(path, "wb");
  REQUIRE_OK(f && fwrite(b, 1, bytes, f) == bytes ? ACC_OK : ACC_ERR_IO);
  fclose(f);
  free(b);
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* The expected windows in stream order: (shard, first token position). */
static int expected(int *ws, int64_t *wp, int cap) {
  int n = 0;
  for (int s = 0; s < NSH; s++)
    for (int64_t k = 0; (k + 1) * T + 1 <= shard_tokens[s] && n < cap; k++) ws[n] = s, wp[n++] = k * T;
  return n;
}

static acc_dataloader *loader(const char *const *paths, int np, int shuffle, int host_batches) {
  acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT;
  o.window = T;
  o.shuffle = shuffle;
  o.seed = 5;
  o.host_batches = host_batches;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_tokens_opts(acc, paths, np, B, &o, &dl));
  return dl;
}

/* One epoch of dl, every process's windows gathered in rank order per step: (shard, position) of
 * each window's first input; every window checked to lie in one shard. */
static int read_epoch(acc_dataloader *dl, int *ws, int64_t *wp, int cap, const char *what) {
  int n = 0;
  int32_t *all = calloc((size_t)nprocs * B * T * 2, sizeof *all);
  for (;;) {
    const acc_batch *b;
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    if (!b) break;
    int32_t mine[B * T * 2];
    memcpy(mine, b->fields[0], B * T * sizeof(int32_t));
    memcpy(mine + B * T, b->fields[1], B * T * sizeof(int32_t));
    REQUIRE_OK(acc_all_gather(acc_accelerator_state(acc), mine, all, B * T * 2, ACC_I32));
    for (int r = 0; r < nprocs; r++)
      for (int w = 0; w < B && n < cap; w++) {
        const int32_t *in = all + (size_t)r * B * T * 2 + w * T, *tg = in + B * T;
        int ok = 1;
        for (int t = 0; t < T; t++) ok &= in[t] == in[0] + t && tg[t] == in[0] + t + 1;
        CHECK(ok && in[0] / 1000 == (in[0] + T) / 1000, "%s: window %d (%d..) spans two shards or is not consecutive",
              what, n, in[0]);
        ws[n] = in[0] / 1000;
        wp[n++] = in[0] % 1000;
      }
  }
  free(all);
  return n;
}

static void check_stream(acc_dataloader *dl, const char *what, const int *order) {
  int ws[256], es[256];
  int64_t wp[256], ep[256];
  int n = read_epoch(dl, ws, wp, 256, what);
  int ne = 0;
  for (int j = 0; j < NSH; j++) { /* the expected windows in the given order of shards */
    int s = order[j];
    for (int64_t k = 0; (k + 1) * T + 1 <= shard_tokens[s]; k++) es[ne] = s, ep[ne++] = k * T;
  }
  const int global = B * nprocs, want = ne / global * global; /* drop_last */
  CHECK(n == want, "%s: %d windows in the epoch, expected %d", what, n, want);
  int bad = -1;
  for (int i = 0; i < n && i < want && bad < 0; i++)
    if (ws[i] != es[i] || wp[i] != ep[i]) bad = i;
  CHECK(bad < 0, "%s: window %d is shard %d at %lld, expected shard %d at %lld", what, bad, bad >= 0 ? ws[bad] : 0,
        (long long)(bad >= 0 ? wp[bad] : 0), bad >= 0 ? es[bad] : 0, (long long)(bad >= 0 ? ep[bad] : 0));
}

static void test_glob_order(void) {
  char pat[800], f0[800], f1[800], f2[800];
  path_of(pat, sizeof pat, "shard_*.bin");
  path_of(f0, sizeof f0, "shard_000.bin");
  path_of(f1, sizeof f1, "shard_001.bin");
  path_of(f2, sizeof f2, "shard_002.bin");
  const char *pp[1] = {pat};
  const int sorted[NSH] = {0, 1, 2}, other[NSH] = {2, 0, 1};
  acc_dataloader *dl = loader(pp, 1, 0, 0);
  check_stream(dl, "glob", sorted);
  acc_dataloader_destroy(dl);
  const char *list[NSH] = {f0, f1, f2};
  dl = loader(list, NSH, 0, 0);
  check_stream(dl, "list", sorted);
  acc_dataloader_destroy(dl);
  const char *list2[NSH] = {f2, f0, f1};
  dl = loader(list2, NSH, 0, 0);
  check_stream(dl, "list in another order", other);
  acc_dataloader_destroy(dl);
  /* a file and a pattern together: the file, then the pattern's matches */
  const char *mixed[2] = {f2, pat};
  acc_token_options to = ACC_TOKEN_OPTIONS_INIT;
  to.seq_len = T;
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_tokens(&ds, mixed, 2, &to));
  CHECK(acc_dataset_length(ds) == 20 + 59, "a file and a pattern: %lld windows, expected 79",
        (long long)acc_dataset_length(ds));
  acc_dataset_destroy(ds);
  if (rank == 0) printf("token_shards: '%s' read as one stream in sorted order at %d process(es)\n", pat, nprocs);
}

static void test_errors(void) {
  char pat[800], bad[800], good[800];
  path_of(pat, sizeof pat, "nothing_*.bin");
  const char *pp[1] = {pat};
  acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT;
  o.window = T;
  acc_dataloader *dl = NULL;
  CHECK_ERR(acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &dl), ACC_ERR_INVALID_ARGUMENT,
            "nothing_*.bin' (path 0) matches no file");
  CHECK(dl == NULL, "no loader after a failed prepare");
  path_of(pat, sizeof pat, "mixed_*.bin");
  path_of(bad, sizeof bad, "mixed_001.bin");
  CHECK_ERR(acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &dl), ACC_ERR_INVALID_ARGUMENT, bad);
  CHECK(strstr(acc_last_error(), "'magic'") != NULL, "the bad shard's header field is named: %s", acc_last_error());
  path_of(good, sizeof good, "mixed_000.bin");
  CHECK(strstr(acc_last_error(), good) == NULL, "the good shard is not blamed: %s", acc_last_error());
  o.host_batches = 2;
  path_of(pat, sizeof pat, "shard_*.bin");
  CHECK_ERR(acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &dl), ACC_ERR_INVALID_ARGUMENT,
            "host_batches is 2");
}

/* Each process in a directory of its own (<dir>/r<rank>), one relative pattern: the files each
 * sees differ as setup() makes them. */
static void test_disagree(void) {
  if (nprocs < 2) return;
  static const struct {
    const char *what, *setup, *msg;
  } cases[] = {
      {"missing", "rm s_002.bin", "process 1 has no 's_002.bin' (process 0's '"},
      {"another size", "cp ../shard_000.bin s_001.bin", "'s_001.bin' (file 2) holds 103 tokens on process 1"},
      {"extra", "cp ../shard_001.bin s_003.bin", "process 1 sees 's_003.bin'"},
  };
  char here[1024];
  REQUIRE_OK(getcwd(here, sizeof here) ? ACC_OK : ACC_ERR_IO);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char sh[2400];
    snprintf(sh, sizeof sh, "cd '%s' && rm -rf r%d && mkdir r%d && cd r%d && cp ../shard_000.bin s_000.bin && "
             "cp ../shard_001.bin s_001.bin && cp ../shard_002.bin s_002.bin%s%s", dir, rank, rank, rank,
             rank == 1 ? " && " : "", rank == 1 ? cases[c].setup : "");
    REQUIRE_OK(system(sh) == 0 ? ACC_OK : ACC_ERR_IO);
    char rd[800];
    snprintf(rd, sizeof rd, "%s/r%d", dir, rank);
    REQUIRE_OK(chdir(rd) == 0 ? ACC_OK : ACC_ERR_IO);
    const char *pp[1] = {"s_*.bin"};
    acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT;
    o.window = T;
    acc_dataloader *dl = NULL;
    acc_result rc = acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &dl);
    CHECK(rc == ACC_ERR_MISMATCH, "%s: prepare gave %s: %s", cases[c].what, acc_result_string(rc), acc_last_error());
    CHECK(strstr(acc_last_error(), cases[c].msg) != NULL, "%s: the error lacks \"%s\": %s", cases[c].what,
          cases[c].msg, acc_last_error());
    if (rank == 0) printf("token_shards: %s file on process 1: %s\n", cases[c].what, acc_last_error());
    REQUIRE_OK(chdir(here) == 0 ? ACC_OK : ACC_ERR_IO);
  }
  /* the same files everywhere, each process reading its own copies from its own directory
   * (node-local scratch): agreed, directories are not compared */
  char sh[1200];
  snprintf(sh, sizeof sh, "cd '%s/r%d' && rm -f s_003.bin && cp ../shard_001.bin s_001.bin && cp ../shard_002.bin "
           "s_002.bin", dir, rank);
  REQUIRE_OK(system(sh) == 0 ? ACC_OK : ACC_ERR_IO);
  char own[800];
  snprintf(own, sizeof own, "%s/r%d/s_*.bin", dir, rank);
  const char *pp[1] = {own};
  acc_dataloader *dl = loader(pp, 1, 0, 0);
  check_stream(dl, "each process's own copies", (const int[NSH]){0, 1, 2});
  acc_dataloader_destroy(dl);
}

static void test_resume(int shuffle) {
  char pat[800], ck[900];
  path_of(pat, sizeof pat, "shard_*.bin");
  snprintf(ck, sizeof ck, "%s/ckpt_shuffle%d", dir, shuffle);
  const char *pp[1] = {pat};
  acc_dataloader *dl = loader(pp, 1, shuffle, 0);
  const int global = B * nprocs, crossing = 25 / global + 1; /* the batch that reads past shard 0 */
  int *in, *tg, seen_shard1 = 0;
  for (int k = 0; k < crossing; k++) {
    REQUIRE_OK(acc_accelerator_next_tokens(acc, dl, &in, &tg));
    for (int i = 0; i < B * T; i++) seen_shard1 |= in[i] / 1000 == 1;
  }
  int any = 0;
  REQUIRE_OK(acc_all_reduce(acc_accelerator_state(acc), &seen_shard1, &any, 1, ACC_I32, ACC_MAX));
  if (!shuffle) CHECK(any, "the first %d batches reached shard 1", crossing);
  REQUIRE_OK(acc_accelerator_save_state(acc, ck, NULL));
  enum { MORE = 10 };
  static int32_t a[MORE][2][B * T], b[MORE][2][B * T];
  for (int k = 0; k < MORE; k++) {
    REQUIRE_OK(acc_accelerator_next_tokens(acc, dl, &in, &tg));
    memcpy(a[k][0], in, sizeof a[k][0]);
    memcpy(a[k][1], tg, sizeof a[k][1]);
  }
  REQUIRE_OK(acc_accelerator_load_state(acc, ck, NULL));
  for (int k = 0; k < MORE; k++) {
    REQUIRE_OK(acc_accelerator_next_tokens(acc, dl, &in, &tg));
    memcpy(b[k][0], in, sizeof b[k][0]);
    memcpy(b[k][1], tg, sizeof b[k][1]);
  }
  CHECK(memcmp(a, b, sizeof a) == 0, "shuffle %d: the batches after load_state are the batches after save_state",
        shuffle);
  acc_dataloader_destroy(dl);
  if (rank == 0)
    printf("token_shards: resumed across shards bit for bit (shuffle %d, %d process(es))\n", shuffle, nprocs);
}

static void test_host_batches(void) {
  char pat[800];
  path_of(pat, sizeof pat, "shard_*.bin");
  const char *pp[1] = {pat};
  acc_dataloader *host = loader(pp, 1, 1, 1), *dev = loader(pp, 1, 1, 0);
  int steps = 0;
  for (;;) {
    const acc_batch *h, *d;
    REQUIRE_OK(acc_accelerator_next_batch(acc, host, &h));
    REQUIRE_OK(acc_accelerator_next_batch(acc, dev, &d));
    CHECK(!h == !d, "both loaders end their epoch together");
    if (!h || !d) break;
    CHECK(h->device_fields == NULL, "host_batches: no device copy of the batch");
    CHECK(d->device_fields != NULL && acc_accelerator_is_device_pointer(acc, d->device_fields[0]),
          "the default loader places the batch in device memory");
    CHECK(!acc_accelerator_is_device_pointer(acc, h->fields[0]) && !acc_accelerator_is_device_pointer(acc, h->fields[1]),
          "host_batches: the batch is not device memory");
    /* host code reads it (device memory of the fake device would fault here) */
    const int32_t *hin = h->fields[0], *htg = h->fields[1];
    int consecutive = 1;
    for (int i = 0; i < B * T; i++) consecutive &= htg[i] == hin[i] + 1;
    CHECK(consecutive, "host_batches: targets follow inputs");
    int32_t din[B * T], dtg[B * T];
    REQUIRE_OK(acc_accelerator_memcpy(acc, din, d->device_fields[0], sizeof din, ACC_COPY_DEVICE_TO_HOST));
    REQUIRE_OK(acc_accelerator_memcpy(acc, dtg, d->device_fields[1], sizeof dtg, ACC_COPY_DEVICE_TO_HOST));
    CHECK(memcmp(din, hin, sizeof din) == 0 && memcmp(dtg, htg, sizeof dtg) == 0,
          "step %d: the host batch holds the tokens the default loader placed on the device", steps);
    steps++;
  }
  int *in, *tg;
  REQUIRE_OK(acc_accelerator_next_tokens(acc, host, &in, &tg));
  CHECK(!acc_accelerator_is_device_pointer(acc, in) && in[0] >= 0, "next_tokens of a host_batches loader: host memory");
  CHECK(steps == 59 / (B * nprocs), "%d steps, expected %d", steps, 59 / (B * nprocs));
  acc_dataloader_destroy(host);
  acc_dataloader_destroy(dev);
  if (rank == 0) printf("token_shards: host_batches on the fake device: %d host batches equal the device ones\n", steps);
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "dev"))) {
    fprintf(stderr, "usage: test_token_shards cpu|dev DIR\n");
    return 2;
  }
  const int on_dev = !strcmp(argv[1], "dev");
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = on_dev ? ACC_DEVICE_AUTO : ACC_DEVICE_CPU;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = nprocs > 1 ? rank : -1;
  CHECK((acc_accelerator_device_type(acc) != ACC_DEVICE_CPU) == on_dev, "the accelerator trains on the %s",
        on_dev ? "fake device" : "CPU");
  mkdir(argv[2], 0755);
  snprintf(dir, sizeof dir, "%s/%s_np%d", argv[2], argv[1], nprocs);
  if (rank == 0) {
    char sh[800];
    snprintf(sh, sizeof sh, "rm -rf '%s'", dir); /* a fresh directory: save_state never overwrites */
    REQUIRE_OK(system(sh) == 0 ? ACC_OK : ACC_ERR_IO);
    mkdir(dir, 0755);
    char p[800];
    for (int s = NSH - 1; s >= 0; s--) { /* created out of order */
      char name[64];
      snprintf(name, sizeof name, "shard_%03d.bin", s);
      path_of(p, sizeof p, name);
      write_shard(p, s, shard_tokens[s], 20240520);
    }
    path_of(p, sizeof p, "other.bin");
    write_shard(p, 7, 50, 20240520);
    path_of(p, sizeof p, "mixed_000.bin");
    write_shard(p, 0, 50, 20240520);
    path_of(p, sizeof p, "mixed_001.bin");
    write_shard(p, 1, 50, 12345);
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  int ws[64];
  int64_t wp[64];
  CHECK(expected(ws, wp, 64) == 59, "the shards hold 59 windows");
  if (on_dev) {
    test_host_batches();
  } else {
    test_glob_order();
    test_errors();
    test_disagree();
    test_resume(0);
    test_resume(1);
  }
  acc_accelerator_destroy(acc);
  return acc_test_finish("token_shards");
}
