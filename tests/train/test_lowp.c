/* The typed low-precision view (acc_accelerator_low_precision_view), one process:
 *  - bf16 and fp16 accelerators with low_precision_params: the view's dtype is the autocast dtype,
 *    its bits are the conversion of the fp32 parameters; asking for the other dtype is
 *    ACC_ERR_MISMATCH naming both; no copy is ACC_ERR_INVALID_USAGE;
 *  - the generation changes after an optimizer step and after load_state, and the data then
 *    matches the new parameters (a copy derived before is detectably stale);
 *  - acc_low_precision_view_to_f32 converts by the view's own dtype. */
#include <math.h>

#include "acc_test.h"

static char dir[512];

static acc_accelerator *make(acc_mixed_precision mp, int lp) {
  acc_accelerator_options o;
  REQUIRE_OK(acc_accelerator_options_init(&o, ACC_ACCELERATOR_OPTIONS_VERSION));
  o.mixed_precision = mp;
  o.low_precision_params = lp;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  return acc;
}

static void run(acc_mixed_precision mp, acc_dtype want, acc_dtype other) {
  acc_accelerator *acc = make(mp, 1);
  float w[5] = {0.1f, -1.3f, 2.7f, 3.14159f, -0.001f}, g[5] = {1, 1, 1, 1, 1};
  int64_t s[1] = {5};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, s));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_low_precision_view v;
  CHECK_OK(acc_accelerator_low_precision_view(acc, NULL, want, &v));
  CHECK(v.dtype == want && v.numel == 5 && v.data, "view of %d values, dtype %d", (int)v.numel, (int)v.dtype);
  uint16_t ref[5];
  float back[5], back_ref[5];
  if (want == ACC_BF16) acc_f32_to_bf16(ref, w, 5);
  else acc_f32_to_f16(ref, w, 5);
  CHECK(memcmp(ref, v.data, sizeof ref) == 0, "the view holds the converted parameters");
  CHECK_OK(acc_low_precision_view_to_f32(&v, back));
  if (want == ACC_BF16) acc_bf16_to_f32(back_ref, ref, 5);
  else acc_f16_to_f32(back_ref, ref, 5);
  CHECK(memcmp(back, back_ref, sizeof back) == 0, "to_f32 converts by the view's dtype");
  acc_low_precision_view bad;
  CHECK_ERR(acc_accelerator_low_precision_view(acc, m, other, &bad), ACC_ERR_MISMATCH,
            want == ACC_BF16 ? "holds bf16 values but the caller expects fp16" : "holds fp16 values but the caller expects bf16");
  CHECK_ERR(acc_accelerator_low_precision_view(acc, m, ACC_F32, &bad), ACC_ERR_INVALID_ARGUMENT, "ACC_BF16 or ACC_F16");
  uint64_t g0 = v.generation;
  /* an optimizer step rewrites the copy */
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.5;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  REQUIRE_OK(acc_accelerator_backward(acc));
  REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
  acc_low_precision_view v2;
  CHECK_OK(acc_accelerator_low_precision_view(acc, m, want, &v2));
  CHECK(v2.generation != g0, "the generation changes with an optimizer step");
  if (want == ACC_BF16) acc_f32_to_bf16(ref, w, 5);
  else acc_f32_to_f16(ref, w, 5);
  CHECK(memcmp(ref, v2.data, sizeof ref) == 0, "refreshed after the step");
  /* load_state rewrites it too */
  char d[600];
  snprintf(d, sizeof d, "%s/lowp_%d", dir, (int)want);
  REQUIRE_OK(acc_accelerator_save_state(acc, d, NULL));
  float saved0 = w[0];
  w[0] = 123.0f;
  CHECK_OK(acc_accelerator_refresh_low_precision(acc));
  acc_low_precision_view v3;
  CHECK_OK(acc_accelerator_low_precision_view(acc, m, want, &v3));
  CHECK(v3.generation != v2.generation, "refresh changes the generation");
  CHECK_OK(acc_accelerator_load_state(acc, d, NULL));
  acc_low_precision_view v4;
  CHECK_OK(acc_accelerator_low_precision_view(acc, m, want, &v4));
  CHECK(w[0] == saved0 && v4.generation != v3.generation, "load_state restored w[0] %g and rewrote the copy", w[0]);
  if (want == ACC_BF16) acc_f32_to_bf16(ref, w, 5);
  else acc_f32_to_f16(ref, w, 5);
  CHECK(memcmp(ref, v4.data, sizeof ref) == 0, "the copy matches the loaded parameters");
  acc_accelerator_destroy(acc);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  snprintf(dir, sizeof dir, "%s", argv[1]);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  if (system(cmd) != 0) return 3;
  run(ACC_PRECISION_BF16, ACC_BF16, ACC_F16);
  run(ACC_PRECISION_FP16, ACC_F16, ACC_BF16);
  /* no copy */
  acc_accelerator *acc = make(ACC_PRECISION_BF16, 0);
  float w[2] = {1, 2}, g[2] = {0, 0};
  int64_t s[1] = {2};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, s));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_low_precision_view v;
  CHECK_ERR(acc_accelerator_low_precision_view(acc, m, ACC_BF16, &v), ACC_ERR_INVALID_USAGE, "no low-precision copy");
  CHECK_ERR(acc_low_precision_view_to_f32(NULL, w), ACC_ERR_INVALID_ARGUMENT, "NULL view");
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  return acc_test_finish("train_lowp");
}
