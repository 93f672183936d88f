/* Mixed precision: array conversions, autocast dtype, low-precision parameter copies, and the
 * dynamic loss scaler (PyTorch GradScaler semantics). */
#include <math.h>
#include <string.h>

#include "core/internal.h"


static acc_result check_buffers(const char *fn, const void *dst, const void *src, size_t n) {
  if (n && (!dst || !src))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: dst or src is NULL with n = %zu", fn, n);
  return ACC_OK;
}

acc_result acc_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
  ACC_CHECK(check_buffers("acc_f32_to_f16", dst, src, n));
  acc__f32_to_half_n(dst, src, n, ACC_F16);
  return ACC_OK;
}

acc_result acc_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
  ACC_CHECK(check_buffers("acc_f16_to_f32", dst, src, n));
  acc__half_to_f32_n(dst, src, n, ACC_F16);
  return ACC_OK;
}

acc_result acc_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  ACC_CHECK(check_buffers("acc_f32_to_bf16", dst, src, n));
  acc__f32_to_half_n(dst, src, n, ACC_BF16);
  return ACC_OK;
}

acc_result acc_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  ACC_CHECK(check_buffers("acc_bf16_to_f32", dst, src, n));
  acc__half_to_f32_n(dst, src, n, ACC_BF16);
  return ACC_OK;
}

acc_dtype acc_autocast_dtype(acc_mixed_precision mp) {
  switch (mp) {
    case ACC_PRECISION_FP16: return ACC_F16;
    case ACC_PRECISION_BF16: return ACC_BF16;
    default: return ACC_F32;
  }
}

acc_result acc_precision_copy_params(const acc_model *m, acc_dtype dtype, void *dst, size_t dst_numel) {
  if (!m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_precision_copy_params: model is NULL");
  if (dtype != ACC_F16 && dtype != ACC_BF16 && dtype != ACC_F32)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_precision_copy_params: dtype %s is not supported (expected f16, bf16 or f32)",
                      acc_dtype_name(dtype));
  size_t total = acc_model_numel(m);
  if (dst_numel < total)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_precision_copy_params: dst holds %zu elements but the model has %zu", dst_numel,
                      total);
  if (total && !dst) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_precision_copy_params: dst is NULL");
  size_t off = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (dtype == ACC_F32) {
      memcpy((float *)dst + off, p->data, p->numel * sizeof(float));
    } else {
      uint16_t *d = (uint16_t *)dst + off;
      if (dtype == ACC_F16)
        for (size_t k = 0; k < p->numel; k++) d[k] = acc__f32_to_f16(p->data[k]);
      else
        for (size_t k = 0; k < p->numel; k++) d[k] = acc__f32_to_bf16(p->data[k]);
    }
    off += p->numel;
  }
  return ACC_OK;
}

/* ---- GradScaler -------------------------------------------------------------------------- */

struct acc_grad_scaler {
  uint32_t magic;
  acc_grad_scaler_options opts;
  float scale;
  int64_t growth_tracker;
  int unscaled;  /* unscale() ran since the last update() */
  int found_inf; /* its local result */
};

static acc_result check_scaler(const acc_grad_scaler *s, const char *fn) {
  ACC_CHECK(acc__check_handle(s, ACC__HANDLE_GRAD_SCALER, fn));
  return ACC_OK;
}

acc_result acc_grad_scaler_create(acc_grad_scaler **out, const acc_grad_scaler_options *opts) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_create: out is NULL");
  *out = NULL;
  acc_grad_scaler_options o = ACC_GRAD_SCALER_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_grad_scaler_options, ACC_GRAD_SCALER_OPTIONS_VERSION, "acc_grad_scaler_create");
  if (!(isfinite(o.init_scale) && o.init_scale > 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_create: init_scale %g must be finite and > 0",
                      (double)o.init_scale);
  if (!(o.growth_factor > 1.0f) || !isfinite(o.growth_factor))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_create: growth_factor %g must be > 1",
                      (double)o.growth_factor);
  if (!(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_create: backoff_factor %g must be in (0, 1)",
                      (double)o.backoff_factor);
  if (o.growth_interval <= 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_create: growth_interval %lld must be > 0",
                      (long long)o.growth_interval);
  acc_grad_scaler *s = acc__calloc(1, sizeof *s);
  if (!s) return ACC_ERR_NOMEM;
  s->magic = ACC__MAGIC_GRAD_SCALER;
  s->opts = o;
  s->scale = o.init_scale;
  *out = s;
  return ACC_OK;
}

void acc_grad_scaler_destroy(acc_grad_scaler *s) {
  if (!acc__handle_ok(s, ACC__HANDLE_GRAD_SCALER)) return;
  s->magic = ACC__MAGIC_DEAD;
  acc__free(s);
}

int acc_grad_scaler_enabled(const acc_grad_scaler *s) {
  return acc__handle_ok(s, ACC__HANDLE_GRAD_SCALER) && s->opts.enabled;
}

float acc_grad_scaler_scale(const acc_grad_scaler *s) {
  return acc_grad_scaler_enabled(s) ? s->scale : 1.0f;
}

acc_result acc_grad_scaler_unscale(acc_grad_scaler *s, acc_model *m, int *found_inf) {
  ACC_CHECK(check_scaler(s, "acc_grad_scaler_unscale"));
  if (!m || !found_inf)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_unscale: model or found_inf is NULL");
  *found_inf = 0;
  if (!s->opts.enabled) return ACC_OK;
  if (s->unscaled)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_grad_scaler_unscale: gradients were already unscaled since the last update(); "
                      "call acc_grad_scaler_update after the optimizer step before unscaling again");
  /* PyTorch: inv_scale = float(1 / double(scale)); grad *= inv_scale; the inf/NaN check looks at
   * the value before the multiplication. */
  float inv = (float)(1.0 / (double)s->scale);
  int found = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad) continue;
    float *g = p->grad;
    for (size_t k = 0; k < p->numel; k++) {
      if (!isfinite(g[k])) found = 1;
      g[k] *= inv;
    }
  }
  s->unscaled = 1;
  s->found_inf = found;
  *found_inf = found;
  return ACC_OK;
}

/* The accelerator's unscale of one of several models in an iteration: no "already unscaled"
 * check (each model once, tracked by the accelerator), the inf flag accumulated over them. */
acc_result acc__grad_scaler_unscale_more(acc_grad_scaler *s, acc_model *m, int *found_inf) {
  ACC_CHECK(check_scaler(s, "unscale_gradients"));
  int was = s->unscaled, prev = s->found_inf;
  s->unscaled = 0;
  acc_result rc = acc_grad_scaler_unscale(s, m, found_inf);
  if (rc != ACC_OK) {
    s->unscaled = was;
    return rc;
  }
  s->found_inf = s->found_inf || (was && prev);
  return ACC_OK;
}

int acc_grad_scaler_is_unscaled(const acc_grad_scaler *s) {
  return acc__handle_ok(s, ACC__HANDLE_GRAD_SCALER) && s->unscaled;
}

int acc_grad_scaler_found_inf(const acc_grad_scaler *s) {
  return acc__handle_ok(s, ACC__HANDLE_GRAD_SCALER) && s->unscaled && s->found_inf;
}

acc_result acc_grad_scaler_update(acc_grad_scaler *s, int found_inf) {
  ACC_CHECK(check_scaler(s, "acc_grad_scaler_update"));
  s->unscaled = 0;
  s->found_inf = 0;
  if (!s->opts.enabled) return ACC_OK;
  if (found_inf) {
    s->scale *= s->opts.backoff_factor;
    s->growth_tracker = 0;
  } else {
    int64_t good = s->growth_tracker + 1;
    if (good >= s->opts.growth_interval) { /* >=: a restored tracker may exceed a smaller interval */
      float grown = s->scale * s->opts.growth_factor;
      if (isfinite(grown)) s->scale = grown;
      s->growth_tracker = 0;
    } else {
      s->growth_tracker = good;
    }
  }
  return ACC_OK;
}

acc_result acc_grad_scaler_get_state(const acc_grad_scaler *s, float *scale, int64_t *growth_tracker) {
  ACC_CHECK(check_scaler(s, "acc_grad_scaler_get_state"));
  if (scale) *scale = s->scale;
  if (growth_tracker) *growth_tracker = s->growth_tracker;
  return ACC_OK;
}

acc_result acc_grad_scaler_set_state(acc_grad_scaler *s, float scale, int64_t growth_tracker) {
  ACC_CHECK(check_scaler(s, "acc_grad_scaler_set_state"));
  if (!(isfinite(scale) && scale > 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_set_state: scale %g must be finite and > 0",
                      (double)scale);
  if (growth_tracker < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_grad_scaler_set_state: growth_tracker %lld must be >= 0",
                      (long long)growth_tracker);
  s->scale = scale;
  s->growth_tracker = growth_tracker;
  s->unscaled = 0;
  s->found_inf = 0;
  return ACC_OK;
}

/* Training on a device (src/train/train_optim.c): the device kernels unscaled the gradients;
 * the scaler records it as acc_grad_scaler_unscale does. */
void acc__grad_scaler_mark_unscaled(acc_grad_scaler *s, int found_inf) {
  if (!acc__handle_ok(s, ACC__HANDLE_GRAD_SCALER)) return;
  s->unscaled = 1;
  s->found_inf = found_inf != 0;
}
