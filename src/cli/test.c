/* `accelerate test`: launches this executable's built-in self-test (`accelerate __selftest`) on
 * the configured number of processes through `accelerate launch`, like Accelerate's
 * test_script.py, with the parts that apply to a C library: state,
 * process control, splitting, every collective against a computed reference, RNG seeding,
 * sharded data loading (every sample exactly once), a tiny training equivalence check, triggers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/config_file.h"
#include "device/placement.h"
#include "core/internal.h"

/* ---- the self-test program ------------------------------------------------------------- */
static int g_failures, g_rank;

#define ST_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) {                                                           \
      g_failures++;                                                          \
      fprintf(stderr, "[rank %d] FAILED: ", g_rank);                         \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
    }                                                                        \
  } while (0)
#define ST_OK(call) \
  ST_CHECK((call) == ACC_OK, "%s: %s", #call, acc_last_error())

static void header(acc_state *st, const char *title) {
  acc_print(st, "\n**%s**\n", title);
}

static void count_call(void *p) { ++*(int *)p; }

static acc_state *st_of(acc_accelerator *acc) { return acc_accelerator_state(acc); }

static void selftest_control(acc_state *st, int n, int rank) {
  header(st, "Test process execution");
  /* main_process_first: rank 0 writes the shared file first, the others append after it. */
  char path[256] = "";
  if (rank == 0) {
    snprintf(path, sizeof path, "/tmp/accelerate-selftest-%ld-XXXXXX", (long)getpid());
    int fd = mkstemp(path);
    ST_CHECK(fd >= 0, "cannot create a temporary file in /tmp: %s", strerror(errno));
    if (fd >= 0) close(fd);
  }
  ST_OK(acc_broadcast(st, path, sizeof path, ACC_U8, 0));
  acc_result rc;
  ACC_MAIN_PROCESS_FIRST(st, rc) {
    FILE *f = fopen(path, "a");
    if (f) {
      fprintf(f, "%d\n", rank);
      fclose(f);
    }
  }
  ST_CHECK(rc == ACC_OK, "main_process_first: %s", acc_last_error());
  ST_OK(acc_wait_for_everyone(st));
  if (rank == 0) {
    FILE *f = fopen(path, "r");
    int first = -1, lines = 0, r;
    while (f && fscanf(f, "%d", &r) == 1) {
      if (lines++ == 0) first = r;
    }
    if (f) fclose(f);
    ST_CHECK(first == 0 && lines == n, "main_process_first: file has %d lines starting with rank %d "
             "(expected %d lines, rank 0 first)", lines, first, n);
    unlink(path);
    if (first == 0 && lines == n) printf("main_process_first ran the main process first\n");
  }
  /* on_* helpers: how many processes ran each, summed over the group. */
  int32_t ran[5] = {0, 0, 0, 0, 0}, calls = 0;
  ran[0] = acc_on_main_process(st, count_call, &calls);
  ran[1] = acc_on_local_main_process(st, count_call, &calls);
  ran[2] = acc_on_last_process(st, count_call, &calls);
  ran[3] = acc_on_process(st, n - 1, count_call, &calls);
  ran[4] = calls;
  ST_OK(acc_all_reduce(st, ran, ran, 5, ACC_I32, ACC_SUM));
  int machines = acc_state_num_machines(st);
  ST_CHECK(ran[0] == 1 && ran[1] == machines && ran[2] == 1 && ran[3] == 1 &&
               ran[4] == 3 + machines,
           "on_main/on_local_main/on_last/on_process ran on %d/%d/%d/%d processes (expected 1/%d/1/1)",
           ran[0], ran[1], ran[2], ran[3], machines);
  acc_print(st, "on_main_process, on_local_main_process, on_last_process, on_process each ran where expected\n");
  /* split_between_processes: 17 items, with and without padding. */
  for (int pad = 0; pad < 2; pad++) {
    acc_split sp;
    ST_OK(acc_split_between_processes(st, 17, pad, &sp));
    int64_t mine[3] = {(int64_t)sp.start, (int64_t)sp.count, (int64_t)sp.padded_count};
    int64_t *all = calloc((size_t)n * 3, sizeof *all);
    if (!all) return;
    ST_OK(acc_all_gather(st, mine, all, 3, ACC_I64));
    int64_t next = 0;
    for (int r = 0; r < n; r++) {
      ST_CHECK(all[r * 3] == next || all[r * 3 + 1] == 0,
               "split(17%s): rank %d starts at %lld, expected %lld", pad ? ", padded" : "", r,
               (long long)all[r * 3], (long long)next);
      next += all[r * 3 + 1];
      if (pad) ST_CHECK(all[r * 3 + 2] == all[2], "split(17, padded): rank %d has %lld items, rank 0 %lld",
                        r, (long long)all[r * 3 + 2], (long long)all[2]);
    }
    ST_CHECK(next == 17, "split(17%s): the processes got %lld items in all", pad ? ", padded" : "",
             (long long)next);
    free(all);
  }
  acc_print(st, "split_between_processes covers 17 items exactly once (padded: equal counts)\n");
}

static void selftest_collectives(acc_state *st, int n, int rank) {
  header(st, "Test collectives");
  enum { C = 33 };
  /* all_reduce and reduce of i32, f32, f64 and bf16 small integers: exact in every dtype. */
  static const acc_op ops[] = {ACC_SUM, ACC_MEAN, ACC_MIN, ACC_MAX};
  for (int oi = 0; oi < 4; oi++) {
    int32_t iv[C], ir[C];
    double dv[C], dr[C];
    uint16_t bv[C], br[C];
    for (int i = 0; i < C; i++) {
      iv[i] = (i * 5 + rank * 3) % 17 - 8;
      dv[i] = iv[i];
      bv[i] = acc__f32_to_bf16((float)iv[i]);
    }
    ST_OK(acc_all_reduce(st, iv, ir, C, ACC_I32, ops[oi]));
    ST_OK(acc_all_reduce(st, dv, dr, C, ACC_F64, ops[oi]));
    ST_OK(acc_all_reduce(st, bv, br, C, ACC_BF16, ops[oi]));
    for (int i = 0; i < C; i++) {
      long s = 0, mn = 1 << 30, mx = -(1 << 30);
      for (int r = 0; r < n; r++) {
        long v = (i * 5 + r * 3) % 17 - 8;
        s += v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
      }
      long want_i = ops[oi] == ACC_SUM ? s : ops[oi] == ACC_MEAN ? s / n : ops[oi] == ACC_MIN ? mn : mx;
      double want_d = ops[oi] == ACC_MEAN ? (double)s / n : (double)want_i;
      float want_b = acc__bf16_to_f32(acc__f32_to_bf16((float)want_d));
      if (ir[i] != want_i || dr[i] != want_d || acc__bf16_to_f32(br[i]) != want_b) {
        ST_CHECK(0, "all_reduce %s element %d: i32 %d f64 %g bf16 %g, expected %ld %g %g",
                 acc_op_name(ops[oi]), i, ir[i], dr[i], acc__bf16_to_f32(br[i]), want_i, want_d, want_b);
        break;
      }
    }
    int32_t red[C];
    memset(red, 0, sizeof red);
    ST_OK(acc_reduce(st, iv, rank == n - 1 ? red : NULL, C, ACC_I32, ops[oi], n - 1));
    if (rank == n - 1) ST_CHECK(!memcmp(red, ir, sizeof red), "reduce %s to rank %d differs from all_reduce",
                                acc_op_name(ops[oi]), n - 1);
  }
  acc_print(st, "all_reduce and reduce (sum, mean, min, max) of i32, f64, bf16 match the reference\n");
  /* broadcast from the last rank, all_gather, gather, all_gather_bytes */
  float b[C];
  for (int i = 0; i < C; i++) b[i] = rank == n - 1 ? (float)(i * i) : -1.0f;
  ST_OK(acc_broadcast(st, b, C, ACC_F32, n - 1));
  for (int i = 0; i < C; i++)
    if (b[i] != (float)(i * i)) {
      ST_CHECK(0, "broadcast from rank %d: element %d is %g, expected %d", n - 1, i, b[i], i * i);
      break;
    }
  int64_t mine[2] = {rank * 10, rank * 10 + 1};
  int64_t *all = calloc((size_t)n * 2, sizeof *all);
  if (!all) return;
  ST_OK(acc_all_gather(st, mine, all, 2, ACC_I64));
  for (int r = 0; r < n; r++)
    ST_CHECK(all[2 * r] == r * 10 && all[2 * r + 1] == r * 10 + 1, "all_gather: slot of rank %d holds %lld %lld",
             r, (long long)all[2 * r], (long long)all[2 * r + 1]);
  memset(all, 0, (size_t)n * 2 * sizeof *all);
  ST_OK(acc_gather(st, mine, rank == 0 ? all : NULL, 2, ACC_I64, 0));
  if (rank == 0)
    for (int r = 0; r < n; r++)
      ST_CHECK(all[2 * r] == r * 10, "gather: slot of rank %d holds %lld", r, (long long)all[2 * r]);
  free(all);
  char text[64];
  int len = snprintf(text, sizeof text, "rank %d says hello", rank);
  void *out = NULL;
  size_t *sizes = NULL;
  ST_OK(acc_all_gather_bytes(st, text, (size_t)(rank % 2 ? 0 : len), &out, &sizes));
  if (out && sizes) {
    size_t off = 0;
    for (int r = 0; r < n; r++) {
      char want[64];
      int wl = snprintf(want, sizeof want, "rank %d says hello", r);
      size_t wsz = (size_t)(r % 2 ? 0 : wl);
      ST_CHECK(sizes[r] == wsz && !memcmp((char *)out + off, want, wsz),
               "all_gather_bytes: rank %d sent %zu bytes, expected %zu", r, sizes[r], wsz);
      off += sizes[r];
    }
  }
  acc_free(out);
  acc_free(sizes);
  acc_print(st, "broadcast, all_gather, gather and all_gather_bytes match the reference\n");
}

static void selftest_trigger(acc_state *st, int n, int rank) {
  header(st, "Breakpoint trigger test");
  int t = -1;
  ST_OK(acc_check_trigger(st, &t));
  ST_CHECK(t == 0, "check_trigger before any set_trigger returned %d, expected 0", t);
  if (rank == n - 1) ST_OK(acc_set_trigger(st));
  ST_OK(acc_check_trigger(st, &t));
  ST_CHECK(t == 1, "check_trigger after rank %d set it returned %d, expected 1", n - 1, t);
  ST_OK(acc_check_trigger(st, &t));
  ST_CHECK(t == 0, "check_trigger after the reset returned %d, expected 0", t);
  acc_print(st, "trigger sequence False/True/False\n");
}


/* ---- RNG, data loading and training (need the accelerator) ---------------------------- */

static void selftest_rng(acc_state *st, int n) {
  header(st, "Test random number generator synchronization");
  acc_set_seed(1234);
  uint8_t mine[ACC_RNG_STATE_SIZE];
  acc_rng_state_get(acc_rng_global(), mine);
  uint8_t *all = calloc((size_t)n, sizeof mine);
  if (!all) return;
  ST_OK(acc_all_gather(st, mine, all, sizeof mine, ACC_U8));
  for (int r = 1; r < n; r++)
    ST_CHECK(memcmp(all, all + (size_t)r * sizeof mine, sizeof mine) == 0,
             "the generator state of process %d differs from process 0's after acc_set_seed", r);
  free(all);
  acc_print(st, "All rng are properly synched.\n");
}

static int fetch_id(int64_t i, void *const *fields, void *payload) {
  (void)payload;
  *(int64_t *)fields[0] = i;
  *(float *)fields[1] = (float)(i % 17) / 8.0f - 1.0f; /* x in [-1, 1] */
  return 0;
}

/* Every sample id seen over one epoch of a prepared loader, gathered without duplicates. */
static void check_loader(acc_accelerator *acc, acc_dataset *ds, int64_t len, int shuffle, int n, const char *what) {
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 8;
  lo.shuffle = shuffle;
  lo.seed = 1000 + (uint64_t)g_rank; /* differs per process: process 0's must win */
  acc_dataloader *dl = NULL;
  ST_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  if (!dl) return;
  int64_t *seen = calloc((size_t)len * 2, sizeof *seen), got = 0, kept = 0;
  int64_t *buf = calloc((size_t)(8 * n), sizeof *buf);
  const acc_batch *b;
  while (seen && buf && acc_accelerator_next_batch(acc, dl, &b) == ACC_OK && b) {
    ST_OK(acc_accelerator_gather_for_metrics(acc, b->fields[0], b->size, 1, ACC_I64, buf, 8 * n, &kept));
    for (int64_t i = 0; i < kept && got < len + 1; i++) seen[got++] = buf[i];
  }
  ST_CHECK(got == len, "%s: gathered %lld samples over an epoch, expected %lld", what, (long long)got, (long long)len);
  int ok = got == len;
  /* sequential: seen[i] == i; shuffled: every id in range and none twice (marks in seen[len..]) */
  for (int64_t i = 0; ok && i < len; i++) {
    int64_t id = seen[i];
    ok = shuffle ? (id >= 0 && id < len && !seen[len + id]) : id == i;
    if (ok && shuffle) seen[len + id] = 1;
  }
  ST_CHECK(ok, "%s: the gathered ids are not %s of 0..%lld", what, shuffle ? "a permutation" : "the sequence",
           (long long)len - 1);
  acc_print(st_of(acc), "%s: %lld samples, each exactly once\n", what, (long long)got);
  free(seen);
  free(buf);
  acc_dataloader_destroy(dl);
}

static void selftest_data_and_training(acc_state *st, int n, int rank) {
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, NULL) != ACC_OK) {
    ST_CHECK(0, "acc_accelerator_create: %s", acc_last_error());
    return;
  }
  header(st, "DataLoader integration test");
  const int64_t len = 32 * n + 3; /* not a multiple of the global batch: exercises the padding */
  acc_field_desc fields[2] = {{ACC_I64, 1}, {ACC_F32, 1}};
  acc_dataset *ds = NULL;
  ST_OK(acc_dataset_create_map(&ds, len, fields, 2, fetch_id, NULL));
  if (ds) {
    check_loader(acc, ds, len, 0, n, "sequential");
    check_loader(acc, ds, len, 1, n, "shuffled");
  }

  header(st, "Training integration test");
  /* y = 2x + 3 by SGD: batch 8 per process here must equal batch 8*n on one process. */
  float w[2] = {0.5f + (float)rank, -0.25f}, g[2] = {0, 0}; /* prepare makes them process 0's */
  acc_model *m = NULL;
  acc_optimizer *opt = NULL;
  acc_dataloader *dl = NULL;
  int64_t one[1] = {1};
  ST_OK(acc_model_create(&m));
  if (m) ST_OK(acc_model_add_parameter(m, "weight", &w[0], &g[0], 1, one));
  if (m) ST_OK(acc_model_add_parameter(m, "bias", &w[1], &g[1], 1, one));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.1;
  if (m) ST_OK(acc_accelerator_prepare_model(acc, m));
  if (m) ST_OK(acc_optimizer_create_sgd(&opt, m, &so));
  if (opt) ST_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 8;
  const int64_t tlen = 32 * n; /* divisible: no padding, so the reference sees the same samples */
  acc_dataset *tds = NULL;
  ST_OK(acc_dataset_create_map(&tds, tlen, fields, 2, fetch_id, NULL));
  if (tds) ST_OK(acc_accelerator_prepare_dataloader(acc, tds, &lo, &dl));
  float rw = 0.5f, rb = -0.25f; /* process 0's start, trained locally with the global batch */
  for (int epoch = 0; dl && opt && epoch < 3; epoch++) {
    const acc_batch *b;
    while (acc_accelerator_next_batch(acc, dl, &b) == ACC_OK && b) {
      const float *x = b->fields[1];
      for (int64_t i = 0; i < b->size; i++) {
        float r = (w[0] * x[i] + w[1] - (2.0f * x[i] + 3.0f)) / (float)b->size;
        g[0] += r * x[i];
        g[1] += r;
      }
      ST_OK(acc_accelerator_backward(acc));
      ST_OK(acc_accelerator_optimizer_step(acc, opt));
      ST_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
    }
    for (int64_t s0 = 0; s0 < tlen; s0 += 8 * n) {
      double gw = 0, gb = 0;
      for (int64_t i = s0; i < s0 + 8 * n; i++) {
        float x = (float)(i % 17) / 8.0f - 1.0f;
        float r = rw * x + rb - (2.0f * x + 3.0f);
        gw += r * x;
        gb += r;
      }
      rw -= 0.1f * (float)(gw / (double)(8 * n));
      rb -= 0.1f * (float)(gb / (double)(8 * n));
    }
  }
  ST_CHECK(fabsf(w[0] - rw) <= 1e-5f * fmaxf(1.0f, fabsf(rw)) && fabsf(w[1] - rb) <= 1e-5f * fmaxf(1.0f, fabsf(rb)),
           "distributed training gave w=%.7g b=%.7g, one process with the global batch w=%.7g b=%.7g", w[0],
           w[1], rw, rb);
  acc_print(st, "training on %d process(es) matches one process with the global batch (w=%.5f b=%.5f)\n", n,
            w[0], w[1]);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(tds);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
}

/* The GPU path: an accelerator that asks for a GPU (ACC_DEVICE_AUTO) gets GPU <local rank> (the
 * fake GPUs under ACCELERATE_TEST_FAKE_GPUS), the state reports it, device memory round-trips,
 * and a sum of device data through the CPU backend is right. On a machine without a GPU the
 * section says why and checks that the program fell back to the CPU. */
static void selftest_device(acc_state *st, int n, int rank) {
  header(st, "Device test");
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, &o) != ACC_OK) {
    ST_CHECK(0, "acc_accelerator_create (device AUTO): %s", acc_last_error());
    return;
  }
  acc_device_type t = acc_accelerator_device_type(acc);
  if (t == ACC_DEVICE_CPU) {
    ST_CHECK(strcmp(acc_state_device(st), "cpu") == 0, "on the CPU the state reports %s",
             acc_state_device(st));
    acc_print(st, "no GPU: a program asking for one trains on the CPU\n");
    acc_accelerator_destroy(acc);
    return;
  }
  const char *name = acc_accelerator_device_name(acc);
  ST_CHECK(strcmp(acc_state_device(st), name) == 0, "the state reports %s, the accelerator %s",
           acc_state_device(st), name);
  ST_CHECK(n == 1 || acc_state_distributed_type(st) == ACC_DISTRIBUTED_MULTI_GPU,
           "distributed type %s on %d GPU processes",
           acc_distributed_type_name(acc_state_distributed_type(st)), n);
  enum { N = 1024 };
  float host[N], back[N];
  for (int i = 0; i < N; i++) host[i] = (float)(i % 97) + (float)rank;
  float *d = NULL;
  ST_OK(acc_accelerator_alloc(acc, sizeof host, (void **)&d));
  if (d) {
    ST_OK(acc_accelerator_memcpy(acc, d, host, sizeof host, ACC_COPY_HOST_TO_DEVICE));
    memset(back, 0, sizeof back);
    ST_OK(acc_accelerator_memcpy(acc, back, d, sizeof back, ACC_COPY_DEVICE_TO_HOST));
    ST_CHECK(memcmp(host, back, sizeof host) == 0, "host -> %s -> host changed the data", name);
    ST_OK(acc_all_reduce(st, back, back, N, ACC_F32, ACC_SUM));
    ST_OK(acc_accelerator_memcpy(acc, d, back, sizeof back, ACC_COPY_HOST_TO_DEVICE));
    ST_OK(acc_accelerator_memcpy(acc, host, d, sizeof host, ACC_COPY_DEVICE_TO_HOST));
    int bad = 0;
    for (int i = 0; i < N; i++)
      bad += host[i] != (float)n * (float)(i % 97) + (float)(n * (n - 1) / 2);
    ST_CHECK(bad == 0, "the sum of device data over %d processes is wrong in %d places", n, bad);
    ST_OK(acc_accelerator_free(acc, d));
  }
  printf("[rank %d] device %s: memory and the sum across processes are right\n", rank, name);
  fflush(stdout);
  acc_accelerator_destroy(acc);
  ST_OK(acc_wait_for_everyone(st));
}

int acc_cli_selftest(int argc, char **argv) {
  (void)argc, (void)argv;
  acc_state *st = NULL, *again = NULL;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "FAILED: acc_state_create: %s\n", acc_last_error());
    return 1;
  }
  int n = acc_state_num_processes(st), rank = acc_state_process_index(st);
  g_rank = rank;
  header(st, "Initialization");
  ST_CHECK(acc_state_create(&again, NULL) == ACC_OK && again == st,
           "a second acc_state_create did not return the same state: %s", acc_last_error());
  acc_state_destroy(again);
  if (acc_state_is_local_main_process(st)) printf("Testing, testing. 1, 2, 3.\n");
  fflush(stdout);
  ST_OK(acc_wait_for_everyone(st));
  printf("%s\n", acc_state_describe(st));
  fflush(stdout);
  ST_OK(acc_wait_for_everyone(st));
  if (acc_state_num_machines(st) == 1) selftest_control(st, n, rank);
  selftest_collectives(st, n, rank);
  selftest_rng(st, n);
  selftest_data_and_training(st, n, rank);
  selftest_device(st, n, rank);
  selftest_trigger(st, n, rank);
  /* Every process learns whether any failed, so the main process reports for all. */
  int32_t failed = g_failures;
  if (acc_all_reduce(st, &failed, &failed, 1, ACC_I32, ACC_SUM) != ACC_OK) failed = g_failures + 1;
  if (rank == 0) {
    if (failed) printf("\n%d check(s) failed (see the FAILED lines above)\n", failed);
    else printf("\nAll checks passed on %d process(es)\n", n);
  }
  acc_state_destroy(st);
  return failed ? 1 : 0;
}

/* ---- `accelerate test` --------------------------------------------------------------- */
int acc_cli_test(int argc, char **argv) {
  const char *explicit_path = NULL;
  for (int i = 1; i < argc; i++) {
    int m = acc_cli_match_opt(argc, argv, &i, "config_file", &explicit_path);
    if (m > 0) continue;
    if (m < 0) {
      fprintf(stderr, "accelerate test: --config_file needs a value\n");
      return 1;
    }
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: accelerate test [--config_file PATH]\n\nRuns the built-in distributed self-test "
             "on the processes of your config file.\n");
      return 0;
    }
    fprintf(stderr, "accelerate test: unknown argument '%s'\n", argv[i]);
    return 1;
  }
  char path[4096];
  int found = 0;
  long nproc = 1;
  int nproc_set = 0;
  if (acc_cli_config_find(explicit_path, path, sizeof path, &found) != ACC_OK) {
    fprintf(stderr, "accelerate test: %s\n", acc_last_error());
    return 1;
  }
  if (found) {
    acc_cli_cfg cfg;
    if (acc_cli_config_load(&cfg, path) != ACC_OK) {
      fprintf(stderr, "accelerate test: %s\n", acc_last_error());
      return 1;
    }
    if (cfg.num_processes.set && cfg.num_processes.i > 0) {
      nproc = cfg.num_processes.i;
      nproc_set = 1;
    }
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "accelerate test: cannot find this executable (/proc/self/exe): %s\n", strerror(errno));
    return 1;
  }
  self[n] = '\0';
  char np[32];
  snprintf(np, sizeof np, "%ld", nproc);
  char *args[10];
  int k = 0;
  args[k++] = self;
  args[k++] = "launch";
  acc__device_probe_info gpus;
  int fake = 0, ngpus = acc__placement_gpus(&gpus, &fake, 0) == ACC_OK ? gpus.device_count : 0;
  acc_clear_error();
  if (!nproc_set && ngpus > 1) {
    args[k++] = "--multi_gpu"; /* one process per GPU */
  } else {
    args[k++] = "--num_processes";
    args[k++] = np;
  }
  if (found) {
    args[k++] = "--config_file";
    args[k++] = path;
  }
  args[k++] = self;
  args[k++] = "__selftest";
  args[k] = NULL;
  char cmd[8192] = "";
  for (int i = 0; i < k; i++) {
    strncat(cmd, args[i], sizeof cmd - strlen(cmd) - 2);
    if (i + 1 < k) strcat(cmd, " ");
  }
  printf("Running: %s\n", cmd);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "accelerate test: fork failed: %s\n", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    execv(self, args);
    fprintf(stderr, "accelerate test: cannot run %s: %s\n", self, strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    printf("Test is a success! You are ready for your distributed training!\n");
    return 0;
  }
  if (WIFSIGNALED(status))
    fprintf(stderr, "accelerate test: '%s' was killed by signal %d\n", cmd, WTERMSIG(status));
  else
    fprintf(stderr, "accelerate test: '%s' failed with returncode %d\n", cmd, WEXITSTATUS(status));
  return 1;
}
