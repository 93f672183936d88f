/* A small decoder-only transformer (GPT) over tokens (bytes by default), forward and backward written in plain C.
 *
 *   x      = tok_emb[token] + pos_emb[position]
 *   block  : x += proj(causal_self_attention(ln1(x)));  x += mlp.proj(gelu(mlp.fc(ln2(x))))
 *   logits = ln_f(x) . tok_emb^T              (the output projection is the token embedding)
 *   loss   = mean cross-entropy of the next token
 *
 * All parameters live in one contiguous float buffer and all gradients in another, tensor after
 * tensor in the order and under the names a PyTorch module of the same shape would use
 * (tok_emb.weight, pos_emb.weight, blocks.0.ln1.weight, ..., ln_f.bias), so each tensor can be
 * registered with acc_model_add_parameter. Activations are allocated once for max_batch rows
 * of block_size tokens.
 *
 * Independent of libaccelerate: fallible functions return 0 or -1 with the reason in
 * gpt_last_error(). Built with USE_CBLAS, the matrix products call cblas_sgemm. */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_config {
  int vocab_size; /* 256 for bytes */
  int block_size; /* context length: the longest sequence forward accepts */
  int n_layer;    /* transformer blocks */
  int n_head;     /* attention heads; must divide n_embd */
  int n_embd;     /* width */
  int max_batch;  /* most sequences per forward (activations are sized once) */
} gpt_config;

/** One parameter tensor inside the contiguous buffers. */
typedef struct gpt_tensor {
  char name[48];   /* "blocks.0.attn.qkv.weight", ... */
  size_t offset;   /* index of its first float in gpt_params() / gpt_grads() */
  size_t numel;
  int ndim;        /* 2 for matrices [out, in] and embeddings [rows, width], 1 otherwise */
  int64_t shape[2];
  int is_matrix;   /* 1 for the weights of linear layers (the ones weight decay applies to) */
} gpt_tensor;

typedef struct gpt gpt;

/* Called during gpt_backward each time some tensors' gradients are final, in backward order
 * (ln_f first, then the blocks from last to first, the embeddings last): tensors
 * [first, first + count) of gpt_tensor_at. Lets a caller start reducing them early. */
typedef void (*gpt_grad_hook)(int first, int count, void *payload);
void gpt_set_grad_hook(gpt *m, gpt_grad_hook hook, void *payload);

/** Allocates the model (parameters zero until gpt_init). Ownership: gpt_destroy. */
int gpt_create(gpt **out, const gpt_config *cfg);
/** The same without parameter or gradient buffers of the model's own (gpt_params() and
 *  gpt_grads() are NULL): the program runs it unit by unit over buffers it gives each piece
 *  (gpt_forward_embed ...: a sharded trainer, whose library holds the parameters). */
int gpt_create_external(gpt **out, const gpt_config *cfg);
void gpt_destroy(gpt *m);

const gpt_config *gpt_get_config(const gpt *m);
size_t gpt_num_params(const gpt *m);
/** The contiguous parameter / gradient buffers (gpt_num_params floats). Borrowed. */
float *gpt_params(gpt *m);
float *gpt_grads(gpt *m);
/** Moves the gradients into the program's buffer of gpt_num_params floats (e.g. memory from
 * acc_accelerator_alloc_shared), which stays the program's to free after gpt_destroy. 0 or -1. */
int gpt_use_grads(gpt *m, float *grads);
int gpt_num_tensors(const gpt *m);
/** Tensor i (< gpt_num_tensors), or NULL. Borrowed. */
const gpt_tensor *gpt_tensor_at(const gpt *m, int i);

/** GPT-2's initialization: weights and embeddings normal(0, 0.02), the two residual output
 *  projections of each block normal(0, 0.02 / sqrt(2 n_layer)), biases 0, norms 1 and 0.
 *  Same seed, same parameters everywhere. Zeroes the gradients. */
void gpt_init(gpt *m, uint64_t seed);
/** The same initial values written into dst (gpt_num_params floats, laid out as gpt_params()):
 *  for a model of gpt_create_external. */
void gpt_init_params(const gpt *m, uint64_t seed, float *dst);
void gpt_zero_grad(gpt *m);

/**
 * bf16 compute (what autocast does to these operations): when on, the operands and results of
 * every matrix product are rounded to bfloat16; norms, softmax, GELU, the loss, the residual
 * stream and the gradients stay float32. Weights are read from `weights` (laid out as
 * gpt_params, e.g. the parameters rounded to bf16, refreshed by the caller after each update);
 * NULL reads gpt_params(). Off by default.
 */
void gpt_set_bf16(gpt *m, int on, const float *weights);

/** bf16 mode with oneDNN: the weights already rounded to bf16 (uint16 bit patterns, laid out as
 *  gpt_params, e.g. acc_precision_copy_params' copy), read instead of converting the float
 *  weights at every product; NULL converts them. The caller keeps them current. */
void gpt_set_bf16_half(gpt *m, const uint16_t *half);

/** How bf16 mode computes: "off"; with oneDNN (gemm_dnnl.h) the products of the linear layers
 *  and of the output projection, forward and backward, run in bf16 through it (their backward
 *  operands are rounded to bf16 too, as under autocast); without it, or with the environment
 *  variable GPT_BF16_DNNL=0, the rounded operands go to float32 sgemm. Borrowed. */
const char *gpt_bf16_backend(const gpt *m);

/** Operations of a training step, as gpt_profile counts them (forward and backward apart). */
enum {
  GPT_OP_EMBED, GPT_OP_LAYERNORM, GPT_OP_QKV, GPT_OP_ATTENTION, GPT_OP_ATTN_PROJ, GPT_OP_FC, GPT_OP_GELU,
  GPT_OP_MLP_PROJ, GPT_OP_RESIDUAL, GPT_OP_LOGITS, GPT_OP_LOSS, GPT_OP_COUNT
};
/** The name of operation op ("qkv", "attention", ...). */
const char *gpt_op_name(int op);
/** Per-operation profile (bench/gpt/ops_bench.c): with sec non-NULL (2 x GPT_OP_COUNT doubles,
 *  forward at [op], backward at [GPT_OP_COUNT + op]) every later forward, loss and backward adds
 *  each operation's thread CPU seconds there; NULL turns it off (the default). */
void gpt_profile(gpt *m, double *sec);

/**
 * Forward pass of batch sequences of T tokens (1 <= T <= block_size): token t of sequence b is
 * tokens[b * stride + t], in 0..vocab_size-1 (the int32 inputs of acc_dataset_create_tokens).
 * Keeps the activations for gpt_backward; logits at gpt_logits().
 */
int gpt_forward(gpt *m, const int32_t *tokens, int batch, int T, size_t stride);
/** Logits of the last forward, [batch * T, vocab_size]. Borrowed; gpt_loss overwrites them. */
const float *gpt_logits(const gpt *m);

/**
 * Unit by unit (a sharded trainer, docs/fsdp.md): the same computation as gpt_forward and
 * gpt_backward, in the pieces that run between acc_fsdp_unit_*_begin and _end, each reading its
 * tensors from a buffer laid out like its rows of gpt_params():
 *   emb   tok_emb.weight, pos_emb.weight          (the embedding; tok_emb is also the head's
 *                                                  output projection: one unit for both uses)
 *   block blocks.<l>.ln1.weight ... mlp.proj.bias  (gpt_tensor_at(2 + 12 l) onwards)
 *   lnf   ln_f.weight, ln_f.bias
 * The backward pieces ADD scale * d(mean loss)/d(param) into gradient buffers laid out the same
 * way. Order: gpt_forward_embed, gpt_forward_block 0..n_layer-1, gpt_forward_head, gpt_loss,
 * gpt_backward_head, gpt_backward_block n_layer-1..0, gpt_backward_embed (out of order: -1 and a
 * message). In bf16 mode (gpt_set_bf16(m, 1, NULL), without gpt_set_bf16_half) each piece rounds
 * its unit's matrices to bf16 itself, as gpt_forward reads them from a rounded copy; norms, biases
 * and gradients stay float32. The arithmetic is gpt_forward's / gpt_backward's.
 */
int gpt_forward_embed(gpt *m, const int32_t *tokens, int batch, int T, size_t stride, const float *emb);
int gpt_forward_block(gpt *m, int layer, const float *block);
int gpt_forward_head(gpt *m, const float *lnf, const float *emb);
int gpt_backward_head(gpt *m, float scale, const float *lnf, float *lnf_grad, const float *emb, float *emb_grad);
int gpt_backward_block(gpt *m, int layer, const float *block, float *block_grad);
int gpt_backward_embed(gpt *m, float *emb_grad);

/** A forward pass as gpt_generate runs it: fn (e.g. the unit-by-unit forward of a sharded trainer,
 *  which every process then runs, since its gathers are collective) instead of gpt_forward; NULL
 *  restores gpt_forward. fn returns 0 or -1. */
typedef int (*gpt_forward_fn)(gpt *m, const int32_t *tokens, int batch, int T, size_t stride, void *payload);
void gpt_set_forward(gpt *m, gpt_forward_fn fn, void *payload);

/**
 * Cross-entropy of the last forward against targets (target of token (b, t) is
 * targets[b * stride + t]): *loss gets the mean over all batch * T tokens, row_loss (may be
 * NULL) the mean of each sequence. Keeps the probabilities for gpt_backward.
 */
int gpt_loss(gpt *m, const int32_t *targets, size_t stride, float *loss, float *row_loss);

/**
 * Backward pass of the last gpt_forward + gpt_loss: ADDS scale * d(mean loss)/d(param) to the
 * gradients (accumulation). The accelerator passes 1/gradient_accumulation_steps.
 */
int gpt_backward(gpt *m, float scale);

/**
 * Appends n bytes to text (len bytes of prompt already there, len >= 1; text holds len + n),
 * each drawn from the softmax of the logits / temperature given the last block_size bytes.
 * Byte models only (vocab_size <= 256).
 * Uses the activation buffers (the last forward is lost).
 */
int gpt_generate(gpt *m, uint8_t *text, int len, int n, float temperature, uint64_t seed);

/** What computes the matrix products: "OpenBLAS, <core> kernels, <n> thread(s)" or "plain C
 *  loops". Several processes on one machine want 1 thread each (accelerate launch sets
 *  OPENBLAS_NUM_THREADS=1 for them unless it is already set). OpenBLAS
 *  names the kernels it chose for this CPU; "Prescott" on a recent CPU means it did not recognize
 *  it and fell back to its slowest kernels (set OPENBLAS_CORETYPE, see docs/examples.md). */
const char *gpt_matmul_backend(void);

/** Why the last gpt_* call on this thread failed. Never NULL. */
const char *gpt_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
