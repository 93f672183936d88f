/* The typed view of a prepared model's low-precision parameter copy: its dtype travels with the
 * bits, and a generation tells a program when a copy it derived from them went stale. */
#include "accelerate.h"
#include "train/accel.h"

acc_result acc_accelerator_low_precision_view(const acc_accelerator *acc, const acc_model *model, acc_dtype expected,
                                              acc_low_precision_view *out) {
  static const char fn[] = "acc_accelerator_low_precision_view";
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  if (expected != ACC_BF16 && expected != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: expected must be ACC_BF16 or ACC_F16, got dtype %d", fn,
                      (int)expected);
  int idx = -1;
  for (int i = 0; i < acc->nmodels && idx < 0; i++)
    if (!model || acc->model_list[i] == model) idx = i;
  const uint16_t *data = idx >= 0 ? acc_accelerator_low_precision_params_model(acc, acc->model_list[idx]) : NULL;
  if (!data)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: %s has no low-precision copy (set low_precision_params with mixed precision fp16 or "
                      "bf16, and prepare the model)", fn, idx < 0 ? "the model was not prepared and" : "the model");
  acc_dtype have = acc__accel_lp_dtype(acc);
  if (have != expected)
    return acc__error(ACC_ERR_MISMATCH, "%s: the low-precision copy holds %s values but the caller expects %s", fn,
                      have == ACC_BF16 ? "bf16" : "fp16", expected == ACC_BF16 ? "bf16" : "fp16");
  out->dtype = have;
  out->data = data;
  out->numel = acc_model_numel(acc->model_list[idx]);
  out->generation = acc->models[idx].lp_gen;
  return ACC_OK;
}

acc_result acc_low_precision_view_to_f32(const acc_low_precision_view *v, float *dst) {
  if (!v || !dst || !v->data)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_low_precision_view_to_f32: NULL view, data or destination");
  if (v->dtype == ACC_BF16) return acc_bf16_to_f32(dst, v->data, v->numel);
  if (v->dtype == ACC_F16) return acc_f16_to_f32(dst, v->data, v->numel);
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_low_precision_view_to_f32: view dtype %d is neither bf16 nor fp16",
                    (int)v->dtype);
}
