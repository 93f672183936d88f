/* One source of truth for mixed precision (new-user review 3, #6): a state created without a
 * precision, then an accelerator with bf16, both report bf16 (and the state's description says
 * so); a state created with an explicit, different precision is a clear error. */
#include "acc_test.h"

int main(void) {
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.mixed_precision = ACC_PRECISION_BF16;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  CHECK(acc_accelerator_mixed_precision(acc) == ACC_PRECISION_BF16, "accelerator bf16");
  CHECK(acc_state_mixed_precision(acc_accelerator_state(acc)) == ACC_PRECISION_BF16,
        "the state reports %s while the accelerator trains bf16",
        acc_mixed_precision_name(acc_state_mixed_precision(acc_accelerator_state(acc))));
  CHECK(strstr(acc_state_describe(st), "Mixed precision type: bf16") != NULL, "describe: %s", acc_state_describe(st));
  acc_accelerator_destroy(acc);
  acc_state_destroy(st);

  acc_state_options so = ACC_STATE_OPTIONS_INIT;
  so.mixed_precision = ACC_PRECISION_FP16;
  REQUIRE_OK(acc_state_create(&st, &so));
  CHECK_ERR(acc_accelerator_create(&acc, &o), ACC_ERR_INVALID_USAGE, "mixed_precision 'bf16' contradicts the process state");
  o.mixed_precision = ACC_PRECISION_FP16;
  CHECK_OK(acc_accelerator_create(&acc, &o));
  acc_accelerator_destroy(acc);
  acc_state_destroy(st);
  return acc_test_finish("accel_mp_state");
}
