/* The training calls on device memory (acc__train_device_ops, train/accel.h): one prepared model,
 * no ZeRO; the work is in train_sync.c (prepare, gradient averaging), train_optim.c (optimizer,
 * fp16, clipping, low precision) and train_ckpt.c (host staging for checkpoints).
 *
 * bf16/fp16 tables (acc_model_add_flat_typed over device memory, typed.c): the model's parameters
 * are the library's float32 master weights and float32 gradients on the device, so everything
 * below runs on them unchanged; the conversions are kernels on the compute stream: the program's
 * gradients widened before the average (float32 all-reduce: float32 accumulation), the average
 * rounded back into them, the master weights rounded into the program's parameters after the
 * broadcast, every step and a load. */
#include <string.h>

#include "accelerate.h"
#include "train/accel.h"
#include "train/train.h"
#include "train/model_internal.h"
#include "train/powersgd.h"

/* Process 0's parameters reach every process through host staging, the gradient buckets are
 * averaged on the device, the low-precision copy is device memory. */
static acc_result prepare_model(acc_accelerator *acc, acc__pmodel *pm, acc_model *model) {
  if (acc->nmodels)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "prepare_model: this accelerator trains on %s and already has a prepared model; "
                      "several models are supported on the CPU only for now",
                      acc__device_name(acc->dev->dev));
  if (acc->comm_hook != ACC_COMM_HOOK_NONE && acc->comm_hook != ACC_COMM_HOOK_POWERSGD)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "prepare_model: comm_hook fp16/bf16 (gradient compression) is supported for "
                      "gradients in host memory only, and this accelerator trains on %s; unset "
                      "comm_hook (ACCELERATE_COMM_HOOK) or use power_sgd",
                      acc__device_name(acc->dev->dev));
  const int typed = acc__typed_any(model);
  if (typed) ACC_CHECK(acc__typed_check_place(model, acc->dev, "prepare_model"));
  const char *missing = acc__model_missing_grad(model);
  if (missing)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "prepare_model: parameter '%s' takes a gradient but none is attached; on %s, attach the "
                      "gradient buffers (acc_model_set_flat_grads / acc_model_set_grad) before preparing the model",
                      missing, acc__device_name(acc->dev->dev));
  /* typed tables: the program's values (set after registration) become the master weights, process
   * 0's are broadcast, and come back rounded into every program's buffer */
  if (typed) ACC_CHECK(acc__typed_params_in(model));
  ACC_CHECK(acc__dev_prepare_model(acc, model));
  if (typed) { /* rounded into the program's buffers: done when prepare returns (docs/porting.md) */
    ACC_CHECK(acc__typed_params_out(model));
    ACC_CHECK(acc__dstream_sync(acc->dev->dev, acc->dev->stream));
  }
  memset(pm, 0, sizeof *pm);
  pm->model = model;
  pm->st = acc->st;
  pm->grad_gen = acc__model_grad_gen(model);
  acc_result rc = acc__grad_sync_create(&pm->gs, acc->st, model, acc->bucket_cap, acc->overlap);
  if (rc == ACC_OK) rc = acc__grad_sync_use_device(pm->gs, acc->dev);
  /* PowerSGD on the host staging of the buckets (its state is host memory) */
  if (rc == ACC_OK && acc->comm_hook == ACC_COMM_HOOK_POWERSGD)
    rc = acc__powersgd_create(&pm->psgd, acc->st, model, acc->psgd_rank, acc->psgd_start);
  if (rc == ACC_OK && pm->psgd) rc = acc__grad_sync_set_device_hook(pm->gs, acc__powersgd_reduce_host, pm->psgd);
  if (rc == ACC_OK && acc->want_low_precision) rc = acc__dev_low_precision_alloc(acc, model);
  if (rc != ACC_OK) acc__pmodel_free(pm);
  return rc;
}

static acc_result sync_model(acc_accelerator *acc, acc__pmodel *pm) {
  if (acc__model_grad_gen(pm->model) != pm->grad_gen)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "backward: gradients were attached or replaced after the model was prepared on %s; "
                      "on a device attach them before acc_accelerator_prepare_model",
                      acc__device_name(acc->dev->dev));
  const int typed = acc__typed_any(pm->model);
  if (typed) {
    acc__typed_grads_done(pm->model); /* new gradients of this backward: convert again */
    ACC_CHECK(acc__typed_grads_in(pm->model, "backward"));
  }
  acc_result rc = acc->mp == ACC_PRECISION_FP16 ? acc__dev_round_grads_f16(acc) : ACC_OK;
  if (rc == ACC_OK) rc = acc__grad_sync_finish(pm->gs);
  if (typed) acc__typed_ready_clear(pm->model);
  ACC_CHECK(rc);
  acc__powersgd_step_done(pm->psgd);
  return typed ? acc__typed_grads_out(pm->model) : ACC_OK;
}

static acc_result unscale(acc_accelerator *acc) {
  if (!acc->nmodels || acc->models[0].no_sync || acc_grad_scaler_is_unscaled(acc->scaler))
    return ACC_OK;
  ACC_CHECK(acc__typed_grads_in(acc->models[0].model, "unscale_gradients")); /* no backward: this step's */
  return acc__dev_unscale(acc);
}

static acc_result clip_grad_norm(acc_accelerator *acc, acc_model **ms, int n, float max_norm,
                                 double norm_type, float *total_norm) {
  for (int i = 0; i < n; i++) ACC_CHECK(acc__typed_grads_in(ms[i], "clip_grad_norm"));
  if (n) return acc__dev_clip_grad_norm(acc, max_norm, norm_type, total_norm);
  if (total_norm) *total_norm = 0.0f;
  return ACC_OK;
}

static acc_result clip_grad_value(acc_accelerator *acc, acc_model **ms, int n, float clip_value) {
  for (int i = 0; i < n; i++) ACC_CHECK(acc__typed_grads_in(ms[i], "clip_grad_value"));
  return n ? acc__dev_clip_grad_value(acc, clip_value) : ACC_OK;
}

static acc_result optimizer_step(acc_accelerator *acc, acc_optimizer *opt, int fp16) {
  ACC_CHECK(acc__typed_grads_in(acc_optimizer_model(opt), "optimizer_step")); /* no backward: this step's */
  return acc__dev_optimizer_step(acc, opt, fp16);
}

/* The low-precision copy and the program's bf16/fp16 parameters of typed tables, from the
 * (master) weights. */
static acc_result refresh_low_precision(acc_accelerator *acc) {
  if (acc->nmodels) {
    acc->models[0].lp_gen++;
    ACC_CHECK(acc__typed_params_out(acc->models[0].model));
  }
  return acc__dev_refresh_low_precision(acc);
}

static acc_result after_step(acc_accelerator *acc, acc__pmodel *pm) {
  (void)pm; /* one model */
  return refresh_low_precision(acc);
}

static acc_result zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(acc__dev_zero_grad(acc, opt));
  return acc__typed_zero_grads(acc_optimizer_model(opt), opt); /* and the program's own gradients */
}

static const uint16_t *low_precision(const acc_accelerator *acc, const acc__pmodel *pm) {
  (void)pm;
  return acc__dev_low_precision(acc);
}

/* Every call that touches the program's buffers, in the program's stream order (its stream,
 * acc_accelerator_set_program_stream): after its queued work, before its next. */
static acc_result in_order(acc_accelerator *acc, acc_result rc) {
  return rc == ACC_OK ? acc__dev_prog_leave(acc->dev) : rc;
}

static acc_result o_sync_model(acc_accelerator *acc, acc__pmodel *pm) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, sync_model(acc, pm));
}

static acc_result o_unscale(acc_accelerator *acc) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, unscale(acc));
}

static acc_result o_clip_grad_norm(acc_accelerator *acc, acc_model **ms, int n, float max_norm, double norm_type,
                                   float *total_norm) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, clip_grad_norm(acc, ms, n, max_norm, norm_type, total_norm));
}

static acc_result o_clip_grad_value(acc_accelerator *acc, acc_model **ms, int n, float clip_value) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, clip_grad_value(acc, ms, n, clip_value));
}

static acc_result o_optimizer_step(acc_accelerator *acc, acc_optimizer *opt, int fp16) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, optimizer_step(acc, opt, fp16));
}

static acc_result o_after_step(acc_accelerator *acc, acc__pmodel *pm) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, after_step(acc, pm));
}

static acc_result o_zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, zero_grad(acc, opt));
}

static acc_result o_refresh_low_precision(acc_accelerator *acc) {
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  return in_order(acc, refresh_low_precision(acc));
}

const acc__train_ops acc__train_device_ops = {
    .name = "device",
    .prepare_model = prepare_model,
    .prepare_optimizer = acc__dev_prepare_optimizer,
    .sync_model = o_sync_model,
    .unscale = o_unscale,
    .agree_overflow = acc__dev_agree_overflow,
    .clip_grad_norm = o_clip_grad_norm,
    .clip_grad_value = o_clip_grad_value,
    .optimizer_step = o_optimizer_step,
    .after_step = o_after_step,
    .zero_grad = o_zero_grad,
    .refresh_low_precision = o_refresh_low_precision,
    .low_precision = low_precision,
};
