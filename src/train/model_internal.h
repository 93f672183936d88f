/* The model registry's internal calls (src/train/model.c), for flat registration (flat.c) and the
 * prepared models (accel_models.c). Internal. */
#ifndef ACC_TRAIN_MODEL_INTERNAL_H
#define ACC_TRAIN_MODEL_INTERNAL_H

#include "core/internal.h"

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

#endif
