/* The training calls on device memory (acc__train_device_ops, train/accel.h): one prepared model,
 * no ZeRO; the work is in train_sync.c (prepare, gradient averaging), train_optim.c (optimizer,
 * fp16, clipping, low precision) and train_ckpt.c (host staging for checkpoints). */
#include <string.h>

#include "accelerate.h"
#include "train/accel.h"
#include "train/train.h"
#include "train/model_internal.h"

/* Process 0's parameters reach every process through host staging, the gradient buckets are
 * averaged on the device, the low-precision copy is device memory. */
static acc_result prepare_model(acc_accelerator *acc, acc__pmodel *pm, acc_model *model) {
  if (acc->nmodels)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "prepare_model: this accelerator trains on %s and already has a prepared model; "
                      "several models are supported on the CPU only for now",
                      acc__device_name(acc->dev->dev));
  if (acc->comm_hook != ACC_COMM_HOOK_NONE)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "prepare_model: comm_hook (gradient compression) is supported for gradients "
                      "in host memory only, and this accelerator trains on %s; unset comm_hook "
                      "(ACCELERATE_COMM_HOOK)",
                      acc__device_name(acc->dev->dev));
  if (acc__typed_any(model))
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "prepare_model: the model has a bf16/fp16 table (acc_model_add_flat_typed), supported in host "
                      "memory only for now, and this accelerator trains on %s; register float32 parameters (with "
                      "low_precision_params for a bf16/fp16 copy) on a device", acc__device_name(acc->dev->dev));
  const char *missing = acc__model_missing_grad(model);
  if (missing)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "prepare_model: parameter '%s' takes a gradient but none is attached; on %s, attach the "
                      "gradient buffers (acc_model_set_flat_grads / acc_model_set_grad) before preparing the model",
                      missing, acc__device_name(acc->dev->dev));
  ACC_CHECK(acc__dev_prepare_model(acc, model));
  memset(pm, 0, sizeof *pm);
  pm->model = model;
  pm->st = acc->st;
  pm->grad_gen = acc__model_grad_gen(model);
  acc_result rc = acc__grad_sync_create(&pm->gs, acc->st, model, acc->bucket_cap, acc->overlap);
  if (rc == ACC_OK) rc = acc__grad_sync_use_device(pm->gs, acc->dev);
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
  if (acc->mp == ACC_PRECISION_FP16) ACC_CHECK(acc__dev_round_grads_f16(acc));
  return acc__grad_sync_finish(pm->gs);
}

static acc_result unscale(acc_accelerator *acc) {
  if (!acc->nmodels || acc->models[0].no_sync || acc_grad_scaler_is_unscaled(acc->scaler))
    return ACC_OK;
  return acc__dev_unscale(acc);
}

static acc_result clip_grad_norm(acc_accelerator *acc, acc_model **ms, int n, float max_norm,
                                 double norm_type, float *total_norm) {
  (void)ms;
  if (n) return acc__dev_clip_grad_norm(acc, max_norm, norm_type, total_norm);
  if (total_norm) *total_norm = 0.0f;
  return ACC_OK;
}

static acc_result clip_grad_value(acc_accelerator *acc, acc_model **ms, int n, float clip_value) {
  (void)ms;
  return n ? acc__dev_clip_grad_value(acc, clip_value) : ACC_OK;
}

static acc_result after_step(acc_accelerator *acc, acc__pmodel *pm) {
  (void)pm; /* one model: its low-precision copy */
  if (acc->nmodels) acc->models[0].lp_gen++;
  return acc__dev_refresh_low_precision(acc);
}

static acc_result refresh_low_precision(acc_accelerator *acc) {
  if (acc->nmodels) acc->models[0].lp_gen++;
  return acc__dev_refresh_low_precision(acc);
}

static const uint16_t *low_precision(const acc_accelerator *acc, const acc__pmodel *pm) {
  (void)pm;
  return acc__dev_low_precision(acc);
}

const acc__train_ops acc__train_device_ops = {
    .name = "device",
    .prepare_model = prepare_model,
    .prepare_optimizer = acc__dev_prepare_optimizer,
    .sync_model = sync_model,
    .unscale = unscale,
    .agree_overflow = acc__dev_agree_overflow,
    .clip_grad_norm = clip_grad_norm,
    .clip_grad_value = clip_grad_value,
    .optimizer_step = acc__dev_optimizer_step,
    .after_step = after_step,
    .zero_grad = acc__dev_zero_grad,
    .refresh_low_precision = refresh_low_precision,
    .low_precision = low_precision,
};
