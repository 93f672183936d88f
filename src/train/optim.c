/* Optimizers (torch.optim.SGD and AdamW semantics, float32 arithmetic as torch does on CPU),
 * their checkpoint state accessors, and gradient clipping. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "core/internal.h"
#include "train/model_internal.h"

enum { MAX_BUFS = 2 };

typedef struct slot {
  char *names[MAX_BUFS]; /* "state.<param>.<buffer>" */
  float *buf[MAX_BUFS];  /* numel floats each, allocated on first need */
  int has[MAX_BUFS];     /* present in the state (SGD momentum: after the first step) */
  int group;             /* the parameter group; -1: not updated by this optimizer */
  size_t lo, hi;         /* elements [lo, hi) of the parameter are updated here and the buffers
                            hold hi - lo floats: [0, numel) unless ZeRO restricted the optimizer
                            to this process's shard (acc__optimizer_restrict) */
} slot;

/* One parameter group's hyperparameters; its scalar names for groups after the first. */
typedef struct group {
  double lr, weight_decay;
  char *lr_name, *wd_name; /* "group<g>.lr", "group<g>.weight_decay" (g >= 1) */
} group;

/* Every scalar of an optimizer has one of these names; groups after the first add two each. */
enum { BASE_SCALARS = 7 };

struct acc_optimizer {
  uint32_t magic;
  acc_optimizer_kind kind;
  acc_model *model;
  size_t nparams;
  slot *slots;
  size_t ngroups;
  group *groups; /* groups[0].lr / weight_decay are the scalars "lr" / "weight_decay" */
  int64_t step;
  double momentum, dampening, nesterov; /* SGD (nesterov 0/1) */
  double beta1, beta2, eps;             /* AdamW */
  /* (parameter, buffer) of each present state tensor, in order, rebuilt when `has` changes, so
   * state_get is O(1) per index. */
  size_t *state_index;
  size_t nstate;
  int state_dirty;
  int restricted; /* ZeRO: the buffers cover this process's shard only */
};

static const char *const sgd_bufs[] = {"momentum_buffer"};
static const char *const adamw_bufs[] = {"exp_avg", "exp_avg_sq"};
static const char *const sgd_scalars[] = {"kind", "step", "lr", "momentum", "dampening", "nesterov", "weight_decay"};
static const char *const adamw_scalars[] = {"kind", "step", "lr", "beta1", "beta2", "eps", "weight_decay"};

static int nbufs(const acc_optimizer *o) { return o->kind == ACC_OPTIMIZER_SGD ? 1 : 2; }
static const char *buf_name(const acc_optimizer *o, int b) {
  return o->kind == ACC_OPTIMIZER_SGD ? sgd_bufs[b] : adamw_bufs[b];
}

static acc_result check_opt(const acc_optimizer *o, const char *fn) {
  ACC_CHECK(acc__check_handle(o, ACC__HANDLE_OPTIMIZER, fn));
  return ACC_OK;
}

static acc_result check_model_unchanged(const acc_optimizer *o, const char *fn) {
  if (acc_model_num_parameters(o->model) != o->nparams)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: the model has %zu parameters but the optimizer was created over %zu; "
                      "register every parameter before creating the optimizer",
                      fn, acc_model_num_parameters(o->model), o->nparams);
  return ACC_OK;
}

void acc_optimizer_destroy(acc_optimizer *o) {
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER)) return;
  for (size_t i = 0; i < o->nparams; i++)
    for (int b = 0; b < MAX_BUFS; b++) {
      acc__free(o->slots[i].names[b]);
      acc__free(o->slots[i].buf[b]);
    }
  for (size_t g = 0; g < o->ngroups; g++) {
    acc__free(o->groups[g].lr_name);
    acc__free(o->groups[g].wd_name);
  }
  acc__free(o->groups);
  acc__free(o->slots);
  acc__free(o->state_index);
  o->magic = ACC__MAGIC_DEAD;
  acc__free(o);
}

/* The optimizer's groups: n_groups of them (NULL: one group over every parameter) with the
 * options' lr / weight_decay where a group gives a negative value. */
static acc_result assign_groups(acc_optimizer *o, const acc_param_group *groups, size_t n_groups, double lr,
                                double wd, const char *fn) {
  if (groups && n_groups == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: n_groups is 0 (give at least one group)", fn);
  o->ngroups = groups ? n_groups : 1;
  o->groups = acc__calloc(o->ngroups, sizeof *o->groups);
  if (!o->groups) return ACC_ERR_NOMEM;
  for (size_t i = 0; i < o->nparams; i++) o->slots[i].group = groups ? -1 : 0;
  for (size_t g = 0; g < o->ngroups; g++) {
    group *gr = &o->groups[g];
    gr->lr = groups && groups[g].lr >= 0 ? groups[g].lr : lr;
    gr->weight_decay = groups && groups[g].weight_decay >= 0 ? groups[g].weight_decay : wd;
    if (!(gr->lr < INFINITY) || !(gr->weight_decay < INFINITY))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: group %zu has lr %g and weight_decay %g (must be finite)",
                        fn, g, gr->lr, gr->weight_decay);
    if (g > 0) {
      char name[48];
      snprintf(name, sizeof name, "group%zu.lr", g);
      gr->lr_name = acc__strdup(name);
      snprintf(name, sizeof name, "group%zu.weight_decay", g);
      gr->wd_name = acc__strdup(name);
      if (!gr->lr_name || !gr->wd_name) return ACC_ERR_NOMEM;
    }
    if (!groups) continue;
    if (groups[g].count && !groups[g].names)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: group %zu has %zu names but names is NULL", fn, g,
                        groups[g].count);
    for (size_t k = 0; k < groups[g].count; k++) {
      const char *name = groups[g].names[k];
      size_t idx = 0;
      if (!name) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: group %zu, name %zu is NULL", fn, g, k);
      if (acc_model_find(o->model, name, &idx) != ACC_OK)
        return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: group %zu names parameter '%s', which the model does not have",
                          fn, g, name);
      if (o->slots[idx].group >= 0)
        return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: parameter '%s' is in group %d and in group %zu (a parameter "
                          "belongs to one group)", fn, name, o->slots[idx].group, g);
      o->slots[idx].group = (int)g;
    }
  }
  return ACC_OK;
}

static acc_result optimizer_new(acc_optimizer **out, acc_model *m, acc_optimizer_kind kind,
                                const acc_param_group *groups, size_t n_groups, double lr, double wd,
                                const char *fn) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  if (!m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: model is NULL", fn);
  acc_optimizer *o = acc__calloc(1, sizeof *o);
  if (!o) return ACC_ERR_NOMEM;
  o->magic = ACC__MAGIC_OPTIMIZER;
  o->kind = kind;
  o->model = m;
  o->nparams = acc_model_num_parameters(m);
  o->state_dirty = 1;
  if (o->nparams) {
    o->slots = acc__calloc(o->nparams, sizeof *o->slots);
    if (!o->slots) {
      acc__free(o);
      return ACC_ERR_NOMEM;
    }
  }
  acc_result rc = assign_groups(o, groups, n_groups, lr, wd, fn);
  if (rc != ACC_OK) {
    acc_optimizer_destroy(o);
    return rc;
  }
  for (size_t i = 0; i < o->nparams; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    o->slots[i].hi = p->numel;
    if (o->slots[i].group < 0) continue;
    for (int b = 0; b < nbufs(o); b++) {
      size_t len = strlen(p->name) + strlen(buf_name(o, b)) + 8;
      char *s = acc__malloc(len);
      if (!s) {
        acc_optimizer_destroy(o);
        return ACC_ERR_NOMEM;
      }
      snprintf(s, len, "state.%s.%s", p->name, buf_name(o, b));
      o->slots[i].names[b] = s;
    }
  }
  *out = o;
  return ACC_OK;
}

static acc_result check_hyper(const char *fn, const char *name, double v, double lo, double hi, int hi_open) {
  if (!(v >= lo) || (hi_open ? !(v < hi) : !(v <= hi)))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s = %g is out of range (expected %g <= %s %s %g)", fn,
                      name, v, lo, name, hi_open ? "<" : "<=", hi);
  return ACC_OK;
}

static acc_result validate_groups(const char *fn, const acc_optimizer *o) {
  for (size_t g = 0; g < o->ngroups; g++) {
    ACC_CHECK(check_hyper(fn, g ? o->groups[g].lr_name : "lr", o->groups[g].lr, 0.0, INFINITY, 1));
    ACC_CHECK(check_hyper(fn, g ? o->groups[g].wd_name : "weight_decay", o->groups[g].weight_decay, 0.0, INFINITY,
                          1));
  }
  return ACC_OK;
}

static acc_result validate_sgd(const char *fn, const acc_optimizer *o) {
  ACC_CHECK(validate_groups(fn, o));
  ACC_CHECK(check_hyper(fn, "momentum", o->momentum, 0.0, INFINITY, 1));
  ACC_CHECK(check_hyper(fn, "dampening", o->dampening, -INFINITY, INFINITY, 1));
  if (o->nesterov != 0.0 && (o->momentum <= 0.0 || o->dampening != 0.0))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: Nesterov momentum requires momentum > 0 and dampening == 0 (got momentum %g, "
                      "dampening %g)",
                      fn, o->momentum, o->dampening);
  return ACC_OK;
}

static acc_result validate_adamw(const char *fn, const acc_optimizer *o) {
  ACC_CHECK(validate_groups(fn, o));
  ACC_CHECK(check_hyper(fn, "beta1", o->beta1, 0.0, 1.0, 1));
  ACC_CHECK(check_hyper(fn, "beta2", o->beta2, 0.0, 1.0, 1));
  ACC_CHECK(check_hyper(fn, "eps", o->eps, 0.0, INFINITY, 1));
  return ACC_OK;
}

static acc_result create_sgd(acc_optimizer **out, acc_model *m, const acc_param_group *groups, size_t n_groups,
                             const acc_sgd_options *opts, const char *fn) {
  if (out) *out = NULL;
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  ACC__READ_OPTIONS(so, opts, acc_sgd_options, ACC_SGD_OPTIONS_VERSION, fn);
  ACC_CHECK(check_hyper(fn, "lr", so.lr, 0.0, INFINITY, 1));
  ACC_CHECK(check_hyper(fn, "weight_decay", so.weight_decay, 0.0, INFINITY, 1));
  acc_optimizer *o;
  ACC_CHECK(optimizer_new(&o, m, ACC_OPTIMIZER_SGD, groups, n_groups, so.lr, so.weight_decay, fn));
  o->momentum = so.momentum;
  o->dampening = so.dampening;
  o->nesterov = so.nesterov ? 1.0 : 0.0;
  acc_result rc = validate_sgd(fn, o);
  if (rc != ACC_OK) {
    acc_optimizer_destroy(o);
    return rc;
  }
  *out = o;
  return ACC_OK;
}

static acc_result create_adamw(acc_optimizer **out, acc_model *m, const acc_param_group *groups,
                               size_t n_groups, const acc_adamw_options *opts, const char *fn) {
  if (out) *out = NULL;
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  ACC__READ_OPTIONS(ao, opts, acc_adamw_options, ACC_ADAMW_OPTIONS_VERSION, fn);
  ACC_CHECK(check_hyper(fn, "lr", ao.lr, 0.0, INFINITY, 1));
  ACC_CHECK(check_hyper(fn, "weight_decay", ao.weight_decay, 0.0, INFINITY, 1));
  acc_optimizer *o;
  ACC_CHECK(optimizer_new(&o, m, ACC_OPTIMIZER_ADAMW, groups, n_groups, ao.lr, ao.weight_decay, fn));
  o->beta1 = ao.beta1;
  o->beta2 = ao.beta2;
  o->eps = ao.eps;
  acc_result rc = validate_adamw(fn, o);
  if (rc != ACC_OK) {
    acc_optimizer_destroy(o);
    return rc;
  }
  /* AdamW's buffers start at zero (torch creates them lazily with zeros: same values). */
  for (size_t i = 0; i < o->nparams; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!acc_model_requires_grad(m, i) || o->slots[i].group < 0) continue;
    for (int b = 0; b < 2; b++) {
      o->slots[i].buf[b] = acc__calloc(p->numel ? p->numel : 1, sizeof(float));
      if (!o->slots[i].buf[b]) {
        acc_optimizer_destroy(o);
        return ACC_ERR_NOMEM;
      }
      o->slots[i].has[b] = 1;
    }
  }
  *out = o;
  return ACC_OK;
}

acc_result acc_optimizer_create_sgd(acc_optimizer **out, acc_model *m, const acc_sgd_options *opts) {
  return create_sgd(out, m, NULL, 0, opts, "acc_optimizer_create_sgd");
}
acc_result acc_optimizer_create_adamw(acc_optimizer **out, acc_model *m, const acc_adamw_options *opts) {
  return create_adamw(out, m, NULL, 0, opts, "acc_optimizer_create_adamw");
}
acc_result acc_optimizer_create_sgd_groups(acc_optimizer **out, acc_model *m, const acc_param_group *groups,
                                           size_t n_groups, const acc_sgd_options *opts) {
  if (!groups) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_optimizer_create_sgd_groups: groups is NULL");
  return create_sgd(out, m, groups, n_groups, opts, "acc_optimizer_create_sgd_groups");
}
acc_result acc_optimizer_create_adamw_groups(acc_optimizer **out, acc_model *m, const acc_param_group *groups,
                                             size_t n_groups, const acc_adamw_options *opts) {
  if (!groups) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_optimizer_create_adamw_groups: groups is NULL");
  return create_adamw(out, m, groups, n_groups, opts, "acc_optimizer_create_adamw_groups");
}

acc_optimizer_kind acc_optimizer_get_kind(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) ? o->kind : ACC_OPTIMIZER_SGD;
}
acc_model *acc_optimizer_model(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) ? o->model : NULL;
}
double acc_optimizer_get_lr(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) ? o->groups[0].lr : 0.0;
}
int64_t acc_optimizer_step_count(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) ? o->step : 0;
}
size_t acc_optimizer_group_count(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) ? o->ngroups : 0;
}
double acc_optimizer_group_lr(const acc_optimizer *o, size_t g) {
  return (acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) && g < o->ngroups) ? o->groups[g].lr : 0.0;
}
double acc_optimizer_group_weight_decay(const acc_optimizer *o, size_t g) {
  return (acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) && g < o->ngroups) ? o->groups[g].weight_decay : 0.0;
}
int acc_optimizer_has_parameter(const acc_optimizer *o, size_t index) {
  return (acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) && index < o->nparams) ? o->slots[index].group >= 0 : 0;
}

acc_result acc_optimizer_set_group_lr(acc_optimizer *o, size_t g, double lr) {
  ACC_CHECK(check_opt(o, "acc_optimizer_set_group_lr"));
  if (g >= o->ngroups)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_optimizer_set_group_lr: group %zu out of range (%zu groups)", g,
                      o->ngroups);
  ACC_CHECK(check_hyper("acc_optimizer_set_group_lr", "lr", lr, 0.0, INFINITY, 1));
  o->groups[g].lr = lr;
  return ACC_OK;
}

acc_result acc_optimizer_set_lr(acc_optimizer *o, double lr) {
  ACC_CHECK(check_opt(o, "acc_optimizer_set_lr"));
  ACC_CHECK(check_hyper("acc_optimizer_set_lr", "lr", lr, 0.0, INFINITY, 1));
  for (size_t g = 0; g < o->ngroups; g++) o->groups[g].lr = lr;
  return ACC_OK;
}

static float *ensure_buf(acc_optimizer *o, size_t i, int b) {
  if (!o->slots[i].buf[b]) {
    size_t n = o->slots[i].hi - o->slots[i].lo;
    o->slots[i].buf[b] = acc__calloc(n ? n : 1, sizeof(float));
  }
  return o->slots[i].buf[b];
}

/* The loops below are specialized on the hyperparameters (no branch inside a loop, restrict
 * pointers) so the compiler vectorizes them; the arithmetic, and so every rounding, is the same
 * in every variant. */
static void sgd_param(const acc_optimizer *o, const group *gr, const acc_param *p, slot *sl, float *buf_) {
  const float wd = (float)gr->weight_decay, mom = (float)o->momentum;
  const float damp1 = (float)(1.0 - o->dampening), neg_lr = (float)(-gr->lr);
  const int first = !sl->has[0];
  float *restrict w = p->data;
  const float *restrict grad = p->grad;
  float *restrict buf = buf_;
  const size_t n = p->numel;
  const int decay = gr->weight_decay != 0.0, nesterov = o->nesterov != 0.0;
  if (o->momentum == 0.0) {
    if (decay)
      for (size_t k = 0; k < n; k++) w[k] = w[k] + neg_lr * (grad[k] + wd * w[k]);
    else
      for (size_t k = 0; k < n; k++) w[k] = w[k] + neg_lr * grad[k];
    return;
  }
  if (!decay && !nesterov && !first) {
    for (size_t k = 0; k < n; k++) {
      buf[k] = buf[k] * mom + damp1 * grad[k];
      w[k] = w[k] + neg_lr * buf[k];
    }
    return;
  }
  for (size_t k = 0; k < n; k++) {
    float g = decay ? grad[k] + wd * w[k] : grad[k];
    buf[k] = first ? g : buf[k] * mom + damp1 * g;
    g = nesterov ? g + mom * buf[k] : buf[k];
    w[k] = w[k] + neg_lr * g;
  }
}

static void adamw_param(const acc_optimizer *o, const group *gr, const acc_param *p, float *m, float *v) {
  const double step = (double)o->step;
  const float decay = (float)(1.0 - gr->lr * gr->weight_decay);
  const float w1 = (float)(1.0 - o->beta1), b2 = (float)o->beta2, c2 = (float)(1.0 - o->beta2);
  const double bc1 = 1.0 - pow(o->beta1, step);
  const double bc2_sqrt = sqrt(1.0 - pow(o->beta2, step));
  const float neg_step_size = (float)(-(gr->lr / bc1));
  const float bc2s = (float)bc2_sqrt, eps = (float)o->eps;
  float *w = p->data;
  const float *grad = p->grad;
  for (size_t k = 0; k < p->numel; k++) {
    const float g = grad[k];
    w[k] = w[k] * decay;
    /* torch.lerp: start + weight * (end - start) for |weight| < 0.5, else the mirrored form */
    m[k] = fabsf(w1) < 0.5f ? m[k] + w1 * (g - m[k]) : g - (g - m[k]) * (1.0f - w1);
    v[k] = v[k] * b2 + c2 * g * g;
    const float denom = sqrtf(v[k]) / bc2s + eps;
    w[k] = w[k] + neg_step_size * m[k] / denom;
  }
}

acc_result acc_optimizer_step(acc_optimizer *o) {
  ACC_CHECK(check_opt(o, "acc_optimizer_step"));
  ACC_CHECK(check_model_unchanged(o, "acc_optimizer_step"));
  const acc__model_stepper *ms = acc__model_stepper_of(o->model);
  if (ms) return ms->step(ms->ctx, o); /* device memory (FSDP on a device): its kernels */
  if (o->kind == ACC_OPTIMIZER_SGD && o->momentum != 0.0)
    for (size_t i = 0; i < o->nparams; i++)
      if (o->slots[i].group >= 0 && acc_model_parameter(o->model, i)->grad && !ensure_buf(o, i, 0))
        return ACC_ERR_NOMEM;
  o->step++;
  for (size_t i = 0; i < o->nparams; i++) {
    const acc_param *p = acc_model_parameter(o->model, i);
    slot *sl = &o->slots[i];
    if (!p->grad || sl->group < 0) continue;
    const group *gr = &o->groups[sl->group];
    /* the elements this process updates (all of them without ZeRO) */
    acc_param q = *p;
    q.data += sl->lo;
    q.grad += sl->lo;
    q.numel = sl->hi - sl->lo;
    p = &q;
    if (o->kind == ACC_OPTIMIZER_SGD) {
      sgd_param(o, gr, p, sl, sl->buf[0]);
      if (o->momentum != 0.0 && !sl->has[0]) {
        sl->has[0] = 1;
        o->state_dirty = 1;
      }
    } else {
      adamw_param(o, gr, p, sl->buf[0], sl->buf[1]);
    }
  }
  return ACC_OK;
}

acc_result acc_optimizer_zero_grad(acc_optimizer *o) {
  ACC_CHECK(check_opt(o, "acc_optimizer_zero_grad"));
  ACC_CHECK(check_model_unchanged(o, "acc_optimizer_zero_grad"));
  const acc__model_stepper *ms = acc__model_stepper_of(o->model);
  if (ms) return ms->zero_grad(ms->ctx, o);
  for (size_t i = 0; i < o->nparams; i++) {
    const acc_param *p = acc_model_parameter(o->model, i);
    if (p->grad && o->slots[i].group >= 0) memset(p->grad, 0, p->numel * sizeof(float));
  }
  return ACC_OK;
}

/* ---- checkpoint state -------------------------------------------------------------------- */

/* Rebuilds the index of present state tensors (after a step or a set added one). The index is
 * a cache: state_get stays logically const. */
static acc_result state_index(const acc_optimizer *co) {
  acc_optimizer *o = (acc_optimizer *)co;
  if (!o->state_dirty) return ACC_OK;
  size_t n = 0;
  for (size_t i = 0; i < o->nparams; i++)
    for (int b = 0; b < nbufs(o); b++) n += o->slots[i].has[b] != 0;
  size_t *idx = n ? acc__malloc(n * sizeof *idx) : NULL;
  if (n && !idx) return ACC_ERR_NOMEM;
  n = 0;
  for (size_t i = 0; i < o->nparams; i++)
    for (int b = 0; b < nbufs(o); b++)
      if (o->slots[i].has[b]) idx[n++] = i * MAX_BUFS + (size_t)b;
  acc__free(o->state_index);
  o->state_index = idx;
  o->nstate = n;
  o->state_dirty = 0;
  return ACC_OK;
}

size_t acc_optimizer_state_count(const acc_optimizer *o) {
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER)) return 0;
  if (state_index(o) == ACC_OK) return o->nstate;
  size_t n = 0; /* out of memory for the index: count without it */
  for (size_t i = 0; i < o->nparams; i++)
    for (int b = 0; b < nbufs(o); b++) n += o->slots[i].has[b] != 0;
  return n;
}

acc_result acc_optimizer_state_get(const acc_optimizer *o, size_t idx, const char **name, const float **data,
                                   size_t *numel, int *ndim, const int64_t **shape) {
  ACC_CHECK(check_opt(o, "acc_optimizer_state_get"));
  if (o->restricted)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_optimizer_state_get: this optimizer is sharded by ZeRO (each process holds "
                      "its shard of the state); acc_accelerator_save_state gathers the full tensors");
  ACC_CHECK(state_index(o));
  if (idx >= o->nstate)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_optimizer_state_get: index %zu is out of range (%zu tensors)",
                      idx, o->nstate);
  size_t i = o->state_index[idx] / MAX_BUFS;
  int b = (int)(o->state_index[idx] % MAX_BUFS);
  const acc_param *p = acc_model_parameter(o->model, i);
  if (name) *name = o->slots[i].names[b];
  if (data) *data = o->slots[i].buf[b];
  if (numel) *numel = p->numel;
  if (ndim) *ndim = p->ndim;
  if (shape) *shape = p->shape;
  return ACC_OK;
}

static void format_shape(char *out, size_t cap, int ndim, const int64_t *shape) {
  size_t len = 0;
  len += (size_t)snprintf(out + len, cap - len, "[");
  for (int d = 0; d < ndim && len < cap; d++)
    len += (size_t)snprintf(out + len, cap - len, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (len < cap) snprintf(out + len, cap - len, "]");
}

acc_result acc__optimizer_state_find(const acc_optimizer *o, const char *fn, const char *name, int ndim,
                                     const int64_t *shape, size_t numel, size_t *pi, int *pb) {
  for (size_t i = 0; i < o->nparams; i++) {
    const acc_param *p = acc_model_parameter(o->model, i);
    if (o->slots[i].group < 0) continue;
    for (int b = 0; b < nbufs(o); b++) {
      if (strcmp(o->slots[i].names[b], name) != 0) continue;
      int same = ndim == p->ndim && numel == p->numel;
      for (int d = 0; same && d < ndim; d++) same = shape[d] == p->shape[d];
      if (!same) {
        char want[160], got[160];
        format_shape(want, sizeof want, p->ndim, p->shape);
        format_shape(got, sizeof got, ndim, shape);
        return acc__error(ACC_ERR_MISMATCH,
                          "%s: optimizer state '%s' has shape %s (%zu elements) but parameter '%s' has shape "
                          "%s (%zu elements)",
                          fn, name, got, numel, p->name, want, p->numel);
      }
      if (!acc_model_requires_grad(o->model, i))
        return acc__error(ACC_ERR_MISMATCH, "%s: parameter '%s' is frozen (no gradient) and has no optimizer state",
                          fn, p->name);
      *pi = i;
      *pb = b;
      return ACC_OK;
    }
  }
  return acc__error(ACC_ERR_MISMATCH,
                    "%s: '%s' is not a state tensor of this %s optimizer (expected state.<parameter>.%s for one of "
                    "the parameters it updates)",
                    fn, name, o->kind == ACC_OPTIMIZER_SGD ? "SGD" : "AdamW",
                    o->kind == ACC_OPTIMIZER_SGD ? "momentum_buffer" : "exp_avg|exp_avg_sq");
}

acc_result acc_optimizer_state_set(acc_optimizer *o, const char *name, const float *data, size_t numel, int ndim,
                                   const int64_t *shape) {
  const char *fn = "acc_optimizer_state_set";
  ACC_CHECK(check_opt(o, fn));
  ACC_CHECK(check_model_unchanged(o, fn));
  if (o->restricted)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: this optimizer is sharded by ZeRO (each process holds its shard of the "
                      "state); acc_accelerator_load_state scatters the full tensors", fn);
  if (!name || (numel && !data) || ndim < 0 || ndim > ACC_MAX_DIMS || (ndim > 0 && !shape))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: NULL name/data/shape or ndim %d out of range", fn, ndim);
  size_t i = 0;
  int b = 0;
  ACC_CHECK(acc__optimizer_state_find(o, fn, name, ndim, shape, numel, &i, &b));
  float *buf = ensure_buf(o, i, b);
  if (!buf) return ACC_ERR_NOMEM;
  if (numel) memcpy(buf, data, numel * sizeof(float));
  if (!o->slots[i].has[b]) {
    o->slots[i].has[b] = 1;
    o->state_dirty = 1;
  }
  return ACC_OK;
}

size_t acc_optimizer_scalar_count(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) ? BASE_SCALARS + 2 * (o->ngroups - 1) : 0;
}

static double *scalar_slot(acc_optimizer *o, size_t i) {
  if (i >= BASE_SCALARS) {
    group *gr = &o->groups[1 + (i - BASE_SCALARS) / 2];
    return (i - BASE_SCALARS) % 2 == 0 ? &gr->lr : &gr->weight_decay;
  }
  if (i == 2) return &o->groups[0].lr;
  if (i == 6) return &o->groups[0].weight_decay;
  if (o->kind == ACC_OPTIMIZER_SGD) {
    double *p[] = {NULL, NULL, NULL, &o->momentum, &o->dampening, &o->nesterov, NULL};
    return p[i];
  }
  double *p[] = {NULL, NULL, NULL, &o->beta1, &o->beta2, &o->eps, NULL};
  return p[i];
}

static const char *scalar_name(const acc_optimizer *o, size_t i) {
  if (i >= BASE_SCALARS) {
    const group *gr = &o->groups[1 + (i - BASE_SCALARS) / 2];
    return (i - BASE_SCALARS) % 2 == 0 ? gr->lr_name : gr->wd_name;
  }
  return o->kind == ACC_OPTIMIZER_SGD ? sgd_scalars[i] : adamw_scalars[i];
}

acc_result acc_optimizer_scalar_get(const acc_optimizer *o, size_t i, const char **name, double *value) {
  ACC_CHECK(check_opt(o, "acc_optimizer_scalar_get"));
  size_t n = acc_optimizer_scalar_count(o);
  if (i >= n)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_optimizer_scalar_get: index %zu is out of range (%zu scalars)",
                      i, n);
  if (name) *name = scalar_name(o, i);
  if (value) {
    if (i == 0) *value = (double)o->kind;
    else if (i == 1) *value = (double)o->step;
    else *value = *scalar_slot((acc_optimizer *)o, i);
  }
  return ACC_OK;
}

acc_result acc_optimizer_scalar_set(acc_optimizer *o, const char *name, double value) {
  const char *fn = "acc_optimizer_scalar_set";
  ACC_CHECK(check_opt(o, fn));
  if (!name) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: name is NULL", fn);
  size_t n = acc_optimizer_scalar_count(o), i = 0;
  while (i < n && strcmp(scalar_name(o, i), name) != 0) i++;
  if (i == n)
    return acc__error(ACC_ERR_MISMATCH, "%s: '%s' is not a scalar of this %s optimizer (%zu parameter group%s)", fn,
                      name, o->kind == ACC_OPTIMIZER_SGD ? "SGD" : "AdamW", o->ngroups, o->ngroups == 1 ? "" : "s");
  if (i == 0) {
    if (value != (double)o->kind)
      return acc__error(ACC_ERR_MISMATCH, "%s: the state is for optimizer kind %g but this optimizer is %s (%d)", fn,
                        value, o->kind == ACC_OPTIMIZER_SGD ? "SGD" : "AdamW", (int)o->kind);
    return ACC_OK;
  }
  if (i == 1) {
    if (!(value >= 0.0 && value <= 9007199254740992.0) || value != floor(value))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: step %g must be a non-negative integer", fn, value);
    o->step = (int64_t)value;
    return ACC_OK;
  }
  double *slotp = scalar_slot(o, i);
  double saved = *slotp;
  *slotp = value;
  acc_result rc = o->kind == ACC_OPTIMIZER_SGD ? validate_sgd(fn, o) : validate_adamw(fn, o);
  if (rc != ACC_OK) *slotp = saved;
  else if (o->kind == ACC_OPTIMIZER_SGD && i == 5) *slotp = value != 0.0 ? 1.0 : 0.0;
  return rc;
}

/* ---- ZeRO -------------------------------------------------------------------------------- */

size_t acc__optimizer_state_floats(const acc_optimizer *o) {
  size_t n = 0;
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER)) return 0;
  for (size_t i = 0; i < o->nparams; i++)
    for (int b = 0; b < MAX_BUFS; b++)
      if (o->slots[i].buf[b]) n += o->slots[i].hi - o->slots[i].lo;
  return n;
}

int acc__optimizer_is_restricted(const acc_optimizer *o) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) && o->restricted;
}

acc_result acc__optimizer_restrict(acc_optimizer *o, const size_t *offset, size_t lo, size_t hi) {
  ACC_CHECK(check_opt(o, "ZeRO"));
  ACC_CHECK(check_model_unchanged(o, "ZeRO"));
  if (o->restricted) return ACC_OK;
  for (size_t i = 0; i < o->nparams; i++) {
    slot *sl = &o->slots[i];
    size_t a = 0, z = 0; /* the range of parameter i inside [lo, hi), in its own elements */
    if (offset[i] != SIZE_MAX) {
      size_t n = acc_model_parameter(o->model, i)->numel, s0 = offset[i], s1 = offset[i] + n;
      size_t b0 = s0 > lo ? s0 : lo, b1 = s1 < hi ? s1 : hi;
      if (b1 > b0) a = b0 - s0, z = b1 - s0;
    }
    for (int b = 0; b < MAX_BUFS; b++) {
      if (!sl->buf[b]) continue;
      float *nb = acc__calloc(z > a ? z - a : 1, sizeof(float));
      if (!nb) return ACC_ERR_NOMEM;
      memcpy(nb, sl->buf[b] + a, (z - a) * sizeof(float)); /* buffers are full-size here */
      acc__free(sl->buf[b]);
      sl->buf[b] = nb;
    }
    sl->lo = a, sl->hi = z;
  }
  o->restricted = 1;
  return ACC_OK;
}

acc_result acc__optimizer_unrestrict(acc_optimizer *o, acc_state *st, const size_t *offset,
                                     float *flat, size_t shard) {
  ACC_CHECK(check_opt(o, "ZeRO"));
  if (!o->restricted) return ACC_OK;
  int rank = acc_state_process_index(st);
  for (int b = 0; b < nbufs(o); b++) {
    float *mine = flat + (size_t)rank * shard;
    memset(mine, 0, shard * sizeof(float));
    for (size_t i = 0; i < o->nparams; i++) {
      slot *sl = &o->slots[i];
      if (offset[i] == SIZE_MAX || !sl->buf[b] || sl->hi == sl->lo) continue;
      memcpy(flat + offset[i] + sl->lo, sl->buf[b], (sl->hi - sl->lo) * sizeof(float));
    }
    acc__comm_origin(ACC__ORIGIN_ZERO, 3);
    ACC_CHECK(acc_all_gather(st, mine, flat, shard, ACC_F32));
    for (size_t i = 0; i < o->nparams; i++) {
      slot *sl = &o->slots[i];
      if (!sl->buf[b] && !(sl->has[b] && offset[i] != SIZE_MAX)) continue;
      size_t n = acc_model_parameter(o->model, i)->numel;
      float *nb = acc__calloc(n ? n : 1, sizeof(float));
      if (!nb) return ACC_ERR_NOMEM;
      if (offset[i] != SIZE_MAX) memcpy(nb, flat + offset[i], n * sizeof(float));
      acc__free(sl->buf[b]);
      sl->buf[b] = nb;
    }
  }
  for (size_t i = 0; i < o->nparams; i++) {
    o->slots[i].lo = 0;
    o->slots[i].hi = acc_model_parameter(o->model, i)->numel;
  }
  o->restricted = 0;
  return ACC_OK;
}

/* ---- clipping ---------------------------------------------------------------------------- */

acc_result acc_clip_grad_norm(acc_model *m, float max_norm, double norm_type, float *total_norm_out) {
  if (!m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_clip_grad_norm: model is NULL");
  int inf_norm = isinf(norm_type) && norm_type > 0;
  if (!inf_norm && norm_type != 2.0)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "acc_clip_grad_norm: norm_type %g is not supported (use 2 or INFINITY)",
                      norm_type);
  if (!(max_norm >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_clip_grad_norm: max_norm %g must be >= 0", (double)max_norm);
  double acc = 0.0;
  size_t np = acc_model_num_parameters(m);
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad) continue;
    for (size_t k = 0; k < p->numel; k++) {
      double g = (double)p->grad[k];
      if (inf_norm) {
        double a = fabs(g);
        if (a > acc || isnan(a)) acc = a;
      } else {
        acc += g * g;
      }
    }
  }
  float total = inf_norm ? (float)acc : (float)sqrt(acc);
  if (total_norm_out) *total_norm_out = total;
  float coef = max_norm / (total + 1e-6f);
  if (coef < 1.0f)
    for (size_t i = 0; i < np; i++) {
      const acc_param *p = acc_model_parameter(m, i);
      if (!p->grad) continue;
      for (size_t k = 0; k < p->numel; k++) p->grad[k] *= coef;
    }
  return ACC_OK;
}

acc_result acc_clip_grad_value(acc_model *m, float clip_value) {
  if (!m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_clip_grad_value: model is NULL");
  if (!(clip_value >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_clip_grad_value: clip_value %g must be >= 0",
                      (double)clip_value);
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad) continue;
    for (size_t k = 0; k < p->numel; k++) {
      float g = p->grad[k];
      if (g > clip_value) p->grad[k] = clip_value;
      else if (g < -clip_value) p->grad[k] = -clip_value;
    }
  }
  return ACC_OK;
}

/* ---- training on a device (src/train/train_optim.c) ------------------------------------- */

int acc__optimizer_param_group(const acc_optimizer *o, size_t i) {
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) || i >= o->nparams) return -1;
  if (!acc_model_parameter(o->model, i)->grad) return -1;
  return o->slots[i].group;
}

int acc__optimizer_state_present(const acc_optimizer *o, size_t i, int b) {
  return acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) && i < o->nparams && b < nbufs(o) &&
         o->slots[i].has[b];
}

float *acc__optimizer_state_host(acc_optimizer *o, size_t i, int b) {
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) || i >= o->nparams || b >= nbufs(o)) return NULL;
  return ensure_buf(o, i, b);
}

void acc__optimizer_state_set_present(acc_optimizer *o, size_t i, int b, int present) {
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) || i >= o->nparams || b >= nbufs(o)) return;
  if (o->slots[i].has[b] != (present != 0)) {
    o->slots[i].has[b] = present != 0;
    o->state_dirty = 1;
  }
}

const char *acc__optimizer_state_name(const acc_optimizer *o, size_t i, int b) {
  if (!acc__handle_ok(o, ACC__HANDLE_OPTIMIZER) || i >= o->nparams || b < 0 || b >= nbufs(o)) return NULL;
  return o->slots[i].names[b];
}

acc_result acc__optimizer_device_stepped(acc_optimizer *o) {
  ACC_CHECK(check_opt(o, "acc_optimizer_step"));
  ACC_CHECK(check_model_unchanged(o, "acc_optimizer_step"));
  o->step++;
  if (o->kind == ACC_OPTIMIZER_SGD && o->momentum != 0.0)
    for (size_t i = 0; i < o->nparams; i++)
      if (acc__optimizer_param_group(o, i) >= 0 && !o->slots[i].has[0]) {
        o->slots[i].has[0] = 1;
        o->state_dirty = 1;
      }
  return ACC_OK;
}
