/* The accelerator's insides, shared by the files of src/train/ that implement its calls, and the
 * view of its prepared objects that checkpointing (src/ckpt/) is handed. Not API.
 *
 * accelerator.c (create, prepare, loaders), accel_step.c (accumulation, backward, fp16 iterations,
 * optimizer and scheduler steps) and accel_collect.c (metrics, process control) own the rules; what a call does
 * to the parameters, gradients and optimizer state depends on where they live, and is one of the
 * two tables below, chosen once at acc_accelerator_create:
 *   train_cpu.c     host memory (several models, ZeRO)
 *   train_device.c  device memory (train_sync.c, train_optim.c, train_ckpt.c; one model, no ZeRO) */
#ifndef ACC_TRAIN_ACCEL_H
#define ACC_TRAIN_ACCEL_H

#include "core/internal.h"
#include "device/devctx.h"
#include "train/accel_models.h"

#define ACC__MAX_PREPARED 16

typedef struct acc__accel_ckpt acc__accel_ckpt; /* defined in src/ckpt/accel_state.h */

/* The training calls whose work depends on where the training state lives. Every entry is
 * called by accelerator.c after its own checks and rules, once per public call. */
typedef struct acc__train_ops {
  const char *name; /* "cpu" or "device" */
  acc_result (*prepare_model)(acc_accelerator *acc, acc__pmodel *pm, acc_model *model);
  acc_result (*prepare_optimizer)(acc_accelerator *acc, acc_optimizer *opt);
  /* backward: the model's gradients averaged (fp16: the device rounds them to f16 first) */
  acc_result (*sync_model)(acc_accelerator *acc, acc__pmodel *pm);
  /* fp16: divide the synchronized gradients by the loss scale and note an inf/NaN */
  acc_result (*unscale)(acc_accelerator *acc);
  /* fp16: the overflow decision agreed across processes (inf != 0: every optimizer skips) */
  acc_result (*agree_overflow)(acc_accelerator *acc, int32_t inf);
  acc_result (*clip_grad_norm)(acc_accelerator *acc, acc_model **ms, int n, float max_norm,
                               double norm_type, float *total_norm);
  acc_result (*clip_grad_value)(acc_accelerator *acc, acc_model **ms, int n, float clip_value);
  acc_result (*optimizer_step)(acc_accelerator *acc, acc_optimizer *opt, int fp16);
  /* after a step that ran: ZeRO shards gathered, low-precision copies refreshed (pm: the
   * optimizer's prepared model, NULL when its model was not prepared) */
  acc_result (*after_step)(acc_accelerator *acc, acc__pmodel *pm);
  acc_result (*zero_grad)(acc_accelerator *acc, acc_optimizer *opt);
  acc_result (*refresh_low_precision)(acc_accelerator *acc);
  const uint16_t *(*low_precision)(const acc_accelerator *acc, const acc__pmodel *pm);
} acc__train_ops;

extern const acc__train_ops acc__train_cpu_ops;    /* train_cpu.c */
extern const acc__train_ops acc__train_device_ops; /* train_device.c */

struct acc_accelerator {
  uint32_t magic;
  acc_state *st;
  acc_mixed_precision mp;
  int gas;
  int split_batches, even_batches, step_sched_with_opt, sync_with_dataloader;
  size_t bucket_cap;
  int overlap;
  int64_t step;          /* accumulation counter */
  int sync_gradients;
  int sync_each_batch; /* backward averages every batch; the optimizer still steps every gas */
  int step_was_skipped;
  acc__pmodel models[ACC__MAX_PREPARED]; /* prepared models, in prepare order (src/train/accel_models.c) */
  acc_model *model_list[ACC__MAX_PREPARED]; /* the same models, for checkpointing */
  int nmodels;
  acc_grad_scaler *scaler;
  int want_low_precision;
  acc_optimizer *opts[ACC__MAX_PREPARED];
  int nopts;
  acc_scheduler *scheds[ACC__MAX_PREPARED];
  int nscheds;
  /* fp16 iteration: gradients are unscaled and the overflow agreed once, every prepared
   * optimizer steps (or skips) at most once, then the scaler is updated once. */
  int it_agreed;                     /* the overflow flag below is agreed across processes */
  int32_t it_inf;                    /* an inf/NaN gradient somewhere: every optimizer skips */
  int it_nstepped;                   /* prepared optimizers that stepped in this iteration */
  unsigned char it_stepped[ACC__MAX_PREPARED];
  acc_dataloader *active;     /* loader whose batch is being processed */
  int end_of_dataloader;      /* the active loader's current batch is its last */
  acc_dataloader *joined;     /* next_batch_joined: this process ran out of this loader's epoch */
  acc_dataloader **loaders;   /* prepared loaders, for save_state / load_state */
  int warned_unprepared;      /* next_batch said once that a loader was never prepared */
  int nloaders, cap_loaders;
  acc__accel_ckpt *ckpt;      /* checkpointing state (src/ckpt/accel_state.c), */
  void (*ckpt_free)(acc__accel_ckpt *); /* and its destructor, set by its creator */
  void *metrics_buf;          /* gather_for_metrics' receive buffer, reused across calls */
  size_t metrics_cap;
  int zero; /* ZeRO stage 0, 1 or 2: each model's layout is in its acc__pmodel */
  int comm_hook; /* acc_comm_hook: gradient buckets compressed to f16/bf16 for the all-reduce,
                    or PowerSGD (src/train/powersgd.c) */
  int psgd_rank;   /* PowerSGD: matrix approximation rank (ACCELERATE_POWERSGD_RANK) */
  long psgd_start; /* PowerSGD: steps averaged uncompressed first (ACCELERATE_POWERSGD_START_ITER) */
  acc__pmodel *inflight; /* the model whose buckets grad_ready started reducing (overlap) */
  acc__devctx *dev; /* the device it trains on (src/device/devctx.c) */
  const acc__train_ops *ops; /* CPU or device variants of the training calls, chosen at create */
  unsigned char model_owned[ACC__MAX_PREPARED]; /* created by acc_accelerator_prepare_flat: destroyed with it */
};

/* Shared by accelerator.c, accel_step.c and accel_collect.c: the handle check every public call
 * starts with, the prepared entry of a model (NULL when it was not prepared), the index of a
 * pointer in an array of prepared objects (-1: absent). */
static inline acc_result acc__accel_check(const acc_accelerator *acc, const char *fn) {
  return acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn);
}
acc__pmodel *acc__accel_find_model(acc_accelerator *acc, const acc_model *m);
static inline int acc__accel_find_ptr(void *const *arr, int n, const void *p) {
  for (int i = 0; i < n; i++)
    if (arr[i] == p) return i;
  return -1;
}

/* The dtype of the low-precision parameter copy (ACC_F32: none). */
static inline acc_dtype acc__accel_lp_dtype(const acc_accelerator *acc) {
  return acc->want_low_precision ? acc_autocast_dtype(acc->mp) : ACC_F32;
}

/* Borrowed views of the accelerator's prepared objects. */
typedef struct acc__accel_parts {
  acc_state *st;
  acc_model **models; /* prepared models, in prepare order */
  acc__pmodel *pmodels; /* the same, as the accelerator prepared them (comm hook state) */
  int nmodels;
  acc_optimizer **opts;
  int nopts;
  acc_scheduler **scheds;
  int nscheds;
  acc_dataloader **loaders;
  int nloaders;
  acc_grad_scaler *scaler;
  int64_t *step;          /* the accumulation counter */
  acc__accel_ckpt **ckpt; /* lazily created by src/ckpt/accel_state.c, */
  void (**ckpt_free)(acc__accel_ckpt *); /* which sets the destructor the accelerator calls */
} acc__accel_parts;

/* The parts of a valid accelerator (the checkpoint entry points check the handle first). */
acc_result acc__accelerator_parts(acc_accelerator *acc, acc__accel_parts *out);
static inline void acc__accel_fill_parts(acc_accelerator *acc, acc__accel_parts *out) {
  out->st = acc->st;
  out->models = acc->model_list;
  out->pmodels = acc->models;
  out->nmodels = acc->nmodels;
  out->opts = acc->opts;
  out->nopts = acc->nopts;
  out->scheds = acc->scheds;
  out->nscheds = acc->nscheds;
  out->loaders = acc->loaders;
  out->nloaders = acc->nloaders;
  out->scaler = acc->scaler;
  out->step = &acc->step;
  out->ckpt = &acc->ckpt;
  out->ckpt_free = &acc->ckpt_free;
}
/* The checkpointing state of a valid accelerator (NULL until created). */
acc__accel_ckpt *acc__accelerator_ckpt(const acc_accelerator *acc);
/* fp16: ends the current iteration (the pending loss-scale update) before a save. */
acc_result acc__accelerator_end_iteration(acc_accelerator *acc);
/* Gradient buckets whose averaging grad_ready started before backward, over the prepared models,
 * since they were prepared: tests check with it that overlap happened. */
size_t acc__accelerator_early_buckets(const acc_accelerator *acc);
/* ZeRO stage 1 around save_state / load_state (no-ops otherwise): unshard all-gathers every
 * prepared optimizer's state back to full tensors (collective), reshard keeps this process's
 * shard again, so the files hold full tensors whatever the stage and the number of processes. */
acc_result acc__accelerator_zero_unshard(acc_accelerator *acc);
acc_result acc__accelerator_zero_reshard(acc_accelerator *acc);

/* The one-call forms (port.c, typed_own.c): prepares model m that the caller just built (built:
 * the result of building it) and makes it the accelerator's (destroyed with it); on any failure m
 * is destroyed and the error returned. *out (may be NULL) receives m. */
acc_result acc__accelerator_prepare_owned(acc_accelerator *acc, acc_model *m, acc_result built, acc_model **out);

#endif
