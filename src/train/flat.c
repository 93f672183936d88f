/* Registering what programs already have: a table of (name, shape) over one contiguous parameter
 * buffer and one contiguous gradient buffer, and gradients attached or replaced after
 * registration (trainers that allocate them lazily, on the first backward pass). */
#include <stdint.h>
#include <string.h>

#include "accelerate.h"
#include "train/model_internal.h"

acc_result acc__spec_numel(const acc_param_spec *s, size_t row, const char *fn, size_t *out) {
  if (!s->name || !*s->name)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: row %zu of the table has no name", fn, row);
  if (s->ndim < 0 || s->ndim > ACC_MAX_DIMS)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: parameter '%s' (row %zu) has ndim %d (expected 0..%d)", fn, s->name, row,
                      s->ndim, ACC_MAX_DIMS);
  size_t n = 1;
  for (int d = 0; d < s->ndim; d++) {
    if (s->shape[d] <= 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: parameter '%s' (row %zu) has dimension %d of size %lld (must be > 0)",
                        fn, s->name, row, d, (long long)s->shape[d]);
    if ((uint64_t)s->shape[d] > SIZE_MAX / n)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: parameter '%s' (row %zu) is too large", fn,
                        s->name, row);
    n *= (size_t)s->shape[d];
  }
  *out = n;
  return ACC_OK;
}

acc_result acc_model_add_flat(acc_model *m, const acc_param_spec *table, size_t count, float *params,
                              float *grads, size_t *first_index) {
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, "acc_model_add_flat"));
  if (!table || !count || !params)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_model_add_flat: %s", !params ? "the parameter buffer is NULL" : "the table is empty");
  size_t first = acc_model_num_parameters(m), off = 0;
  /* the whole table is checked before anything is registered: a bad row leaves the model as it was */
  for (size_t r = 0; r < count; r++) {
    size_t n;
    ACC_CHECK(acc__spec_numel(&table[r], r, "acc_model_add_flat", &n));
    for (size_t q = 0; q < r; q++)
      if (strcmp(table[q].name, table[r].name) == 0)
        return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_add_flat: parameter '%s' appears twice (rows %zu, %zu)",
                          table[r].name, q, r);
    size_t idx;
    if (acc_model_find(m, table[r].name, &idx) == ACC_OK)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_add_flat: parameter '%s' is already registered",
                        table[r].name);
    acc_clear_error();
  }
  for (size_t r = 0; r < count; r++) {
    size_t n;
    ACC_CHECK(acc__spec_numel(&table[r], r, "acc_model_add_flat", &n));
    ACC_CHECK(acc_model_add_parameter(m, table[r].name, params + off, grads ? grads + off : NULL, table[r].ndim,
                                      table[r].shape));
    acc__model_mark(m, first + r, first);
    off += n;
  }
  if (first_index) *first_index = first;
  return ACC_OK;
}

/* A parameter of a bf16/fp16 table (typed.c) takes its gradients in the table's dtype. */
acc_result acc__typed_refuse_float_grads(const acc_model *m, size_t index, const char *fn) {
  size_t n;
  const acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++) {
    if (index < g[k].first || index >= g[k].first + g[k].count) continue;
    const char *dt = g[k].dtype == ACC_BF16 ? "bf16" : "fp16";
    return acc__error(ACC_ERR_MISMATCH,
                      "%s: parameter '%s' belongs to a %s table (acc_model_add_flat_typed); its gradients are %s "
                      "values: attach them with acc_model_set_flat_grads_typed(model, %zu, ACC_%s, grads)", fn,
                      acc_model_parameter(m, index)->name, dt, dt, g[k].first, g[k].dtype == ACC_BF16 ? "BF16" : "F16");
  }
  return ACC_OK;
}

acc_result acc_model_set_grad(acc_model *m, size_t index, float *grad) {
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, "acc_model_set_grad"));
  if (index >= acc_model_num_parameters(m))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_set_grad: parameter index %zu is out of range (model has %zu)",
                      index, acc_model_num_parameters(m));
  if (!grad)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_set_grad: the gradient of '%s' is NULL",
                      acc_model_parameter(m, index)->name);
  ACC_CHECK(acc__typed_refuse_float_grads(m, index, "acc_model_set_grad"));
  acc__model_set_grad(m, index, grad);
  return ACC_OK;
}

acc_result acc_model_set_flat_grads(acc_model *m, size_t first, float *grads) {
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, "acc_model_set_flat_grads"));
  size_t np = acc_model_num_parameters(m);
  if (first >= np || acc__model_flat_first(m, first) != first)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_model_set_flat_grads: parameter index %zu does not start a table registered with "
                      "acc_model_add_flat (pass the index it returned)", first);
  if (!grads) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_set_flat_grads: the gradient buffer is NULL");
  ACC_CHECK(acc__typed_refuse_float_grads(m, first, "acc_model_set_flat_grads"));
  size_t off = 0;
  for (size_t i = first; i < np && acc__model_flat_first(m, i) == first; i++) {
    acc__model_set_grad(m, i, grads + off);
    off += acc_model_parameter(m, i)->numel;
  }
  return ACC_OK;
}

acc_result acc_param_table_from_sizes(acc_param_spec *table, size_t count, const size_t *sizes) {
  static const char fn[] = "acc_param_table_from_sizes";
  if (count && (!table || !sizes)) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: table or sizes is NULL", fn);
  /* checked first, written after: a failure leaves the table as it was */
  for (size_t i = 0; i < count; i++) {
    const acc_param_spec *r = &table[i];
    const char *nm = r->name ? r->name : "(no name)";
    if (r->ndim < 0 || r->ndim > ACC_MAX_DIMS)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: row %zu ('%s') has ndim %d, expected 0..%d", fn, i, nm,
                        r->ndim, ACC_MAX_DIMS);
    if (r->ndim == 0) continue;
    int free_dim = -1;
    uint64_t prod = 1;
    int overflow = 0;
    for (int d = 0; d < r->ndim; d++) {
      if (r->shape[d] == -1 && free_dim < 0) {
        free_dim = d;
        continue;
      }
      if (r->shape[d] < 0)
        return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: row %zu ('%s'): dimension %d is %lld (only one -1, to be "
                          "inferred from sizes[%zu] = %zu)", fn, i, nm, d, (long long)r->shape[d], i, sizes[i]);
      if (r->shape[d] && prod > UINT64_MAX / (uint64_t)r->shape[d]) overflow = 1;
      prod *= (uint64_t)r->shape[d];
    }
    int ok = !overflow && (free_dim >= 0 ? prod > 0 && sizes[i] % prod == 0 : prod == sizes[i]);
    if (!ok) {
      char shape[256];
      size_t len = 0;
      shape[0] = 0;
      for (int d = 0; d < r->ndim && len < sizeof shape; d++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? ", " : "", (long long)r->shape[d]);
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: row %zu ('%s') has shape [%s], which %s sizes[%zu] = %zu "
                        "elements", fn, i, nm, shape, free_dim >= 0 ? "cannot be completed to" : "does not hold",
                        i, sizes[i]);
    }
  }
  for (size_t i = 0; i < count; i++) {
    acc_param_spec *r = &table[i];
    if (r->ndim == 0) {
      r->ndim = 1;
      r->shape[0] = (int64_t)sizes[i];
      continue;
    }
    uint64_t prod = 1;
    int free_dim = -1;
    for (int d = 0; d < r->ndim; d++) {
      if (r->shape[d] == -1 && free_dim < 0) free_dim = d;
      else prod *= (uint64_t)r->shape[d];
    }
    if (free_dim >= 0) r->shape[free_dim] = (int64_t)(sizes[i] / prod);
  }
  return ACC_OK;
}
