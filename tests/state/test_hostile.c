/* load_state against checkpoints altered on disk, and error reporting of checkpoint callbacks.
 * Each case saves a fresh checkpoint, one process alters one file, every process loads it and
 * must fail cleanly with the same kind of error naming the file and key; a good checkpoint then
 * loads again. Run through the launcher at 1 and 2 processes (and under ASan).
 *   - regression for red-team D9: one process's random_states_<p>.json at another position
 *     (ACC_ERR_MISMATCH on every process naming the file);
 *   - red-team D13: "step" = 2^63-1, "seed": "-1", optimizer.json without "momentum";
 *   - red-team D11: an 8 GiB sparse custom_checkpoint_0.bin is refused before it is read;
 *   - new-user review R5 ("cbfail" probe): a failing save callback after an unrelated earlier
 *     failure reports the callback, not the stale text; acc_error_set reaches the caller;
 *   - review R11(g): no checkpoint yet is ACC_ERR_NOT_FOUND;
 *   - review R12: gather_for_metrics over a loader iterated with acc_dataloader_next is refused.
 * Usage: test_state_hostile <dir> */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "acc_test.h"

static int rank, nprocs;
static acc_accelerator *acc;
static char base[900];
static int fail_mode; /* 0: the callback works; 1: fails silently; 2: fails with acc_error_set */
static int64_t counter = 42;

static acc_result save_cb(void *obj, void *buf, size_t cap, size_t *len) {
  if (fail_mode == 1) return ACC_ERR_IO;
  if (fail_mode == 2) return acc_error_set(ACC_ERR_IO, "counter: disk quota of %d bytes exceeded", 8);
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, obj, sizeof(int64_t));
  return ACC_OK;
}

static acc_result load_cb(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return acc_error_set(ACC_ERR_FORMAT, "counter: %zu bytes, expected 8", len);
  memcpy(obj, data, sizeof(int64_t));
  return ACC_OK;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static void write_all(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

/* In <dir>/<file>, the value after `"key": ` (up to , or newline) becomes `value`. Run by the
 * process `who`; everyone waits. */
static void set_value(const char *dir, const char *file, int who, const char *key, const char *value) {
  if (rank == who) {
    char path[1100], pat[64], out[1 << 16];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    const char *text = read_all(path);
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *at = strstr(text, pat);
    if (!at) {
      fprintf(stderr, "no %s in %s\n", pat, path);
      exit(1);
    }
    const char *v = at + strlen(pat), *end = v + strcspn(v, ",\n}");
    if (!value) { /* remove the whole line */
      const char *ls = at;
      while (ls > text && ls[-1] != '\n') ls--;
      const char *le = strchr(at, '\n');
      snprintf(out, sizeof out, "%.*s%s", (int)(ls - text), text, le ? le + 1 : "");
    } else {
      snprintf(out, sizeof out, "%.*s%s%s", (int)(v - text), text, value, end);
    }
    write_all(path, out);
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
}

static void save(const char *name, char *dir, size_t cap) {
  snprintf(dir, cap, "%s/%s", base, name);
  REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
}

static void expect_load_fails(const char *dir, acc_result rc, const char *s1, const char *s2, const char *good) {
  CHECK_ERR(acc_accelerator_load_state(acc, dir, NULL), rc, s1);
  CHECK(strstr(acc_last_error(), s2) != NULL, "message lacks \"%s\": %s", s2, acc_last_error());
  CHECK_OK(acc_accelerator_load_state(acc, good, NULL)); /* the processes are usable again */
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  snprintf(base, sizeof base, "%s/np%d", argv[1], nprocs);
  if (rank == 0) { /* a fresh directory per run */
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));

  float w[4] = {1, 2, 3, 4}, g[4] = {0};
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, (int64_t[]){4}));
  /* R5: an earlier, unrelated failure whose text must not leak into a callback's error */
  CHECK_ERR(acc_model_add_parameter(m, "w", w, g, 1, (int64_t[]){4}), ACC_ERR_INVALID_ARGUMENT, "already");
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.momentum = 0.9;
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  static float xs[40], ev[10];
  for (int i = 0; i < 40; i++) xs[i] = (float)i;
  for (int i = 0; i < 10; i++) ev[i] = (float)i;
  acc_field_desc f[1] = {{ACC_F32, 1}};
  acc_dataset *ds = NULL, *eds = NULL;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 40, f, 1, (const void *const[]){xs}));
  REQUIRE_OK(acc_dataset_create_memory(&eds, 10, f, 1, (const void *const[]){ev}));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 2;
  lo.shuffle = 1;
  acc_dataloader *dl = NULL, *edl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  lo.batch_size = 4;
  lo.shuffle = 0;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, eds, &lo, &edl));
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(acc, &counter, save_cb, load_cb));
  for (int i = 0; i < 3; i++) {
    const acc_batch *b = NULL;
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    g[0] = ((const float *)b->fields[0])[0];
    REQUIRE_OK(acc_accelerator_backward(acc));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  }

  char good[1000], dir[1000];
  save("good", good, sizeof good);
  CHECK_OK(acc_accelerator_load_state(acc, good, NULL));

  /* D9: the last process's file at another loader position */
  if (nprocs > 1) {
    save("d9", dir, sizeof dir);
    char file[64];
    snprintf(file, sizeof file, "random_states_%d.json", nprocs - 1);
    set_value(dir, file, nprocs - 1, "batches", "7");
    expect_load_fails(dir, ACC_ERR_MISMATCH, file, "batch 7", good);
    save("d9step", dir, sizeof dir);
    set_value(dir, file, nprocs - 1, "step", "1");
    expect_load_fails(dir, ACC_ERR_MISMATCH, file, "accumulation step 1", good);
  }

  /* D13: hostile values */
  char last[64];
  snprintf(last, sizeof last, "random_states_%d.json", nprocs - 1);
  save("step", dir, sizeof dir);
  set_value(dir, last, nprocs - 1, "step", "9223372036854775807");
  expect_load_fails(dir, ACC_ERR_FORMAT, last, "\"step\" is 9223372036854775807", good);
  save("seed", dir, sizeof dir);
  set_value(dir, last, nprocs - 1, "seed", "\"-1\"");
  expect_load_fails(dir, ACC_ERR_FORMAT, last, "\"seed\" must be a string of decimal digits", good);
  save("epoch", dir, sizeof dir);
  set_value(dir, last, nprocs - 1, "epoch", "-5");
  expect_load_fails(dir, ACC_ERR_FORMAT, last, "\"epoch\" is -5", good);
  save("momentum", dir, sizeof dir);
  set_value(dir, "optimizer.json", 0, "momentum", NULL);
  expect_load_fails(dir, ACC_ERR_FORMAT, "optimizer.json", "\"momentum\" is missing", good);

  /* D11: an 8 GiB sparse custom object is refused from its size, quickly */
  save("sparse", dir, sizeof dir);
  char bin[1100];
  snprintf(bin, sizeof bin, "%s/custom_checkpoint_0.bin", dir);
  if (rank == 0 && truncate(bin, (off_t)8 << 30) != 0) {
    fprintf(stderr, "cannot grow %s\n", bin);
    return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  expect_load_fails(dir, ACC_ERR_FORMAT, "custom_checkpoint_0.bin", "over the limit of 1073741824 bytes", good);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  CHECK(s < 5.0 * (getenv("ACC_TEST_TIMEOUT_MULTIPLIER") ? atof(getenv("ACC_TEST_TIMEOUT_MULTIPLIER")) : 1.0),
        "refused without reading 8 GiB (%.2f s)", s);
  if (rank == 0) unlink(bin);

  /* R5: callback errors */
  fail_mode = 1;
  snprintf(dir, sizeof dir, "%s/cbfail", base);
  CHECK_ERR(acc_accelerator_save_state(acc, dir, NULL), ACC_ERR_IO, "save callback of registered object 0");
  CHECK(strstr(acc_last_error(), "returned ACC_ERR_IO") != NULL, "names the code: %s", acc_last_error());
  CHECK(strstr(acc_last_error(), "already") == NULL, "no stale text: %s", acc_last_error());
  fail_mode = 2;
  CHECK_ERR(acc_accelerator_save_state(acc, dir, NULL), ACC_ERR_IO, "counter: disk quota of 8 bytes exceeded");
  fail_mode = 0;
  save("cbload", dir, sizeof dir);
  snprintf(bin, sizeof bin, "%s/custom_checkpoint_0.bin", dir);
  if (rank == 0) write_all(bin, "abc");
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  expect_load_fails(dir, ACC_ERR_FORMAT, "load callback of registered object 0", "counter: 3 bytes, expected 8", good);

  /* R11(g): no checkpoint yet */
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  char proj[1000];
  snprintf(proj, sizeof proj, "%s/empty_project", base);
  po.project_dir = proj;
  po.automatic_checkpoint_naming = 1;
  REQUIRE_OK(acc_accelerator_set_project_config(acc, &po));
  CHECK_ERR(acc_accelerator_load_state(acc, NULL, NULL), ACC_ERR_NOT_FOUND, "no complete checkpoint found");

  /* R12: an evaluation loop with acc_dataloader_next cannot drop the padding */
  const acc_batch *b = NULL;
  int64_t got = 0, total = 0;
  float out[64];
  for (;;) {
    REQUIRE_OK(acc_dataloader_next(edl, &b));
    if (!b) break;
    if (acc_dataloader_end_of_dataloader(edl)) {
      CHECK_ERR(acc_accelerator_gather_for_metrics(acc, b->fields[0], b->size, 1, ACC_F32, out, 64, &got),
                ACC_ERR_INVALID_USAGE, "acc_accelerator_next_batch");
    } else {
      CHECK_OK(acc_accelerator_gather_for_metrics(acc, b->fields[0], b->size, 1, ACC_F32, out, 64, &got));
    }
  }
  /* the right loop counts every sample once */
  for (;;) {
    REQUIRE_OK(acc_accelerator_next_batch(acc, edl, &b));
    if (!b) break;
    CHECK_OK(acc_accelerator_gather_for_metrics(acc, b->fields[0], b->size, 1, ACC_F32, out, 64, &got));
    total += got;
  }
  CHECK(total == 10, "gather_for_metrics counted %lld samples (expected 10)", (long long)total);

  acc_accelerator_destroy(acc);
  acc_dataloader_destroy(dl);
  acc_dataloader_destroy(edl);
  acc_dataset_destroy(ds);
  acc_dataset_destroy(eds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  return acc_test_finish("state_hostile");
}
