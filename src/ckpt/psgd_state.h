/* PowerSGD's state in checkpoints (psgd_state.c): powersgd_<process>.safetensors. Not API. */
#ifndef ACC_CKPT_PSGD_STATE_H
#define ACC_CKPT_PSGD_STATE_H

#include "train/accel.h"

/* Fresh states a load filled, swapped in by commit (one per prepared model under the hook). */
typedef struct acc__psgd_staged {
  struct acc__powersgd *fresh[ACC__MAX_PREPARED];
  int active;  /* some prepared model runs the hook */
  int why;     /* the hook starts fresh: 1 saved without it, 2 another process count */
  int ignored; /* the checkpoint has a state but no hook runs now */
} acc__psgd_staged;

/* Prepared models under the PowerSGD hook. */
int acc__psgd_state_models(const acc__accel_parts *p);
/* This process's powersgd_<process>.safetensors in dir (nothing without the hook). */
acc_result acc__psgd_state_save(acc__accel_parts *p, const char *dir);
/* Reads and checks this process's file into fresh states; saved_np: the processes that saved,
 * saved_models: checkpoint.json's "powersgd" (0 for a checkpoint without one). Changes nothing
 * of the accelerator; on failure nothing is staged. */
acc_result acc__psgd_state_stage(acc__accel_parts *p, const char *dir, int64_t saved_np, int saved_models,
                                 acc__psgd_staged *out);
/* Swaps the staged states in (cannot fail) and logs, on process 0, when the hook starts fresh. */
void acc__psgd_state_commit(acc__accel_parts *p, acc__psgd_staged *s, const char *dir, int64_t saved_np);
void acc__psgd_staged_release(acc__psgd_staged *s);

#endif
