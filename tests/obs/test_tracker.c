/* Trackers through the launcher (1 and 2 processes): the built-in JSON Lines, CSV and
 * TensorBoard trackers write under <logging_dir>/<project> on the main process only; a custom
 * tracker's four callbacks see the configuration and the values; non-main processes get
 * trackers that do nothing. The TensorBoard file is then read back by independent readers
 * (python3-crc32c, protoc --decode) through check_tfevents.py. The progress bar prints on the main
 * process only. (Newuser review: trackers and ProjectConfiguration's logging_dir were missing.)
 * Usage: test BUILD_DIR SOURCE_DIR */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "acc_test.h"

typedef struct custom {
  int starts, configs, logs, finishes;
  size_t nconfig;
  int64_t last_step;
  double last_loss;
  char run_dir[1024];
} custom;

static acc_result c_start(void *u, const char *project, const char *run_dir) {
  custom *c = u;
  c->starts++;
  snprintf(c->run_dir, sizeof c->run_dir, "%s", run_dir);
  return ACC_OK;
}
static acc_result c_config(void *u, const acc_kv *kv, size_t n) {
  ((custom *)u)->configs++;
  ((custom *)u)->nconfig = n;
  return ACC_OK;
}
static acc_result c_log(void *u, const acc_kv *kv, size_t n, int64_t step) {
  custom *c = u;
  c->logs++;
  c->last_step = step;
  for (size_t i = 0; i < n; i++)
    if (strcmp(kv[i].key, "loss") == 0) c->last_loss = kv[i].number;
  return ACC_OK;
}
static acc_result c_finish(void *u) {
  ((custom *)u)->finishes++;
  return ACC_OK;
}
static acc_result c_fail(void *u, const acc_kv *kv, size_t n, int64_t step) {
  (void)u, (void)kv, (void)n, (void)step;
  return ACC_ERR_IO;
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static int find_event_file(const char *dir, char *out, size_t len) { /* out: >= 1400 bytes */
  DIR *d = opendir(dir);
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, "tfevents")) {
      snprintf(out, len, "%.1100s/%.255s", dir, e->d_name);
      found++;
    }
  closedir(d);
  return found;
}

int main(int argc, char **argv) {
  REQUIRE_OK(argc == 3 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  const int rank = acc_state_process_index(st), np = acc_state_num_processes(st);
  acc_test_rank = rank;
  /* each process its own logging directory, so that "writes nothing" can be checked */
  char logdir[1024], cmd[2300];
  snprintf(logdir, sizeof logdir, "%s/tracker_np%d/r%d", argv[1], np, rank);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", logdir);
  CHECK(system(cmd) == 0, "rm");

  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = "unused-project-dir";
  po.logging_dir = logdir;
  acc_project_config *pc;
  REQUIRE_OK(acc_project_config_create(&pc, &po));
  CHECK(strcmp(acc_project_config_logging_dir(pc), logdir) == 0, "logging_dir");

  /* unknown names are refused on every process */
  acc_trackers *tr;
  CHECK_ERR(acc_trackers_create(&tr, st, "tensorboard,wandb", pc), ACC_ERR_INVALID_ARGUMENT,
            "\"wandb\"");

  REQUIRE_OK(acc_trackers_create(&tr, st, "tensorboard,jsonl,csv", pc));
  custom c = {0};
  acc_tracker_callbacks cb = ACC_TRACKER_CALLBACKS_INIT;
  cb.name = "mine";
  cb.start = c_start;
  cb.store_init_configuration = c_config;
  cb.log = c_log;
  cb.finish = c_finish;
  CHECK_OK(acc_trackers_add(tr, &cb, &c));
  acc_kv config[] = {ACC_KV_NUM("lr", 0.01), ACC_KV_INT("batch_size", 64),
                     ACC_KV_STR("optimizer", "sgd"), ACC_KV_BOOL("overlap", 0)};
  CHECK_ERR(acc_tracker_log(tr, config, 1, 0), ACC_ERR_INVALID_USAGE, "acc_init_trackers first");
  CHECK_OK(acc_init_trackers(tr, "fmnist", config, 4));
  for (int s = 0; s < 5; s++) {
    acc_kv v[] = {ACC_KV_NUM("loss", 2.0 / (s + 1)), ACC_KV_NUM("accuracy", 0.5 + 0.1 * s),
                  ACC_KV_STR("phase", "train")};
    CHECK_OK(acc_tracker_log(tr, v, 3, s * 10));
  }
  acc_kv last[] = {ACC_KV_NUM("throughput", 12345.0)};
  CHECK_OK(acc_tracker_log(tr, last, 1, -1)); /* step 41: one after the last */
  acc_kv bad[] = {{NULL, ACC_VALUE_NUMBER, 1.0, 0, NULL}};
  CHECK_ERR(acc_tracker_log(tr, bad, 1, 0), ACC_ERR_INVALID_ARGUMENT, "has no key");
  char run_dir[1100];
  snprintf(run_dir, sizeof run_dir, "%s/fmnist", logdir);
  if (rank == 0)
    CHECK(acc_trackers_run_dir(tr) && strcmp(acc_trackers_run_dir(tr), run_dir) == 0, "run dir");
  else
    CHECK(acc_trackers_run_dir(tr) == NULL, "no run dir off the main process");
  CHECK_OK(acc_end_training(tr));
  CHECK_ERR(acc_tracker_log(tr, last, 1, -1), ACC_ERR_INVALID_USAGE, "after acc_end_training");
  acc_trackers_destroy(tr);
  acc_project_config_destroy(pc);

  if (rank == 0) {
    CHECK(c.starts == 1 && c.configs == 1 && c.logs == 6 && c.finishes == 1,
          "custom callbacks %d %d %d %d", c.starts, c.configs, c.logs, c.finishes);
    CHECK(c.nconfig == 4 && c.last_step == 41 && strcmp(c.run_dir, run_dir) == 0,
          "custom arguments");
    char path[1200];
    snprintf(path, sizeof path, "%s/run.jsonl", run_dir);
    CHECK(count_lines(path) == 6, "run.jsonl has %d lines", count_lines(path));
    FILE *f = fopen(path, "r");
    char line[1024];
    int k = 0;
    while (f && fgets(line, sizeof line, f)) {
      json_error_t err;
      json_t *o = json_loads(line, 0, &err);
      CHECK(o && json_is_object(o), "line %d is JSON: %s", k, err.text);
      if (o && k < 5) {
        CHECK(json_integer_value(json_object_get(o, "step")) == k * 10, "step");
        CHECK(fabs(json_real_value(json_object_get(o, "loss")) - 2.0 / (k + 1)) < 1e-12, "loss");
        CHECK(strcmp(json_string_value(json_object_get(o, "phase")), "train") == 0, "string kept");
      }
      json_decref(o);
      k++;
    }
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    CHECK(cfg && json_integer_value(json_object_get(cfg, "batch_size")) == 64 &&
              json_is_false(json_object_get(cfg, "overlap")),
          "config.json: %s", err.text);
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/metrics.csv", run_dir);
    CHECK(count_lines(path) == 1 + 5 * 2 + 1, "metrics.csv lines: %d", count_lines(path));
    f = fopen(path, "r");
    CHECK(f && fgets(line, sizeof line, f) && strcmp(line, "step,time,name,value\n") == 0,
          "csv header");
    CHECK(f && fgets(line, sizeof line, f) && strncmp(line, "0,", 2) == 0 &&
              strstr(line, ",loss,2\n"),
          "first csv row: %s", line);
    if (f) fclose(f);

    char ev[1400];
    CHECK(find_event_file(run_dir, ev, sizeof ev) == 1, "one event file in %s", run_dir);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/check_tfevents.py '%s' %s "
             "'tag: \"loss\"\\s+simple_value: 2\\b' 'step: 40.*tag: \"accuracy\"\\s+simple_value: "
             "0\\.9' "
             "'step: 41.*tag: \"throughput\"\\s+simple_value: 12345' "
             "'tag: \"_hparams_/session_start_info\".*plugin_name: \"hparams\".*key: "
             "\"lr\"\\s+value \\{\\s+number_value: 0\\.01' "
             "'key: \"optimizer\"\\s+value \\{\\s+string_value: \"sgd\"' 'key: "
             "\"batch_size\"\\s+value \\{\\s+number_value: 64' "
             "'tag: \"_hparams_/experiment\".*name: \"lr\".*tag: \"loss\"' "
             "'tag: \"_hparams_/session_end_info\".*status: 1'",
             argv[2], ev, argv[2]);
    CHECK(system(cmd) == 0, "independent readers rejected %s", ev);
  } else {
    CHECK(c.starts == 0 && c.logs == 0 && c.finishes == 0, "callbacks ran off the main process");
    CHECK(access(logdir, F_OK) != 0, "rank %d must write nothing (%s exists)", rank, logdir);
  }

  /* the progress bar is the main process's too: elsewhere it prints nothing */
  FILE *pf = tmpfile();
  acc_progress_options popt = ACC_PROGRESS_OPTIONS_INIT;
  popt.out = pf;
  popt.tty = 0;
  acc_progress *bar;
  REQUIRE_OK(acc_progress_create(&bar, st, "p", 10, &popt));
  for (int s = 1; s <= 10; s++) acc_progress_update_at(bar, (uint64_t)s, 0, s * 0.1);
  acc_progress_destroy(bar);
  long printed = ftell(pf);
  CHECK(rank == 0 ? printed > 0 : printed == 0, "progress bar on rank %d printed %ld bytes", rank,
        printed);
  fclose(pf);

  /* a failing custom callback: its error comes back with the tracker's name */
  if (rank == 0) {
    snprintf(logdir, sizeof logdir, "%s/tracker_fail_np%d", argv[1], np);
    acc_project_options po2 = ACC_PROJECT_OPTIONS_INIT;
    po2.project_dir = logdir;
    REQUIRE_OK(acc_project_config_create(&pc, &po2));
    REQUIRE_OK(acc_trackers_create(&tr, NULL, NULL, pc));
    acc_tracker_callbacks fcb = ACC_TRACKER_CALLBACKS_INIT;
    fcb.name = "flaky";
    fcb.log = c_fail;
    CHECK_OK(acc_trackers_add(tr, &fcb, NULL));
    CHECK_OK(acc_init_trackers(tr, "x", NULL, 0));
    CHECK_ERR(acc_tracker_log(tr, last, 1, 0), ACC_ERR_IO, "tracker \"flaky\" (log)");
    acc_trackers_destroy(tr);
    acc_project_config_destroy(pc);
  }
  acc_state_destroy(st);
  return acc_test_finish("obs_tracker");
}
