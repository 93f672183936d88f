/* An fp16 table (acc_model_add_flat_typed) under mixed precision fp16 with the GradScaler, one
 * process: the program writes loss-scaled fp16 gradients; backward widens them, the scaler unscales
 * the float32 copy, an overflow (a scaled gradient that is inf in fp16) skips the step and halves
 * the scale, and a step that runs moves the float32 master weights by lr x gradient and rounds
 * them into the program's fp16 weights. */
#include "acc_test.h"
#include "core/internal.h"

int main(void) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.mixed_precision = ACC_PRECISION_FP16;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  acc_param_spec t[1] = {{"w", 1, {4}}};
  uint16_t w[4], g[4];
  for (int i = 0; i < 4; i++) w[i] = acc__f32_to_f16(1.0f + (float)i);
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  size_t first;
  REQUIRE_OK(acc_model_add_flat_typed(m, t, 1, ACC_F16, w, g, &first));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.125;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  /* gradient 2.0: scaled by 65536 and 32768 it overflows fp16 (max 65504), by 16384 it does not */
  const int want_skip[3] = {1, 1, 0};
  float expect = 1.0f;
  for (int s = 0; s < 3; s++) {
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    float sc = acc_accelerator_backward_scale(acc);
    for (int i = 0; i < 4; i++) g[i] = acc__f32_to_f16(2.0f * sc);
    REQUIRE_OK(acc_accelerator_backward(acc));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
    int skipped = acc_accelerator_optimizer_step_was_skipped(acc);
    CHECK(skipped == want_skip[s], "step %d at scale %g: skipped %d, expected %d", s, (double)sc, skipped,
          want_skip[s]);
    if (!skipped) expect -= 0.125f * 2.0f;
    const float master = acc_model_parameter(m, 0)->data[0];
    CHECK(master == expect, "step %d: master weight %g, expected %g", s, (double)master, (double)expect);
    CHECK(w[0] == acc__f32_to_f16(master), "step %d: the program's fp16 weight is not the master rounded", s);
    CHECK(g[0] == 0, "step %d: zero_grad leaves the program's fp16 gradient at %#x", s, g[0]);
  }
  CHECK(acc_grad_scaler_scale(acc_accelerator_grad_scaler(acc)) == 16384.0f, "the scale backed off twice: %g",
        (double)acc_grad_scaler_scale(acc_accelerator_grad_scaler(acc)));
  acc_accelerator_destroy(acc);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  return acc_test_finish("train_typed_fp16");
}
