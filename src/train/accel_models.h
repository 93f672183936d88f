/* The models prepared in an accelerator (src/train/accel_models.c): each with its own gradient buckets,
 * low-precision copy and ZeRO layout. The accelerator (src/train/accelerator.c) keeps an array of them
 * in prepare order and iterates it; everything that concerns one model lives here. Internal. */
#ifndef ACC_ACCEL_MODELS_H
#define ACC_ACCEL_MODELS_H

#include "train/grad_sync.h"
#include "core/internal.h"

/* One prepared model. */
typedef struct acc__pmodel {
  acc_model *model;
  acc_state *st;
  acc__grad_sync *gs;      /* NULL at ZeRO stage 1 (one reduce-scatter of the whole layout) */
  uint16_t *low_precision; /* the parameters in the autocast dtype (low_precision_params) */
  int no_sync;             /* acc_accelerator_no_sync: backward leaves its gradients local */
  int synced;              /* fp16: its gradients were synchronized in the current iteration */
  int unscaled;            /* fp16: its gradients were unscaled in the current iteration */
  /* ZeRO (stage 1 and 2): the parameters with a gradient laid end to end (registration order),
   * padded to zshard * N elements; this process owns [rank * zshard, (rank + 1) * zshard). */
  int zero;
  size_t *zoff;   /* per parameter: first element in the layout; SIZE_MAX without a gradient */
  size_t ztotal, zshard;
  float *zflat;   /* stage 1: zshard * N floats, the reduce-scatter and all-gather buffer.
                     stage 2: NULL (buckets are reduced to their owners, parameters gathered in
                     chunks of zchunk elements per process through zbuf) */
  size_t zchunk;
  float *zbuf;    /* stage 2: max(bucket, zchunk * N) floats */
  size_t zbuf_n;
  size_t bucket_cap;   /* kept to rebuild the buckets when gradients are attached later */
  int overlap;
  acc_dtype compress;  /* the comm hook's 16-bit type (ACC_F32: none), kept for the same reason */
  struct acc__powersgd *psgd; /* the PowerSGD comm hook's state (train/powersgd.h), or NULL */
  uint64_t grad_gen;   /* the model's gradient generation the buckets were built for */
  int grads_checked;   /* every parameter that takes a gradient has one (checked at backward) */
  uint64_t lp_gen;     /* bumped at every rewrite of low_precision (acc_accelerator_low_precision_view) */
  size_t early_buckets; /* buckets whose averaging grad_ready started before backward (tests) */
} acc__pmodel;

/* Prepares m: process 0's parameters broadcast to every process, the ZeRO layout (zero 1 or 2),
 * the gradient buckets, the low-precision copy when lp_dtype is ACC_F16 or ACC_BF16 (ACC_F32:
 * none). On failure *pm is released. Collective. */
acc_result acc__pmodel_init(acc__pmodel *pm, acc_state *st, acc_model *m, size_t bucket_cap, int overlap,
                            int zero, acc_dtype lp_dtype);
void acc__pmodel_free(acc__pmodel *pm);
/* The comm hook (acc_comm_hook) for this model's buckets, kept when they are rebuilt: fp16/bf16
 * compression or PowerSGD (rank, start step); nothing for ACC_COMM_HOOK_NONE or ZeRO stage 1. */
acc_result acc__pmodel_use_comm_hook(acc__pmodel *pm, int hook, int psgd_rank, long psgd_start);

/* The gradient sync of one model after the program's backward pass (fp16: the gradients pass
 * through half precision first). Stage 0: the mean in every gradient. Stage 1 and 2: the mean of
 * this process's shard; the gradients outside it are zero. Collective. */
acc_result acc__pmodel_sync(acc__pmodel *pm, acc_state *st, int fp16);
/* Before a backward (sync or grad_ready): fails naming the first parameter that takes a gradient
 * but has none attached, and rebuilds the buckets when gradients were attached or replaced since
 * they were built (refused while gradients of this step are in flight). */
acc_result acc__pmodel_check_grads(acc__pmodel *pm, const char *fn);
/* Marks parameter index of the model ready for the overlapped sync (stage 0 and 2). */
acc_result acc__pmodel_grad_ready(acc__pmodel *pm, size_t index);
acc_result acc__pmodel_refresh_low_precision(acc__pmodel *pm, acc_dtype lp_dtype);

/* ZeRO: this process's element range of the layout. */
void acc__pmodel_zero_range(const acc__pmodel *pm, acc_state *st, size_t *lo, size_t *hi);
/* ZeRO: after a step of the shard, every process's updated shard all-gathered into place. */
acc_result acc__pmodel_zero_gather(acc__pmodel *pm, acc_state *st);
/* The one ZeRO parameter all-gather (zero_shard.c), for the library's step above and the program's
 * (acc_accelerator_zero_gather): this process's range of the layout moved into buffer, all-gathered
 * in chunks of `chunk` elements a process (0: the whole shard), the others' ranges moved back into
 * the rows. pass 0 moves the float32 values, pass 1 the program's 16-bit values of tables with the
 * program's master; buffer holds chunk * N elements of the pass's size; d: the device whose memory
 * the rows are (through its copies), NULL for host rows. */
struct acc__devctx;
acc_result acc__zero_gather_pass(acc_state *st, struct acc__devctx *d, acc_model *m, int pass, void *buffer,
                                 size_t chunk, int origin_index);
/* ZeRO around save/load_state: the optimizer's state to full tensors and back to the shard. */
acc_result acc__pmodel_zero_unshard(acc__pmodel *pm, acc_state *st, acc_optimizer *opt);
acc_result acc__pmodel_zero_reshard(acc__pmodel *pm, acc_state *st, acc_optimizer *opt);

/* Global-norm clipping over the gradients of n models (torch's clip_grad_norm_ over all their
 * parameters): the sum of squares (or max) in model then registration order; st non-NULL adds
 * one all-reduce of it (ZeRO: each process holds its shard, zero elsewhere). */
acc_result acc__clip_norm_models(acc_state *st, acc_model *const *ms, int n, float max_norm, double norm_type,
                                 float *out);

#endif
