/* A small llm.c-style trainer, written for the porting test (tests/porting/): a next-token model
 * (embedding, then one linear layer to the vocabulary) whose parameters live in one flat
 * allocation, gradients allocated on the first backward pass, its own AdamW with moments
 * allocated on the first update, its own token loader, a validation loss over the first VALW
 * windows every VAL_EVERY steps, an RNG state of its own (a uint64, as llm.c's sampler keeps),
 * printf everywhere. train_ported.c is this file with the library's calls added;
 * test_porting.py counts the difference. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokloader.h"
#include <accelerate.h>

#define V 64
#define C 16
#define T 8
#define NT 3
#define NP (V * C + C * V + V)
#define VALW 16    /* validation windows */
#define VAL_EVERY 4

typedef struct Model {
  size_t param_sizes[NT];              /* as llm.c: the size of each tensor */
  float *params_memory, *grads_memory; /* NP floats each: wte (V x C), fc_w (C x V), fc_b (V) */
  float *probs;                        /* B x T x V, the last forward's softmax */
  int B;
} Model;

typedef struct AdamW {
  float *m, *v; /* allocated on the first update */
  int64_t t;
} AdamW;

static void model_init(Model *m, uint64_t seed) {
  m->param_sizes[0] = V * C, m->param_sizes[1] = C * V, m->param_sizes[2] = V;
  m->params_memory = malloc(NP * sizeof(float));
  m->grads_memory = NULL;
  m->probs = NULL;
  m->B = 0;
  for (int i = 0; i < NP; i++) { /* xorshift, uniform in [-0.1, 0.1) */
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    m->params_memory[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 0.2 - 0.1);
  }
}

static float forward(Model *m, const int *inputs, const int *targets, int B) {
  if (m->B != B) {
    free(m->probs);
    m->probs = malloc((size_t)B * T * V * sizeof(float));
    m->B = B;
  }
  const float *wte = m->params_memory, *fcw = wte + V * C, *fcb = fcw + C * V;
  double loss = 0;
  for (int bt = 0; bt < B * T; bt++) {
    const float *x = wte + inputs[bt] * C;
    float *p = m->probs + (size_t)bt * V, mx = -INFINITY;
    for (int v = 0; v < V; v++) {
      float a = fcb[v];
      for (int c = 0; c < C; c++) a += x[c] * fcw[c * V + v];
      p[v] = a;
      if (a > mx) mx = a;
    }
    float sum = 0;
    for (int v = 0; v < V; v++) sum += p[v] = expf(p[v] - mx);
    for (int v = 0; v < V; v++) p[v] /= sum;
    loss -= log(p[targets[bt]]);
  }
  return (float)(loss / (B * T));
}

static void backward(Model *m, const int *inputs, const int *targets, int B) {
  if (!m->grads_memory) m->grads_memory = malloc(NP * sizeof(float)); /* lazily, as llm.c */
  memset(m->grads_memory, 0, NP * sizeof(float));
  const float *wte = m->params_memory, *fcw = wte + V * C;
  float *dwte = m->grads_memory, *dfcw = dwte + V * C, *dfcb = dfcw + C * V;
  float scale = 1.0f / (float)(B * T);
  for (int bt = 0; bt < B * T; bt++) {
    const float *x = wte + inputs[bt] * C, *p = m->probs + (size_t)bt * V;
    float *dx = dwte + inputs[bt] * C;
    for (int v = 0; v < V; v++) {
      float d = (p[v] - (v == targets[bt] ? 1.0f : 0.0f)) * scale;
      dfcb[v] += d;
      for (int c = 0; c < C; c++) {
        dfcw[c * V + v] += x[c] * d;
        dx[c] += fcw[c * V + v] * d;
      }
    }
  }
}

static void adamw_update(Model *m, AdamW *o, float lr, float b1, float b2, float eps, float wd) {
  if (!o->m) {
    o->m = calloc(NP, sizeof(float));
    o->v = calloc(NP, sizeof(float));
  }
  o->t++;
  float c1 = 1.0f - powf(b1, (float)o->t), c2 = 1.0f - powf(b2, (float)o->t);
  for (int i = 0; i < NP; i++) {
    float g = m->grads_memory[i], *w = &m->params_memory[i];
    o->m[i] = b1 * o->m[i] + (1.0f - b1) * g;
    o->v[i] = b2 * o->v[i] + (1.0f - b2) * g * g;
    *w -= lr * ((o->m[i] / c1) / (sqrtf(o->v[i] / c2) + eps) + wd * *w);
  }
}

/* The loss of each window of a batch (the mean over its T positions). */
static acc_result window_losses(void *ctx, const int *in, const int *tg, int64_t rows, float *losses) {
  Model *m = ctx;
  forward(m, in, tg, (int)rows);
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int t = 0; t < T; t++) s -= log(m->probs[((size_t)r * T + t) * V + tg[r * T + t]]);
    losses[r] = (float)(s / T);
  }
  return 0;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}

static void print_digest(const Model *m, uint64_t rng) {
  double s = 0, s2 = 0, si = 0;
  for (int i = 0; i < NP; i++) {
    double p = m->params_memory[i];
    s += p, s2 += p * p, si += p * (i % 97);
  }
  printf("digest %.17g %.17g %.17g %.17g\n", s, s2, si, (double)(rng >> 11));
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s TOKENS B STEPS\n", argv[0]);
    return 2;
  }
  int B = atoi(argv[2]), steps = atoi(argv[3]);
  acc_accelerator *acc = NULL;
  acc_accelerator_create(&acc, NULL);
  acc_state_silence_non_main_stdout(acc_accelerator_state(acc));
  Model model;
  model_init(&model, 1337);
  acc_param_spec table[NT] = {{"wte", 2, {V, -1}}, {"fc_w", 2, {C, -1}}, {"fc_b", 0, {0}}};
  acc_param_table_from_sizes(table, NT, model.param_sizes);
  acc_accelerator_prepare_flat(acc, table, NT, model.params_memory, NULL, NULL);
  acc_dataloader *dl = NULL, *vdl = NULL;
  acc_accelerator_prepare_tokens(acc, (const char *const *)argv + 1, 1, T, B, &dl);
  acc_accelerator_prepare_tokens_eval(acc, (const char *const *)argv + 1, 1, T, B, VALW, &vdl);
  AdamW opt = {0};
  uint64_t rng = 88172645463325252ull;
  acc_accelerator_register_buffers(acc, "adamw", (acc_named_buffer[]){{"m", ACC_F32, (void **)&opt.m, NP, NULL}, {"v", ACC_F32, (void **)&opt.v, NP, NULL}, {"t", ACC_I64, NULL, 1, &opt.t}, {"rng", ACC_U64, NULL, 1, &rng}}, 4);
  if (argc > 5 && strcmp(argv[5], "resume") == 0) acc_accelerator_load_state(acc, argv[4], NULL);
  int *inputs, *targets;
  double val = 0;
  while (opt.t < steps) {
    acc_accelerator_next_tokens(acc, dl, &inputs, &targets);
    float loss = forward(&model, inputs, targets, B);
    backward(&model, inputs, targets, B);
    acc_model_set_flat_grads(acc_accelerator_model(acc, 0), 0, model.grads_memory);
    acc_accelerator_backward(acc);
    adamw_update(&model, &opt, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f);
    printf("step %lld loss %.9g sample %d\n", (long long)opt.t, loss, (int)(rng_next(&rng) % V));
    if (opt.t % VAL_EVERY == 0 && acc_accelerator_evaluate_tokens(acc, vdl, window_losses, &model, &val, NULL) == ACC_OK)
      printf("val %lld loss %.6f\n", (long long)opt.t, val);
  }
  if (argc > 5 && strcmp(argv[5], "save") == 0) acc_accelerator_save_state(acc, argv[4], NULL);
  print_digest(&model, rng);
  acc_dataloader_destroy(dl);
  acc_dataloader_destroy(vdl);
  acc_accelerator_destroy(acc);
  free(model.params_memory);
  free(model.grads_memory);
  free(model.probs);
  free(opt.m);
  free(opt.v);
  return 0;
}
