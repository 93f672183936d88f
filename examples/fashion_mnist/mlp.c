/* MLP forward/backward. Matrix products: cblas_sgemm with USE_CBLAS, else row-wise axpy loops
 * that the compiler vectorizes (weights are transposed once per forward for contiguous access). */
#include "mlp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef USE_CBLAS
#include <cblas.h>
#endif

#define MLP_MAX_LAYERS (MLP_MAX_TENSORS / 2)

struct mlp {
  mlp_config cfg;
  int nl;                      /* number of Linear layers */
  int dims[MLP_MAX_LAYERS + 1]; /* dims[0] = input, dims[nl] = classes */
  mlp_tensor tensors[MLP_MAX_TENSORS];
  size_t nparams;
  float *params, *grads;
  float *own_params, *own_grads; /* the model's own buffers (params/grads may be borrowed) */
  float *act[MLP_MAX_LAYERS + 1]; /* act[l], l >= 1: output of layer l (ReLU'd below nl) */
  float *probs;                   /* softmax of the logits, [max_batch, classes] */
  float *delta[2];                /* backward scratch, [max_batch, max width] */
  float *wt;                      /* fallback forward: a transposed weight */
  int last_batch;                 /* batch of the last forward, 0 when none */
  int have_probs;                 /* mlp_loss ran after the last forward */
  mlp_grad_hook hook;             /* called as each layer's gradients become final */
  void *hook_payload;
};

void mlp_set_grad_hook(mlp *m, mlp_grad_hook hook, void *payload) {
  if (!m) return;
  m->hook = hook;
  m->hook_payload = payload;
}

static _Thread_local char mlp_err[512];

const char *mlp_last_error(void) { return mlp_err; }

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(mlp_err, sizeof mlp_err, fmt, ap);
  va_end(ap);
  return -1;
}

void mlp_destroy(mlp *m) {
  if (!m) return;
  free(m->own_params);
  free(m->own_grads);
  for (int l = 0; l <= MLP_MAX_LAYERS; l++) free(m->act[l]);
  free(m->probs);
  free(m->delta[0]);
  free(m->delta[1]);
  free(m->wt);
  free(m);
}

/* calloc touches nothing up front; memset makes every page resident now, not mid-training. */
static float *alloc_floats(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (p) memset(p, 0, n * sizeof *p);
  return p;
}

int mlp_create(mlp **out, const mlp_config *cfg) {
  if (!out || !cfg) return fail("mlp_create: out or cfg is NULL");
  *out = NULL;
  if (cfg->input_dim < 1 || cfg->input_dim > (1 << 20) || cfg->hidden_dim < 1 ||
      cfg->hidden_dim > (1 << 16) || cfg->num_classes < 2 || cfg->num_classes > (1 << 16) ||
      cfg->num_hidden_layers < 0 || cfg->num_hidden_layers > MLP_MAX_LAYERS - 1 ||
      cfg->max_batch < 1 || cfg->max_batch > (1 << 20))
    return fail("mlp_create: invalid config input_dim=%d hidden_dim=%d num_hidden_layers=%d "
                "num_classes=%d max_batch=%d (expected input_dim 1..2^20, hidden_dim 1..2^16, "
                "num_hidden_layers 0..%d, num_classes 2..2^16, max_batch 1..2^20)",
                cfg->input_dim, cfg->hidden_dim, cfg->num_hidden_layers, cfg->num_classes,
                cfg->max_batch, MLP_MAX_LAYERS - 1);
  mlp *m = calloc(1, sizeof *m);
  if (!m) return fail("mlp_create: out of memory");
  m->cfg = *cfg;
  m->nl = cfg->num_hidden_layers + 1;
  m->dims[0] = cfg->input_dim;
  for (int l = 1; l < m->nl; l++) m->dims[l] = cfg->hidden_dim;
  m->dims[m->nl] = cfg->num_classes;
  size_t off = 0, widest = 0, biggest_w = 0;
  for (int l = 1; l <= m->nl; l++) {
    size_t din = (size_t)m->dims[l - 1], dout = (size_t)m->dims[l];
    mlp_tensor *w = &m->tensors[2 * (l - 1)], *b = w + 1;
    snprintf(w->name, sizeof w->name, "fc%d.weight", l);
    w->offset = off;
    w->numel = din * dout;
    w->ndim = 2;
    w->shape[0] = (int64_t)dout;
    w->shape[1] = (int64_t)din;
    off += w->numel;
    snprintf(b->name, sizeof b->name, "fc%d.bias", l);
    b->offset = off;
    b->numel = dout;
    b->ndim = 1;
    b->shape[0] = (int64_t)dout;
    off += dout;
    if (dout > widest) widest = dout;
    if (din > widest) widest = din;
    if (din * dout > biggest_w) biggest_w = din * dout;
  }
  m->nparams = off;
  size_t mb = (size_t)cfg->max_batch;
  int ok = (m->params = alloc_floats(off)) && (m->grads = alloc_floats(off)) &&
           (m->probs = alloc_floats(mb * (size_t)cfg->num_classes)) &&
           (m->delta[0] = alloc_floats(mb * widest)) && (m->delta[1] = alloc_floats(mb * widest));
#ifndef USE_CBLAS
  ok = ok && (m->wt = alloc_floats(biggest_w));
#endif
  for (int l = 1; ok && l <= m->nl; l++) ok = (m->act[l] = alloc_floats(mb * (size_t)m->dims[l])) != NULL;
  m->own_params = m->params;
  m->own_grads = m->grads;
  if (!ok) {
    mlp_destroy(m);
    return fail("mlp_create: out of memory for %zu parameters and max_batch %d", off,
                cfg->max_batch);
  }
  *out = m;
  return 0;
}

int mlp_use_buffers(mlp *m, float *params, float *grads) {
  if (!m) return fail("mlp_use_buffers: model is NULL");
  if (!params != !grads) return fail("mlp_use_buffers: give both buffers or neither");
  m->params = params ? params : m->own_params;
  m->grads = grads ? grads : m->own_grads;
  return 0;
}

const mlp_config *mlp_get_config(const mlp *m) { return m ? &m->cfg : NULL; }
size_t mlp_num_params(const mlp *m) { return m ? m->nparams : 0; }
float *mlp_params(mlp *m) { return m ? m->params : NULL; }
float *mlp_grads(mlp *m) { return m ? m->grads : NULL; }
int mlp_num_tensors(const mlp *m) { return m ? 2 * m->nl : 0; }
const mlp_tensor *mlp_tensor_at(const mlp *m, int i) {
  return m && i >= 0 && i < 2 * m->nl ? &m->tensors[i] : NULL;
}
const float *mlp_logits(const mlp *m) { return m ? m->act[m->nl] : NULL; }

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void mlp_init(mlp *m, uint64_t seed) {
  if (!m) return;
  uint64_t s = seed;
  for (int l = 1; l <= m->nl; l++) {
    float bound = 1.0f / sqrtf((float)m->dims[l - 1]);
    for (int t = 0; t < 2; t++) {
      const mlp_tensor *tn = &m->tensors[2 * (l - 1) + t];
      float *p = m->params + tn->offset;
      for (size_t i = 0; i < tn->numel; i++) {
        float u = (float)(splitmix64(&s) >> 40) * (1.0f / 16777216.0f); /* [0,1) */
        p[i] = (2.0f * u - 1.0f) * bound;
      }
    }
  }
  mlp_zero_grad(m);
  m->last_batch = 0;
  m->have_probs = 0;
}

void mlp_zero_grad(mlp *m) {
  if (m) memset(m->grads, 0, m->nparams * sizeof *m->grads);
}

static void axpy(float *restrict y, const float *restrict x, float a, int n) {
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* out[B, dout] = in[B, din] W^T + b, W being [dout, din]. */
static void linear_forward(mlp *m, const float *in, int B, int din, int dout, const float *W,
                           const float *b, float *out) {
  for (int i = 0; i < B; i++) memcpy(out + (size_t)i * dout, b, (size_t)dout * sizeof *b);
#ifdef USE_CBLAS
  (void)m;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, dout, din, 1.0f, in, din, W, din, 1.0f,
              out, dout);
#else
  float *wt = m->wt;
  for (int o = 0; o < dout; o++)
    for (int k = 0; k < din; k++) wt[(size_t)k * dout + o] = W[(size_t)o * din + k];
  for (int i = 0; i < B; i++) {
    float *row = out + (size_t)i * dout;
    const float *x = in + (size_t)i * din;
    for (int k = 0; k < din; k++)
      if (x[k] != 0.0f) axpy(row, wt + (size_t)k * dout, x[k], dout);
  }
#endif
}

int mlp_forward(mlp *m, const float *x, int batch) {
  if (!m || !x) return fail("mlp_forward: model or input is NULL");
  if (batch < 1 || batch > m->cfg.max_batch)
    return fail("mlp_forward: batch %d is outside 1..%d (max_batch of the model)", batch,
                m->cfg.max_batch);
  const float *in = x;
  for (int l = 1; l <= m->nl; l++) {
    const mlp_tensor *w = &m->tensors[2 * (l - 1)];
    float *out = m->act[l];
    linear_forward(m, in, batch, m->dims[l - 1], m->dims[l], m->params + w->offset,
                   m->params + w[1].offset, out);
    if (l < m->nl) {
      size_t n = (size_t)batch * (size_t)m->dims[l];
      for (size_t i = 0; i < n; i++) out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    }
    in = out;
  }
  m->last_batch = batch;
  m->have_probs = 0;
  return 0;
}

int mlp_loss(mlp *m, const int32_t *labels, int batch, float *loss) {
  if (!m || !labels || !loss) return fail("mlp_loss: model, labels or loss is NULL");
  if (batch != m->last_batch)
    return fail("mlp_loss: batch %d differs from the last forward's batch %d", batch,
                m->last_batch);
  int C = m->cfg.num_classes;
  const float *logits = m->act[m->nl];
  double total = 0.0;
  for (int i = 0; i < batch; i++) {
    if (labels[i] < 0 || labels[i] >= C)
      return fail("mlp_loss: label %d of row %d is outside 0..%d", labels[i], i, C - 1);
    const float *z = logits + (size_t)i * C;
    float *p = m->probs + (size_t)i * C;
    float zmax = z[0];
    for (int c = 1; c < C; c++) zmax = z[c] > zmax ? z[c] : zmax;
    double sum = 0.0;
    for (int c = 0; c < C; c++) {
      p[c] = expf(z[c] - zmax);
      sum += p[c];
    }
    float inv = (float)(1.0 / sum);
    for (int c = 0; c < C; c++) p[c] *= inv;
    total += log(sum) + zmax - z[labels[i]];
  }
  *loss = (float)(total / batch);
  m->have_probs = 1;
  return 0;
}

int mlp_backward(mlp *m, const float *x, const int32_t *labels, int batch, float scale) {
  if (!m || !x || !labels) return fail("mlp_backward: model, input or labels is NULL");
  if (!m->have_probs || batch != m->last_batch)
    return fail("mlp_backward: call mlp_forward and mlp_loss on the same batch first (last "
                "forward had batch %d, backward got %d)",
                m->last_batch, batch);
  int C = m->cfg.num_classes;
  float *d = m->delta[0], *dnext = m->delta[1];
  float k = scale / (float)batch;
  for (int i = 0; i < batch; i++) {
    for (int c = 0; c < C; c++) d[(size_t)i * C + c] = m->probs[(size_t)i * C + c] * k;
    d[(size_t)i * C + labels[i]] -= k;
  }
  for (int l = m->nl; l >= 1; l--) {
    int din = m->dims[l - 1], dout = m->dims[l];
    const mlp_tensor *w = &m->tensors[2 * (l - 1)];
    const float *W = m->params + w->offset;
    float *dW = m->grads + w->offset, *db = m->grads + w[1].offset;
    const float *in = l == 1 ? x : m->act[l - 1];
    for (int i = 0; i < batch; i++) axpy(db, d + (size_t)i * dout, 1.0f, dout);
#ifdef USE_CBLAS
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dout, din, batch, 1.0f, d, dout, in, din,
                1.0f, dW, din);
    if (l > 1)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, din, dout, 1.0f, d, dout, W,
                  din, 0.0f, dnext, din);
#else
    for (int i = 0; i < batch; i++)
      for (int o = 0; o < dout; o++) {
        float g = d[(size_t)i * dout + o];
        if (g != 0.0f) axpy(dW + (size_t)o * din, in + (size_t)i * din, g, din);
      }
    if (l > 1) {
      memset(dnext, 0, (size_t)batch * din * sizeof *dnext);
      for (int i = 0; i < batch; i++)
        for (int o = 0; o < dout; o++) {
          float g = d[(size_t)i * dout + o];
          if (g != 0.0f) axpy(dnext + (size_t)i * din, W + (size_t)o * din, g, din);
        }
    }
#endif
    if (m->hook) m->hook(2 * (l - 1), 2, m->hook_payload); /* weight and bias of layer l are final */
    if (l > 1) {
      size_t n = (size_t)batch * din;
      for (size_t i = 0; i < n; i++)
        if (!(in[i] > 0.0f)) dnext[i] = 0.0f; /* ReLU: in is the ReLU output */
      float *t = d;
      d = dnext;
      dnext = t;
    }
  }
  return 0;
}

void mlp_predict(const mlp *m, int batch, int32_t *pred) {
  if (!m || !pred) return;
  if (batch > m->last_batch) batch = m->last_batch;
  int C = m->cfg.num_classes;
  const float *z = m->act[m->nl];
  for (int i = 0; i < batch; i++) {
    int best = 0;
    for (int c = 1; c < C; c++)
      if (z[(size_t)i * C + c] > z[(size_t)i * C + best]) best = c;
    pred[i] = best;
  }
}

int mlp_count_correct(const mlp *m, const int32_t *labels, int batch) {
  if (!m || !labels) return 0;
  if (batch > m->last_batch) batch = m->last_batch;
  int C = m->cfg.num_classes, correct = 0;
  const float *z = m->act[m->nl];
  for (int i = 0; i < batch; i++) {
    int best = 0;
    for (int c = 1; c < C; c++)
      if (z[(size_t)i * C + c] > z[(size_t)i * C + best]) best = c;
    correct += best == labels[i];
  }
  return correct;
}
