/* acc_accelerator_save_state: the whole training state (model, optimizers, schedulers,
 * GradScaler, per-process RNG + accumulation step + data loader positions, and objects
 * registered for checkpointing) written into a crash-safe checkpoint directory (ckpt_dir.c),
 * then, with automatic naming and a total_limit, the rotation of the older checkpoints. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ckpt/accel_state.h"
#include "ckpt/ckpt_dir.h"
#include "ckpt/psgd_state.h"
#include "core/json_util.h"
#include "core/profile.h"
#include "data/data_internal.h"
#include "train/train.h"

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

static void hex_encode(const uint8_t *b, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[b[i] >> 4];
    out[2 * i + 1] = d[b[i] & 15];
  }
  out[2 * n] = 0;
}

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
  char *path = acc__state_file_name(dir, "optimizer", i, ".safetensors");
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
    /* counters and switches as integers (kind, step, nesterov), the rest as reals (exact) */
    const int integral = rc == ACC_OK && (!strcmp(name, "kind") || !strcmp(name, "step") || !strcmp(name, "nesterov")) &&
                         v == (double)(json_int_t)v;
    if (rc == ACC_OK && json_object_set_new(j, name, integral ? json_integer((json_int_t)v) : json_real(v)) != 0)
      rc = acc__error(ACC_ERR_NOMEM, "out of memory saving optimizer %d", (int)i);
  }
  path = acc__state_file_name(dir, "optimizer", i, ".json");
  if (!path) rc = ACC_ERR_NOMEM;
  if (rc == ACC_OK)
    rc = write_json(path, j);
  else
    json_decref(j);
  acc__free(path);
  return rc;
}

static acc_result save_custom(const acc__custom_obj *c, const char *dir, int i) {
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
  char *path = acc__state_file_name(dir, "model", i, ".safetensors");
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
  json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:i}", "format", ACC__STATE_FORMAT,
                           "version", ACC__STATE_VERSION, "num_processes", acc_state_num_processes(p->st), "models",
                           p->nmodels, "optimizers", p->nopts, "schedulers", p->nscheds, "dataloaders",
                           p->nloaders, "custom_objects", ncustom, "grad_scaler", p->scaler != NULL, "powersgd",
                           acc__psgd_state_models(p));
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
    path = acc__state_file_name(dir, "scheduler", i, ".json");
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
  acc_result rc = acc__accel_ckpt_project(&p, &proj);
  const int main_proc = acc_state_process_index(p.st) == 0;
  acc_checkpoint *c = NULL;
  char tmp[ACC__STATE_PATH_BUF], target[ACC__STATE_PATH_BUF];
  memset(tmp, 0, sizeof tmp);
  memset(target, 0, sizeof target);
  if (rc == ACC_OK && main_proc) {
    /* With automatic naming the argument is ignored, as in Accelerate. */
    int automatic = (*p.ckpt)->automatic;
    rc = acc_checkpoint_begin(proj, automatic ? NULL : output_dir, &c);
    if (rc == ACC_OK) {
      if (strlen(acc_checkpoint_dir(c)) >= ACC__STATE_PATH_BUF ||
          strlen(acc_checkpoint_target(c)) >= ACC__STATE_PATH_BUF) {
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
  acc_result bc = acc__state_bcast_path(p.st, tmp);
  if (bc == ACC_OK) bc = acc__state_bcast_path(p.st, target);
  if (bc != ACC_OK) {
    acc_checkpoint_abort(c);
    return rc != ACC_OK ? rc : bc;
  }
  if (rc == ACC_OK && tmp[0]) rc = acc__accel_ckpt_run_hooks(acc, *p.ckpt, 0, tmp);
  rc = acc__state_agree(p.st, rc, "save_state (creating the checkpoint directory and running the pre-hooks)");
  if (rc != ACC_OK) {
    acc_checkpoint_abort(c);
    return rc;
  }
  /* collective: the program's sharded buffers gathered to process 0 and written there */
  acc_result local = acc__zero_bufs_save(p.st, *p.ckpt, tmp);
  if (local == ACC_OK && main_proc) local = save_shared(&p, tmp);
  if (local == ACC_OK) local = save_process(&p, tmp);
  if (local == ACC_OK) local = acc__psgd_state_save(&p, tmp); /* per process: error feedback, Q */
  if (local == ACC_OK && acc__fs_progress_hook) acc__fs_progress_hook("state-written");
  rc = acc__state_agree(p.st, local, "save_state (writing the checkpoint files)");
  if (rc != ACC_OK) {
    acc_checkpoint_abort(c); /* the temporary directory goes; earlier checkpoints are untouched */
    return rc;
  }
  int64_t it = acc_project_config_iteration(proj);
  local = main_proc ? acc_checkpoint_commit(c) : ACC_OK; /* commit advances process 0's iteration */
  rc = acc__state_agree(p.st, local, "save_state (committing the checkpoint)");
  if (rc != ACC_OK) return rc;
  if (!main_proc) ACC_CHECK(acc_project_config_set_iteration(proj, it + 1));
  /* Rotation only once the new checkpoint is durable: a crash never leaves fewer than before. */
  acc__accel_ckpt *ck = *p.ckpt;
  local = ACC_OK;
  if (main_proc && ck->automatic && ck->total_limit > 0) local = prune(acc_project_config_dir(proj), ck->total_limit, it);
  ACC_CHECK(acc__state_agree(p.st, local, "save_state (removing checkpoints beyond total_limit)"));
  if (saved_dir) {
    *saved_dir = acc__strdup(target);
    if (!*saved_dir) return ACC_ERR_NOMEM;
  }
  return ACC_OK;
}

/* ZeRO stage 1: the optimizer state is gathered to full tensors around the save, so the files
 * are the same as without ZeRO (independent of the stage and of the number of processes), then
 * each process keeps its shard again. */
acc_result acc_accelerator_save_state(acc_accelerator *acc, const char *output_dir, char **saved_dir) {
  if (saved_dir) *saved_dir = NULL;
  ACC_CHECK(acc__accelerator_zero_unshard(acc));
  ACC_CHECK(acc__dev_state_to_host(acc)); /* optimizer state in device memory: host staging */
  acc_result rc = save_state_body(acc, output_dir, saved_dir);
  acc_result r2 = acc__accelerator_zero_reshard(acc);
  return rc != ACC_OK ? rc : r2;
}
