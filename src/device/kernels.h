/* The per-element arithmetic of the device kernels, shared by the cpu and fake devices (C) and
 * the CUDA kernels (compiled by nvcc as __host__ __device__). One definition means one order of
 * operations: with fused multiply-add contraction off (the CUDA module is built with
 * --fmad=false; C11 mode does not contract), each result has the same bits everywhere, and the
 * same bits as the library's CPU paths (acc_optimizer_step, acc_grad_scaler_unscale,
 * acc_f32_to_bf16 / acc_f32_to_f16), whose expressions these repeat. Not API. */
#ifndef ACC_DEVICE_KERNELS_H
#define ACC_DEVICE_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "device/device_ops.h"

#ifdef __CUDACC__
#define ACC__KFN static inline __host__ __device__
#else
#define ACC__KFN static inline
#endif

ACC__KFN uint32_t acc__k_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* dst + src * a, rounded twice (the expression of FSDP's host path, fsdp_mem.c) */
ACC__KFN float acc__k_axpy(float d, float s, float a) { return d + s * a; }

ACC__KFN int acc__k_finite(float f) { return (acc__k_bits(f) & 0x7f800000u) != 0x7f800000u; }

ACC__KFN void acc__k_sgd(const acc__sgd_args *a, float scale, size_t k) {
  float g = a->g[k];
  if (a->grad_scale) g = g * scale;
  float w = a->w[k];
  if (!a->has_momentum) {
    a->w[k] = a->decay ? w + a->neg_lr * (g + a->wd * w) : w + a->neg_lr * g;
    return;
  }
  if (a->decay) g = g + a->wd * w;
  float b = a->first ? g : a->buf[k] * a->mom + a->damp1 * g;
  a->buf[k] = b;
  g = a->nesterov ? g + a->mom * b : b;
  a->w[k] = w + a->neg_lr * g;
}

ACC__KFN void acc__k_adamw(const acc__adamw_args *a, float scale, size_t k) {
  float g = a->g[k];
  if (a->grad_scale) g = g * scale;
  float w = a->w[k] * a->decay;
  float m = a->m[k], v = a->v[k];
  /* torch.lerp: start + weight * (end - start) for |weight| < 0.5, else the mirrored form */
  m = fabsf(a->w1) < 0.5f ? m + a->w1 * (g - m) : g - (g - m) * (1.0f - a->w1);
  v = v * a->b2 + a->c2 * g * g;
  const float denom = sqrtf(v) / a->bc2s + a->eps;
  a->m[k] = m;
  a->v[k] = v;
  a->w[k] = w + a->neg_step_size * m / denom;
}

ACC__KFN uint16_t acc__k_f32_to_bf16(float f) {
  uint32_t u = acc__k_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

ACC__KFN uint16_t acc__k_f32_to_f16(float f) {
  uint32_t u = acc__k_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow after rounding: inf */
  if (abs < 0x38800000u) {                                   /* subnormal or zero */
    if (abs < 0x33000000u) return (uint16_t)sign;
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t r = abs - 0x38000000u; /* rebias the exponent, 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

/* f16 bits to fp32: exact (the bits of acc_f16_to_f32). */
ACC__KFN float acc__k_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
      return sign ? -v : v;
    }
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* bf16 bits to fp32: exact (the bits of acc_bf16_to_f32). */
ACC__KFN float acc__k_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A gradient as fp16 arithmetic leaves it: rounded to the nearest f16, back in fp32. */
ACC__KFN float acc__k_round_f16(float g) { return acc__k_f16_to_f32(acc__k_f32_to_f16(g)); }

/* acc_clip_grad_value's clamp: NaN stays NaN. */
ACC__KFN float acc__k_clamp(float g, float c) { return g > c ? c : (g < -c ? -c : g); }

/* Number of partial sums of squares for n elements. */
ACC__KFN size_t acc__norm_partials(size_t n) {
  return (n + ACC__NORM_CHUNK - 1) / ACC__NORM_CHUNK;
}

/* The clip coefficient of acc_clip_grad_norm from the summed squares. */
ACC__KFN void acc__k_norm_finish(double total, float max_norm, float *norm, float *coef) {
  float t = (float)sqrt(total);
  *norm = t;
  *coef = max_norm / (t + 1e-6f);
}

#endif
