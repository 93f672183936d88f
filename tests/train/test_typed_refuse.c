/* bf16/fp16 tables (acc_model_add_flat_typed) where they are not supported yet, refused with a
 * clear error instead of computing wrong results: device memory (the fake device, run with
 * ACCELERATE_TEST_DEVICE=fake) at registration, a host table prepared on a device, and a table
 * prepared under ZeRO stage 1. One process. */
#include "acc_test.h"

static const acc_param_spec table[2] = {{"fc.w", 2, {4, 8}}, {"fc.b", 1, {4}}};
#define NW 36

int main(void) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE, "the fake device is used (ACCELERATE_TEST_DEVICE=fake)");
  void *dev = NULL;
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev));
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  CHECK_ERR(acc_model_add_flat_typed(m, table, 2, ACC_BF16, dev, NULL, NULL), ACC_ERR_NOT_SUPPORTED,
            "the bf16 parameter buffer is device memory");
  CHECK(acc_model_num_parameters(m) == 0, "a refused table registers nothing");
  static uint16_t w[NW], g[NW];
  size_t first = 0;
  CHECK_OK(acc_model_add_flat_typed(m, table, 2, ACC_F16, w, NULL, &first));
  CHECK_ERR(acc_model_set_flat_grads_typed(m, first, ACC_F16, dev), ACC_ERR_NOT_SUPPORTED,
            "the gradient buffer is device memory");
  CHECK_OK(acc_model_set_flat_grads_typed(m, first, ACC_F16, g));
  CHECK_ERR(acc_accelerator_prepare_model(acc, m), ACC_ERR_NOT_SUPPORTED, "supported in host memory only");
  acc_accelerator_free(acc, dev);
  acc_accelerator_destroy(acc);

  acc_accelerator_options z = ACC_ACCELERATOR_OPTIONS_INIT;
  z.device = ACC_DEVICE_CPU;
  z.zero_stage = 1;
  REQUIRE_OK(acc_accelerator_create(&acc, &z));
  CHECK_ERR(acc_accelerator_prepare_model(acc, m), ACC_ERR_NOT_SUPPORTED, "not supported with zero_stage 1");
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  return acc_test_finish("train_typed_refuse");
}
