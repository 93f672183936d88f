/* save_state / load_state of the whole training state: model, optimizers,
 * schedulers, GradScaler, per-process RNG + accumulation step + data loader positions, and
 * objects registered for checkpointing, in a crash-safe checkpoint directory (ckpt_dir.c). */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/accel_state.h"
#include "core/profile.h"
#include "ckpt/ckpt_dir.h"
#include "core/json_util.h"
#include "backend/collcheck.h"
#include "data/data_internal.h"
#include "train/train.h"
#include "core/log.h"

#define STATE_FORMAT "accelerate-c-state"
#define STATE_VERSION 1
#define PATH_BUF 4096
/* Upper bound of a restored counter (step, epoch, batches): far beyond any run, and far enough
 * from INT64_MAX that the counters can be advanced without overflowing. */
#define MAX_COUNTER ((int64_t)1 << 53)

typedef struct custom_obj {
  void *obj;
  acc_checkpoint_save_fn save;
  acc_checkpoint_load_fn load;
  uint64_t max_bytes; /* a larger custom_checkpoint_<i>.bin is refused before it is read */
} custom_obj;

typedef struct state_hook {
  uint64_t id;
  int load; /* 0: save_state pre-hook, 1: load_state pre-hook */
  acc_state_hook_fn fn;
  void *payload;
  char name[64];
} state_hook;

struct acc__accel_ckpt {
  acc_project_config *project;
  state_hook *hooks; /* in registration order */
  int nhooks, hooks_cap;
  uint64_t next_hook_id; /* the last id issued */
  int in_hook;           /* a hook is running: registering or removing hooks is refused */
  int automatic;   /* the project uses automatic checkpoint naming */
  int total_limit; /* > 0: keep this many checkpoints; pruned after a commit, not before */
  custom_obj *custom;
  int ncustom, cap;
  int strict_processes; /* refuse a checkpoint saved by another number of processes */
};

void acc__accel_ckpt_free(acc__accel_ckpt *c) {
  if (!c) return;
  acc_project_config_destroy(c->project);
  acc__free(c->custom);
  acc__free(c->hooks);
  acc__free(c);
}

static acc_result get_ckpt(acc__accel_parts *p, acc__accel_ckpt **out) {
  if (!*p->ckpt) {
    *p->ckpt = acc__calloc(1, sizeof **p->ckpt);
    if (!*p->ckpt) return ACC_ERR_NOMEM;
    *p->ckpt_free = acc__accel_ckpt_free; /* the accelerator frees it with itself */
  }
  *out = *p->ckpt;
  return ACC_OK;
}

/* The project configuration; a default one (project_dir ".", explicit directories) when unset. */
static acc_result get_project(acc__accel_parts *p, acc_project_config **out) {
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(p, &c));
  if (!c->project) ACC_CHECK(acc_project_config_create(&c->project, NULL));
  *out = c->project;
  return ACC_OK;
}

acc_result acc_accelerator_set_project_config(acc_accelerator *acc, const acc_project_options *opts) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  acc_project_config *np;
  /* The project handle gets no total_limit: acc_checkpoint_begin would prune before the new
   * checkpoint is durable (with total_limit 1 a crash would leave none). We prune after. */
  acc_project_options o = ACC_PROJECT_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_project_options, ACC_PROJECT_OPTIONS_VERSION, "set_project_config");
  int limit = o.total_limit;
  o.total_limit = 0;
  ACC_CHECK(acc_project_config_create(&np, &o));
  if (limit < ACC_UNSET) {
    acc_project_config_destroy(np);
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "set_project_config: total_limit is %d (must be > 0, or 0 / ACC_UNSET for no limit)", limit);
  }
  acc_project_config_destroy(c->project);
  c->project = np;
  c->automatic = o.automatic_checkpoint_naming != 0;
  c->total_limit = limit > 0 ? limit : 0;
  return ACC_OK;
}

acc_project_config *acc_accelerator_project_config(const acc_accelerator *acc) {
  acc__accel_ckpt *c = acc__accelerator_ckpt(acc);
  return c ? c->project : NULL;
}

acc_result acc_accelerator_set_strict_process_count(acc_accelerator *acc, int strict) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  c->strict_processes = strict != 0;
  return ACC_OK;
}

acc_result acc_accelerator_register_for_checkpointing(acc_accelerator *acc, void *obj, acc_checkpoint_save_fn save,
                                                      acc_checkpoint_load_fn load) {
  return acc_accelerator_register_for_checkpointing_limit(acc, obj, save, load,
                                                          ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT);
}

acc_result acc_accelerator_register_for_checkpointing_limit(acc_accelerator *acc, void *obj,
                                                            acc_checkpoint_save_fn save,
                                                            acc_checkpoint_load_fn load, uint64_t max_bytes) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  if (!save || !load)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "register_for_checkpointing: an object needs both a save and a load callback to be "
                      "stored (got save %s, load %s)", save ? "set" : "NULL", load ? "set" : "NULL");
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  if (c->ncustom == c->cap) {
    int nc = c->cap ? c->cap * 2 : 4;
    custom_obj *v = acc__realloc(c->custom, (size_t)nc * sizeof *v);
    if (!v) return ACC_ERR_NOMEM;
    c->custom = v;
    c->cap = nc;
  }
  c->custom[c->ncustom++] = (custom_obj){obj, save, load, max_bytes};
  return ACC_OK;
}

/* ---- save / load pre-hooks -------------------------------------------------------------------- */

static acc_result register_hook(acc_accelerator *acc, int load, acc_state_hook_fn fn, void *payload, const char *name,
                                uint64_t *id) {
  const char *what = load ? "register_load_state_pre_hook" : "register_save_state_pre_hook";
  if (id) *id = 0;
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  if (!fn) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the hook function is NULL", what);
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  if (c->in_hook) return acc__error(ACC_ERR_INVALID_USAGE, "%s: called from inside a save/load pre-hook", what);
  if (c->nhooks == c->hooks_cap) {
    int nc = c->hooks_cap ? c->hooks_cap * 2 : 4;
    state_hook *v = acc__realloc(c->hooks, (size_t)nc * sizeof *v);
    if (!v) return ACC_ERR_NOMEM;
    c->hooks = v;
    c->hooks_cap = nc;
  }
  state_hook *h = &c->hooks[c->nhooks++];
  h->id = ++c->next_hook_id;
  h->load = load;
  h->fn = fn;
  h->payload = payload;
  if (name)
    snprintf(h->name, sizeof h->name, "'%s'", name);
  else
    snprintf(h->name, sizeof h->name, "#%llu", (unsigned long long)h->id);
  if (id) *id = h->id;
  return ACC_OK;
}

acc_result acc_accelerator_register_save_state_pre_hook(acc_accelerator *acc, acc_state_hook_fn fn, void *payload,
                                                        const char *name, uint64_t *id) {
  return register_hook(acc, 0, fn, payload, name, id);
}

acc_result acc_accelerator_register_load_state_pre_hook(acc_accelerator *acc, acc_state_hook_fn fn, void *payload,
                                                        const char *name, uint64_t *id) {
  return register_hook(acc, 1, fn, payload, name, id);
}

acc_result acc_accelerator_remove_state_hook(acc_accelerator *acc, uint64_t id) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc__accel_ckpt *c = *p.ckpt;
  uint64_t issued = c ? c->next_hook_id : 0;
  if (id == 0 || id > issued)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "remove_state_hook: no hook was registered with id %llu (ids issued "
                      "so far: 1..%llu)", (unsigned long long)id, (unsigned long long)issued);
  if (c->in_hook) return acc__error(ACC_ERR_INVALID_USAGE, "remove_state_hook: called from inside a save/load pre-hook");
  for (int i = 0; i < c->nhooks; i++) {
    if (c->hooks[i].id != id) continue;
    memmove(&c->hooks[i], &c->hooks[i + 1], (size_t)(c->nhooks - i - 1) * sizeof *c->hooks);
    c->nhooks--;
    break;
  }
  return ACC_OK; /* already removed: nothing to do, as with a removable handle */
}

/* Runs this process's save (load 0) or load (load 1) pre-hooks in order; the first failure
 * stops the others and names the hook. Local: the caller combines the result with the other
 * processes' through agree(). */
static acc_result run_hooks(acc_accelerator *acc, acc__accel_ckpt *c, int load, const char *dir) {
  if (!c) return ACC_OK;
  acc_result rc = ACC_OK;
  c->in_hook = 1;
  for (int i = 0; i < c->nhooks && rc == ACC_OK; i++) {
    const state_hook *h = &c->hooks[i];
    if (h->load != load) continue;
    acc_clear_error();
    rc = h->fn(acc, dir, h->payload);
    if (rc != ACC_OK)
      rc = acc__callback_result(rc, "%s: pre-hook %s (id %llu)", load ? "load_state" : "save_state", h->name,
                                (unsigned long long)h->id);
  }
  c->in_hook = 0;
  return rc;
}

/* ---- collective helpers ------------------------------------------------------------------------ */

/* Every process learns whether any process failed: the failing process (the highest-numbered
 * one when several fail) sends its error code and message, so every process returns the same
 * error and none is left waiting in a later collective. */
static acc_result agree(acc_state *st, acc_result local, const char *what) {
  int rank = acc_state_process_index(st);
  int32_t who = local != ACC_OK ? rank + 1 : 0;
  acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 0);
  acc_result rc = acc_all_reduce(st, &who, &who, 1, ACC_I32, ACC_MAX);
  if (rc != ACC_OK) {
    if (local != ACC_OK) return local;
    return acc__error_context(rc, "%s: exchanging the status with the other processes", what);
  }
  if (who == 0) return ACC_OK;
  if (who < 0 || who > acc_state_num_processes(st)) /* another exchange paired with this one */
    return acc__error(ACC_ERR_MISMATCH,
                      "%s: the processes are out of step (run with --debug): the status exchange "
                      "returned %ld, which is not a process index + 1 (1..%d)",
                      what, (long)who, acc_state_num_processes(st));
  struct {
    int32_t rc;
    char msg[1020];
  } e;
  memset(&e, 0, sizeof e);
  if (who - 1 == rank) {
    e.rc = (int32_t)local;
    snprintf(e.msg, sizeof e.msg, "%s", acc_last_error());
  }
  acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 1);
  rc = acc_broadcast(st, &e, sizeof e, ACC_U8, who - 1);
  if (local != ACC_OK) return local;
  if (rc != ACC_OK) return acc__error_context(rc, "%s failed on process %d", what, who - 1);
  e.msg[sizeof e.msg - 1] = 0;
  return acc__error(e.rc > 0 ? (acc_result)e.rc : ACC_ERR_REMOTE, "%s (on process %d)", e.msg, who - 1);
}

/* Process 0's string (a path) to every process. */
static acc_result bcast_path(acc_state *st, char buf[PATH_BUF]) {
  acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 2);
  return acc_broadcast(st, buf, PATH_BUF, ACC_U8, 0);
}

/* ---- small file helpers ---------------------------------------------------------------------- */

static char *file_name(const char *dir, const char *stem, int i, const char *ext) {
  char name[96];
  if (i == 0)
    snprintf(name, sizeof name, "%s%s", stem, ext);
  else
    snprintf(name, sizeof name, "%s_%d%s", stem, i, ext);
  return acc__path_join(dir, name);
}

/* Writes a JSON object durably (temporary file, fsync, rename), then frees it. */
static acc_result write_json(const char *path, json_t *j) {
  if (!j) return acc__error(ACC_ERR_NOMEM, "out of memory building '%s'", path);
  char *text = acc__json_dumps(j, JSON_INDENT(1) | JSON_REAL_PRECISION(17), path);
  json_decref(j);
  if (!text) return ACC_ERR_NOMEM;
  size_t n = strlen(text);
  acc_result rc = acc__write_file_atomic(path, text, n);
  acc__free(text);
  return rc;
}

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

static void hex_encode(const uint8_t *b, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[b[i] >> 4];
    out[2 * i + 1] = d[b[i] & 15];
  }
  out[2 * n] = 0;
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

/* ---- saving ----------------------------------------------------------------------------------- */

static acc_result save_optimizer(acc_optimizer *o, const char *dir, int i) {
  size_t n = acc_optimizer_state_count(o);
  acc_tensor_view *tv = n ? acc__calloc(n, sizeof *tv) : NULL;
  if (n && !tv) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  for (size_t k = 0; k < n && rc == ACC_OK; k++) {
    const char *name;
    const float *data;
    size_t numel;
    int ndim;
    const int64_t *shape;
    rc = acc_optimizer_state_get(o, k, &name, &data, &numel, &ndim, &shape);
    if (rc != ACC_OK) break;
    tv[k].name = name;
    tv[k].dtype = ACC_F32;
    tv[k].ndim = ndim;
    for (int d = 0; d < ndim; d++) tv[k].shape[d] = shape[d];
    tv[k].data = data;
  }
  char *path = file_name(dir, "optimizer", i, ".safetensors");
  if (!path) rc = ACC_ERR_NOMEM;
  if (rc == ACC_OK) rc = acc_safetensors_write(path, tv, n, NULL, NULL, 0);
  acc__free(path);
  acc__free(tv);
  if (rc != ACC_OK) return rc;
  json_t *j = json_object();
  size_t ns = acc_optimizer_scalar_count(o);
  for (size_t k = 0; k < ns && rc == ACC_OK; k++) {
    const char *name;
    double v;
    rc = acc_optimizer_scalar_get(o, k, &name, &v);
    if (rc == ACC_OK && json_object_set_new(j, name, json_real(v)) != 0)
      rc = acc__error(ACC_ERR_NOMEM, "out of memory saving optimizer %d", (int)i);
  }
  path = file_name(dir, "optimizer", i, ".json");
  if (!path) rc = ACC_ERR_NOMEM;
  if (rc == ACC_OK)
    rc = write_json(path, j);
  else
    json_decref(j);
  acc__free(path);
  return rc;
}

static acc_result save_custom(const custom_obj *c, const char *dir, int i) {
  size_t len = 0;
  acc_clear_error(); /* a callback that sets no message must not inherit an earlier one */
  acc_result rc = c->save(c->obj, NULL, 0, &len);
  if (rc != ACC_OK)
    return acc__callback_result(rc, "save_state: the save callback of registered object %d (size query)", i);
  void *buf = acc__malloc(len ? len : 1);
  if (!buf) return ACC_ERR_NOMEM;
  size_t used = len;
  acc_clear_error();
  rc = c->save(c->obj, buf, len, &used);
  if (rc != ACC_OK) {
    acc__free(buf);
    return acc__callback_result(rc, "save_state: the save callback of registered object %d", i);
  }
  if (used > len) {
    acc__free(buf);
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "save_state: registered object %d wrote %zu bytes but asked for %zu", i, used, len);
  }
  if ((uint64_t)used > c->max_bytes) {
    acc__free(buf);
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "save_state: registered object %d is %zu bytes, over its limit of %llu bytes (register it "
                      "with acc_accelerator_register_for_checkpointing_limit)", i, used,
                      (unsigned long long)c->max_bytes);
  }
  char name[64];
  snprintf(name, sizeof name, "custom_checkpoint_%d.bin", i);
  char *path = acc__path_join(dir, name);
  rc = path ? acc__write_file_atomic(path, buf, used) : ACC_ERR_NOMEM;
  acc__free(path);
  acc__free(buf);
  return rc;
}

/* Prepared model i >= 1: model_<i>.safetensors, every parameter in f32, registration order. */
static acc_result save_extra_model(const acc_model *m, const char *dir, int i) {
  size_t np = acc_model_num_parameters(m);
  acc_tensor_view *v = acc__calloc(np ? np : 1, sizeof *v);
  char *path = file_name(dir, "model", i, ".safetensors");
  acc_result rc = v && path ? ACC_OK : ACC_ERR_NOMEM;
  for (size_t k = 0; rc == ACC_OK && k < np; k++) {
    const acc_param *q = acc_model_parameter(m, k);
    v[k].name = q->name;
    v[k].dtype = ACC_F32;
    v[k].ndim = q->ndim;
    for (int d = 0; d < q->ndim; d++) v[k].shape[d] = q->shape[d];
    v[k].data = q->data;
  }
  if (rc == ACC_OK) rc = acc_safetensors_write(path, v, np, NULL, NULL, 0);
  if (rc != ACC_OK && path && rc != ACC_ERR_NOMEM) rc = acc__error_context(rc, "save_state: prepared model %d", i);
  acc__free(path);
  acc__free(v);
  return rc;
}

/* The files only the main process writes. */
static acc_result save_shared(acc__accel_parts *p, const char *dir) {
  acc__accel_ckpt *c = *p->ckpt;
  int ncustom = c ? c->ncustom : 0;
  json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}", "format", STATE_FORMAT, "version",
                           STATE_VERSION, "num_processes", acc_state_num_processes(p->st), "models",
                           p->nmodels, "optimizers", p->nopts, "schedulers", p->nscheds, "dataloaders",
                           p->nloaders, "custom_objects", ncustom, "grad_scaler", p->scaler != NULL);
  char *path = acc__path_join(dir, "checkpoint.json");
  acc_result rc = path ? write_json(path, meta) : ACC_ERR_NOMEM;
  if (!path) json_decref(meta);
  acc__free(path);
  /* model.safetensors (as acc_save_model writes it), then model_1.safetensors, ... in prepare
   * order */
  if (rc == ACC_OK && p->nmodels) rc = acc_save_model(NULL, p->models[0], dir, 0, ACC_F32);
  for (int i = 1; i < p->nmodels && rc == ACC_OK; i++) rc = save_extra_model(p->models[i], dir, i);
  for (int i = 0; i < p->nopts && rc == ACC_OK; i++) rc = save_optimizer(p->opts[i], dir, i);
  for (int i = 0; i < p->nscheds && rc == ACC_OK; i++) {
    int64_t step;
    double base;
    rc = acc_scheduler_get_state(p->scheds[i], &step, &base);
    if (rc != ACC_OK) break;
    path = file_name(dir, "scheduler", i, ".json");
    if (!path) return ACC_ERR_NOMEM;
    json_t *bases = json_array(); /* one base lr per parameter group */
    int ok = bases != NULL; /* every append is checked: a dropped entry would save a wrong file */
    for (size_t g = 0; ok && g < acc_scheduler_group_count(p->scheds[i]); g++)
      ok = json_array_append_new(bases, json_real(acc_scheduler_group_base_lr(p->scheds[i], g))) == 0;
    if (!ok) {
      json_decref(bases);
      rc = acc__error(ACC_ERR_NOMEM, "out of memory building '%s'", path);
    }
    if (rc == ACC_OK)
      rc = write_json(path, json_pack("{s:I, s:f, s:o}", "step", (json_int_t)step, "base_lr", base, "base_lrs", bases));
    acc__free(path);
  }
  if (rc == ACC_OK && p->scaler) {
    float scale;
    int64_t tracker;
    rc = acc_grad_scaler_get_state(p->scaler, &scale, &tracker);
    path = rc == ACC_OK ? acc__path_join(dir, "scaler.json") : NULL;
    if (rc == ACC_OK && !path) rc = ACC_ERR_NOMEM;
    if (rc == ACC_OK)
      rc = write_json(path, json_pack("{s:f, s:I}", "scale", (double)scale, "growth_tracker", (json_int_t)tracker));
    acc__free(path);
  }
  for (int i = 0; i < ncustom && rc == ACC_OK; i++) rc = save_custom(&c->custom[i], dir, i);
  return rc;
}

/* The file every process writes: its RNG, accumulation step and loader positions. */
static acc_result save_process(acc__accel_parts *p, const char *dir) {
  int rank = acc_state_process_index(p->st);
  uint8_t rng[ACC_RNG_STATE_SIZE];
  acc_rng_state_get(acc_rng_global(), rng);
  char hex[2 * ACC_RNG_STATE_SIZE + 1];
  hex_encode(rng, sizeof rng, hex);
  json_t *loaders = json_array();
  acc_result rc = ACC_OK;
  for (int i = 0; i < p->nloaders && rc == ACC_OK; i++) {
    acc_dataloader_state ds;
    rc = acc_dataloader_state_get(p->loaders[i], &ds);
    if (rc != ACC_OK) break;
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, ds.seed);
    /* round_units: samples one batch of every process consumes (batches of a given list); a
     * resume on another number of processes maps the position with it. */
    if (json_array_append_new(loaders, json_pack("{s:s, s:I, s:I, s:I}", "seed", seed, "epoch", (json_int_t)ds.epoch,
                                                 "batches", (json_int_t)ds.batches, "round_units",
                                                 (json_int_t)acc__dataloader_round_units(p->loaders[i]))) != 0)
      rc = ACC_ERR_NOMEM;
  }
  json_t *j = json_pack("{s:i, s:I, s:s, s:o}", "process_index", rank, "step", (json_int_t)*p->step, "rng", hex,
                        "dataloaders", loaders);
  if (rc != ACC_OK) {
    json_decref(j);
    return rc;
  }
  char name[64];
  snprintf(name, sizeof name, "random_states_%d.json", rank);
  char *path = acc__path_join(dir, name);
  rc = path ? write_json(path, j) : ACC_ERR_NOMEM;
  if (!path) json_decref(j);
  acc__free(path);
  return rc;
}

/* Keeps the `limit` newest complete checkpoints/checkpoint_<n> (by n, never by string order);
 * incomplete checkpoint_<n> left by killed saves or rotations, with n < newest, are removed too. */
static acc_result prune(const char *project_dir, int limit, long newest) {
  char *base = acc__path_join(project_dir, "checkpoints");
  if (!base) return ACC_ERR_NOMEM;
  acc__ckpt_entry *v = NULL;
  size_t n = 0, complete = 0;
  acc_result rc = acc__ckpt_list(base, 1, &v, &n);
  for (size_t i = 0; i < n; i++) complete += v[i].complete != 0;
  size_t drop = complete > (size_t)limit ? complete - (size_t)limit : 0;
  for (size_t i = 0; rc == ACC_OK && i < n; i++) {
    if (!v[i].complete) {
      if (v[i].num < newest) rc = acc__rmtree(v[i].path); /* nothing loads it */
    } else if (drop > 0) {
      rc = acc__ckpt_remove(v[i].path); /* oldest first: the list is sorted by number */
      drop--;
    }
  }
  acc__ckpt_entries_free(v, n);
  acc__free(base);
  return rc;
}

static acc_result save_state_body(acc_accelerator *acc, const char *output_dir, char **saved_dir) {
  ACC_PROF_SCOPE(ACC_PROF_CKPT, "save_state");
  if (saved_dir) *saved_dir = NULL;
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  ACC_CHECK(acc__accelerator_end_iteration(acc));
  acc_project_config *proj = NULL;
  acc_result rc = get_project(&p, &proj);
  const int main_proc = acc_state_process_index(p.st) == 0;
  acc_checkpoint *c = NULL;
  char tmp[PATH_BUF], target[PATH_BUF];
  memset(tmp, 0, sizeof tmp);
  memset(target, 0, sizeof target);
  if (rc == ACC_OK && main_proc) {
    /* With automatic naming the argument is ignored, as in Accelerate. */
    int automatic = (*p.ckpt)->automatic;
    rc = acc_checkpoint_begin(proj, automatic ? NULL : output_dir, &c);
    if (rc == ACC_OK) {
      if (strlen(acc_checkpoint_dir(c)) >= PATH_BUF || strlen(acc_checkpoint_target(c)) >= PATH_BUF) {
        rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "save_state: checkpoint path '%s' is too long",
                        acc_checkpoint_target(c));
      } else {
        strcpy(tmp, acc_checkpoint_dir(c));
        strcpy(target, acc_checkpoint_target(c));
      }
    }
  }
  /* The paths go out first (empty when the main process could not create the directory); the
   * pre-hooks run on every process before anything is written, and their results travel with
   * the directory creation's in one agreement: a failing hook leaves nothing behind. */
  acc_result bc = bcast_path(p.st, tmp);
  if (bc == ACC_OK) bc = bcast_path(p.st, target);
  if (bc != ACC_OK) {
    acc_checkpoint_abort(c);
    return rc != ACC_OK ? rc : bc;
  }
  if (rc == ACC_OK && tmp[0]) rc = run_hooks(acc, *p.ckpt, 0, tmp);
  rc = agree(p.st, rc, "save_state (creating the checkpoint directory and running the pre-hooks)");
  if (rc != ACC_OK) {
    acc_checkpoint_abort(c);
    return rc;
  }
  acc_result local = main_proc ? save_shared(&p, tmp) : ACC_OK;
  if (local == ACC_OK) local = save_process(&p, tmp);
  if (local == ACC_OK && acc__fs_progress_hook) acc__fs_progress_hook("state-written");
  rc = agree(p.st, local, "save_state (writing the checkpoint files)");
  if (rc != ACC_OK) {
    acc_checkpoint_abort(c); /* the temporary directory goes; earlier checkpoints are untouched */
    return rc;
  }
  int64_t it = acc_project_config_iteration(proj);
  local = main_proc ? acc_checkpoint_commit(c) : ACC_OK; /* commit advances process 0's iteration */
  rc = agree(p.st, local, "save_state (committing the checkpoint)");
  if (rc != ACC_OK) return rc;
  if (!main_proc) ACC_CHECK(acc_project_config_set_iteration(proj, it + 1));
  /* Rotation only once the new checkpoint is durable: a crash never leaves fewer than before. */
  acc__accel_ckpt *ck = *p.ckpt;
  local = ACC_OK;
  if (main_proc && ck->automatic && ck->total_limit > 0) local = prune(acc_project_config_dir(proj), ck->total_limit, it);
  ACC_CHECK(agree(p.st, local, "save_state (removing checkpoints beyond total_limit)"));
  if (saved_dir) {
    *saved_dir = acc__strdup(target);
    if (!*saved_dir) return ACC_ERR_NOMEM;
  }
  return ACC_OK;
}

/* ---- loading ---------------------------------------------------------------------------------- */

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
    if (!fmt || strcmp(fmt, STATE_FORMAT) != 0)
      rc = acc__error(ACC_ERR_FORMAT, "'%s' is not an accelerate-c training state (format \"%s\")", path,
                      fmt ? fmt : "missing");
    if (rc == ACC_OK) rc = get_int(m, path, "version", &version);
    if (rc == ACC_OK && version != STATE_VERSION)
      rc = acc__error(ACC_ERR_FORMAT, "'%s' has state version %lld; this library reads version %d", path,
                      (long long)version, STATE_VERSION);
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

static acc_result load_optimizer(acc_optimizer *o, const char *dir, int i) {
  char *path = file_name(dir, "optimizer", i, ".json");
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
  json_decref(j);
  acc__free(path);
  if (rc != ACC_OK) return rc;
  path = file_name(dir, "optimizer", i, ".safetensors");
  if (!path) return ACC_ERR_NOMEM;
  acc_safetensors *f = NULL;
  rc = acc_safetensors_open(&f, path);
  size_t n = rc == ACC_OK ? acc_safetensors_count(f) : 0;
  float *tmp = NULL;
  size_t tmp_cap = 0;
  for (size_t k = 0; k < n && rc == ACC_OK; k++) {
    acc_tensor_view tv;
    rc = acc_safetensors_tensor(f, k, &tv);
    if (rc != ACC_OK) break;
    if (tv.dtype != ACC_F32) {
      rc = acc__error(ACC_ERR_FORMAT, "'%s': optimizer state '%s' is %s, expected F32", path, tv.name,
                      acc_safetensors_dtype_name(tv.dtype) ? acc_safetensors_dtype_name(tv.dtype) : "?");
      break;
    }
    size_t numel = tv.nbytes / sizeof(float);
    if (((uintptr_t)tv.data % _Alignof(float)) == 0) { /* the usual case: no extra copy */
      rc = acc_optimizer_state_set(o, tv.name, tv.data, numel, tv.ndim, tv.shape);
      if (rc != ACC_OK) rc = acc__error_context(rc, "load_state: optimizer %d from '%s'", i, path);
      continue;
    }
    if (numel > tmp_cap) { /* the mapped data may be unaligned: copy */
      acc__free(tmp);
      tmp = acc__malloc(numel * sizeof(float));
      tmp_cap = tmp ? numel : 0;
      if (!tmp) {
        rc = ACC_ERR_NOMEM;
        break;
      }
    }
    if (numel) memcpy(tmp, tv.data, numel * sizeof(float));
    rc = acc_optimizer_state_set(o, tv.name, tmp, numel, tv.ndim, tv.shape);
    if (rc != ACC_OK) rc = acc__error_context(rc, "load_state: optimizer %d from '%s'", i, path);
  }
  acc__free(tmp);
  acc_safetensors_close(f);
  acc__free(path);
  return rc;
}

static acc_result load_custom(const custom_obj *c, const char *dir, int i) {
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
    buf = acc__malloc(len ? len : 1);
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
  acc__free(buf);
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
      note_add(note, "%sdata loader %d (epoch %lld) continues at batch %lld per process instead of %lld (global "
               "position %lld%s", i ? "; " : "", i, (long long)ds[i].epoch, (long long)nb,
               (long long)ds[i].batches, (long long)(nb * now_ru), nb * now_ru == global ? ", unchanged)" : "");
      if (nb * now_ru != global)
        note_add(note, " instead of %lld: not a multiple of %lld, so %lld sample(s)/list batch(es) of the epoch "
                 "are seen a second time)", (long long)global, (long long)now_ru, (long long)again);
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
  rc = agree(p->st, rc, "load_state (checking the restored positions)");
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

static acc_result load_all(acc__accel_parts *p, const char *dir, remap_note *note) {
  ACC_CHECK(check_meta(p, dir, note));
  for (int i = 0; i < p->nmodels; i++) {
    char *path = file_name(dir, "model", i, ".safetensors");
    if (!path) return ACC_ERR_NOMEM;
    acc_result rc = acc_load_checkpoint_in_model(p->models[i], path, NULL, NULL);
    acc__free(path);
    if (rc != ACC_OK && p->nmodels == 1) return acc__error_context(rc, "load_state: the model");
    if (rc != ACC_OK) return acc__error_context(rc, "load_state: prepared model %d", i);
  }
  for (int i = 0; i < p->nopts; i++) ACC_CHECK(load_optimizer(p->opts[i], dir, i));
  for (int i = 0; i < p->nscheds; i++) {
    char *path = file_name(dir, "scheduler", i, ".json");
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
  return load_process(p, dir, note);
}

static acc_result load_state_body(acc_accelerator *acc, const char *input_dir, char **loaded_dir) {
  if (loaded_dir) *loaded_dir = NULL;
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc_project_config *proj = NULL;
  acc_result rc = get_project(&p, &proj);
  char dir[PATH_BUF];
  memset(dir, 0, sizeof dir);
  if (rc == ACC_OK && acc_state_process_index(p.st) == 0) {
    char *d = NULL;
    rc = acc_project_resolve_load(proj, input_dir, &d);
    if (rc == ACC_OK && strlen(d) >= PATH_BUF)
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "load_state: checkpoint path '%s' is too long", d);
    if (rc == ACC_OK) strcpy(dir, d);
    acc_free(d);
  }
  if (rc != ACC_OK) dir[0] = 0; /* an empty path tells the others not to run the hooks */
  /* The path goes out first; the pre-hooks run on every process before anything is read, and
   * their results travel with the checkpoint lookup's in one agreement: a failing hook leaves
   * every process's state untouched. */
  acc_result bc = bcast_path(p.st, dir);
  if (bc != ACC_OK) return rc != ACC_OK ? rc : bc;
  if (rc == ACC_OK && dir[0]) rc = run_hooks(acc, *p.ckpt, 1, dir);
  rc = agree(p.st, rc, "load_state (finding the checkpoint and running the pre-hooks)");
  if (rc != ACC_OK) return rc;
  remap_note note;
  memset(&note, 0, sizeof note);
  rc = agree(p.st, load_all(&p, dir, &note), "load_state");
  if (rc == ACC_OK) rc = check_positions(&p, dir);
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

/* ZeRO stage 1: the optimizer state is gathered to full tensors around save and load, so the
 * files are the same as without ZeRO (independent of the stage and of the number of
 * processes), then each process keeps its shard again. */
acc_result acc_accelerator_save_state(acc_accelerator *acc, const char *output_dir, char **saved_dir) {
  if (saved_dir) *saved_dir = NULL;
  ACC_CHECK(acc__accelerator_zero_unshard(acc));
  ACC_CHECK(acc__dev_state_to_host(acc)); /* optimizer state in device memory: host staging */
  acc_result rc = save_state_body(acc, output_dir, saved_dir);
  acc_result r2 = acc__accelerator_zero_reshard(acc);
  return rc != ACC_OK ? rc : r2;
}

acc_result acc_accelerator_load_state(acc_accelerator *acc, const char *input_dir, char **loaded_dir) {
  if (loaded_dir) *loaded_dir = NULL;
  ACC_CHECK(acc__accelerator_zero_unshard(acc));
  acc_result rc = load_state_body(acc, input_dir, loaded_dir);
  if (rc == ACC_OK) rc = acc__dev_state_from_host(acc); /* optimizer state in device memory */
  acc_result r2 = acc__accelerator_zero_reshard(acc);
  return rc != ACC_OK ? rc : r2;
}
