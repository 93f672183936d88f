/* The MLP of mlp.h on a CUDA GPU: the same layers and arithmetic, matrix products with cuBLAS
 * sgemm (TF32 off: full fp32), the element-wise parts (bias, ReLU, softmax cross-entropy, bias
 * gradients, argmax) in kernels of mlp_cuda.cu. Parameters and gradients are device buffers laid
 * out as mlp_params()/mlp_grads() of the host model (same tensor offsets), owned by the caller;
 * everything is queued on one CUDA stream (the accelerator's compute stream), nothing waits.
 *
 * Built only when CUDA is available (FMNIST_HAVE_CUDA), loaded only when asked for; fallible functions return 0 or -1 with
 * the reason in mlp_cuda_last_error(). Compiled on a machine without a GPU; not yet run on one. */
#ifndef FMNIST_MLP_CUDA_H
#define FMNIST_MLP_CUDA_H

#include <stdint.h>

#include "mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA part is a module (libfmnist_cuda.so) that fashion_mnist dlopens only when it trains
 * on a GPU (mlp_cuda_load.c), so a CPU run maps no CUDA library. Inside the module the functions
 * carry the names below; the program calls the mlp_cuda_* forwarders of mlp_cuda_load.c. */
#ifdef FMNIST_CUDA_MODULE
#define mlp_cuda_create fmnist_module_create
#define mlp_cuda_destroy fmnist_module_destroy
#define mlp_cuda_forward fmnist_module_forward
#define mlp_cuda_loss_backward fmnist_module_loss_backward
#define mlp_cuda_hits fmnist_module_hits
#define mlp_cuda_take_loss fmnist_module_take_loss
#define mlp_cuda_last_error fmnist_module_last_error
#endif

typedef struct mlp_cuda mlp_cuda;

/** Shapes from the host model m; d_params/d_grads: device buffers of mlp_num_params(m) floats;
 *  stream: a cudaStream_t. Activations are allocated for the model's max_batch. */
int mlp_cuda_create(mlp_cuda **out, const mlp *m, float *d_params, float *d_grads, void *stream);
void mlp_cuda_destroy(mlp_cuda *g);
/** Forward of d_x [batch, input_dim] (device). */
int mlp_cuda_forward(mlp_cuda *g, const float *d_x, int batch);
/** Softmax cross-entropy of the last forward against d_labels (device int32), its mean added to
 *  a device loss accumulator, then the backward pass: ADDS scale * d(mean loss)/d(param) to the
 *  gradients (as mlp_backward). */
int mlp_cuda_loss_backward(mlp_cuda *g, const float *d_x, const int32_t *d_labels, int batch,
                           float scale);
/** d_hits[i] = 1 when row i's argmax equals d_labels[i] (device buffers, batch entries). */
int mlp_cuda_hits(mlp_cuda *g, const int32_t *d_labels, int batch, uint8_t *d_hits);
/** Waits for the stream, returns the loss accumulator (sum of batch means) and resets it. */
int mlp_cuda_take_loss(mlp_cuda *g, double *sum);
const char *mlp_cuda_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
