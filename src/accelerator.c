/* The Accelerator: ties the process state, the gradient buckets, the optimizer/scheduler/scaler
 * and the prepared data loaders together with Accelerate's rules (spec §4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel_state.h"
#include "collcheck.h"
#include "grad_sync.h"
#include "state.h"

#define ACC_MAGIC_ACCEL 0x41434143u /* "ACAC" */
#define MAX_PREPARED 16

struct acc_accelerator {
  uint32_t magic;
  acc_state *st;
  acc_mixed_precision mp;
  int gas;
  int split_batches, even_batches, step_sched_with_opt, sync_with_dataloader;
  size_t bucket_cap;
  int overlap;
  int64_t step;          /* accumulation counter */
  int sync_gradients;
  int step_was_skipped;
  acc_model *model;
  acc__grad_sync *gs;
  acc_grad_scaler *scaler;
  int want_low_precision;
  uint16_t *low_precision; /* the parameters in the autocast dtype (low_precision_params) */
  acc_optimizer *opts[MAX_PREPARED];
  int nopts;
  acc_scheduler *scheds[MAX_PREPARED];
  int nscheds;
  acc_dataloader *active;     /* loader whose batch is being processed */
  int end_of_dataloader;      /* the active loader's current batch is its last */
  acc_dataloader **loaders;   /* prepared loaders, for save_state / load_state */
  int nloaders, cap_loaders;
  acc__accel_ckpt *ckpt;      /* checkpointing state (src/accel_state.c) */
};

static acc_result check(const acc_accelerator *acc, const char *fn) {
  if (!acc) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: accelerator is NULL", fn);
  if (acc->magic != ACC_MAGIC_ACCEL)
    return acc__error(ACC_ERR_INVALID_USAGE, "%s: invalid accelerator handle (destroyed?)", fn);
  return ACC_OK;
}

acc_result acc_accelerator_create(acc_accelerator **out, const acc_accelerator_options *in) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_create: out is NULL");
  *out = NULL;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  if (in) {
    if (in->size == 0)
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "acc_accelerator_options was not initialized with ACC_ACCELERATOR_OPTIONS_INIT");
    memcpy(&o, in, in->size < sizeof o ? in->size : sizeof o);
  }
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
  acc_state_options so = ACC_STATE_OPTIONS_INIT;
  so.cpu = o.cpu;
  acc_state *st = NULL;
  ACC_CHECK(acc_state_create(&st, &so));
  acc_accelerator *acc = acc__calloc(1, sizeof *acc);
  if (!acc) {
    acc_state_destroy(st);
    return ACC_ERR_NOMEM;
  }
  acc->magic = ACC_MAGIC_ACCEL;
  acc->st = st;
  /* The accelerator's own setting wins; unset, it follows the state (ACCELERATE_MIXED_PRECISION). */
  acc->mp = o.mixed_precision != ACC_UNSET ? (acc_mixed_precision)o.mixed_precision
                                           : acc_state_mixed_precision(st);
  acc->gas = (int)gas;
  acc->split_batches = o.split_batches;
  acc->even_batches = o.even_batches;
  acc->step_sched_with_opt = o.step_scheduler_with_optimizer;
  acc->sync_with_dataloader = o.sync_with_dataloader;
  acc->bucket_cap = o.bucket_cap_bytes ? o.bucket_cap_bytes : (size_t)25 * 1024 * 1024;
  acc->overlap = o.overlap_grad_sync;
  acc->sync_gradients = 1;
  acc->want_low_precision = o.low_precision_params && acc->mp != ACC_PRECISION_NO;
  if (acc->mp == ACC_PRECISION_FP16) {
    acc_result rc = acc_grad_scaler_create(&acc->scaler, o.scaler);
    if (rc != ACC_OK) {
      acc_accelerator_destroy(acc);
      return rc;
    }
  }
  *out = acc;
  return ACC_OK;
}

void acc_accelerator_destroy(acc_accelerator *acc) {
  if (!acc || acc->magic != ACC_MAGIC_ACCEL) return;
  acc__grad_sync_destroy(acc->gs);
  acc__accel_ckpt_free(acc->ckpt);
  acc__free(acc->loaders);
  acc_grad_scaler_destroy(acc->scaler);
  acc__free(acc->low_precision);
  acc_state_destroy(acc->st);
  acc->magic = ACC_MAGIC_DEAD;
  acc__free(acc);
}

acc_state *acc_accelerator_state(const acc_accelerator *acc) { return acc ? acc->st : NULL; }
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

acc_result acc_accelerator_set_seed(acc_accelerator *acc, uint64_t seed, int device_specific) {
  ACC_CHECK(check(acc, "set_seed"));
  if (device_specific) seed += (uint64_t)acc_state_process_index(acc->st);
  acc_set_seed(seed);
  return ACC_OK;
}

/* ---- prepare ---------------------------------------------------------------------------------- */

static acc_result refresh_low_precision(acc_accelerator *acc) {
  if (!acc->low_precision) return ACC_OK;
  return acc_precision_copy_params(acc->model, acc_autocast_dtype(acc->mp), acc->low_precision,
                                   acc_model_numel(acc->model));
}

const uint16_t *acc_accelerator_low_precision_params(const acc_accelerator *acc) {
  return acc ? acc->low_precision : NULL;
}

acc_result acc_accelerator_prepare_model(acc_accelerator *acc, acc_model *model) {
  ACC_CHECK(check(acc, "prepare_model"));
  if (!model) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_model: model is NULL");
  if (acc->model == model) return ACC_OK; /* preparing twice returns the same object */
  if (acc->model)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "prepare_model: this accelerator already has a prepared model; use one model");
  size_t np = acc_model_num_parameters(model);
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(model, i);
    acc__comm_origin(ACC__ORIGIN_PREPARE, (int64_t)i);
    acc_result rc = acc_broadcast(acc->st, p->data, p->numel, ACC_F32, 0);
    if (rc != ACC_OK) return acc__error_context(rc, "prepare_model: broadcasting parameter '%s'", p->name);
  }
  ACC_CHECK(acc__grad_sync_create(&acc->gs, acc->st, model, acc->bucket_cap, acc->overlap));
  acc->model = model;
  if (acc->want_low_precision) {
    acc->low_precision = acc__calloc(acc_model_numel(model), sizeof(uint16_t));
    if (!acc->low_precision) return ACC_ERR_NOMEM;
    ACC_CHECK(refresh_low_precision(acc));
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
  if (acc->nopts == MAX_PREPARED)
    return acc__error(ACC_ERR_INVALID_USAGE, "prepare_optimizer: at most %d optimizers", MAX_PREPARED);
  acc->opts[acc->nopts++] = opt;
  return ACC_OK;
}

acc_result acc_accelerator_prepare_scheduler(acc_accelerator *acc, acc_scheduler *sched) {
  ACC_CHECK(check(acc, "prepare_scheduler"));
  if (!sched) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_scheduler: scheduler is NULL");
  if (find_ptr((void *const *)acc->scheds, acc->nscheds, sched) >= 0) return ACC_OK;
  if (acc->nscheds == MAX_PREPARED)
    return acc__error(ACC_ERR_INVALID_USAGE, "prepare_scheduler: at most %d schedulers", MAX_PREPARED);
  acc->scheds[acc->nscheds++] = sched;
  return ACC_OK;
}

acc_result acc_accelerator_prepare_dataloader(acc_accelerator *acc, acc_dataset *ds,
                                              const acc_dataloader_options *opts, acc_dataloader **out) {
  ACC_CHECK(check(acc, "prepare_dataloader"));
  if (!ds || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "prepare_dataloader: NULL argument");
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  if (opts) {
    if (opts->size == 0)
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "acc_dataloader_options was not initialized with ACC_DATALOADER_OPTIONS_INIT");
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
  }
  o.shard.num_processes = acc_state_num_processes(acc->st);
  o.shard.process_index = acc_state_process_index(acc->st);
  o.shard.split_batches = acc->split_batches;
  o.shard.even_batches = acc->even_batches;
  uint64_t seed = o.seed;
  acc__comm_origin(ACC__ORIGIN_PREPARE, -1);
  ACC_CHECK(acc_broadcast(acc->st, &seed, 1, ACC_I64, 0)); /* process 0's seed everywhere */
  o.seed = seed;
  if (acc->nloaders == acc->cap_loaders) {
    int nc = acc->cap_loaders ? 2 * acc->cap_loaders : 4;
    acc_dataloader **v = acc__realloc(acc->loaders, (size_t)nc * sizeof *v);
    if (!v) return ACC_ERR_NOMEM;
    acc->loaders = v;
    acc->cap_loaders = nc;
  }
  ACC_CHECK(acc_dataloader_create(out, ds, &o));
  acc->loaders[acc->nloaders++] = *out;
  return ACC_OK;
}

acc_result acc__accelerator_parts(acc_accelerator *acc, acc__accel_parts *out) {
  ACC_CHECK(check(acc, "checkpointing"));
  out->st = acc->st;
  out->model = acc->model;
  out->opts = acc->opts;
  out->nopts = acc->nopts;
  out->scheds = acc->scheds;
  out->nscheds = acc->nscheds;
  out->loaders = acc->loaders;
  out->nloaders = acc->nloaders;
  out->scaler = acc->scaler;
  out->step = &acc->step;
  out->ckpt = &acc->ckpt;
  return ACC_OK;
}

acc_result acc_accelerator_next_batch(acc_accelerator *acc, acc_dataloader *dl, const acc_batch **out) {
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

/* ---- a training step ------------------------------------------------------------------------------ */

acc_result acc_accelerator_accumulate(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "accumulate"));
  if (acc->sync_with_dataloader && acc->active && acc->end_of_dataloader) {
    acc->step = 0;
    acc->sync_gradients = 1;
  } else {
    acc->step++;
    acc->sync_gradients = (acc->step % acc->gas) == 0;
  }
  return ACC_OK;
}

float acc_accelerator_backward_scale(const acc_accelerator *acc) {
  if (!acc) return 1.0f;
  float s = 1.0f / (float)acc->gas;
  if (acc->scaler && acc_grad_scaler_enabled(acc->scaler)) s *= acc_grad_scaler_scale(acc->scaler);
  return s;
}

acc_result acc_accelerator_grad_ready(acc_accelerator *acc, size_t index) {
  ACC_CHECK(check(acc, "grad_ready"));
  if (!acc->gs) return acc__error(ACC_ERR_INVALID_USAGE, "grad_ready: prepare the model first");
  if (!acc->sync_gradients) return ACC_OK;
  if (acc->mp == ACC_PRECISION_FP16) return ACC_OK; /* rounding happens in backward(): no overlap */
  return acc__grad_sync_mark_ready(acc->gs, index);
}

static void round_grads_f16(acc_model *m) {
  size_t np = acc_model_num_parameters(m);
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad) continue;
    for (size_t k = 0; k < p->numel; k++) p->grad[k] = acc__f16_to_f32(acc__f32_to_f16(p->grad[k]));
  }
}

acc_result acc_accelerator_backward(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "backward"));
  if (!acc->gs) return acc__error(ACC_ERR_INVALID_USAGE, "backward: prepare the model first (acc_accelerator_prepare_model)");
  if (!acc->sync_gradients) return ACC_OK;
  if (acc->mp == ACC_PRECISION_FP16) round_grads_f16(acc->model);
  return acc__grad_sync_finish(acc->gs);
}

acc_result acc_accelerator_unscale_gradients(acc_accelerator *acc) {
  ACC_CHECK(check(acc, "unscale_gradients"));
  if (!acc->scaler || !acc->model || acc_grad_scaler_is_unscaled(acc->scaler)) return ACC_OK;
  int found_inf = 0;
  return acc_grad_scaler_unscale(acc->scaler, acc->model, &found_inf);
}

acc_result acc_accelerator_clip_grad_norm(acc_accelerator *acc, float max_norm, double norm_type,
                                          float *total_norm) {
  ACC_CHECK(check(acc, "clip_grad_norm"));
  if (!acc->model) return acc__error(ACC_ERR_INVALID_USAGE, "clip_grad_norm: prepare the model first");
  ACC_CHECK(acc_accelerator_unscale_gradients(acc));
  float norm = 0;
  ACC_CHECK(acc_clip_grad_norm(acc->model, max_norm, norm_type, &norm));
  if (total_norm) *total_norm = norm;
  return ACC_OK;
}

acc_result acc_accelerator_clip_grad_value(acc_accelerator *acc, float clip_value) {
  ACC_CHECK(check(acc, "clip_grad_value"));
  if (!acc->model) return acc__error(ACC_ERR_INVALID_USAGE, "clip_grad_value: prepare the model first");
  ACC_CHECK(acc_accelerator_unscale_gradients(acc));
  return acc_clip_grad_value(acc->model, clip_value);
}

acc_result acc_accelerator_optimizer_step(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(check(acc, "optimizer_step"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_step: optimizer is NULL");
  if (!acc->sync_gradients) return ACC_OK;
  if (!acc->scaler || !acc_grad_scaler_enabled(acc->scaler)) {
    acc->step_was_skipped = 0;
    ACC_CHECK(acc_optimizer_step(opt));
    return refresh_low_precision(acc);
  }
  ACC_CHECK(acc_accelerator_unscale_gradients(acc));
  int32_t inf = acc_grad_scaler_found_inf(acc->scaler) ? 1 : 0;
  /* gradients were averaged, so an inf anywhere is already everywhere; the all-reduce makes the
   * decision identical on every process in every case (e.g. a program that skipped backward()). */
  acc__comm_origin(ACC__ORIGIN_FP16_CHECK, 0);
  ACC_CHECK(acc_all_reduce(acc->st, &inf, &inf, 1, ACC_I32, ACC_MAX));
  acc->step_was_skipped = inf != 0;
  if (!inf) {
    ACC_CHECK(acc_optimizer_step(opt));
    ACC_CHECK(refresh_low_precision(acc));
  }
  return acc_grad_scaler_update(acc->scaler, inf);
}

acc_result acc_accelerator_optimizer_zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(check(acc, "optimizer_zero_grad"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_zero_grad: optimizer is NULL");
  if (!acc->sync_gradients) return ACC_OK;
  return acc_optimizer_zero_grad(opt);
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

acc_result acc_accelerator_gather(acc_accelerator *acc, const void *send, void *recv, size_t count,
                                  acc_dtype dtype) {
  ACC_CHECK(check(acc, "gather"));
  return acc_all_gather(acc->st, send, recv, count, dtype);
}

acc_result acc_accelerator_reduce(acc_accelerator *acc, const void *send, void *recv, size_t count,
                                  acc_dtype dtype, acc_op op) {
  ACC_CHECK(check(acc, "reduce"));
  return acc_all_reduce(acc->st, send, recv, count, dtype, op);
}

acc_result acc_accelerator_gather_for_metrics(acc_accelerator *acc, const void *send, int64_t n_samples,
                                              size_t sample_elems, acc_dtype dtype, void *recv,
                                              int64_t capacity, int64_t *n_out) {
  ACC_CHECK(check(acc, "gather_for_metrics"));
  size_t es = acc_dtype_size(dtype);
  if (!es) return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: unknown dtype %d", (int)dtype);
  if (n_samples < 0 || !n_out || (n_samples > 0 && !send))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: bad arguments (n_samples %lld)",
                      (long long)n_samples);
  size_t sample_bytes = es * sample_elems;
  void *all = NULL;
  size_t *sizes = NULL;
  acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 0);
  ACC_CHECK(acc_all_gather_bytes(acc->st, send, (size_t)n_samples * sample_bytes, &all, &sizes));
  size_t total_bytes = 0;
  int n = acc_state_num_processes(acc->st);
  for (int r = 0; r < n; r++) total_bytes += sizes[r];
  int64_t total = sample_bytes ? (int64_t)(total_bytes / sample_bytes) : 0;
  int64_t keep = total;
  if (acc->active && acc->end_of_dataloader) keep = acc_dataloader_gather_keep(acc->active, total);
  acc_result rc = ACC_OK;
  if (keep > capacity) {
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "gather_for_metrics: recv holds %lld samples but %lld were gathered",
                    (long long)capacity, (long long)keep);
  } else {
    if (keep > 0) memcpy(recv, all, (size_t)keep * sample_bytes);
    *n_out = keep;
  }
  acc_free(all);
  acc_free(sizes);
  return rc;
}

acc_result acc_accelerator_pad_across_processes(acc_accelerator *acc, void *buf, int64_t n_samples,
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
