/* GPT forward and backward, from the equations in model.h. Rows are tokens: an activation is
 * [batch * T, width], row-major. Matrix products go through gemm_f32(): cblas_sgemm with USE_CBLAS,
 * else plain loops that the compiler vectorizes; in bf16 mode with oneDNN, those of the linear
 * layers through gemm_dnnl_bf16_pre (linear_fwd, linear_bwd). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime's thread CPU clock (gpt_profile) */
#endif
#include "model.h"
#include "gemm_dnnl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef USE_CBLAS
#include <cblas.h>
#endif

/* The elementwise loops (norms, softmax, GELU, the loss) are VECTORIZED (vectorized.h). The
 * reductions in them are written as `omp simd reduction` loops (-fopenmp-simd: vectorization
 * only, no OpenMP runtime), which lets the compiler keep several partial sums: without it a float
 * sum must be added in order and the loop stays scalar. */
#include "vectorized.h"

#define LN_EPS 1e-5f
#define ATT_BLOCK 64 /* attention rows per product: only the causal part is computed */

/* Indices of a block's tensors, relative to the block's first tensor. */
enum { LN1_W, LN1_B, QKV_W, QKV_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC_W, FC_B, MPROJ_W, MPROJ_B,
       PER_BLOCK };

typedef struct layer_acts {
  float *ln1_mean, *ln1_rstd, *ln1_out; /* [N], [N], [N, C] */
  float *qkv;                           /* [N, 3C]: q, k, v of every head */
  float *att;                           /* [batch, heads, T, T]: softmax probabilities */
  float *atty;                          /* [N, C]: attention output, heads side by side */
  float *res2;                          /* [N, C]: residual stream after the attention */
  float *ln2_mean, *ln2_rstd, *ln2_out; /* [N], [N], [N, C] */
  float *fch, *fcg;                     /* [N, 4C]: before and after GELU */
} layer_acts;

struct gpt {
  gpt_config cfg;
  int ntensors;
  gpt_tensor *tensors;
  size_t nparams;
  float *params, *grads;
  int borrowed_grads;     /* grads is the program's (gpt_use_grads), not freed here */
  int bf16;
  int lp;                 /* bf16 and oneDNN: the linear layers' products in bf16 through oneDNN */
  const uint16_t *half;   /* lp: the weights already in bf16 (laid out as params), or NULL */
  uint16_t *lp_a, *lp_b;  /* lp: operands converted to bf16 */
  size_t lp_acap, lp_bcap;
  const float *weights;   /* matrices read from here in bf16 mode (NULL: params) */
  float *unit_w;          /* bf16 mode, unit by unit: a unit's matrices rounded to bf16 */
  size_t unit_wcap;
  float **x;              /* x[l], l = 0..n_layer: the residual stream entering block l, [N, C] */
  layer_acts *acts;
  float *lnf_mean, *lnf_rstd, *lnf_out, *logits;
  float *dx, *dln, *d4, *dqkv, *datty, *dP; /* backward scratch */
  const int32_t *tokens, *targets;          /* of the last forward / loss (borrowed) */
  size_t stride;
  int B, T, have_probs;
  int fwd_next, bwd_next;  /* the piece of the forward / backward due next (gpt_forward_block, ...) */
  gpt_forward_fn fwd_fn;   /* gpt_set_forward: gpt_generate's forward, or NULL */
  void *fwd_payload;
  gpt_grad_hook hook;
  void *hook_payload;
  double *prof; /* gpt_profile: seconds per operation, or NULL */
};

/* ---- the per-operation profile (gpt_profile) ------------------------------------------------ */

static const char *const op_names[GPT_OP_COUNT] = {"embedding", "layernorm", "qkv", "attention", "attn.proj",
                                                   "mlp.fc", "gelu", "mlp.proj", "residual", "logits",
                                                   "softmax+loss"};
const char *gpt_op_name(int op) { return op >= 0 && op < GPT_OP_COUNT ? op_names[op] : "?"; }
void gpt_profile(gpt *m, double *sec) {
  if (m) m->prof = sec;
}
static double thread_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* Runs the code given, adding its thread CPU time to operation op (bwd: of the backward) when profiling. */
#define PROF(m, op, bwd, ...)                                                                   \
  do {                                                                                          \
    double prof_t0_ = (m)->prof ? thread_seconds() : 0.0;                                       \
    __VA_ARGS__;                                                                                \
    if ((m)->prof) (m)->prof[(bwd) ? GPT_OP_COUNT + (op) : (op)] += thread_seconds() - prof_t0_; \
  } while (0)

static _Thread_local char gpt_err[512];
const char *gpt_last_error(void) { return gpt_err; }

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(gpt_err, sizeof gpt_err, fmt, ap);
  va_end(ap);
  return -1;
}

void gpt_set_grad_hook(gpt *m, gpt_grad_hook hook, void *payload) {
  if (!m) return;
  m->hook = hook;
  m->hook_payload = payload;
}

void gpt_set_forward(gpt *m, gpt_forward_fn fn, void *payload) {
  if (!m) return;
  m->fwd_fn = fn;
  m->fwd_payload = payload;
}

void gpt_set_bf16_half(gpt *m, const uint16_t *half) {
  if (m) m->half = half;
}

void gpt_set_bf16(gpt *m, int on, const float *weights) {
  if (!m) return;
  m->bf16 = on != 0;
  m->weights = weights;
  const char *env = getenv("GPT_BF16_DNNL");
  m->lp = m->bf16 && !(env && strcmp(env, "0") == 0) && gemm_dnnl_available();
}

/* ---- allocation --------------------------------------------------------------------------- */

/* Every buffer is touched at creation, so the resident size is reached before training. */
static float *alloc_floats(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (p) memset(p, 0, n * sizeof *p);
  return p;
}

void gpt_destroy(gpt *m) {
  if (!m) return;
  free(m->tensors);
  free(m->lp_a);
  free(m->lp_b);
  free(m->unit_w);
  free(m->params);
  if (!m->borrowed_grads) free(m->grads);
  if (m->x)
    for (int l = 0; l <= m->cfg.n_layer; l++) free(m->x[l]);
  free(m->x);
  if (m->acts)
    for (int l = 0; l < m->cfg.n_layer; l++) {
      layer_acts *a = &m->acts[l];
      float *bufs[] = {a->ln1_mean, a->ln1_rstd, a->ln1_out, a->qkv, a->att, a->atty,
                       a->res2, a->ln2_mean, a->ln2_rstd, a->ln2_out, a->fch, a->fcg};
      for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
  free(m->acts);
  float *bufs[] = {m->lnf_mean, m->lnf_rstd, m->lnf_out, m->logits, m->dx,
                   m->dln, m->d4, m->dqkv, m->datty, m->dP};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
  free(m);
}

static void add_tensor(gpt *m, size_t *off, const char *name, int ndim, int64_t d0, int64_t d1,
                       int is_matrix) {
  gpt_tensor *t = &m->tensors[m->ntensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->offset = *off;
  t->ndim = ndim;
  t->shape[0] = d0;
  t->shape[1] = ndim == 2 ? d1 : 0;
  t->numel = (size_t)d0 * (ndim == 2 ? (size_t)d1 : 1);
  t->is_matrix = is_matrix;
  *off += t->numel;
}

static int create(gpt **out, const gpt_config *cfg, int external) {
  if (!out || !cfg) return fail("gpt_create: out or cfg is NULL");
  *out = NULL;
  if (cfg->vocab_size < 2 || cfg->vocab_size > 256 || cfg->block_size < 1 ||
      cfg->block_size > 4096 || cfg->n_layer < 1 || cfg->n_layer > 64 || cfg->n_head < 1 ||
      cfg->n_embd < 1 || cfg->n_embd > 8192 || cfg->n_embd % cfg->n_head != 0 ||
      cfg->max_batch < 1 || cfg->max_batch > 4096)
    return fail("gpt_create: invalid config vocab_size=%d block_size=%d n_layer=%d n_head=%d "
                "n_embd=%d max_batch=%d (expected vocab 2..256, block_size 1..4096, n_layer "
                "1..64, n_embd 1..8192 divisible by n_head, max_batch 1..4096)",
                cfg->vocab_size, cfg->block_size, cfg->n_layer, cfg->n_head, cfg->n_embd,
                cfg->max_batch);
  gpt *m = calloc(1, sizeof *m);
  if (!m) return fail("gpt_create: out of memory");
  m->cfg = *cfg;
  const int L = cfg->n_layer;
  const int64_t C = cfg->n_embd, V = cfg->vocab_size, T = cfg->block_size;
  m->tensors = calloc((size_t)(4 + PER_BLOCK * L), sizeof *m->tensors);
  if (!m->tensors) {
    gpt_destroy(m);
    return fail("gpt_create: out of memory");
  }
  size_t off = 0;
  char name[48];
  add_tensor(m, &off, "tok_emb.weight", 2, V, C, 0);
  add_tensor(m, &off, "pos_emb.weight", 2, T, C, 0);
  for (int l = 0; l < L; l++) {
    static const struct { const char *suffix; int ndim, rows, cols, is_matrix; } parts[] = {
        {"ln1.weight", 1, 1, 0, 0},       {"ln1.bias", 1, 1, 0, 0},
        {"attn.qkv.weight", 2, 3, 1, 1},  {"attn.qkv.bias", 1, 3, 0, 0},
        {"attn.proj.weight", 2, 1, 1, 1}, {"attn.proj.bias", 1, 1, 0, 0},
        {"ln2.weight", 1, 1, 0, 0},       {"ln2.bias", 1, 1, 0, 0},
        {"mlp.fc.weight", 2, 4, 1, 1},    {"mlp.fc.bias", 1, 4, 0, 0},
        {"mlp.proj.weight", 2, 1, 4, 1},  {"mlp.proj.bias", 1, 1, 0, 0}};
    for (int j = 0; j < PER_BLOCK; j++) {
      snprintf(name, sizeof name, "blocks.%d.%s", l, parts[j].suffix);
      add_tensor(m, &off, name, parts[j].ndim, parts[j].rows * C, parts[j].cols * C,
                 parts[j].is_matrix);
    }
  }
  add_tensor(m, &off, "ln_f.weight", 1, C, 0, 0);
  add_tensor(m, &off, "ln_f.bias", 1, C, 0, 0);
  m->nparams = off;

  const size_t N = (size_t)cfg->max_batch * (size_t)T, c = (size_t)C;
  const size_t att = (size_t)cfg->max_batch * (size_t)cfg->n_head * (size_t)T * (size_t)T;
  int ok = (external || ((m->params = alloc_floats(off)) && (m->grads = alloc_floats(off)))) &&
           (m->x = calloc((size_t)L + 1, sizeof *m->x)) && (m->acts = calloc((size_t)L, sizeof *m->acts));
  for (int l = 0; ok && l <= L; l++) ok = (m->x[l] = alloc_floats(N * c)) != NULL;
  for (int l = 0; ok && l < L; l++) {
    layer_acts *a = &m->acts[l];
    ok = (a->ln1_mean = alloc_floats(N)) && (a->ln1_rstd = alloc_floats(N)) &&
         (a->ln1_out = alloc_floats(N * c)) && (a->qkv = alloc_floats(3 * N * c)) &&
         (a->att = alloc_floats(att)) && (a->atty = alloc_floats(N * c)) &&
         (a->res2 = alloc_floats(N * c)) && (a->ln2_mean = alloc_floats(N)) &&
         (a->ln2_rstd = alloc_floats(N)) && (a->ln2_out = alloc_floats(N * c)) &&
         (a->fch = alloc_floats(4 * N * c)) && (a->fcg = alloc_floats(4 * N * c));
  }
  ok = ok && (m->lnf_mean = alloc_floats(N)) && (m->lnf_rstd = alloc_floats(N)) &&
       (m->lnf_out = alloc_floats(N * c)) && (m->logits = alloc_floats(N * (size_t)V)) &&
       (m->dx = alloc_floats(N * c)) && (m->dln = alloc_floats(N * c)) &&
       (m->d4 = alloc_floats(4 * N * c)) && (m->dqkv = alloc_floats(3 * N * c)) &&
       (m->datty = alloc_floats(N * c)) && (m->dP = alloc_floats((size_t)T * (size_t)T));
  if (!ok) {
    gpt_destroy(m);
    return fail("gpt_create: out of memory for %zu parameters and %zu tokens of activations",
                off, N);
  }
  *out = m;
  return 0;
}

int gpt_create(gpt **out, const gpt_config *cfg) { return create(out, cfg, 0); }
int gpt_create_external(gpt **out, const gpt_config *cfg) { return create(out, cfg, 1); }

const gpt_config *gpt_get_config(const gpt *m) { return m ? &m->cfg : NULL; }
size_t gpt_num_params(const gpt *m) { return m ? m->nparams : 0; }
float *gpt_params(gpt *m) { return m ? m->params : NULL; }
float *gpt_grads(gpt *m) { return m ? m->grads : NULL; }

int gpt_use_grads(gpt *m, float *grads) {
  if (!m || !grads || !m->grads) return -1;
  memcpy(grads, m->grads, m->nparams * sizeof *grads);
  if (!m->borrowed_grads) free(m->grads);
  m->grads = grads;
  m->borrowed_grads = 1;
  return 0;
}
int gpt_num_tensors(const gpt *m) { return m ? m->ntensors : 0; }
const gpt_tensor *gpt_tensor_at(const gpt *m, int i) {
  return m && i >= 0 && i < m->ntensors ? &m->tensors[i] : NULL;
}
const float *gpt_logits(const gpt *m) { return m ? m->logits : NULL; }

const char *gpt_matmul_backend(void) {
#ifdef USE_CBLAS
  static _Thread_local char name[96];
  const int threads = openblas_get_num_threads();
  snprintf(name, sizeof name, "OpenBLAS, %s kernels, %d thread%s", openblas_get_corename(), threads,
           threads == 1 ? "" : "s");
  return name;
#else
  return "plain C loops";
#endif
}

const char *gpt_bf16_backend(const gpt *m) {
  static _Thread_local char name[400];
  if (!m || !m->bf16) return "off";
  if (m->lp) {
    snprintf(name, sizeof name, "linear layers in bf16 through %s; attention: operands rounded to bf16, float32 products",
             gemm_dnnl_describe());
    return name;
  }
  snprintf(name, sizeof name, "operands rounded to bf16, float32 products (oneDNN: %s)",
           gemm_dnnl_available() ? "off, GPT_BF16_DNNL=0" : gemm_dnnl_describe());
  return name;
}

/* ---- initialization ----------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1]. */
static double uniform(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53; }

static float normal(uint64_t *s) {
  double u = uniform(s), v = uniform(s);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

void gpt_init_params(const gpt *m, uint64_t seed, float *dst) {
  if (!m || !dst) return;
  uint64_t s = seed;
  const float resid_std = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
  for (int i = 0; i < m->ntensors; i++) {
    const gpt_tensor *t = &m->tensors[i];
    float *p = dst + t->offset;
    const char *leaf = strrchr(t->name, '.') + 1;
    int is_norm = strstr(t->name, "ln") != NULL;
    if (t->ndim == 2) {
      float std = strstr(t->name, "proj.weight") ? resid_std : 0.02f;
      for (size_t k = 0; k < t->numel; k++) p[k] = std * normal(&s);
    } else {
      float v = is_norm && strcmp(leaf, "weight") == 0 ? 1.0f : 0.0f;
      for (size_t k = 0; k < t->numel; k++) p[k] = v;
    }
  }
}

void gpt_init(gpt *m, uint64_t seed) {
  if (!m) return;
  gpt_init_params(m, seed, m->params);
  gpt_zero_grad(m);
  m->have_probs = 0;
  m->B = 0;
}

void gpt_zero_grad(gpt *m) {
  if (m && m->grads) memset(m->grads, 0, m->nparams * sizeof *m->grads);
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* C[M, N] = alpha op(A) op(B) + beta C, row-major; op transposes when ta / tb. */
static void gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
#ifdef USE_CBLAS
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  for (int i = 0; i < M; i++) {
    float *restrict c = C + (size_t)i * ldc;
    if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof *c);
    else if (beta != 1.0f)
      for (int j = 0; j < N; j++) c[j] *= beta;
    if (!tb) {
      for (int p = 0; p < K; p++) {
        float a = alpha * (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]);
        if (a == 0.0f) continue;
        const float *restrict b = B + (size_t)p * ldb;
        for (int j = 0; j < N; j++) c[j] += a * b[j];
      }
    } else {
      for (int j = 0; j < N; j++) {
        const float *restrict b = B + (size_t)j * ldb;
        float s = 0.0f;
        if (!ta) {
          const float *restrict a = A + (size_t)i * lda;
          for (int p = 0; p < K; p++) s += a[p] * b[p];
        } else {
          for (int p = 0; p < K; p++) s += A[(size_t)p * lda + i] * b[p];
        }
        c[j] += alpha * s;
      }
    }
  }
#endif
}

/* Rounds to the nearest bfloat16 (ties to even), kept in a float. */
VECTORIZED static void round_bf16(float *x, size_t n) {
  uint32_t *u = (uint32_t *)x;
  for (size_t i = 0; i < n; i++) {
    uint32_t v = u[i];
    if ((v & 0x7f800000u) != 0x7f800000u) v = (v + 0x7fffu + ((v >> 16) & 1u)) & 0xffff0000u;
    u[i] = v;
  }
}

/* bf16 mode with oneDNN: n floats rounded to bf16 into one of the model's two buffers (grown on
 * demand); NULL when out of memory (the caller then keeps the float32 product). */
static const uint16_t *to_half(uint16_t **buf, size_t *cap, const float *x, size_t n) {
  if (n > *cap) {
    free(*buf);
    *buf = malloc(n * sizeof **buf);
    *cap = *buf ? n : 0;
    if (!*buf) return NULL;
  }
  gemm_to_bf16(*buf, x, n);
  return *buf;
}

/* W (a pointer into the weights) in the caller's bf16 copy (gpt_set_bf16_half), or NULL. */
static const uint16_t *weight_half(gpt *m, const float *W) {
  if (m->half) return m->half + (W - (m->weights ? m->weights : m->params));
  return NULL;
}

/* out[N, OC] = in[N, IC] W[OC, IC]^T + b */
static void linear_fwd(gpt *m, float *out, const float *in, const float *W, const float *b, int N, int IC,
                       int OC) {
  for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof *b);
  if (m->lp) {
    const uint16_t *ah = to_half(&m->lp_a, &m->lp_acap, in, (size_t)N * IC), *wh = weight_half(m, W);
    if (!wh) wh = to_half(&m->lp_b, &m->lp_bcap, W, (size_t)OC * IC);
    if (ah && wh && gemm_dnnl_bf16_pre(0, 1, N, OC, IC, 1.0f, ah, IC, wh, IC, 1.0f, out, OC) == 0) return;
  }
  gemm_f32(0, 1, N, OC, IC, 1.0f, in, IC, W, IC, 1.0f, out, OC);
}

/* dW += dout^T in, db += column sums of dout (db may be NULL), din = dout W (when din is not
 * NULL). In bf16 mode with oneDNN, dout is converted once for both products. */
static void linear_bwd(gpt *m, float *din, float *dW, float *db, const float *dout, const float *in,
                       const float *W, int N, int IC, int OC) {
  const uint16_t *dh = NULL, *bh = NULL;
  if (m->lp) {
    dh = to_half(&m->lp_a, &m->lp_acap, dout, (size_t)N * OC);
    bh = dh ? to_half(&m->lp_b, &m->lp_bcap, in, (size_t)N * IC) : NULL;
  }
  if (!bh || gemm_dnnl_bf16_pre(1, 0, OC, IC, N, 1.0f, dh, OC, bh, IC, 1.0f, dW, IC) != 0)
    gemm_f32(1, 0, OC, IC, N, 1.0f, dout, OC, in, IC, 1.0f, dW, IC);
  for (int i = 0; db && i < N; i++) {
    const float *restrict d = dout + (size_t)i * OC;
    for (int o = 0; o < OC; o++) db[o] += d[o];
  }
  if (!din) return;
  const uint16_t *wh = dh ? weight_half(m, W) : NULL;
  if (dh && !wh) wh = to_half(&m->lp_b, &m->lp_bcap, W, (size_t)OC * IC);
  if (!wh || gemm_dnnl_bf16_pre(0, 0, N, IC, OC, 1.0f, dh, OC, wh, IC, 0.0f, din, IC) != 0)
    gemm_f32(0, 0, N, IC, OC, 1.0f, dout, OC, W, IC, 0.0f, din, IC);
}

VECTORIZED static void layernorm_fwd(float *out, float *mean, float *rstd, const float *x,
                                     const float *w, const float *b, int N, int C) {
  for (int i = 0; i < N; i++) {
    const float *restrict xi = x + (size_t)i * C;
    float *restrict o = out + (size_t)i * C;
    float mu = 0.0f, var = 0.0f;
#pragma omp simd reduction(+ : mu)
    for (int k = 0; k < C; k++) mu += xi[k];
    mu /= (float)C;
#pragma omp simd reduction(+ : var)
    for (int k = 0; k < C; k++) var += (xi[k] - mu) * (xi[k] - mu);
    float r = 1.0f / sqrtf(var / (float)C + LN_EPS);
    for (int k = 0; k < C; k++) o[k] = (xi[k] - mu) * r * w[k] + b[k];
    mean[i] = mu;
    rstd[i] = r;
  }
}

/* dx += d(layernorm)/dx . dout; dw, db += their gradients. */
VECTORIZED static void layernorm_bwd(float *dx, float *restrict dw, float *restrict db,
                                     const float *dout, const float *x, const float *mean,
                                     const float *rstd, const float *w, int N, int C) {
  for (int i = 0; i < N; i++) {
    const float *restrict xi = x + (size_t)i * C, *restrict d = dout + (size_t)i * C;
    float *restrict dxi = dx + (size_t)i * C;
    const float mu = mean[i], r = rstd[i];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
    for (int k = 0; k < C; k++) {
      float xhat = (xi[k] - mu) * r, dxhat = d[k] * w[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      dw[k] += d[k] * xhat;
      db[k] += d[k];
    }
    sum_dxhat /= (float)C;
    sum_dxhat_xhat /= (float)C;
    for (int k = 0; k < C; k++) {
      float xhat = (xi[k] - mu) * r;
      dxi[k] += r * (d[k] * w[k] - sum_dxhat - xhat * sum_dxhat_xhat);
    }
  }
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* exp(x) in plain arithmetic that the compiler vectorizes (libm's expf is a call per element):
 * x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series to degree 7 (truncation below
 * 6e-9 relative, under float rounding), times 2^n through the exponent bits. x is clamped to
 * [-87, 88], where 2^n stays a normal float: exp(-87) = 1.6e-38 stands in for anything smaller. */
static inline float exp_fast(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float fn = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;          /* ln2 in two parts */
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits;
  memcpy(&bits, &p, sizeof bits);
  bits += (int32_t)fn * (1 << 23);
  memcpy(&p, &bits, sizeof p);
  return p;
}

/* tanh from one exp; saturates to +-1 (the only use, 1 + tanh, needs no more accuracy). */
static inline float fast_tanh(float u) { return 1.0f - 2.0f / (1.0f + exp_fast(2.0f * u)); }

VECTORIZED static void gelu_fwd(float *out, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    out[i] = 0.5f * v * (1.0f + fast_tanh(GELU_K * (v + 0.044715f * v * v * v)));
  }
}

/* d[i] *= gelu'(x[i]) */
VECTORIZED static void gelu_bwd(float *d, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i], th = fast_tanh(GELU_K * (v + 0.044715f * v * v * v));
    float dg = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    d[i] *= dg;
  }
}

/* Row t of the T x T scores P becomes the softmax of its first t + 1 entries, the rest 0 (rounded
 * to bf16 when bf16). */
VECTORIZED static void softmax_causal(float *P, int T, int bf16) {
  for (int t = 0; t < T; t++) {
    float *restrict row = P + (size_t)t * T, mx = row[0], sum = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int s = 1; s <= t; s++) mx = row[s] > mx ? row[s] : mx;
#pragma omp simd reduction(+ : sum)
    for (int s = 0; s <= t; s++) {
      row[s] = exp_fast(row[s] - mx);
      sum += row[s];
    }
    float inv = 1.0f / sum;
    for (int s = 0; s <= t; s++) row[s] *= inv;
    for (int s = t + 1; s < T; s++) row[s] = 0.0f;
    if (bf16) round_bf16(row, (size_t)t + 1);
  }
}

/* Softmax backward of softmax_causal, with the score scale: dS (in: d/dP) becomes d/dscores. */
VECTORIZED static void softmax_causal_bwd(float *dS, const float *P, int T, float scale) {
  for (int t = 0; t < T; t++) {
    const float *restrict p = P + (size_t)t * T;
    float *restrict d = dS + (size_t)t * T, dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int s = 0; s <= t; s++) dot += p[s] * d[s];
    for (int s = 0; s <= t; s++) d[s] = p[s] * (d[s] - dot) * scale;
    for (int s = t + 1; s < T; s++) d[s] = 0.0f;
  }
}

/* Causal self-attention of one layer: qkv [B*T, 3C] -> y [B*T, C], probabilities in att. */
static void attention_fwd(gpt *m, float *y, float *att, const float *qkv, int B, int T) {
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *Q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *K = Q + C, *V = Q + 2 * C;
      float *P = att + ((size_t)b * NH + (size_t)h) * T * T, *Y = y + (size_t)b * T * C + (size_t)h * hs;
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        gemm_f32(0, 1, r1 - r0, r1, hs, scale, Q + (size_t)r0 * C3, C3, K, C3, 0.0f, P + (size_t)r0 * T, T);
      }
      softmax_causal(P, T, m->bf16);
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        gemm_f32(0, 0, r1 - r0, hs, r1, 1.0f, P + (size_t)r0 * T, T, V, C3, 0.0f, Y + (size_t)r0 * C, C);
      }
    }
}

/* Backward of attention_fwd: dy [B*T, C] -> dqkv [B*T, 3C] (overwritten). */
static void attention_bwd(gpt *m, float *dqkv, const float *dy, const float *att, const float *qkv,
                          int B, int T) {
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)hs);
  float *dS = m->dP;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const size_t qo = (size_t)b * T * C3 + (size_t)h * hs;
      const float *Q = qkv + qo, *K = Q + C, *V = Q + 2 * C;
      float *dQ = dqkv + qo, *dK = dQ + C, *dV = dQ + 2 * C;
      const float *P = att + ((size_t)b * NH + (size_t)h) * T * T;
      const float *dY = dy + (size_t)b * T * C + (size_t)h * hs;
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        /* dP = dY V^T (causal part); dV[s] = sum over t >= s of P[t, s] dY[t] */
        gemm_f32(0, 1, r1 - r0, r1, hs, 1.0f, dY + (size_t)r0 * C, C, V, C3, 0.0f, dS + (size_t)r0 * T, T);
        gemm_f32(1, 0, r1 - r0, hs, T - r0, 1.0f, P + (size_t)r0 * T + r0, T, dY + (size_t)r0 * C, C,
             0.0f, dV + (size_t)r0 * C3, C3);
      }
      softmax_causal_bwd(dS, P, T, scale);
      for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        gemm_f32(0, 0, r1 - r0, hs, r1, 1.0f, dS + (size_t)r0 * T, T, K, C3, 0.0f, dQ + (size_t)r0 * C3, C3);
        gemm_f32(1, 0, r1 - r0, hs, T - r0, 1.0f, dS + (size_t)r0 * T + r0, T, Q + (size_t)r0 * C3, C3,
             0.0f, dK + (size_t)r0 * C3, C3);
      }
    }
}

/* ---- forward, loss, backward -------------------------------------------------------------- */

/* Offset of tensor j of block l from the block's first tensor: the layout of a block's unit buffer. */
static size_t rel(const gpt *m, int l, int j) {
  return m->tensors[2 + PER_BLOCK * l + j].offset - m->tensors[2 + PER_BLOCK * l].offset;
}

static int check_batch(const gpt *m, const char *fn, const int32_t *tokens, int batch, int T, size_t stride) {
  if (batch < 1 || batch > m->cfg.max_batch || T < 1 || T > m->cfg.block_size || stride < (size_t)T)
    return fail("%s: batch %d x T %d (stride %zu) is outside 1..%d x 1..%d", fn, batch, T, stride, m->cfg.max_batch,
                m->cfg.block_size);
  for (int b = 0; b < batch; b++)
    for (int t = 0; t < T; t++) {
      int32_t tok = tokens[(size_t)b * stride + (size_t)t];
      if (tok < 0 || tok >= m->cfg.vocab_size)
        return fail("%s: token %d at (%d, %d) is outside the vocabulary of %d", fn, tok, b, t, m->cfg.vocab_size);
    }
  return 0;
}

/* The pieces of the forward pass. Each reads its tensors from the pointers given (p: parameters,
 * w: the matrices, which bf16 mode reads from its rounded copy), laid out as in gpt_params(). */
static void embed_fwd(gpt *m, const int32_t *tokens, int batch, int T, size_t stride, const float *wte,
                      const float *wpe) {
  const int C = m->cfg.n_embd;
  m->tokens = tokens;
  m->stride = stride;
  m->B = batch;
  m->T = T;
  m->have_probs = 0;
  PROF(m, GPT_OP_EMBED, 0, {
    for (int b = 0; b < batch; b++)
      for (int t = 0; t < T; t++) {
        float *x = m->x[0] + ((size_t)b * T + (size_t)t) * C;
        const float *e = wte + (size_t)tokens[(size_t)b * stride + (size_t)t] * C, *p = wpe + (size_t)t * C;
        for (int k = 0; k < C; k++) x[k] = e[k] + p[k];
      }
  });
  m->fwd_next = 1;
}

static void block_fwd(gpt *m, int l, const float *p, const float *w) {
  const int C = m->cfg.n_embd, N = m->B * m->T;
  const size_t NC = (size_t)N * C;
  layer_acts *a = &m->acts[l];
  const float *x = m->x[l];
  float *xo = m->x[l + 1];
#define PT(j) (p + rel(m, l, (j)))
#define WT(j) (w + rel(m, l, (j)))
  PROF(m, GPT_OP_LAYERNORM, 0, {
    layernorm_fwd(a->ln1_out, a->ln1_mean, a->ln1_rstd, x, PT(LN1_W), PT(LN1_B), N, C);
    if (m->bf16) round_bf16(a->ln1_out, NC);
  });
  PROF(m, GPT_OP_QKV, 0, {
    linear_fwd(m, a->qkv, a->ln1_out, WT(QKV_W), PT(QKV_B), N, C, 3 * C);
    if (m->bf16) round_bf16(a->qkv, 3 * NC);
  });
  PROF(m, GPT_OP_ATTENTION, 0, {
    attention_fwd(m, a->atty, a->att, a->qkv, m->B, m->T);
    if (m->bf16) round_bf16(a->atty, NC);
  });
  PROF(m, GPT_OP_ATTN_PROJ, 0, {
    linear_fwd(m, a->res2, a->atty, WT(PROJ_W), PT(PROJ_B), N, C, C);
    if (m->bf16) round_bf16(a->res2, NC);
  });
  PROF(m, GPT_OP_RESIDUAL, 0, {
    for (size_t i = 0; i < NC; i++) a->res2[i] += x[i];
  });
  PROF(m, GPT_OP_LAYERNORM, 0, {
    layernorm_fwd(a->ln2_out, a->ln2_mean, a->ln2_rstd, a->res2, PT(LN2_W), PT(LN2_B), N, C);
    if (m->bf16) round_bf16(a->ln2_out, NC);
  });
  PROF(m, GPT_OP_FC, 0, {
    linear_fwd(m, a->fch, a->ln2_out, WT(FC_W), PT(FC_B), N, C, 4 * C);
    if (m->bf16) round_bf16(a->fch, 4 * NC);
  });
  PROF(m, GPT_OP_GELU, 0, {
    gelu_fwd(a->fcg, a->fch, 4 * NC);
    if (m->bf16) round_bf16(a->fcg, 4 * NC);
  });
  PROF(m, GPT_OP_MLP_PROJ, 0, {
    linear_fwd(m, xo, a->fcg, WT(MPROJ_W), PT(MPROJ_B), N, 4 * C, C);
    if (m->bf16) round_bf16(xo, NC);
  });
  PROF(m, GPT_OP_RESIDUAL, 0, {
    for (size_t i = 0; i < NC; i++) xo[i] += a->res2[i];
  });
#undef PT
#undef WT
  m->fwd_next = l + 2;
}

/* ln_f (weight, bias) and the tied output projection (wte_w: tok_emb as the matrices are read). */
static void head_fwd(gpt *m, const float *lnf_w, const float *lnf_b, const float *wte_w) {
  const int C = m->cfg.n_embd, V = m->cfg.vocab_size, L = m->cfg.n_layer, N = m->B * m->T;
  const size_t NC = (size_t)N * C;
  PROF(m, GPT_OP_LAYERNORM, 0, {
    layernorm_fwd(m->lnf_out, m->lnf_mean, m->lnf_rstd, m->x[L], lnf_w, lnf_b, N, C);
    if (m->bf16) round_bf16(m->lnf_out, NC);
  });
  const double prof_t0 = m->prof ? thread_seconds() : 0.0;
  {
    const uint16_t *ah = m->lp ? to_half(&m->lp_a, &m->lp_acap, m->lnf_out, NC) : NULL;
    const uint16_t *wh = ah ? weight_half(m, wte_w) : NULL;
    if (ah && !wh) wh = to_half(&m->lp_b, &m->lp_bcap, wte_w, (size_t)V * C);
    if (!wh || gemm_dnnl_bf16_pre(0, 1, N, V, C, 1.0f, ah, C, wh, C, 0.0f, m->logits, V) != 0)
      gemm_f32(0, 1, N, V, C, 1.0f, m->lnf_out, C, wte_w, C, 0.0f, m->logits, V);
  }
  if (m->bf16) round_bf16(m->logits, (size_t)N * V);
  if (m->prof) m->prof[GPT_OP_LOGITS] += thread_seconds() - prof_t0;
  m->fwd_next = L + 2;
}

int gpt_forward(gpt *m, const int32_t *tokens, int batch, int T, size_t stride) {
  if (!m || !tokens) return fail("gpt_forward: model or tokens is NULL");
  if (check_batch(m, "gpt_forward", tokens, batch, T, stride)) return -1;
  if (!m->params)
    return fail("gpt_forward: the model has no parameters of its own (gpt_create_external): run it unit by unit "
                "(gpt_forward_embed, gpt_forward_block, gpt_forward_head)");
  const int L = m->cfg.n_layer;
  const float *P = m->params, *W = m->bf16 && m->weights ? m->weights : m->params;
  embed_fwd(m, tokens, batch, T, stride, P + m->tensors[0].offset, P + m->tensors[1].offset);
  for (int l = 0; l < L; l++)
    block_fwd(m, l, P + m->tensors[2 + PER_BLOCK * l].offset, W + m->tensors[2 + PER_BLOCK * l].offset);
  const gpt_tensor *lnf = &m->tensors[2 + PER_BLOCK * L];
  head_fwd(m, P + lnf[0].offset, P + lnf[1].offset, W + m->tensors[0].offset);
  return 0;
}

static int check_pieces(const gpt *m, const char *fn, const void *a, const void *b) {
  if (!m || !a || !b) return fail("%s: a model or buffer argument is NULL", fn);
  if (m->bf16 && (m->weights || m->half))
    return fail("%s: in bf16 mode the unit-by-unit calls round each unit's matrices themselves: turn bf16 on with "
                "gpt_set_bf16(m, 1, NULL) and no gpt_set_bf16_half copy", fn);
  return 0;
}

/* The weights a unit's matrix products read: the unit's own values in float32 mode; in bf16 mode
 * the same values rounded to bf16 (what gpt_forward reads from the caller's rounded copy), in the
 * model's scratch buffer. NULL (with a message) when out of memory. */
static const float *unit_weights(gpt *m, const float *p, size_t n, const char *fn) {
  if (!m->bf16) return p;
  if (n > m->unit_wcap) {
    free(m->unit_w);
    m->unit_w = malloc(n * sizeof *m->unit_w);
    m->unit_wcap = m->unit_w ? n : 0;
    if (!m->unit_w) {
      fail("%s: out of memory for the unit's bf16 weights", fn);
      return NULL;
    }
  }
  memcpy(m->unit_w, p, n * sizeof *p);
  round_bf16(m->unit_w, n);
  return m->unit_w;
}

static size_t block_numel(const gpt *m, int l) {
  return m->tensors[2 + PER_BLOCK * (l + 1)].offset - m->tensors[2 + PER_BLOCK * l].offset;
}

int gpt_forward_embed(gpt *m, const int32_t *tokens, int batch, int T, size_t stride, const float *emb) {
  if (check_pieces(m, "gpt_forward_embed", tokens, emb) || check_batch(m, "gpt_forward_embed", tokens, batch, T, stride))
    return -1;
  embed_fwd(m, tokens, batch, T, stride, emb, emb + (m->tensors[1].offset - m->tensors[0].offset));
  return 0;
}

int gpt_forward_block(gpt *m, int layer, const float *block) {
  if (check_pieces(m, "gpt_forward_block", block, block)) return -1;
  if (layer < 0 || layer >= m->cfg.n_layer || m->fwd_next != layer + 1)
    return fail("gpt_forward_block: block %d out of order (the forward runs gpt_forward_embed, blocks 0..%d in "
                "order, then gpt_forward_head)", layer, m->cfg.n_layer - 1);
  const float *w = unit_weights(m, block, block_numel(m, layer), "gpt_forward_block");
  if (!w) return -1;
  block_fwd(m, layer, block, w);
  return 0;
}

int gpt_forward_head(gpt *m, const float *lnf, const float *emb) {
  if (check_pieces(m, "gpt_forward_head", lnf, emb)) return -1;
  const int f = 2 + PER_BLOCK * m->cfg.n_layer;
  if (m->fwd_next != m->cfg.n_layer + 1)
    return fail("gpt_forward_head: call gpt_forward_embed and every block first");
  const float *wte = unit_weights(m, emb, (size_t)m->cfg.vocab_size * m->cfg.n_embd, "gpt_forward_head");
  if (!wte) return -1;
  head_fwd(m, lnf, lnf + (m->tensors[f + 1].offset - m->tensors[f].offset), wte);
  return 0;
}

/* z becomes softmax(z); *mx gets the largest input, *sum the sum of exp(z - *mx). */
VECTORIZED static void softmax_row(float *restrict z, int V, float *mx_out, float *sum_out) {
  float mx = z[0], sum = 0.0f;
#pragma omp simd reduction(max : mx)
  for (int c = 1; c < V; c++) mx = z[c] > mx ? z[c] : mx;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < V; c++) {
    z[c] = exp_fast(z[c] - mx);
    sum += z[c];
  }
  float inv = 1.0f / sum;
  for (int c = 0; c < V; c++) z[c] *= inv;
  *mx_out = mx;
  *sum_out = sum;
}

int gpt_loss(gpt *m, const int32_t *targets, size_t stride, float *loss, float *row_loss) {
  if (!m || !targets || !loss) return fail("gpt_loss: model, targets or loss is NULL");
  if (!m->B || m->have_probs || m->fwd_next != m->cfg.n_layer + 2)
    return fail("gpt_loss: call gpt_forward first (once per gpt_loss)");
  if (stride != m->stride) return fail("gpt_loss: stride %zu differs from the forward's %zu", stride, m->stride);
  const int V = m->cfg.vocab_size, T = m->T;
  const double prof_t0 = m->prof ? thread_seconds() : 0.0;
  double total = 0.0;
  for (int b = 0; b < m->B; b++) {
    double seq = 0.0;
    for (int t = 0; t < T; t++) {
      int32_t y = targets[(size_t)b * stride + (size_t)t];
      if (y < 0 || y >= V) return fail("gpt_loss: target %d at (%d, %d) is outside the vocabulary of %d", y, b, t, V);
      float *z = m->logits + ((size_t)b * T + (size_t)t) * V, zy = z[y], mx, sum;
      softmax_row(z, V, &mx, &sum);
      seq += log((double)sum) + mx - zy;
    }
    if (row_loss) row_loss[b] = (float)(seq / T);
    total += seq;
  }
  *loss = (float)(total / ((double)m->B * T));
  if (m->prof) m->prof[GPT_OP_LOSS] += thread_seconds() - prof_t0;
  m->targets = targets;
  m->have_probs = 1;
  m->bwd_next = m->cfg.n_layer + 1;
  return 0;
}

/* The pieces of the backward pass (gradients ADDED at the pointers given, laid out as the
 * parameters). The head: the loss's gradient, the tied output projection and ln_f. */
static void head_bwd(gpt *m, float scale, const float *lnf_w, float *g_lnf_w, float *g_lnf_b, const float *wte_w,
                     float *g_wte) {
  const int C = m->cfg.n_embd, V = m->cfg.vocab_size, L = m->cfg.n_layer, T = m->T, N = m->B * T;
  const size_t NC = (size_t)N * C;
  /* d(mean loss)/d(logits) = (softmax - onehot) / N, in place over the probabilities */
  const float k = scale / (float)N;
  PROF(m, GPT_OP_LOSS, 1, {
    for (int b = 0; b < m->B; b++)
      for (int t = 0; t < T; t++) {
        float *d = m->logits + ((size_t)b * T + (size_t)t) * V;
        d[m->targets[(size_t)b * m->stride + (size_t)t]] -= 1.0f;
        for (int c = 0; c < V; c++) d[c] *= k;
      }
  });
  /* tied output projection: logits = ln_f_out tok_emb^T */
  PROF(m, GPT_OP_LOGITS, 1, { linear_bwd(m, m->dln, g_wte, NULL, m->logits, m->lnf_out, wte_w, N, C, V); });
  PROF(m, GPT_OP_LAYERNORM, 1, {
    memset(m->dx, 0, NC * sizeof *m->dx);
    layernorm_bwd(m->dx, g_lnf_w, g_lnf_b, m->dln, m->x[L], m->lnf_mean, m->lnf_rstd, lnf_w, N, C);
  });
  m->bwd_next = L;
}

static void block_bwd(gpt *m, int l, const float *p, const float *w, float *g) {
  const int C = m->cfg.n_embd, T = m->T, N = m->B * T;
  const size_t NC = (size_t)N * C;
  layer_acts *a = &m->acts[l];
  float *gt[PER_BLOCK];
  for (int j = 0; j < PER_BLOCK; j++) gt[j] = g + rel(m, l, j);
#define PT(j) (p + rel(m, l, (j)))
#define WT(j) (w + rel(m, l, (j)))
  /* x_out = res2 + mlp(ln2(res2)): dx flows to res2 unchanged, plus the MLP's share */
  PROF(m, GPT_OP_MLP_PROJ, 1, { linear_bwd(m, m->d4, gt[MPROJ_W], gt[MPROJ_B], m->dx, a->fcg, WT(MPROJ_W), N, 4 * C, C); });
  PROF(m, GPT_OP_GELU, 1, gelu_bwd(m->d4, a->fch, 4 * NC));
  PROF(m, GPT_OP_FC, 1, { linear_bwd(m, m->dln, gt[FC_W], gt[FC_B], m->d4, a->ln2_out, WT(FC_W), N, C, 4 * C); });
  PROF(m, GPT_OP_LAYERNORM, 1, {
    layernorm_bwd(m->dx, gt[LN2_W], gt[LN2_B], m->dln, a->res2, a->ln2_mean, a->ln2_rstd, PT(LN2_W), N, C);
  });
  /* res2 = x + proj(attention(ln1(x))) */
  PROF(m, GPT_OP_ATTN_PROJ, 1, { linear_bwd(m, m->datty, gt[PROJ_W], gt[PROJ_B], m->dx, a->atty, WT(PROJ_W), N, C, C); });
  PROF(m, GPT_OP_ATTENTION, 1, attention_bwd(m, m->dqkv, m->datty, a->att, a->qkv, m->B, T));
  PROF(m, GPT_OP_QKV, 1, { linear_bwd(m, m->dln, gt[QKV_W], gt[QKV_B], m->dqkv, a->ln1_out, WT(QKV_W), N, C, 3 * C); });
  PROF(m, GPT_OP_LAYERNORM, 1, {
    layernorm_bwd(m->dx, gt[LN1_W], gt[LN1_B], m->dln, m->x[l], a->ln1_mean, a->ln1_rstd, PT(LN1_W), N, C);
  });
#undef PT
#undef WT
  m->bwd_next = l;
}

static void embed_bwd(gpt *m, float *dwte, float *dwpe) {
  const int C = m->cfg.n_embd, T = m->T;
  const double prof_t0 = m->prof ? thread_seconds() : 0.0;
  for (int b = 0; b < m->B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = m->dx + ((size_t)b * T + (size_t)t) * C;
      float *e = dwte + (size_t)m->tokens[(size_t)b * m->stride + (size_t)t] * C, *p = dwpe + (size_t)t * C;
      for (int c = 0; c < C; c++) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  if (m->prof) m->prof[GPT_OP_COUNT + GPT_OP_EMBED] += thread_seconds() - prof_t0;
  m->have_probs = 0;
  m->bwd_next = -1;
}

int gpt_backward(gpt *m, float scale) {
  if (!m) return fail("gpt_backward: model is NULL");
  if (!m->have_probs || m->bwd_next != m->cfg.n_layer + 1)
    return fail("gpt_backward: call gpt_forward and gpt_loss first (once per backward)");
  if (!m->params)
    return fail("gpt_backward: the model has no parameters of its own (gpt_create_external): run it unit by unit "
                "(gpt_backward_head, gpt_backward_block, gpt_backward_embed)");
  const int L = m->cfg.n_layer, f = 2 + PER_BLOCK * L;
  const float *P = m->params, *W = m->bf16 && m->weights ? m->weights : m->params;
  float *G = m->grads;
  head_bwd(m, scale, P + m->tensors[f].offset, G + m->tensors[f].offset, G + m->tensors[f + 1].offset,
           W + m->tensors[0].offset, G + m->tensors[0].offset);
  if (m->hook) m->hook(f, 2, m->hook_payload);
  for (int l = L - 1; l >= 0; l--) {
    const size_t at = m->tensors[2 + PER_BLOCK * l].offset;
    block_bwd(m, l, P + at, W + at, G + at);
    if (m->hook) m->hook(2 + PER_BLOCK * l, PER_BLOCK, m->hook_payload);
  }
  embed_bwd(m, G + m->tensors[0].offset, G + m->tensors[1].offset);
  if (m->hook) m->hook(0, 2, m->hook_payload);
  return 0;
}

int gpt_backward_head(gpt *m, float scale, const float *lnf, float *lnf_grad, const float *emb, float *emb_grad) {
  if (check_pieces(m, "gpt_backward_head", lnf, emb) || check_pieces(m, "gpt_backward_head", lnf_grad, emb_grad))
    return -1;
  if (!m->have_probs || m->bwd_next != m->cfg.n_layer + 1)
    return fail("gpt_backward_head: call the forward and gpt_loss first (once per backward)");
  const int f = 2 + PER_BLOCK * m->cfg.n_layer;
  const float *wte = unit_weights(m, emb, (size_t)m->cfg.vocab_size * m->cfg.n_embd, "gpt_backward_head");
  if (!wte) return -1;
  head_bwd(m, scale, lnf, lnf_grad, lnf_grad + (m->tensors[f + 1].offset - m->tensors[f].offset), wte, emb_grad);
  return 0;
}

int gpt_backward_block(gpt *m, int layer, const float *block, float *block_grad) {
  if (check_pieces(m, "gpt_backward_block", block, block_grad)) return -1;
  if (layer < 0 || layer >= m->cfg.n_layer || !m->have_probs || m->bwd_next != layer + 1)
    return fail("gpt_backward_block: block %d out of order (the backward runs gpt_backward_head, blocks %d..0, then "
                "gpt_backward_embed)", layer, m->cfg.n_layer - 1);
  const float *w = unit_weights(m, block, block_numel(m, layer), "gpt_backward_block");
  if (!w) return -1;
  block_bwd(m, layer, block, w, block_grad);
  return 0;
}

int gpt_backward_embed(gpt *m, float *emb_grad) {
  if (check_pieces(m, "gpt_backward_embed", emb_grad, emb_grad)) return -1;
  if (!m->have_probs || m->bwd_next != 0) return fail("gpt_backward_embed: call gpt_backward_block 0 first");
  embed_bwd(m, emb_grad, emb_grad + (m->tensors[1].offset - m->tensors[0].offset));
  return 0;
}

/* ---- sampling ----------------------------------------------------------------------------- */

int gpt_generate(gpt *m, uint8_t *text, int len, int n, float temperature, uint64_t seed) {
  if (!m || !text || len < 1 || n < 0 || !(temperature > 0.0f))
    return fail("gpt_generate: needs a model, a prompt of at least one byte, n >= 0 and temperature > 0");
  const int V = m->cfg.vocab_size;
  if (V > 256) return fail("gpt_generate: the vocabulary has %d tokens; text is generated for bytes (256) only", V);
  int32_t *ctx = malloc((size_t)m->cfg.block_size * sizeof *ctx);
  if (!ctx) return fail("gpt_generate: out of memory");
  uint64_t s = seed;
  for (int i = 0; i < n; i++) {
    int T = len < m->cfg.block_size ? len : m->cfg.block_size;
    for (int t = 0; t < T; t++) ctx[t] = text[len - T + t];
    if (m->fwd_fn ? m->fwd_fn(m, ctx, 1, T, (size_t)T, m->fwd_payload) : gpt_forward(m, ctx, 1, T, (size_t)T)) {
      free(ctx);
      return -1;
    }
    const float *z = m->logits + (size_t)(T - 1) * V;
    float mx = z[0];
    for (int c = 1; c < V; c++) mx = z[c] > mx ? z[c] : mx;
    double sum = 0.0, p[256];
    for (int c = 0; c < V; c++) sum += p[c] = exp((double)(z[c] - mx) / temperature);
    double u = uniform(&s) * sum, acc = 0.0;
    int pick = V - 1;
    for (int c = 0; c < V; c++)
      if ((acc += p[c]) >= u) {
        pick = c;
        break;
      }
    text[len++] = (uint8_t)pick;
  }
  free(ctx);
  m->B = 0;
  m->fwd_next = 0;
  return 0;
}
