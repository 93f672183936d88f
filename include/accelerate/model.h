/* accelerate-c: a model as the library sees it: an ordered list of named float32 parameter
 * tensors and their gradients, both owned by the program.
 * Threads: a model is used from one thread at a time. */
#ifndef ACCELERATE_MODEL_H
#define ACCELERATE_MODEL_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACC_MAX_DIMS 8

typedef struct acc_model acc_model;

/** One registered parameter. Borrowed pointers, valid while the model lives. */
typedef struct acc_param {
  const char *name;
  float *data;   /* numel floats, owned by the program */
  float *grad;   /* numel floats, owned by the program (may be NULL for frozen parameters) */
  int ndim;
  int64_t shape[ACC_MAX_DIMS];
  size_t numel;
} acc_param;

/** Ownership: release with acc_model_destroy. @since 0.1 */
ACC_EXTERN acc_result acc_model_create(acc_model **out);
/** @since 0.1 */
ACC_EXTERN void acc_model_destroy(acc_model *m);

/**
 * Registers a parameter (order matters: it is the order of checkpoints and gradient buckets).
 * Names must be unique; shape entries must be positive; data non-NULL.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_model_add_parameter(acc_model *m, const char *name, float *data, float *grad,
                                              int ndim, const int64_t *shape);
/** @since 0.1 */
ACC_EXTERN size_t acc_model_num_parameters(const acc_model *m);
/** Total number of floats over all parameters. @since 0.1 */
ACC_EXTERN size_t acc_model_numel(const acc_model *m);
/** Pointer to parameter i (< num_parameters), or NULL. Borrowed. @since 0.1 */
ACC_EXTERN const acc_param *acc_model_parameter(const acc_model *m, size_t i);
/** Index of the parameter with this name; ACC_ERR_INVALID_ARGUMENT naming it when absent. @since 0.1 */
ACC_EXTERN acc_result acc_model_find(const acc_model *m, const char *name, size_t *index);

/** One row of a parameter table for acc_model_add_flat: a name and a shape.
 * @since 0.2 */
typedef struct acc_param_spec {
  const char *name;
  int ndim;
  int64_t shape[ACC_MAX_DIMS];
} acc_param_spec;

/**
 * Completes a parameter table from the trainer's own array of tensor sizes (llm.c's
 * param_sizes[]), so that only names and the dimensions that matter are written: a row with ndim 0
 * becomes the 1-D shape [sizes[i]]; in a row with a shape, one dimension may be -1 and becomes
 * sizes[i] divided by the product of the others. Every row must then hold exactly sizes[i]
 * elements, else ACC_ERR_INVALID_ARGUMENT naming the row, its shape and the size, and the table is
 * left as it was. E.g. {{"wte", 2, {Vp, -1}}, {"ln1w", 2, {L, -1}}, {"lnfb"}} with sizes
 * {Vp * C, L * C, C} gives [Vp, C], [L, C], [C].
 * @since 0.3
 */
ACC_EXTERN acc_result acc_param_table_from_sizes(acc_param_spec *table, size_t count, const size_t *sizes);

/**
 * Registers the `count` parameters of `table`, laid end to end in one buffer: row r's data starts
 * at `params` plus the elements of rows 0..r-1 (the layout of a trainer that keeps all its
 * parameters in one allocation), and its gradient at the same offset in `grads`. `grads` may be
 * NULL: the parameters then take a gradient that is attached later with
 * acc_model_set_flat_grads (before the first backward, which otherwise fails naming the first
 * parameter still without one). Gradient averaging reduces `grads` in place: neighbouring
 * parameters are neighbours in memory, so every gradient bucket is one contiguous range handed to
 * the all-reduce without a staging copy. The table is checked whole before anything is
 * registered. *first_index (optional) receives the index of row 0.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_model_add_flat(acc_model *m, const acc_param_spec *table, size_t count, float *params,
                                         float *grads, size_t *first_index);
/**
 * Attaches or replaces the gradients of a table registered by acc_model_add_flat (`first`: the
 * index it returned), laid out like its parameters. Allowed any time between steps (a prepared
 * model rebuilds its gradient buckets at the next backward); on a device, before
 * acc_accelerator_prepare_model.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_model_set_flat_grads(acc_model *m, size_t first, float *grads);
/**
 * Attaches or replaces the gradient of parameter `index` (numel floats owned by the program); a
 * frozen parameter becomes trainable. Same timing rules as acc_model_set_flat_grads.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_model_set_grad(acc_model *m, size_t index, float *grad);
/** 1 when parameter i takes a gradient (attached or still to come), 0 when frozen or out of range.
 * @since 0.2 */
ACC_EXTERN int acc_model_requires_grad(const acc_model *m, size_t i);

/**
 * acc_model_add_flat for a trainer that keeps its parameters and gradients in bf16 or fp16 (the
 * layout GPU trainers use): `params` and `grads` hold `dtype` values (ACC_BF16 or ACC_F16, 2 bytes
 * each; ACC_F32 is acc_model_add_flat). The library keeps a float32 master copy of the weights,
 * made from `params` now and again at acc_accelerator_prepare_model, and float32 gradients; the
 * registered parameters (acc_model_parameter(m, i)->data / ->grad) point into those copies, so the
 * library's optimizer keeps float32 moments and steps in float32, and save_state / save_model
 * write the float32 master weights. Through a prepared accelerator: backward widens the program's
 * gradients to float32, averages them with float32 accumulation and rounds the average back into
 * `grads`; every optimizer step, load_state and acc_accelerator_refresh_low_precision round the
 * master weights into `params` (round to nearest even). `grads` may be NULL and attached later
 * with acc_model_set_flat_grads_typed. `params` and `grads` are both host memory, or both device
 * memory of the device an accelerator trains on (acc_accelerator_alloc): then the master weights,
 * float32 gradients and moments live on that device and the conversions run there as kernels.
 * Not with zero_stage 1 or 2. The float32
 * calls acc_model_set_flat_grads / acc_model_set_grad on such a table fail with ACC_ERR_MISMATCH.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_model_add_flat_typed(acc_model *m, const acc_param_spec *table, size_t count,
                                               acc_dtype dtype, void *params, void *grads, size_t *first_index);
/**
 * acc_model_add_flat_typed for a program that runs its own optimizer on its own float32 master
 * weights (a CUDA trainer's AdamW kernel): `master` holds one float per parameter value, in table
 * order, in the same place as `params` (host memory, or memory of the accelerator's device). The
 * library keeps no copy of the weights: the model's parameters (acc_model_parameter(m, i)->data)
 * point into `master`, so save_state / save_model write the weights the program trains, and
 * load_state and prepare_model's broadcast of process 0's weights write into `master` and round it
 * into `params`. The library never widens `params` into `master` (the program's master is the
 * truth: initialize it before acc_accelerator_prepare_model). It still keeps float32 gradients
 * for the average (4 bytes per value: acc_model_typed_library_bytes). `master` must outlive the
 * model. Stepping the library's optimizer on such a table also works (it updates `master`).
 * @since 0.3
 */
ACC_EXTERN acc_result acc_model_add_flat_typed_master(acc_model *m, const acc_param_spec *table, size_t count,
                                                      acc_dtype dtype, void *params, void *grads, float *master,
                                                      size_t *first_index);
/** The bytes the library holds for the model's bf16/fp16 tables (host or device memory, where the
 * tables are): 8 per value for acc_model_add_flat_typed (master copy and float32 gradients), 4 for
 * acc_model_add_flat_typed_master (float32 gradients only); 0 for an invalid model. Gradient
 * buckets of a prepared accelerator are not counted. @since 0.3 */
ACC_EXTERN size_t acc_model_typed_library_bytes(const acc_model *m);
/**
 * Attaches or replaces the gradients of a table registered with acc_model_add_flat_typed (`first`:
 * the index it returned); `dtype` must be the table's (ACC_ERR_MISMATCH naming both otherwise).
 * With ACC_F32 on a float32 table it is acc_model_set_flat_grads.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_model_set_flat_grads_typed(acc_model *m, size_t first, acc_dtype dtype, void *grads);
/** The dtype the program keeps parameter i in: ACC_BF16 or ACC_F16 for a table of
 * acc_model_add_flat_typed, else ACC_F32 (also for an invalid model or index). @since 0.2 */
ACC_EXTERN acc_dtype acc_model_parameter_dtype(const acc_model *m, size_t i);
/** The program's own storage of parameter i (its bf16/fp16 values for a typed table, the same as
 * ->data otherwise); NULL for an invalid model or index. @since 0.2 */
ACC_EXTERN const void *acc_model_parameter_storage(const acc_model *m, size_t i);

#ifdef __cplusplus
}
#endif
#endif
