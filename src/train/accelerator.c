/* The Accelerator: ties the process state, the gradient buckets, the optimizer/scheduler/scaler
 * and the prepared data loaders together with Accelerate's rules. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/collcheck.h"
#include "core/env.h"
#include "core/profile.h"
#include "data/data_internal.h"
#include "device/devio.h"
#include "state/state.h"
#include "train/accel.h"
#include "train/accel_device.h"
#include "train/grad_sync.h"
#include "train/train.h"

static acc_result check(const acc_accelerator *acc, const char *fn) {
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  return ACC_OK;
}

acc_result acc_accelerator_create(acc_accelerator **out, const acc_accelerator_options *in) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_create: out is NULL");
  *out = NULL;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, in, acc_accelerator_options, ACC_ACCELERATOR_OPTIONS_VERSION, "acc_accelerator_create");
  long gas = o.gradient_accumulation_steps;
  int set = 0;
  long env_gas = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", &env_gas, &set));
  if (set) gas = env_gas; /* Accelerate: the environment wins over the argument */
  if (gas == ACC_UNSET) gas = 1;
  if (gas < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "gradient_accumulation_steps is %ld; it must be >= 1", gas);

  if (o.mixed_precision != ACC_UNSET &&
      (o.mixed_precision < ACC_PRECISION_NO || o.mixed_precision > ACC_PRECISION_BF16))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "unknown mixed_precision %d: choose between ACC_PRECISION_NO, _FP16, _BF16",
                      o.mixed_precision);
  long zero = o.zero_stage;
  if (zero == ACC_UNSET) {
    long v = 0;
    set = 0;
    ACC_CHECK(acc__env_int("ACCELERATE_ZERO_STAGE", &v, &set));
    zero = set ? v : 0;
  }
  if (zero < 0 || zero > 2)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "zero_stage is %ld; it must be 0, 1 or 2", zero);
  int hook = o.comm_hook;
  if (hook == ACC_UNSET) {
    int v = 0;
    set = 0;
    ACC_CHECK(acc__env_enum("ACCELERATE_COMM_HOOK", &v, &set)); /* no|fp16|bf16 = 0|1|2 */
    hook = set ? v : ACC_COMM_HOOK_NONE;
  }
  if (hook < ACC_COMM_HOOK_NONE || hook > ACC_COMM_HOOK_BF16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "comm_hook is %d: choose ACC_COMM_HOOK_NONE, _FP16 or _BF16", hook);
  if (hook != ACC_COMM_HOOK_NONE && zero != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "comm_hook %s with zero_stage %ld: gradient compression applies to the "
                      "all-reduce of zero_stage 0 only; choose one of the two",
                      hook == ACC_COMM_HOOK_FP16 ? "fp16" : "bf16", zero);
  acc_state_options so = ACC_STATE_OPTIONS_INIT;
  so.cpu = o.cpu;
  /* The process state reports the precision the accelerator runs (acc_state_describe); a state
   * that already exists keeps its own. */
  if (!acc_state_get()) so.mixed_precision = o.mixed_precision;
  acc_state *st = NULL;
  ACC_CHECK(acc_state_create(&st, &so));
  acc_accelerator *acc = acc__calloc(1, sizeof *acc);
  if (!acc) {
    acc_state_destroy(st);
    return ACC_ERR_NOMEM;
  }
  acc->magic = ACC__MAGIC_ACCELERATOR;
  acc->st = st;
  /* The accelerator's own setting wins; unset, it follows the state (ACCELERATE_MIXED_PRECISION). */
  acc->mp = o.mixed_precision != ACC_UNSET ? (acc_mixed_precision)o.mixed_precision
                                           : acc_state_mixed_precision(st);
  /* One source of truth: the state reports what the accelerator runs (new-user review 3, #6). */
  acc_result mrc = acc__state_adopt_mixed_precision(st, acc->mp);
  if (mrc != ACC_OK) {
    acc_accelerator_destroy(acc);
    return mrc;
  }
  acc->gas = (int)gas;
  acc->split_batches = o.split_batches;
  acc->even_batches = o.even_batches;
  acc->step_sched_with_opt = o.step_scheduler_with_optimizer;
  acc->sync_with_dataloader = o.sync_with_dataloader;
  acc->bucket_cap = o.bucket_cap_bytes ? o.bucket_cap_bytes : (size_t)25 * 1024 * 1024;
  acc->overlap = o.overlap_grad_sync;
  acc->sync_gradients = 1;
  acc->want_low_precision = o.low_precision_params && acc->mp != ACC_PRECISION_NO;
  acc->zero = zero;
  acc->comm_hook = hook;
  if (acc->mp == ACC_PRECISION_FP16) {
    acc_result rc = acc_grad_scaler_create(&acc->scaler, o.scaler);
    if (rc != ACC_OK) {
      acc_accelerator_destroy(acc);
      return rc;
    }
  }
  acc_result drc = acc__devctx_open(st, o.device, &acc->dev);
  if (drc != ACC_OK) {
    acc_accelerator_destroy(acc);
    return drc;
  }
  acc->ops = acc__devctx_offhost(acc->dev) ? &acc__train_device_ops : &acc__train_cpu_ops;
  if (acc_state_is_main_process(st)) acc__warn_old_kernel(); /* as Accelerate, once, on Linux */
  *out = acc;
  return ACC_OK;
}

void acc_accelerator_destroy(acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return;
  for (int i = 0; i < acc->nloaders; i++) acc__dataloader_set_owner(acc->loaders[i], NULL, NULL);
  for (int i = 0; i < acc->nmodels; i++) acc__pmodel_free(&acc->models[i]);
  if (acc->ckpt_free) acc->ckpt_free(acc->ckpt);
  for (int i = 0; i < acc->nmodels; i++)
    if (acc->model_owned[i]) acc_model_destroy(acc->model_list[i]); /* src/train/port.c */
  acc__free(acc->loaders);
  acc_grad_scaler_destroy(acc->scaler);
  acc__free(acc->metrics_buf);
  acc__dev_train_free(acc->dev); /* the device training state, before its device */
  acc__devctx_close(acc->dev);
  acc_state_destroy(acc->st);
  acc->magic = ACC__MAGIC_DEAD;
  acc__free(acc);
}

acc_state *acc_accelerator_state(const acc_accelerator *acc) { return acc ? acc->st : NULL; }
acc__devctx *acc__accelerator_dev(const acc_accelerator *acc) { return acc->dev; }
acc_mixed_precision acc_accelerator_mixed_precision(const acc_accelerator *acc) {
  return acc ? acc->mp : ACC_PRECISION_NO;
}
acc_dtype acc_accelerator_autocast_dtype(const acc_accelerator *acc) {
  return acc_autocast_dtype(acc ? acc->mp : ACC_PRECISION_NO);
}
int acc_accelerator_gradient_accumulation_steps(const acc_accelerator *acc) { return acc ? acc->gas : 1; }
int acc_accelerator_sync_gradients(const acc_accelerator *acc) { return acc ? acc->sync_gradients : 1; }
int acc_accelerator_optimizer_step_was_skipped(const acc_accelerator *acc) {
  return acc ? acc->step_was_skipped : 0;
}
acc_grad_scaler *acc_accelerator_grad_scaler(const acc_accelerator *acc) { return acc ? acc->scaler : NULL; }
int64_t acc_accelerator_step(const acc_accelerator *acc) { return acc ? acc->step : 0; }

/* Ends an fp16 iteration: one scaler update for all the optimizers that stepped. */
static acc_result finish_iteration(acc_accelerator *acc) {
  if (!acc->scaler || acc->it_nstepped == 0) return ACC_OK;
  int32_t inf = acc->it_inf;
  acc->it_agreed = 0;
  acc->it_inf = 0;
  acc->it_nstepped = 0;
  memset(acc->it_stepped, 0, sizeof acc->it_stepped);
  for (int i = 0; i < acc->nmodels; i++) acc->models[i].synced = acc->models[i].unscaled = 0;
  return acc_grad_scaler_update(acc->scaler, inf);
}

acc_result acc__accelerator_end_iteration(acc_accelerator *acc) { return finish_iteration(acc); }

acc_result acc_accelerator_set_seed(acc_accelerator *acc, uint64_t seed, int device_specific) {
  ACC_CHECK(check(acc, "set_seed"));
  if (device_specific) seed += (uint64_t)acc_state_process_index(acc->st);
  acc_set_seed(seed);
  return ACC_OK;
}

/* ---- prepare ---------------------------------------------------------------------------------- */


/* The prepared entry of model m; NULL when m was not prepared. */
static acc__pmodel *find_model(acc_accelerator *acc, const acc_model *m) {
  for (int i = 0; i < acc->nmodels; i++)
    if (acc->models[i].model == m) return &acc->models[i];
  return NULL;
}

acc_result acc_accelerator_refresh_low_precision(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "refresh_low_precision"));
  return acc->ops->refresh_low_precision(acc);
}

const uint16_t *acc_accelerator_low_precision_params(const acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return NULL;
  return acc->ops->low_precision(acc, acc->nmodels ? &acc->models[0] : NULL);
}

const uint16_t *acc_accelerator_low_precision_params_model(const acc_accelerator *acc, const acc_model *model) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return NULL;
  const acc__pmodel *pm = find_model((acc_accelerator *)acc, model);
  return pm ? acc->ops->low_precision(acc, pm) : NULL;
}

acc_result acc_accelerator_prepare_model(acc_accelerator *acc, acc_model *model) {
  ACC_CHECK(check(acc, "prepare_model"));
  if (!model) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_model: model is NULL");
  if (find_model(acc, model)) return ACC_OK; /* preparing twice returns the same object */
  if (acc->nmodels == ACC__MAX_PREPARED)
    return acc__error(ACC_ERR_INVALID_USAGE, "prepare_model: at most %d models", ACC__MAX_PREPARED);
  acc__pmodel *pm = &acc->models[acc->nmodels];
  ACC_CHECK(acc->ops->prepare_model(acc, pm, model));
  acc->model_list[acc->nmodels++] = model;
  return ACC_OK;
}

int acc_accelerator_num_models(const acc_accelerator *acc) {
  return acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) ? acc->nmodels : 0;
}

acc_model *acc_accelerator_model(const acc_accelerator *acc, int index) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) || index < 0 || index >= acc->nmodels) return NULL;
  return acc->models[index].model;
}

acc_result acc_accelerator_no_sync(acc_accelerator *acc, acc_model *model, int on) {
  ACC_CHECK(check(acc, "no_sync"));
  acc__pmodel *pm = find_model(acc, model);
  if (!pm) return acc__error(ACC_ERR_INVALID_ARGUMENT, "no_sync: the model was not prepared (acc_accelerator_prepare_model)");
  pm->no_sync = on != 0;
  return ACC_OK;
}

/* ---- ZeRO ------------------------------------------------------------------------------------ */

static acc_result zero_check_opt(const acc_accelerator *acc, const acc_optimizer *opt) {
  if (acc__optimizer_is_restricted(opt)) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_USAGE,
                    "optimizer_step: with zero_stage %d the optimizer must be prepared "
                    "(acc_accelerator_prepare_optimizer) so that it updates this process's shard", acc->zero);
}

size_t acc__accelerator_sync_buffer_floats(const acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return 0;
  size_t n = 0;
  for (int i = 0; i < acc->nmodels; i++) {
    const acc__pmodel *pm = &acc->models[i];
    if (pm->zflat) n += pm->zshard * (size_t)acc_state_num_processes(acc->st);
    if (pm->zbuf) n += pm->zbuf_n;
    n += acc__grad_sync_staging_floats(pm->gs);
  }
  return n;
}

int acc_accelerator_comm_hook(const acc_accelerator *acc) {
  return acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) ? acc->comm_hook : ACC_COMM_HOOK_NONE;
}

int acc_accelerator_zero_stage(const acc_accelerator *acc) {
  return acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) ? acc->zero : 0;
}

acc_result acc__accelerator_zero_unshard(acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) || !acc->zero) return ACC_OK;
  for (int k = 0; k < acc->nopts; k++) {
    acc__pmodel *pm = find_model(acc, acc_optimizer_model(acc->opts[k]));
    if (pm) ACC_CHECK(acc__pmodel_zero_unshard(pm, acc->st, acc->opts[k]));
  }
  return ACC_OK;
}

acc_result acc__accelerator_zero_reshard(acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) || !acc->zero) return ACC_OK;
  for (int k = 0; k < acc->nopts; k++) {
    acc__pmodel *pm = find_model(acc, acc_optimizer_model(acc->opts[k]));
    if (pm) ACC_CHECK(acc__pmodel_zero_reshard(pm, acc->st, acc->opts[k]));
  }
  return ACC_OK;
}

static int find_ptr(void *const *arr, int n, const void *p) {
  for (int i = 0; i < n; i++)
    if (arr[i] == p) return i;
  return -1;
}

acc_result acc_accelerator_prepare_optimizer(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(check(acc, "prepare_optimizer"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_optimizer: optimizer is NULL");
  if (find_ptr((void *const *)acc->opts, acc->nopts, opt) >= 0) return ACC_OK;
  if (acc->nopts == ACC__MAX_PREPARED)
    return acc__error(ACC_ERR_INVALID_USAGE, "prepare_optimizer: at most %d optimizers", ACC__MAX_PREPARED);
  /* Several optimizers must update disjoint parameters: two would otherwise step the same
   * weights twice per iteration (use parameter groups for different hyperparameters). */
  acc_model *m = acc_optimizer_model(opt);
  if (!m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_optimizer: invalid optimizer handle");
  size_t np = acc_model_num_parameters(m);
  for (int k = 0; k < acc->nopts; k++) {
    if (acc_optimizer_model(acc->opts[k]) != m) continue;
    for (size_t i = 0; i < np; i++)
      if (acc_optimizer_has_parameter(opt, i) && acc_optimizer_has_parameter(acc->opts[k], i))
        return acc__error(ACC_ERR_INVALID_USAGE,
                          "prepare_optimizer: parameter '%s' is already updated by prepared optimizer %d; several "
                          "optimizers must update disjoint parameters (for different learning rates or weight "
                          "decay, use parameter groups: acc_optimizer_create_*_groups)",
                          acc_model_parameter(m, i)->name, k);
  }
  if (acc->zero) {
    acc__pmodel *pm = find_model(acc, m);
    if (!pm)
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "prepare_optimizer: with zero_stage %d, prepare the model first and create "
                        "the optimizer over a prepared model", acc->zero);
    ACC_CHECK(acc__pmodel_zero_reshard(pm, acc->st, opt));
  }
  ACC_CHECK(acc->ops->prepare_optimizer(acc, opt));
  acc->opts[acc->nopts++] = opt;
  return ACC_OK;
}

acc_result acc_accelerator_prepare_scheduler(acc_accelerator *acc, acc_scheduler *sched) {
  ACC_CHECK(check(acc, "prepare_scheduler"));
  if (!sched) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_scheduler: scheduler is NULL");
  if (find_ptr((void *const *)acc->scheds, acc->nscheds, sched) >= 0) return ACC_OK;
  if (acc->nscheds == ACC__MAX_PREPARED)
    return acc__error(ACC_ERR_INVALID_USAGE, "prepare_scheduler: at most %d schedulers", ACC__MAX_PREPARED);
  acc->scheds[acc->nscheds++] = sched;
  return ACC_OK;
}

/* A prepared loader was destroyed: it leaves the accelerator's list (checkpoints, metrics). */
static void forget_loader(void *owner, acc_dataloader *dl) {
  acc_accelerator *acc = owner;
  int k = find_ptr((void *const *)acc->loaders, acc->nloaders, dl);
  if (k < 0) return;
  memmove(&acc->loaders[k], &acc->loaders[k + 1], (size_t)(acc->nloaders - k - 1) * sizeof *acc->loaders);
  acc->nloaders--;
  if (acc->active == dl) {
    acc->active = NULL;
    acc->end_of_dataloader = 0;
  }
  if (acc->joined == dl) acc->joined = NULL;
}

/* The dispatching loader's broadcast: process 0's bytes to every process of the group. */
static acc_result dispatch_broadcast(void *buf, size_t bytes, void *payload) {
  return acc_broadcast((acc_state *)payload, buf, bytes, ACC_U8, 0);
}

acc_result acc_accelerator_prepare_dataloader(acc_accelerator *acc, acc_dataset *ds,
                                              const acc_dataloader_options *opts, acc_dataloader **out) {
  ACC_CHECK(check(acc, "prepare_dataloader"));
  if (!ds || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_dataloader: NULL argument");
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_dataloader_options, ACC_DATALOADER_OPTIONS_VERSION, "prepare_dataloader");
  o.shard.num_processes = acc_state_num_processes(acc->st);
  o.shard.process_index = acc_state_process_index(acc->st);
  o.shard.split_batches = acc->split_batches;
  o.shard.even_batches = acc->even_batches;
  uint64_t seed = o.seed;
  acc__comm_origin(ACC__ORIGIN_PREPARE, -1);
  ACC_CHECK(acc_broadcast(acc->st, &seed, 1, ACC_I64, 0)); /* process 0's seed everywhere */
  o.seed = seed;
  if (o.dispatch_batches) {
    o.broadcast = dispatch_broadcast;
    o.broadcast_payload = acc->st;
  }
  if (acc->nloaders == acc->cap_loaders) {
    int nc = acc->cap_loaders ? 2 * acc->cap_loaders : 4;
    acc_dataloader **v = acc__realloc(acc->loaders, (size_t)nc * sizeof *v);
    if (!v) return ACC_ERR_NOMEM;
    acc->loaders = v;
    acc->cap_loaders = nc;
  }
  ACC_CHECK(acc__dataloader_create_on(out, ds, &o, acc->dev)); /* device placement */
  acc->loaders[acc->nloaders++] = *out;
  acc__dataloader_set_owner(*out, forget_loader, acc);
  return ACC_OK;
}

acc_result acc__accelerator_parts(acc_accelerator *acc, acc__accel_parts *out) {
  ACC_CHECK(check(acc, "checkpointing"));
  acc__accel_fill_parts(acc, out);
  return ACC_OK;
}

acc__accel_ckpt *acc__accelerator_ckpt(const acc_accelerator *acc) {
  return acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) ? acc->ckpt : NULL;
}

acc_result acc_accelerator_next_batch(acc_accelerator *acc, acc_dataloader *dl, const acc_batch **out) {
  ACC_PROF_SCOPE(ACC_PROF_DATA, "next_batch");
  ACC_CHECK(check(acc, "next_batch"));
  if (!dl || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "next_batch: NULL argument");
  acc_result rc = acc_dataloader_next(dl, out);
  if (rc != ACC_OK) return rc;
  if (*out) {
    acc->active = dl;
    acc->end_of_dataloader = (*out)->end_of_dataloader;
  } else if (acc->active == dl) {
    acc->active = NULL;
    acc->end_of_dataloader = 0;
  }
  return ACC_OK;
}

acc_result acc_accelerator_next_batch_joined(acc_accelerator *acc, acc_dataloader *dl,
                                             const acc_batch **out, int *more) {
  ACC_CHECK(check(acc, "next_batch_joined"));
  if (!dl || !out || !more)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "next_batch_joined: NULL argument");
  *out = NULL;
  *more = 0;
  const acc_batch *b = NULL;
  acc_result rc = ACC_OK;
  char msg[512] = "";
  const int joined = acc->joined == dl;
  if (!joined) {
    rc = acc_dataloader_next(dl, &b);
    if (rc != ACC_OK) snprintf(msg, sizeof msg, "%s", acc_last_error());
  }
  /* has a batch now, has one after it, failed: summed over the processes */
  int64_t v[3] = {rc == ACC_OK && b, rc == ACC_OK && b && !b->end_of_dataloader, rc != ACC_OK};
  acc__comm_origin(ACC__ORIGIN_JOIN, 0);
  ACC_CHECK(acc_all_reduce(acc->st, v, v, 3, ACC_I64, ACC_SUM));
  if (v[2] > 0) { /* every process learns which one failed and why (the highest-numbered one) */
    const int rank = acc_state_process_index(acc->st), n = acc_state_num_processes(acc->st);
    int32_t who = rc != ACC_OK ? rank + 1 : 0;
    acc__comm_origin(ACC__ORIGIN_JOIN, 1);
    acc_result xrc = acc_all_reduce(acc->st, &who, &who, 1, ACC_I32, ACC_MAX);
    struct {
      int32_t rc;
      char msg[1020];
    } e;
    memset(&e, 0, sizeof e);
    if (xrc == ACC_OK && who >= 1 && who <= n) {
      if (who - 1 == rank) {
        e.rc = (int32_t)rc;
        snprintf(e.msg, sizeof e.msg, "%s", msg);
      }
      acc__comm_origin(ACC__ORIGIN_JOIN, 2);
      xrc = acc_broadcast(acc->st, &e, sizeof e, ACC_U8, who - 1);
    }
    if (rc != ACC_OK) return acc__error(rc, "%s", msg);
    if (xrc != ACC_OK) return acc__error_context(xrc, "next_batch_joined: %lld other process(es) could not load "
                                                 "their next batch", (long long)v[2]);
    e.msg[sizeof e.msg - 1] = 0;
    return acc__error(ACC_ERR_REMOTE, "next_batch_joined: process %d could not load its next batch: %s%s",
                      (int)who - 1, e.msg, v[2] > 1 ? " (and other processes failed too)" : "");
  }
  if (rc != ACC_OK) return acc__error(rc, "%s", msg);
  if (!joined && !b) acc->joined = dl;
  if (v[0] == 0) { /* every process has run out: the epoch is over */
    acc->joined = NULL;
    if (acc->active == dl) {
      acc->active = NULL;
      acc->end_of_dataloader = 0;
    }
    return ACC_OK;
  }
  *more = 1;
  *out = b;
  acc->active = dl;
  acc->end_of_dataloader = v[1] == 0; /* nobody has a batch after this step */
  return ACC_OK;
}

/* ---- a training step ------------------------------------------------------------------------------ */

acc_result acc_accelerator_accumulate(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "accumulate"));
  ACC_CHECK(finish_iteration(acc)); /* optimizers not stepped last iteration: update the scaler now */
  if (acc->sync_with_dataloader && acc->active && acc->end_of_dataloader) {
    acc->step = 0;
    acc->sync_gradients = 1;
  } else {
    acc->step++;
    acc->sync_gradients = (acc->step % acc->gas) == 0;
  }
  return ACC_OK;
}

acc_result acc_accelerator_set_gradient_accumulation_steps(acc_accelerator *acc, int steps) {
  ACC_CHECK(check(acc, "set_gradient_accumulation_steps"));
  if (steps < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "set_gradient_accumulation_steps: %d must be at least 1", steps);
  acc->gas = steps;
  return ACC_OK;
}

acc_result acc_accelerator_set_sync_gradients(acc_accelerator *acc, int sync) {
  ACC_CHECK(check(acc, "set_sync_gradients"));
  acc->sync_gradients = sync != 0;
  return ACC_OK;
}

acc_result acc_accelerator_set_sync_each_batch(acc_accelerator *acc, int on) {
  ACC_CHECK(check(acc, "set_sync_each_batch"));
  if (on && acc->zero >= 2)
    return acc__error(ACC_ERR_INVALID_USAGE, "set_sync_each_batch: ZeRO stage 2 shards the averaged gradients, so "
                      "they cannot be averaged before the last batch of a window; use stage 0 or 1");
  acc->sync_each_batch = on != 0;
  return ACC_OK;
}

float acc_accelerator_backward_scale(const acc_accelerator *acc) {
  if (!acc) return 1.0f;
  float s = 1.0f / (float)acc->gas;
  if (acc->scaler && acc_grad_scaler_enabled(acc->scaler)) s *= acc_grad_scaler_scale(acc->scaler);
  return s;
}

static acc_result need_model(const acc_accelerator *acc, const char *fn) {
  if (acc->nmodels) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_USAGE, "%s: prepare the model first (acc_accelerator_prepare_model)", fn);
}

static acc_result prepared(acc_accelerator *acc, const acc_model *model, const char *fn, acc__pmodel **out) {
  *out = find_model(acc, model);
  if (*out) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the model was not prepared in this accelerator "
                    "(acc_accelerator_prepare_model)", fn);
}

acc_result acc_accelerator_grad_ready_model(acc_accelerator *acc, acc_model *model, size_t index) {
  ACC_CHECK(check(acc, "grad_ready"));
  acc__pmodel *pm;
  ACC_CHECK(prepared(acc, model, "grad_ready", &pm));
  if ((!acc->sync_gradients && !acc->sync_each_batch) || pm->no_sync) return ACC_OK;
  if (acc->mp == ACC_PRECISION_FP16) return ACC_OK; /* rounding happens in backward(): no overlap */
  /* One model's buckets at a time: with overlap its thread owns the process group until its
   * sync is finished. */
  if (acc->inflight && acc->inflight != pm)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "grad_ready: prepared model %d still has gradients in flight; finish its sync "
                      "(acc_accelerator_backward_model) before marking another model's parameters",
                      (int)(acc->inflight - acc->models));
  ACC_CHECK(acc__pmodel_grad_ready(pm, index));
  if (pm->gs) acc->inflight = pm;
  return ACC_OK;
}

acc_result acc_accelerator_grad_ready(acc_accelerator *acc, size_t index) {
  ACC_CHECK(check(acc, "grad_ready"));
  ACC_CHECK(need_model(acc, "grad_ready"));
  return acc_accelerator_grad_ready_model(acc, acc->models[0].model, index);
}

static acc_result sync_model(acc_accelerator *acc, acc__pmodel *pm) {
  if (pm->no_sync) return ACC_OK;
  if (acc->inflight == pm) acc->inflight = NULL;
  ACC_CHECK(acc->ops->sync_model(acc, pm));
  pm->synced = 1;
  return ACC_OK;
}

acc_result acc_accelerator_backward(acc_accelerator *acc) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "backward_sync");
  ACC_CHECK(check(acc, "backward"));
  ACC_CHECK(need_model(acc, "backward"));
  if (!acc->sync_gradients && !acc->sync_each_batch) return ACC_OK;
  if (acc->sync_gradients) ACC_CHECK(finish_iteration(acc)); /* new gradients: the previous iteration is over */
  /* every model not under no_sync, in prepare order; first the one whose overlap thread holds
   * the process group (every process marked the same parameters, so it is the same everywhere) */
  acc__pmodel *first = acc->inflight;
  if (first) ACC_CHECK(sync_model(acc, first));
  for (int i = 0; i < acc->nmodels; i++)
    if (&acc->models[i] != first) ACC_CHECK(sync_model(acc, &acc->models[i]));
  return ACC_OK;
}

acc_result acc_accelerator_backward_model(acc_accelerator *acc, acc_model *model) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "backward_sync");
  ACC_CHECK(check(acc, "backward_model"));
  acc__pmodel *pm;
  ACC_CHECK(prepared(acc, model, "backward_model", &pm));
  if (!acc->sync_gradients && !acc->sync_each_batch) return ACC_OK;
  if (acc->sync_gradients) ACC_CHECK(finish_iteration(acc));
  if (acc->inflight && acc->inflight != pm)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "backward_model: prepared model %d still has gradients in flight (grad_ready); finish its "
                      "sync first", (int)(acc->inflight - acc->models));
  return sync_model(acc, pm);
}

acc_result acc_accelerator_unscale_gradients(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "unscale_gradients"));
  if (!acc->sync_gradients) return ACC_OK; /* the gradients are unscaled once, when final */
  if (!acc->scaler || !acc_grad_scaler_enabled(acc->scaler)) return ACC_OK;
  return acc->ops->unscale(acc);
}

/* The models the all-model clipping covers: every prepared model not under no_sync. */
static int clip_models(acc_accelerator *acc, acc_model **ms) {
  int n = 0;
  for (int i = 0; i < acc->nmodels; i++)
    if (!acc->models[i].no_sync) ms[n++] = acc->models[i].model;
  return n;
}

static acc_result clip_norm(acc_accelerator *acc, acc_model **ms, int n, float max_norm, double norm_type,
                            float *total_norm) {
  /* Inside an accumulation window the gradients are partial (and, under fp16, still scaled):
   * clipping them, or unscaling them before the rest is added, would be wrong. */
  if (!acc->sync_gradients) {
    if (total_norm) *total_norm = 0.0f;
    return ACC_OK;
  }
  ACC_CHECK(acc_accelerator_unscale_gradients(acc));
  return acc->ops->clip_grad_norm(acc, ms, n, max_norm, norm_type, total_norm);
}

acc_result acc_accelerator_clip_grad_norm(acc_accelerator *acc, float max_norm, double norm_type,
                                          float *total_norm) {
  ACC_CHECK(check(acc, "clip_grad_norm"));
  ACC_CHECK(need_model(acc, "clip_grad_norm"));
  acc_model *ms[ACC__MAX_PREPARED];
  int n = clip_models(acc, ms);
  return clip_norm(acc, ms, n, max_norm, norm_type, total_norm);
}

acc_result acc_accelerator_clip_grad_norm_model(acc_accelerator *acc, acc_model *model, float max_norm,
                                                double norm_type, float *total_norm) {
  ACC_CHECK(check(acc, "clip_grad_norm_model"));
  acc__pmodel *pm;
  ACC_CHECK(prepared(acc, model, "clip_grad_norm_model", &pm));
  acc_model *ms[1] = {model};
  return clip_norm(acc, ms, 1, max_norm, norm_type, total_norm);
}

acc_result acc_accelerator_clip_grad_value(acc_accelerator *acc, float clip_value) {
  ACC_CHECK(check(acc, "clip_grad_value"));
  ACC_CHECK(need_model(acc, "clip_grad_value"));
  if (!acc->sync_gradients) return ACC_OK; /* partial gradients: see clip_grad_norm */
  ACC_CHECK(acc_accelerator_unscale_gradients(acc));
  acc_model *ms[ACC__MAX_PREPARED];
  int n = clip_models(acc, ms);
  return acc->ops->clip_grad_value(acc, ms, n, clip_value);
}

acc_result acc_accelerator_optimizer_step(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_PROF_SCOPE(ACC_PROF_OPTIM, "optimizer_step");
  ACC_CHECK(check(acc, "optimizer_step"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_step: optimizer is NULL");
  if (!acc->sync_gradients) return ACC_OK;
  if (acc->zero) ACC_CHECK(zero_check_opt(acc, opt));
  acc__pmodel *pm = find_model(acc, acc_optimizer_model(opt));
  if (pm && pm->no_sync)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "optimizer_step: the optimizer's model (prepared model %d) is under no_sync, so its gradients "
                      "are this process's partial sums; end no_sync and call backward before stepping it",
                      (int)(pm - acc->models));
  if (!acc->scaler || !acc_grad_scaler_enabled(acc->scaler)) {
    acc->step_was_skipped = 0;
    ACC_CHECK(acc->ops->optimizer_step(acc, opt, 0));
    return acc->ops->after_step(acc, pm);
  }
  int k = find_ptr((void *const *)acc->opts, acc->nopts, opt);
  if (k < 0)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "optimizer_step: under fp16 the optimizer must be prepared (acc_accelerator_prepare_optimizer) "
                      "so the loss scale is updated once per iteration");
  if (acc->it_stepped[k])
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "optimizer_step: prepared optimizer %d already stepped in this iteration (call "
                      "acc_accelerator_accumulate at the start of every batch)", k);
  /* Once per iteration, whatever the number of optimizers: unscale every gradient, then agree on
   * overflow. Gradients were averaged, so an inf anywhere is already everywhere; the all-reduce
   * makes the decision identical on every process in every case (e.g. a program that skipped
   * backward()). */
  if (!acc->it_agreed) {
    ACC_CHECK(acc_accelerator_unscale_gradients(acc));
    int32_t inf = acc_grad_scaler_found_inf(acc->scaler) ? 1 : 0;
    acc__comm_origin(ACC__ORIGIN_FP16_CHECK, 0);
    ACC_CHECK(acc_all_reduce(acc->st, &inf, &inf, 1, ACC_I32, ACC_MAX));
    acc->it_inf = inf;
    acc->it_agreed = 1;
    acc->step_was_skipped = inf != 0;
    ACC_CHECK(acc->ops->agree_overflow(acc, inf));
  }
  if (!acc->it_inf) {
    ACC_CHECK(acc->ops->optimizer_step(acc, opt, 1));
    ACC_CHECK(acc->ops->after_step(acc, pm));
  }
  acc->it_stepped[k] = 1;
  acc->it_nstepped++;
  /* The scaler is updated once, when every prepared optimizer has stepped (else at the next
   * accumulate() or save_state()). */
  if (acc->it_nstepped == acc->nopts) return finish_iteration(acc);
  return ACC_OK;
}

acc_result acc_accelerator_optimizer_zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(check(acc, "optimizer_zero_grad"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_zero_grad: optimizer is NULL");
  if (!acc->sync_gradients) return ACC_OK;
  return acc->ops->zero_grad(acc, opt);
}

acc_result acc_accelerator_scheduler_step(acc_accelerator *acc, acc_scheduler *sched) {
  ACC_CHECK(check(acc, "scheduler_step"));
  if (!sched) return acc__error(ACC_ERR_INVALID_ARGUMENT, "scheduler_step: scheduler is NULL");
  if (!acc->step_sched_with_opt) return acc_scheduler_step(sched);
  if (!acc->sync_gradients) return ACC_OK;
  if (acc->step_was_skipped) return ACC_OK;
  int n = acc->split_batches ? 1 : acc_state_num_processes(acc->st);
  for (int i = 0; i < n; i++) ACC_CHECK(acc_scheduler_step(sched));
  return ACC_OK;
}

/* ---- metrics ---------------------------------------------------------------------------------------- */

acc_result acc_accelerator_all_gather(acc_accelerator *acc, const void *send, void *recv, size_t count,
                                  acc_dtype dtype) {
  ACC_CHECK(check(acc, "gather"));
  return acc_all_gather(acc->st, send, recv, count, dtype);
}

acc_result acc_accelerator_all_reduce(acc_accelerator *acc, const void *send, void *recv, size_t count,
                                  acc_dtype dtype, acc_op op) {
  ACC_CHECK(check(acc, "reduce"));
  return acc_all_reduce(acc->st, send, recv, count, dtype, op);
}

static acc_result gather_for_metrics_host(acc_accelerator *acc, const void *send, int64_t n_samples,
                                              size_t sample_elems, acc_dtype dtype, void *recv,
                                              int64_t capacity, int64_t *n_out) {
  ACC_CHECK(check(acc, "gather_for_metrics"));
  size_t es = acc_dtype_size(dtype);
  if (!es) return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: unknown dtype %d", (int)dtype);
  if (n_samples < 0 || !n_out || (n_samples > 0 && !send) || capacity < 0 || (capacity > 0 && !recv))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: bad arguments (n_samples %lld, capacity %lld)",
                      (long long)n_samples, (long long)capacity);
  /* A prepared loader on the last batch of its epoch, whose batches did not come through
   * acc_accelerator_next_batch: its padding duplicates cannot be dropped, the metric would
   * silently count them. Every process sees the same loader state, so all fail alike. */
  for (int i = 0; i < acc->nloaders; i++) {
    acc_dataloader *dl = acc->loaders[i];
    if (dl == acc->active || !acc_dataloader_end_of_dataloader(dl) || acc_dataloader_remainder(dl) <= 0) continue;
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "gather_for_metrics: prepared data loader %d is on the last batch of its epoch, which holds "
                      "padding samples, but its batches were not taken with acc_accelerator_next_batch, so the "
                      "padding cannot be dropped; iterate it with acc_accelerator_next_batch", i);
  }
  size_t sample_bytes = es * sample_elems;
  int n = acc_state_num_processes(acc->st);
  /* the per-process counts first, so the samples land in the reused buffer without a copy */
  int64_t counts_small[16], *counts = n <= 16 ? counts_small : acc__calloc((size_t)n, sizeof *counts);
  if (!counts) return ACC_ERR_NOMEM;
  int64_t mine = n_samples, total = 0, mx = 0;
  acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 0);
  acc_result rc = acc_all_gather(acc->st, &mine, counts, 1, ACC_I64);
  for (int r = 0; rc == ACC_OK && r < n; r++) {
    if (counts[r] < 0 || (sample_bytes && counts[r] > (int64_t)(SIZE_MAX / 2 / sample_bytes) / n))
      rc = acc__error(ACC_ERR_MISMATCH, "gather_for_metrics: process %d reports %lld samples", r,
                      (long long)counts[r]);
    else {
      total += counts[r];
      if (counts[r] > mx) mx = counts[r];
    }
  }
  int64_t keep = total;
  if (rc == ACC_OK && acc->active && acc->end_of_dataloader) keep = acc_dataloader_gather_keep(acc->active, total);
  if (rc == ACC_OK && keep > capacity)
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: recv holds %lld samples but %lld were gathered",
                    (long long)capacity, (long long)keep);
  /* every process contributes mx samples (padded), gathered into one buffer owned by the
   * accelerator and grown only when needed */
  size_t need = (size_t)mx * sample_bytes * (size_t)(n + 1);
  if (rc == ACC_OK && need > acc->metrics_cap) {
    void *nb = acc__realloc(acc->metrics_buf, need);
    if (!nb) rc = ACC_ERR_NOMEM;
    else {
      acc->metrics_buf = nb;
      acc->metrics_cap = need;
    }
  }
  /* a local failure (capacity, memory) on one process must not leave the others in the gather */
  int32_t bad = rc != ACC_OK;
  acc_result arc = ACC_OK;
  if (rc != ACC_ERR_MISMATCH && rc != ACC_ERR_REMOTE && rc != ACC_ERR_TIMEOUT && rc != ACC_ERR_BACKEND) {
    acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 1); /* the group is usable: tell the others */
    arc = acc_all_reduce(acc->st, &bad, &bad, 1, ACC_I32, ACC_MAX);
  }
  if (rc == ACC_OK && arc != ACC_OK) rc = arc;
  if (rc == ACC_OK && bad)
    rc = acc__error(ACC_ERR_REMOTE, "gather_for_metrics failed on another process (see its error)");
  if (rc == ACC_OK && mx > 0) {
    unsigned char *mine_buf = acc->metrics_buf, *all = mine_buf + (size_t)mx * sample_bytes;
    if (n_samples) memcpy(mine_buf, send, (size_t)n_samples * sample_bytes);
    acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 2);
    rc = acc_all_gather(acc->st, mine_buf, all, (size_t)mx * sample_bytes, ACC_U8);
    int64_t off = 0;
    for (int r = 0; rc == ACC_OK && r < n && off < keep; r++) {
      int64_t take = counts[r] < keep - off ? counts[r] : keep - off;
      memcpy((unsigned char *)recv + (size_t)off * sample_bytes, all + (size_t)r * (size_t)mx * sample_bytes,
             (size_t)take * sample_bytes);
      off += take;
    }
  }
  if (rc == ACC_OK) *n_out = keep;
  if (counts != counts_small) acc__free(counts);
  return rc;
}

static acc_result pad_across_processes_host(acc_accelerator *acc, void *buf, int64_t n_samples,
                                                size_t sample_elems, acc_dtype dtype, double pad_value,
                                                int pad_first, int64_t capacity, int64_t *n_out) {
  ACC_CHECK(check(acc, "pad_across_processes"));
  size_t es = acc_dtype_size(dtype);
  if (!es || !n_out || n_samples < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "pad_across_processes: bad arguments");
  int64_t mx = n_samples;
  acc__comm_origin(ACC__ORIGIN_PAD, 0);
  ACC_CHECK(acc_all_reduce(acc->st, &mx, &mx, 1, ACC_I64, ACC_MAX));
  if (mx > capacity)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "pad_across_processes: buf holds %lld samples but must hold %lld after padding",
                      (long long)capacity, (long long)mx);
  *n_out = mx;
  if (mx == n_samples) return ACC_OK;
  size_t sb = es * sample_elems, pad = (size_t)(mx - n_samples);
  unsigned char *b = buf;
  if (pad_first) memmove(b + pad * sb, b, (size_t)n_samples * sb);
  unsigned char *dst = pad_first ? b : b + (size_t)n_samples * sb;
  unsigned char one[16];
  switch (dtype) {
    case ACC_F32: { float v = (float)pad_value; memcpy(one, &v, 4); break; }
    case ACC_F64: { memcpy(one, &pad_value, 8); break; }
    case ACC_F16: { uint16_t v = acc__f32_to_f16((float)pad_value); memcpy(one, &v, 2); break; }
    case ACC_BF16: { uint16_t v = acc__f32_to_bf16((float)pad_value); memcpy(one, &v, 2); break; }
    case ACC_I32: { int32_t v = (int32_t)pad_value; memcpy(one, &v, 4); break; }
    case ACC_I64: { int64_t v = (int64_t)pad_value; memcpy(one, &v, 8); break; }
    default: { uint8_t v = (uint8_t)pad_value; one[0] = v; break; }
  }
  for (size_t i = 0; i < pad * sample_elems; i++) memcpy(dst + i * es, one, es);
  return ACC_OK;
}

/* Device buffers (src/device/devio.h): staged through host memory around the host versions. */
acc_result acc_accelerator_gather_for_metrics(acc_accelerator *acc, const void *send, int64_t n_samples,
                                              size_t sample_elems, acc_dtype dtype, void *recv,
                                              int64_t capacity, int64_t *n_out) {
  size_t sb = acc_dtype_size(dtype) * sample_elems;
  int dsend = n_samples > 0 && acc__devio_find(send), drecv = capacity > 0 && acc__devio_find(recv);
  if ((!dsend && !drecv) || !sb || !n_out)
    return gather_for_metrics_host(acc, send, n_samples, sample_elems, dtype, recv, capacity, n_out);
  void *hs = dsend ? acc__malloc((size_t)n_samples * sb) : NULL;
  void *hr = drecv ? acc__malloc((size_t)capacity * sb) : NULL;
  acc_result rc = (dsend && !hs) || (drecv && !hr) ? ACC_ERR_NOMEM : ACC_OK;
  if (rc == ACC_OK && dsend) rc = acc__devio_to_host(hs, send, (size_t)n_samples * sb);
  /* a local failure still joins the collectives, with no samples and no room: the gathered
   * samples then exceed the room, which fails every process (its "failed on another process") */
  acc_result grc =
      rc == ACC_OK ? gather_for_metrics_host(acc, dsend ? hs : send, n_samples, sample_elems, dtype,
                                             drecv ? hr : recv, capacity, n_out)
                   : gather_for_metrics_host(acc, NULL, 0, sample_elems, dtype, NULL, 0, n_out);
  if (rc == ACC_OK) rc = grc;
  if (rc == ACC_OK && drecv) rc = acc__devio_from_host(recv, hr, (size_t)*n_out * sb);
  acc__free(hs);
  acc__free(hr);
  return rc;
}

acc_result acc_accelerator_pad_across_processes(acc_accelerator *acc, void *buf, int64_t n_samples,
                                                size_t sample_elems, acc_dtype dtype, double pad_value,
                                                int pad_first, int64_t capacity, int64_t *n_out) {
  size_t sb = acc_dtype_size(dtype) * sample_elems;
  if (!sb || !n_out || capacity <= 0 || n_samples < 0 || !acc__devio_find(buf))
    return pad_across_processes_host(acc, buf, n_samples, sample_elems, dtype, pad_value, pad_first,
                                     capacity, n_out);
  void *h = acc__malloc((size_t)capacity * sb);
  acc_result rc = h ? ACC_OK : ACC_ERR_NOMEM;
  int64_t n_in = n_samples < capacity ? n_samples : capacity;
  if (rc == ACC_OK) rc = acc__devio_to_host(h, buf, (size_t)n_in * sb);
  acc_result prc = pad_across_processes_host(acc, rc == ACC_OK ? h : NULL, n_samples, sample_elems,
                                             dtype, pad_value, pad_first,
                                             rc == ACC_OK ? capacity : 0, n_out);
  if (rc == ACC_OK) rc = prc;
  if (rc == ACC_OK) rc = acc__devio_from_host(buf, h, (size_t)*n_out * sb);
  acc__free(h);
  return rc;
}

/* ---- process control through the accelerator ------------------------------------------------------ */

int acc_accelerator_process_index(const acc_accelerator *acc) {
  return acc ? acc_state_process_index(acc->st) : 0;
}
int acc_accelerator_local_process_index(const acc_accelerator *acc) {
  return acc ? acc_state_local_process_index(acc->st) : 0;
}
int acc_accelerator_num_processes(const acc_accelerator *acc) {
  return acc ? acc_state_num_processes(acc->st) : 1;
}
int acc_accelerator_is_main_process(const acc_accelerator *acc) {
  return acc ? acc_state_is_main_process(acc->st) : 1;
}
int acc_accelerator_is_local_main_process(const acc_accelerator *acc) {
  return acc ? acc_state_is_local_main_process(acc->st) : 1;
}
acc_result acc_accelerator_wait_for_everyone(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "wait_for_everyone"));
  return acc_wait_for_everyone(acc->st);
}
acc_result acc_accelerator_main_process_first_begin(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "main_process_first_begin"));
  return acc_main_process_first_begin(acc->st);
}
acc_result acc_accelerator_main_process_first_end(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "main_process_first_end"));
  return acc_main_process_first_end(acc->st);
}
int acc_accelerator_print(const acc_accelerator *acc, const char *fmt, ...) {
  if (acc && !acc_state_is_main_process(acc->st)) return 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
  return n;
}
acc_result acc_accelerator_split_between_processes(const acc_accelerator *acc, size_t n, int apply_padding,
                                                   acc_split *out) {
  ACC_CHECK(check(acc, "split_between_processes"));
  return acc_split_between_processes(acc->st, n, apply_padding, out);
}

acc_result acc_accelerator_scheduler_steps(const acc_accelerator *acc, const acc_dataloader *dl, int64_t num_epochs,
                                           double warmup_fraction, int64_t *num_training_steps,
                                           int64_t *num_warmup_steps) {
  ACC_CHECK(check(acc, "scheduler_steps"));
  if (!num_training_steps)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "scheduler_steps: num_training_steps is NULL");
  int64_t len = acc_dataloader_len(dl);
  if (len < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "scheduler_steps: the loader's length is unknown (NULL loader or iterable dataset); use "
                      "acc_scheduler_training_steps with your own count of batches per epoch");
  int nproc = acc_state_num_processes(acc->st);
  if (!acc->step_sched_with_opt) /* the scheduler steps once per call, i.e. per batch */
    return acc_scheduler_training_steps(len, num_epochs, 1, 1, 1, warmup_fraction, num_training_steps,
                                        num_warmup_steps);
  if (!acc->sync_with_dataloader) { /* windows run across epochs: one step per gas batches overall */
    if (num_epochs < 0 || (num_epochs && len > INT64_MAX / num_epochs))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "scheduler_steps: num_epochs %lld out of range",
                        (long long)num_epochs);
    int64_t t = 0;
    ACC_CHECK(acc_scheduler_training_steps(len * num_epochs / acc->gas, 1, 1, nproc, acc->split_batches,
                                           warmup_fraction, &t, num_warmup_steps));
    *num_training_steps = t;
    return ACC_OK;
  }
  return acc_scheduler_training_steps(len, num_epochs, acc->gas, nproc, acc->split_batches, warmup_fraction,
                                      num_training_steps, num_warmup_steps);
}
