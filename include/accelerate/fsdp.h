/* accelerate-c: fully sharded training (Accelerate's FSDP, DeepSpeed's ZeRO-3) for C programs
 * whose parameters form one flat table (docs/fsdp.md).
 *
 * The program describes its parameters as a table of rows (acc_param_spec, the table of
 * acc_model_add_flat) and groups consecutive rows into units (the embedding, each transformer
 * block, the head). The library owns every process's shard of each unit: its float32 master
 * weights, its averaged gradient and (through an optimizer created over acc_fsdp_model) its
 * optimizer state. Around each unit's forward and backward the program asks for the unit's full
 * parameters (all-gathered into a buffer laid out like the unit's rows) and, in backward, for a
 * buffer to add the unit's gradients into; ending the unit's backward reduce-scatters those
 * gradients into the owning shards and returns both buffers to a small pool. Between steps no
 * process holds more than its shards.
 *
 * Collective: create/prepare, every unit call, clip_grad_norm and the checkpoint calls are made
 * by every process in the same order with the same units (a process that skips or reorders a unit
 * gets ACC_ERR_MISMATCH naming the unit, never a hang). Threads: one thread at a time. */
#ifndef ACCELERATE_FSDP_H
#define ACCELERATE_FSDP_H

#include "accelerator.h"
#include "common.h"
#include "model.h"
#include "optim.h"
#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_fsdp acc_fsdp;

/** torch's ShardingStrategy, with its numbers (FSDP_SHARDING_STRATEGY accepts names or 1-5). */
typedef enum acc_fsdp_sharding_strategy {
  ACC_FSDP_FULL_SHARD = 1,     /* ZeRO-3: parameters gathered per unit, freed after forward */
  ACC_FSDP_SHARD_GRAD_OP = 2,  /* ZeRO-2 + sharded parameters between steps: kept from forward to backward */
  ACC_FSDP_NO_SHARD = 3,       /* DDP: every process holds everything, gradients all-reduced */
  ACC_FSDP_HYBRID_SHARD = 4,   /* FULL_SHARD inside a machine, replicated across machines (docs/fsdp.md) */
  ACC_FSDP_HYBRID_SHARD_ZERO2 = 5 /* SHARD_GRAD_OP inside a machine, replicated across */
} acc_fsdp_sharding_strategy;

/** torch's BackwardPrefetch (FSDP_BACKWARD_PREFETCH), plus NO_PREFETCH. */
typedef enum acc_fsdp_backward_prefetch {
  ACC_FSDP_BACKWARD_PRE = 1,  /* unit k-1's gather issued when unit k's backward begins */
  ACC_FSDP_BACKWARD_POST = 2, /* issued when unit k's backward ends */
  ACC_FSDP_NO_PREFETCH = 3
} acc_fsdp_backward_prefetch;

/** FSDP_STATE_DICT_TYPE. LOCAL_STATE_DICT is refused (a SHARDED one resumes anywhere). */
typedef enum acc_fsdp_state_dict_type {
  ACC_FSDP_FULL_STATE_DICT = 1,
  ACC_FSDP_LOCAL_STATE_DICT = 2,
  ACC_FSDP_SHARDED_STATE_DICT = 3
} acc_fsdp_state_dict_type;

/** FSDP_AUTO_WRAP_POLICY: applies only to a program that declares no units. */
typedef enum acc_fsdp_auto_wrap_policy {
  ACC_FSDP_NO_WRAP = 0,          /* the whole table is one unit */
  ACC_FSDP_SIZE_BASED_WRAP = 1,  /* consecutive rows grouped until a unit holds min_num_params */
  ACC_FSDP_TRANSFORMER_BASED_WRAP = 2 /* refused: a C table has no layer classes; declare units */
} acc_fsdp_auto_wrap_policy;

#define ACC_FSDP_PLUGIN_VERSION 1u

/**
 * Accelerate's FullyShardedDataParallelPlugin. A field left ACC_UNSET is read from the
 * environment `accelerate launch --use_fsdp --fsdp_*` exports (FSDP_SHARDING_STRATEGY,
 * FSDP_RESHARD_AFTER_FORWARD, FSDP_BACKWARD_PREFETCH, FSDP_FORWARD_PREFETCH,
 * FSDP_STATE_DICT_TYPE, FSDP_OFFLOAD_PARAMS, FSDP_AUTO_WRAP_POLICY, FSDP_MIN_NUM_PARAMS,
 * FSDP_SYNC_MODULE_STATES), else takes the default named here. A value the library cannot honour
 * is refused by acc_fsdp_create with a sentence naming the field or variable.
 */
typedef struct acc_fsdp_plugin {
  size_t size;               /* sizeof, set by the INIT macro */
  uint32_t version;          /* ACC_FSDP_PLUGIN_VERSION */
  int sharding_strategy;     /* acc_fsdp_sharding_strategy; default FULL_SHARD */
  int reshard_after_forward; /* FSDP2's spelling: 1 = FULL_SHARD, 0 = SHARD_GRAD_OP; ACC_UNSET: from
                                the strategy (an explicit value that contradicts an explicit
                                strategy is refused) */
  int backward_prefetch;     /* acc_fsdp_backward_prefetch; default BACKWARD_PRE */
  int forward_prefetch;      /* 1: unit k+1's gather issued when unit k's forward begins; default 0 */
  int state_dict_type;       /* acc_fsdp_state_dict_type; default SHARDED_STATE_DICT */
  int offload_params;        /* 1: shards, their gradients, the optimizer state and the no_sync
                                buffers in host memory while the unit buffers stay on the device
                                (on the CPU: what it does anyway); default 0 */
  int auto_wrap_policy;      /* acc_fsdp_auto_wrap_policy; default NO_WRAP */
  int64_t min_num_params;    /* SIZE_BASED_WRAP's threshold; ACC_UNSET: FSDP_MIN_NUM_PARAMS, else 1e8 */
  int sync_module_states;    /* 1: every process starts from process 0's parameters; default 1 */
} acc_fsdp_plugin;

#define ACC_FSDP_PLUGIN_INIT                                                                          \
  { sizeof(acc_fsdp_plugin), ACC_FSDP_PLUGIN_VERSION, ACC_UNSET, ACC_UNSET, ACC_UNSET, ACC_UNSET,     \
    ACC_UNSET, ACC_UNSET, ACC_UNSET, ACC_UNSET, ACC_UNSET }

/** Fills p with the defaults of `version` (ACC_FSDP_PLUGIN_VERSION; for FFI). @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_plugin_init(acc_fsdp_plugin *p, uint32_t version);

/**
 * Creates the FSDP state of one flat parameter table over the accelerator's processes. `table`
 * has `count` rows (names unique, copied); `dtype` is the dtype of the gathered parameters and of
 * the gradients the program adds: ACC_F32, or ACC_BF16 / ACC_F16 (the layout of the accelerator's
 * typed tables, acc_model_add_flat_typed: the library keeps float32 master shards and float32
 * gradient shards and steps them; each process rounds its master shard to 16 bits and the
 * all-gather moves 16-bit values; the program reads 16-bit parameters and adds 16-bit gradients,
 * which are widened and reduced in float32; reach the buffers with the _typed begin calls). `plugin`
 * may be NULL (everything from the environment / defaults). Not collective; nothing is allocated
 * for the parameters until acc_fsdp_prepare. Ownership: acc_fsdp_destroy (before the accelerator's).
 * When the accelerator trains on a device, the shards, the unit buffers and the optimizer state
 * over acc_fsdp_model are device memory: the pointers the begin calls return are device pointers
 * for the program's kernels (docs/fsdp.md, "On a device"); with offload_params the shards, the
 * gradient shards, the optimizer state and the no_sync buffers are host memory instead.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_create(acc_accelerator *acc, const acc_param_spec *table, size_t count,
                                      acc_dtype dtype, const acc_fsdp_plugin *plugin, acc_fsdp **out);
/** Accepts NULL. Frees the shards, the pool and the shard model. @since 0.3 */
ACC_EXTERN void acc_fsdp_destroy(acc_fsdp *f);

/**
 * Declares unit `name` (unique) = rows [first_row, first_row + num_rows) of the table (FSDP's
 * wrapping of a module). Before acc_fsdp_prepare; units are numbered in the order declared, which
 * is the forward order prefetch follows. Declared units must partition the table (checked at
 * prepare: an overlap or a row left out is ACC_ERR_INVALID_ARGUMENT naming the units and row).
 * *index (optional) receives the unit's number.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_add_unit(acc_fsdp *f, const char *name, size_t first_row, size_t num_rows,
                                        size_t *index);

/**
 * Collective. Checks the units (a partition of the table; without declared units the
 * auto_wrap_policy makes them), compares them across processes (a process whose units differ is
 * named with the first differing unit: ACC_ERR_MISMATCH), allocates this process's shards and
 * fills them from `init_params` (the full table laid out like acc_model_add_flat's buffer, host
 * memory or, on a device, memory of the accelerator's device; with sync_module_states, process 0's values reach every process and the others may pass
 * NULL). The program may free its full copy afterwards: that is where the memory is saved.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_prepare(acc_fsdp *f, const float *init_params);

/** The dtype of the gathered parameters and gradient buffers (acc_fsdp_create's). @since 0.3 */
ACC_EXTERN acc_dtype acc_fsdp_dtype(const acc_fsdp *f);

/** Number of units (after prepare: also those the wrap policy made). @since 0.3 */
ACC_EXTERN size_t acc_fsdp_num_units(const acc_fsdp *f);
/** Unit i's name, first row and row count, element count (any out may be NULL). @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_unit_info(const acc_fsdp *f, size_t unit, const char **name, size_t *first_row,
                                         size_t *num_rows, size_t *numel);
/** The unit holding table row `row` and the row's element offset inside the unit's buffer. @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_row_location(const acc_fsdp *f, size_t row, size_t *unit, size_t *offset);
/**
 * This process's range [*lo, *hi) of unit `unit`'s elements (offsets inside the unit's buffer, as
 * acc_fsdp_row_location gives them): the values parameter `unit` of acc_fsdp_model holds at its
 * start (the rest of that parameter is padding). Under NO_SHARD the whole unit. For what a program
 * does per row of its own shard (weight decay on some rows only). @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_shard_range(const acc_fsdp *f, size_t unit, size_t *lo, size_t *hi);
/** The sharding strategy in use (after the plugin and the environment were read). @since 0.3 */
ACC_EXTERN acc_fsdp_sharding_strategy acc_fsdp_strategy(const acc_fsdp *f);
/** The state dict type save_state writes. @since 0.3 */
ACC_EXTERN acc_fsdp_state_dict_type acc_fsdp_get_state_dict_type(const acc_fsdp *f);

/**
 * The model the optimizer sees (after prepare): one float32 parameter per unit named
 * "<unit>.flat_param_shard", this process's shard (its padding is zero and stays zero), with its
 * averaged gradient. Create the library's SGD or AdamW over it and call acc_optimizer_step /
 * acc_optimizer_zero_grad and the schedulers as usual: the step updates the shards only; the next
 * forward gathers the new values. Borrowed; lives as long as f.
 * @since 0.3
 */
ACC_EXTERN acc_model *acc_fsdp_model(acc_fsdp *f);

/**
 * Pre-forward of a unit: all-gathers its parameters (or takes the prefetched or kept copy) and
 * sets *params to numel values laid out like the unit's rows (acc_fsdp_row_location gives each
 * row's offset). Valid until the unit's forward_end under FULL_SHARD, until its backward_end
 * under SHARD_GRAD_OP / NO_SHARD. Do not write into it. For a float32 table only: a bf16/fp16
 * table is ACC_ERR_MISMATCH (use acc_fsdp_unit_forward_begin_typed).
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_unit_forward_begin(acc_fsdp *f, size_t unit, const float **params);
/**
 * forward_begin for a table of any dtype: `dtype` is the dtype the program reads, which must be
 * the table's (acc_fsdp_create's; ACC_ERR_MISMATCH naming both otherwise). *params: numel values
 * of that dtype (uint16_t for ACC_BF16 / ACC_F16: the float32 master weights rounded to nearest
 * even), laid out like the unit's rows. Same lifetime as forward_begin's.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_unit_forward_begin_typed(acc_fsdp *f, size_t unit, acc_dtype dtype,
                                                        const void **params);
/** Post-forward: FULL_SHARD frees the gathered parameters (reshard after forward). @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_unit_forward_end(acc_fsdp *f, size_t unit);
/**
 * Pre-backward: *params as in forward_begin (gathered again under FULL_SHARD), *grads a buffer of
 * numel floats laid out like the rows, zero (or holding the gradients accumulated under no_sync),
 * that the program's backward adds this process's gradient into. With BACKWARD_PRE the previous
 * unit's gather is issued here. For a float32 table only (bf16/fp16: the _typed call).
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_unit_backward_begin(acc_fsdp *f, size_t unit, const float **params, float **grads);
/**
 * backward_begin for a table of any dtype (`dtype` must be the table's): *params as in
 * forward_begin_typed, *grads numel values of the table's dtype, zero (or the sum kept under
 * no_sync), that the program adds its gradients into (in its 16-bit arithmetic, as a typed
 * table's gradients). backward_end widens them to float32, reduces in float32 and adds the
 * average into the float32 gradient shard (torch's MixedPrecision with reduce_dtype float32).
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_unit_backward_begin_typed(acc_fsdp *f, size_t unit, acc_dtype dtype,
                                                         const void **params, void **grads);
/**
 * Post-backward: the gradients are averaged over the processes and added into the owning shards
 * (reduce-scatter; NO_SHARD: all-reduce), and both buffers go back to the pool (poisoned: a write
 * after this call is reported by the next unit call that takes the buffer, naming the unit). Under
 * no_sync nothing is reduced: the gradients stay in a full-size buffer of the unit until the next
 * backward outside no_sync.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_unit_backward_end(acc_fsdp *f, size_t unit);

/** Releases every gathered copy still held (a forward without backward under SHARD_GRAD_OP or
 * NO_PREFETCH's leftovers: an evaluation pass); the next begin call gathers again. Call it after an
 * evaluation forward and before the next optimizer step. @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_reshard(acc_fsdp *f);

/** Accelerate's no_sync: while on, backward_end keeps full gradients instead of reducing them (costs
 * one full unit-size buffer per unit; see docs/fsdp.md). @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_set_no_sync(acc_fsdp *f, int on);

/**
 * Collective: clips the averaged gradients to a global norm over every shard (the norm of the full
 * gradient, as an unsharded run computes it; padding left out) and returns it in *total_norm
 * (optional). norm_type 2.0 or INFINITY. Under fp16 mixed precision the gradients are unscaled
 * first (acc_fsdp_unscale_gradients), so the norm is that of the true gradient.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_clip_grad_norm(acc_fsdp *f, float max_norm, double norm_type, float *total_norm);

/**
 * Collective, under the accelerator's fp16 mixed precision (its grad scaler; the program seeded its
 * backward with acc_accelerator_backward_scale): divides every gradient shard by the loss scale and
 * agrees on overflow across processes (one all-reduce of a flag over all shards). Once per step:
 * later calls before acc_fsdp_optimizer_step do nothing. Without fp16 (no scaler) it does nothing.
 * *found_inf (optional): 1 when some process's shard held an inf or NaN.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_unscale_gradients(acc_fsdp *f, int *found_inf);
/**
 * Collective under fp16: the accelerator's optimizer_step for the shards' optimizer `opt` (created over
 * acc_fsdp_model). Unscales if not done yet; on overflow on any process the step is skipped on every
 * process; the loss scale is updated (backed off on overflow, grown after growth_interval good steps).
 * Without fp16 it is acc_optimizer_step. The accelerator's scheduler step follows the skip
 * (acc_accelerator_optimizer_step_was_skipped). Zero the gradients after it as usual.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_optimizer_step(acc_fsdp *f, acc_optimizer *opt);
/** 1 when the last acc_fsdp_optimizer_step skipped (fp16 overflow). @since 0.3 */
ACC_EXTERN int acc_fsdp_optimizer_step_was_skipped(const acc_fsdp *f);

/** What the library holds for this process, in bytes (the accounting docs/fsdp.md explains). */
typedef struct acc_fsdp_memory {
  size_t shard_params, shard_grads; /* float32 master shard, averaged gradient shard */
  size_t unit_buffer_bytes;         /* the largest padded unit (the largest pool buffer) */
  size_t pool_buffers;              /* pool buffers allocated (each the padded size of the unit that
                                       first needed it: a small unit takes a small buffer) */
  size_t pool_peak_in_use;          /* most pool buffers in use at once */
  size_t no_sync_bytes;             /* full gradient buffers kept under no_sync */
  size_t total_params;              /* elements of the whole table */
  size_t pool_bytes;                /* bytes of the pool buffers allocated */
  size_t pool_peak_bytes;           /* most bytes of pool buffers in use at once */
} acc_fsdp_memory;
/** @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_memory_stats(const acc_fsdp *f, acc_fsdp_memory *out);

/* ---- checkpoints (src/ckpt/fsdp_ckpt.c) ------------------------------------------------------ */

/**
 * Collective. Writes directory `dir` crash-safe (a temporary directory renamed at the end; an
 * interrupted save leaves no directory that loads). SHARDED_STATE_DICT: every process writes
 * `fsdp_shard_rank<r>.safetensors` (its range of each unit's weights and of the optimizer's state,
 * self-describing) in parallel. FULL_STATE_DICT: process 0 gathers unit by unit and writes
 * `model.safetensors` exactly as acc_save_model writes an unsharded model with the same values,
 * and `optimizer.safetensors` with the full state. `opt` (optional) is the optimizer over
 * acc_fsdp_model. An existing complete `dir` is refused (as save_state refuses one).
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_save_state(acc_fsdp *f, const acc_optimizer *opt, const char *dir);
/**
 * Collective. Loads a directory of acc_fsdp_save_state (either type, saved by any number of
 * processes under any strategy) into this run's shards: every process reads just the ranges that
 * overlap its own. A table whose rows differ (name, element count) is ACC_ERR_MISMATCH naming the
 * file and the row; on any error the shards and the optimizer are left as they were.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_load_state(acc_fsdp *f, acc_optimizer *opt, const char *dir);
/** Collective: the full weights as acc_save_model writes them (process 0 writes dir/model.safetensors).
 * @since 0.3 */
ACC_EXTERN acc_result acc_fsdp_save_model(acc_fsdp *f, const char *dir);
/**
 * Not collective, no process group: turns a SHARDED_STATE_DICT directory into one
 * `model.safetensors` in out_dir (what `accelerate merge-weights` runs), byte-identical to a
 * FULL_STATE_DICT save of the same weights.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_fsdp_merge_weights(const char *sharded_dir, const char *out_dir);

#ifdef __cplusplus
}
#endif
#endif
