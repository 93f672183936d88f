/* The GPT example under FSDP (accelerate launch --use_fsdp, docs/fsdp.md): the units, the
 * forward and backward unit by unit, the decay of the matrices on the shards, and the checkpoint
 * hooks. main.c is the training loop; this file is what a sharded trainer adds to it.
 *
 * The units: the embedding (tok_emb, pos_emb), each block, and ln_f. tok_emb is also the head's
 * output projection (tied weights live in one unit), so the embedding unit stays gathered from the
 * embedding's forward to the head's, and from the head's backward to the embedding's (torch's root
 * unit does the same); it is small next to a block. The model keeps no parameters or gradients of
 * its own (gpt_create_external): each piece runs over the unit buffers the library gathers. */
#ifndef GPT_FSDP_H
#define GPT_FSDP_H

#include <accelerate.h>

#include "model.h"

typedef struct fsdp_run {
  acc_fsdp *f;
  gpt *net;
  int L; /* units: 0 the embedding, 1 + l block l, L + 1 ln_f */
  acc_model *shards; /* acc_fsdp_model: one parameter per unit, this process's shard */
  acc_dtype dtype;   /* the table's: ACC_F32, or ACC_BF16 / ACC_F16 (16-bit gathers, float32 masters) */
  size_t n_emb, n_block, n_lnf; /* elements of the units */
  float *emb_p, *emb_g, *cur_p, *cur_g; /* 16-bit tables: the units widened to float32 for the model */
} fsdp_run;

/** 1 when `accelerate launch --use_fsdp` (ACCELERATE_USE_FSDP) asks for sharded training. */
int fsdp_wanted(void);

/** Called with the full initial parameters while they exist (--save-init); 0 or -1. */
typedef int (*fsdp_init_fn)(const float *init, size_t n, void *arg);

/** The units over the model's table, prepared from the initial parameters of `seed` (the same on
 *  every process; a full copy exists only during this call). dtype: the table's (ACC_F32, or
 *  ACC_BF16 / ACC_F16: the library gathers 16-bit values over float32 master shards, and the
 *  pieces compute in float32 over a widened copy of each unit). 0, or -1 with a message printed. */
int fsdp_setup(acc_accelerator *acc, fsdp_run *r, gpt *net, uint64_t seed, acc_dtype dtype, fsdp_init_fn on_init,
               void *arg);
/** Destroys the FSDP state (after the optimizer over its shards) and the scratch buffers. */
void fsdp_release(fsdp_run *r);
/** The forward, unit by unit (a gpt_forward_fn: also gpt_generate's forward; payload: fsdp_run). */
int fsdp_forward(gpt *net, const int32_t *tokens, int batch, int T, size_t stride, void *payload);
/** The backward in reverse; each unit's gradients are reduce-scattered as its backward ends. */
int fsdp_backward(fsdp_run *r, float scale);
/** AdamW's decoupled decay (w *= 1 - lr * wd) on this process's part of every matrix row. */
int fsdp_decay(fsdp_run *r, double lr, double wd);
/** "FULL_SHARD", ... */
const char *fsdp_strategy_name(const fsdp_run *r);

/** The save_state / load_state pre-hooks: the shards and the optimizer's state in <checkpoint>/fsdp. */
typedef struct fsdp_ckpt {
  fsdp_run *run;
  acc_optimizer *opt;
} fsdp_ckpt;
acc_result fsdp_save_hook(acc_accelerator *acc, const char *dir, void *payload);
acc_result fsdp_load_hook(acc_accelerator *acc, const char *dir, void *payload);

#endif
