/* bf16/fp16 tables whose float32 master weights are the program's (a CUDA trainer with its own
 * optimizer, llm.c's train_gpt2.cu): the model's parameters point into the program's master
 * buffer, so the library keeps no copy of the weights, save_state / save_model write what the
 * program trained and load_state writes into the program's master (and rounds it into the
 * program's bf16/fp16 parameters). The library still keeps float32 gradients for the average
 * (float32 accumulation). And the one-call form of such a table (acc_accelerator_prepare_flat_typed). */
#include "accelerate.h"
#include "train/accel.h"
#include "train/model_internal.h"

acc_result acc_model_add_flat_typed_master(acc_model *m, const acc_param_spec *table, size_t count, acc_dtype dtype,
                                           void *params, void *grads, float *master, size_t *first_index) {
  static const char fn[] = "acc_model_add_flat_typed_master";
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, fn));
  if (!master)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the float32 master buffer is NULL; pass the program's master weights (one float per "
                      "parameter value, in table order), or use acc_model_add_flat_typed to have the library keep "
                      "its own copy", fn);
  if (dtype != ACC_BF16 && dtype != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: dtype %d is not a half-precision parameter dtype: choose ACC_BF16 or ACC_F16 (a float32 "
                      "table is its own master: acc_model_add_flat)", fn, (int)dtype);
  return acc__typed_add(m, table, count, dtype, params, grads, master, first_index, fn);
}

size_t acc_model_typed_library_bytes(const acc_model *m) {
  if (!acc__handle_ok(m, ACC__HANDLE_MODEL)) return 0;
  size_t n, bytes = 0;
  const acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++) bytes += g[k].numel * sizeof(float) * (g[k].master_program ? 1u : 2u);
  return bytes;
}

acc_result acc_accelerator_prepare_flat_typed(acc_accelerator *acc, const acc_param_spec *table, size_t count,
                                              acc_dtype dtype, void *params, void *grads, float *master,
                                              acc_model **out) {
  static const char fn[] = "acc_accelerator_prepare_flat_typed";
  if (out) *out = NULL;
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  acc_model *m;
  ACC_CHECK(acc_model_create(&m));
  acc_result rc = master ? acc_model_add_flat_typed_master(m, table, count, dtype, params, grads, master, NULL)
                         : acc_model_add_flat_typed(m, table, count, dtype, params, grads, NULL);
  return acc__accelerator_prepare_owned(acc, m, rc, out);
}
