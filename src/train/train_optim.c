/* Training on a device (train.h): optimizer steps, fp16 unscaling and overflow, gradient
 * clipping, zero_grad and the low-precision copy, with the kernels of the device layer on the
 * accelerator's compute stream.
 *
 * Gradients, parameters and state are walked as ranges: neighbouring parameters whose memory is
 * adjacent (as when a program carves them out of one allocation) become one kernel call. The
 * optimizer state of each optimizer is one device allocation per buffer kind (momentum; AdamW's
 * exp_avg and exp_avg_sq) laid out in parameter order, so the state of adjacent parameters is
 * adjacent too. Learning rates, the step count and the bias corrections are computed on the
 * host and passed to the kernels as arguments: a step needs no synchronization. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "train/accel.h"
#include "device/kernels.h"
#include "train/train.h"

enum { MAX_OPTS = 16 };

typedef struct dev_opt {
  acc_optimizer *opt;
  size_t nparams;
  size_t *off;  /* per parameter: first element in the flat state; SIZE_MAX: not updated */
  size_t total; /* elements of each flat state buffer */
  float *d_state[2];
} dev_opt;

typedef struct grange {
  float *p;
  size_t n;
} grange;

struct acc__dev_train {
  acc_model *m; /* the model whose gradient ranges are below */
  grange *gr;
  size_t ngr;
  size_t npartials; /* sum of acc__norm_partials over the ranges */
  double *d_partials;
  int32_t *d_flag; /* fp16 overflow flag */
  int32_t h_flag;
  float *d_norm, *d_coef;
  void *d_low; /* the low-precision parameters (f16/bf16: uint16_t; f32: float) */
  size_t low_n;
  dev_opt opts[MAX_OPTS];
  int nopts;
  acc__dstream *prog;                /* the program's stream (acc_accelerator_set_program_stream) */
  acc__devent *prog_in, *prog_out;   /* recorded on it / on the compute stream */
};

acc_result acc__dev_train_get(acc__devctx *d, acc__dev_train **out) {
  if (!d->train) {
    d->train = acc__calloc(1, sizeof *d->train);
    if (!d->train) return ACC_ERR_NOMEM;
  }
  *out = d->train;
  return ACC_OK;
}

void acc__dev_train_free(acc__devctx *d) {
  acc__dev_train *t = d ? d->train : NULL;
  if (!t) return;
  acc__device *dev = d->dev;
  acc__dstream_sync(dev, d->stream);
  for (int k = 0; k < t->nopts; k++) {
    acc__device_free(dev, t->opts[k].d_state[0]);
    acc__device_free(dev, t->opts[k].d_state[1]);
    acc__free(t->opts[k].off);
  }
  acc__device_free(dev, t->d_partials);
  acc__device_free(dev, t->d_flag);
  acc__device_free(dev, t->d_norm);
  acc__device_free(dev, t->d_coef);
  acc__device_free(dev, t->d_low);
  if (t->prog_in) acc__devent_destroy(dev, t->prog_in);
  if (t->prog_out) acc__devent_destroy(dev, t->prog_out);
  acc__free(t->gr);
  acc__free(t);
  d->train = NULL;
}

/* ---- the program's stream (torch's "current stream" rule, docs/porting.md) ------------------- */

acc_result acc__dev_prog_stream_set(acc__devctx *d, acc__dstream *s) {
  acc__dev_train *t;
  ACC_CHECK(acc__dev_train_get(d, &t));
  if (s && !t->prog_in) ACC_CHECK(acc__devent_create(d->dev, &t->prog_in));
  if (s && !t->prog_out) ACC_CHECK(acc__devent_create(d->dev, &t->prog_out));
  t->prog = s;
  return ACC_OK;
}

acc__dstream *acc__dev_prog_stream(const acc__devctx *d) { return d && d->train ? d->train->prog : NULL; }

acc_result acc__dev_prog_enter(acc__devctx *d) {
  acc__dev_train *t = d ? d->train : NULL;
  if (!t || !t->prog) return ACC_OK;
  ACC_CHECK(acc__devent_record(d->dev, t->prog_in, t->prog));
  return acc__dstream_wait(d->dev, d->stream, t->prog_in);
}

acc_result acc__dev_prog_leave(acc__devctx *d) {
  acc__dev_train *t = d ? d->train : NULL;
  if (!t || !t->prog) return ACC_OK;
  ACC_CHECK(acc__devent_record(d->dev, t->prog_out, d->stream));
  return acc__dstream_wait(d->dev, t->prog, t->prog_out);
}

/* The model trained on the device: one per accelerator there (prepare_model refuses a second). */
static acc_model *first_model(const acc__accel_parts *parts) {
  return parts->nmodels ? parts->models[0] : NULL;
}

/* The accelerator's device, its training state and its prepared objects. */
static acc_result ctx_of(acc_accelerator *acc, acc__devctx **d, acc__dev_train **t,
                         acc__accel_parts *parts) {
  *d = acc->dev;
  ACC_CHECK(acc__dev_train_get(*d, t));
  acc__accel_fill_parts(acc, parts);
  return ACC_OK;
}

/* The model's gradients as maximal runs of adjacent memory, in registration order. */
static acc_result grad_ranges(acc__dev_train *t, acc_model *m) {
  if (t->m == m && t->gr) return ACC_OK;
  size_t np = acc_model_num_parameters(m);
  grange *gr = acc__calloc(np ? np : 1, sizeof *gr);
  if (!gr) return ACC_ERR_NOMEM;
  size_t n = 0, parts = 0;
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad || !p->numel) continue;
    if (n && gr[n - 1].p + gr[n - 1].n == p->grad) gr[n - 1].n += p->numel;
    else gr[n++] = (grange){p->grad, p->numel};
  }
  for (size_t k = 0; k < n; k++) parts += acc__norm_partials(gr[k].n);
  acc__free(t->gr);
  t->gr = gr;
  t->ngr = n;
  t->npartials = parts;
  t->m = m;
  return ACC_OK;
}

/* ctx_of, and the gradients of the model trained on the device as runs (t->gr). */
static acc_result ctx_grads(acc_accelerator *acc, acc__devctx **d, acc__dev_train **t,
                            acc__accel_parts *parts) {
  ACC_CHECK(ctx_of(acc, d, t, parts));
  return grad_ranges(*t, first_model(parts));
}

static acc_result ensure_scalars(acc__devctx *d, acc__dev_train *t) {
  if (!t->d_flag) ACC_CHECK(acc__device_alloc(d->dev, sizeof(int32_t), (void **)&t->d_flag));
  if (!t->d_norm) ACC_CHECK(acc__device_alloc(d->dev, sizeof(float), (void **)&t->d_norm));
  if (!t->d_coef) ACC_CHECK(acc__device_alloc(d->dev, sizeof(float), (void **)&t->d_coef));
  return ACC_OK;
}

/* ---- optimizer state ---------------------------------------------------------------------- */

static int state_kinds(const acc_optimizer *opt) {
  if (acc_optimizer_get_kind(opt) == ACC_OPTIMIZER_ADAMW) return 2;
  double mom = 0;
  acc_optimizer_scalar_get(opt, 3, NULL, &mom);
  return mom != 0.0 ? 1 : 0;
}

/* Allocates (zeroed) the state buffers the optimizer needs now and copies in what its host
 * buffers hold (state set before, or loaded from a checkpoint). */
static acc_result state_alloc(acc__devctx *d, dev_opt *o) {
  for (int b = 0; b < state_kinds(o->opt); b++) {
    if (o->d_state[b] || !o->total) continue;
    ACC_CHECK(acc__device_alloc(d->dev, o->total * sizeof(float), (void **)&o->d_state[b]));
    ACC_CHECK(acc__device_memset(d->dev, o->d_state[b], 0, o->total * sizeof(float), d->stream));
  }
  return ACC_OK;
}

static acc_result state_copy(acc__devctx *d, dev_opt *o, int to_host) {
  for (int b = 0; b < state_kinds(o->opt); b++) {
    if (!o->d_state[b]) continue;
    for (size_t i = 0; i < o->nparams; i++) {
      if (o->off[i] == SIZE_MAX || !acc__optimizer_state_present(o->opt, i, b)) continue;
      size_t n = acc_model_parameter(acc_optimizer_model(o->opt), i)->numel;
      float *h = acc__optimizer_state_host(o->opt, i, b);
      if (!h) return ACC_ERR_NOMEM;
      if (!n) continue;
      float *dv = o->d_state[b] + o->off[i];
      ACC_CHECK(to_host ? acc__device_copy(d->dev, h, dv, n * sizeof(float), ACC__COPY_D2H,
                                           d->stream)
                        : acc__device_copy(d->dev, dv, h, n * sizeof(float), ACC__COPY_H2D,
                                           d->stream));
    }
  }
  return ACC_OK;
}

static acc_result find_opt(acc_accelerator *acc, acc_optimizer *opt, dev_opt **out) {
  acc__devctx *d;
  acc__dev_train *t;
  acc__accel_parts parts;
  ACC_CHECK(ctx_of(acc, &d, &t, &parts));
  for (int k = 0; k < t->nopts; k++)
    if (t->opts[k].opt == opt) {
      *out = &t->opts[k];
      return state_alloc(d, *out); /* SGD momentum may have been set since */
    }
  acc_model *m = acc_optimizer_model(opt);
  if (!m || m != first_model(&parts))
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "optimizer_step: training on %s, the optimizer must be over the prepared "
                      "model (its parameters are device memory)",
                      acc__device_name(d->dev));
  if (t->nopts == MAX_OPTS)
    return acc__error(ACC_ERR_INVALID_USAGE, "optimizer_step: at most %d optimizers on a device",
                      MAX_OPTS);
  dev_opt *o = &t->opts[t->nopts];
  memset(o, 0, sizeof *o);
  o->opt = opt;
  o->nparams = acc_model_num_parameters(m);
  o->off = acc__malloc((o->nparams ? o->nparams : 1) * sizeof *o->off);
  if (!o->off) return ACC_ERR_NOMEM;
  for (size_t i = 0; i < o->nparams; i++) {
    o->off[i] = acc__optimizer_param_group(opt, i) >= 0 ? o->total : SIZE_MAX;
    if (o->off[i] != SIZE_MAX) o->total += acc_model_parameter(m, i)->numel;
  }
  t->nopts++;
  acc_result rc = state_alloc(d, o);
  if (rc == ACC_OK) rc = state_copy(d, o, 0);
  if (rc == ACC_OK) rc = acc__dstream_sync(d->dev, d->stream); /* the host buffers were read */
  if (rc != ACC_OK) {
    acc__device_free(d->dev, o->d_state[0]);
    acc__device_free(d->dev, o->d_state[1]);
    acc__free(o->off);
    t->nopts--;
    return rc;
  }
  *out = o;
  return ACC_OK;
}

acc_result acc__dev_prepare_optimizer(acc_accelerator *acc, acc_optimizer *opt) {
  if (acc->zero)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "prepare_optimizer: the library's optimizer under ZeRO (zero_stage %d) is not supported "
                      "when training on a device (%s) yet; step your own optimizer on the range of "
                      "acc_accelerator_zero_shard and call acc_accelerator_zero_gather after it, or use "
                      "zero_stage 0", acc->zero, acc__device_name(acc->dev->dev));
  acc__accel_parts parts;
  acc__accel_fill_parts(acc, &parts);
  if (!first_model(&parts) || acc_optimizer_model(opt) != first_model(&parts)) return ACC_OK; /* first step */
  dev_opt *o;
  return find_opt(acc, opt, &o);
}

/* ---- the step ----------------------------------------------------------------------------- */

typedef struct run {
  float *w, *g;
  size_t off, n;
  int group, first, open;
} run;

static acc_result run_flush(acc__devctx *d, const dev_opt *o, const run *r, const double *hp,
                            int64_t step, const int32_t *skip) {
  if (!r->open || !r->n) return ACC_OK;
  const acc_optimizer *opt = o->opt;
  double lr = acc_optimizer_group_lr(opt, (size_t)r->group);
  double wd = acc_optimizer_group_weight_decay(opt, (size_t)r->group);
  if (acc_optimizer_get_kind(opt) == ACC_OPTIMIZER_SGD) {
    acc__sgd_args a;
    memset(&a, 0, sizeof a);
    acc__sgd_args_set(&a, lr, hp[0], hp[1], hp[2] != 0.0, wd, r->first);
    a.w = r->w;
    a.g = r->g;
    a.buf = o->d_state[0] ? o->d_state[0] + r->off : NULL;
    a.n = r->n;
    a.skip_if = skip;
    return acc__device_sgd(d->dev, &a, d->stream);
  }
  acc__adamw_args a;
  memset(&a, 0, sizeof a);
  acc__adamw_args_set(&a, lr, hp[0], hp[1], hp[2], wd, step);
  a.w = r->w;
  a.g = r->g;
  a.m = o->d_state[0] + r->off;
  a.v = o->d_state[1] + r->off;
  a.n = r->n;
  a.skip_if = skip;
  return acc__device_adamw(d->dev, &a, d->stream);
}

acc_result acc__dev_optimizer_step(acc_accelerator *acc, acc_optimizer *opt, int fp16) {
  acc__devctx *d = acc->dev;
  acc__dev_train *t;
  ACC_CHECK(acc__dev_train_get(d, &t));
  dev_opt *o;
  ACC_CHECK(find_opt(acc, opt, &o));
  acc_model *m = acc_optimizer_model(opt);
  if (acc_model_num_parameters(m) != o->nparams)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_optimizer_step: the model has %zu parameters but the optimizer was "
                      "created over %zu; register every parameter before creating the optimizer",
                      acc_model_num_parameters(m), o->nparams);
  double hp[3]; /* SGD: momentum, dampening, nesterov; AdamW: beta1, beta2, eps */
  for (size_t k = 0; k < 3; k++) ACC_CHECK(acc_optimizer_scalar_get(opt, 3 + k, NULL, &hp[k]));
  const int64_t step = acc_optimizer_step_count(opt) + 1;
  const int sgd = acc_optimizer_get_kind(opt) == ACC_OPTIMIZER_SGD;
  /* fp16: the agreed overflow flag is on the device (acc__dev_unscale); the kernels skip on it */
  const int32_t *skip = fp16 && t->d_flag ? t->d_flag : NULL;
  run r;
  memset(&r, 0, sizeof r);
  for (size_t i = 0; i < o->nparams; i++) {
    int g = acc__optimizer_param_group(opt, i);
    const acc_param *p = acc_model_parameter(m, i);
    if (g < 0 || !p->numel) continue;
    int first = sgd && !acc__optimizer_state_present(opt, i, 0);
    if (r.open && r.group == g && r.first == first && r.w + r.n == p->data &&
        r.g + r.n == p->grad && r.off + r.n == o->off[i]) {
      r.n += p->numel;
      continue;
    }
    ACC_CHECK(run_flush(d, o, &r, hp, step, skip));
    r = (run){p->data, p->grad, o->off[i], p->numel, g, first, 1};
  }
  ACC_CHECK(run_flush(d, o, &r, hp, step, skip));
  return acc__optimizer_device_stepped(opt);
}

acc_result acc__dev_zero_grad(acc_accelerator *acc, acc_optimizer *opt) {
  acc__devctx *d = acc->dev;
  acc_model *m = acc_optimizer_model(opt);
  if (!m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "optimizer_zero_grad: invalid optimizer");
  float *at = NULL;
  size_t n = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (acc__optimizer_param_group(opt, i) < 0 || !p->numel) continue;
    if (at && at + n == p->grad) {
      n += p->numel;
      continue;
    }
    if (n) ACC_CHECK(acc__device_memset(d->dev, at, 0, n * sizeof(float), d->stream));
    at = p->grad;
    n = p->numel;
  }
  if (n) ACC_CHECK(acc__device_memset(d->dev, at, 0, n * sizeof(float), d->stream));
  return ACC_OK;
}

/* ---- fp16 and clipping -------------------------------------------------------------------- */

acc_result acc__dev_round_grads_f16(acc_accelerator *acc) {
  acc__devctx *d;
  acc__dev_train *t;
  acc__accel_parts parts;
  ACC_CHECK(ctx_grads(acc, &d, &t, &parts));
  for (size_t k = 0; k < t->ngr; k++)
    ACC_CHECK(acc__device_round_f16(d->dev, t->gr[k].p, t->gr[k].n, d->stream));
  return ACC_OK;
}

acc_result acc__dev_unscale(acc_accelerator *acc) {
  acc__devctx *d;
  acc__dev_train *t;
  acc__accel_parts parts;
  ACC_CHECK(ctx_grads(acc, &d, &t, &parts));
  ACC_CHECK(ensure_scalars(d, t));
  /* as acc_grad_scaler_unscale: inv_scale = float(1 / double(scale)) */
  float inv = (float)(1.0 / (double)acc_grad_scaler_scale(parts.scaler));
  ACC_CHECK(acc__device_memset(d->dev, t->d_flag, 0, sizeof(int32_t), d->stream));
  for (size_t k = 0; k < t->ngr; k++)
    ACC_CHECK(acc__device_unscale(d->dev, t->gr[k].p, t->gr[k].n, inv, t->d_flag, d->stream));
  /* the one value the host needs: 4 bytes, then the overflow is agreed across processes */
  ACC_CHECK(acc__device_copy(d->dev, &t->h_flag, t->d_flag, sizeof(int32_t), ACC__COPY_D2H,
                             d->stream));
  ACC_CHECK(acc__dstream_sync(d->dev, d->stream));
  acc__grad_scaler_mark_unscaled(parts.scaler, t->h_flag != 0);
  return ACC_OK;
}

acc_result acc__dev_agree_overflow(acc_accelerator *acc, int32_t agreed) {
  acc__devctx *d = acc->dev;
  acc__dev_train *t;
  ACC_CHECK(acc__dev_train_get(d, &t));
  ACC_CHECK(ensure_scalars(d, t));
  if (agreed == t->h_flag) return ACC_OK;
  t->h_flag = agreed; /* another process overflowed: the kernels' skip_if must say so here too */
  ACC_CHECK(acc__device_copy(d->dev, t->d_flag, &t->h_flag, sizeof(int32_t), ACC__COPY_H2D,
                             d->stream));
  return acc__dstream_sync(d->dev, d->stream);
}

acc_result acc__dev_clip_grad_norm(acc_accelerator *acc, float max_norm, double norm_type,
                                   float *total_norm) {
  int inf_norm = isinf(norm_type) && norm_type > 0;
  if (!inf_norm && norm_type != 2.0)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "acc_clip_grad_norm: norm_type %g is not supported (use 2 or INFINITY)",
                      norm_type);
  if (!(max_norm >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_clip_grad_norm: max_norm %g must be >= 0",
                      (double)max_norm);
  acc__devctx *d;
  acc__dev_train *t;
  acc__accel_parts parts;
  ACC_CHECK(ctx_of(acc, &d, &t, &parts));
  if (inf_norm) { /* no kernel for the max norm: through a host copy of the gradients */
    acc_model *h = NULL;
    ACC_CHECK(acc__dev_host_model_of(d, first_model(&parts), 1, &h));
    acc_result rc = acc_clip_grad_norm(h, max_norm, norm_type, total_norm);
    if (rc == ACC_OK) rc = acc__dev_host_model_push(d, h, first_model(&parts), 1);
    acc__dev_host_model_free(h);
    return rc;
  }
  ACC_CHECK(grad_ranges(t, first_model(&parts)));
  ACC_CHECK(ensure_scalars(d, t));
  if (!t->d_partials && t->npartials)
    ACC_CHECK(acc__device_alloc(d->dev, t->npartials * sizeof(double), (void **)&t->d_partials));
  size_t at = 0;
  for (size_t k = 0; k < t->ngr; k++) {
    ACC_CHECK(acc__device_norm_partials(d->dev, t->gr[k].p, t->gr[k].n, t->d_partials + at,
                                        d->stream));
    at += acc__norm_partials(t->gr[k].n);
  }
  ACC_CHECK(acc__device_norm_finish(d->dev, t->d_partials, t->npartials, max_norm, t->d_norm,
                                    t->d_coef, d->stream));
  for (size_t k = 0; k < t->ngr; k++)
    ACC_CHECK(acc__device_scale(d->dev, t->gr[k].p, t->gr[k].n, t->d_coef, d->stream));
  if (!total_norm) return ACC_OK;
  ACC_CHECK(acc__device_copy(d->dev, total_norm, t->d_norm, sizeof(float), ACC__COPY_D2H,
                             d->stream));
  return acc__dstream_sync(d->dev, d->stream);
}

acc_result acc__dev_clip_grad_value(acc_accelerator *acc, float clip_value) {
  if (!(clip_value >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_clip_grad_value: clip_value %g must be >= 0",
                      (double)clip_value);
  acc__devctx *d;
  acc__dev_train *t;
  acc__accel_parts parts;
  ACC_CHECK(ctx_grads(acc, &d, &t, &parts));
  for (size_t k = 0; k < t->ngr; k++)
    ACC_CHECK(acc__device_clamp(d->dev, t->gr[k].p, t->gr[k].n, clip_value, d->stream));
  return ACC_OK;
}

/* ---- the low-precision copy --------------------------------------------------------------- */

acc_result acc__dev_low_precision_alloc(acc_accelerator *acc, acc_model *m) {
  acc__devctx *d = acc->dev;
  acc__dev_train *t;
  ACC_CHECK(acc__dev_train_get(d, &t));
  size_t n = acc_model_numel(m);
  acc_dtype dt = acc_autocast_dtype(acc->mp);
  ACC_CHECK(acc__device_alloc(d->dev, (n ? n : 1) * acc_dtype_size(dt), &t->d_low));
  t->low_n = n;
  return acc__dev_refresh_low_precision(acc);
}

acc_result acc__dev_refresh_low_precision(acc_accelerator *acc) {
  acc__devctx *d;
  acc__dev_train *t;
  acc__accel_parts parts;
  ACC_CHECK(ctx_of(acc, &d, &t, &parts));
  if (!t->d_low || !first_model(&parts)) return ACC_OK;
  acc_dtype dt = acc_autocast_dtype(acc->mp);
  size_t es = acc_dtype_size(dt), np = acc_model_num_parameters(first_model(&parts)), out = 0;
  const float *src = NULL;
  size_t n = 0;
  for (size_t i = 0; i <= np; i++) {
    const acc_param *p = i < np ? acc_model_parameter(first_model(&parts), i) : NULL;
    if (p && src && src + n == p->data) {
      n += p->numel;
      continue;
    }
    if (n) { /* the run [src, src + n) goes to elements [out, out + n) of the copy */
      char *dst = (char *)t->d_low + out * es;
      if (dt == ACC_F32)
        ACC_CHECK(acc__device_copy(d->dev, dst, src, n * es, ACC__COPY_D2D, d->stream));
      else
        ACC_CHECK(acc__device_cast(d->dev, (uint16_t *)(void *)dst, src, n, dt, d->stream));
      out += n;
    }
    if (p) {
      src = p->data;
      n = p->numel;
    }
  }
  return ACC_OK;
}

const uint16_t *acc__dev_low_precision(const acc_accelerator *acc) {
  acc__devctx *d = acc->dev;
  return d && d->train ? (const uint16_t *)d->train->d_low : NULL;
}

/* save_state / load_state (train_ckpt.c): every optimizer's device state to or from its host
 * buffers. */
static acc_result optimizer_state_move(acc_accelerator *acc, int to_host) {
  acc__devctx *d = acc->dev;
  acc__dev_train *t = d->train;
  for (int k = 0; t && k < t->nopts; k++) {
    if (!acc__handle_ok(t->opts[k].opt, ACC__HANDLE_OPTIMIZER)) continue; /* destroyed */
    if (!to_host) ACC_CHECK(state_alloc(d, &t->opts[k]));
    ACC_CHECK(state_copy(d, &t->opts[k], to_host));
  }
  return acc__dstream_sync(d->dev, d->stream);
}

/* Checkpoints (accel_state.c) read and write the optimizer state on the host: moved there around
 * save_state / load_state, and back. */
static acc_result state_move(acc_accelerator *acc, int to_host) {
  acc__devctx *d = acc->dev;
  if (!acc__devctx_offhost(d) || !d->train) return ACC_OK;
  return optimizer_state_move(acc, to_host);
}

acc_result acc__dev_state_to_host(acc_accelerator *acc) { return state_move(acc, 1); }
acc_result acc__dev_state_from_host(acc_accelerator *acc) { return state_move(acc, 0); }
