/* Internal bridge between the Accelerator (src/accelerator.c) and save_state / load_state
 * (src/accel_state.c). Not API. */
#ifndef ACC_ACCEL_STATE_H
#define ACC_ACCEL_STATE_H

#include "core/internal.h"

typedef struct acc__accel_ckpt acc__accel_ckpt;

/* Borrowed views of the accelerator's prepared objects. */
typedef struct acc__accel_parts {
  acc_state *st;
  acc_model **models; /* prepared models, in prepare order */
  int nmodels;
  acc_optimizer **opts;
  int nopts;
  acc_scheduler **scheds;
  int nscheds;
  acc_dataloader **loaders;
  int nloaders;
  acc_grad_scaler *scaler;
  int64_t *step;          /* the accumulation counter */
  acc__accel_ckpt **ckpt; /* lazily created by accel_state.c, freed by acc__accel_ckpt_free */
} acc__accel_parts;

acc_result acc__accelerator_parts(acc_accelerator *acc, acc__accel_parts *out);
/* The checkpointing state of a valid accelerator (NULL until created). */
acc__accel_ckpt *acc__accelerator_ckpt(const acc_accelerator *acc);
void acc__accel_ckpt_free(acc__accel_ckpt *c);
/* Wraps the result of a user callback, called after acc_clear_error(): a failure with no message
 * becomes "<what> returned ACC_ERR_..."; one with a message gets "<what>: " in front. */
acc_result acc__callback_result(acc_result rc, const char *fmt, ...) ACC_PRINTF(2, 3);
/* fp16: ends the current iteration (the pending loss-scale update) before a save. */
acc_result acc__accelerator_end_iteration(acc_accelerator *acc);
/* ZeRO stage 1 around save_state / load_state (no-ops otherwise): unshard all-gathers every
 * prepared optimizer's state back to full tensors (collective), reshard keeps this process's
 * shard again, so the files hold full tensors whatever the stage and the number of processes. */
acc_result acc__accelerator_zero_unshard(acc_accelerator *acc);
acc_result acc__accelerator_zero_reshard(acc_accelerator *acc);

#endif
