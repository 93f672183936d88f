/* Data types, reductions, half-precision conversions, environment parsing, clocks. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/internal.h"

size_t acc_dtype_size(acc_dtype dtype) {
  switch (dtype) {
    case ACC_F32: return 4;
    case ACC_F64: return 8;
    case ACC_F16: return 2;
    case ACC_BF16: return 2;
    case ACC_I32: return 4;
    case ACC_I64: return 8;
    case ACC_U8: return 1;
    case ACC_U64: return 8;
    default: return 0;
  }
}

const char *acc_dtype_name(acc_dtype dtype) {
  static const char *names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "u64"};
  return (unsigned)dtype < ACC_DTYPE_COUNT_ ? names[dtype] : "unknown";
}

const char *acc_op_name(acc_op op) {
  static const char *names[] = {"sum", "mean", "min", "max"};
  return (unsigned)op < ACC_OP_COUNT_ ? names[op] : "unknown";
}

/* ---- half precision ---------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t acc__f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

float acc__bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t acc__f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow (after rounding) -> inf */
  if (abs < 0x38800000u) { /* result is subnormal or zero */
    if (abs < 0x33000000u) return (uint16_t)sign; /* < half of the smallest subnormal */
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24 */
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t r = abs - 0x38000000u; /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

float acc__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* ---- half precision over arrays --------------------------------------------------------- */

/* bf16: branch-free forms of the scalar conversions above (the NaN case is a select), which the
 * compiler vectorizes. */
static void f32_to_bf16_n(uint16_t *restrict dst, const float *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = f32_bits(src[i]);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x0040u;
    dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
  }
}

static void bf16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = bits_f32((uint32_t)src[i] << 16);
}

/* f16 -> f32: branch-free form of acc__f16_to_f32 (normal, subnormal and infinity/NaN values
 * computed, then selected by masks), which the compiler vectorizes. Not the F16C instruction:
 * it turns signaling NaNs quiet, which the scalar conversion and the device kernels do not. */
static void f16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t h = src[i], sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t norm = sign | ((exp + 112u) << 23) | (mant << 13);
    uint32_t special = sign | 0x7f800000u | (mant << 13);
    uint32_t sub = f32_bits((float)(int32_t)mant * (1.0f / 16777216.0f)) | sign; /* mant * 2^-24 */
    uint32_t is_special = 0u - (uint32_t)(exp == 0x1fu), is_sub = 0u - (uint32_t)(exp == 0);
    dst[i] = bits_f32((special & is_special) | (sub & is_sub) | (norm & ~(is_special | is_sub)));
  }
}

/* f32 -> f16: the F16C instruction (vcvtps2ph, round to nearest even) gives acc__f32_to_f16's
 * results, subnormals, overflow to infinity and NaN payloads included (test_unit_common
 * compares them over a sweep of f32 bit patterns); chosen at run time. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) static void f32_to_f16_n_f16c(uint16_t *dst, const float *src,
                                                                   size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  for (; i < n; i++) dst[i] = acc__f32_to_f16(src[i]);
}
static int have_f16c(void) {
  static _Atomic int v = -1; /* every thread that finds -1 computes the same value */
  int x = atomic_load_explicit(&v, memory_order_relaxed);
  if (x < 0) {
    x = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    atomic_store_explicit(&v, x, memory_order_relaxed);
  }
  return x;
}
#else
static int have_f16c(void) { return 0; }
#define f32_to_f16_n_f16c(d, s, n) ((void)0)
#endif

void acc__half_to_f32_n(float *dst, const uint16_t *src, size_t n, acc_dtype dtype) {
  if (dtype == ACC_BF16)
    bf16_to_f32_n(dst, src, n);
  else
    f16_to_f32_n(dst, src, n);
}

void acc__f32_to_half_n(uint16_t *dst, const float *src, size_t n, acc_dtype dtype) {
  if (dtype == ACC_BF16) {
    f32_to_bf16_n(dst, src, n);
  } else if (have_f16c()) {
    f32_to_f16_n_f16c(dst, src, n);
  } else {
    for (size_t i = 0; i < n; i++) dst[i] = acc__f32_to_f16(src[i]);
  }
}

/* ---- reductions -------------------------------------------------------------------------- */

#define REDUCE_LOOP(T)                                                         \
  do {                                                                         \
    T *d = (T *)dst;                                                           \
    const T *s = (const T *)src;                                               \
    if (op == ACC_MIN)                                                         \
      for (size_t i = 0; i < count; i++) d[i] = s[i] < d[i] ? s[i] : d[i];     \
    else if (op == ACC_MAX)                                                    \
      for (size_t i = 0; i < count; i++) d[i] = s[i] > d[i] ? s[i] : d[i];     \
    else                                                                       \
      for (size_t i = 0; i < count; i++) d[i] = (T)(d[i] + s[i]);              \
  } while (0)

/* Half precision: a tile at a time through float, with the array conversions. */
static void reduce_half(uint16_t *d, const uint16_t *s, size_t count, acc_dtype dt, acc_op op) {
  enum { TILE = 1024 };
  float a[TILE], b[TILE];
  for (size_t t = 0; t < count; t += TILE) {
    size_t m = count - t < TILE ? count - t : TILE;
    acc__half_to_f32_n(a, d + t, m, dt);
    acc__half_to_f32_n(b, s + t, m, dt);
    if (op == ACC_MIN)
      for (size_t i = 0; i < m; i++) a[i] = b[i] < a[i] ? b[i] : a[i];
    else if (op == ACC_MAX)
      for (size_t i = 0; i < m; i++) a[i] = b[i] > a[i] ? b[i] : a[i];
    else
      for (size_t i = 0; i < m; i++) a[i] += b[i];
    acc__f32_to_half_n(d + t, a, m, dt);
  }
}

void acc__reduce_inplace(void *dst, const void *src, size_t count, acc_dtype dtype, acc_op op) {
  switch (dtype) {
    case ACC_F32: REDUCE_LOOP(float); break;
    case ACC_F64: REDUCE_LOOP(double); break;
    case ACC_I32: REDUCE_LOOP(int32_t); break;
    case ACC_I64: REDUCE_LOOP(int64_t); break;
    case ACC_U8: REDUCE_LOOP(uint8_t); break;
    case ACC_U64: REDUCE_LOOP(uint64_t); break;
    case ACC_F16:
    case ACC_BF16: reduce_half(dst, src, count, dtype, op); break;
    default: break;
  }
}

void acc__divide(void *buf, size_t count, acc_dtype dtype, int divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case ACC_F32: {
      float *p = buf, inv = 1.0f / (float)divisor;
      /* multiply by the inverse only when it is exact (power of two), else divide: keeps
       * results identical to a single-process mean. */
      if ((divisor & (divisor - 1)) == 0)
        for (size_t i = 0; i < count; i++) p[i] *= inv;
      else
        for (size_t i = 0; i < count; i++) p[i] /= (float)divisor;
      break;
    }
    case ACC_F64: {
      double *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= (double)divisor;
      break;
    }
    case ACC_I32: {
      int32_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= divisor;
      break;
    }
    case ACC_I64: {
      int64_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= divisor;
      break;
    }
    case ACC_U8: {
      uint8_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = (uint8_t)(p[i] / divisor);
      break;
    }
    case ACC_U64: {
      uint64_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= (uint64_t)divisor;
      break;
    }
    case ACC_F16: {
      uint16_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = acc__f32_to_f16(acc__f16_to_f32(p[i]) / (float)divisor);
      break;
    }
    case ACC_BF16: {
      uint16_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = acc__f32_to_bf16(acc__bf16_to_f32(p[i]) / (float)divisor);
      break;
    }
    default: break;
  }
}

double acc__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
