/* One-call preparation for programs ported from a single-process trainer (docs/porting.md): a
 * flat parameter table as a prepared model, token files as a prepared loader, and the next batch
 * of it as the inputs / targets arrays such a trainer reads. */
#include <limits.h>

#include "accelerate.h"
#include "data/data_internal.h"
#include "train/accel.h"

_Static_assert(sizeof(int) == sizeof(int32_t), "token batches are int32: int must be 32 bits");

acc_result acc_accelerator_prepare_flat(acc_accelerator *acc, const acc_param_spec *table, size_t count,
                                        float *params, float *grads, acc_model **out) {
  if (out) *out = NULL;
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, "acc_accelerator_prepare_flat"));
  acc_model *m;
  ACC_CHECK(acc_model_create(&m));
  acc_result rc = acc_model_add_flat(m, table, count, params, grads, NULL);
  if (rc == ACC_OK) rc = acc_accelerator_prepare_model(acc, m);
  if (rc != ACC_OK) {
    acc_model_destroy(m);
    return rc;
  }
  for (int i = 0; i < acc->nmodels; i++)
    if (acc->model_list[i] == m) acc->model_owned[i] = 1; /* destroyed with the accelerator */
  if (out) *out = m;
  return ACC_OK;
}

acc_result acc_accelerator_prepare_tokens(acc_accelerator *acc, const char *const *paths, int num_paths,
                                          int64_t seq_len, int64_t batch_size, acc_dataloader **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_prepare_tokens: out is NULL");
  *out = NULL;
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, "acc_accelerator_prepare_tokens"));
  acc_token_options to = ACC_TOKEN_OPTIONS_INIT;
  to.seq_len = seq_len;
  acc_dataset *ds;
  ACC_CHECK(acc_dataset_create_tokens(&ds, paths, num_paths, &to));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = batch_size;
  lo.shuffle = 1;
  lo.drop_last = 1;
  acc_dataloader *dl;
  acc_result rc = acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl);
  if (rc != ACC_OK) {
    acc_dataset_destroy(ds);
    return rc;
  }
  acc__dataloader_own_dataset(dl);
  *out = dl;
  return ACC_OK;
}

acc_result acc_accelerator_next_tokens(acc_accelerator *acc, acc_dataloader *dl, int **inputs, int **targets) {
  if (!inputs || !targets)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_next_tokens: inputs or targets is NULL");
  const acc_batch *b;
  ACC_CHECK(acc_accelerator_next_batch(acc, dl, &b));
  if (!b) ACC_CHECK(acc_accelerator_next_batch(acc, dl, &b)); /* the epoch ended: the next one */
  if (!b || b->num_fields != 2)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_accelerator_next_tokens: the loader %s (use a loader of acc_accelerator_prepare_tokens)",
                      b ? "is not over a token dataset" : "yields no batch (fewer windows than one batch per process)");
  *inputs = b->fields[0];
  *targets = b->fields[1];
  return ACC_OK;
}
