/* Experiment trackers (Accelerate's log_with / init_trackers / log / end_training): a list of
 * trackers, each a table of four callbacks; the built-ins (JSON Lines, CSV, TensorBoard) are
 * tables like any custom one. Only the main process writes; elsewhere every call is a no-op. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/fs.h"
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

/* Length of the valid UTF-8 prefix of s (strlen(s) when all of it is valid). */
static size_t utf8_valid_len(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (p[i]) {
    unsigned c = p[i];
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || (n == 1 && c < 0xC2) || (n == 3 && c > 0xF4)) return i;
    unsigned cp = n == 0 ? c : c & (0x3Fu >> n);
    for (int k = 1; k <= n; k++) {
      if ((p[i + (size_t)k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + (size_t)k] & 0x3Fu);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return i;
    i += (size_t)n + 1;
  }
  return i;
}

static acc_result check_utf8(const char *fn, const char *what, const char *s) {
  size_t ok = utf8_valid_len(s);
  if (!s[ok]) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "%s: %s \"%.*s...\" is not valid UTF-8 (byte 0x%02x at offset %zu): JSON and TensorBoard "
                    "records hold UTF-8 text only", fn, what, (int)ok, s, (unsigned)(unsigned char)s[ok], ok);
}

static acc_result check_kvs(const char *fn, const acc_kv *kv, size_t n) {
  if (n && !kv)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: values is NULL but n is %zu", fn, n);
  for (size_t i = 0; i < n; i++) {
    if (!kv[i].key || !*kv[i].key)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: entry %zu has no key", fn, i);
    ACC_CHECK(check_utf8(fn, "the name", kv[i].key));
    if (kv[i].type == ACC_VALUE_STRING && kv[i].string) ACC_CHECK(check_utf8(fn, "the value of a string", kv[i].string));
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
  int csv;    /* metrics.csv: a header line, then "step,..." lines */
  int purged; /* the first log call dropped the earlier records at or past its step */
} file_tracker;

/* The file is opened for appending: a resumed or restarted run under the same name continues
 * it (the first log call then drops what an earlier attempt logged at or past its step). */
static acc_result open_in(file_tracker *ft, const char *run_dir, const char *name) {
  snprintf(ft->dir, sizeof ft->dir, "%s", run_dir);
  snprintf(ft->path, sizeof ft->path, "%s/%s", run_dir, name);
  ft->f = fopen(ft->path, "a");
  if (!ft->f) return acc__error(ACC_ERR_IO, "cannot create \"%s\": %s", ft->path, strerror(errno));
  return ACC_OK;
}

/* The step of one earlier record, or -1 when the line is not a whole record (a line cut by a
 * kill, the CSV header). */
static int64_t record_step(const file_tracker *ft, const char *line) {
  if (ft->csv) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(line, &end, 10);
    return end != line && *end == ',' && !errno && v >= 0 && strchr(end, '\n') ? (int64_t)v : -1;
  }
  if (!strchr(line, '\n')) return -1;
  json_t *o = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
  json_t *st = json_object_get(o, "step");
  int64_t v = json_is_integer(st) && json_integer_value(st) >= 0 ? (int64_t)json_integer_value(st) : -1;
  json_decref(o);
  return v;
}

/* Before the first record of this attempt (step `step`): the earlier records at or past it go
 * (a resume continues from its checkpoint's step, as TensorBoard's purge_step does), the others
 * stay; the file is rewritten atomically and appended to from then on. */
static acc_result purge_from(file_tracker *ft, int64_t step) {
  ft->purged = 1;
  if (fflush(ft->f) != 0 || ftell(ft->f) <= 0) { /* empty: nothing earlier */
    if (ft->csv) fprintf(ft->f, "step,time,name,value\n");
    return ACC_OK;
  }
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", ft->path);
  FILE *in = fopen(ft->path, "r"), *out = fopen(tmp, "w");
  acc_result rc = in && out ? ACC_OK : acc__error(ACC_ERR_IO, "cannot rewrite \"%s\": %s", ft->path, strerror(errno));
  if (rc == ACC_OK && ft->csv) fprintf(out, "step,time,name,value\n");
  char *line = NULL;
  size_t cap = 0;
  while (rc == ACC_OK && getline(&line, &cap, in) > 0) {
    int64_t s = record_step(ft, line);
    if (s >= 0 && s < step) fputs(line, out);
  }
  free(line);
  if (in) fclose(in);
  if (out && (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0) && rc == ACC_OK)
    rc = acc__error(ACC_ERR_IO, "writing \"%s\" failed: %s", tmp, strerror(errno));
  if (out) fclose(out);
  if (rc == ACC_OK && rename(tmp, ft->path) != 0)
    rc = acc__error(ACC_ERR_IO, "cannot replace \"%s\": %s", ft->path, strerror(errno));
  if (rc != ACC_OK) {
    unlink(tmp);
    return rc;
  }
  fclose(ft->f);
  ft->f = fopen(ft->path, "a");
  if (!ft->f) return acc__error(ACC_ERR_IO, "cannot open \"%s\": %s", ft->path, strerror(errno));
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
  if (!ft->purged) ACC_CHECK(purge_from(ft, step));
  json_t *o = json_object();
  if (!o) return acc__error(ACC_ERR_NOMEM, "jsonl tracker: out of memory");
  json_object_set_new(o, "step", json_integer((json_int_t)step));
  json_object_set_new(o, "time", json_real(wall_now()));
  for (size_t i = 0; i < n; i++)
    if (json_object_set_new(o, values[i].key, kv_json(&values[i])) != 0) {
      json_decref(o);
      return acc__error(ACC_ERR_NOMEM, "jsonl tracker: could not add \"%s\"", values[i].key);
    }
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
  ft->csv = 1;
  return open_in(ft, run_dir, "metrics.csv"); /* the header: with the first record (purge_from) */
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
  if (!ft->purged) ACC_CHECK(purge_from(ft, step));
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
  int purged;
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
  tb_tracker *t = user;
  if (!t->purged) { /* earlier files of this run: their events at or past this step are dropped */
    t->purged = 1;
    ACC_CHECK(acc__tb_purge_from(t->tb, step));
  }
  return acc__tb_scalars(t->tb, values, n, step);
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
  acc__reserve_std_fds(); /* a tracker file must never become stdout */
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
  for (size_t i = 0; i < tr->n; i++) /* the same list on every process: the same answer */
    for (size_t k = 0; tr->t[i].builtin && !strcmp(tr->t[i].cb.name, "jsonl") && k < n; k++)
      if (!strcmp(values[k].key, "step") || !strcmp(values[k].key, "time"))
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "acc_tracker_log: \"%s\" is a field of every run.jsonl record (the step and the wall "
                          "time); give the metric another name (e.g. \"%s\")", values[k].key,
                          values[k].key[0] == 's' ? "global_step" : "time_per_step");
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
