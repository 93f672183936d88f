/* The model registry's internal calls (src/train/model.c), for flat registration (flat.c) and the
 * prepared models (accel_models.c). Internal. */
#ifndef ACC_TRAIN_MODEL_INTERNAL_H
#define ACC_TRAIN_MODEL_INTERNAL_H

#include "core/internal.h"

struct acc__devctx;

/* Parameter i takes a gradient (attached or to come), registered by the flat group starting at
 * flat_first (SIZE_MAX: registered alone). */
void acc__model_mark(acc_model *m, size_t i, size_t flat_first);
size_t acc__model_flat_first(const acc_model *m, size_t i);
/* Attaches or replaces parameter i's gradient (i checked by the caller); bumps the generation. */
void acc__model_set_grad(acc_model *m, size_t i, float *grad);
/* Changes with every attach/replace: a prepared model rebuilds its buckets when it moved. */
uint64_t acc__model_grad_gen(const acc_model *m);
/* The first parameter that takes a gradient but has none attached yet, or NULL. */
const char *acc__model_missing_grad(const acc_model *m);

/* A table registered with acc_model_add_flat_typed in bf16 or fp16 (src/train/typed.c): the program
 * keeps `params` and `grads` in `dtype`; the model's parameters [first, first + count) point into
 * the library's float32 `master` and `grad32`, which the optimizer, clipping, the gradient
 * averaging and checkpoints see. */
typedef struct acc__typed_group {
  size_t first, count, numel;
  struct acc__devctx *dev; /* NULL: all four buffers are host memory; else memory of this device */
  acc_dtype dtype;   /* ACC_BF16 or ACC_F16 */
  uint16_t *params;  /* the program's, numel values */
  uint16_t *grads;   /* the program's, numel values; NULL until attached */
  float *master;     /* the float32 master weights (numel): the library's, or the program's */
  int master_program; /* master is the program's (acc_model_add_flat_typed_master): never freed nor
                         rewritten from params by the library */
  float *grad32;     /* the library's float32 gradients (numel) */
  int grads_in;      /* grad32 holds the program's gradients of this step (set by acc__typed_grads_in) */
  unsigned char *ready; /* per row (count): its gradient was widened into grad32 by grad_ready in
                           this step, and may be averaging already: grads_in leaves it alone */
} acc__typed_group;

/* The model's typed groups (n: how many; NULL when none). */
acc__typed_group *acc__model_typed(const acc_model *m, size_t *n);
/* Appends a group (the model owns master and grad32 from now on). */
acc_result acc__model_typed_add(acc_model *m, const acc__typed_group *g);

/* typed.c: the conversions around the library's float32 copies (kernels on the compute stream of
 * the group's device when it has one), no-ops for a model without typed
 * groups. params_in: the program's values widened into the master weights (prepare). params_out:
 * the master weights rounded into the program's (after a step, a load, a broadcast). grads_in:
 * the program's gradients widened into grad32, failing naming the first parameter whose table has
 * no gradients attached (once per step: a second call is a no-op until grads_done). grads_out:
 * the averaged grad32 rounded back into the program's gradients. zero_grads: the program's
 * gradients of the parameters `opt` updates (NULL: all) set to zero. grads_done: the next
 * grads_in converts again. */
int acc__typed_any(const acc_model *m);
acc_result acc__typed_params_in(acc_model *m);
acc_result acc__typed_params_out(acc_model *m);
acc_result acc__typed_grads_in(acc_model *m, const char *fn);
acc_result acc__typed_grads_out(acc_model *m);
acc_result acc__typed_zero_grads(acc_model *m, const acc_optimizer *opt);
void acc__typed_grads_done(acc_model *m);
/* grad_ready of row `index` of a typed table (overlap, issue 33 item 3): its gradient widened into
 * grad32 now (on the group's device stream), so that its bucket may average before backward;
 * grads_in then widens only the rows not marked. A row marked twice in one step, or a table
 * without gradients attached, is an error naming the parameter. No-op for a float32 row. */
acc_result acc__typed_grad_ready(acc_model *m, size_t index);
/* params_out for the tables whose master is the library's (zero_gather: the program's tables are
 * gathered as the program rounded them). */
acc_result acc__typed_params_out_library(acc_model *m);
/* Row `index` belongs to a bf16/fp16 table with the program's master (0: float32, or the
 * library's master). */
int acc__typed_program_master(const acc_model *m, size_t index);
/* The end of a step's averaging (or of a step abandoned by zero_grad): no row is marked. */
void acc__typed_ready_clear(acc_model *m);
/* Every typed table of m lives where accelerator device d trains (host memory for the CPU, memory
 * of d otherwise); else ACC_ERR_INVALID_ARGUMENT naming the table (fn: the caller). */
acc_result acc__typed_check_place(const acc_model *m, const struct acc__devctx *d, const char *fn);
/* typed.c: acc_model_add_flat_typed with the program's float32 master weights (master: NULL, the
 * library allocates its own copy; else the program's buffer, where params are). */
acc_result acc__typed_add(acc_model *m, const acc_param_spec *table, size_t count, acc_dtype dtype, void *params,
                          void *grads, float *master, size_t *first_index, const char *fn);
/* model.c: frees a group's master and grad32 (on its device while that device is open). */
void acc__typed_group_free(acc__typed_group *g);

/* A model whose parameters and gradients are device memory that its owner steps (FSDP on a
 * device, fsdp_optim.c): acc_optimizer_step and acc_optimizer_zero_grad call these instead of
 * their host loops. */
typedef struct acc__model_stepper {
  acc_result (*step)(void *ctx, acc_optimizer *opt);
  acc_result (*zero_grad)(void *ctx, acc_optimizer *opt);
  void *ctx;
} acc__model_stepper;
void acc__model_set_stepper(acc_model *m, const acc__model_stepper *s);
const acc__model_stepper *acc__model_stepper_of(const acc_model *m); /* NULL: none */

/* ZeRO's one layout of m over n processes: the parameters that take a gradient, end to end in
 * index order (*total elements), cut into n shards of the returned length, ceil(total / n) (1 when
 * total is 0); process r owns [r * shard, (r + 1) * shard), clipped to total. Both the library's
 * CPU ZeRO (accel_models.c) and acc_accelerator_zero_shard (zero_shard.c) use it. */
size_t acc__model_zero_span(const acc_model *m, size_t n, size_t *total);

/* flat.c: the element count of one table row, checked (fn names the caller in the message). */
acc_result acc__spec_numel(const acc_param_spec *s, size_t row, const char *fn, size_t *out);
/* flat.c: ACC_ERR_MISMATCH when parameter index belongs to a bf16/fp16 table (fn: the float call). */
acc_result acc__typed_refuse_float_grads(const acc_model *m, size_t index, const char *fn);

#endif
