/* acc_save_model with a state, under `accelerate launch`: only the main process writes, and
 * after the call (which ends in a barrier) every process can load the complete file.
 * Usage: test_ckpt_save_dist DIR */
#include "acc_test.h"
#include "ckpt_util.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  acc_test_rank = acc_state_process_index(st);
  int n = acc_state_num_processes(st);
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/np%d", argv[1], n);
  if (acc_state_is_main_process(st)) (void)acc__rmtree(dir);
  REQUIRE_OK(acc_barrier(st));
  float w[8], back[8] = {0};
  for (int i = 0; i < 8; i++) w[i] = (float)(i * 3 + acc_test_rank * 100); /* only rank 0's values may land */
  int64_t s[1] = {4};
  acc_model *m, *m2;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_create(&m2));
  REQUIRE_OK(acc_model_add_parameter(m, "w0", w, NULL, 1, s));
  REQUIRE_OK(acc_model_add_parameter(m, "w1", w + 4, NULL, 1, s));
  REQUIRE_OK(acc_model_add_parameter(m2, "w0", back, NULL, 1, s));
  REQUIRE_OK(acc_model_add_parameter(m2, "w1", back + 4, NULL, 1, s));
  CHECK_OK(acc_save_model(st, m, dir, 16, ACC_F32)); /* 16-byte shards: two files + index */
  CHECK(ckpt_exists(dir, "model.safetensors.index.json"), "index missing after the barrier");
  CHECK_OK(acc_load_checkpoint_in_model(m2, dir, NULL, NULL));
  for (int i = 0; i < 8; i++) CHECK(back[i] == (float)(i * 3), "w[%d] = %g (expected rank 0's %d)", i, back[i], i * 3);
  REQUIRE_OK(acc_barrier(st));
  acc_model_destroy(m);
  acc_model_destroy(m2);
  acc_state_destroy(st);
  return acc_test_finish("ckpt_save_dist");
}
