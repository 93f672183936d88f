/* Conversions (edge values, the whole f16 range, a dense sample of the f32 range against an
 * independent nearest-value reference), autocast dtype, parameter copies, GradScaler sequences. */
#include <math.h>

#include "acc_test.h"

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Value of a non-negative finite half bit pattern, computed from the IEEE definition; 0x7c00
 * counts as 65536 (the next value with an unbounded exponent, so ties at 65520 go to inf). */
static double half_value(uint32_t h) {
  uint32_t e = h >> 10, m = h & 0x3ff;
  if (e == 0) return ldexp((double)m, -24);
  return ldexp((double)(m | 0x400), (int)e - 25);
}

/* Reference f32 -> f16 by nearest-value search with ties to even. */
static uint16_t ref_f16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (isinf(f)) return sign | 0x7c00;
  uint32_t lo = 0, hi = 0x7c00; /* largest h with value(h) <= a */
  while (lo < hi) {
    uint32_t mid = (lo + hi + 1) / 2;
    if (half_value(mid) <= a) lo = mid; else hi = mid - 1;
  }
  if (lo == 0x7c00) return sign | 0x7c00;
  double dlo = a - half_value(lo), dhi = half_value(lo + 1) - a;
  uint32_t r = (dlo < dhi || (dlo == dhi && (lo & 1) == 0)) ? lo : lo + 1;
  return (uint16_t)(sign | r);
}

static uint16_t ref_bf16(float f) {
  uint32_t u = f2u(f), sign = u & 0x80000000u, abs = u & 0x7fffffffu;
  uint32_t lo = abs & 0xffff0000u, hi = lo + 0x10000u;
  double a = (double)u2f(abs), vlo = (double)u2f(lo);
  double vhi = hi >= 0x7f800000u ? ldexp(1.0, 128) : (double)u2f(hi);
  if (abs == 0x7f800000u) return (uint16_t)((sign | abs) >> 16);
  double dlo = a - vlo, dhi = vhi - a;
  uint32_t r = (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) ? lo : hi;
  return (uint16_t)((sign | r) >> 16);
}

static void test_conversions(void) {
  float in[] = {0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, 65519.996f, 65520.0f, 1e6f, 5.9604645e-8f, 2.9802322e-8f,
                2.9802326e-8f, 6.1035156e-5f, 1.00048828125f, 1.00146484375f, INFINITY, -INFINITY};
  uint16_t want_h[] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0x0001, 0x0000,
                       0x0001, 0x0400, 0x3c00, 0x3c02, 0x7c00, 0xfc00};
  size_t n = sizeof in / sizeof in[0];
  uint16_t h[16];
  CHECK_OK(acc_f32_to_f16(h, in, n));
  for (size_t i = 0; i < n; i++) CHECK(h[i] == want_h[i], "f16(%.9g) = 0x%04x, want 0x%04x", in[i], h[i], want_h[i]);
  float back[16];
  CHECK_OK(acc_f16_to_f32(back, h, n));
  CHECK(back[4] == 65504.0f && isinf(back[6]) && back[8] == 5.9604645e-8f && signbit(back[1]), "f16 back");

  float bin[] = {1.0f, -1.0f, 3.0e38f, 3.4028235e38f, u2f(0x3f808000u), u2f(0x3f818000u), u2f(0x3f808001u),
                 1e-40f, INFINITY};
  uint16_t want_b[] = {0x3f80, 0xbf80, 0x7f62, 0x7f80, 0x3f80, 0x3f82, 0x3f81, 0x0001, 0x7f80};
  uint16_t b[9];
  CHECK_OK(acc_f32_to_bf16(b, bin, 9));
  for (size_t i = 0; i < 9; i++) CHECK(b[i] == want_b[i], "bf16(%.9g) = 0x%04x, want 0x%04x", bin[i], b[i], want_b[i]);

  /* NaN stays NaN (quiet) through both formats. */
  float nans[2] = {NAN, u2f(0x7f800001u)};
  CHECK_OK(acc_f32_to_f16(h, nans, 2));
  CHECK_OK(acc_f16_to_f32(back, h, 2));
  CHECK(isnan(back[0]) && isnan(back[1]), "NaN kept in f16");
  CHECK_OK(acc_f32_to_bf16(b, nans, 2));
  CHECK_OK(acc_bf16_to_f32(back, b, 2));
  CHECK(isnan(back[0]) && isnan(back[1]), "NaN kept in bf16 (0x%04x 0x%04x)", b[0], b[1]);

  /* Whole f16 range: decode exactly, encode back identically. */
  int bad = 0;
  for (uint32_t x = 0; x < 0x10000 && !bad; x++) {
    if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff)) continue;
    uint16_t hx = (uint16_t)x, hy;
    float f;
    acc_f16_to_f32(&f, &hx, 1);
    double want = (x & 0x8000 ? -1 : 1) * ((x & 0x7fff) == 0x7c00 ? INFINITY : half_value(x & 0x7fff));
    acc_f32_to_f16(&hy, &f, 1);
    if ((double)f != want || hy != hx) bad = 1;
    CHECK(!bad, "f16 0x%04x -> %.9g (want %.9g) -> 0x%04x", x, f, want, hy);
  }
  /* Whole bf16 range round trip. */
  for (uint32_t x = 0; x < 0x10000 && !bad; x++) {
    if ((x & 0x7f80) == 0x7f80 && (x & 0x7f)) continue;
    uint16_t bx = (uint16_t)x, by;
    float f;
    acc_bf16_to_f32(&f, &bx, 1);
    acc_f32_to_bf16(&by, &f, 1);
    if (f2u(f) != x << 16 || by != bx) bad = 1;
    CHECK(!bad, "bf16 0x%04x round trip gave 0x%04x", x, by);
  }
  /* A dense sample of every f32 bit pattern (both signs, all exponents) against the references. */
  for (uint64_t u = 0; u <= 0xffffffffu && !bad; u += 997) {
    float f = u2f((uint32_t)u);
    if (isnan(f)) continue;
    uint16_t hh, bb;
    acc_f32_to_f16(&hh, &f, 1);
    acc_f32_to_bf16(&bb, &f, 1);
    if (hh != ref_f16(f) || bb != ref_bf16(f)) bad = 1;
    CHECK(!bad, "0x%08x: f16 0x%04x (ref 0x%04x), bf16 0x%04x (ref 0x%04x)", (unsigned)u, hh, ref_f16(f), bb,
          ref_bf16(f));
  }
  CHECK_ERR(acc_f32_to_f16(NULL, in, 3), ACC_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_OK(acc_f32_to_f16(NULL, NULL, 0));
}

static void test_autocast_and_copy(void) {
  CHECK(acc_autocast_dtype(ACC_PRECISION_NO) == ACC_F32, "no -> f32");
  CHECK(acc_autocast_dtype(ACC_PRECISION_FP16) == ACC_F16, "fp16 -> f16");
  CHECK(acc_autocast_dtype(ACC_PRECISION_BF16) == ACC_BF16, "bf16 -> bf16");
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  float w[3] = {1.0f, -2.5f, 65536.0f}, bias[1] = {1.00048828125f};
  int64_t s3[] = {3}, s1[] = {1};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, NULL, 1, s3));
  REQUIRE_OK(acc_model_add_parameter(m, "b", bias, NULL, 1, s1));
  uint16_t h[4];
  CHECK_OK(acc_precision_copy_params(m, ACC_F16, h, 4));
  CHECK(h[0] == 0x3c00 && h[1] == 0xc100 && h[2] == 0x7c00 && h[3] == 0x3c00, "f16 copy %04x %04x %04x %04x", h[0],
        h[1], h[2], h[3]);
  CHECK_OK(acc_precision_copy_params(m, ACC_BF16, h, 4));
  CHECK(h[0] == 0x3f80 && h[1] == 0xc020 && h[2] == 0x4780 && h[3] == 0x3f80, "bf16 copy");
  float f[4];
  CHECK_OK(acc_precision_copy_params(m, ACC_F32, f, 4));
  CHECK(memcmp(f, w, sizeof w) == 0 && f[3] == bias[0], "f32 copy");
  CHECK_ERR(acc_precision_copy_params(m, ACC_F16, h, 3), ACC_ERR_INVALID_ARGUMENT, "holds 3 elements but the model has 4");
  CHECK_ERR(acc_precision_copy_params(m, ACC_I32, h, 4), ACC_ERR_INVALID_ARGUMENT, "i32");
  acc_model_destroy(m);
}

static void test_scaler(void) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  float w[3] = {0}, g[3];
  int64_t s3[] = {3};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, s3));

  acc_grad_scaler *s;
  REQUIRE_OK(acc_grad_scaler_create(&s, NULL));
  CHECK(acc_grad_scaler_scale(s) == 65536.0f, "default scale %g", acc_grad_scaler_scale(s));
  g[0] = 131072.0f; g[1] = -32768.0f; g[2] = 3.0f;
  int found = -1;
  CHECK_OK(acc_grad_scaler_unscale(s, m, &found));
  CHECK(found == 0 && g[0] == 2.0f && g[1] == -0.5f && g[2] == 3.0f / 65536.0f, "unscaled %g %g %g", g[0], g[1], g[2]);
  CHECK(acc_grad_scaler_is_unscaled(s), "marked unscaled");
  CHECK_ERR(acc_grad_scaler_unscale(s, m, &found), ACC_ERR_INVALID_USAGE, "already unscaled");
  CHECK(g[0] == 2.0f, "second unscale changed nothing");
  CHECK_OK(acc_grad_scaler_update(s, 0));
  float sc; int64_t tr;
  CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
  CHECK(sc == 65536.0f && tr == 1, "after one good step: %g %lld", sc, (long long)tr);

  /* Overflow: found locally (inf and NaN), scale halves, tracker resets. */
  g[0] = 1.0f; g[1] = INFINITY; g[2] = 2.0f;
  CHECK_OK(acc_grad_scaler_unscale(s, m, &found));
  CHECK(found == 1 && acc_grad_scaler_found_inf(s) == 1 && isinf(g[1]), "inf found");
  CHECK_OK(acc_grad_scaler_update(s, found));
  CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
  CHECK(sc == 32768.0f && tr == 0, "after overflow: %g %lld", sc, (long long)tr);
  CHECK(acc_grad_scaler_found_inf(s) == 0 && !acc_grad_scaler_is_unscaled(s), "update clears flags");
  g[1] = NAN;
  CHECK_OK(acc_grad_scaler_unscale(s, m, &found));
  CHECK(found == 1, "NaN found");
  CHECK_OK(acc_grad_scaler_update(s, 1));
  CHECK(acc_grad_scaler_scale(s) == 16384.0f, "second backoff %g", acc_grad_scaler_scale(s));

  /* 2000 good steps double it; 1999 do not. update() without unscale() is allowed. */
  for (int i = 0; i < 1999; i++) CHECK_OK(acc_grad_scaler_update(s, 0));
  CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
  CHECK(sc == 16384.0f && tr == 1999, "after 1999 good: %g %lld", sc, (long long)tr);
  CHECK_OK(acc_grad_scaler_update(s, 0));
  CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
  CHECK(sc == 32768.0f && tr == 0, "after 2000 good: %g %lld", sc, (long long)tr);
  /* An overflow in the middle restarts the count. */
  for (int i = 0; i < 1500; i++) CHECK_OK(acc_grad_scaler_update(s, 0));
  CHECK_OK(acc_grad_scaler_update(s, 1));
  for (int i = 0; i < 1999; i++) CHECK_OK(acc_grad_scaler_update(s, 0));
  CHECK(acc_grad_scaler_scale(s) == 16384.0f, "no growth yet %g", acc_grad_scaler_scale(s));
  CHECK_OK(acc_grad_scaler_update(s, 0));
  CHECK(acc_grad_scaler_scale(s) == 32768.0f, "growth after a full interval %g", acc_grad_scaler_scale(s));

  /* State round trip and validation. */
  CHECK_OK(acc_grad_scaler_set_state(s, 0.125f, 7));
  CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
  CHECK(sc == 0.125f && tr == 7, "set_state");
  CHECK_ERR(acc_grad_scaler_set_state(s, -1.0f, 0), ACC_ERR_INVALID_ARGUMENT, "scale");
  CHECK_ERR(acc_grad_scaler_set_state(s, 1.0f, -1), ACC_ERR_INVALID_ARGUMENT, "growth_tracker");
  acc_grad_scaler_destroy(s);

  /* Custom options: interval 3, factors 4 and 0.25; growth to a non-finite scale is refused. */
  acc_grad_scaler_options o = ACC_GRAD_SCALER_OPTIONS_INIT;
  o.init_scale = 3.0f; o.growth_factor = 4.0f; o.backoff_factor = 0.25f; o.growth_interval = 3;
  REQUIRE_OK(acc_grad_scaler_create(&s, &o));
  g[0] = 3.0f; g[1] = 1.0f; g[2] = -6.0f;
  CHECK_OK(acc_grad_scaler_unscale(s, m, &found));
  float inv = (float)(1.0 / 3.0);
  CHECK(g[0] == 3.0f * inv && g[1] == inv && g[2] == -6.0f * inv, "unscale by float reciprocal");
  int seq[] = {0, 0, 1, 0, 0, 0, 0};
  float want[] = {3.0f, 3.0f, 0.75f, 0.75f, 0.75f, 3.0f, 3.0f};
  int64_t want_tr[] = {1, 2, 0, 1, 2, 0, 1};
  for (int i = 0; i < 7; i++) {
    CHECK_OK(acc_grad_scaler_update(s, seq[i]));
    CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
    CHECK(sc == want[i] && tr == want_tr[i], "step %d: scale %g tracker %lld (want %g %lld)", i, sc,
          (long long)tr, want[i], (long long)want_tr[i]);
  }
  CHECK_OK(acc_grad_scaler_set_state(s, 0x1p126f, 2));
  CHECK_OK(acc_grad_scaler_update(s, 0));
  CHECK_OK(acc_grad_scaler_get_state(s, &sc, &tr));
  CHECK(sc == 0x1p126f && tr == 0, "no growth to inf: %g %lld", sc, (long long)tr);
  acc_grad_scaler_destroy(s);

  /* Disabled: scale 1, unscale is a no-op that reports nothing. */
  o = (acc_grad_scaler_options)ACC_GRAD_SCALER_OPTIONS_INIT;
  o.enabled = 0;
  REQUIRE_OK(acc_grad_scaler_create(&s, &o));
  g[0] = INFINITY; g[1] = 8.0f;
  CHECK(acc_grad_scaler_scale(s) == 1.0f && !acc_grad_scaler_enabled(s), "disabled scale");
  CHECK_OK(acc_grad_scaler_unscale(s, m, &found));
  CHECK(found == 0 && g[1] == 8.0f, "disabled unscale is a no-op");
  acc_grad_scaler_destroy(s);

  /* Bad options. */
  o = (acc_grad_scaler_options)ACC_GRAD_SCALER_OPTIONS_INIT;
  o.backoff_factor = 1.5f;
  CHECK_ERR(acc_grad_scaler_create(&s, &o), ACC_ERR_INVALID_ARGUMENT, "backoff_factor");
  acc_grad_scaler_options zero;
  memset(&zero, 0, sizeof zero);
  CHECK_ERR(acc_grad_scaler_create(&s, &zero), ACC_ERR_INVALID_USAGE, "ACC_GRAD_SCALER_OPTIONS_INIT");
  acc_grad_scaler_destroy(NULL);
  acc_model_destroy(m);
}

int main(void) {
  test_conversions();
  test_autocast_and_copy();
  test_scaler();
  return acc_test_finish("train_precision");
}
