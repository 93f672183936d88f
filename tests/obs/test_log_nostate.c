/* Logging before any process state exists (Accelerate raises "You must initialize the
 * accelerate state..."): acc_log_ex(ACC_LOG_IN_ORDER), which needs the process group, is
 * ACC_ERR_INVALID_USAGE saying so; a plain line still prints (the documented deviation, see
 * docs/observability.md). */
#include "acc_test.h"

int main(void) {
  acc_logger *lg = NULL;
  REQUIRE_OK(acc_get_logger("nostate", ACC_LOG_INFO, &lg));
  CHECK(acc_state_get() == NULL, "no state yet");
  CHECK_ERR(acc_log_ex(lg, ACC_LOG_INFO, ACC_LOG_IN_ORDER, "in order"), ACC_ERR_INVALID_USAGE,
            "you must initialize the accelerate state");
  CHECK_OK(acc_log_ex(lg, ACC_LOG_INFO, 0, "a plain line before the state"));
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  CHECK_OK(acc_log_ex(lg, ACC_LOG_INFO, ACC_LOG_IN_ORDER, "in order with a state"));
  acc_state_destroy(st);
  return acc_test_finish("obs_log_nostate");
}
