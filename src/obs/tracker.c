/* Experiment trackers (Accelerate's log_with / init_trackers / log / end_training): a list of
 * trackers, each a table of four callbacks; the built-ins (JSON Lines, CSV, TensorBoard) are
 * tables like any custom one. Only the main process writes; elsewhere every call is a no-op. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/log.h"
#include "ckpt/ckpt_dir.h"
#include "obs/tboard.h"

#define TRACKERS_MAGIC 0x41435452u /* "ACTR" */
#define MAX_TRACKERS 16

typedef struct tracker {
  acc_tracker_callbacks cb;
  void *user;
  int builtin; /* user is ours to free (in finish) */
} tracker;

struct acc_trackers {
  uint32_t magic;
  int active; /* main process: 1; elsewhere 0 and nothing is written */
  int started, finished;
  char *logging_dir;
  char *run_dir;
  int64_t last_step;
  size_t n;
  tracker t[MAX_TRACKERS];
};

static double wall_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static acc_result check_kvs(const char *fn, const acc_kv *kv, size_t n) {
  if (n && !kv)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: values is NULL but n is %zu", fn, n);
  for (size_t i = 0; i < n; i++) {
    if (!kv[i].key || !*kv[i].key)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: entry %zu has no key", fn, i);
    if ((unsigned)kv[i].type > ACC_VALUE_BOOL)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: \"%s\" has an unknown type %d", fn,
                        kv[i].key, (int)kv[i].type);
    if (kv[i].type == ACC_VALUE_STRING && !kv[i].string)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: \"%s\" is a string but its value is NULL",
                        fn, kv[i].key);
  }
  return ACC_OK;
}

static json_t *kv_json(const acc_kv *kv) {
  switch (kv->type) {
    case ACC_VALUE_NUMBER: return isfinite(kv->number) ? json_real(kv->number) : json_null();
    case ACC_VALUE_INT: return json_integer((json_int_t)kv->integer);
    case ACC_VALUE_STRING: return json_string(kv->string);
    case ACC_VALUE_BOOL: return json_boolean(kv->integer);
  }
  return json_null();
}

/* ---- JSON Lines: run.jsonl (one object per log call) + config.json ------------------------- */

typedef struct file_tracker {
  FILE *f;
  char dir[4096];
  char path[4200];
} file_tracker;

static acc_result open_in(file_tracker *ft, const char *run_dir, const char *name) {
  snprintf(ft->dir, sizeof ft->dir, "%s", run_dir);
  snprintf(ft->path, sizeof ft->path, "%s/%s", run_dir, name);
  ft->f = fopen(ft->path, "w");
  if (!ft->f) return acc__error(ACC_ERR_IO, "cannot create \"%s\": %s", ft->path, strerror(errno));
  return ACC_OK;
}

static acc_result flushed(file_tracker *ft) {
  if (fflush(ft->f) != 0 || ferror(ft->f))
    return acc__error(ACC_ERR_IO, "writing \"%s\" failed: %s", ft->path, strerror(errno));
  return ACC_OK;
}

static acc_result jsonl_start(void *user, const char *project, const char *run_dir) {
  return open_in(user, run_dir, "run.jsonl");
}

static acc_result jsonl_config(void *user, const acc_kv *config, size_t n) {
  file_tracker *ft = user;
  json_t *o = json_object();
  if (!o) return acc__error(ACC_ERR_NOMEM, "jsonl tracker: out of memory");
  for (size_t i = 0; i < n; i++) json_object_set_new(o, config[i].key, kv_json(&config[i]));
  char path[4300];
  snprintf(path, sizeof path, "%s/config.json", ft->dir);
  int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (rc != 0) return acc__error(ACC_ERR_IO, "cannot write \"%s\": %s", path, strerror(errno));
  return ACC_OK;
}

static acc_result jsonl_log(void *user, const acc_kv *values, size_t n, int64_t step) {
  file_tracker *ft = user;
  json_t *o = json_object();
  if (!o) return acc__error(ACC_ERR_NOMEM, "jsonl tracker: out of memory");
  json_object_set_new(o, "step", json_integer((json_int_t)step));
  json_object_set_new(o, "time", json_real(wall_now()));
  for (size_t i = 0; i < n; i++) json_object_set_new(o, values[i].key, kv_json(&values[i]));
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
  json_decref(o);
  if (!s) return acc__error(ACC_ERR_NOMEM, "jsonl tracker: out of memory");
  fprintf(ft->f, "%s\n", s);
  free(s);
  return flushed(ft);
}

static acc_result file_finish(void *user) {
  file_tracker *ft = user;
  acc_result rc = ACC_OK;
  if (ft->f && fclose(ft->f) != 0)
    rc = acc__error(ACC_ERR_IO, "closing \"%s\" failed: %s", ft->path, strerror(errno));
  free(ft);
  return rc;
}

/* ---- CSV: metrics.csv in long form, step,time,name,value ----------------------------------- */

static acc_result csv_start(void *user, const char *project, const char *run_dir) {
  file_tracker *ft = user;
  ACC_CHECK(open_in(ft, run_dir, "metrics.csv"));
  fprintf(ft->f, "step,time,name,value\n");
  return flushed(ft);
}

static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static acc_result csv_config(void *user, const acc_kv *config, size_t n) {
  file_tracker *ft = user;
  char path[4300];
  snprintf(path, sizeof path, "%s/hparams.csv", ft->dir);
  FILE *f = fopen(path, "w");
  if (!f) return acc__error(ACC_ERR_IO, "cannot create \"%s\": %s", path, strerror(errno));
  fprintf(f, "name,value\n");
  for (size_t i = 0; i < n; i++) {
    csv_field(f, config[i].key);
    fputc(',', f);
    switch (config[i].type) {
      case ACC_VALUE_NUMBER: fprintf(f, "%.17g", config[i].number); break;
      case ACC_VALUE_INT: fprintf(f, "%lld", (long long)config[i].integer); break;
      case ACC_VALUE_BOOL: fputs(config[i].integer ? "true" : "false", f); break;
      case ACC_VALUE_STRING: csv_field(f, config[i].string); break;
    }
    fputc('\n', f);
  }
  if (fclose(f) != 0)
    return acc__error(ACC_ERR_IO, "writing \"%s\" failed: %s", path, strerror(errno));
  return ACC_OK;
}

static acc_result csv_log(void *user, const acc_kv *values, size_t n, int64_t step) {
  file_tracker *ft = user;
  double t = wall_now();
  for (size_t i = 0; i < n; i++) {
    double x;
    if (values[i].type == ACC_VALUE_NUMBER)
      x = values[i].number;
    else if (values[i].type == ACC_VALUE_STRING)
      continue;
    else
      x = (double)values[i].integer;
    fprintf(ft->f, "%lld,%.3f,", (long long)step, t);
    csv_field(ft->f, values[i].key);
    fprintf(ft->f, ",%.9g\n", x);
  }
  return flushed(ft);
}

/* ---- TensorBoard ------------------------------------------------------------------------------
 */

typedef struct tb_tracker {
  acc__tb *tb;
} tb_tracker;

static acc_result tb_start(void *user, const char *project, const char *run_dir) {
  tb_tracker *t = user;
  ACC_CHECK(acc__tb_open(&t->tb, run_dir));
  acc__log(ACC_LOG_INFO, "tensorboard tracker: writing %s", acc__tb_path(t->tb));
  return ACC_OK;
}
static acc_result tb_config(void *user, const acc_kv *config, size_t n) {
  return acc__tb_hparams(((tb_tracker *)user)->tb, config, n);
}
static acc_result tb_log(void *user, const acc_kv *values, size_t n, int64_t step) {
  return acc__tb_scalars(((tb_tracker *)user)->tb, values, n, step);
}
static acc_result tb_finish(void *user) {
  tb_tracker *t = user;
  acc_result rc = acc__tb_close(t->tb, 1);
  free(t);
  return rc;
}

/* ---- the tracker list -------------------------------------------------------------------------
 */

static acc_result add_builtin(acc_trackers *tr, const char *name) {
  acc_tracker_callbacks cb = ACC_TRACKER_CALLBACKS_INIT;
  void *user;
  if (strcmp(name, "jsonl") == 0) {
    cb = (acc_tracker_callbacks){
        sizeof cb,  ACC_TRACKER_CALLBACKS_VERSION, "jsonl", jsonl_start, jsonl_config, jsonl_log,
        file_finish};
    user = calloc(1, sizeof(file_tracker));
  } else if (strcmp(name, "csv") == 0) {
    cb = (acc_tracker_callbacks){
        sizeof cb,  ACC_TRACKER_CALLBACKS_VERSION, "csv", csv_start, csv_config, csv_log,
        file_finish};
    user = calloc(1, sizeof(file_tracker));
  } else if (strcmp(name, "tensorboard") == 0) {
    cb = (acc_tracker_callbacks){
        sizeof cb, ACC_TRACKER_CALLBACKS_VERSION, "tensorboard", tb_start, tb_config, tb_log,
        tb_finish};
    user = calloc(1, sizeof(tb_tracker));
  } else {
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "log_with: unknown tracker \"%s\" (built in: tensorboard, jsonl, csv, all)",
                      name);
  }
  for (size_t i = 0; i < tr->n; i++)
    if (tr->t[i].builtin && strcmp(tr->t[i].cb.name, name) == 0) {
      free(user);
      return ACC_OK; /* named twice */
    }
  if (!user) return acc__error(ACC_ERR_NOMEM, "log_with: out of memory");
  if (tr->n == MAX_TRACKERS) {
    free(user);
    return acc__error(ACC_ERR_INVALID_USAGE, "too many trackers (at most %d)", MAX_TRACKERS);
  }
  tr->t[tr->n++] = (tracker){cb, user, 1};
  return ACC_OK;
}

static int valid(const acc_trackers *tr) { return tr && tr->magic == TRACKERS_MAGIC; }

acc_result acc_trackers_create(acc_trackers **out, acc_state *st, const char *log_with,
                               const acc_project_config *project) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_trackers_create: out is NULL");
  *out = NULL;
  acc_trackers *tr = acc__calloc(1, sizeof *tr);
  if (!tr) return ACC_ERR_NOMEM;
  tr->magic = TRACKERS_MAGIC;
  tr->active = !st || acc_state_is_main_process(st);
  tr->last_step = -1;
  const char *dir = project ? acc_project_config_logging_dir(project) : NULL;
  tr->logging_dir = acc__strdup(dir ? dir : ".");
  acc_result rc = tr->logging_dir ? ACC_OK : ACC_ERR_NOMEM;
  /* Names are checked on every process, so a typo fails everywhere alike. */
  char names[256];
  snprintf(names, sizeof names, "%s", log_with ? log_with : "");
  for (char *save = NULL, *tok = strtok_r(names, ", ", &save); tok && rc == ACC_OK;
       tok = strtok_r(NULL, ", ", &save)) {
    if (strcmp(tok, "all") == 0) {
      rc = add_builtin(tr, "tensorboard");
      if (rc == ACC_OK) rc = add_builtin(tr, "jsonl");
      if (rc == ACC_OK) rc = add_builtin(tr, "csv");
    } else {
      rc = add_builtin(tr, tok);
    }
  }
  if (rc != ACC_OK) {
    acc_trackers_destroy(tr);
    return rc;
  }
  *out = tr;
  return ACC_OK;
}

acc_result acc_trackers_add(acc_trackers *tr, const acc_tracker_callbacks *cb, void *user) {
  if (!valid(tr))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_trackers_add: not a tracker list");
  if (!cb || cb->size < sizeof *cb || cb->version != ACC_TRACKER_CALLBACKS_VERSION)
    return acc__error(
        ACC_ERR_INVALID_ARGUMENT,
        "acc_trackers_add: callbacks not initialized with ACC_TRACKER_CALLBACKS_INIT");
  if (tr->started)
    return acc__error(ACC_ERR_INVALID_USAGE, "acc_trackers_add: call it before acc_init_trackers");
  if (tr->n == MAX_TRACKERS)
    return acc__error(ACC_ERR_INVALID_USAGE, "too many trackers (at most %d)", MAX_TRACKERS);
  tr->t[tr->n] = (tracker){*cb, user, 0};
  if (!tr->t[tr->n].cb.name) tr->t[tr->n].cb.name = "custom";
  tr->n++;
  return ACC_OK;
}

static acc_result blame(acc_result rc, const tracker *t, const char *what) {
  if (rc == ACC_OK) return ACC_OK;
  if (strstr(acc_last_error(), t->cb.name) == acc_last_error()) return rc;
  return acc__error_context(rc, "tracker \"%s\" (%s)", t->cb.name, what);
}

acc_result acc_init_trackers(acc_trackers *tr, const char *project_name, const acc_kv *config,
                             size_t n) {
  if (!valid(tr))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_init_trackers: not a tracker list");
  if (!project_name || !*project_name || strchr(project_name, '/') ||
      strcmp(project_name, "..") == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_init_trackers: project_name \"%s\" must be a non-empty name without '/'",
                      project_name ? project_name : "(null)");
  ACC_CHECK(check_kvs("acc_init_trackers", config, n));
  if (tr->started) return acc__error(ACC_ERR_INVALID_USAGE, "acc_init_trackers: already called");
  tr->started = 1;
  if (!tr->active || tr->n == 0) return ACC_OK; /* no tracker: no run directory either */
  size_t len = strlen(tr->logging_dir) + strlen(project_name) + 3;
  tr->run_dir = acc__malloc(len);
  if (!tr->run_dir) return ACC_ERR_NOMEM;
  snprintf(tr->run_dir, len, "%s/%s", tr->logging_dir, project_name);
  ACC_CHECK(acc__error_context(acc__mkdirs(tr->run_dir), "acc_init_trackers"));
  for (size_t i = 0; i < tr->n; i++) {
    tracker *t = &tr->t[i];
    if (t->cb.start) ACC_CHECK(blame(t->cb.start(t->user, project_name, tr->run_dir), t, "start"));
    if (t->cb.store_init_configuration)
      ACC_CHECK(
          blame(t->cb.store_init_configuration(t->user, config, n), t, "store_init_configuration"));
  }
  if (tr->n) acc__log(ACC_LOG_DEBUG, "trackers started in %s", tr->run_dir);
  return ACC_OK;
}

acc_result acc_tracker_log(acc_trackers *tr, const acc_kv *values, size_t n, int64_t step) {
  if (!valid(tr))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tracker_log: not a tracker list");
  ACC_CHECK(check_kvs("acc_tracker_log", values, n));
  if (!tr->started)
    return acc__error(ACC_ERR_INVALID_USAGE, "acc_tracker_log: call acc_init_trackers first");
  if (tr->finished)
    return acc__error(ACC_ERR_INVALID_USAGE, "acc_tracker_log: after acc_end_training");
  if (step < 0) step = tr->last_step + 1;
  tr->last_step = step;
  if (!tr->active) return ACC_OK;
  for (size_t i = 0; i < tr->n; i++) {
    tracker *t = &tr->t[i];
    if (t->cb.log) ACC_CHECK(blame(t->cb.log(t->user, values, n, step), t, "log"));
  }
  return ACC_OK;
}

static acc_result finish_all(acc_trackers *tr) {
  acc_result first = ACC_OK;
  char msg[1024] = "";
  for (size_t i = 0; i < tr->n; i++) {
    tracker *t = &tr->t[i];
    acc_result rc = ACC_OK;
    if (tr->active && tr->started && t->cb.finish)
      rc = blame(t->cb.finish(t->user), t, "finish");
    else if (t->builtin) {
      if (t->user && ((file_tracker *)t->user)->f && t->cb.finish == file_finish)
        fclose(((file_tracker *)t->user)->f);
      free(t->user);
    }
    t->user = NULL;
    if (rc != ACC_OK && first == ACC_OK) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", acc_last_error());
    }
  }
  tr->n = 0;
  if (first != ACC_OK) return acc__error(first, "%s", msg);
  return ACC_OK;
}

acc_result acc_end_training(acc_trackers *tr) {
  if (!valid(tr))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_end_training: not a tracker list");
  if (tr->finished) return ACC_OK;
  tr->finished = 1;
  return finish_all(tr);
}

const char *acc_trackers_run_dir(const acc_trackers *tr) { return valid(tr) ? tr->run_dir : NULL; }

void acc_trackers_destroy(acc_trackers *tr) {
  if (!valid(tr)) return;
  if (!tr->finished) {
    tr->finished = 1;
    if (finish_all(tr) != ACC_OK) acc__log(ACC_LOG_ERROR, "trackers: %s", acc_last_error());
  }
  tr->magic = 0;
  acc__free(tr->logging_dir);
  acc__free(tr->run_dir);
  acc__free(tr);
}
