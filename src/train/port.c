/* One-call preparation for programs ported from a single-process trainer (docs/porting.md): a
 * flat parameter table as a prepared model, token files as a prepared loader, and the next batch
 * of it as the inputs / targets arrays such a trainer reads. */
#include <limits.h>
#include <math.h>
#include <stdio.h>

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
  return acc__accelerator_prepare_owned(acc, m, acc_model_add_flat(m, table, count, params, grads, NULL), out);
}

acc_result acc__accelerator_prepare_owned(acc_accelerator *acc, acc_model *m, acc_result built, acc_model **out) {
  acc_result rc = built == ACC_OK ? acc_accelerator_prepare_model(acc, m) : built;
  if (rc != ACC_OK) {
    acc_model_destroy(m);
    return rc;
  }
  for (int i = 0; i < acc->nmodels; i++)
    if (acc->model_list[i] == m) acc->model_owned[i] = 1; /* destroyed with the accelerator */
  if (out) *out = m;
  return ACC_OK;
}

acc_result acc_accelerator_prepare_tokens_opts(acc_accelerator *acc, const char *const *paths, int num_paths,
                                               int64_t batch_size, const acc_token_loader_options *opts,
                                               acc_dataloader **out) {
  static const char fn[] = "acc_accelerator_prepare_tokens_opts";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  if (!opts) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: options are required (window at least)", fn);
  acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_token_loader_options, ACC_TOKEN_LOADER_OPTIONS_VERSION, fn);
  if (o.window < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: window is %lld, expected >= 1 (the T of B x T)", fn,
                      (long long)o.window);
  if (o.host_batches != 0 && o.host_batches != 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: host_batches is %d, expected 0 or 1", fn, o.host_batches);
  acc_token_options to = ACC_TOKEN_OPTIONS_INIT;
  to.seq_len = o.window;
  to.stride = o.stride;
  to.max_windows = o.max_windows;
  to.format = o.format;
  to.vocab_size = o.vocab_size;
  acc_dataset *ds;
  ACC_CHECK(acc_dataset_create_tokens(&ds, paths, num_paths, &to));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = batch_size;
  lo.shuffle = o.shuffle != 0;
  lo.seed = o.seed;
  lo.drop_last = o.drop_last != 0;
  lo.take_dataset = 1; /* destroyed with the loader, or here if the loader cannot be made */
  lo.device_placement = o.host_batches ? 0 : 1;
  return acc_accelerator_prepare_dataloader(acc, ds, &lo, out);
}

acc_result acc_accelerator_prepare_tokens(acc_accelerator *acc, const char *const *paths, int num_paths,
                                          int64_t seq_len, int64_t batch_size, acc_dataloader **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_prepare_tokens: out is NULL");
  acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT; /* shuffled, seed 0, full batches */
  o.window = seq_len;
  return acc_accelerator_prepare_tokens_opts(acc, paths, num_paths, batch_size, &o, out);
}

acc_result acc_accelerator_prepare_tokens_eval(acc_accelerator *acc, const char *const *paths, int num_paths,
                                               int64_t seq_len, int64_t batch_size, int64_t windows,
                                               acc_dataloader **out) {
  if (out) *out = NULL;
  if (windows < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_accelerator_prepare_tokens_eval: windows is %lld, expected >= 1 (the size of the "
                      "validation set)", (long long)windows);
  acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT;
  o.window = seq_len;
  o.shuffle = 0;
  o.drop_last = 0;
  o.max_windows = windows;
  return acc_accelerator_prepare_tokens_opts(acc, paths, num_paths, batch_size, &o, out);
}

acc_result acc_accelerator_evaluate_tokens(acc_accelerator *acc, acc_dataloader *dl, acc_token_eval_fn fn,
                                           void *ctx, double *mean_loss, int64_t *count) {
  static const char name[] = "acc_accelerator_evaluate_tokens";
  if (count) *count = 0;
  if (!fn || !mean_loss) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: fn or mean_loss is NULL", name);
  *mean_loss = 0;
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, name));
  ACC_CHECK(acc__check_handle(dl, ACC__HANDLE_DATALOADER, name));
  acc_dataloader_state ds;
  ACC_CHECK(acc_dataloader_state_get(dl, &ds));
  if (ds.batches != 0)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: the loader is at batch %lld of epoch %lld; an evaluation starts at the first batch of an "
                      "epoch (read the validation loader only through this call)", name, (long long)ds.batches,
                      (long long)ds.epoch);
  const int np = acc_state_num_processes(acc->st);
  const int64_t bs = acc_dataloader_total_batch_size(dl) / np > 0 ? acc_dataloader_total_batch_size(dl) / np : 1;
  float *mine = acc__calloc((size_t)bs, sizeof *mine), *all = acc__calloc((size_t)bs * (size_t)np, sizeof *all);
  acc_result rc = mine && all ? ACC_OK : ACC_ERR_NOMEM, cb = ACC_OK;
  char why[512] = "";
  double sum = 0;
  int64_t n = 0;
  while (rc == ACC_OK) {
    const acc_batch *b = NULL;
    rc = acc_accelerator_next_batch(acc, dl, &b);
    if (rc != ACC_OK || !b) break; /* the end of the epoch: the next evaluation starts the next one */
    if (b->num_fields != 2 || b->size > bs) {
      rc = acc__error(ACC_ERR_INVALID_USAGE, "%s: the loader is not over a token dataset (use a loader of "
                      "acc_accelerator_prepare_tokens_eval)", name);
      break;
    }
    if (cb == ACC_OK) {
      acc_clear_error();
      cb = fn(ctx, b->fields[0], b->fields[1], b->size, mine);
      if (cb != ACC_OK) snprintf(why, sizeof why, "%s", acc_last_error());
    }
    /* a failed callback still takes part in every gather (the others wait in it), flagged NaN */
    if (cb != ACC_OK)
      for (int64_t i = 0; i < b->size; i++) mine[i] = NAN;
    int64_t kept = 0;
    rc = acc_accelerator_gather_for_metrics(acc, mine, b->size, 1, ACC_F32, all, bs * np, &kept);
    for (int64_t i = 0; rc == ACC_OK && i < kept; i++) sum += (double)all[i];
    n += kept;
  }
  /* which processes failed in the callback: one small all-reduce, so every process returns an error */
  int32_t failed = rc == ACC_OK && cb != ACC_OK ? acc_state_process_index(acc->st) + 1 : 0;
  if (rc == ACC_OK) rc = acc_all_reduce(acc->st, &failed, &failed, 1, ACC_I32, ACC_MAX);
  acc__free(mine);
  acc__free(all);
  ACC_CHECK(rc);
  if (cb != ACC_OK)
    return acc__error(cb, "%s: the loss callback failed on process %d%s%s", name, acc_state_process_index(acc->st),
                      why[0] ? ": " : "", why);
  if (failed)
    return acc__error(ACC_ERR_REMOTE, "%s: the loss callback failed on process %d (its own error says why)", name,
                      failed - 1);
  if (n == 0) return acc__error(ACC_ERR_INVALID_USAGE, "%s: the loader yielded no window", name);
  *mean_loss = sum / (double)n;
  if (count) *count = n;
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
