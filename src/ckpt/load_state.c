/* acc_accelerator_load_state: a checkpoint written by save_state.c checked against what is
 * prepared now (counts, process count, file contents), then restored: model, optimizers,
 * schedulers, GradScaler, objects registered for checkpointing, and each process's RNG,
 * accumulation step and data loader positions (mapped when the number of processes changed). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/accel_state.h"
#include "ckpt/psgd_state.h"
#include "ckpt/load_defer.h"
#include "ckpt/load_snapshot.h"
#include "core/fs.h"
#include "core/json_util.h"
#include "core/log.h"
#include "data/data_internal.h"
#include "train/train.h"

/* Upper bound of a restored counter (step, epoch, batches): far beyond any run, and far enough
 * from INT64_MAX that the counters can be advanced without overflowing. */
#define MAX_COUNTER ((int64_t)1 << 53)

static acc_result read_json(const char *path, json_t **out) {
  json_error_t err;
  ACC_CHECK(acc__json_load_regular(path, "checkpoint file", 0, out, &err));
  if (!*out) {
    if (!acc__is_file(path))
      return acc__error(ACC_ERR_FORMAT, "checkpoint file '%s' is missing", path);
    return acc__error(ACC_ERR_FORMAT, "checkpoint file '%s' is not valid JSON (line %d: %s)", path, err.line,
                      err.text);
  }
  if (!json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return acc__error(ACC_ERR_FORMAT, "checkpoint file '%s' must hold a JSON object", path);
  }
  return ACC_OK;
}

static acc_result get_num(const json_t *o, const char *path, const char *key, double *v) {
  json_t *x = json_object_get(o, key);
  if (!json_is_number(x))
    return acc__error(ACC_ERR_FORMAT, "checkpoint file '%s': key \"%s\" is missing or not a number", path, key);
  *v = json_number_value(x);
  return ACC_OK;
}

static acc_result get_int(const json_t *o, const char *path, const char *key, int64_t *v) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x))
    return acc__error(ACC_ERR_FORMAT, "checkpoint file '%s': key \"%s\" is missing or not an integer", path, key);
  *v = (int64_t)json_integer_value(x);
  return ACC_OK;
}

static int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static int hex_decode(const char *s, uint8_t *out, size_t n) {
  if (strlen(s) != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi * 16 + lo);
  }
  return 0;
}

static acc_result expect_count(const json_t *meta, const char *path, const char *key, int current,
                               const char *what) {
  int64_t saved = 0;
  ACC_CHECK(get_int(meta, path, key, &saved));
  if (saved != current)
    return acc__error(ACC_ERR_MISMATCH,
                      "checkpoint '%s' holds %lld %s but %d %s prepared now: prepare the same objects, in the "
                      "same order, before load_state", path, (long long)saved, what, current,
                      current == 1 ? "is" : "are");
  return ACC_OK;
}

/* What a resume on another number of processes changed, for the one line process 0 logs. */
typedef struct remap_note {
  int64_t saved_np; /* processes that saved the checkpoint */
  int saved_psgd;   /* checkpoint.json's "powersgd": models saved with PowerSGD state */
  int said_per_process; /* the line already said that batches are counted per process */
  char text[1536];
} remap_note;

static void note_add(remap_note *n, const char *fmt, ...) ACC_PRINTF(2, 3);
static void note_add(remap_note *n, const char *fmt, ...) {
  size_t len = strlen(n->text);
  if (len + 1 >= sizeof n->text) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(n->text + len, sizeof n->text - len, fmt, ap);
  va_end(ap);
}

static acc_result check_meta(acc__accel_parts *p, const char *dir, remap_note *note) {
  char *path = acc__path_join(dir, "checkpoint.json");
  if (!path) return ACC_ERR_NOMEM;
  json_t *m = NULL;
  acc_result rc = read_json(path, &m);
  if (rc == ACC_OK) {
    const char *fmt = json_string_value(json_object_get(m, "format"));
    int64_t version = 0, nprocs = 0;
    if (!fmt || strcmp(fmt, ACC__STATE_FORMAT) != 0)
      rc = acc__error(ACC_ERR_FORMAT, "'%s' is not an accelerate-c training state (format \"%s\")", path,
                      fmt ? fmt : "missing");
    if (rc == ACC_OK) rc = get_int(m, path, "version", &version);
    if (rc == ACC_OK && version != ACC__STATE_VERSION)
      rc = acc__error(ACC_ERR_FORMAT, "'%s' has state version %lld; this library reads version %d", path,
                      (long long)version, ACC__STATE_VERSION);
    if (rc == ACC_OK) rc = get_int(m, path, "num_processes", &nprocs);
    int now = acc_state_num_processes(p->st);
    acc__accel_ckpt *c = *p->ckpt;
    if (rc == ACC_OK && (nprocs < 1 || nprocs > 1 << 20))
      rc = acc__error(ACC_ERR_FORMAT, "'%s': \"num_processes\" is %lld (expected 1..%d)", path, (long long)nprocs,
                      1 << 20);
    if (rc == ACC_OK && nprocs != now && c && c->strict_processes)
      rc = acc__error(ACC_ERR_MISMATCH,
                      "checkpoint '%s' was saved by %lld processes but %d %s running now, and a strict process "
                      "count is set (acc_accelerator_set_strict_process_count): resume with --num_processes %lld",
                      dir, (long long)nprocs, now, now == 1 ? "is" : "are", (long long)nprocs);
    if (rc == ACC_OK) note->saved_np = nprocs;
    json_t *ps = json_object_get(m, "powersgd"); /* absent before the hook's state was saved */
    if (rc == ACC_OK && ps && (!json_is_integer(ps) || json_integer_value(ps) < 0 ||
                               json_integer_value(ps) > ACC__MAX_PREPARED))
      rc = acc__error(ACC_ERR_FORMAT, "'%s': \"powersgd\" must be an integer 0..%d", path, ACC__MAX_PREPARED);
    if (rc == ACC_OK) note->saved_psgd = ps ? (int)json_integer_value(ps) : 0;
    if (rc == ACC_OK) rc = expect_count(m, path, "models", p->nmodels, "model(s)");
    if (rc == ACC_OK) rc = expect_count(m, path, "optimizers", p->nopts, "optimizer(s)");
    if (rc == ACC_OK) rc = expect_count(m, path, "schedulers", p->nscheds, "scheduler(s)");
    if (rc == ACC_OK) rc = expect_count(m, path, "dataloaders", p->nloaders, "data loader(s)");
    if (rc == ACC_OK) {
      int64_t saved = 0;
      rc = get_int(m, path, "custom_objects", &saved);
      int now_c = c ? c->ncustom : 0;
      if (rc == ACC_OK && saved != now_c)
        rc = acc__error(ACC_ERR_MISMATCH,
                        "number of custom checkpoints in folder '%s' does not match the number of registered "
                        "objects: found checkpoints: %lld, registered objects: %d", dir, (long long)saved, now_c);
    }
    if (rc == ACC_OK) {
      int saved_scaler = json_is_true(json_object_get(m, "grad_scaler"));
      if (saved_scaler != (p->scaler != NULL))
        rc = acc__error(ACC_ERR_MISMATCH,
                        "checkpoint '%s' was saved %s a GradScaler (fp16) but the accelerator %s one now: use "
                        "the same mixed precision", dir, saved_scaler ? "with" : "without",
                        p->scaler ? "has" : "has no");
    }
  }
  json_decref(m);
  acc__free(path);
  return rc;
}

/* Every state tensor the optimizer has must be in the file (SGD before its first step: all or
 * none), or the resume would silently continue from other state. */
static acc_result check_optimizer_tensors(const acc_optimizer *o, const acc_safetensors *f, const char *path, int i,
                                          int required) {
  const acc_model *m = acc_optimizer_model(o);
  size_t missing = 0, expected = 0;
  const char *first = NULL;
  for (size_t k = 0; k < acc_model_num_parameters(m); k++)
    for (int b = 0; acc__optimizer_param_group(o, k) >= 0 && acc__optimizer_state_name(o, k, b); b++) {
      acc_tensor_view tv;
      const char *name = acc__optimizer_state_name(o, k, b);
      expected++;
      if (acc_safetensors_find(f, name, &tv) == ACC_OK) continue;
      if (!first) first = name;
      missing++;
    }
  if (missing && required)
    return acc__error(ACC_ERR_FORMAT,
                      "'%s': optimizer %d state tensor '%s' is missing (%zu of the %zu state tensors this optimizer "
                      "has are not in the file): the checkpoint is incomplete or from another model", path, i, first,
                      missing, expected);
  return ACC_OK;
}

static acc_result load_optimizer(acc_optimizer *o, const char *dir, int i, acc__defer *d) {
  char *path = acc__state_file_name(dir, "optimizer", i, ".json");
  if (!path) return ACC_ERR_NOMEM;
  json_t *j = NULL;
  acc_result rc = read_json(path, &j);
  /* "kind" first: it checks the optimizer type before anything else changes. */
  if (rc == ACC_OK) {
    double kind = 0;
    rc = get_num(j, path, "kind", &kind);
    if (rc == ACC_OK) rc = acc_optimizer_scalar_set(o, "kind", kind);
    if (rc != ACC_OK) rc = acc__error_context(rc, "load_state: optimizer %d from '%s'", i, path);
  }
  /* Every scalar must be in the file: a missing one would silently keep the current value. */
  for (size_t k = 0; rc == ACC_OK && k < acc_optimizer_scalar_count(o); k++) {
    const char *name = NULL;
    rc = acc_optimizer_scalar_get(o, k, &name, NULL);
    if (rc == ACC_OK && !json_object_get(j, name))
      rc = acc__error(ACC_ERR_FORMAT, "checkpoint file '%s': key \"%s\" is missing (optimizer %d has %zu scalars)",
                      path, name, i, acc_optimizer_scalar_count(o));
  }
  if (rc == ACC_OK) {
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
      if (!strcmp(key, "kind")) continue;
      if (!json_is_number(v)) {
        rc = acc__error(ACC_ERR_FORMAT, "checkpoint file '%s': \"%s\" is not a number", path, key);
        break;
      }
      rc = acc_optimizer_scalar_set(o, key, json_number_value(v));
      if (rc != ACC_OK) {
        rc = acc__error_context(rc, "load_state: optimizer %d scalar \"%s\" from '%s'", i, key, path);
        break;
      }
    }
  }
  /* AdamW's buffers exist from creation; SGD's momentum buffers after the first step. */
  double kind = json_number_value(json_object_get(j, "kind")), step = json_number_value(json_object_get(j, "step"));
  const int all_required = kind == 1 || (step > 0 && json_number_value(json_object_get(j, "momentum")) != 0);
  json_decref(j);
  acc__free(path);
  if (rc != ACC_OK) return rc;
  path = acc__state_file_name(dir, "optimizer", i, ".safetensors");
  if (!path) return ACC_ERR_NOMEM;
  /* The tensors are checked and recorded; load_state reads them in once every process agreed. */
  acc_safetensors *f = NULL;
  rc = acc__safetensors_open_fd(&f, path);
  if (rc == ACC_OK) rc = acc__defer_adopt(d, f); /* d closes it */
  size_t n = rc == ACC_OK ? acc_safetensors_count(f) : 0;
  if (rc == ACC_OK) rc = check_optimizer_tensors(o, f, path, i, all_required || n > 0);
  if (rc == ACC_OK) rc = acc__defer_optimizer(d, o, f, path, i);
  acc__free(path);
  return rc;
}

static acc_result load_custom(const acc__custom_obj *c, const char *dir, int i) {
  char name[64];
  snprintf(name, sizeof name, "custom_checkpoint_%d.bin", i);
  char *path = acc__path_join(dir, name);
  if (!path) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  int fd = -1;
  struct stat sb;
  void *buf = NULL;
  size_t len = 0;
  rc = acc__open_regular(path, "load_state: custom object file", &fd, &sb);
  /* The size is checked before anything is allocated: a huge (or sparse) file is refused. */
  if (rc == ACC_OK && (uint64_t)sb.st_size > c->max_bytes)
    rc = acc__error(ACC_ERR_FORMAT,
                    "load_state: '%s' is %lld bytes, over the limit of %llu bytes registered for object %d", path,
                    (long long)sb.st_size, (unsigned long long)c->max_bytes, i);
  if (rc == ACC_OK) {
    len = (size_t)sb.st_size;
    buf = acc__tmp_alloc(len ? len : 1);
    if (!buf) rc = ACC_ERR_NOMEM;
  }
  for (size_t got = 0; rc == ACC_OK && got < len;) {
    ssize_t r = read(fd, (char *)buf + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      rc = acc__error(ACC_ERR_IO, "load_state: could not read %zu bytes from '%s': %s", len, path,
                      r < 0 ? strerror(errno) : "the file is shorter than it was");
      break;
    }
    got += (size_t)r;
  }
  if (fd >= 0) close(fd);
  if (rc == ACC_OK) {
    acc_clear_error();
    rc = c->load(c->obj, buf, len);
    if (rc != ACC_OK)
      rc = acc__callback_result(rc, "load_state: the load callback of registered object %d ('%s')", i, path);
  }
  acc__tmp_free(buf);
  acc__free(path);
  return rc;
}

/* Process `rank` of the M running now restores from random_states_<src>.json: its own when the
 * checkpoint has it (rank < N, the processes that saved), else process 0's (rank >= N). */
static acc_result load_process(acc__accel_parts *p, const char *dir, remap_note *note) {
  const int rank = acc_state_process_index(p->st), now = acc_state_num_processes(p->st);
  const int64_t saved_np = note->saved_np;
  const int remap = saved_np != now;
  const int src = rank < saved_np ? rank : 0;
  char name[64];
  snprintf(name, sizeof name, "random_states_%d.json", src);
  char *path = acc__path_join(dir, name);
  if (!path) return ACC_ERR_NOMEM;
  json_t *j = NULL;
  acc_result rc = read_json(path, &j);
  int64_t step = 0, idx = -1;
  uint8_t rng[ACC_RNG_STATE_SIZE];
  if (rc == ACC_OK) rc = get_int(j, path, "process_index", &idx);
  if (rc == ACC_OK && idx != src)
    rc = acc__error(ACC_ERR_FORMAT, "'%s' holds the state of process %lld, not %d", path, (long long)idx, src);
  if (rc == ACC_OK) rc = get_int(j, path, "step", &step);
  if (rc == ACC_OK && (step < 0 || step > MAX_COUNTER))
    rc = acc__error(ACC_ERR_FORMAT, "'%s': \"step\" is %lld (expected 0..%lld)", path, (long long)step,
                    (long long)MAX_COUNTER);
  if (rc == ACC_OK) {
    const char *hex = json_string_value(json_object_get(j, "rng"));
    if (!hex || hex_decode(hex, rng, sizeof rng) != 0)
      rc = acc__error(ACC_ERR_FORMAT, "'%s': \"rng\" must be %d hexadecimal digits", path, 2 * ACC_RNG_STATE_SIZE);
  }
  json_t *loaders = rc == ACC_OK ? json_object_get(j, "dataloaders") : NULL;
  if (rc == ACC_OK && (!json_is_array(loaders) || json_array_size(loaders) != (size_t)p->nloaders))
    rc = acc__error(ACC_ERR_MISMATCH, "'%s' holds %zu data loader positions but %d loader(s) are prepared", path,
                    json_is_array(loaders) ? json_array_size(loaders) : 0, p->nloaders);
  acc_dataloader_state *ds = NULL;
  if (rc == ACC_OK && p->nloaders) {
    ds = acc__calloc((size_t)p->nloaders, sizeof *ds);
    if (!ds) rc = ACC_ERR_NOMEM;
  }
  for (int i = 0; i < p->nloaders && rc == ACC_OK; i++) {
    json_t *l = json_array_get(loaders, (size_t)i);
    const char *seed = json_string_value(json_object_get(l, "seed"));
    char *end = NULL;
    errno = 0;
    /* digits only: strtoull would accept "-1" (wrapping to 2^64-1) and leading blanks */
    ds[i].seed = seed && *seed >= '0' && *seed <= '9' ? strtoull(seed, &end, 10) : 0;
    if (!seed || !(*seed >= '0' && *seed <= '9') || *end || errno)
      rc = acc__error(ACC_ERR_FORMAT, "'%s': data loader %d: \"seed\" must be a string of decimal digits "
                      "(0..18446744073709551615), got %s%s%s", path, i, seed ? "\"" : "", seed ? seed : "none",
                      seed ? "\"" : "");
    if (rc == ACC_OK) rc = get_int(l, path, "epoch", &ds[i].epoch);
    if (rc == ACC_OK && (ds[i].epoch < 0 || ds[i].epoch > MAX_COUNTER))
      rc = acc__error(ACC_ERR_FORMAT, "'%s': data loader %d: \"epoch\" is %lld (expected 0..%lld)", path, i,
                      (long long)ds[i].epoch, (long long)MAX_COUNTER);
    if (rc == ACC_OK) rc = get_int(l, path, "batches", &ds[i].batches);
    if (rc == ACC_OK && (ds[i].batches < 0 || ds[i].batches > MAX_COUNTER))
      rc = acc__error(ACC_ERR_FORMAT, "'%s': data loader %d: \"batches\" is %lld (expected 0..%lld)", path, i,
                      (long long)ds[i].batches, (long long)MAX_COUNTER);
    if (rc != ACC_OK || !remap) continue;
    /* Another number of processes: keep the global position in the epoch. The processes
     * together consumed batches x round_units samples of the epoch's order (the order does not
     * depend on the number of processes); the new layout consumes round_units_now per batch, so
     * it continues at the last full round at or before that position (rounding down: nothing is
     * skipped, the rest of the position is seen a second time). */
    json_t *ru = json_object_get(l, "round_units");
    const int64_t now_ru = acc__dataloader_round_units(p->loaders[i]);
    if (!ru)
      rc = acc__error(ACC_ERR_FORMAT, "'%s': data loader %d has no \"round_units\" (a checkpoint written before "
                      "resuming on another number of processes was supported): resume it with --num_processes %lld",
                      path, i, (long long)saved_np);
    else if (!json_is_integer(ru) || json_integer_value(ru) < 1 || json_integer_value(ru) > MAX_COUNTER)
      rc = acc__error(ACC_ERR_FORMAT, "'%s': data loader %d: \"round_units\" must be an integer 1..%lld", path, i,
                      (long long)MAX_COUNTER);
    if (rc != ACC_OK) continue;
    const int64_t saved_ru = (int64_t)json_integer_value(ru);
    if (ds[i].batches > MAX_COUNTER / saved_ru)
      rc = acc__error(ACC_ERR_FORMAT, "'%s': data loader %d: batches %lld x round_units %lld is out of range",
                      path, i, (long long)ds[i].batches, (long long)saved_ru);
    if (rc != ACC_OK) continue;
    int64_t global = ds[i].batches * saved_ru, nb = global / now_ru, again = global - nb * now_ru;
    int64_t len = acc__dataloader_full_len(p->loaders[i]);
    if (len >= 0 && nb > len) { /* saved at the very end of the epoch (a padded last round) */
      nb = len;
      again = 0;
    }
    if (rank == 0) {
      /* "per process" once in the line, the rest in samples of the epoch (list batches for a
       * loader over a list of batches) */
      note_add(note, "%sdata loader %d resumes epoch %lld after %lld batch%s%s (the %lld processes that saved had "
               "read %lld each): ", i ? "; " : "", i, (long long)ds[i].epoch, (long long)nb, nb == 1 ? "" : "es",
               note->said_per_process ? "" : " per process", (long long)saved_np, (long long)ds[i].batches);
      note->said_per_process = 1;
      if (nb * now_ru == global)
        note_add(note, "the same %lld samples of the epoch as saved", (long long)global);
      else
        note_add(note, "%lld of the %lld samples read before the save, so the last %lld are read again",
                 (long long)(nb * now_ru), (long long)global, (long long)again);
    }
    ds[i].batches = nb;
  }
  if (rc == ACC_OK && remap && rank >= saved_np) {
    /* No saved generator for this process: one derived from process 0's state and the rank. */
    acc_rng base;
    rc = acc_rng_state_set(&base, rng, sizeof rng);
    if (rc == ACC_OK) {
      acc_rng derived;
      acc_rng_seed(&derived, acc_rng_u64(&base) ^ (0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1)));
      acc_rng_state_get(&derived, rng);
    }
  }
  if (rc == ACC_OK && remap && rank == 0) {
    const char *sep = p->nloaders ? "; " : "";
    char range[64];
    const int64_t lo = now < saved_np ? now : saved_np, hi = (now < saved_np ? saved_np : now) - 1;
    if (lo == hi)
      snprintf(range, sizeof range, "process %lld", (long long)lo);
    else
      snprintf(range, sizeof range, "processes %lld..%lld", (long long)lo, (long long)hi);
    if (now < saved_np)
      note_add(note, "%sthe RNG state of %s dropped (processes 0..%d keep their own)", sep, range, now - 1);
    else
      note_add(note, "%s%s got RNG states derived from process 0's (processes 0..%lld keep their own)", sep,
               range, (long long)saved_np - 1);
  }
  /* Everything parsed: now change the state. */
  if (rc == ACC_OK) rc = acc_rng_state_set(acc_rng_global(), rng, sizeof rng);
  for (int i = 0; i < p->nloaders && rc == ACC_OK; i++) rc = acc_dataloader_state_set(p->loaders[i], &ds[i]);
  if (rc == ACC_OK) *p->step = step;
  acc__free(ds);
  json_decref(j);
  acc__free(path);
  return rc;
}

/* Every process restored its own position (random_states_<p>.json): they must agree on the
 * accumulation step and on every loader's seed, epoch and batch, or the processes would make
 * different collectives from here on. One small all-gather; a disagreement is the same
 * ACC_ERR_MISMATCH on every process, naming the file that differs from process 0's. */
static acc_result check_positions(acc__accel_parts *p, const char *dir) {
  int n = acc_state_num_processes(p->st);
  size_t per = 1 + 3 * (size_t)p->nloaders;
  int64_t *mine = acc__calloc(per, sizeof *mine), *all = acc__calloc(per * (size_t)n, sizeof *all);
  acc_result rc = mine && all ? ACC_OK : ACC_ERR_NOMEM;
  if (rc == ACC_OK) {
    mine[0] = *p->step;
    for (int i = 0; i < p->nloaders && rc == ACC_OK; i++) {
      acc_dataloader_state ds;
      memset(&ds, 0, sizeof ds);
      rc = acc_dataloader_state_get(p->loaders[i], &ds);
      mine[1 + 3 * i] = (int64_t)ds.seed;
      mine[2 + 3 * i] = ds.epoch;
      mine[3 + 3 * i] = ds.batches;
    }
  }
  rc = acc__state_agree(p->st, rc, "load_state (checking the restored positions)");
  if (rc == ACC_OK) rc = acc_all_gather(p->st, mine, all, per, ACC_I64);
  for (int r = 1; r < n && rc == ACC_OK; r++) {
    const int64_t *a = all, *b = all + (size_t)r * per;
    if (a[0] != b[0]) {
      rc = acc__error(ACC_ERR_MISMATCH,
                      "load_state: '%s/random_states_%d.json' restores accumulation step %lld but "
                      "random_states_0.json restores %lld: the per-process files are from different saves or "
                      "corrupt", dir, r, (long long)b[0], (long long)a[0]);
      break;
    }
    for (int i = 0; i < p->nloaders; i++) {
      const int64_t *x = a + 1 + 3 * i, *y = b + 1 + 3 * i;
      if (x[0] != y[0] || x[1] != y[1] || x[2] != y[2]) {
        rc = acc__error(ACC_ERR_MISMATCH,
                        "load_state: '%s/random_states_%d.json' restores data loader %d at (seed %llu, epoch %lld, "
                        "batch %lld) but random_states_0.json at (seed %llu, epoch %lld, batch %lld): the "
                        "per-process files are from different saves or corrupt", dir, r, i,
                        (unsigned long long)y[0], (long long)y[1], (long long)y[2], (unsigned long long)x[0],
                        (long long)x[1], (long long)x[2]);
        break;
      }
    }
  }
  acc__free(mine);
  acc__free(all);
  return rc;
}

static acc_result load_all(acc__accel_parts *p, const char *dir, remap_note *note, acc__defer *d,
                           acc__psgd_staged *psgd) {
  ACC_CHECK(check_meta(p, dir, note));
  for (int i = 0; i < p->nmodels; i++) {
    char *path = acc__state_file_name(dir, "model", i, ".safetensors");
    if (!path) return ACC_ERR_NOMEM;
    /* a model in host memory is read in after the agreement; one in device memory now (the
     * snapshot puts it back) */
    acc_result rc = acc__defer_model_on_host(p->models[i]) ? acc__load_model_deferred(p->models[i], path, d)
                                                           : acc_load_checkpoint_in_model(p->models[i], path, NULL, NULL);
    acc__free(path);
    if (rc != ACC_OK && p->nmodels == 1) return acc__error_context(rc, "load_state: the model");
    if (rc != ACC_OK) return acc__error_context(rc, "load_state: prepared model %d", i);
  }
  for (int i = 0; i < p->nopts; i++) ACC_CHECK(load_optimizer(p->opts[i], dir, i, d));
  for (int i = 0; i < p->nscheds; i++) {
    char *path = acc__state_file_name(dir, "scheduler", i, ".json");
    if (!path) return ACC_ERR_NOMEM;
    json_t *j = NULL;
    int64_t step = 0;
    double base = 0;
    acc_result rc = read_json(path, &j);
    if (rc == ACC_OK) rc = get_int(j, path, "step", &step);
    if (rc == ACC_OK && step < 0)
      rc = acc__error(ACC_ERR_FORMAT, "checkpoint file '%s': \"step\" is %lld (must be >= 0)", path, (long long)step);
    if (rc == ACC_OK) rc = get_num(j, path, "base_lr", &base);
    size_t ng = acc_scheduler_group_count(p->scheds[i]);
    json_t *bases = rc == ACC_OK ? json_object_get(j, "base_lrs") : NULL;
    if (rc == ACC_OK && (bases || ng > 1) && (!json_is_array(bases) || json_array_size(bases) != ng))
      rc = acc__error(ACC_ERR_MISMATCH,
                      "checkpoint file '%s': \"base_lrs\" must be an array of %zu numbers (one per parameter group "
                      "of the optimizer), got %s of %zu", path, ng, json_is_array(bases) ? "an array" : "no array",
                      json_is_array(bases) ? json_array_size(bases) : (size_t)0);
    for (size_t g = 0; rc == ACC_OK && bases && g < ng; g++) {
      json_t *b = json_array_get(bases, g);
      if (!json_is_number(b))
        rc = acc__error(ACC_ERR_FORMAT, "checkpoint file '%s': \"base_lrs\"[%zu] is not a number", path, g);
      else if (g > 0)
        rc = acc_scheduler_set_group_base_lr(p->scheds[i], g, json_number_value(b));
    }
    if (rc == ACC_OK) rc = acc_scheduler_set_state(p->scheds[i], step, base);
    if (rc != ACC_OK && !strstr(acc_last_error(), path))
      rc = acc__error_context(rc, "load_state: scheduler %d from '%s'", i, path);
    json_decref(j);
    acc__free(path);
    ACC_CHECK(rc);
  }
  if (p->scaler) {
    char *path = acc__path_join(dir, "scaler.json");
    if (!path) return ACC_ERR_NOMEM;
    json_t *j = NULL;
    double scale = 0;
    int64_t tracker = 0;
    acc_result rc = read_json(path, &j);
    if (rc == ACC_OK) rc = get_num(j, path, "scale", &scale);
    if (rc == ACC_OK) rc = get_int(j, path, "growth_tracker", &tracker);
    if (rc == ACC_OK) rc = acc_grad_scaler_set_state(p->scaler, (float)scale, tracker);
    json_decref(j);
    acc__free(path);
    ACC_CHECK(rc);
  }
  acc__accel_ckpt *c = *p->ckpt;
  for (int i = 0; c && i < c->ncustom; i++) ACC_CHECK(load_custom(&c->custom[i], dir, i));
  ACC_CHECK(load_process(p, dir, note));
  /* the comm hook's state, staged: swapped in once every process agreed */
  ACC_CHECK(acc__psgd_state_stage(p, dir, note->saved_np, note->saved_psgd, psgd));
  /* last: the program's buffers and per-process objects its pre-hook staged (own_state.c) */
  return acc__own_state_commit(c);
}

static acc_result load_state_body(acc_accelerator *acc, const char *input_dir, char **loaded_dir) {
  if (loaded_dir) *loaded_dir = NULL;
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc_project_config *proj = NULL;
  acc_result rc = acc__accel_ckpt_project(&p, &proj);
  char dir[ACC__STATE_PATH_BUF];
  memset(dir, 0, sizeof dir);
  if (rc == ACC_OK && acc_state_process_index(p.st) == 0) {
    char *d = NULL;
    rc = acc_project_resolve_load(proj, input_dir, &d);
    if (rc == ACC_OK && strlen(d) >= ACC__STATE_PATH_BUF)
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "load_state: checkpoint path '%s' is too long", d);
    if (rc == ACC_OK) strcpy(dir, d);
    acc_free(d);
  }
  if (rc != ACC_OK) dir[0] = 0; /* an empty path tells the others not to run the hooks */
  /* The path goes out first; the pre-hooks run on every process before anything is read, and
   * their results travel with the checkpoint lookup's in one agreement: a failing hook leaves
   * every process's state untouched. */
  acc_result bc = acc__state_bcast_path(p.st, dir);
  if (bc != ACC_OK) return rc != ACC_OK ? rc : bc;
  if (rc == ACC_OK && dir[0]) rc = acc__accel_ckpt_run_hooks(acc, *p.ckpt, 1, dir);
  rc = acc__state_agree(p.st, rc, "load_state (finding the checkpoint and running the pre-hooks)");
  if (rc != ACC_OK) {
    acc__own_state_release(*p.ckpt);
    acc__zero_bufs_release(*p.ckpt);
    return rc;
  }
  remap_note note;
  memset(&note, 0, sizeof note);
  /* Everything load_state may change is copied first and put back if any process fails, so a
   * failed load leaves the prepared objects exactly as they were. */
  acc__load_snapshot *snap = NULL;
  acc__defer *defer = NULL; /* the model and optimizer tensors, read in once everything agreed */
  rc = acc__defer_new(&defer);
  if (rc == ACC_OK) rc = acc__load_snapshot_take(&p, &snap);
  acc__psgd_staged psgd;
  memset(&psgd, 0, sizeof psgd);
  acc_result lrc = rc == ACC_OK ? load_all(&p, dir, &note, defer, &psgd) : rc;
  int own_committed = lrc == ACC_OK; /* a failed commit put the program's state back itself */
  rc = acc__state_agree(p.st, lrc, "load_state");
  if (rc == ACC_OK) rc = check_positions(&p, dir);
  if (rc != ACC_OK && own_committed) acc__own_state_rollback(*p.ckpt);
  if (rc != ACC_OK && snap) acc__load_snapshot_restore(snap, &p);
  acc__load_snapshot_free(snap, &p);
  if (rc == ACC_OK) { /* nothing can be put back from here on: the files changed under us if this fails */
    rc = acc__defer_commit(defer);
    if (rc == ACC_OK) rc = acc__own_state_read_in(*p.ckpt);
    if (rc == ACC_OK) rc = acc__zero_bufs_commit(*p.ckpt); /* the program's sharded buffers */
    rc = acc__state_agree(p.st, rc, "load_state (reading the model, optimizer and program tensors)");
  }
  acc__own_state_release(*p.ckpt);
  acc__zero_bufs_release(*p.ckpt);
  acc__defer_free(defer);
  if (rc == ACC_OK) acc__psgd_state_commit(&p, &psgd, dir, note.saved_np);
  acc__psgd_staged_release(&psgd);
  if (rc != ACC_OK) return rc;
  if (note.saved_np != acc_state_num_processes(p.st))
    acc__log(ACC_LOG_WARNING, "load_state: resumed a %lld-process checkpoint '%s' on %d process%s: %s; model, "
             "optimizer, scheduler and scaler states loaded as saved", (long long)note.saved_np, dir,
             acc_state_num_processes(p.st), acc_state_num_processes(p.st) == 1 ? "" : "es", note.text);
  /* The low-precision copy computes the next forward passes: it must hold the loaded weights. */
  ACC_CHECK(acc_accelerator_refresh_low_precision(acc));
  ACC_CHECK(acc_project_checkpoint_loaded(proj, dir)); /* the next save continues after it */
  if (loaded_dir) {
    *loaded_dir = acc__strdup(dir);
    if (!*loaded_dir) return ACC_ERR_NOMEM;
  }
  return ACC_OK;
}

/* ZeRO stage 1: the optimizer state is gathered to full tensors around the load (the files are
 * the same as without ZeRO), then each process keeps its shard of what was loaded. */
acc_result acc_accelerator_load_state(acc_accelerator *acc, const char *input_dir, char **loaded_dir) {
  if (loaded_dir) *loaded_dir = NULL;
  ACC_CHECK(acc__accelerator_zero_unshard(acc));
  acc_result rc = load_state_body(acc, input_dir, loaded_dir);
  if (rc == ACC_OK) rc = acc__dev_state_from_host(acc); /* optimizer state in device memory */
  acc_result r2 = acc__accelerator_zero_reshard(acc);
  return rc != ACC_OK ? rc : r2;
}
