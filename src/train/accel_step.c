/* The Accelerator's training step: accumulation windows, backward (gradient averaging),
 * unscaling and clipping, optimizer and scheduler steps with the fp16 iteration rules. */
#include <string.h>

#include "backend/collcheck.h"
#include "core/profile.h"
#include "state/state.h"
#include "train/accel.h"
#include "train/model_internal.h"
#include "train/train.h"

static acc_result zero_check_opt(const acc_accelerator *acc, const acc_optimizer *opt) {
  if (acc__optimizer_is_restricted(opt)) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_USAGE,
                    "optimizer_step: with zero_stage %d the optimizer must be prepared "
                    "(acc_accelerator_prepare_optimizer) so that it updates this process's shard", acc->zero);
}

/* ---- a training step ------------------------------------------------------------------------------ */

acc_result acc_accelerator_accumulate(acc_accelerator *acc) {
  ACC_CHECK(acc__accel_check(acc, "accumulate"));
  ACC_CHECK(acc__accelerator_end_iteration(acc)); /* optimizers not stepped last iteration: update the scaler now */
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
  ACC_CHECK(acc__accel_check(acc, "set_gradient_accumulation_steps"));
  if (steps < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "set_gradient_accumulation_steps: %d must be at least 1", steps);
  acc->gas = steps;
  return ACC_OK;
}

acc_result acc_accelerator_set_sync_gradients(acc_accelerator *acc, int sync) {
  ACC_CHECK(acc__accel_check(acc, "set_sync_gradients"));
  acc->sync_gradients = sync != 0;
  return ACC_OK;
}

acc_result acc_accelerator_set_sync_each_batch(acc_accelerator *acc, int on) {
  ACC_CHECK(acc__accel_check(acc, "set_sync_each_batch"));
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
  *out = acc__accel_find_model(acc, model);
  if (*out) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the model was not prepared in this accelerator "
                    "(acc_accelerator_prepare_model)", fn);
}

acc_result acc_accelerator_grad_ready_model(acc_accelerator *acc, acc_model *model, size_t index) {
  ACC_CHECK(acc__accel_check(acc, "grad_ready"));
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
  /* the program's queued work (its gradient of this parameter) before the library's, on a device
   * with the program's stream named (no-op otherwise) */
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  /* a bf16/fp16 row: its gradient widened into the float32 gradients now, on the stream its
   * bucket is averaged from */
  if (pm->zero != 1) ACC_CHECK(acc__typed_grad_ready(model, index));
  ACC_CHECK(acc__pmodel_grad_ready(pm, index));
  if (pm->gs) acc->inflight = pm;
  return ACC_OK;
}

size_t acc__accelerator_early_buckets(const acc_accelerator *acc) {
  size_t n = 0;
  for (int i = 0; acc && i < acc->nmodels; i++) n += acc->models[i].early_buckets;
  return n;
}

acc_result acc_accelerator_grad_ready(acc_accelerator *acc, size_t index) {
  ACC_CHECK(acc__accel_check(acc, "grad_ready"));
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
  ACC_CHECK(acc__accel_check(acc, "backward"));
  ACC_CHECK(need_model(acc, "backward"));
  if (!acc->sync_gradients && !acc->sync_each_batch) return ACC_OK;
  if (acc->sync_gradients) ACC_CHECK(acc__accelerator_end_iteration(acc)); /* new gradients: the previous iteration is over */
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
  ACC_CHECK(acc__accel_check(acc, "backward_model"));
  acc__pmodel *pm;
  ACC_CHECK(prepared(acc, model, "backward_model", &pm));
  if (!acc->sync_gradients && !acc->sync_each_batch) return ACC_OK;
  if (acc->sync_gradients) ACC_CHECK(acc__accelerator_end_iteration(acc));
  if (acc->inflight && acc->inflight != pm)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "backward_model: prepared model %d still has gradients in flight (grad_ready); finish its "
                      "sync first", (int)(acc->inflight - acc->models));
  return sync_model(acc, pm);
}

acc_result acc_accelerator_unscale_gradients(acc_accelerator *acc) {
  ACC_CHECK(acc__accel_check(acc, "unscale_gradients"));
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
  ACC_CHECK(acc__accel_check(acc, "clip_grad_norm"));
  ACC_CHECK(need_model(acc, "clip_grad_norm"));
  acc_model *ms[ACC__MAX_PREPARED];
  int n = clip_models(acc, ms);
  return clip_norm(acc, ms, n, max_norm, norm_type, total_norm);
}

acc_result acc_accelerator_clip_grad_norm_model(acc_accelerator *acc, acc_model *model, float max_norm,
                                                double norm_type, float *total_norm) {
  ACC_CHECK(acc__accel_check(acc, "clip_grad_norm_model"));
  acc__pmodel *pm;
  ACC_CHECK(prepared(acc, model, "clip_grad_norm_model", &pm));
  acc_model *ms[1] = {model};
  return clip_norm(acc, ms, 1, max_norm, norm_type, total_norm);
}

acc_result acc_accelerator_clip_grad_value(acc_accelerator *acc, float clip_value) {
  ACC_CHECK(acc__accel_check(acc, "clip_grad_value"));
  ACC_CHECK(need_model(acc, "clip_grad_value"));
  if (!acc->sync_gradients) return ACC_OK; /* partial gradients: see clip_grad_norm */
  ACC_CHECK(acc_accelerator_unscale_gradients(acc));
  acc_model *ms[ACC__MAX_PREPARED];
  int n = clip_models(acc, ms);
  return acc->ops->clip_grad_value(acc, ms, n, clip_value);
}

acc_result acc_accelerator_optimizer_step(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_PROF_SCOPE(ACC_PROF_OPTIM, "optimizer_step");
  ACC_CHECK(acc__accel_check(acc, "optimizer_step"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_step: optimizer is NULL");
  if (!acc->sync_gradients) return ACC_OK;
  if (acc->zero) ACC_CHECK(zero_check_opt(acc, opt));
  acc__pmodel *pm = acc__accel_find_model(acc, acc_optimizer_model(opt));
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
  int k = acc__accel_find_ptr((void *const *)acc->opts, acc->nopts, opt);
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
  if (acc->it_nstepped == acc->nopts) return acc__accelerator_end_iteration(acc);
  return ACC_OK;
}

acc_result acc_accelerator_optimizer_zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(acc__accel_check(acc, "optimizer_zero_grad"));
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_zero_grad: optimizer is NULL");
  if (!acc->sync_gradients) return ACC_OK;
  return acc->ops->zero_grad(acc, opt);
}

acc_result acc_accelerator_scheduler_step(acc_accelerator *acc, acc_scheduler *sched) {
  ACC_CHECK(acc__accel_check(acc, "scheduler_step"));
  if (!sched) return acc__error(ACC_ERR_INVALID_ARGUMENT, "scheduler_step: scheduler is NULL");
  if (!acc->step_sched_with_opt) return acc_scheduler_step(sched);
  if (!acc->sync_gradients) return ACC_OK;
  if (acc->step_was_skipped) return ACC_OK;
  int n = acc->split_batches ? 1 : acc_state_num_processes(acc->st);
  for (int i = 0; i < n; i++) ACC_CHECK(acc_scheduler_step(sched));
  return ACC_OK;
}
