/* Handle checks (regression for new-user review R6): every kind of handle passed where another
 * kind is expected is refused with ACC_ERR_INVALID_ARGUMENT and a message naming both types; a
 * destroyed handle, a stray pointer and NULL are refused the same way. The magic values live in
 * one table in src/core/internal.h; their uniqueness is checked when src/core/handle.c compiles. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "acc_test.h"
#include "core/internal.h"

enum { STATE, ACCEL, DATASET, LOADER, MODEL, OPTIM, SCHED, SCALER, ST, PROJECT, CKPT, BSHARD, NK };
static const char *type_name[NK] = {
    "acc_state",     "acc_accelerator", "acc_dataset",     "acc_dataloader",  "acc_model",
    "acc_optimizer", "acc_scheduler",   "acc_grad_scaler", "acc_safetensors", "acc_project_config",
    "acc_checkpoint", "acc_batch_shard"};

/* A public entry point of each kind, called with h. */
static acc_result call(int kind, void *h) {
  float x = 1, g = 0;
  int64_t shape[1] = {1};
  acc_tensor_view v;
  const acc_batch *b;
  const int64_t *idx;
  int64_t cnt;
  acc_dataloader *dl = NULL;
  switch (kind) {
    case STATE: return acc_all_reduce(h, &x, &x, 1, ACC_F32, ACC_SUM);
    case ACCEL: return acc_accelerator_backward(h);
    case DATASET: return acc_dataloader_create(&dl, h, NULL);
    case LOADER: return acc_dataloader_next(h, &b);
    case MODEL: return acc_model_add_parameter(h, "z", &x, &g, 1, shape);
    case OPTIM: return acc_optimizer_step(h);
    case SCHED: return acc_scheduler_step(h);
    case SCALER: return acc_grad_scaler_update(h, 0);
    case ST: return acc_safetensors_tensor(h, 0, &v);
    case PROJECT: return acc_project_config_set_iteration(h, 0);
    case CKPT: return acc_checkpoint_commit(h);
    case BSHARD: return acc_batch_shard_get(h, 0, &idx, &cnt);
  }
  return ACC_ERR_INTERNAL;
}

int main(void) {
  char dir[] = "/tmp/acc-handles-XXXXXX";
  REQUIRE_OK(mkdtemp(dir) ? ACC_OK : ACC_ERR_SYSTEM);
  void *h[NK] = {0};
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  h[STATE] = st;
  REQUIRE_OK(acc_accelerator_create((acc_accelerator **)&h[ACCEL], NULL));
  float col[4] = {1, 2, 3, 4};
  acc_field_desc f = {ACC_F32, 1};
  const void *data[1] = {col};
  REQUIRE_OK(acc_dataset_create_memory((acc_dataset **)&h[DATASET], 4, &f, 1, data));
  REQUIRE_OK(acc_dataloader_create((acc_dataloader **)&h[LOADER], h[DATASET], NULL));
  float w = 1, gw = 0;
  int64_t shape[1] = {1};
  REQUIRE_OK(acc_model_create((acc_model **)&h[MODEL]));
  REQUIRE_OK(acc_model_add_parameter(h[MODEL], "w", &w, &gw, 1, shape));
  REQUIRE_OK(acc_optimizer_create_sgd((acc_optimizer **)&h[OPTIM], h[MODEL], NULL));
  REQUIRE_OK(acc_scheduler_create((acc_scheduler **)&h[SCHED], h[OPTIM], NULL));
  REQUIRE_OK(acc_grad_scaler_create((acc_grad_scaler **)&h[SCALER], NULL));
  char path[256];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  acc_tensor_view tv = {"w", ACC_F32, 1, {1}, &w, 0};
  REQUIRE_OK(acc_safetensors_write(path, &tv, 1, NULL, NULL, 0));
  REQUIRE_OK(acc_safetensors_open((acc_safetensors **)&h[ST], path));
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = dir;
  REQUIRE_OK(acc_project_config_create((acc_project_config **)&h[PROJECT], &po));
  snprintf(path, sizeof path, "%s/ckpt", dir);
  REQUIRE_OK(acc_checkpoint_begin(h[PROJECT], path, (acc_checkpoint **)&h[CKPT]));
  int64_t order[4] = {0, 1, 2, 3};
  acc_shard_config cfg = {1, 0, 0, 1};
  REQUIRE_OK(acc_batch_shard_create((acc_batch_shard **)&h[BSHARD], order, 4, 2, 0, &cfg));

  for (int want = 0; want < NK; want++) {
    for (int got = 0; got < NK; got++) {
      if (got == want) continue;
      char expect[128];
      snprintf(expect, sizeof expect, "expected an %s handle, got an %s", type_name[want],
               type_name[got]);
      CHECK_ERR(call(want, h[got]), ACC_ERR_INVALID_ARGUMENT, expect);
    }
    CHECK_ERR(call(want, NULL), ACC_ERR_INVALID_ARGUMENT, "is NULL");
    uint32_t dead[64] = {ACC__MAGIC_DEAD}, stray[64] = {0x12345678u};
    char expect[128];
    snprintf(expect, sizeof expect, "the %s handle was already destroyed", type_name[want]);
    CHECK_ERR(call(want, dead), ACC_ERR_INVALID_ARGUMENT, expect);
    snprintf(expect, sizeof expect, "not an %s handle", type_name[want]);
    CHECK_ERR(call(want, stray), ACC_ERR_INVALID_ARGUMENT, expect);
  }
  /* the iterable shard has no fallible entry: its calls refuse other handles by returning 0 */
  acc_iterable_shard *is;
  REQUIRE_OK(acc_iterable_shard_create(&is, 2, 0, &cfg));
  CHECK(acc_iterable_shard_push((acc_iterable_shard *)h[BSHARD], 1, NULL, NULL) == 0,
        "push took a batch shard");
  CHECK(acc__check_handle(h[BSHARD], ACC__HANDLE_ITERABLE_SHARD, "f") == ACC_ERR_INVALID_ARGUMENT,
        "no error");
  acc_iterable_shard_destroy(is);
  /* accessors that cannot fail return their default for a handle of another kind */
  CHECK(acc_dataloader_len((acc_dataloader *)h[DATASET]) == 0 ||
            acc_dataloader_len((acc_dataloader *)h[DATASET]) == -1, "len of a dataset as a loader");
  CHECK(acc_optimizer_get_lr((acc_optimizer *)h[SCHED]) == 0.0,
        "lr of a scheduler as an optimizer");

  acc_batch_shard_destroy(h[BSHARD]);
  acc_checkpoint_abort(h[CKPT]);
  acc_project_config_destroy(h[PROJECT]);
  acc_safetensors_close(h[ST]);
  acc_grad_scaler_destroy(h[SCALER]);
  acc_scheduler_destroy(h[SCHED]);
  acc_optimizer_destroy(h[OPTIM]);
  acc_model_destroy(h[MODEL]);
  acc_dataloader_destroy(h[LOADER]);
  acc_dataset_destroy(h[DATASET]);
  acc_accelerator_destroy(h[ACCEL]);
  acc_state_destroy(st);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return acc_test_finish("handles");
}
