/* bf16/fp16 tables (acc_model_add_flat_typed) where they cannot work, refused with a clear error
 * instead of computing wrong results (run with ACCELERATE_TEST_DEVICE=fake, one process):
 *  - parameters and gradients in different places (device memory and host memory), at
 *    registration and when gradients are attached later;
 *  - a host-memory table prepared by an accelerator that trains on the fake device, and a table in
 *    fake-device memory prepared by an accelerator that trains on the CPU;
 *  - a table prepared under ZeRO stage 1 (CPU), and on the device under ZeRO (refused for every
 *    device model);
 *  - a device table whose accelerator was destroyed, prepared by another one. */
#include "acc_test.h"

static const acc_param_spec table[2] = {{"fc.w", 2, {4, 8}}, {"fc.b", 1, {4}}};
#define NW 36

int main(void) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE, "the fake device is used (ACCELERATE_TEST_DEVICE=fake)");
  void *dev = NULL, *dev_g = NULL;
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev_g));
  static uint16_t w[NW], g[NW];
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  /* device parameters with host gradients, and the reverse */
  CHECK_ERR(acc_model_add_flat_typed(m, table, 2, ACC_BF16, dev, g, NULL), ACC_ERR_INVALID_ARGUMENT,
            "the bf16 parameter buffer is fake:0 but the gradient buffer is host memory");
  CHECK_ERR(acc_model_add_flat_typed(m, table, 2, ACC_F16, w, dev_g, NULL), ACC_ERR_INVALID_ARGUMENT,
            "the fp16 parameter buffer is host memory but the gradient buffer is fake:0");
  CHECK(acc_model_num_parameters(m) == 0, "a refused table registers nothing");
  size_t first = 0;
  CHECK_OK(acc_model_add_flat_typed(m, table, 2, ACC_F16, w, NULL, &first));
  CHECK_ERR(acc_model_set_flat_grads_typed(m, first, ACC_F16, dev_g), ACC_ERR_INVALID_ARGUMENT,
            "the gradient buffer is fake:0 but the table starting at 'fc.w' has its parameters in host memory");
  CHECK_OK(acc_model_set_flat_grads_typed(m, first, ACC_F16, g));
  /* a host table on the device */
  CHECK_ERR(acc_accelerator_prepare_model(acc, m), ACC_ERR_INVALID_ARGUMENT,
            "the fp16 table starting at 'fc.w' is in host memory and this accelerator trains on fake");
  /* a device table on the CPU: registered while the fake accelerator lives */
  acc_model *md;
  REQUIRE_OK(acc_model_create(&md));
  CHECK_OK(acc_model_add_flat_typed(md, table, 2, ACC_BF16, dev, NULL, &first));
  CHECK_ERR(acc_model_set_flat_grads_typed(md, first, ACC_BF16, g), ACC_ERR_INVALID_ARGUMENT,
            "the gradient buffer is host memory but the table starting at 'fc.w' has its parameters in fake:0");
  CHECK_OK(acc_model_set_flat_grads_typed(md, first, ACC_BF16, dev_g));
  acc_accelerator_options c = ACC_ACCELERATOR_OPTIONS_INIT;
  c.device = ACC_DEVICE_CPU;
  acc_accelerator *cpu;
  REQUIRE_OK(acc_accelerator_create(&cpu, &c));
  CHECK_ERR(acc_accelerator_prepare_model(cpu, md), ACC_ERR_INVALID_ARGUMENT,
            "the bf16 table starting at 'fc.w' is memory of fake:0 but this accelerator trains on the CPU");
  acc_accelerator_destroy(cpu);
  acc_model_destroy(md); /* frees its device master weights: the fake accelerator still lives */
  acc_accelerator_free(acc, dev);
  acc_accelerator_free(acc, dev_g);
  acc_accelerator_destroy(acc);

  /* ZeRO: accepted on the CPU (devtrain_typed_zero_*); on the fake device the model is accepted
   * (the program's own optimizer: acc_accelerator_zero_shard / zero_gather, devtrain_llmc_*) and
   * the library's optimizer refused with the way out */
  acc_accelerator_options z = ACC_ACCELERATOR_OPTIONS_INIT;
  z.device = ACC_DEVICE_CPU;
  z.zero_stage = 1;
  REQUIRE_OK(acc_accelerator_create(&acc, &z));
  CHECK_OK(acc_accelerator_prepare_model(acc, m));
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  z.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&acc, &z));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev_g));
  REQUIRE_OK(acc_model_create(&md));
  CHECK_OK(acc_model_add_flat_typed(md, table, 2, ACC_BF16, dev, dev_g, NULL));
  CHECK_OK(acc_accelerator_prepare_model(acc, md));
  size_t zf = 99, zc = 99;
  CHECK_OK(acc_accelerator_zero_shard(acc, md, &zf, &zc));
  CHECK(zf == 0 && zc == NW, "one process owns the whole table: [%zu, +%zu)", zf, zc);
  acc_optimizer *zopt = NULL;
  acc_sgd_options zso = ACC_SGD_OPTIONS_INIT;
  REQUIRE_OK(acc_optimizer_create_sgd(&zopt, md, &zso));
  CHECK_ERR(acc_accelerator_prepare_optimizer(acc, zopt), ACC_ERR_NOT_SUPPORTED,
            "the library's optimizer under ZeRO (zero_stage 1) is not supported");
  acc_optimizer_destroy(zopt);
  acc_accelerator_free(acc, dev);
  acc_accelerator_free(acc, dev_g);
  acc_accelerator_destroy(acc);
  acc_model_destroy(md);
  /* zero_shard and zero_gather at stage 0 name the way */
  z.device = ACC_DEVICE_CPU;
  z.zero_stage = 0;
  REQUIRE_OK(acc_accelerator_create(&acc, &z));
  static float zw[NW], zg[NW];
  REQUIRE_OK(acc_accelerator_prepare_flat(acc, table, 2, zw, zg, &md));
  CHECK_ERR(acc_accelerator_zero_shard(acc, md, &zf, &zc), ACC_ERR_INVALID_USAGE, "runs zero_stage 0");
  CHECK_ERR(acc_accelerator_zero_gather(acc, NULL), ACC_ERR_INVALID_USAGE, "set zero_stage 1 or 2");
  acc_accelerator_destroy(acc); /* and the model it built */

  /* a device table outliving its accelerator: another accelerator refuses it, and destroying the
   * model afterwards frees nothing (the device's memory went with it) */
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), &dev_g));
  REQUIRE_OK(acc_model_create(&md));
  CHECK_OK(acc_model_add_flat_typed(md, table, 2, ACC_BF16, dev, dev_g, NULL));
  acc_accelerator_destroy(acc);
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  CHECK_ERR(acc_accelerator_prepare_model(acc, md), ACC_ERR_INVALID_ARGUMENT,
            "was registered over memory of a device that was closed");
  acc_accelerator_destroy(acc);
  acc_model_destroy(md);
  return acc_test_finish("train_typed_refuse");
}
