/* Accelerate's setters after creation and GradientAccumulationPlugin.sync_each_batch:
 *   - set_gradient_accumulation_steps keeps the step counter (Accelerate updates num_steps):
 *     with 2 then 3 the sync pattern is F,T | T,F,F,T; 0 is refused;
 *   - set_sync_gradients overrides the current batch's decision;
 *   - sync_each_batch: backward averages a non-final batch's gradients across processes (they
 *     become equal everywhere), the optimizer still skips until the window ends, and the final
 *     weights equal those of plain accumulation (avg(g1) + avg(g2) = avg(g1 + g2)).
 * Run by the launcher at 1 and 2 processes. */
#include <math.h>

#include "acc_test.h"

static int rank, nprocs;

static float train(int each, float *mid_grad) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = 2;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  float w[1] = {10.0f}, g[1] = {0.0f};
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, (int64_t[]){1}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 1.0;
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  CHECK_OK(acc_accelerator_set_sync_each_batch(acc, each));
  for (int b = 0; b < 2; b++) {
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    g[0] += (float)(rank + 1) * (float)(b + 1); /* rank-dependent gradients */
    REQUIRE_OK(acc_accelerator_backward(acc));
    if (b == 0) *mid_grad = g[0];
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    if (b == 0) CHECK(w[0] == 10.0f, "no optimizer step inside the window (w %g)", (double)w[0]);
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  }
  float out = w[0];
  acc_accelerator_destroy(acc);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  return out;
}

int main(void) {
  acc_state *st = NULL; /* held for the whole program: the accelerators below share its group */
  REQUIRE_OK(acc_state_create(&st, NULL));
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = 2;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  int pattern[6], want[6] = {0, 1, 1, 0, 0, 1};
  for (int i = 0; i < 6; i++) {
    if (i == 2) CHECK_OK(acc_accelerator_set_gradient_accumulation_steps(acc, 3));
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    pattern[i] = acc_accelerator_sync_gradients(acc);
    CHECK(pattern[i] == want[i], "batch %d: sync_gradients %d (Accelerate's rule gives %d)", i, pattern[i], want[i]);
  }
  CHECK(acc_accelerator_gradient_accumulation_steps(acc) == 3, "the getter follows the setter");
  CHECK_ERR(acc_accelerator_set_gradient_accumulation_steps(acc, 0), ACC_ERR_INVALID_ARGUMENT, "must be at least 1");
  REQUIRE_OK(acc_accelerator_accumulate(acc)); /* step 7: not a sync batch */
  CHECK(acc_accelerator_sync_gradients(acc) == 0, "batch 7 does not sync");
  CHECK_OK(acc_accelerator_set_sync_gradients(acc, 1));
  CHECK(acc_accelerator_sync_gradients(acc) == 1, "set_sync_gradients overrides the decision");
  acc_accelerator_destroy(acc);

  float mid_plain = 0, mid_each = 0;
  float w_plain = train(0, &mid_plain), w_each = train(1, &mid_each);
  /* mean over ranks of (rank + 1) for batch 1 */
  const float mean1 = (float)(nprocs + 1) / 2.0f;
  CHECK(mid_plain == (float)(rank + 1), "without sync_each_batch the first batch's gradient stays local (%g)",
        (double)mid_plain);
  CHECK(mid_each == mean1, "sync_each_batch averages the first batch's gradient (%g, mean %g)", (double)mid_each,
        (double)mean1);
  CHECK(fabsf(w_plain - w_each) < 1e-5f, "same weights after the window: plain %g, sync_each_batch %g", (double)w_plain,
        (double)w_each);
  CHECK(w_plain != 10.0f, "the optimizer stepped at the end of the window");
  acc_state_destroy(st);
  return acc_test_finish("accel_sync_each_batch");
}
