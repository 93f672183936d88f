/* Every device kernel against the library's CPU path, on one device kind (argv[1]: cpu, fake or
 * cuda). The reference is the public API the training loop uses today: acc_optimizer_step (SGD,
 * AdamW), acc_grad_scaler_unscale, acc_clip_grad_norm, acc_f32_to_bf16 / acc_f32_to_f16.
 *
 * Bit-exact: SGD, AdamW, unscale + found_inf, casts, widening (every bf16 and fp16 value against
 * acc_bf16_to_f32 / acc_f16_to_f32), scale-by-coefficient (the same expressions in
 * the same order; the CUDA module is built without fused multiply-add).
 * Tolerance: the global norm (the device sums squares in 4096-element chunks, then the chunks;
 * acc_clip_grad_norm sums sequentially): |norm - ref| <= 1e-6 * ref, clipped gradients within a
 * relative 2e-6.
 *
 * cuda: skipped (exit 77) with the reason when the CUDA module cannot open a GPU. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "acc_test.h"
#include "device/device.h"
#include "device/kernels.h"

static acc__device *dev;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* Host to device, then synchronize: a queued copy reads its host source when it runs, and the
 * tests change their host arrays (the reference steps) right after. */
static void upload(void *d, const void *h, size_t bytes) {
  REQUIRE_OK(acc__device_copy(dev, d, h, bytes, ACC__COPY_H2D, NULL));
  REQUIRE_OK(acc__dstream_sync(dev, NULL));
}

static void *up(const void *h, size_t bytes) {
  void *d = NULL;
  REQUIRE_OK(acc__device_alloc(dev, bytes, &d));
  upload(d, h, bytes);
  return d;
}

static void down(void *h, const void *d, size_t bytes) {
  REQUIRE_OK(acc__device_copy(dev, h, d, bytes, ACC__COPY_D2H, NULL));
  REQUIRE_OK(acc__dstream_sync(dev, NULL));
}

/* The same bits, any NaN equal to any NaN (acc_test_same_f32, docs/gpu.md). */
static int same_bits(const float *a, const float *b, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (!acc_test_same_f32(a[i], b[i])) {
      CHECK(0, "%s: element %zu differs: device %.9g, cpu %.9g", what, i, (double)a[i],
            (double)b[i]);
      return 0;
    }
  return 1;
}

/* Two parameters (sizes cross the 4096 chunk and a short tail) in one flat buffer. */
#define N0 5000
#define N1 37
#define NT (N0 + N1)

typedef struct ref {
  float w[NT], g[NT];
  acc_model *m[2];
} ref;

static acc_result add1(acc_model *m, const char *name, float *w, float *g, size_t n) {
  int64_t shape[1] = {(int64_t)n};
  return acc_model_add_parameter(m, name, w, g, 1, shape);
}

static void ref_init(ref *r) {
  for (size_t i = 0; i < NT; i++) r->w[i] = frand();
  for (int p = 0; p < 2; p++) {
    REQUIRE_OK(acc_model_create(&r->m[p]));
    REQUIRE_OK(add1(r->m[p], p ? "b" : "a", r->w + (p ? N0 : 0),
                                       r->g + (p ? N0 : 0), p ? N1 : N0));
  }
}

static void ref_free(ref *r) {
  for (int p = 0; p < 2; p++) acc_model_destroy(r->m[p]);
}

/* AdamW, two groups with their own lr and weight decay (one call per group range), 4 steps; one
 * step with a gradient scale, one skipped through skip_if. */
static void test_adamw(void) {
  static ref r;
  ref_init(&r);
  double lr[2] = {1e-2, 3e-3}, wd[2] = {0.01, 0.0};
  acc_optimizer *opt[2];
  for (int p = 0; p < 2; p++) {
    acc_adamw_options o = ACC_ADAMW_OPTIONS_INIT;
    o.lr = lr[p];
    o.weight_decay = wd[p];
    o.beta1 = p ? 0.3 : 0.9; /* both branches of the lerp */
    REQUIRE_OK(acc_optimizer_create_adamw(&opt[p], r.m[p], &o));
  }
  float *dw = up(r.w, sizeof r.w), *dg, *dm, *dv, *dscale;
  static const float zeros[NT];
  dm = up(zeros, sizeof zeros);
  dv = up(zeros, sizeof zeros);
  REQUIRE_OK(acc__device_alloc(dev, sizeof r.g, (void **)&dg));
  float half = 0.5f;
  dscale = up(&half, sizeof half);
  int32_t one = 1;
  int32_t *dskip = up(&one, sizeof one);
  static float got[NT];
  int64_t step = 0;
  for (int it = 0; it < 5; it++) {
    for (size_t i = 0; i < NT; i++) r.g[i] = frand() * (it == 2 ? 1e3f : 1.0f);
    upload(dg, r.g, sizeof r.g);
    int scaled = it == 1, skipped = it == 3;
    if (!skipped) step++;
    for (int p = 0; p < 2; p++) {
      acc__adamw_args a = {0};
      size_t off = p ? N0 : 0;
      acc__adamw_args_set(&a, lr[p], p ? 0.3 : 0.9, 0.999, 1e-8, wd[p], step);
      a.w = dw + off;
      a.g = dg + off;
      a.m = dm + off;
      a.v = dv + off;
      a.n = p ? N1 : N0;
      a.grad_scale = scaled ? dscale : NULL;
      a.skip_if = skipped ? dskip : NULL;
      CHECK_OK(acc__device_adamw(dev, &a, NULL));
    }
    if (!skipped) {
      if (scaled)
        for (size_t i = 0; i < NT; i++) r.g[i] *= 0.5f;
      for (int p = 0; p < 2; p++) CHECK_OK(acc_optimizer_step(opt[p]));
    }
    down(got, dw, sizeof got);
    char what[64];
    snprintf(what, sizeof what, "adamw weights after call %d", it + 1);
    same_bits(got, r.w, NT, what);
  }
  /* the moments too */
  for (int p = 0; p < 2; p++) {
    const char *name;
    const float *data;
    size_t numel;
    int ndim;
    const int64_t *shape;
    for (size_t k = 0; k < acc_optimizer_state_count(opt[p]); k++) {
      REQUIRE_OK(acc_optimizer_state_get(opt[p], k, &name, &data, &numel, &ndim, &shape));
      float *src = strstr(name, "exp_avg_sq") ? dv : dm;
      down(got, src + (p ? N0 : 0), numel * sizeof(float));
      same_bits(got, data, numel, name);
    }
    acc_optimizer_destroy(opt[p]);
  }
  acc__device_free(dev, dw), acc__device_free(dev, dg), acc__device_free(dev, dm);
  acc__device_free(dev, dv), acc__device_free(dev, dscale), acc__device_free(dev, dskip);
  ref_free(&r);
}

static void test_sgd_case(double lr, double mom, double damp, int nesterov, double wd) {
  static ref r;
  ref_init(&r);
  acc_optimizer *opt;
  acc_sgd_options o = ACC_SGD_OPTIONS_INIT;
  o.lr = lr, o.momentum = mom, o.dampening = damp, o.nesterov = nesterov, o.weight_decay = wd;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, r.m[0], &o));
  float *dw = up(r.w, sizeof r.w), *dg, *dbuf;
  REQUIRE_OK(acc__device_alloc(dev, sizeof r.g, (void **)&dg));
  REQUIRE_OK(acc__device_alloc(dev, sizeof r.g, (void **)&dbuf));
  static float got[NT];
  for (int it = 0; it < 3; it++) {
    for (size_t i = 0; i < NT; i++) r.g[i] = frand();
    upload(dg, r.g, sizeof r.g);
    acc__sgd_args a = {0};
    acc__sgd_args_set(&a, lr, mom, damp, nesterov, wd, it == 0);
    a.w = dw, a.g = dg, a.buf = dbuf, a.n = N0;
    CHECK_OK(acc__device_sgd(dev, &a, NULL));
    CHECK_OK(acc_optimizer_step(opt));
    down(got, dw, sizeof got);
    char what[128];
    snprintf(what, sizeof what, "sgd(mom %g damp %g nesterov %d wd %g) step %d", mom, damp,
             nesterov, wd, it + 1);
    same_bits(got, r.w, N0, what);
  }
  acc_optimizer_destroy(opt);
  acc__device_free(dev, dw), acc__device_free(dev, dg), acc__device_free(dev, dbuf);
  ref_free(&r);
}

static void test_unscale(int with_inf) {
  static ref r;
  ref_init(&r);
  for (size_t i = 0; i < NT; i++) r.g[i] = frand() * 65536.0f;
  if (with_inf) r.g[N0 + 3] = INFINITY, r.g[7] = NAN;
  acc_grad_scaler *sc;
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 3000.0f; /* 1/3000 is inexact: the rounding of inv_scale matters */
  REQUIRE_OK(acc_grad_scaler_create(&sc, &so));
  float *dg = up(r.g, sizeof r.g);
  int32_t zero = 0, flag = -1;
  int32_t *dflag = up(&zero, sizeof zero);
  float inv = (float)(1.0 / (double)acc_grad_scaler_scale(sc));
  CHECK_OK(acc__device_unscale(dev, dg, N0, inv, dflag, NULL));
  CHECK_OK(acc__device_unscale(dev, dg + N0, N1, inv, dflag, NULL));
  int found = -1;
  CHECK_OK(acc_grad_scaler_unscale(sc, r.m[0], &found));
  int found1 = -1;
  acc_grad_scaler *sc1;
  REQUIRE_OK(acc_grad_scaler_create(&sc1, &so));
  CHECK_OK(acc_grad_scaler_unscale(sc1, r.m[1], &found1));
  static float got[NT];
  down(got, dg, sizeof got);
  down(&flag, dflag, sizeof flag);
  same_bits(got, r.g, NT, with_inf ? "unscaled gradients (with inf/nan)" : "unscaled gradients");
  CHECK(flag == (found || found1), "found_inf on device %d, cpu %d", flag, found || found1);
  CHECK(flag == with_inf, "found_inf %d, expected %d", flag, with_inf);
  acc_grad_scaler_destroy(sc);
  acc_grad_scaler_destroy(sc1);
  acc__device_free(dev, dg), acc__device_free(dev, dflag);
  ref_free(&r);
}

/* Global-norm clipping over both parameters: partials of each buffer into one array, one finish,
 * one scale per buffer. */
static void test_clip(float max_norm) {
  static ref r;
  ref_init(&r);
  acc_model *both;
  REQUIRE_OK(acc_model_create(&both));
  REQUIRE_OK(add1(both, "a", r.w, r.g, N0));
  REQUIRE_OK(add1(both, "b", r.w + N0, r.g + N0, N1));
  for (size_t i = 0; i < NT; i++) r.g[i] = frand() * 3.0f;
  float *dg = up(r.g, sizeof r.g), *dnorm, *dcoef;
  size_t p0 = acc__norm_partials(N0), p1 = acc__norm_partials(N1);
  double *dpart;
  REQUIRE_OK(acc__device_alloc(dev, (p0 + p1) * sizeof(double), (void **)&dpart));
  REQUIRE_OK(acc__device_alloc(dev, sizeof(float), (void **)&dnorm));
  REQUIRE_OK(acc__device_alloc(dev, sizeof(float), (void **)&dcoef));
  CHECK_OK(acc__device_norm_partials(dev, dg, N0, dpart, NULL));
  CHECK_OK(acc__device_norm_partials(dev, dg + N0, N1, dpart + p0, NULL));
  CHECK_OK(acc__device_norm_finish(dev, dpart, p0 + p1, max_norm, dnorm, dcoef, NULL));
  CHECK_OK(acc__device_scale(dev, dg, N0, dcoef, NULL));
  CHECK_OK(acc__device_scale(dev, dg + N0, N1, dcoef, NULL));
  float ref_norm = 0.0f, norm = 0.0f;
  CHECK_OK(acc_clip_grad_norm(both, max_norm, 2.0, &ref_norm));
  down(&norm, dnorm, sizeof norm);
  CHECK(fabsf(norm - ref_norm) <= 1e-6f * ref_norm, "norm %.9g vs cpu %.9g", (double)norm,
        (double)ref_norm);
  static float got[NT];
  down(got, dg, sizeof got);
  int bad = 0;
  for (size_t i = 0; i < NT && !bad; i++)
    if (fabsf(got[i] - r.g[i]) > 2e-6f * fabsf(r.g[i]) + 1e-30f) {
      CHECK(0, "clipped gradient %zu: %.9g vs cpu %.9g (max_norm %g)", i, (double)got[i],
            (double)r.g[i], (double)max_norm);
      bad = 1;
    }
  acc_model_destroy(both);
  acc__device_free(dev, dg), acc__device_free(dev, dpart), acc__device_free(dev, dnorm);
  acc__device_free(dev, dcoef);
  ref_free(&r);
}

static void test_cast(void) {
  enum { N = 4096 + 64 };
  static float src[N];
  static const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u,
      0x00000001u, 0x80000001u, 0x33000000u, 0x33000001u, 0x387fe000u, 0x387ff000u, 0x38800000u,
      0x477fe000u, 0x477ff000u, 0x477fefffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu,
      0x00800000u, 0x3f800fffu, 0x3f801000u, 0x3f803000u, 0xc0491000u};
  size_t ns = sizeof special / sizeof special[0];
  for (size_t i = 0; i < N; i++) {
    if (i < ns) {
      memcpy(&src[i], &special[i], 4);
    } else {
      rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t u = (uint32_t)(rng_state >> 32);
      memcpy(&src[i], &u, 4); /* every exponent, NaN payloads included */
    }
  }
  float *dsrc = up(src, sizeof src);
  uint16_t *dst;
  REQUIRE_OK(acc__device_alloc(dev, N * sizeof(uint16_t), (void **)&dst));
  static uint16_t got[N], want[N];
  for (int k = 0; k < 2; k++) {
    acc_dtype t = k ? ACC_F16 : ACC_BF16;
    CHECK_OK(acc__device_cast(dev, dst, dsrc, N, t, NULL));
    down(got, dst, sizeof got);
    if (k) acc_f32_to_f16(want, src, N);
    else acc_f32_to_bf16(want, src, N);
    for (size_t i = 0; i < N; i++)
      if (!acc_test_same_half(&got[i], &want[i], 1, !k)) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        CHECK(0, "%s cast of 0x%08x: device 0x%04x, cpu 0x%04x", acc_dtype_name(t), u, got[i],
              want[i]);
        break;
      }
  }
  CHECK_ERR(acc__device_cast(dev, dst, dsrc, N, ACC_I32, NULL), ACC_ERR_INVALID_ARGUMENT,
            "expected bf16 or f16");
  acc__device_free(dev, dsrc), acc__device_free(dev, dst);
}

/* widen: every 16-bit pattern of bf16 and of fp16 (NaN payloads, subnormals, infinities) widened on
 * the device has the bits of the CPU conversion, and casting the result back gives the pattern
 * again (widening is exact) except for NaNs (bf16 quiets a signalling NaN). */
static void test_widen(void) {
  enum { N = 65536 };
  static uint16_t src[N], back[N];
  static float got[N], want[N];
  for (size_t i = 0; i < N; i++) src[i] = (uint16_t)i;
  uint16_t *dsrc = up(src, sizeof src);
  float *dst;
  REQUIRE_OK(acc__device_alloc(dev, N * sizeof(float), (void **)&dst));
  for (int k = 0; k < 2; k++) {
    acc_dtype t = k ? ACC_F16 : ACC_BF16;
    CHECK_OK(acc__device_widen(dev, dst, dsrc, N, t, NULL));
    down(got, dst, sizeof got);
    if (k) acc_f16_to_f32(want, src, N);
    else acc_bf16_to_f32(want, src, N);
    CHECK(acc_test_same_f32_n(got, want, N, NULL), "%s widen differs from the CPU bits",
          acc_dtype_name(t));
    CHECK_OK(acc__device_cast(dev, dsrc, dst, N, t, NULL));
    down(back, dsrc, sizeof back);
    int bad = 0;
    for (size_t i = 0; i < N; i++) bad += back[i] != (uint16_t)i && !isnan(want[i]);
    CHECK(bad == 0, "%s: %d values do not survive widen then cast", acc_dtype_name(t), bad);
    upload(dsrc, src, sizeof src);
  }
  CHECK_ERR(acc__device_widen(dev, dst, dsrc, N, ACC_F32, NULL), ACC_ERR_INVALID_ARGUMENT, "expected bf16 or f16");
  acc__device_free(dev, dsrc), acc__device_free(dev, dst);
}

/* Two streams ordered by an event: upload on one, AdamW + cast on the other after waiting, the
 * results copied back on the second and awaited through an event (the pattern of a copy stream
 * feeding a compute stream). Same bits as on the default stream. */
/* clamp (clip_grad_value) and the fp16 rounding of gradients against the library's CPU paths,
 * over every exponent, infinities and NaN payloads included. */
static void test_clamp_round(void) {
  enum { N = 4096 + 64 };
  static float src[N], got[N], want[N];
  static uint16_t half[N];
  for (size_t i = 0; i < N; i++) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = (uint32_t)(rng_state >> 32);
    if (i < 4) u = (uint32_t[]){0x7f800000u, 0xff800000u, 0x7fc00001u, 0x3d4ccccdu}[i];
    memcpy(&src[i], &u, 4);
  }
  float *d = up(src, sizeof src);
  CHECK_OK(acc__device_clamp(dev, d, N, 0.05f, NULL));
  down(got, d, sizeof got);
  memcpy(want, src, sizeof want);
  acc_model *m = NULL;
  int64_t shape[1] = {N};
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "g", want, want, 1, shape));
  REQUIRE_OK(acc_clip_grad_value(m, 0.05f));
  acc_model_destroy(m);
  CHECK(acc_test_same_f32_n(got, want, N, NULL), "clamp: the bits of acc_clip_grad_value");
  CHECK_ERR(acc__device_clamp(dev, d, N, -1.0f, NULL), ACC_ERR_INVALID_ARGUMENT, "clip -1");
  upload(d, src, sizeof src);
  CHECK_OK(acc__device_round_f16(dev, d, N, NULL));
  down(got, d, sizeof got);
  acc_f32_to_f16(half, src, N);
  acc_f16_to_f32(want, half, N);
  for (size_t i = 0; i < N; i++)
    if (!acc_test_same_f32(got[i], want[i])) {
      CHECK(0, "round_f16 of %.9g: device %.9g, cpu %.9g", (double)src[i], (double)got[i],
            (double)want[i]);
      break;
    }
  acc__device_free(dev, d);
}

static void test_streams(void) {
  enum { N = 3000 };
  static float w[N], g[N], got[N];
  static uint16_t half[N], want[N];
  for (size_t i = 0; i < N; i++) w[i] = frand(), g[i] = frand();
  float *dw, *dg, *dm, *dv;
  uint16_t *dh;
  REQUIRE_OK(acc__device_alloc(dev, sizeof w, (void **)&dw));
  REQUIRE_OK(acc__device_alloc(dev, sizeof g, (void **)&dg));
  REQUIRE_OK(acc__device_alloc(dev, sizeof w, (void **)&dm));
  REQUIRE_OK(acc__device_alloc(dev, sizeof w, (void **)&dv));
  REQUIRE_OK(acc__device_alloc(dev, sizeof half, (void **)&dh));
  acc__dstream *copy_s, *comp_s;
  acc__devent *uploaded, *finished;
  REQUIRE_OK(acc__dstream_create(dev, &copy_s));
  REQUIRE_OK(acc__dstream_create(dev, &comp_s));
  REQUIRE_OK(acc__devent_create(dev, &uploaded));
  REQUIRE_OK(acc__devent_create(dev, &finished));
  CHECK_OK(acc__device_copy(dev, dw, w, sizeof w, ACC__COPY_H2D, copy_s));
  CHECK_OK(acc__device_copy(dev, dg, g, sizeof g, ACC__COPY_H2D, copy_s));
  CHECK_OK(acc__device_memset(dev, dm, 0, sizeof w, copy_s));
  CHECK_OK(acc__device_memset(dev, dv, 0, sizeof w, copy_s));
  CHECK_OK(acc__devent_record(dev, uploaded, copy_s));
  CHECK_OK(acc__dstream_wait(dev, comp_s, uploaded));
  acc__adamw_args a = {0};
  acc__adamw_args_set(&a, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1);
  a.w = dw, a.g = dg, a.m = dm, a.v = dv, a.n = N;
  CHECK_OK(acc__device_adamw(dev, &a, comp_s));
  CHECK_OK(acc__device_cast(dev, dh, dw, N, ACC_BF16, comp_s));
  CHECK_OK(acc__device_copy(dev, got, dw, sizeof got, ACC__COPY_D2H, comp_s));
  CHECK_OK(acc__device_copy(dev, half, dh, sizeof half, ACC__COPY_D2H, comp_s));
  CHECK_OK(acc__devent_record(dev, finished, comp_s));
  CHECK_OK(acc__devent_sync(dev, finished));
  /* the reference on the host */
  float m[N] = {0}, v[N] = {0};
  acc__adamw_args r = a;
  r.w = w, r.g = g, r.m = m, r.v = v;
  for (size_t k = 0; k < N; k++) acc__k_adamw(&r, 1.0f, k);
  same_bits(got, w, N, "adamw on a compute stream");
  acc_f32_to_bf16(want, w, N);
  CHECK(acc_test_same_half(half, want, N, 1), "bf16 cast on a compute stream differs");
  int done = 0;
  CHECK_OK(acc__devent_query(dev, finished, &done));
  CHECK(done == 1, "event not complete after its synchronization");
  acc__devent_destroy(dev, uploaded), acc__devent_destroy(dev, finished);
  acc__dstream_destroy(dev, copy_s), acc__dstream_destroy(dev, comp_s);
  acc__device_free(dev, dw), acc__device_free(dev, dg), acc__device_free(dev, dm);
  acc__device_free(dev, dv), acc__device_free(dev, dh);
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "fake";
  acc__device_kind k = !strcmp(kind, "cpu")    ? ACC__DEVICE_CPU
                       : !strcmp(kind, "cuda") ? ACC__DEVICE_CUDA
                                               : ACC__DEVICE_FAKE;
  acc_result rc = acc__device_open(&dev, k, 0);
  if (rc == ACC_ERR_NOT_SUPPORTED && k == ACC__DEVICE_CUDA) {
    printf("SKIP: no usable CUDA GPU here: %s\n", acc_last_error());
    return 77;
  }
  REQUIRE_OK(rc);
  printf("device %s\n", acc__device_name(dev));
  test_adamw();
  test_sgd_case(0.1, 0.0, 0.0, 0, 0.0);
  test_sgd_case(0.1, 0.0, 0.0, 0, 0.01);
  test_sgd_case(0.05, 0.9, 0.0, 0, 0.0);
  test_sgd_case(0.05, 0.9, 0.1, 0, 0.001);
  test_sgd_case(0.05, 0.9, 0.0, 1, 0.001);
  test_unscale(0);
  test_unscale(1);
  test_clip(1.0f);   /* clips */
  test_clip(1e9f);   /* does not */
  test_cast();
  test_widen();
  test_clamp_round();
  test_streams();
  acc__device_close(dev);
  return acc_test_finish("device_kernels");
}
