/* One prepared model of an accelerator: broadcast at prepare, gradient buckets, low-precision
 * copy, and the ZeRO layout with its gradient reduction (stage 1: one reduce-scatter of the flat
 * layout; stage 2: each bucket reduced to the processes that own it, no full gradient copy) and
 * parameter all-gather. */
#include <math.h>
#include <string.h>

#include "train/accel_models.h"
#include "train/powersgd.h"
#include "train/model_internal.h"
#include "backend/collcheck.h"
#include "state/state.h"

/* Process 0's parameters to every process: consecutive parameters are packed into one broadcast
 * of up to bucket_cap bytes; a parameter larger than that goes alone, in place. */
static acc_result broadcast_parameters(acc_state *st, acc_model *model, size_t bucket_cap) {
  if (acc_state_num_processes(st) == 1) return ACC_OK;
  size_t np = acc_model_num_parameters(model), cap = bucket_cap / sizeof(float);
  if (cap == 0) cap = 1;
  float *pack = NULL;
  acc_result rc = ACC_OK;
  for (size_t i = 0; i < np && rc == ACC_OK;) {
    const acc_param *p = acc_model_parameter(model, i);
    if (p->numel >= cap) {
      acc__comm_origin(ACC__ORIGIN_PREPARE, (int64_t)i);
      rc = acc_broadcast(st, p->data, p->numel, ACC_F32, 0);
      if (rc != ACC_OK) rc = acc__error_context(rc, "prepare_model: broadcasting parameter '%s'", p->name);
      i++;
      continue;
    }
    size_t j = i, n = 0;
    while (j < np && n + acc_model_parameter(model, j)->numel <= cap) n += acc_model_parameter(model, j++)->numel;
    if (!pack && !(pack = acc__malloc(cap * sizeof(float)))) return ACC_ERR_NOMEM;
    for (size_t k = i, off = 0; k < j; off += acc_model_parameter(model, k++)->numel)
      memcpy(pack + off, acc_model_parameter(model, k)->data, acc_model_parameter(model, k)->numel * sizeof(float));
    acc__comm_origin(ACC__ORIGIN_PREPARE, (int64_t)i);
    rc = acc_broadcast(st, pack, n, ACC_F32, 0);
    if (rc != ACC_OK) {
      rc = acc__error_context(rc, "prepare_model: broadcasting parameters '%s' to '%s'", p->name,
                              acc_model_parameter(model, j - 1)->name);
      break;
    }
    for (size_t k = i, off = 0; k < j; off += acc_model_parameter(model, k++)->numel)
      memcpy(acc_model_parameter(model, k)->data, pack + off, acc_model_parameter(model, k)->numel * sizeof(float));
    i = j;
  }
  acc__free(pack);
  return rc;
}

/* ---- ZeRO ------------------------------------------------------------------------------------ */

void acc__pmodel_zero_range(const acc__pmodel *pm, acc_state *st, size_t *lo, size_t *hi) {
  *lo = (size_t)acc_state_process_index(st) * pm->zshard;
  *hi = *lo + pm->zshard;
}

/* Copies the gradients of the layout range [a, b) into buf (buf[0] is element a), walking the
 * parameters in order. */
static void flat_copy_grads(const acc__pmodel *pm, size_t a, size_t b, float *buf) {
  size_t np = acc_model_num_parameters(pm->model);
  for (size_t i = 0; i < np; i++) {
    size_t off = pm->zoff[i];
    if (off == SIZE_MAX) continue;
    const acc_param *p = acc_model_parameter(pm->model, i);
    size_t end = off + p->numel;
    if (off >= b) break;
    if (end <= a) continue;
    size_t s = off > a ? off : a, e = end < b ? end : b;
    memcpy(buf + (s - a), p->grad + (s - off), (e - s) * sizeof(float));
  }
}

/* Stage 2, one bucket (consecutive parameters, so one range of the layout): packed, reduced to
 * each process whose shard it overlaps (sum, then * 1/N there), written back into the owned part
 * of the gradients; the rest of the bucket's gradients is zeroed. */
static acc_result zero2_reduce_bucket(void *ctx, const size_t *params, size_t count, size_t numel) {
  acc__pmodel *pm = ctx;
  acc_state *st = pm->st;
  size_t n = (size_t)acc_state_num_processes(st), rank = (size_t)acc_state_process_index(st);
  size_t a = pm->zoff[params[count - 1]], b = a + numel; /* bucket order is descending */
  float *f = pm->zbuf;
  flat_copy_grads(pm, a, b, f);
  for (size_t r = a / pm->zshard; r < n && r * pm->zshard < b; r++) {
    size_t s = r * pm->zshard > a ? r * pm->zshard : a, e = (r + 1) * pm->zshard < b ? (r + 1) * pm->zshard : b;
    acc__comm_origin(ACC__ORIGIN_ZERO, 4);
    ACC_CHECK(acc_reduce(st, f + (s - a), f + (s - a), e - s, ACC_F32, ACC_SUM, (int)r));
  }
  size_t lo = rank * pm->zshard, hi = lo + pm->zshard;
  size_t s = lo > a ? lo : a, e = hi < b ? hi : b;
  const float inv = 1.0f / (float)n;
  for (size_t k = 0; k < count; k++) {
    const acc_param *p = acc_model_parameter(pm->model, params[k]);
    size_t off = pm->zoff[params[k]], end = off + p->numel;
    size_t ps = off > s ? off : s, pe = end < e ? end : e;
    if (pe <= ps) {
      memset(p->grad, 0, p->numel * sizeof(float));
      continue;
    }
    memset(p->grad, 0, (ps - off) * sizeof(float));
    for (size_t x = ps; x < pe; x++) p->grad[x - off] = f[x - a] * inv;
    memset(p->grad + (pe - off), 0, (end - pe) * sizeof(float));
  }
  return ACC_OK;
}

static acc_result zero_layout(acc__pmodel *pm, acc_state *st, size_t bucket_cap) {
  acc_model *m = pm->model;
  size_t np = acc_model_num_parameters(m), n = (size_t)acc_state_num_processes(st), t = 0, big = 0;
  pm->zoff = acc__malloc((np ? np : 1) * sizeof *pm->zoff);
  if (!pm->zoff) return ACC_ERR_NOMEM;
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    int g = acc_model_requires_grad(m, i);
    pm->zoff[i] = g ? t : SIZE_MAX; /* end to end, as acc__model_zero_span counts them */
    if (g) t += p->numel;
    if (g && p->numel > big) big = p->numel;
  }
  pm->zshard = acc__model_zero_span(m, n, &pm->ztotal);
  if (n == 1) return ACC_OK; /* one process owns everything: no exchange buffer */
  if (pm->zero == 1) {
    pm->zflat = acc__calloc(pm->zshard * n, sizeof(float));
    return pm->zflat ? ACC_OK : ACC_ERR_NOMEM;
  }
  size_t cap = bucket_cap / sizeof(float);
  if (cap == 0) cap = 1;
  pm->zchunk = cap / n ? cap / n : 1;
  if (pm->zchunk > pm->zshard) pm->zchunk = pm->zshard;
  size_t need = pm->zchunk * n, bucket = big > cap ? big : cap;
  if (bucket > t) bucket = t;
  if (bucket > need) need = bucket;
  pm->zbuf_n = need ? need : 1;
  pm->zbuf = acc__calloc(pm->zbuf_n, sizeof(float));
  return pm->zbuf ? ACC_OK : ACC_ERR_NOMEM;
}

/* Stage 1: every gradient packed into the flat buffer (zero padding), reduce-scattered (sum,
 * then * 1/N as the all-reduce path does), and only this process's shard kept: the gradients
 * outside it are zeroed, so clipping, the fp16 inf check and the optimizer see exactly the
 * shard. */
static acc_result zero1_reduce_grads(acc__pmodel *pm, acc_state *st) {
  size_t np = acc_model_num_parameters(pm->model), n = (size_t)acc_state_num_processes(st);
  float *f = pm->zflat;
  size_t lo, hi;
  acc__pmodel_zero_range(pm, st, &lo, &hi);
  if (n == 1) return ACC_OK; /* one process owns everything: the gradients are the shard */
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(pm->model, i);
    if (pm->zoff[i] != SIZE_MAX) memcpy(f + pm->zoff[i], p->grad, p->numel * sizeof(float));
  }
  memset(f + pm->ztotal, 0, (pm->zshard * n - pm->ztotal) * sizeof(float));
  acc__comm_origin(ACC__ORIGIN_ZERO, 0);
  ACC_CHECK(acc_reduce_scatter(st, f, f + lo, pm->zshard, ACC_F32, ACC_SUM));
  const float inv = 1.0f / (float)n;
  for (size_t k = lo; k < hi; k++) f[k] *= inv;
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(pm->model, i);
    size_t off = pm->zoff[i];
    if (off == SIZE_MAX) continue;
    size_t end = off + p->numel, b0 = off > lo ? off : lo, b1 = end < hi ? end : hi;
    memset(p->grad, 0, p->numel * sizeof(float));
    if (b1 > b0) memcpy(p->grad + (b0 - off), f + b0, (b1 - b0) * sizeof(float));
  }
  return ACC_OK;
}

acc_result acc__pmodel_zero_gather(acc__pmodel *pm, acc_state *st) {
  if (acc_state_num_processes(st) == 1) return ACC_OK;
  /* stage 1 in one all-gather through its full-layout buffer, stage 2 in chunks through zbuf */
  if (pm->zero == 1) return acc__zero_gather_pass(st, NULL, pm->model, 0, pm->zflat, pm->zshard, 1);
  return acc__zero_gather_pass(st, NULL, pm->model, 0, pm->zbuf, pm->zchunk, 5);
}

/* The full-layout buffer of the state gather: stage 1's own, a temporary one at stage 2. */
static float *unshard_buffer(acc__pmodel *pm, acc_state *st) {
  if (pm->zflat) return pm->zflat;
  return acc__calloc(pm->zshard * (size_t)acc_state_num_processes(st), sizeof(float));
}

acc_result acc__pmodel_zero_unshard(acc__pmodel *pm, acc_state *st, acc_optimizer *opt) {
  if (!acc__optimizer_is_restricted(opt)) return ACC_OK;
  float *flat = unshard_buffer(pm, st);
  if (!flat) return ACC_ERR_NOMEM;
  acc_result rc = acc__optimizer_unrestrict(opt, st, pm->zoff, flat, pm->zshard);
  if (flat != pm->zflat) acc__free(flat);
  return rc;
}

acc_result acc__pmodel_zero_reshard(acc__pmodel *pm, acc_state *st, acc_optimizer *opt) {
  size_t lo, hi;
  acc__pmodel_zero_range(pm, st, &lo, &hi);
  return acc__optimizer_restrict(opt, pm->zoff, lo, hi);
}

/* ---- the model's life ----------------------------------------------------------------------- */

acc_result acc__pmodel_refresh_low_precision(acc__pmodel *pm, acc_dtype lp_dtype) {
  if (!pm->low_precision) return ACC_OK;
  pm->lp_gen++;
  return acc_precision_copy_params(pm->model, lp_dtype, pm->low_precision, acc_model_numel(pm->model));
}

/* What every set of buckets of this model gets, at prepare and whenever they are rebuilt: ZeRO
 * stage 2's reducer or PowerSGD's, and the fp16/bf16 compression. */
static acc_result configure_buckets(acc__pmodel *pm) {
  if (pm->zero == 2) acc__grad_sync_set_reducer(pm->gs, zero2_reduce_bucket, pm);
  if (pm->psgd) acc__grad_sync_set_reducer(pm->gs, acc__powersgd_reduce_bucket, pm->psgd);
  if (pm->compress != ACC_F32) ACC_CHECK(acc__grad_sync_set_compression(pm->gs, pm->compress));
  return ACC_OK;
}

acc_result acc__pmodel_use_comm_hook(acc__pmodel *pm, int hook, int psgd_rank, long psgd_start) {
  if (hook == ACC_COMM_HOOK_NONE || !pm->gs) return ACC_OK;
  if (hook == ACC_COMM_HOOK_POWERSGD)
    ACC_CHECK(acc__powersgd_create(&pm->psgd, pm->st, pm->model, psgd_rank, psgd_start));
  else
    pm->compress = hook == ACC_COMM_HOOK_FP16 ? ACC_F16 : ACC_BF16;
  return configure_buckets(pm);
}

acc_result acc__pmodel_init(acc__pmodel *pm, acc_state *st, acc_model *m, size_t bucket_cap, int overlap,
                            int zero, acc_dtype lp_dtype) {
  memset(pm, 0, sizeof *pm);
  pm->model = m;
  pm->st = st;
  pm->zero = zero;
  pm->bucket_cap = bucket_cap;
  pm->overlap = overlap;
  pm->grad_gen = acc__model_grad_gen(m);
  acc_result rc = broadcast_parameters(st, m, bucket_cap);
  if (rc == ACC_OK && zero) rc = zero_layout(pm, st, bucket_cap);
  if (rc == ACC_OK && zero != 1) rc = acc__grad_sync_create(&pm->gs, st, m, bucket_cap, overlap);
  if (rc == ACC_OK && pm->gs) rc = configure_buckets(pm);
  if (rc == ACC_OK && (lp_dtype == ACC_F16 || lp_dtype == ACC_BF16)) {
    pm->low_precision = acc__calloc(acc_model_numel(m) ? acc_model_numel(m) : 1, sizeof(uint16_t));
    rc = pm->low_precision ? acc__pmodel_refresh_low_precision(pm, lp_dtype) : ACC_ERR_NOMEM;
  }
  if (rc != ACC_OK) acc__pmodel_free(pm);
  return rc;
}

void acc__pmodel_free(acc__pmodel *pm) {
  if (!pm) return;
  acc__grad_sync_destroy(pm->gs);
  acc__powersgd_destroy(pm->psgd);
  acc__free(pm->low_precision);
  acc__free(pm->zoff);
  acc__free(pm->zflat);
  acc__free(pm->zbuf);
  memset(pm, 0, sizeof *pm);
}

static void round_grads_f16(acc_model *m) {
  size_t np = acc_model_num_parameters(m);
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad) continue;
    for (size_t k = 0; k < p->numel; k++) p->grad[k] = acc__f16_to_f32(acc__f32_to_f16(p->grad[k]));
  }
}

acc_result acc__pmodel_check_grads(acc__pmodel *pm, const char *fn) {
  uint64_t gen = acc__model_grad_gen(pm->model);
  if (pm->grads_checked && gen == pm->grad_gen) return ACC_OK;
  const char *missing = acc__model_missing_grad(pm->model);
  if (missing)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: parameter '%s' takes a gradient but none is attached; attach the gradient buffer "
                      "with acc_model_set_flat_grads or acc_model_set_grad before the first backward",
                      fn, missing);
  if (gen != pm->grad_gen && pm->gs) {
    if (acc__grad_sync_in_flight(pm->gs))
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "%s: gradients were attached or replaced while this step's gradients are in flight "
                        "(grad_ready); attach them before the step's first grad_ready", fn);
    acc__grad_sync *gs = NULL;
    ACC_CHECK(acc__grad_sync_create(&gs, pm->st, pm->model, pm->bucket_cap, pm->overlap));
    acc__grad_sync_destroy(pm->gs);
    pm->gs = gs;
    /* the same reducer and comm hook for the new buckets (the hook was dropped here before:
     * gradients attached after prepare, as llm.c-style programs do, went uncompressed) */
    ACC_CHECK(configure_buckets(pm));
  }
  pm->grad_gen = gen;
  pm->grads_checked = 1;
  return ACC_OK;
}

acc_result acc__pmodel_sync(acc__pmodel *pm, acc_state *st, int fp16) {
  ACC_CHECK(acc__pmodel_check_grads(pm, "backward"));
  if (fp16) round_grads_f16(pm->model);
  if (pm->zero == 1) return zero1_reduce_grads(pm, st);
  ACC_CHECK(acc__grad_sync_finish(pm->gs));
  acc__powersgd_step_done(pm->psgd);
  return ACC_OK;
}

acc_result acc__pmodel_grad_ready(acc__pmodel *pm, size_t index) {
  ACC_CHECK(acc__pmodel_check_grads(pm, "grad_ready"));
  if (pm->zero == 1) { /* one reduce-scatter in backward(); the index is still checked */
    if (index >= acc_model_num_parameters(pm->model))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "grad_ready: parameter index %zu is out of range (model has %zu)",
                        index, acc_model_num_parameters(pm->model));
    return ACC_OK;
  }
  size_t before = acc__grad_sync_early(pm->gs);
  acc_result rc = acc__grad_sync_mark_ready(pm->gs, index);
  pm->early_buckets += acc__grad_sync_early(pm->gs) - before;
  return rc;
}

/* ---- clipping ------------------------------------------------------------------------------- */

acc_result acc__clip_norm_models(acc_state *st, acc_model *const *ms, int n, float max_norm, double norm_type,
                                 float *out) {
  int inf_norm = isinf(norm_type) && norm_type > 0;
  if (!inf_norm && norm_type != 2.0)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "clip_grad_norm: norm_type %g is not supported (use 2 or INFINITY)",
                      norm_type);
  if (!(max_norm >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "clip_grad_norm: max_norm %g must be >= 0", (double)max_norm);
  double a = 0.0;
  for (int j = 0; j < n; j++) {
    size_t np = acc_model_num_parameters(ms[j]);
    for (size_t i = 0; i < np; i++) {
      const acc_param *p = acc_model_parameter(ms[j], i);
      if (!p->grad) continue;
      for (size_t k = 0; k < p->numel; k++) {
        double g = (double)p->grad[k];
        if (inf_norm) {
          double v = fabs(g);
          if (v > a || isnan(v)) a = v;
        } else {
          a += g * g;
        }
      }
    }
  }
  if (st) {
    acc__comm_origin(ACC__ORIGIN_ZERO, 2);
    ACC_CHECK(acc_all_reduce(st, &a, &a, 1, ACC_F64, inf_norm ? ACC_MAX : ACC_SUM));
  }
  float total = inf_norm ? (float)a : (float)sqrt(a);
  if (out) *out = total;
  float coef = max_norm / (total + 1e-6f);
  if (coef < 1.0f)
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < acc_model_num_parameters(ms[j]); i++) {
        const acc_param *p = acc_model_parameter(ms[j], i);
        if (!p->grad) continue;
        for (size_t k = 0; k < p->numel; k++) p->grad[k] *= coef;
      }
  return ACC_OK;
}
