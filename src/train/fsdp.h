/* FSDP's internal state (src/train/fsdp.c, fsdp_unit.c), shared with its checkpoints
 * (src/ckpt/fsdp_ckpt.c). Not API: include/accelerate/fsdp.h is. */
#ifndef ACC_TRAIN_FSDP_H
#define ACC_TRAIN_FSDP_H

#include "core/internal.h"

struct acc__devctx;

#define ACC__FSDP_MAGIC 0x46534450u /* "FSDP" */

/* where a unit is in its step */
enum { ACC__FSDP_IDLE = 0, ACC__FSDP_FWD, ACC__FSDP_FWD_DONE, ACC__FSDP_BWD };

typedef struct acc__fsdp_unit {
  char *name;
  size_t first_row, num_rows;
  size_t off;      /* element offset of the unit in the whole table */
  size_t numel;    /* U: elements of the unit */
  size_t shard;    /* S: elements each process owns (ceil(U / W) when sharded, U under NO_SHARD) */
  size_t lo, hi;   /* this process's range of the unit's elements, [lo, hi) (hi - lo <= S) */
  size_t shard_at; /* offset of this unit's shard in master / gshard */
  int phase;       /* ACC__FSDP_* */
  void *pbuf;      /* gathered parameters in the table's dtype (pool buffer; NO_SHARD float32: the
                      master shard itself), NULL when not held */
  void *gbuf;      /* gradient buffer in the table's dtype while in backward (pool buffer or nosync) */
  void *nosync;    /* full gradients (table's dtype) kept under no_sync (padded), NULL otherwise */
  int prefetched;  /* pbuf filled ahead by a prefetch, not yet taken by a begin call */
  struct acc__comm_job *pending; /* the prefetch's gather into pbuf, submitted and not yet waited
                                    (comm/async.h); NULL otherwise */
} acc__fsdp_unit;

typedef struct acc__fsdp_pool_buf {
  float *p;
  size_t cap;   /* elements (a unit's padded size: small units take small buffers) */
  int in_use;
  size_t owner; /* the unit that last held it (for the use-after-end message) */
  int kind;     /* 0 parameters, 1 gradients (last use) */
  int poisoned;
} acc__fsdp_pool_buf;

struct acc_fsdp {
  uint32_t magic;
  acc_state *st;
  int rank, world;
  int sharded;        /* FULL_SHARD, SHARD_GRAD_OP or a HYBRID strategy */
  /* HYBRID_SHARD / HYBRID_SHARD_ZERO2: sharded over this machine's processes,
   * replicated across machines. srank / sworld: this process's index among the processes the
   * shards are spread over, and their number (rank / world otherwise); shard_group: the group of
   * the gathers and reduce-scatters (comm/group.h: the job, or this machine's processes);
   * replica / replicas: this process's machine and the number of machines holding each shard
   * (the rail over which a shard's gradients are all-reduced; 0 / 1 otherwise). */
  int srank, sworld, shard_group, replica, replicas;
  int strategy, reshard, bwd_prefetch, fwd_prefetch, sdt, offload, wrap, sync_states;
  int64_t min_params;
  acc_dtype dtype;      /* of the gathered parameters and the program's gradients: F32, BF16 or F16 */
  acc_accelerator *acc; /* the accelerator (its fp16 grad scaler, its skipped-step flag) */
  int unscaled;         /* fp16: the gradient shards were divided by the loss scale since the last step */
  int found_inf;        /* ... and an inf/NaN was found on some process (agreed) */
  int skipped;          /* the last acc_fsdp_optimizer_step skipped (fp16 overflow) */
  acc_dtype compress;   /* the accelerator's comm hook: ACC_F16 / ACC_BF16 (the gradient reductions
                           in that type, fsdp_unit.c), ACC_F32 none */
  acc_param_spec *rows; /* copied table (names owned) */
  size_t nrows;
  size_t *row_numel, *row_off; /* elements of each row, its offset in the whole table */
  size_t total;
  acc__fsdp_unit *units;
  size_t nunits, cap_units;
  int prepared;
  float *master, *gshard; /* this process's shards, sum of S over units */
  size_t shard_total;
  acc_model *model;       /* one parameter per unit over master / gshard */
  acc__fsdp_pool_buf *pool;
  size_t npool, pool_in_use, pool_peak;
  size_t pool_elems, pool_elems_in_use, pool_elems_peak; /* allocated, in use, most in use at once */
  size_t buf_elems;       /* the largest padded unit (the largest pool buffer) */
  size_t nosync_bytes;
  int no_sync;
  /* on a device (fsdp_mem.c): the accelerator's device; NULL on the CPU. master, gshard, the pool
   * and the no_sync buffers are then its memory, and so are the rest: */
  struct acc__devctx *dev;
  float *d_coef;                /* the clip coefficient for the scale kernel */
  int32_t *d_flag;              /* the unscale kernel's overflow flag (fp16) */
  double *d_partials;           /* norm partial sums */
  void *h_stage;                /* host staging of the poison check and the max norm (kept) */
  struct acc__dcomm *dcomm;     /* FSDP's NCCL communicator over the job (fsdp_coll.c); NULL: host-staged */
  size_t d_partials_cap;
  acc_optimizer *dopt;          /* the optimizer whose state d_state holds (fsdp_optim.c) */
  float *d_state[2];            /* its state over master: momentum, or exp_avg and exp_avg_sq */
  acc_result (*settle)(acc_fsdp *f); /* waits for the prefetch gathers in flight (acc__fsdp_settle) */
  /* The one gradient reduction in flight (float32, no comm hook, sharded): unit `unit`'s
   * reduce-scatter (and HYBRID's rail all-reduce) submitted by its backward_end, finished (the
   * block added into the gradient shard, the buffers given back) by the next reduction, the end
   * of the backward pass, or acc__fsdp_settle. */
  struct {
    int active;
    size_t unit;
    struct acc__comm_job *h[2];
    float *out, *tmp; /* the reduced block; a padded copy of a no_sync buffer (freed) */
    void *gbuf;       /* the unit's gradient buffer: back to the pool, or its no_sync buffer freed */
  } rs;
};

acc_result acc__fsdp_check(const acc_fsdp *f, const char *fn);
acc_result acc__fsdp_check_ready(const acc_fsdp *f, const char *fn);
/* the origin index of an FSDP collective: unit u, kind k (0 gather, 1 reduce-scatter, 2 all-reduce
 * (NO_SHARD's of the unit; HYBRID's of the shard over the rail), 3 norm, 4 setup, 5 checkpoint,
 * 6 fp16 overflow flag) */
int64_t acc__fsdp_origin(size_t unit, int kind);
/* elements of unit u's buffers: its padded size (shard x processes when sharded, numel otherwise) */
size_t acc__fsdp_padded(const acc_fsdp *f, size_t u);
/* all-gathers unit u's full parameters into dst (acc__fsdp_padded elements of the table's dtype:
 * the master shards rounded to 16 bits for a bf16/fp16 table; only sharded strategies) */
acc_result acc__fsdp_gather_unit(acc_fsdp *f, size_t u, void *dst, int kind);
/* bytes of one element of the program's buffers (4 for ACC_F32, 2 for ACC_BF16 / ACC_F16) */
size_t acc__fsdp_esize(const acc_fsdp *f);
/* the table's dtype in words (src/train/fsdp_mp.c) */
const char *acc__fsdp_dtype_word(acc_dtype d);
/* fp16: divides the gradient shards by the accelerator's loss scale once per step and agrees on
 * overflow across processes (one all-reduce); nothing without a scaler or when already done */
acc_result acc__fsdp_unscale(acc_fsdp *f, const char *fn);
/* waits for every submitted prefetch gather (before anything reads or frees the pool); the first
 * failure's error, after every unit was settled. Through the hook fsdp_unit.c installs with its
 * first prefetch (fsdp.c and fsdp_mp.c sit below fsdp_unit.c: no call up) */
static inline acc_result acc__fsdp_settle(acc_fsdp *f) { return f && f->settle ? f->settle(f) : ACC_OK; }
/* releases every pool buffer (between steps / before a load); every unit back to not started */
void acc__fsdp_pool_free(acc_fsdp *f);

#endif
