/* The GPT example under FSDP: see fsdp.h and docs/fsdp.md. */
#include "fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int fsdp_wanted(void) {
  const char *e = getenv("ACCELERATE_USE_FSDP");
  return e && (!strcasecmp(e, "true") || !strcmp(e, "1") || !strcasecmp(e, "yes"));
}

#define FSDP_TRY(call)                                                     \
  do {                                                                     \
    if ((call) != ACC_OK) {                                                \
      fprintf(stderr, "gpt: %s failed: %s\n", #call, acc_last_error());    \
      return -1;                                                           \
    }                                                                      \
  } while (0)
#define FSDP_MODEL(call)                                \
  do {                                                  \
    if ((call) != 0) {                                  \
      fprintf(stderr, "gpt: %s\n", gpt_last_error());   \
      return -1;                                        \
    }                                                   \
  } while (0)

/* A 16-bit table (--param-dtype bf16 / fp16): the library gathers the unit in 16 bits; the
 * model's pieces compute in float32, so each unit is widened (exactly) into a float scratch buffer
 * of the run's (one for the embedding unit, which stays gathered across the blocks, one for the
 * unit at hand). In backward the piece adds its float32 gradient into a zeroed float scratch, and
 * the sum is then added into the library's 16-bit gradient buffer in 16-bit arithmetic (g16 =
 * round(g16 + g), round to nearest even): what a trainer with 16-bit gradient buffers does. */
static void widen(const fsdp_run *r, float *dst, const void *src, size_t n) {
  if (r->dtype == ACC_BF16) acc_bf16_to_f32(dst, src, n);
  else acc_f16_to_f32(dst, src, n);
}

static void add_into_16(const fsdp_run *r, void *g16, const float *g, size_t n) {
  uint16_t *h = g16;
  float tmp[256];
  for (size_t i = 0; i < n; i += 256) {
    const size_t k = n - i < 256 ? n - i : 256;
    widen(r, tmp, h + i, k);
    for (size_t j = 0; j < k; j++) tmp[j] += g[i + j];
    if (r->dtype == ACC_BF16) acc_f32_to_bf16(h + i, tmp, k);
    else acc_f32_to_f16(h + i, tmp, k);
  }
}

static size_t unit_numel(const fsdp_run *r, size_t u) {
  return u == 0 ? r->n_emb : u == (size_t)(r->L + 1) ? r->n_lnf : r->n_block;
}

static int fwd_begin(fsdp_run *r, size_t u, float *scratch, const float **p) {
  if (r->dtype == ACC_F32) {
    FSDP_TRY(acc_fsdp_unit_forward_begin(r->f, u, p));
    return 0;
  }
  const void *p16;
  FSDP_TRY(acc_fsdp_unit_forward_begin_typed(r->f, u, r->dtype, &p16));
  widen(r, scratch, p16, unit_numel(r, u));
  *p = scratch;
  return 0;
}

/* *g16: the library's 16-bit gradient buffer (16-bit tables), for bwd_end */
static int bwd_begin(fsdp_run *r, size_t u, float *ps, float *gs, const float **p, float **g, void **g16) {
  if (r->dtype == ACC_F32) {
    FSDP_TRY(acc_fsdp_unit_backward_begin(r->f, u, p, g));
    return 0;
  }
  const void *p16;
  FSDP_TRY(acc_fsdp_unit_backward_begin_typed(r->f, u, r->dtype, &p16, g16));
  const size_t n = unit_numel(r, u);
  widen(r, ps, p16, n);
  memset(gs, 0, n * sizeof *gs);
  *p = ps;
  *g = gs;
  return 0;
}

static int bwd_end(fsdp_run *r, size_t u, void *g16, const float *gs) {
  if (r->dtype != ACC_F32) add_into_16(r, g16, gs, unit_numel(r, u));
  FSDP_TRY(acc_fsdp_unit_backward_end(r->f, u));
  return 0;
}

/* The forward, unit by unit (also gpt_generate's forward: every process runs it). */
int fsdp_forward(gpt *net, const int32_t *tokens, int batch, int T, size_t stride, void *payload) {
  fsdp_run *r = payload;
  const float *emb, *p;
  if (fwd_begin(r, 0, r->emb_p, &emb)) return -1;
  FSDP_MODEL(gpt_forward_embed(net, tokens, batch, T, stride, emb));
  for (int l = 0; l < r->L; l++) {
    if (fwd_begin(r, (size_t)(1 + l), r->cur_p, &p)) return -1;
    FSDP_MODEL(gpt_forward_block(net, l, p));
    FSDP_TRY(acc_fsdp_unit_forward_end(r->f, (size_t)(1 + l)));
  }
  if (fwd_begin(r, (size_t)(r->L + 1), r->cur_p, &p)) return -1;
  FSDP_MODEL(gpt_forward_head(net, p, emb));
  FSDP_TRY(acc_fsdp_unit_forward_end(r->f, (size_t)(r->L + 1)));
  FSDP_TRY(acc_fsdp_unit_forward_end(r->f, 0));
  return 0;
}

/* The backward in reverse: each unit's gradients are reduce-scattered into the shards as its
 * backward ends. */
int fsdp_backward(fsdp_run *r, float scale) {
  const float *emb, *p;
  float *gemb, *g;
  void *gemb16 = NULL, *g16 = NULL;
  const size_t head = (size_t)(r->L + 1);
  if (bwd_begin(r, 0, r->emb_p, r->emb_g, &emb, &gemb, &gemb16) ||
      bwd_begin(r, head, r->cur_p, r->cur_g, &p, &g, &g16))
    return -1;
  FSDP_MODEL(gpt_backward_head(r->net, scale, p, g, emb, gemb));
  if (bwd_end(r, head, g16, g)) return -1;
  for (int l = r->L - 1; l >= 0; l--) {
    if (bwd_begin(r, (size_t)(1 + l), r->cur_p, r->cur_g, &p, &g, &g16)) return -1;
    FSDP_MODEL(gpt_backward_block(r->net, l, p, g));
    if (bwd_end(r, (size_t)(1 + l), g16, g)) return -1;
  }
  FSDP_MODEL(gpt_backward_embed(r->net, gemb));
  return bwd_end(r, 0, gemb16, gemb);
}

/* Weight decay on the matrices only. The optimizer over the shards has one group (docs/fsdp.md),
 * so it runs with weight_decay 0 and this applies AdamW's decoupled decay, w *= 1 - lr * wd (the
 * optimizer's own first operation, in the same float arithmetic), to this process's part of each
 * matrix row, just before the step. */
int fsdp_decay(fsdp_run *r, double lr, double wd) {
  if (wd == 0.0) return 0;
  const float decay = (float)(1.0 - lr * wd);
  for (int i = 0; i < gpt_num_tensors(r->net); i++) {
    const gpt_tensor *t = gpt_tensor_at(r->net, i);
    if (!t->is_matrix) continue;
    size_t unit, off, lo, hi;
    FSDP_TRY(acc_fsdp_row_location(r->f, (size_t)i, &unit, &off));
    FSDP_TRY(acc_fsdp_shard_range(r->f, unit, &lo, &hi));
    size_t a = off > lo ? off : lo, b = off + t->numel < hi ? off + t->numel : hi;
    float *w = acc_model_parameter(r->shards, unit)->data;
    for (size_t k = a; k < b; k++) w[k - lo] = w[k - lo] * decay;
  }
  return 0;
}

/* Checkpoints: the shards and the optimizer's state go into <checkpoint>/fsdp (each process writes
 * its own file, fsdp_state_dict_type), through save_state's pre-hook, so that the accelerator's
 * checkpoint (loaders, scheduler, RNG, counters) and the shards are one directory, renamed into
 * place when both are written. */

acc_result fsdp_save_hook(acc_accelerator *acc, const char *dir, void *payload) {
  (void)acc;
  fsdp_ckpt *c = payload;
  char path[4200];
  snprintf(path, sizeof path, "%s/fsdp", dir);
  return acc_fsdp_save_state(c->run->f, c->opt, path);
}

acc_result fsdp_load_hook(acc_accelerator *acc, const char *dir, void *payload) {
  (void)acc;
  fsdp_ckpt *c = payload;
  char path[4200];
  snprintf(path, sizeof path, "%s/fsdp", dir);
  return acc_fsdp_load_state(c->run->f, c->opt, path);
}

/* The units over the model's table, prepared from the initial parameters (the same seed on every
 * process; a full copy exists only during this call). */
int fsdp_setup(acc_accelerator *acc, fsdp_run *r, gpt *net, uint64_t seed, acc_dtype dtype, fsdp_init_fn on_init,
               void *arg) {
  const int nt = gpt_num_tensors(net), L = gpt_get_config(net)->n_layer;
  acc_param_spec *table = calloc((size_t)nt, sizeof *table);
  float *init = malloc(gpt_num_params(net) * sizeof *init);
  if (!table || !init) {
    fprintf(stderr, "gpt: out of memory for the FSDP table\n");
    return -1;
  }
  for (int i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(net, i);
    table[i].name = t->name;
    table[i].ndim = t->ndim;
    table[i].shape[0] = t->shape[0];
    table[i].shape[1] = t->shape[1];
  }
  r->net = net;
  r->L = L;
  r->dtype = dtype;
  for (int i = 0; i < nt; i++) {
    const size_t n = gpt_tensor_at(net, i)->numel;
    if (i < 2) r->n_emb += n;
    else if (i < 2 + 12) r->n_block += n; /* every block has the same size */
    else if (i >= 2 + 12 * L) r->n_lnf += n;
  }
  if (dtype != ACC_F32) {
    const size_t cur = r->n_block > r->n_lnf ? r->n_block : r->n_lnf;
    r->emb_p = malloc(r->n_emb * sizeof(float));
    r->emb_g = malloc(r->n_emb * sizeof(float));
    r->cur_p = malloc(cur * sizeof(float));
    r->cur_g = malloc(cur * sizeof(float));
    if (!r->emb_p || !r->emb_g || !r->cur_p || !r->cur_g) {
      fprintf(stderr, "gpt: out of memory for the FSDP unit scratch buffers\n");
      return -1;
    }
  }
  FSDP_TRY(acc_fsdp_create(acc, table, (size_t)nt, dtype, NULL, &r->f));
  FSDP_TRY(acc_fsdp_add_unit(r->f, "embed", 0, 2, NULL));
  for (int l = 0; l < L; l++) {
    char name[32];
    snprintf(name, sizeof name, "blocks.%d", l);
    FSDP_TRY(acc_fsdp_add_unit(r->f, name, (size_t)(2 + 12 * l), 12, NULL));
  }
  FSDP_TRY(acc_fsdp_add_unit(r->f, "ln_f", (size_t)(2 + 12 * L), 2, NULL));
  gpt_init_params(net, seed, init);
  if (on_init && on_init(init, gpt_num_params(net), arg)) return -1;
  FSDP_TRY(acc_fsdp_prepare(r->f, init));
  free(init); /* where the memory is saved: from here on this process holds its shards only */
  free(table);
  r->shards = acc_fsdp_model(r->f);
  return 0;
}

const char *fsdp_strategy_name(const fsdp_run *r) {
  switch (acc_fsdp_strategy(r->f)) {
  case ACC_FSDP_FULL_SHARD: return "FULL_SHARD";
  case ACC_FSDP_SHARD_GRAD_OP: return "SHARD_GRAD_OP";
  case ACC_FSDP_HYBRID_SHARD: return "HYBRID_SHARD";
  case ACC_FSDP_HYBRID_SHARD_ZERO2: return "HYBRID_SHARD_ZERO2";
  default: return "NO_SHARD";
  }
}

void fsdp_release(fsdp_run *r) {
  acc_fsdp_destroy(r->f);
  free(r->emb_p);
  free(r->emb_g);
  free(r->cur_p);
  free(r->cur_g);
  *r = (fsdp_run){0};
}
