/* accelerate-c: mixed precision: f16/bf16 conversions, the autocast dtype, low-precision copies
 * of a model's parameters, and the dynamic loss scaler for fp16 (PyTorch's GradScaler).
 * Nothing here communicates: the accelerator all-reduces the scaler's overflow flag itself.
 * Threads: conversions may run on any thread; a grad scaler is used from one thread at a time. */
#ifndef ACCELERATE_PRECISION_H
#define ACCELERATE_PRECISION_H

#include "common.h"
#include "model.h"
#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conversions ------------------------------------------------------------------------ */

/**
 * Converts n floats to IEEE half (binary16) bits: round to nearest even, overflow to +-inf,
 * infinities and NaN kept (NaN stays a quiet NaN). dst and src must not overlap.
 * Ownership: both buffers belong to the caller. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_f32_to_f16(uint16_t *dst, const float *src, size_t n);
/** Converts n IEEE half values to float (exact). Collective: no. @since 0.1 */
ACC_EXTERN acc_result acc_f16_to_f32(float *dst, const uint16_t *src, size_t n);
/** Converts n floats to bfloat16 bits: round to nearest even, infinities and NaN kept. @since 0.1 */
ACC_EXTERN acc_result acc_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
/** Converts n bfloat16 values to float (exact). Collective: no. @since 0.1 */
ACC_EXTERN acc_result acc_bf16_to_f32(float *dst, const uint16_t *src, size_t n);

/**
 * The dtype a program's kernels should compute in under this mixed-precision mode (what
 * torch.autocast would pick): ACC_F32 for ACC_PRECISION_NO (and unknown values), ACC_F16 for
 * fp16, ACC_BF16 for bf16. Parameters, gradients and optimizer state stay float32.
 * @since 0.1
 */
ACC_EXTERN acc_dtype acc_autocast_dtype(acc_mixed_precision mp);

/**
 * Refreshes a low-precision copy of all of a model's parameters (the fp32 master weights stay in
 * the model): dst receives every parameter converted to dtype, concatenated in registration
 * order (parameter i starts at the sum of the numels of parameters 0..i-1).
 * @param dtype   ACC_F16, ACC_BF16 (dst is uint16_t[]) or ACC_F32 (dst is float[], a plain copy).
 * @param dst_numel capacity of dst in elements; must be >= acc_model_numel(m).
 * Ownership: dst belongs to the caller. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_precision_copy_params(const acc_model *m, acc_dtype dtype, void *dst,
                                                size_t dst_numel);

/* ---- GradScaler -------------------------------------------------------------------------- */

typedef struct acc_grad_scaler acc_grad_scaler;

#define ACC_GRAD_SCALER_OPTIONS_VERSION 1

/** Options for acc_grad_scaler_create; defaults are torch.amp.GradScaler's. */
typedef struct acc_grad_scaler_options {
  size_t size;             /* sizeof(acc_grad_scaler_options), set by the INIT macro */
  uint32_t version;        /* ACC_GRAD_SCALER_OPTIONS_VERSION */
  float init_scale;        /* 65536 */
  float growth_factor;     /* 2.0, must be > 1 */
  float backoff_factor;    /* 0.5, must be in (0, 1) */
  int64_t growth_interval; /* 2000, must be > 0 */
  int enabled;             /* 1; 0: scale() is 1, unscale() does nothing, update() does nothing */
} acc_grad_scaler_options;

#define ACC_GRAD_SCALER_OPTIONS_INIT \
  { sizeof(acc_grad_scaler_options), ACC_GRAD_SCALER_OPTIONS_VERSION, 65536.0f, 2.0f, 0.5f, 2000, 1 }
/** Fills opts with the defaults of `version` (ACC_GRAD_SCALER_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_grad_scaler_options_init(acc_grad_scaler_options *opts, uint32_t version);

/**
 * Creates a loss scaler. opts NULL means all defaults; a struct not initialized with
 * ACC_GRAD_SCALER_OPTIONS_INIT (size 0) is an ACC_ERR_INVALID_USAGE error.
 * Ownership: release with acc_grad_scaler_destroy. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_grad_scaler_create(acc_grad_scaler **out, const acc_grad_scaler_options *opts);
/** Frees the scaler. Accepts NULL. @since 0.1 */
ACC_EXTERN void acc_grad_scaler_destroy(acc_grad_scaler *s);
/** 1 when the scaler is enabled. @since 0.1 */
ACC_EXTERN int acc_grad_scaler_enabled(const acc_grad_scaler *s);
/** The factor to multiply the loss (or the loss gradient) by; 1.0 when disabled or NULL. @since 0.1 */
ACC_EXTERN float acc_grad_scaler_scale(const acc_grad_scaler *s);

/**
 * Unscales every gradient of the model in place (multiplies it by the float reciprocal of the
 * scale, as PyTorch does) and reports in *found_inf whether any gradient element was inf or NaN
 * on THIS process (before unscaling). The accelerator must combine the flag across processes
 * (all-reduce MAX) before deciding to skip the optimizer step, then pass it to update().
 * A second call before update() is ACC_ERR_INVALID_USAGE (PyTorch: "unscale_() has already been
 * called on this optimizer since the last update()"). Disabled: *found_inf = 0, nothing changes.
 * Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_grad_scaler_unscale(acc_grad_scaler *s, acc_model *m, int *found_inf);
/** 1 when unscale() ran since the last update() (so the optimizer step must not unscale again). @since 0.1 */
ACC_EXTERN int acc_grad_scaler_is_unscaled(const acc_grad_scaler *s);
/** The local found_inf of the last unscale() since update(); 0 when none. @since 0.1 */
ACC_EXTERN int acc_grad_scaler_found_inf(const acc_grad_scaler *s);

/**
 * Ends an iteration: with found_inf != 0 the scale is multiplied by backoff_factor and the growth
 * tracker reset to 0; otherwise the tracker is incremented and, when it reaches growth_interval,
 * the scale is multiplied by growth_factor (only if the result is finite) and the tracker reset.
 * Pass the flag combined over all processes. Clears the "unscaled" mark. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_grad_scaler_update(acc_grad_scaler *s, int found_inf);

/** Checkpoint state: the current scale and growth tracker (number of good steps in a row). @since 0.1 */
ACC_EXTERN acc_result acc_grad_scaler_get_state(const acc_grad_scaler *s, float *scale,
                                                int64_t *growth_tracker);
/** Restores state saved by get_state (scale finite and > 0, tracker >= 0); bit-exact. @since 0.1 */
ACC_EXTERN acc_result acc_grad_scaler_set_state(acc_grad_scaler *s, float scale, int64_t growth_tracker);

#ifdef __cplusplus
}
#endif
#endif
