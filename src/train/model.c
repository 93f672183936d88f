/* acc_model: the registry of named parameters and gradients. */
#include <string.h>

#include "core/internal.h"
#include "train/model_internal.h"
#include "device/device.h"
#include "device/devio.h"

struct acc_model {
  uint32_t magic;
  acc_param *params;
  size_t count, cap, numel;
  unsigned char *trainable; /* per parameter: takes a gradient (attached or still to come) */
  size_t *flat_first;       /* per parameter: first index of its acc_model_add_flat group, or SIZE_MAX */
  uint64_t grad_gen;        /* bumped by every acc__model_set_grad */
  acc__typed_group *typed;  /* bf16/fp16 tables and their fp32 master copies (src/train/typed.c) */
  size_t ntyped;
  acc__model_stepper stepper; /* the owner of device-memory parameters that steps them (FSDP) */
};

void acc__model_set_stepper(acc_model *m, const acc__model_stepper *s) {
  if (acc__handle_ok(m, ACC__HANDLE_MODEL)) m->stepper = *s;
}

const acc__model_stepper *acc__model_stepper_of(const acc_model *m) {
  return acc__handle_ok(m, ACC__HANDLE_MODEL) && m->stepper.step ? &m->stepper : NULL;
}

acc_result acc_model_create(acc_model **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_create: out is NULL");
  acc_model *m = acc__calloc(1, sizeof *m);
  if (!m) return ACC_ERR_NOMEM;
  m->magic = ACC__MAGIC_MODEL;
  *out = m;
  return ACC_OK;
}

void acc_model_destroy(acc_model *m) {
  if (!acc__handle_ok(m, ACC__HANDLE_MODEL)) return;
  for (size_t i = 0; i < m->count; i++) acc__free((char *)m->params[i].name);
  acc__free(m->params);
  acc__free(m->trainable);
  acc__free(m->flat_first);
  for (size_t k = 0; k < m->ntyped; k++) acc__typed_group_free(&m->typed[k]);
  acc__free(m->typed);
  m->magic = ACC__MAGIC_DEAD;
  acc__free(m);
}

acc_result acc_model_add_parameter(acc_model *m, const char *name, float *data, float *grad, int ndim,
                                   const int64_t *shape) {
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, "acc_model_add_parameter"));
  if (!name || !*name) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_add_parameter: empty name");
  if (!data)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_add_parameter: parameter '%s' has no data", name);
  if (ndim < 0 || ndim > ACC_MAX_DIMS || (ndim > 0 && !shape))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_model_add_parameter: parameter '%s' has ndim %d (expected 0..%d with a shape)",
                      name, ndim, ACC_MAX_DIMS);
  size_t idx;
  if (acc_model_find(m, name, &idx) == ACC_OK)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_add_parameter: parameter '%s' is already registered", name);
  acc_clear_error();
  size_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] <= 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "acc_model_add_parameter: parameter '%s' has dimension %d of size %lld (must be > 0)",
                        name, d, (long long)shape[d]);
    numel *= (size_t)shape[d];
  }
  if (m->count == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 8;
    acc_param *p = acc__realloc(m->params, cap * sizeof *p);
    if (!p) return ACC_ERR_NOMEM;
    m->params = p;
    unsigned char *t = acc__realloc(m->trainable, cap);
    if (!t) return ACC_ERR_NOMEM;
    m->trainable = t;
    size_t *ff = acc__realloc(m->flat_first, cap * sizeof *ff);
    if (!ff) return ACC_ERR_NOMEM;
    m->flat_first = ff;
    m->cap = cap;
  }
  acc_param *p = &m->params[m->count];
  memset(p, 0, sizeof *p);
  p->name = acc__strdup(name);
  if (!p->name) return ACC_ERR_NOMEM;
  p->data = data;
  p->grad = grad;
  p->ndim = ndim;
  for (int d = 0; d < ndim; d++) p->shape[d] = shape[d];
  p->numel = numel;
  m->trainable[m->count] = grad != NULL;
  m->flat_first[m->count] = SIZE_MAX;
  m->count++;
  m->numel += numel;
  return ACC_OK;
}

size_t acc_model_num_parameters(const acc_model *m) { return m ? m->count : 0; }
size_t acc_model_numel(const acc_model *m) { return m ? m->numel : 0; }

const acc_param *acc_model_parameter(const acc_model *m, size_t i) {
  return (m && i < m->count) ? &m->params[i] : NULL;
}

acc_result acc_model_find(const acc_model *m, const char *name, size_t *index) {
  if (!m || !name || !index) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_model_find: NULL argument");
  for (size_t i = 0; i < m->count; i++)
    if (strcmp(m->params[i].name, name) == 0) {
      *index = i;
      return ACC_OK;
    }
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "the model has no parameter named '%s'", name);
}

/* ---- gradients attached after registration (src/train/flat.c) ------------------------------- */

int acc_model_requires_grad(const acc_model *m, size_t i) {
  return acc__handle_ok(m, ACC__HANDLE_MODEL) && i < m->count && m->trainable[i];
}

void acc__model_mark(acc_model *m, size_t i, size_t flat_first) {
  m->trainable[i] = 1;
  m->flat_first[i] = flat_first;
}

size_t acc__model_zero_span(const acc_model *m, size_t n, size_t *total) {
  size_t t = 0;
  for (size_t i = 0; i < m->count; i++)
    if (acc_model_requires_grad(m, i)) t += m->params[i].numel;
  if (total) *total = t;
  return t && n ? (t + n - 1) / n : 1; /* padded, never refused */
}

size_t acc__model_flat_first(const acc_model *m, size_t i) { return i < m->count ? m->flat_first[i] : SIZE_MAX; }

void acc__model_set_grad(acc_model *m, size_t i, float *grad) {
  if (m->params[i].grad == grad && m->trainable[i]) return; /* the same buffer: nothing to rebuild */
  m->params[i].grad = grad;
  m->trainable[i] = 1;
  m->grad_gen++;
}

uint64_t acc__model_grad_gen(const acc_model *m) { return m->grad_gen; }

const char *acc__model_missing_grad(const acc_model *m) {
  for (size_t i = 0; i < m->count; i++)
    if (m->trainable[i] && !m->params[i].grad) return m->params[i].name;
  return NULL;
}

/* ---- bf16/fp16 tables (src/train/typed.c) ----------------------------------------------------- */

void acc__typed_group_free(acc__typed_group *g) {
  if (g->master_program) g->master = NULL; /* the program's */
  if (!g->dev) {
    acc__free(g->master);
    acc__free(g->grad32);
  } else {
    /* the device may be gone (its accelerator destroyed first): its memory went with it */
    acc__devctx *d = acc__devio_find(g->grad32 ? (void *)g->grad32 : (void *)g->master);
    if (d == g->dev) {
      if (g->master) acc__device_free(d->dev, g->master);
      if (g->grad32) acc__device_free(d->dev, g->grad32);
    }
  }
  g->master = g->grad32 = NULL;
  acc__free(g->ready);
  g->ready = NULL;
}

acc__typed_group *acc__model_typed(const acc_model *m, size_t *n) {
  *n = m ? m->ntyped : 0;
  return m ? m->typed : NULL;
}

acc_result acc__model_typed_add(acc_model *m, const acc__typed_group *g) {
  acc__typed_group *v = acc__realloc(m->typed, (m->ntyped + 1) * sizeof *v);
  if (!v) return ACC_ERR_NOMEM;
  m->typed = v;
  v[m->ntyped++] = *g;
  return ACC_OK;
}
