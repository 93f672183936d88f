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

#ifdef __cplusplus
}
#endif
#endif
