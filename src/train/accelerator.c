/* The Accelerator: ties the process state, the gradient buckets, the optimizer/scheduler/scaler
 * and the prepared data loaders together with Accelerate's rules. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/collcheck.h"
#include "core/env.h"
#include "core/log.h"
#include "core/profile.h"
#include "data/data_internal.h"
#include "device/devio.h"
#include "state/state.h"
#include "train/accel.h"
#include "train/accel_device.h"
#include "train/grad_sync.h"
#include "train/train.h"

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
    ACC_CHECK(acc__env_enum("ACCELERATE_COMM_HOOK", &v, &set)); /* no|fp16|bf16|power_sgd = 0..3 */
    hook = set ? v : ACC_COMM_HOOK_NONE;
  }
  if (hook < ACC_COMM_HOOK_NONE || hook > ACC_COMM_HOOK_POWERSGD)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "comm_hook is %d: choose ACC_COMM_HOOK_NONE, _FP16, _BF16 or _POWERSGD", hook);
  static const char *const hook_names[] = {"no", "fp16", "bf16", "power_sgd"};
  if (hook != ACC_COMM_HOOK_NONE && zero != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "comm_hook %s with zero_stage %ld: gradient compression applies to the "
                      "all-reduce of zero_stage 0 only; choose one of the two",
                      hook_names[hook], zero);
  long psgd_rank = 1, psgd_start = 1000; /* torch's PowerSGDState defaults */
  if (hook == ACC_COMM_HOOK_POWERSGD) {
    long v = 0;
    set = 0;
    ACC_CHECK(acc__env_int("ACCELERATE_POWERSGD_RANK", &v, &set));
    if (set) psgd_rank = v;
    set = 0;
    ACC_CHECK(acc__env_int("ACCELERATE_POWERSGD_START_ITER", &v, &set));
    if (set) psgd_start = v;
  }
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
  acc->psgd_rank = (int)psgd_rank;
  acc->psgd_start = psgd_start;
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
  ACC_CHECK(acc__accel_check(acc, "set_seed"));
  if (device_specific) seed += (uint64_t)acc_state_process_index(acc->st);
  acc_set_seed(seed);
  return ACC_OK;
}

/* ---- prepare ---------------------------------------------------------------------------------- */


acc__pmodel *acc__accel_find_model(acc_accelerator *acc, const acc_model *m) {
  for (int i = 0; i < acc->nmodels; i++)
    if (acc->models[i].model == m) return &acc->models[i];
  return NULL;
}

acc_result acc_accelerator_refresh_low_precision(acc_accelerator *acc) {
  ACC_CHECK(acc__accel_check(acc, "refresh_low_precision"));
  return acc->ops->refresh_low_precision(acc);
}

const uint16_t *acc_accelerator_low_precision_params(const acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return NULL;
  return acc->ops->low_precision(acc, acc->nmodels ? &acc->models[0] : NULL);
}

const uint16_t *acc_accelerator_low_precision_params_model(const acc_accelerator *acc, const acc_model *model) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR)) return NULL;
  const acc__pmodel *pm = acc__accel_find_model((acc_accelerator *)acc, model);
  return pm ? acc->ops->low_precision(acc, pm) : NULL;
}

acc_result acc_accelerator_prepare_model(acc_accelerator *acc, acc_model *model) {
  ACC_CHECK(acc__accel_check(acc, "prepare_model"));
  if (!model) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_model: model is NULL");
  if (acc__accel_find_model(acc, model)) return ACC_OK; /* preparing twice returns the same object */
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
  ACC_CHECK(acc__accel_check(acc, "no_sync"));
  acc__pmodel *pm = acc__accel_find_model(acc, model);
  if (!pm) return acc__error(ACC_ERR_INVALID_ARGUMENT, "no_sync: the model was not prepared (acc_accelerator_prepare_model)");
  pm->no_sync = on != 0;
  return ACC_OK;
}

/* ---- ZeRO ------------------------------------------------------------------------------------ */

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
    acc__pmodel *pm = acc__accel_find_model(acc, acc_optimizer_model(acc->opts[k]));
    if (pm) ACC_CHECK(acc__pmodel_zero_unshard(pm, acc->st, acc->opts[k]));
  }
  return ACC_OK;
}

acc_result acc__accelerator_zero_reshard(acc_accelerator *acc) {
  if (!acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) || !acc->zero) return ACC_OK;
  for (int k = 0; k < acc->nopts; k++) {
    acc__pmodel *pm = acc__accel_find_model(acc, acc_optimizer_model(acc->opts[k]));
    if (pm) ACC_CHECK(acc__pmodel_zero_reshard(pm, acc->st, acc->opts[k]));
  }
  return ACC_OK;
}

acc_result acc_accelerator_prepare_optimizer(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(acc__accel_check(acc, "prepare_optimizer"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_optimizer: optimizer is NULL");
  if (acc__accel_find_ptr((void *const *)acc->opts, acc->nopts, opt) >= 0) return ACC_OK;
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
  ACC_CHECK(acc->ops->prepare_optimizer(acc, opt)); /* a device refuses ZeRO's sharded optimizer */
  if (acc->zero) {
    acc__pmodel *pm = acc__accel_find_model(acc, m);
    if (!pm)
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "prepare_optimizer: with zero_stage %d, prepare the model first and create "
                        "the optimizer over a prepared model", acc->zero);
    ACC_CHECK(acc__pmodel_zero_reshard(pm, acc->st, opt));
  }
  acc->opts[acc->nopts++] = opt;
  return ACC_OK;
}

acc_result acc_accelerator_prepare_scheduler(acc_accelerator *acc, acc_scheduler *sched) {
  ACC_CHECK(acc__accel_check(acc, "prepare_scheduler"));
  if (!sched) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_scheduler: scheduler is NULL");
  if (acc__accel_find_ptr((void *const *)acc->scheds, acc->nscheds, sched) >= 0) return ACC_OK;
  if (acc->nscheds == ACC__MAX_PREPARED)
    return acc__error(ACC_ERR_INVALID_USAGE, "prepare_scheduler: at most %d schedulers", ACC__MAX_PREPARED);
  acc->scheds[acc->nscheds++] = sched;
  return ACC_OK;
}

/* A prepared loader was destroyed: it leaves the accelerator's list (checkpoints, metrics). */
static void forget_loader(void *owner, acc_dataloader *dl) {
  acc_accelerator *acc = owner;
  int k = acc__accel_find_ptr((void *const *)acc->loaders, acc->nloaders, dl);
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

static acc_result prepare_dataloader(acc_accelerator *acc, acc_dataset *ds, const acc_dataloader_options *opts,
                                     acc_dataloader **out);

acc_result acc_accelerator_prepare_dataloader(acc_accelerator *acc, acc_dataset *ds,
                                              const acc_dataloader_options *opts, acc_dataloader **out) {
  acc_result rc = prepare_dataloader(acc, ds, opts, out);
  /* take_dataset: the loader owns the dataset from the call on, also when it fails */
  if (rc != ACC_OK && acc__dataloader_opts_take(opts)) acc_dataset_destroy(ds);
  return rc;
}

static acc_result prepare_dataloader(acc_accelerator *acc, acc_dataset *ds, const acc_dataloader_options *opts,
                                     acc_dataloader **out) {
  if (out) *out = NULL;
  ACC_CHECK(acc__accel_check(acc, "prepare_dataloader"));
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
  ACC_CHECK(acc__accel_check(acc, "checkpointing"));
  acc__accel_fill_parts(acc, out);
  return ACC_OK;
}

acc__accel_ckpt *acc__accelerator_ckpt(const acc_accelerator *acc) {
  return acc__handle_ok(acc, ACC__HANDLE_ACCELERATOR) ? acc->ckpt : NULL;
}

/* A loader made with acc_dataloader_create (not prepared, not sharded by hand) in a run of several
 * processes gives every process the whole data set: training "works" with duplicated data and no
 * speed-up. Legal (the same on purpose, e.g. an evaluation every process runs in full), so a
 * warning, once per accelerator, from the main process. */
static void warn_unprepared(acc_accelerator *acc, const acc_dataloader *dl) {
  if (acc->warned_unprepared || acc__accel_find_ptr((void *const *)acc->loaders, acc->nloaders, dl) >= 0) return;
  const int np = acc_state_num_processes(acc->st);
  if (np <= 1 || acc__dataloader_num_processes(dl) > 1) return;
  acc->warned_unprepared = 1;
  acc__log(ACC_LOG_WARNING, "next_batch: this data loader was not prepared by the accelerator and the run has %d "
           "processes, so every process iterates the whole data set (the same batches on each, no speed-up); create "
           "it with acc_accelerator_prepare_dataloader instead of acc_dataloader_create (said once)", np);
}

acc_result acc_accelerator_next_batch(acc_accelerator *acc, acc_dataloader *dl, const acc_batch **out) {
  ACC_PROF_SCOPE(ACC_PROF_DATA, "next_batch");
  ACC_CHECK(acc__accel_check(acc, "next_batch"));
  if (!dl || !out)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "next_batch: NULL argument: %s is NULL", !dl ? "the loader (dl)" : "out");
  warn_unprepared(acc, dl);
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
  ACC_CHECK(acc__accel_check(acc, "next_batch_joined"));
  if (!dl || !out || !more)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "next_batch_joined: NULL argument");
  warn_unprepared(acc, dl);
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
