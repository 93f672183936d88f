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

/* The forward, unit by unit (also gpt_generate's forward: every process runs it). */
int fsdp_forward(gpt *net, const int32_t *tokens, int batch, int T, size_t stride, void *payload) {
  fsdp_run *r = payload;
  const float *emb, *p;
  FSDP_TRY(acc_fsdp_unit_forward_begin(r->f, 0, &emb));
  FSDP_MODEL(gpt_forward_embed(net, tokens, batch, T, stride, emb));
  for (int l = 0; l < r->L; l++) {
    FSDP_TRY(acc_fsdp_unit_forward_begin(r->f, (size_t)(1 + l), &p));
    FSDP_MODEL(gpt_forward_block(net, l, p));
    FSDP_TRY(acc_fsdp_unit_forward_end(r->f, (size_t)(1 + l)));
  }
  FSDP_TRY(acc_fsdp_unit_forward_begin(r->f, (size_t)(r->L + 1), &p));
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
  FSDP_TRY(acc_fsdp_unit_backward_begin(r->f, 0, &emb, &gemb));
  FSDP_TRY(acc_fsdp_unit_backward_begin(r->f, (size_t)(r->L + 1), &p, &g));
  FSDP_MODEL(gpt_backward_head(r->net, scale, p, g, emb, gemb));
  FSDP_TRY(acc_fsdp_unit_backward_end(r->f, (size_t)(r->L + 1)));
  for (int l = r->L - 1; l >= 0; l--) {
    FSDP_TRY(acc_fsdp_unit_backward_begin(r->f, (size_t)(1 + l), &p, &g));
    FSDP_MODEL(gpt_backward_block(r->net, l, p, g));
    FSDP_TRY(acc_fsdp_unit_backward_end(r->f, (size_t)(1 + l)));
  }
  FSDP_MODEL(gpt_backward_embed(r->net, gemb));
  FSDP_TRY(acc_fsdp_unit_backward_end(r->f, 0));
  return 0;
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
int fsdp_setup(acc_accelerator *acc, fsdp_run *r, gpt *net, uint64_t seed, fsdp_init_fn on_init, void *arg) {
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
  FSDP_TRY(acc_fsdp_create(acc, table, (size_t)nt, ACC_F32, NULL, &r->f));
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
