/* The prepared data loader's position: the epoch, the batches handed out in it, the batches to
 * skip at the start of the next one, and the state a checkpoint saves and restores
 * (acc_dataloader_state_get / _set; round_units maps a position saved by N processes onto M). */
#include "data/loader_impl.h"

int64_t acc_dataloader_epoch(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? dl->epoch : 0;
}

acc_result acc_dataloader_set_epoch(acc_dataloader *dl, int64_t epoch) {
  ACC_CHECK(acc__loader_check(dl, "acc_dataloader_set_epoch"));
  if (epoch < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_set_epoch: epoch is %lld, expected >= 0",
                      (long long)epoch);
  acc__loader_stop_epoch(dl);
  dl->epoch = epoch;
  dl->yielded = dl->skip_next;
  dl->sticky_rc = ACC_OK;
  return ACC_OK;
}

acc_result acc_dataloader_skip_first_batches(acc_dataloader *dl, int64_t n) {
  ACC_CHECK(acc__loader_check(dl, "acc_dataloader_skip_first_batches"));
  if (n < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_dataloader_skip_first_batches: n is %lld, expected >= 0", (long long)n);
  if (dl->in_epoch)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_dataloader_skip_first_batches: epoch %lld is in progress (%lld batches "
                      "handed out); call it before the first acc_dataloader_next of an epoch",
                      (long long)dl->epoch, (long long)dl->yielded);
  dl->skip_next = n;
  dl->yielded = n;
  return ACC_OK;
}

acc_result acc_dataloader_state_get(const acc_dataloader *dl, acc_dataloader_state *out) {
  ACC_CHECK(acc__loader_check(dl, "acc_dataloader_state_get"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_state_get: out is NULL");
  out->seed = dl->o.seed;
  out->epoch = dl->epoch;
  out->batches = dl->yielded;
  return ACC_OK;
}

acc_result acc_dataloader_state_set(acc_dataloader *dl, const acc_dataloader_state *st) {
  ACC_CHECK(acc__loader_check(dl, "acc_dataloader_state_set"));
  if (!st) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_state_set: state is NULL");
  if (st->epoch < 0 || st->batches < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_dataloader_state_set: epoch %lld and batches %lld must be >= 0",
                      (long long)st->epoch, (long long)st->batches);
  acc__loader_stop_epoch(dl);
  dl->o.seed = st->seed;
  dl->epoch = st->epoch;
  dl->skip_next = st->batches;
  dl->yielded = st->batches;
  dl->sticky_rc = ACC_OK;
  return ACC_OK;
}

int64_t acc__dataloader_round_units(const acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return 1;
  return (dl->split ? 1 : dl->np) * (dl->batched ? 1 : dl->o.batch_size);
}
