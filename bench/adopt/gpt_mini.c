/* gpt_mini: a small llm.c-style trainer written for the cost-of-adoption benchmark (issue 19).
 * A GPT without attention: token + position embeddings, L residual MLP blocks (layernorm, C -> 4C,
 * GELU, 4C -> C), a final layernorm and a vocabulary head. All parameters live in one flat
 * allocation laid out as a table of tensors, the gradients in another one allocated on the first
 * backward pass, activations likewise; its own AdamW (moments allocated on the first update), its
 * own loader of token windows over an llm.c-style shard, printf for the log.
 *
 * One source, two programs: built plain (adopt_plain) and with -DPORTED (adopt_ported), which adds
 * the library's calls a port adds (docs/porting.md): the accelerator, the flat table registered
 * with gradients attached after the first backward, the gradient averaging; the program's own
 * loader and optimizer stay. With -DPORTED_TOKENS the ported program also takes the library's
 * token loader. bench/adopt/run.sh compares them.
 *
 * usage: gpt_mini SHARD STEPS [B]        train; prints the median and mean step time
 *        gpt_mini --make-shard SHARD N   writes N synthetic tokens as an llm.c shard */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef PORTED
#include <accelerate.h>
#endif

#define V 512  /* vocabulary */
#define C 128  /* channels */
#define H (4 * C)
#define T 64   /* sequence length */
#define L 2    /* blocks */

/* ---- parameters: one flat buffer, a table of tensors ------------------------------------- */

enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_FCW, P_FCB, P_PRW, P_PRB, P_LNFW, P_LNFB, P_HEAD, NPT };
static const char *const pnames[NPT] = {"wte", "wpe", "ln1w", "ln1b", "fcw", "fcb",
                                        "projw", "projb", "lnfw", "lnfb", "head"};
static size_t psize[NPT];

typedef struct {
  float *wte, *wpe, *ln1w, *ln1b, *fcw, *fcb, *prw, *prb, *lnfw, *lnfb, *head;
} Tensors;

static size_t param_sizes(void) {
  size_t s[NPT] = {V * C, T * C, L * C, L * C, (size_t)L * H * C, L * H, (size_t)L * C * H, L * C, C, C, V * C};
  size_t n = 0;
  for (int i = 0; i < NPT; i++) n += psize[i] = s[i];
  return n;
}

static void point(Tensors *t, float *base) {
  float **f[NPT] = {&t->wte, &t->wpe, &t->ln1w, &t->ln1b, &t->fcw, &t->fcb,
                    &t->prw, &t->prb, &t->lnfw, &t->lnfb, &t->head};
  for (int i = 0; i < NPT; i++) {
    *f[i] = base;
    base += psize[i];
  }
}

/* ---- activations (B*T rows), also one buffer ---------------------------------------------- */

typedef struct {
  float *x;       /* (L+1) x BT x C: the residual stream before each block, and after the last */
  float *ln;      /* L x BT x C: layernorm outputs */
  float *mean, *rstd; /* (L+1) x BT */
  float *pre, *act;   /* L x BT x H: fc outputs before / after GELU */
  float *lnf;     /* BT x C */
  float *probs;   /* BT x V */
} Acts;

typedef struct {
  size_t np;
  float *params, *grads; /* grads: lazily */
  Tensors p, g;
  float *acts_mem, *dacts_mem; /* lazily, sized for B */
  Acts a;
  float *dx, *dln, *dh, *dh2, *dlogits; /* backward scratch, inside dacts_mem */
  int B;
} Model;

static void model_init(Model *m) {
  m->np = param_sizes();
  m->params = malloc(m->np * sizeof(float));
  m->grads = NULL;
  m->acts_mem = m->dacts_mem = NULL;
  m->B = 0;
  point(&m->p, m->params);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < m->np; i++) { /* xorshift64, uniform in [-0.04, 0.04) */
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    m->params[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 0.08 - 0.04);
  }
  for (int l = 0; l < L; l++)
    for (int c = 0; c < C; c++) m->p.ln1w[l * C + c] = 1.0f, m->p.ln1b[l * C + c] = 0.0f;
  for (int c = 0; c < C; c++) m->p.lnfw[c] = 1.0f, m->p.lnfb[c] = 0.0f;
}

static void acts_alloc(Model *m, int B) {
  if (m->B == B) return;
  size_t bt = (size_t)B * T;
  size_t n = (L + 1) * bt * C + L * bt * C + 2 * (L + 1) * bt + 2 * (size_t)L * bt * H + bt * C + bt * V;
  free(m->acts_mem);
  m->acts_mem = malloc(n * sizeof(float));
  float *q = m->acts_mem;
  m->a.x = q, q += (L + 1) * bt * C;
  m->a.ln = q, q += L * bt * C;
  m->a.mean = q, q += (L + 1) * bt;
  m->a.rstd = q, q += (L + 1) * bt;
  m->a.pre = q, q += L * bt * H;
  m->a.act = q, q += L * bt * H;
  m->a.lnf = q, q += bt * C;
  m->a.probs = q;
  free(m->dacts_mem);
  m->dacts_mem = NULL;
  m->B = B;
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* out[r][o] = bias[o] + sum_c in[r][c] * w[o][c]   (w: OC x IC, rows of the output channel) */
static void matmul_forward(float *out, const float *in, const float *w, const float *bias, int R, int IC, int OC) {
#pragma omp parallel for
  for (int r = 0; r < R; r++) {
    const float *x = in + (size_t)r * IC;
    float *y = out + (size_t)r * OC;
    for (int o = 0; o < OC; o++) {
      const float *wr = w + (size_t)o * IC;
      float a = bias ? bias[o] : 0.0f;
      for (int c = 0; c < IC; c++) a += x[c] * wr[c];
      y[o] = a;
    }
  }
}

/* din += dout . w ; dw += dout^T . in ; db += column sums of dout */
static void matmul_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                            int R, int IC, int OC) {
#pragma omp parallel for
  for (int r = 0; r < R; r++) {
    const float *d = dout + (size_t)r * OC;
    float *dx = din + (size_t)r * IC;
    for (int o = 0; o < OC; o++) {
      const float *wr = w + (size_t)o * IC;
      float g = d[o];
      for (int c = 0; c < IC; c++) dx[c] += g * wr[c];
    }
  }
#pragma omp parallel for
  for (int o = 0; o < OC; o++) {
    float *dwr = dw + (size_t)o * IC, sb = 0.0f;
    for (int r = 0; r < R; r++) {
      float g = dout[(size_t)r * OC + o];
      const float *x = in + (size_t)r * IC;
      sb += g;
      for (int c = 0; c < IC; c++) dwr[c] += g * x[c];
    }
    if (db) db[o] += sb;
  }
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w, const float *b,
                              int R) {
  for (int r = 0; r < R; r++) {
    const float *x = in + (size_t)r * C;
    float mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += x[c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    float rs = 1.0f / sqrtf(var / C + 1e-5f);
    float *y = out + (size_t)r * C;
    for (int c = 0; c < C; c++) y[c] = (x[c] - mu) * rs * w[c] + b[c];
    mean[r] = mu, rstd[r] = rs;
  }
}

static void layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                               const float *mean, const float *rstd, int R) {
  for (int r = 0; r < R; r++) {
    const float *x = in + (size_t)r * C, *dy = dout + (size_t)r * C;
    float *dx = din + (size_t)r * C, mu = mean[r], rs = rstd[r];
    float s1 = 0, s2 = 0; /* means of dnorm and dnorm * norm */
    for (int c = 0; c < C; c++) {
      float n = (x[c] - mu) * rs, dn = dy[c] * w[c];
      s1 += dn, s2 += dn * n;
    }
    s1 /= C, s2 /= C;
    for (int c = 0; c < C; c++) {
      float n = (x[c] - mu) * rs, dn = dy[c] * w[c];
      db[c] += dy[c];
      dw[c] += dy[c] * n;
      dx[c] += (dn - s1 - n * s2) * rs;
    }
  }
}

#define GELU_K 0.7978845608f /* sqrt(2/pi) */
static void gelu_forward(float *out, const float *in, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  }
}

static void gelu_backward(float *din, const float *in, const float *dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = in[i], u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
  }
}

/* ---- forward / backward ------------------------------------------------------------------- */

static float forward(Model *m, const int *in, const int *tg, int B) {
  acts_alloc(m, B);
  Tensors *p = &m->p;
  Acts *a = &m->a;
  int R = B * T;
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) a->x[(size_t)r * C + c] = p->wte[in[r] * C + c] + p->wpe[(r % T) * C + c];
  for (int l = 0; l < L; l++) {
    float *x = a->x + (size_t)l * R * C, *xn = x + (size_t)R * C, *ln = a->ln + (size_t)l * R * C;
    float *pre = a->pre + (size_t)l * R * H, *act = a->act + (size_t)l * R * H;
    layernorm_forward(ln, a->mean + l * R, a->rstd + l * R, x, p->ln1w + l * C, p->ln1b + l * C, R);
    matmul_forward(pre, ln, p->fcw + (size_t)l * H * C, p->fcb + l * H, R, C, H);
    gelu_forward(act, pre, (size_t)R * H);
    matmul_forward(xn, act, p->prw + (size_t)l * C * H, p->prb + l * C, R, H, C);
    for (size_t i = 0; i < (size_t)R * C; i++) xn[i] += x[i];
  }
  layernorm_forward(a->lnf, a->mean + L * R, a->rstd + L * R, a->x + (size_t)L * R * C, p->lnfw, p->lnfb, R);
  matmul_forward(a->probs, a->lnf, p->head, NULL, R, C, V);
  double loss = 0;
  for (int r = 0; r < R; r++) {
    float *z = a->probs + (size_t)r * V, mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) s += z[v] = expf(z[v] - mx);
    for (int v = 0; v < V; v++) z[v] /= s;
    loss -= logf(z[tg[r]]);
  }
  return (float)(loss / R);
}

/* Placement experiments (bench/adopt/run.sh, docs/PERFORMANCE.md): ADOPT_GRADS_SHIFT=k puts the
 * gradients k floats past the start of their block, ADOPT_EARLY_GRADS=1 allocates them before the
 * first forward pass (what a port had to do when gradients had to exist at registration). */
static float *grads_block;
static void grads_alloc(Model *m) {
  const char *e = getenv("ADOPT_GRADS_SHIFT");
  size_t shift = e ? (size_t)atol(e) : 0;
  grads_block = malloc((m->np + shift) * sizeof(float));
  m->grads = grads_block + shift;
  point(&m->g, m->grads);
}

static void backward(Model *m, const int *in, const int *tg, int B) {
  int R = B * T;
  if (!m->grads) grads_alloc(m); /* lazily, on the first backward pass, as llm.c does */
  if (!m->dacts_mem) {
    size_t n = 2 * (size_t)R * C + 2 * (size_t)R * H + (size_t)R * V;
    m->dacts_mem = malloc(n * sizeof(float));
    m->dx = m->dacts_mem, m->dln = m->dx + (size_t)R * C, m->dh = m->dln + (size_t)R * C;
    m->dh2 = m->dh + (size_t)R * H, m->dlogits = m->dh2 + (size_t)R * H;
  }
  memset(m->grads, 0, m->np * sizeof(float));
  Tensors *p = &m->p, *g = &m->g;
  Acts *a = &m->a;
  for (int r = 0; r < R; r++) {
    const float *z = a->probs + (size_t)r * V;
    float *dz = m->dlogits + (size_t)r * V;
    for (int v = 0; v < V; v++) dz[v] = (z[v] - (v == tg[r] ? 1.0f : 0.0f)) / (float)R;
  }
  memset(m->dln, 0, (size_t)R * C * sizeof(float));
  matmul_backward(m->dln, g->head, NULL, m->dlogits, a->lnf, p->head, R, C, V);
  memset(m->dx, 0, (size_t)R * C * sizeof(float));
  layernorm_backward(m->dx, g->lnfw, g->lnfb, m->dln, a->x + (size_t)L * R * C, p->lnfw, a->mean + L * R,
                     a->rstd + L * R, R);
  for (int l = L - 1; l >= 0; l--) { /* dx holds d(x_{l+1}); it flows to x_l through the residual */
    float *x = a->x + (size_t)l * R * C, *ln = a->ln + (size_t)l * R * C;
    float *pre = a->pre + (size_t)l * R * H, *act = a->act + (size_t)l * R * H;
    memset(m->dh, 0, (size_t)R * H * sizeof(float));
    matmul_backward(m->dh, g->prw + (size_t)l * C * H, g->prb + l * C, m->dx, act, p->prw + (size_t)l * C * H, R, H, C);
    gelu_backward(m->dh2, pre, m->dh, (size_t)R * H);
    memset(m->dln, 0, (size_t)R * C * sizeof(float));
    matmul_backward(m->dln, g->fcw + (size_t)l * H * C, g->fcb + l * H, m->dh2, ln, p->fcw + (size_t)l * H * C, R, C, H);
    layernorm_backward(m->dx, g->ln1w + l * C, g->ln1b + l * C, m->dln, x, p->ln1w + l * C, a->mean + l * R,
                       a->rstd + l * R, R);
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      float d = m->dx[(size_t)r * C + c];
      g->wte[in[r] * C + c] += d;
      g->wpe[(r % T) * C + c] += d;
    }
}

/* ---- AdamW ---------------------------------------------------------------------------------- */

typedef struct {
  float *m, *v; /* on the first update */
  int64_t t;
} AdamW;

static void adamw_step(AdamW *o, float *w, const float *g, size_t n, float lr) {
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.0f;
  if (!o->m) {
    o->m = calloc(n, sizeof(float));
    o->v = calloc(n, sizeof(float));
  }
  o->t++;
  float c1 = 1.0f - powf(b1, (float)o->t), c2 = 1.0f - powf(b2, (float)o->t);
  for (size_t i = 0; i < n; i++) {
    o->m[i] = b1 * o->m[i] + (1.0f - b1) * g[i];
    o->v[i] = b2 * o->v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr * ((o->m[i] / c1) / (sqrtf(o->v[i] / c2) + eps) + wd * w[i]);
  }
}

/* ---- the program's own loader: windows of T+1 tokens of an llm.c shard, in order ----------- */

#ifndef PORTED_TOKENS

typedef struct {
  uint16_t *tok;
  long n, pos;
  int B, *in, *tg;
} Loader;

static int loader_open(Loader *ld, const char *path, int B) {
  FILE *f = fopen(path, "rb");
  int32_t hdr[256];
  if (!f || fread(hdr, sizeof hdr, 1, f) != 1 || hdr[0] != 20240520) {
    fprintf(stderr, "%s: not an llm.c token shard (make one with --make-shard)\n", path);
    if (f) fclose(f);
    return -1;
  }
  ld->n = hdr[2];
  ld->tok = malloc((size_t)ld->n * sizeof(uint16_t));
  if (ld->n < (long)B * T + 1 || fread(ld->tok, sizeof(uint16_t), (size_t)ld->n, f) != (size_t)ld->n) {
    fprintf(stderr, "%s: %ld tokens, fewer than claimed or fewer than one batch (%d)\n", path, ld->n, B * T + 1);
    fclose(f);
    return -1;
  }
  fclose(f);
  ld->pos = 0;
  ld->B = B;
  ld->in = malloc((size_t)B * T * sizeof(int));
  ld->tg = malloc((size_t)B * T * sizeof(int));
  return 0;
}

static void loader_next(Loader *ld) {
  if (ld->pos + (long)ld->B * T + 1 > ld->n) ld->pos = 0;
  for (int i = 0; i < ld->B * T; i++) {
    ld->in[i] = ld->tok[ld->pos + i];
    ld->tg[i] = ld->tok[ld->pos + i + 1];
  }
  ld->pos += (long)ld->B * T;
}
#endif

static int make_shard(const char *path, long n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    return 1;
  }
  int32_t hdr[256] = {20240520, 1, (int32_t)n};
  fwrite(hdr, sizeof hdr, 1, f);
  uint64_t s = 88172645463325252ull;
  uint16_t prev = 1;
  for (long i = 0; i < n; i++) { /* a learnable stream: mostly a function of the previous token */
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint16_t t = (s % 4) ? (uint16_t)((prev * 7 + 3) % V) : (uint16_t)(s % V);
    fwrite(&t, sizeof t, 1, f);
    prev = t;
  }
  return fclose(f) == 0 ? 0 : 1;
}

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }
static double cpu_ms(void) { return clock_ms(CLOCK_PROCESS_CPUTIME_ID); } /* every thread of the process */

/* the SSE control word: flush-to-zero and denormals-are-zero as the process computes with them */
static unsigned mxcsr(void) {
#if defined(__SSE__)
  return __builtin_ia32_stmxcsr();
#else
  return 0;
#endif
}

/* the process's thread count and allowed CPUs as the kernel sees them, read during the run */
static void proc_status(char *threads, char *cpus, size_t n) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  snprintf(threads, n, "?");
  snprintf(cpus, n, "?");
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (strncmp(line, "Threads:", 8) == 0) snprintf(threads, n, "%s", line + 8 + strspn(line + 8, " \t"));
    if (strncmp(line, "Cpus_allowed_list:", 18) == 0) snprintf(cpus, n, "%s", line + 18 + strspn(line + 18, " \t"));
  }
  if (f) fclose(f);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--make-shard") == 0) return make_shard(argv[2], atol(argv[3]));
  if (argc < 3) {
    fprintf(stderr, "usage: %s SHARD STEPS [B] | --make-shard SHARD N\n", argv[0]);
    return 2;
  }
  int steps = atoi(argv[2]), B = argc > 3 ? atoi(argv[3]) : 8;
  if (steps < 1 || B < 1) {
    fprintf(stderr, "STEPS and B must be positive\n");
    return 2;
  }
#ifdef PORTED
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, NULL) != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
#endif
  Model model;
  model_init(&model);
  if (getenv("ADOPT_EARLY_GRADS") && atoi(getenv("ADOPT_EARLY_GRADS"))) grads_alloc(&model);
#ifdef PORTED
  acc_param_spec table[NPT];
  for (int i = 0; i < NPT; i++) table[i] = (acc_param_spec){pnames[i], 1, {(int64_t)psize[i]}};
  if (acc_accelerator_prepare_flat(acc, table, NPT, model.params, NULL, NULL) != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
#else
  (void)pnames;
#endif
#ifdef PORTED_TOKENS
  acc_dataloader *dl = NULL;
  if (acc_accelerator_prepare_tokens(acc, (const char *const *)argv + 1, 1, T, B, &dl) != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
  int *inputs, *targets;
#else
  Loader ld;
  if (loader_open(&ld, argv[1], B) != 0) return 1;
#endif
  AdamW opt = {0};
  double *ms = malloc((size_t)steps * sizeof(double)), *cpu = malloc((size_t)steps * sizeof(double));
  double t_all = now_ms();
  float loss = 0;
  double lib_ms = 0; /* wall time inside the library's per-step calls */
  char threads[64], cpus[64];
  struct rusage ru0, ru1;
  for (int s = 0; s < steps; s++) {
    if (s == 1) getrusage(RUSAGE_SELF, &ru0);
    double t0 = now_ms(), c0 = cpu_ms();
#ifdef PORTED_TOKENS
    acc_accelerator_next_tokens(acc, dl, &inputs, &targets);
#else
    loader_next(&ld);
    int *inputs = ld.in, *targets = ld.tg;
#endif
    loss = forward(&model, inputs, targets, B);
    backward(&model, inputs, targets, B);
#ifdef PORTED
    double l0 = now_ms();
    acc_model_set_flat_grads(acc_accelerator_model(acc, 0), 0, model.grads);
    if (acc_accelerator_backward(acc) != ACC_OK) {
      fprintf(stderr, "%s\n", acc_last_error());
      return 1;
    }
    lib_ms += now_ms() - l0;
#endif
    adamw_step(&opt, model.params, model.grads, model.np, 1e-3f);
    ms[s] = now_ms() - t0;
    cpu[s] = cpu_ms() - c0;
    if (s == steps - 1) proc_status(threads, cpus, sizeof threads);
    if (s % 10 == 0 || s == steps - 1) printf("step %d loss %.6f %.2f ms\n", s, loss, ms[s]);
  }
  t_all = now_ms() - t_all;
  getrusage(RUSAGE_SELF, &ru1);
  if (steps == 1) ru0 = ru1;
  /* the first step allocates and faults everything in: the steady state is the rest */
  int w = steps > 1 ? 1 : 0, n = steps - w;
  qsort(ms + w, (size_t)n, sizeof(double), cmp_d);
  qsort(cpu + w, (size_t)n, sizeof(double), cmp_d);
  printf("params %zu B %d T %d steps %d final_loss %.6f\n", model.np, B, T, steps, loss);
  /* wall time per step, CPU time per step (all threads of the process), and what the steps after
   * the first cost in page faults and context switches (none expected in a steady state) */
  printf("median_step_ms %.4f median_step_cpu_ms %.4f first_step_ms %.4f loop_ms %.1f\n", ms[w + n / 2],
         cpu[w + n / 2], ms[0], t_all);
  /* where the buffers landed: glibc serves large blocks with mmap (page offset 16) unless its
   * mmap threshold was raised by an earlier free of a large mmapped block (then from the heap) */
  printf("addr params %p grads %p acts %p dacts %p adam_m %p adam_v %p\n", (void *)model.params, (void *)model.grads,
         (void *)model.acts_mem, (void *)model.dacts_mem, (void *)opt.m, (void *)opt.v);
  printf("library_ms_per_step %.5f mxcsr 0x%x threads %s cpus %s\n", lib_ms / steps, mxcsr(), threads, cpus);
  printf("steady_minflt %ld steady_majflt %ld steady_nvcsw %ld steady_nivcsw %ld\n", ru1.ru_minflt - ru0.ru_minflt,
         ru1.ru_majflt - ru0.ru_majflt, ru1.ru_nvcsw - ru0.ru_nvcsw, ru1.ru_nivcsw - ru0.ru_nivcsw);
#ifdef PORTED_TOKENS
  acc_dataloader_destroy(dl);
#else
  free(ld.tok), free(ld.in), free(ld.tg);
#endif
#ifdef PORTED
  acc_accelerator_destroy(acc);
#endif
  free(ms), free(cpu), free(model.params), free(grads_block), free(model.acts_mem), free(model.dacts_mem);
  free(opt.m), free(opt.v);
  return 0;
}
