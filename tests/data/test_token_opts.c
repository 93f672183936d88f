/* The token loader's options and the fixed validation pass (issue 32 item 4), run by the launcher
 * at 1, 2 and 3 processes:
 *  - stride and max_windows of acc_dataset_create_tokens: window i starts at token i x stride,
 *    (n - T - 1) / stride + 1 windows per file, only the first max_windows; more than the files
 *    hold is an error naming the file and both counts;
 *  - acc_accelerator_prepare_tokens_opts with shuffle 0: the windows of every process gathered in
 *    rank order are windows 0, 1, 2, ... in file order; with a seed, the same order as a loader
 *    prepared by hand with that seed;
 *  - take_dataset: a prepare that fails destroys the dataset, a loader that succeeds destroys it
 *    with itself (nothing leaks: the asan preset's leak checker sees every path);
 *  - acc_accelerator_evaluate_tokens over acc_accelerator_prepare_tokens_eval's first k = 11
 *    windows (not a multiple of the global batch): the mean of the per-window losses over exactly
 *    those 11 windows on every process, the same at the second evaluation (the same windows
 *    again), and count 11; a loader mid-epoch is refused; a callback failing on the last process
 *    fails the call on every process, naming it;
 *  - acc_param_table_from_sizes: 1-D rows, one inferred dimension, a wrong size refused naming
 *    the row and leaving the table as it was. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

#include "acc_test.h"

static int rank, nprocs;
static char dir[512];
#define T 4

static uint32_t tok(int64_t p) { return (uint32_t)((p * 7 + 3) % 1000); }

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* an llm.c shard of n tokens */
static void write_llmc(const char *name, int64_t n) {
  size_t bytes = 1024 + (size_t)n * 2;
  unsigned char *b = calloc(1, bytes);
  int32_t h[3] = {20240520, 1, (int32_t)n};
  memcpy(b, h, sizeof h);
  for (int64_t p = 0; p < n; p++) {
    uint16_t t = (uint16_t)tok(p);
    memcpy(b + 1024 + 2 * p, &t, 2);
  }
  char path[600];
  path_of(path, sizeof path, name);
  FILE *f = fopen(path, "wb");
  REQUIRE_OK(f && fwrite(b, 1, bytes, f) == bytes ? ACC_OK : ACC_ERR_IO);
  fclose(f);
  free(b);
}

static void test_stride(void) {
  char p[600];
  path_of(p, sizeof p, "a.bin");
  const char *pp[1] = {p};
  acc_token_options o = ACC_TOKEN_OPTIONS_INIT;
  o.seq_len = T;
  o.stride = 3; /* windows of 5 tokens every 3: 101 tokens -> (101 - 5) / 3 + 1 = 33 windows */
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_tokens(&ds, pp, 1, &o));
  CHECK(acc_dataset_length(ds) == 33, "%lld windows with stride 3, expected 33", (long long)acc_dataset_length(ds));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 1;
  lo.shard.num_processes = 1;
  lo.shard.process_index = 0;
  lo.prefetch = 0;
  lo.take_dataset = 1;
  acc_dataloader *dl;
  REQUIRE_OK(acc_dataloader_create(&dl, ds, &lo));
  int bad = 0, n = 0;
  for (const acc_batch *b; acc_dataloader_next(dl, &b) == ACC_OK && b; n++) {
    const int32_t *in = b->fields[0], *tg = b->fields[1];
    for (int k = 0; k < T; k++) bad += in[k] != (int32_t)tok(3 * n + k) || tg[k] != (int32_t)tok(3 * n + k + 1);
  }
  CHECK(n == 33 && bad == 0, "%d windows read, %d tokens wrong (window i starts at token 3 i)", n, bad);
  acc_dataloader_destroy(dl); /* and the dataset (take_dataset) */
  /* max_windows: the first 10 of them; more than there are is an error */
  o.max_windows = 10;
  REQUIRE_OK(acc_dataset_create_tokens(&ds, pp, 1, &o));
  CHECK(acc_dataset_length(ds) == 10, "%lld windows with max_windows 10", (long long)acc_dataset_length(ds));
  acc_dataset_destroy(ds);
  o.max_windows = 34;
  CHECK_ERR(acc_dataset_create_tokens(&ds, pp, 1, &o), ACC_ERR_INVALID_ARGUMENT, "hold only 33 windows");
  CHECK(strstr(acc_last_error(), "a.bin") && strstr(acc_last_error(), "max_windows is 34"), "names file and count: %s",
        acc_last_error());
  o.max_windows = 0;
  o.stride = -1;
  CHECK_ERR(acc_dataset_create_tokens(&ds, pp, 1, &o), ACC_ERR_INVALID_ARGUMENT, "stride is -1");
}

static void test_file_order(acc_accelerator *acc) {
  char p[600];
  path_of(p, sizeof p, "a.bin");
  const char *pp[1] = {p};
  const int B = 2, GB = B * nprocs;
  acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT;
  o.window = T;
  o.shuffle = 0;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &dl));
  int32_t *all = malloc((size_t)GB * T * sizeof(int32_t));
  int bad = 0, steps = 0;
  for (int s = 0; s < 3; s++, steps++) {
    int *in, *tg;
    REQUIRE_OK(acc_accelerator_next_tokens(acc, dl, &in, &tg));
    REQUIRE_OK(acc_all_gather(acc_accelerator_state(acc), in, all, (size_t)B * T, ACC_I32));
    for (int w = 0; w < GB; w++) /* window s x GB + w of the file, in order (stride T) */
      for (int k = 0; k < T; k++) bad += all[w * T + k] != (int32_t)tok((int64_t)(s * GB + w) * T + k);
  }
  CHECK(bad == 0, "shuffle 0: %d tokens out of file order over %d steps", bad, steps);
  acc_dataloader_destroy(dl);
  /* a seed: the same windows as a loader prepared by hand with it */
  o.shuffle = 1;
  o.seed = 99;
  acc_token_options to = ACC_TOKEN_OPTIONS_INIT;
  to.seq_len = T;
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_tokens(&ds, pp, 1, &to));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = B;
  lo.shuffle = 1;
  lo.seed = 99;
  lo.drop_last = 1;
  lo.take_dataset = 1;
  acc_dataloader *a, *h;
  REQUIRE_OK(acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &a));
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &h));
  int same = 1;
  for (int s = 0; s < 3; s++) {
    int *i1, *t1, *i2, *t2;
    REQUIRE_OK(acc_accelerator_next_tokens(acc, a, &i1, &t1));
    REQUIRE_OK(acc_accelerator_next_tokens(acc, h, &i2, &t2));
    same &= memcmp(i1, i2, (size_t)B * T * sizeof(int)) == 0;
  }
  CHECK(same, "seed 99 through the options is the hand-made loader's order");
  acc_dataloader_destroy(a);
  acc_dataloader_destroy(h);
  /* take_dataset on a failing prepare: the dataset is gone with it (asan: no leak, no double free) */
  REQUIRE_OK(acc_dataset_create_tokens(&ds, pp, 1, &to));
  lo.batch_size = 0;
  acc_dataloader *none = NULL;
  CHECK_ERR(acc_accelerator_prepare_dataloader(acc, ds, &lo, &none), ACC_ERR_INVALID_ARGUMENT, "batch_size");
  CHECK(none == NULL, "no loader");
  o.window = 0;
  CHECK_ERR(acc_accelerator_prepare_tokens_opts(acc, pp, 1, B, &o, &none), ACC_ERR_INVALID_ARGUMENT, "window is 0");
  free(all);
}

/* the loss of a window: the mean of its input tokens / 1000 */
static acc_result window_loss(void *ctx, const int *inputs, const int *targets, int64_t rows, float *losses) {
  int *calls = ctx;
  (void)targets;
  (*calls)++;
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int k = 0; k < T; k++) s += inputs[r * T + k];
    losses[r] = (float)(s / T / 1000.0);
  }
  return ACC_OK;
}

static acc_result failing_loss(void *ctx, const int *inputs, const int *targets, int64_t rows, float *losses) {
  if (rank == nprocs - 1) return acc_error_set(ACC_ERR_FORMAT, "the model's forward failed on purpose");
  return window_loss(ctx, inputs, targets, rows, losses);
}

static void test_eval(acc_accelerator *acc) {
  char p[600];
  path_of(p, sizeof p, "a.bin");
  const char *pp[1] = {p};
  const int K = 11, B = 2;
  acc_dataloader *val;
  REQUIRE_OK(acc_accelerator_prepare_tokens_eval(acc, pp, 1, T, B, K, &val));
  double want = 0;
  for (int w = 0; w < K; w++) {
    double s = 0;
    for (int k = 0; k < T; k++) s += (double)(int32_t)tok((int64_t)w * T + k);
    want += (double)(float)(s / T / 1000.0);
  }
  want /= K;
  for (int pass = 0; pass < 2; pass++) {
    int calls = 0;
    double mean = -1;
    int64_t count = -1;
    CHECK_OK(acc_accelerator_evaluate_tokens(acc, val, window_loss, &calls, &mean, &count));
    CHECK(count == K, "evaluation %d counted %lld windows, expected %d", pass, (long long)count, K);
    CHECK(fabs(mean - want) <= 1e-12 * fabs(want), "evaluation %d: mean %.17g, expected %.17g", pass, mean, want);
    CHECK(calls == (K + B * nprocs - 1) / (B * nprocs), "evaluation %d: %d batches on this process", pass, calls);
  }
  /* mid-epoch: refused */
  int *in, *tg;
  REQUIRE_OK(acc_accelerator_next_tokens(acc, val, &in, &tg));
  double mean;
  int calls = 0;
  if (K > B * nprocs)
    CHECK_ERR(acc_accelerator_evaluate_tokens(acc, val, window_loss, &calls, &mean, NULL), ACC_ERR_INVALID_USAGE,
              "at batch 1");
  acc_dataloader_destroy(val);
  /* a callback failing on the last process: every process fails, naming it */
  REQUIRE_OK(acc_accelerator_prepare_tokens_eval(acc, pp, 1, T, B, K, &val));
  acc_result rc = acc_accelerator_evaluate_tokens(acc, val, failing_loss, &calls, &mean, NULL);
  char want_msg[64];
  snprintf(want_msg, sizeof want_msg, "failed on process %d", nprocs - 1);
  CHECK(rc != ACC_OK && strstr(acc_last_error(), want_msg), "a failing callback: %s: %s", acc_result_string(rc),
        acc_last_error());
  CHECK(rank != nprocs - 1 || (rc == ACC_ERR_FORMAT && strstr(acc_last_error(), "on purpose")),
        "the failing process keeps its callback's error: %s", acc_last_error());
  acc_dataloader_destroy(val);
}

static void test_table(void) {
  enum { V = 10, C = 4, L = 3 };
  acc_param_spec t[4] = {{"wte", 2, {V, -1}}, {"ln1w", 2, {L, -1}}, {"qkvw", 3, {L, 3 * C, -1}}, {"lnfb", 0, {0}}};
  size_t sizes[4] = {V * C, L * C, L * 3 * C * C, C};
  CHECK_OK(acc_param_table_from_sizes(t, 4, sizes));
  CHECK(t[0].shape[1] == C && t[1].shape[1] == C && t[2].shape[2] == C, "inferred dimensions %lld %lld %lld",
        (long long)t[0].shape[1], (long long)t[1].shape[1], (long long)t[2].shape[2]);
  CHECK(t[3].ndim == 1 && t[3].shape[0] == C, "a row without a shape is 1-D [%d]", C);
  acc_param_spec u[2] = {{"a", 2, {3, -1}}, {"b", 2, {2, 5}}};
  size_t us[2] = {12, 12};
  CHECK_ERR(acc_param_table_from_sizes(u, 2, us), ACC_ERR_INVALID_ARGUMENT, "row 1 ('b') has shape [2, 5]");
  CHECK(u[0].shape[1] == -1, "a failed call leaves the table as it was");
  us[1] = 10;
  us[0] = 13;
  CHECK_ERR(acc_param_table_from_sizes(u, 2, us), ACC_ERR_INVALID_ARGUMENT, "cannot be completed to sizes[0] = 13");
}

int main(int argc, char **argv) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_state_process_index(acc_accelerator_state(acc));
  nprocs = acc_state_num_processes(acc_accelerator_state(acc));
  acc_test_rank = nprocs > 1 ? rank : -1;
  if (argc < 2) return 2;
  mkdir(argv[1], 0755);
  snprintf(dir, sizeof dir, "%s/np%d_r%d", argv[1], nprocs, rank);
  mkdir(dir, 0755);
  write_llmc("a.bin", 101);
  test_stride();
  test_file_order(acc);
  test_eval(acc);
  test_table();
  acc_accelerator_destroy(acc);
  return acc_test_finish("data_token_opts");
}
