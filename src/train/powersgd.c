/* PowerSGD gradient compression (powersgd.h): torch's powerSGD_hook with its defaults
 * (min_compression_rate 2, use_error_feedback, warm_start, orthogonalization_epsilon 0), one
 * bucket at a time, two all-reduces per bucket (the uncompressed tensors with the P factors,
 * then the Q factors; torch makes three). The per-parameter state (Q, the error) is kept by
 * parameter index, so it survives the buckets being rebuilt. The reducer works on host pointers to
 * the bucket's gradients: the model's own (host gradients) or a host staging of device gradients
 * (acc__powersgd_reduce_host, train_sync.c). The state travels in checkpoints through the
 * accessors at the end (src/ckpt/psgd_state.c). */
#include "train/powersgd.h"

#include <math.h>
#include <string.h>

#include "backend/collcheck.h" /* acc__comm_origin */
#include "comm/comm.h"

#define PSGD_MIN_COMPRESSION_RATE 2.0 /* torch's default: compress when it saves at least 2x */
#define PSGD_SEED 0x5053474453454544ull /* the same Q on every process */

typedef struct psgd_param {
  int kind;       /* 0 not looked at yet, 1 uncompressed, 2 compressed */
  size_t n, m, r; /* rows (dimension 0), columns (the rest), rank */
  float *q;       /* m x r, row-major (warm start) */
  float *err;     /* n x m: this process's error of the last compressed step */
} psgd_param;

struct acc__powersgd {
  acc_state *st;
  acc_model *model;
  int rank;
  long start_iter, iter;
  float inv_world;
  psgd_param *pp;
  size_t np;
  float *buf; /* scratch: the uncompressed tensors, then the P factors, then the Q factors */
  size_t buf_cap;
  float **gptr; /* np entries: the gradients of the bucket being reduced (host memory) */
};

acc_result acc__powersgd_create(acc__powersgd **out, acc_state *st, acc_model *m, int rank,
                                long start_iter) {
  *out = NULL;
  if (rank < 1 || start_iter < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "PowerSGD: rank %d and start iteration %ld (expected >= 1 and >= 0)",
                      rank, start_iter);
  acc__powersgd *p = acc__calloc(1, sizeof *p);
  size_t np = acc_model_num_parameters(m);
  if (p) p->pp = acc__calloc(np ? np : 1, sizeof *p->pp);
  if (p) p->gptr = acc__calloc(np ? np : 1, sizeof *p->gptr);
  if (!p || !p->pp || !p->gptr) {
    if (p) acc__free(p->pp), acc__free(p->gptr);
    acc__free(p);
    return acc__error(ACC_ERR_NOMEM, "PowerSGD: cannot allocate the state of %zu parameters", np);
  }
  p->st = st;
  p->model = m;
  p->rank = rank;
  p->start_iter = start_iter;
  p->np = np;
  p->inv_world = 1.0f / (float)acc_state_num_processes(st);
  *out = p;
  return ACC_OK;
}

void acc__powersgd_destroy(acc__powersgd *p) {
  if (!p) return;
  for (size_t i = 0; i < p->np; i++) {
    acc__free(p->pp[i].q);
    acc__free(p->pp[i].err);
  }
  acc__free(p->pp);
  acc__free(p->buf);
  acc__free(p->gptr);
  acc__free(p);
}

void acc__powersgd_step_done(acc__powersgd *p) {
  if (p) p->iter++;
}
long acc__powersgd_iter(const acc__powersgd *p) { return p ? p->iter : 0; }

static float *scratch(acc__powersgd *p, size_t floats) {
  if (floats <= p->buf_cap) return p->buf;
  float *b = acc__realloc(p->buf, floats * sizeof *b);
  if (!b) return NULL;
  p->buf = b;
  p->buf_cap = floats;
  return b;
}

/* Normal deviates from the library's generator, seeded per parameter: the same on every process. */
static void randn(float *x, size_t n, uint64_t seed) {
  acc_rng rng;
  acc_rng_seed(&rng, seed);
  for (size_t i = 0; i < n; i++) x[i] = (float)acc_rng_normal(&rng);
}

/* Gram-Schmidt on the r columns of x (rows x r, row-major): each column divided by its norm (a
 * zero column stays zero), then removed from the columns after it. */
static void orthogonalize(float *x, size_t rows, size_t r) {
  for (size_t c = 0; c < r; c++) {
    double ss = 0;
    for (size_t i = 0; i < rows; i++) ss += (double)x[i * r + c] * x[i * r + c];
    float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
    for (size_t i = 0; i < rows; i++) x[i * r + c] *= inv;
    for (size_t c2 = c + 1; c2 < r; c2++) {
      double dot = 0;
      for (size_t i = 0; i < rows; i++) dot += (double)x[i * r + c] * x[i * r + c2];
      for (size_t i = 0; i < rows; i++) x[i * r + c2] -= (float)dot * x[i * r + c];
    }
  }
}

/* sum over j < m of a[j] * b[j * stride], in 8 partial sums (a fixed order: the same bits on
 * every run) so that the compiler can vectorize the unit-stride case. */
static float dot_strided(const float *restrict a, const float *restrict b, size_t m, size_t stride) {
  float part[8] = {0};
  size_t j = 0;
  if (stride == 1)
    for (; j + 8 <= m; j += 8)
      for (size_t l = 0; l < 8; l++) part[l] += a[j + l] * b[j + l];
  float s = 0;
  for (; j < m; j++) s += a[j] * b[j * stride];
  for (size_t l = 0; l < 8; l++) s += part[l];
  return s;
}

/* Decides once how parameter i travels (torch's _should_compress), allocating its state. */
static acc_result classify(acc__powersgd *p, size_t i) {
  psgd_param *q = &p->pp[i];
  if (q->kind) return ACC_OK;
  const acc_param *a = acc_model_parameter(p->model, i);
  q->kind = 1;
  if (a->ndim < 2 || a->numel == 0) return ACC_OK;
  q->n = (size_t)a->shape[0];
  q->m = a->numel / q->n;
  q->r = (size_t)p->rank;
  if (q->r > q->n) q->r = q->n;
  if (q->r > q->m) q->r = q->m;
  if ((double)(q->n + q->m) * (double)q->r * PSGD_MIN_COMPRESSION_RATE >= (double)q->n * (double)q->m)
    return ACC_OK;
  q->q = acc__malloc(q->m * q->r * sizeof(float));
  q->err = acc__calloc(a->numel, sizeof(float));
  if (!q->q || !q->err) {
    acc__free(q->q), acc__free(q->err);
    q->q = q->err = NULL;
    q->kind = 0;
    return acc__error(ACC_ERR_NOMEM, "PowerSGD: cannot allocate the state of parameter '%s' (%zu floats)",
                      a->name, a->numel + q->m * q->r);
  }
  randn(q->q, q->m * q->r, PSGD_SEED ^ (uint64_t)i * 0x100000001b3ull);
  q->kind = 2;
  return ACC_OK;
}

/* Copies the gradients of the bucket's parameters of kind `kind` (0: all) into u (dir 0), or u
 * back into them (dir 1); returns the number of floats. u NULL: counts only. */
static size_t pack(acc__powersgd *p, const size_t *params, size_t count, int kind, float *u, int dir) {
  size_t off = 0;
  for (size_t k = 0; k < count; k++) {
    const acc_param *a = acc_model_parameter(p->model, params[k]);
    if (kind && p->pp[params[k]].kind != kind) continue;
    if (u && dir == 0) memcpy(u + off, p->gptr[k], a->numel * sizeof(float));
    if (u && dir == 1) memcpy(p->gptr[k], u + off, a->numel * sizeof(float));
    off += a->numel;
  }
  return off;
}

/* The exact mean of the bucket's gradients (kind 0: all of them), in one all-reduce. */
static acc_result mean_packed(acc__powersgd *p, const size_t *params, size_t count, int kind) {
  size_t total = pack(p, params, count, kind, NULL, 0);
  if (total == 0) return ACC_OK;
  float *u = scratch(p, total);
  if (!u) return acc__error(ACC_ERR_NOMEM, "PowerSGD: cannot allocate %zu floats of scratch", total);
  pack(p, params, count, kind, u, 0);
  acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, 0);
  ACC_CHECK(acc__all_reduce_scaled(p->st, u, total, p->inv_world));
  pack(p, params, count, kind, u, 1);
  return ACC_OK;
}

/* The reducer on the bucket's gradients at p->gptr[0..count). */
static acc_result reduce(acc__powersgd *p, const size_t *params, size_t count) {
  if (p->iter < p->start_iter) return mean_packed(p, params, count, 0);
  for (size_t k = 0; k < count; k++) ACC_CHECK(classify(p, params[k]));
  size_t np_ = 0, nq = 0; /* floats of the P and Q factors of this bucket */
  for (size_t k = 0; k < count; k++) {
    const psgd_param *q = &p->pp[params[k]];
    if (q->kind == 2) np_ += q->n * q->r, nq += q->m * q->r;
  }
  if (np_ == 0) return mean_packed(p, params, count, 1);
  /* one all-reduce carries the exact tensors and the P factors (torch makes two): [U | P | Q] */
  size_t nu = pack(p, params, count, 1, NULL, 0);
  float *buf = scratch(p, nu + np_ + nq);
  if (!buf) return acc__error(ACC_ERR_NOMEM, "PowerSGD: cannot allocate %zu floats of scratch", nu + np_ + nq);
  float *U = buf, *P = buf + nu, *Q = P + np_;
  pack(p, params, count, 1, U, 0);
  /* M = gradient + error (in the gradient's memory); P = M Q with the warm-started Q */
  size_t po = 0;
  for (size_t k = 0; k < count; k++) {
    psgd_param *q = &p->pp[params[k]];
    if (q->kind != 2) continue;
    float *M = p->gptr[k];
    size_t n = q->n, m = q->m, r = q->r;
    for (size_t x = 0; x < n * m; x++) M[x] += q->err[x];
    if (p->iter > p->start_iter) orthogonalize(q->q, m, r); /* the first time: fresh random */
    for (size_t i = 0; i < n; i++)
      for (size_t c = 0; c < r; c++) P[po + i * r + c] = dot_strided(M + i * m, q->q + c, m, r);
    po += n * r;
  }
  acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, 1);
  ACC_CHECK(acc_all_reduce(p->st, buf, buf, nu + np_, ACC_F32, ACC_SUM));
  for (size_t x = 0; x < nu; x++) U[x] *= p->inv_world; /* the bits of acc__all_reduce_scaled */
  pack(p, params, count, 1, U, 1);
  /* orthogonalize P; Q = M^T P */
  po = 0;
  size_t qo = 0;
  for (size_t k = 0; k < count; k++) {
    psgd_param *q = &p->pp[params[k]];
    if (q->kind != 2) continue;
    const float *M = p->gptr[k];
    size_t n = q->n, m = q->m, r = q->r;
    orthogonalize(P + po, n, r);
    float *Qk = Q + qo;
    memset(Qk, 0, m * r * sizeof(float));
    for (size_t i = 0; i < n; i++)
      for (size_t c = 0; c < r; c++) {
        float pic = P[po + i * r + c];
        const float *row = M + i * m;
        for (size_t j = 0; j < m; j++) Qk[j * r + c] += row[j] * pic;
      }
    po += n * r, qo += m * r;
  }
  acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, 2);
  ACC_CHECK(acc__all_reduce_scaled(p->st, Q, nq, p->inv_world));
  /* the gradient becomes P Q^T, the error M - P Q^T; Q is kept for the next step */
  po = qo = 0;
  for (size_t k = 0; k < count; k++) {
    psgd_param *q = &p->pp[params[k]];
    if (q->kind != 2) continue;
    float *M = p->gptr[k];
    size_t n = q->n, m = q->m, r = q->r;
    memcpy(q->q, Q + qo, m * r * sizeof(float));
    for (size_t i = 0; i < n; i++) {
      float *restrict row = M + i * m, *restrict e = q->err + i * m;
      const float *restrict qq = q->q;
      if (r == 1) { /* the common case, in a loop the compiler vectorizes */
        float pi = P[po + i];
        for (size_t j = 0; j < m; j++) {
          float a = pi * qq[j];
          e[j] = row[j] - a;
          row[j] = a;
        }
        continue;
      }
      for (size_t j = 0; j < m; j++) {
        float a = 0;
        for (size_t c = 0; c < r; c++) a += P[po + i * r + c] * qq[j * r + c];
        e[j] = row[j] - a;
        row[j] = a;
      }
    }
    po += n * r, qo += m * r;
  }
  return ACC_OK;
}

acc_result acc__powersgd_reduce_bucket(void *ctx, const size_t *params, size_t count, size_t numel) {
  acc__powersgd *p = ctx;
  (void)numel;
  for (size_t k = 0; k < count; k++) p->gptr[k] = acc_model_parameter(p->model, params[k])->grad;
  return reduce(p, params, count);
}

acc_result acc__powersgd_reduce_host(void *ctx, const size_t *params, size_t count, float *const *grads) {
  acc__powersgd *p = ctx;
  for (size_t k = 0; k < count; k++) p->gptr[k] = grads[k];
  return reduce(p, params, count);
}

/* ---- checkpoints (src/ckpt/psgd_state.c) ---------------------------------------------------- */

int acc__powersgd_rank(const acc__powersgd *p) { return p->rank; }
long acc__powersgd_start_iter(const acc__powersgd *p) { return p->start_iter; }
uint64_t acc__powersgd_seed(void) { return PSGD_SEED; }

int acc__powersgd_param(const acc__powersgd *p, size_t i, size_t dims[3], const float **q, const float **err) {
  if (i >= p->np || p->pp[i].kind != 2) return 0;
  const psgd_param *a = &p->pp[i];
  dims[0] = a->n, dims[1] = a->m, dims[2] = a->r;
  *q = a->q;
  *err = a->err;
  return 1;
}

acc_result acc__powersgd_fresh(const acc__powersgd *p, acc__powersgd **out) {
  return acc__powersgd_create(out, p->st, p->model, p->rank, p->start_iter);
}

void acc__powersgd_set_iter(acc__powersgd *p, long iter) { p->iter = iter; }

acc_result acc__powersgd_set_param(acc__powersgd *p, size_t i, size_t dims[3], float **q, float **err) {
  *q = *err = NULL;
  if (i >= p->np) return acc__error(ACC_ERR_INVALID_ARGUMENT, "PowerSGD: parameter %zu of %zu", i, p->np);
  ACC_CHECK(classify(p, i));
  psgd_param *a = &p->pp[i];
  if (a->kind != 2) {
    dims[0] = dims[1] = dims[2] = 0;
    return ACC_ERR_MISMATCH; /* the caller names the file and the parameter */
  }
  dims[0] = a->n, dims[1] = a->m, dims[2] = a->r;
  *q = a->q;
  *err = a->err;
  return ACC_OK;
}

void acc__powersgd_swap(acc__powersgd *a, acc__powersgd *b) {
  acc__powersgd t = *a;
  *a = *b;
  *b = t;
}
