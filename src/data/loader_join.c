/* Accelerate's join_uneven_inputs(..., even_batches=...) for prepared loaders: every given
 * map-style loader yields with the override's even_batches for the epochs that begin during the
 * join, and gets its own setting back at the end (an epoch in progress then finishes with the
 * setting it began with: its plan and length are fixed at its start). Dispatching and iterable loaders are left
 * alone with a warning, as Accelerate does. */
#include "core/log.h"
#include "data/loader_impl.h"

#define JOIN_BEGIN "acc_join_uneven_inputs_begin"
#define JOIN_END "acc_join_uneven_inputs_end"

static int overridable(const acc_dataloader *dl) { return !dl->dispatch && !dl->iterable; }

acc_result acc_join_uneven_inputs_begin(acc_dataloader *const *loaders, size_t n,
                                        int even_batches) {
  if (n && !loaders) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: loaders is NULL", JOIN_BEGIN);
  if (even_batches != ACC_UNSET && even_batches != 0 && even_batches != 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: even_batches is %d (expected 0, 1 or ACC_UNSET for no override)",
                      JOIN_BEGIN, even_batches);
  /* everything is checked before any loader changes */
  int skipped = 0;
  for (size_t i = 0; i < n; i++) {
    const acc_dataloader *dl = loaders[i];
    ACC_CHECK(acc__loader_check(dl, JOIN_BEGIN));
    if (dl->join_saved >= 0)
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "%s: loader %zu is already inside a join (call %s first)", JOIN_BEGIN, i,
                        JOIN_END);
    for (size_t j = 0; j < i; j++)
      if (loaders[j] == dl)
        return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: loader %zu is given twice (also %zu)",
                          JOIN_BEGIN, i, j);
    if (even_batches == ACC_UNSET) continue;
    if (!overridable(dl)) {
      skipped++;
      continue;
    }
    if (dl->in_epoch)
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "%s: loader %zu is in the middle of epoch %lld; override even_batches "
                        "between epochs (before its first acc_dataloader_next of an epoch, or "
                        "after the call that returned the end)",
                        JOIN_BEGIN, i, (long long)dl->epoch);
  }
  if (skipped)
    acc__log(ACC_LOG_WARNING,
             "Overriding even_batches is only supported for map-style datasets, yet some "
             "dataloaders given were iterable (or dispatching): %d left as they are",
             skipped);
  for (size_t i = 0; i < n; i++) {
    acc_dataloader *dl = loaders[i];
    dl->join_saved = dl->o.shard.even_batches != 0;
    if (even_batches != ACC_UNSET && overridable(dl)) dl->o.shard.even_batches = even_batches;
  }
  return ACC_OK;
}

acc_result acc_join_uneven_inputs_end(acc_dataloader *const *loaders, size_t n) {
  if (n && !loaders) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: loaders is NULL", JOIN_END);
  for (size_t i = 0; i < n; i++) {
    ACC_CHECK(acc__loader_check(loaders[i], JOIN_END));
    if (loaders[i]->join_saved < 0)
      return acc__error(ACC_ERR_INVALID_USAGE, "%s: loader %zu is not inside a join (no %s)",
                        JOIN_END, i, JOIN_BEGIN);
  }
  for (size_t i = 0; i < n; i++) {
    acc_dataloader *dl = loaders[i];
    dl->o.shard.even_batches = dl->join_saved;
    dl->join_saved = -1;
  }
  return ACC_OK;
}

int acc_dataloader_even_batches(const acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return -1;
  return dl->o.shard.even_batches != 0;
}
