/* Half-precision conversions and reduction kernels against hand-computed values. */
#include <math.h>

#include "acc_test.h"
#include "core/internal.h"

static void test_f16(void) {
  struct { float f; uint16_t h; } cases[] = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff},
      {65520.0f, 0x7c00} /* rounds up to inf */, {1e-8f, 0x0000}, {5.9604645e-8f, 0x0001},
      {6.1035156e-5f, 0x0400}, {0.33333334f, 0x3555}, {1.0009766f, 0x3c01},
      {1.00048828125f, 0x3c00} /* halfway: round to even */, {1.00146484375f, 0x3c02},
      {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t h = acc__f32_to_f16(cases[i].f);
    CHECK(h == cases[i].h, "f32_to_f16(%g) = 0x%04x, expected 0x%04x", cases[i].f, h, cases[i].h);
  }
  CHECK(isnan(acc__f16_to_f32(acc__f32_to_f16(NAN))), "NaN survives f16");
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaNs */
    float f = acc__f16_to_f32((uint16_t)h);
    if (acc__f32_to_f16(f) != h) {
      CHECK(0, "f16 round trip of 0x%04x gave 0x%04x", h, acc__f32_to_f16(f));
      break;
    }
  }
}

static void test_bf16(void) {
  CHECK(acc__f32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
  CHECK(acc__f32_to_bf16(-2.0f) == 0xc000, "bf16(-2)");
  /* 1 + 2^-8 is halfway between 1 and 1+2^-7: rounds to even (1). */
  CHECK(acc__f32_to_bf16(1.00390625f) == 0x3f80, "bf16 tie to even: 0x%04x", acc__f32_to_bf16(1.00390625f));
  CHECK(acc__f32_to_bf16(1.01171875f) == 0x3f82, "bf16 tie to even up: 0x%04x", acc__f32_to_bf16(1.01171875f));
  CHECK(acc__f32_to_bf16(INFINITY) == 0x7f80, "bf16 inf");
  CHECK(isnan(acc__bf16_to_f32(acc__f32_to_bf16(NAN))), "bf16 NaN");
  CHECK(acc__bf16_to_f32(0x4049) == 3.140625f, "bf16 to f32");
}

/* The array conversions (vectorized; f32 -> f16 by F16C where the CPU has it) against the scalar
 * ones: every f16 and bf16 value widened, and f32 -> f16 / bf16 over every 257th f32 bit pattern
 * (all exponents, subnormal, infinity and NaN ranges) plus the rounding boundaries, in runs of
 * odd lengths so the vector loops' tails are covered too. */
static void test_half_arrays(void) {
  static uint16_t h[65536], o[4099];
  static float f[65536], in[4099];
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (int k = 0; k < 2; k++) {
    acc_dtype dt = k ? ACC_BF16 : ACC_F16;
    acc__half_to_f32_n(f, h, 65536, dt);
    size_t bad = 0, first = 0;
    for (uint32_t i = 0; i < 65536; i++) {
      float s = k ? acc__bf16_to_f32(h[i]) : acc__f16_to_f32(h[i]);
      if (memcmp(&s, &f[i], 4) != 0 && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "%s -> f32 array: %zu values differ from the scalar conversion, first 0x%04zx",
          acc_dtype_name(dt), bad, first);
  }
  static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x33000000u, 0x33000001u, 0x337fffffu,
                                   0x387fefffu, 0x387ff000u, 0x38800000u, 0x477fefffu, 0x477ff000u,
                                   0x477fffffu, 0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fbfffffu,
                                   0x7fc00000u, 0xff800000u, 0xffffffffu, 0x3f808000u, 0x3f818000u};
  size_t bad[2] = {0, 0};
  uint32_t first[2] = {0, 0};
  uint64_t next = 0;
  for (int run = 0; next < (1ull << 32); run++) {
    size_t m = run == 0 ? sizeof edges / sizeof edges[0] : 4099 - (size_t)(run % 7);
    for (size_t j = 0; j < m; j++) {
      uint32_t u = run == 0 ? edges[j] : (uint32_t)next;
      if (run) next += 257;
      memcpy(&in[j], &u, 4);
    }
    for (int k = 0; k < 2; k++) {
      acc__f32_to_half_n(o, in, m, k ? ACC_BF16 : ACC_F16);
      for (size_t j = 0; j < m; j++)
        if (o[j] != (k ? acc__f32_to_bf16(in[j]) : acc__f32_to_f16(in[j])) && bad[k]++ == 0)
          memcpy(&first[k], &in[j], 4);
    }
  }
  CHECK(bad[0] == 0, "f32 -> f16 array: %zu values differ from the scalar conversion, first 0x%08x", bad[0], first[0]);
  CHECK(bad[1] == 0, "f32 -> bf16 array: %zu values differ from the scalar conversion, first 0x%08x", bad[1], first[1]);
}

static void test_reduce(void) {
  float a[4] = {1, 5, -3, 2}, b[4] = {4, 2, -1, 2};
  acc__reduce_inplace(a, b, 4, ACC_F32, ACC_SUM);
  CHECK(a[0] == 5 && a[1] == 7 && a[2] == -4 && a[3] == 4, "f32 sum");
  int64_t x[2] = {3, -7}, y[2] = {5, -9};
  acc__reduce_inplace(x, y, 2, ACC_I64, ACC_MIN);
  CHECK(x[0] == 3 && x[1] == -9, "i64 min");
  uint8_t u[2] = {3, 200}, v[2] = {9, 100};
  acc__reduce_inplace(u, v, 2, ACC_U8, ACC_MAX);
  CHECK(u[0] == 9 && u[1] == 200, "u8 max");
  uint16_t h[2] = {acc__f32_to_f16(1.5f), acc__f32_to_f16(-2.0f)}, g[2] = {acc__f32_to_f16(2.25f), acc__f32_to_f16(0.5f)};
  acc__reduce_inplace(h, g, 2, ACC_F16, ACC_SUM);
  CHECK(acc__f16_to_f32(h[0]) == 3.75f && acc__f16_to_f32(h[1]) == -1.5f, "f16 sum");
  int32_t m[3] = {7, -7, 8};
  acc__divide(m, 3, ACC_I32, 2);
  CHECK(m[0] == 3 && m[1] == -3 && m[2] == 4, "i32 mean truncates");
  double d[1] = {1.0};
  acc__divide(d, 1, ACC_F64, 3);
  CHECK(d[0] == 1.0 / 3.0, "f64 divide");
  CHECK(acc_dtype_size(ACC_BF16) == 2 && acc_dtype_size((acc_dtype)99) == 0, "dtype sizes");
  CHECK(strcmp(acc_dtype_name(ACC_I64), "i64") == 0, "dtype name");
}

int main(void) {
  test_f16();
  test_bf16();
  test_half_arrays();
  test_reduce();
  return acc_test_finish("unit_common");
}
