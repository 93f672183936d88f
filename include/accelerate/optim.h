/* accelerate-c: optimizers (SGD, AdamW with torch.optim semantics), learning-rate schedulers
 * (transformers' get_*_schedule_with_warmup and a user lambda) and gradient clipping.
 * They work on one process's float32 buffers of an acc_model; nothing here communicates.
 * Threads: an optimizer or scheduler is used from one thread at a time. */
#ifndef ACCELERATE_OPTIM_H
#define ACCELERATE_OPTIM_H

#include "common.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- optimizers -------------------------------------------------------------------------- */

typedef struct acc_optimizer acc_optimizer;

typedef enum acc_optimizer_kind { ACC_OPTIMIZER_SGD = 0, ACC_OPTIMIZER_ADAMW = 1 } acc_optimizer_kind;

#define ACC_SGD_OPTIONS_VERSION 1
/** torch.optim.SGD hyperparameters (defaults: lr 1e-3, everything else 0). */
typedef struct acc_sgd_options {
  size_t size;         /* sizeof(acc_sgd_options), set by the INIT macro */
  uint32_t version;    /* ACC_SGD_OPTIONS_VERSION */
  double lr;           /* >= 0 */
  double momentum;     /* >= 0 */
  double dampening;    /* applied from the second step on */
  int nesterov;        /* needs momentum > 0 and dampening == 0 */
  double weight_decay; /* >= 0, L2 (added to the gradient) */
} acc_sgd_options;
#define ACC_SGD_OPTIONS_INIT { sizeof(acc_sgd_options), ACC_SGD_OPTIONS_VERSION, 1e-3, 0.0, 0.0, 0, 0.0 }
/** Fills opts with the defaults of `version` (ACC_SGD_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_sgd_options_init(acc_sgd_options *opts, uint32_t version);

#define ACC_ADAMW_OPTIONS_VERSION 1
/** torch.optim.AdamW hyperparameters (defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 1e-2). */
typedef struct acc_adamw_options {
  size_t size;
  uint32_t version;
  double lr;
  double beta1, beta2; /* in [0, 1) */
  double eps;          /* >= 0 */
  double weight_decay; /* decoupled: p *= 1 - lr * weight_decay */
} acc_adamw_options;
#define ACC_ADAMW_OPTIONS_INIT \
  { sizeof(acc_adamw_options), ACC_ADAMW_OPTIONS_VERSION, 1e-3, 0.9, 0.999, 1e-8, 1e-2 }
/** Fills opts with the defaults of `version` (ACC_ADAMW_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_adamw_options_init(acc_adamw_options *opts, uint32_t version);

/**
 * Creates an optimizer over every parameter the model has now (parameters added later are not
 * seen; step() then fails). opts NULL: defaults. Parameters whose grad is NULL are skipped.
 * Ownership: the model is borrowed and must outlive the optimizer; release with
 * acc_optimizer_destroy. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_optimizer_create_sgd(acc_optimizer **out, acc_model *m, const acc_sgd_options *opts);
/** @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_create_adamw(acc_optimizer **out, acc_model *m,
                                                 const acc_adamw_options *opts);
/** Some of a model's parameters with their own hyperparameters (torch's param_groups). */
typedef struct acc_param_group {
  const char *const *names; /* parameter names, as given to acc_model_add_parameter */
  size_t count;             /* number of names */
  double lr;                /* < 0: the options' lr */
  double weight_decay;      /* < 0: the options' weight_decay */
} acc_param_group;

/**
 * An optimizer over exactly the parameters named in the groups, each group with its own lr and
 * weight decay (e.g. a group with weight_decay 0 for biases and norms). Every name must be a
 * parameter of the model and appear in one group only: otherwise ACC_ERR_INVALID_ARGUMENT naming
 * it. Parameters of the model in no group are not touched by this optimizer (neither stepped nor
 * zeroed), so several optimizers over disjoint parameter sets can share one model (a GAN's
 * generator and discriminator). The other hyperparameters (momentum, betas, eps) come from opts.
 * Ownership and collectiveness as acc_optimizer_create_sgd.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_optimizer_create_sgd_groups(acc_optimizer **out, acc_model *m,
                                                      const acc_param_group *groups, size_t n_groups,
                                                      const acc_sgd_options *opts);
/** @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_create_adamw_groups(acc_optimizer **out, acc_model *m,
                                                        const acc_param_group *groups,
                                                        size_t n_groups,
                                                        const acc_adamw_options *opts);
/** Number of parameter groups (1 for acc_optimizer_create_sgd/adamw; 0 for an invalid handle). @since 0.1 */
ACC_EXTERN size_t acc_optimizer_group_count(const acc_optimizer *o);
/** The lr / weight decay of group `group` (0 when out of range). @since 0.1 */
ACC_EXTERN double acc_optimizer_group_lr(const acc_optimizer *o, size_t group);
/** @since 0.1 */
ACC_EXTERN double acc_optimizer_group_weight_decay(const acc_optimizer *o, size_t group);
/** Sets the lr of one group. @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_set_group_lr(acc_optimizer *o, size_t group, double lr);
/** 1 when the optimizer updates model parameter `index` (it is in one of its groups). @since 0.1 */
ACC_EXTERN int acc_optimizer_has_parameter(const acc_optimizer *o, size_t index);

/** Frees the optimizer and its state. Accepts NULL. @since 0.1 */
ACC_EXTERN void acc_optimizer_destroy(acc_optimizer *o);
/** @since 0.1 */
ACC_EXTERN acc_optimizer_kind acc_optimizer_get_kind(const acc_optimizer *o);
/** The model the optimizer updates (borrowed). @since 0.1 */
ACC_EXTERN acc_model *acc_optimizer_model(const acc_optimizer *o);

/** One update of every parameter from its gradient (float32 arithmetic, as torch on CPU). @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_step(acc_optimizer *o);
/** Sets every gradient to 0 (PyTorch's set_to_none has no C equivalent: buffers stay). @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_zero_grad(acc_optimizer *o);
/**
 * The learning rate used by the next step; a scheduler overwrites it on each of its steps.
 * set_lr sets every group's lr (one-group optimizers: the lr); get_lr is group 0's.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_optimizer_set_lr(acc_optimizer *o, double lr);
/** @since 0.1 */
ACC_EXTERN double acc_optimizer_get_lr(const acc_optimizer *o);
/** Number of steps taken (AdamW's bias-correction step). @since 0.1 */
ACC_EXTERN int64_t acc_optimizer_step_count(const acc_optimizer *o);

/*
 * Checkpoint state. Tensors: named "state.<param name>.<buffer>" with buffer "exp_avg" and
 * "exp_avg_sq" (AdamW, always present) or "momentum_buffer" (SGD with momentum, present after
 * the first step), float32, the parameter's shape, in parameter order. Scalars: "kind" (0 SGD,
 * 1 AdamW), "step", "lr" and the hyperparameters ("momentum", "dampening", "nesterov",
 * "weight_decay" / "beta1", "beta2", "eps", "weight_decay"), as doubles (exact). "lr" and
 * "weight_decay" are group 0's; each further group g adds "group<g>.lr" and
 * "group<g>.weight_decay". Only the parameters the optimizer updates have state tensors.
 */
/** Number of state tensors now. @since 0.1 */
ACC_EXTERN size_t acc_optimizer_state_count(const acc_optimizer *o);
/**
 * State tensor i (< state_count): name, data, numel, ndim and shape (any out may be NULL).
 * Ownership: all pointers are borrowed, valid until the next step/set/destroy. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_optimizer_state_get(const acc_optimizer *o, size_t i, const char **name,
                                              const float **data, size_t *numel, int *ndim,
                                              const int64_t **shape);
/**
 * Restores one state tensor by name (copies numel floats). An unknown name, a buffer this kind of
 * optimizer does not have, or a shape that differs from the parameter's is ACC_ERR_MISMATCH
 * naming the parameter and both shapes. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_optimizer_state_set(acc_optimizer *o, const char *name, const float *data,
                                              size_t numel, int ndim, const int64_t *shape);
/** Number of scalars and scalar i (name borrowed, static). @since 0.1 */
ACC_EXTERN size_t acc_optimizer_scalar_count(const acc_optimizer *o);
/** @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_scalar_get(const acc_optimizer *o, size_t i, const char **name,
                                               double *value);
/** Sets a scalar by name; "kind" must equal this optimizer's kind (ACC_ERR_MISMATCH otherwise). @since 0.1 */
ACC_EXTERN acc_result acc_optimizer_scalar_set(acc_optimizer *o, const char *name, double value);

/* ---- learning-rate schedulers ------------------------------------------------------------ */

typedef struct acc_scheduler acc_scheduler;

/** A user factor: lr = base_lr * fn(step, payload). Called once per scheduler step. */
typedef double (*acc_lr_lambda)(int64_t step, void *payload);

typedef enum acc_scheduler_kind {
  ACC_SCHEDULER_CONSTANT = 0,             /* factor 1 */
  ACC_SCHEDULER_CONSTANT_WITH_WARMUP = 1, /* step/warmup, then 1 */
  ACC_SCHEDULER_LINEAR_WITH_WARMUP = 2,   /* step/warmup, then linear down to 0 at training steps */
  ACC_SCHEDULER_COSINE_WITH_WARMUP = 3,   /* step/warmup, then 0.5(1+cos(pi*2*cycles*progress)) */
  ACC_SCHEDULER_LAMBDA = 4                /* fn(step, payload) */
} acc_scheduler_kind;

#define ACC_SCHEDULER_OPTIONS_VERSION 1
typedef struct acc_scheduler_options {
  size_t size;
  uint32_t version;
  acc_scheduler_kind kind;
  int64_t num_warmup_steps;   /* >= 0 */
  int64_t num_training_steps; /* linear / cosine: total number of scheduler steps */
  double num_cycles;          /* cosine: 0.5 (half a cosine, from 1 down to 0) */
  acc_lr_lambda fn;           /* ACC_SCHEDULER_LAMBDA only */
  void *payload;              /* passed to fn */
} acc_scheduler_options;
#define ACC_SCHEDULER_OPTIONS_INIT \
  { sizeof(acc_scheduler_options), ACC_SCHEDULER_OPTIONS_VERSION, ACC_SCHEDULER_CONSTANT, 0, 0, 0.5, NULL, NULL }
/** Fills opts with the defaults of `version` (ACC_SCHEDULER_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_scheduler_options_init(acc_scheduler_options *opts, uint32_t version);

/**
 * Binds a scheduler to an optimizer. Like torch's LambdaLR, base_lr is the optimizer's lr now,
 * and creation already applies step 0: the optimizer's lr becomes base_lr * factor(0) (0 for
 * warmup schedules with warmup > 0). Ownership: the optimizer is borrowed and must outlive the
 * scheduler; release with acc_scheduler_destroy. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_scheduler_create(acc_scheduler **out, acc_optimizer *o,
                                           const acc_scheduler_options *opts);
/** @since 0.1 */
ACC_EXTERN void acc_scheduler_destroy(acc_scheduler *s);
/** Advances one step: step += 1, optimizer lr = base_lr * factor(step). O(1). @since 0.1 */
ACC_EXTERN acc_result acc_scheduler_step(acc_scheduler *s);
/** The lr set by the last step (or by creation). @since 0.1 */
ACC_EXTERN double acc_scheduler_get_last_lr(const acc_scheduler *s);
/** Checkpoint state: the step count (torch's last_epoch) and base_lr. @since 0.1 */
ACC_EXTERN acc_result acc_scheduler_get_state(const acc_scheduler *s, int64_t *step, double *base_lr);
/** Restores state and sets the optimizer's lr = base_lr * factor(step). With several parameter
 * @since 0.1
 * groups base_lr is group 0's; the others are set with acc_scheduler_set_group_base_lr. */
ACC_EXTERN acc_result acc_scheduler_set_state(acc_scheduler *s, int64_t step, double base_lr);
/**
 * Parameter groups: the scheduler keeps one base lr per group of its optimizer (each group's lr
 * when the scheduler was created) and sets every group's lr = its base lr * factor(step).
 * @since 0.1
 */
ACC_EXTERN size_t acc_scheduler_group_count(const acc_scheduler *s);
/** @since 0.1 */
ACC_EXTERN double acc_scheduler_group_base_lr(const acc_scheduler *s, size_t group);
/** @since 0.1 */
ACC_EXTERN acc_result acc_scheduler_set_group_base_lr(acc_scheduler *s, size_t group, double base_lr);

/**
 * Sizes a schedule as the Accelerator steps it: batches_per_epoch batches per process per epoch
 * (acc_dataloader_len of a prepared loader), one optimizer step per gradient_accumulation_steps
 * batches and at every epoch end, and num_processes scheduler steps per optimizer step (1 with
 * split_batches). *num_training_steps gets the total; *num_warmup_steps (may be NULL) gets
 * warmup_fraction of the optimizer steps, rounded down, times the scheduler steps per optimizer
 * step (since 0.2; before, the fraction of the total was rounded, and warmup could end at
 * different optimizer steps at different process counts). The same schedule then comes out at
 * every process count for the same global batch.
 * acc_accelerator_scheduler_steps does the same from a prepared loader. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_scheduler_training_steps(int64_t batches_per_epoch, int64_t num_epochs,
                                                   int gradient_accumulation_steps, int num_processes,
                                                   int split_batches, double warmup_fraction,
                                                   int64_t *num_training_steps,
                                                   int64_t *num_warmup_steps);

/* ---- gradient clipping ------------------------------------------------------------------- */

/**
 * torch.nn.utils.clip_grad_norm_: total = the norm (norm_type 2 or INFINITY) of all gradients
 * together, accumulated in double; clip_coef = max_norm / (total + 1e-6) (float); when
 * clip_coef < 1 every gradient is multiplied by it. Parameters with a NULL grad are skipped.
 * @param total_norm_out receives the total norm before clipping (may be NULL).
 * Call it after unscaling (acc_grad_scaler_unscale). Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_clip_grad_norm(acc_model *m, float max_norm, double norm_type, float *total_norm_out);
/** torch.nn.utils.clip_grad_value_: clamps every gradient element to [-clip_value, clip_value]. @since 0.1 */
ACC_EXTERN acc_result acc_clip_grad_value(acc_model *m, float clip_value);

#ifdef __cplusplus
}
#endif
#endif
