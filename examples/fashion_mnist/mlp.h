/* A multi-layer perceptron classifier: Linear -> ReLU -> ... -> Linear, softmax cross-entropy.
 *
 * All parameters live in one contiguous float buffer and all gradients in another, laid out
 * tensor after tensor in PyTorch's order and naming (fc1.weight [hidden, in], fc1.bias [hidden],
 * fc2.weight, ...), so each tensor can be registered with acc_model_add_parameter. Activation
 * buffers are allocated once for a maximum batch size.
 *
 * Independent of libaccelerate: fallible functions return 0 or -1 with the reason in
 * mlp_last_error(). Built with USE_CBLAS, the matrix products call cblas_sgemm. */
#ifndef FMNIST_MLP_H
#define FMNIST_MLP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLP_MAX_TENSORS 32

typedef struct mlp_config {
  int input_dim;         /* 784 for 28x28 images */
  int hidden_dim;        /* width of every hidden layer (256) */
  int num_hidden_layers; /* 0..15 (1); 0 gives a linear classifier */
  int num_classes;       /* 10 */
  int max_batch;         /* largest batch passed to forward/backward (activations sized once) */
} mlp_config;

#define MLP_CONFIG_DEFAULT {784, 256, 1, 10, 256}

/** One parameter tensor inside the contiguous buffers. */
typedef struct mlp_tensor {
  char name[32];   /* "fc1.weight", "fc1.bias", ... */
  size_t offset;   /* index of its first float in mlp_params() / mlp_grads() */
  size_t numel;
  int ndim;        /* 2 for weights [out, in], 1 for biases [out] */
  int64_t shape[2];
} mlp_tensor;

typedef struct mlp mlp;

/* Called during mlp_backward each time a layer's gradients are final (last layer first):
 * tensors [first, first+count) of mlp_tensor_at. Lets a caller start reducing them early. */
typedef void (*mlp_grad_hook)(int first, int count, void *payload);
void mlp_set_grad_hook(mlp *m, mlp_grad_hook hook, void *payload);

/** Allocates the model (parameters zero until mlp_init). Ownership: free with mlp_destroy. */
int mlp_create(mlp **out, const mlp_config *cfg);
void mlp_destroy(mlp *m);

const mlp_config *mlp_get_config(const mlp *m);
/** Total number of parameters (floats). */
size_t mlp_num_params(const mlp *m);
/** The contiguous parameter / gradient buffers (mlp_num_params floats). Borrowed. */
float *mlp_params(mlp *m);
float *mlp_grads(mlp *m);
/**
 * Makes the model compute on caller-owned parameter and gradient buffers (mlp_num_params floats
 * each, borrowed; they must outlive the model or be switched back with NULL, NULL): the
 * own buffers' contents are not copied. Used by a program that keeps its parameters in memory
 * the accelerator gave it (on the fake device: inside acc_accelerator_host_kernel, the only place
 * host code may touch its memory). Returns 0, or -1 when
 * only one of the two is NULL.
 */
int mlp_use_buffers(mlp *m, float *params, float *grads);
/** Number of parameter tensors: 2 * (num_hidden_layers + 1). */
int mlp_num_tensors(const mlp *m);
/** Tensor i (< mlp_num_tensors), or NULL. Borrowed. */
const mlp_tensor *mlp_tensor_at(const mlp *m, int i);

/**
 * Initializes like PyTorch's nn.Linear: weights and biases uniform in [-1/sqrt(in), 1/sqrt(in)]
 * (Kaiming-uniform with a = sqrt(5)), drawn from a generator seeded with seed. Same seed, same
 * parameters on every machine. Zeroes the gradients.
 */
void mlp_init(mlp *m, uint64_t seed);
void mlp_zero_grad(mlp *m);

/**
 * Forward pass for batch rows of x ([batch, input_dim], row-major); keeps the activations for
 * mlp_backward. 1 <= batch <= max_batch. The logits are then at mlp_logits().
 */
int mlp_forward(mlp *m, const float *x, int batch);
/** Logits of the last forward, [batch, num_classes]. Borrowed. */
const float *mlp_logits(const mlp *m);

/**
 * Mean softmax cross-entropy of the last forward's logits against labels (0..num_classes-1).
 * Also keeps the softmax probabilities for mlp_backward.
 */
int mlp_loss(mlp *m, const int32_t *labels, int batch, float *loss);

/**
 * Backward pass of the last mlp_forward + mlp_loss (same x, labels and batch): ADDS
 * scale * d(mean loss)/d(param) to the gradients (accumulation). The accelerator passes
 * 1/gradient_accumulation_steps times the loss scale.
 */
int mlp_backward(mlp *m, const float *x, const int32_t *labels, int batch, float scale);

/** Argmax class of each row of the last forward. pred has batch entries. */
void mlp_predict(const mlp *m, int batch, int32_t *pred);
/** Number of rows whose argmax equals the label. */
int mlp_count_correct(const mlp *m, const int32_t *labels, int batch);

/** Why the last mlp_* call on this thread failed. Never NULL. */
const char *mlp_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
