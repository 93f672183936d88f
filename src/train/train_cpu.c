/* The training calls on host memory (acc__train_cpu_ops, train/accel.h): several prepared models,
 * each with its gradient buckets, low-precision copy and ZeRO layout (accel_models.c). */
#include "accelerate.h"
#include "train/accel.h"
#include "train/model_internal.h"

static acc_result prepare_model(acc_accelerator *acc, acc__pmodel *pm, acc_model *model) {
  const int typed = acc__typed_any(model);
  /* typed tables: the program's values (set after registration) become the master weights, and
   * process 0's master weights, broadcast, come back rounded into every program's buffer */
  if (typed) {
    ACC_CHECK(acc__typed_check_place(model, acc->dev, "prepare_model"));
    ACC_CHECK(acc__typed_params_in(model));
  }
  ACC_CHECK(acc__pmodel_init(pm, acc->st, model, acc->bucket_cap, acc->overlap, acc->zero,
                             acc__accel_lp_dtype(acc)));
  if (typed) (void)acc__typed_params_out(model); /* host memory: cannot fail */
  acc_result rc = acc__pmodel_use_comm_hook(pm, acc->comm_hook, acc->psgd_rank, acc->psgd_start);
  if (rc != ACC_OK) acc__pmodel_free(pm);
  return rc;
}

static acc_result prepare_optimizer(acc_accelerator *acc, acc_optimizer *opt) {
  (void)acc;
  (void)opt;
  return ACC_OK; /* the optimizer's state is host memory already */
}

/* typed tables: the program's gradients widened into float32 before the average (float32
 * accumulation) and the average rounded back into them after it */
static acc_result sync_model(acc_accelerator *acc, acc__pmodel *pm) {
  const int typed = acc__typed_any(pm->model);
  if (typed) {
    acc__typed_grads_done(pm->model); /* new gradients of this backward: convert again */
    ACC_CHECK(acc__typed_grads_in(pm->model, "backward"));
  }
  acc_result rc = acc__pmodel_sync(pm, acc->st, acc->mp == ACC_PRECISION_FP16);
  if (typed) acc__typed_ready_clear(pm->model);
  return rc == ACC_OK && typed ? acc__typed_grads_out(pm->model) : rc;
}

/* Every model synchronized in this iteration and not unscaled yet (all of them when backward did
 * not run); a model under no_sync keeps its scaled partial sums. */
static acc_result unscale(acc_accelerator *acc) {
  int any_synced = 0, any_unscaled = 0;
  for (int i = 0; i < acc->nmodels; i++) {
    any_synced |= acc->models[i].synced;
    any_unscaled |= acc->models[i].unscaled;
  }
  if (acc_grad_scaler_is_unscaled(acc->scaler) && !any_unscaled) return ACC_OK; /* the program did */
  for (int i = 0; i < acc->nmodels; i++) {
    acc__pmodel *pm = &acc->models[i];
    if (pm->no_sync || pm->unscaled || (any_synced && !pm->synced)) continue;
    int found_inf = 0;
    ACC_CHECK(acc__typed_grads_in(pm->model, "unscale_gradients")); /* no backward: this step's gradients */
    ACC_CHECK(acc__grad_scaler_unscale_more(acc->scaler, pm->model, &found_inf));
    pm->unscaled = 1;
  }
  return ACC_OK;
}

static acc_result agree_overflow(acc_accelerator *acc, int32_t inf) {
  (void)acc;
  (void)inf;
  return ACC_OK; /* the host reads the agreed flag from the accelerator */
}

static acc_result clip_grad_norm(acc_accelerator *acc, acc_model **ms, int n, float max_norm,
                                 double norm_type, float *total_norm) {
  /* ZeRO: each process holds its shard (zero elsewhere): one all-reduce makes the norm global */
  float norm = 0;
  for (int i = 0; i < n; i++) ACC_CHECK(acc__typed_grads_in(ms[i], "clip_grad_norm"));
  ACC_CHECK(acc__clip_norm_models(acc->zero ? acc->st : NULL, ms, n, max_norm, norm_type, &norm));
  if (total_norm) *total_norm = norm;
  return ACC_OK;
}

static acc_result clip_grad_value(acc_accelerator *acc, acc_model **ms, int n, float clip_value) {
  (void)acc;
  for (int i = 0; i < n; i++) ACC_CHECK(acc__typed_grads_in(ms[i], "clip_grad_value"));
  for (int i = 0; i < n; i++) ACC_CHECK(acc_clip_grad_value(ms[i], clip_value));
  return ACC_OK;
}

static acc_result optimizer_step(acc_accelerator *acc, acc_optimizer *opt, int fp16) {
  (void)acc;
  (void)fp16; /* the host optimizer steps on unscaled gradients either way */
  ACC_CHECK(acc__typed_grads_in(acc_optimizer_model(opt), "optimizer_step")); /* no backward: this step's */
  return acc_optimizer_step(opt);
}

/* Also the program's bf16/fp16 parameters of typed tables, from the master weights. */
static acc_result refresh_low_precision(acc_accelerator *acc) {
  for (int i = 0; i < acc->nmodels; i++) {
    ACC_CHECK(acc__typed_params_out(acc->models[i].model));
    ACC_CHECK(acc__pmodel_refresh_low_precision(&acc->models[i], acc__accel_lp_dtype(acc)));
  }
  return ACC_OK;
}

/* The model's ZeRO shards gathered and its low-precision copy refreshed (every model's for an
 * optimizer over a model that was not prepared). */
static acc_result after_step(acc_accelerator *acc, acc__pmodel *pm) {
  if (!pm) return refresh_low_precision(acc);
  if (acc->zero) ACC_CHECK(acc__pmodel_zero_gather(pm, acc->st));
  ACC_CHECK(acc__typed_params_out(pm->model));
  return acc__pmodel_refresh_low_precision(pm, acc__accel_lp_dtype(acc));
}

static acc_result zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  (void)acc;
  ACC_CHECK(acc_optimizer_zero_grad(opt));
  return acc__typed_zero_grads(acc_optimizer_model(opt), opt); /* and the program's own gradients */
}

static const uint16_t *low_precision(const acc_accelerator *acc, const acc__pmodel *pm) {
  (void)acc;
  return pm ? pm->low_precision : NULL;
}

const acc__train_ops acc__train_cpu_ops = {
    .name = "cpu",
    .prepare_model = prepare_model,
    .prepare_optimizer = prepare_optimizer,
    .sync_model = sync_model,
    .unscale = unscale,
    .agree_overflow = agree_overflow,
    .clip_grad_norm = clip_grad_norm,
    .clip_grad_value = clip_grad_value,
    .optimizer_step = optimizer_step,
    .after_step = after_step,
    .zero_grad = zero_grad,
    .refresh_low_precision = refresh_low_precision,
    .low_precision = low_precision,
};
