/* The step profiler through the launcher (1 and 2 processes). ctest sets ACCELERATE_PROFILE, so
 * the profiler is on from program start; a few training steps and a save_state later,
 * acc_profile_stop writes trace.rank<R>.json (Chrome trace events: every span of the library —
 * waiting for a batch, backward sync and each gradient bucket, optimizer step, checkpoint write,
 * each collective — with ts/dur/pid/tid) and summary.rank<R>.txt (shares that add up to 100%).
 * Then the API starts a second session in another directory. Off, a span allocates nothing and
 * records nothing. Regression for newuser review R10 (a slow collective could not be traced) and
 * the missing profile(). Usage: test_obs_profile BUILD_DIR */
#include <jansson.h>
#include <malloc.h>
#include <math.h>
#include <unistd.h>

#include "acc_test.h"
#include "core/profile.h"

static int rank;

static int fetch(int64_t i, void *const *fields, void *payload) {
  float *x = fields[0];
  for (int k = 0; k < 4; k++) x[k] = (float)((i * 7 + k) % 5) * 0.1f;
  return 0;
}

static void train(acc_accelerator *acc, acc_dataloader *dl, acc_optimizer *opt, float *w, float *g,
                  int steps) {
  const acc_batch *b;
  for (int s = 0; s < steps; s++) {
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
    if (!b) {
      REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b)); /* next epoch */
    }
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    const float *x = b->fields[0];
    for (int k = 0; k < 8; k++) g[k] += 0.01f * x[k % 4] * (float)(k + 1) + 0.001f * w[k];
    /* overlap: the buckets are reduced (and their spans recorded) on the reducer thread */
    REQUIRE_OK(acc_accelerator_grad_ready(acc, 1));
    REQUIRE_OK(acc_accelerator_grad_ready(acc, 0));
    REQUIRE_OK(acc_accelerator_backward(acc));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  }
}

static json_t *find_event(json_t *events, const char *name, const char *cat) {
  size_t i;
  json_t *e;
  json_array_foreach(events, i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    const char *c = json_string_value(json_object_get(e, "cat"));
    if (n && strcmp(n, name) == 0 && c && strcmp(c, cat) == 0) return e;
  }
  return NULL;
}

static void check_trace(const char *dir, int expect_ckpt) {
  char path[1200];
  snprintf(path, sizeof path, "%s/trace.rank%d.json", dir, rank);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  CHECK(root != NULL, "%s is not JSON: %s (line %d)", path, err.text, err.line);
  if (!root) return;
  json_t *events = json_object_get(root, "traceEvents");
  CHECK(json_is_array(events) && json_array_size(events) > 10, "traceEvents");
  size_t i;
  json_t *e;
  int complete = 0;
  json_array_foreach(events, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    CHECK(ph && (strcmp(ph, "X") == 0 || strcmp(ph, "M") == 0), "event %zu phase", i);
    CHECK(json_integer_value(json_object_get(e, "pid")) == rank, "pid is the rank");
    if (ph && strcmp(ph, "X") == 0) {
      complete++;
      CHECK(json_number_value(json_object_get(e, "ts")) >= 0 &&
                json_number_value(json_object_get(e, "dur")) >= 0,
            "ts/dur of event %zu", i);
      CHECK(json_is_integer(json_object_get(e, "tid")), "tid");
    }
  }
  CHECK(complete > 10, "%d complete events", complete);
  CHECK(find_event(events, "next_batch", "data"), "waiting for a batch");
  CHECK(find_event(events, "backward_sync", "communication"), "backward sync");
  json_t *bucket = find_event(events, "grad_sync.bucket", "communication");
  CHECK(
      bucket && json_integer_value(json_object_get(json_object_get(bucket, "args"), "index")) >= 0,
      "gradient bucket with its index");
  CHECK(find_event(events, "optimizer_step", "optimizer"), "optimizer step");
  CHECK(find_event(events, "all_reduce", "communication"), "collective");
  if (expect_ckpt) CHECK(find_event(events, "save_state", "checkpoint"), "checkpoint write");
  json_decref(root);

  snprintf(path, sizeof path, "%s/summary.rank%d.txt", dir, rank);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "no summary %s", path);
  if (!f) return;
  char line[256];
  double total = 0;
  int cats = 0;
  while (fgets(line, sizeof line, f)) {
    char name[64];
    double pct;
    if (sscanf(line, " %63s %lf%%", name, &pct) == 2 && strcmp(name, "span") != 0) {
      total += pct;
      cats++;
    }
  }
  fclose(f);
  CHECK(cats == 5 && fabs(total - 100.0) < 0.6, "5 shares adding up to 100%%: %d, %.2f", cats,
        total);
}

int main(int argc, char **argv) {
  REQUIRE_OK(argc == 2 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  const char *env_dir = getenv("ACCELERATE_PROFILE");
  CHECK(env_dir && acc_profile_active(),
        "ACCELERATE_PROFILE started the profiler at program start");

  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.bucket_cap_bytes = 16; /* two buckets of 4 floats */
  ao.overlap_grad_sync = 1;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  acc_state *st = acc_accelerator_state(acc);
  rank = acc_state_process_index(st);
  acc_test_rank = rank;
  float w[8] = {0}, g[8] = {0};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t shape[1] = {4};
  REQUIRE_OK(acc_model_add_parameter(m, "a", w, g, 1, shape));
  REQUIRE_OK(acc_model_add_parameter(m, "b", w + 4, g + 4, 1, shape));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.1;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_field_desc fields[1] = {{ACC_F32, 4}};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_map(&ds, 64, fields, 1, fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 4;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));

  train(acc, dl, opt, w, g, 6);
  float x = 1.0f;
  REQUIRE_OK(
      acc_accelerator_all_reduce(acc, &x, &x, 1, ACC_F32, ACC_SUM)); /* a collective at any size */
  char ckpt[1100];
  snprintf(ckpt, sizeof ckpt, "%s/profile_ckpt_np%d", argv[1], acc_state_num_processes(st));
  if (rank == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ckpt);
    CHECK(system(cmd) == 0, "rm");
  }
  REQUIRE_OK(acc_wait_for_everyone(st));
  CHECK_OK(acc_accelerator_save_state(acc, ckpt, NULL));
  CHECK_ERR(acc_profile_start(argv[1]), ACC_ERR_INVALID_USAGE, "already on");
  CHECK_OK(acc_profile_stop());
  CHECK(!acc_profile_active(), "stopped");
  if (env_dir) check_trace(env_dir, 1);

  /* The API: a second session elsewhere. */
  char dir2[1100];
  snprintf(dir2, sizeof dir2, "%s/profile_api_np%d", argv[1], acc_state_num_processes(st));
  CHECK_OK(acc_profile_start(dir2));
  train(acc, dl, opt, w, g, 4);
  REQUIRE_OK(acc_accelerator_all_reduce(acc, &x, &x, 1, ACC_F32, ACC_SUM));
  CHECK_OK(acc_profile_stop());
  check_trace(dir2, 0);
  CHECK_ERR(acc_profile_start(""), ACC_ERR_INVALID_ARGUMENT, "empty");

  /* Off: a span is a branch; no allocation, nothing recorded. */
  struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < 100000; i++) {
    ACC_PROF_SCOPE(ACC_PROF_OTHER, "off");
  }
  struct mallinfo2 after = mallinfo2();
  CHECK(before.uordblks == after.uordblks && before.hblkhd == after.hblkhd,
        "spans allocated while off");
  char dir3[1100];
  snprintf(dir3, sizeof dir3, "%s/profile_off_np%d", argv[1], acc_state_num_processes(st));
  CHECK_OK(acc_profile_start(dir3));
  for (int i = 0; i < 3; i++) {
    ACC_PROF_SCOPE(ACC_PROF_OTHER, "on");
  }
  CHECK_OK(acc_profile_stop());
  char path[1200];
  snprintf(path, sizeof path, "%s/trace.rank%d.json", dir3, rank);
  json_t *t = json_load_file(path, 0, NULL);
  size_t on = 0, off = 0, i;
  json_t *e;
  json_array_foreach(json_object_get(t, "traceEvents"), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    on += n && strcmp(n, "on") == 0;
    off += n && strcmp(n, "off") == 0;
  }
  json_decref(t);
  CHECK(on == 3 && off == 0, "3 spans while on (%zu), none while off (%zu)", on, off);

  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
  return acc_test_finish("obs_profile");
}
