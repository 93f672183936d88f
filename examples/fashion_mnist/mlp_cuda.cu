// The MLP on a CUDA GPU (mlp_cuda.h): cuBLAS sgemm for the products, our kernels for the rest.
// Row-major [rows, cols] matrices are cuBLAS column-major [cols, rows]: out[B, dout] = in W^T
// becomes out^T = W^T^T in^T, i.e. sgemm(T, N, dout, B, din, W, din, in, din, out, dout).
#include "mlp_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#define MAXL (MLP_MAX_TENSORS / 2)

struct mlp_cuda {
  int nl, classes, max_batch;
  int dims[MAXL + 1];
  size_t woff[MAXL + 1], boff[MAXL + 1];
  float *params, *grads;    // borrowed
  float *act[MAXL + 1];     // act[l], l >= 1
  float *delta[2];          // [max_batch, widest]
  float *loss;              // device accumulator
  cudaStream_t stream;
  cublasHandle_t blas;
};

static thread_local char err[512];
extern "C" const char *mlp_cuda_last_error(void) { return err; }

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, sizeof err, fmt, ap);
  va_end(ap);
  return -1;
}
#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) return fail("%s: %s", #call, cudaGetErrorString(e_));             \
  } while (0)
#define BK(call)                                                                             \
  do {                                                                                       \
    cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) return fail("%s: cuBLAS status %d", #call, (int)s_);     \
  } while (0)

static unsigned blocks(size_t n, unsigned t) { return (unsigned)((n + t - 1) / t); }

// out[i, o] += b[o], then ReLU when relu.
__global__ void bias_act(float *out, const float *b, int rows, int cols, int relu) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)rows * cols) return;
  float v = out[i] + b[i % cols];
  out[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
}

// One thread per row: softmax, loss into *loss (mean over rows, atomically), and the gradient of
// the loss w.r.t. the logits times k = scale / rows (as mlp_backward).
__global__ void softmax_xent(const float *z, const int32_t *y, int rows, int C, float k,
                             float *d, float *loss) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const float *zi = z + (size_t)i * C;
  float zmax = zi[0];
  for (int c = 1; c < C; c++) zmax = zi[c] > zmax ? zi[c] : zmax;
  double sum = 0.0;
  for (int c = 0; c < C; c++) sum += expf(zi[c] - zmax);
  float inv = (float)(1.0 / sum);
  int label = y[i];
  for (int c = 0; c < C; c++) d[(size_t)i * C + c] = expf(zi[c] - zmax) * inv * k;
  if (label >= 0 && label < C) {
    d[(size_t)i * C + label] -= k;
    atomicAdd(loss, (float)((log(sum) + zmax - zi[label]) / rows));
  }
}

// db[o] += sum over rows of d[i, o] (one thread per column, rows in order: deterministic).
__global__ void bias_grad(const float *d, int rows, int cols, float *db) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= cols) return;
  float s = 0.0f;
  for (int i = 0; i < rows; i++) s += d[(size_t)i * cols + o];
  db[o] += s;
}

// ReLU backward: d[i] = 0 where the layer's output (ReLU'd) was not positive.
__global__ void relu_back(float *d, const float *act, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && !(act[i] > 0.0f)) d[i] = 0.0f;
}

__global__ void hits(const float *z, const int32_t *y, int rows, int C, uint8_t *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const float *zi = z + (size_t)i * C;
  int best = 0;
  for (int c = 1; c < C; c++)
    if (zi[c] > zi[best]) best = c;
  out[i] = best == y[i];
}

extern "C" void mlp_cuda_destroy(mlp_cuda *g) {
  if (!g) return;
  if (g->stream) cudaStreamSynchronize(g->stream);
  for (int l = 0; l <= MAXL; l++) cudaFree(g->act[l]);
  cudaFree(g->delta[0]);
  cudaFree(g->delta[1]);
  cudaFree(g->loss);
  if (g->blas) cublasDestroy(g->blas);
  free(g);
}

extern "C" int mlp_cuda_create(mlp_cuda **out, const mlp *m, float *d_params, float *d_grads,
                               void *stream) {
  *out = nullptr;
  mlp_cuda *g = (mlp_cuda *)calloc(1, sizeof *g);
  if (!g) return fail("mlp_cuda_create: out of memory");
  const mlp_config *cfg = mlp_get_config(m);
  g->nl = mlp_num_tensors(m) / 2;
  g->classes = cfg->num_classes;
  g->max_batch = cfg->max_batch;
  g->params = d_params;
  g->grads = d_grads;
  g->stream = (cudaStream_t)stream;
  size_t widest = 0;
  for (int l = 1; l <= g->nl; l++) {
    const mlp_tensor *w = mlp_tensor_at(m, 2 * (l - 1)), *b = mlp_tensor_at(m, 2 * (l - 1) + 1);
    g->dims[l - 1] = (int)w->shape[1];
    g->dims[l] = (int)w->shape[0];
    g->woff[l] = w->offset;
    g->boff[l] = b->offset;
  }
  for (int l = 0; l <= g->nl; l++)
    if ((size_t)g->dims[l] > widest) widest = (size_t)g->dims[l];
  int rc = 0;
  size_t mb = (size_t)g->max_batch;
  for (int l = 1; l <= g->nl && rc == 0; l++)
    if (cudaMalloc(&g->act[l], mb * (size_t)g->dims[l] * sizeof(float)) != cudaSuccess) rc = -1;
  if (rc == 0 && (cudaMalloc(&g->delta[0], mb * widest * sizeof(float)) != cudaSuccess ||
                  cudaMalloc(&g->delta[1], mb * widest * sizeof(float)) != cudaSuccess ||
                  cudaMalloc(&g->loss, sizeof(float)) != cudaSuccess))
    rc = -1;
  if (rc != 0) {
    mlp_cuda_destroy(g);
    return fail("mlp_cuda_create: cudaMalloc failed: %s", cudaGetErrorString(cudaGetLastError()));
  }
  if (cudaMemsetAsync(g->loss, 0, sizeof(float), g->stream) != cudaSuccess ||
      cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(g->blas, g->stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS) {  // no TF32
    mlp_cuda_destroy(g);
    return fail("mlp_cuda_create: cuBLAS setup failed");
  }
  *out = g;
  return 0;
}

extern "C" int mlp_cuda_forward(mlp_cuda *g, const float *d_x, int batch) {
  if (batch < 1 || batch > g->max_batch)
    return fail("mlp_cuda_forward: batch %d outside 1..%d", batch, g->max_batch);
  const float one = 1.0f, zero = 0.0f;
  const float *in = d_x;
  for (int l = 1; l <= g->nl; l++) {
    int din = g->dims[l - 1], dout = g->dims[l];
    BK(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, dout, batch, din, &one,
                   g->params + g->woff[l], din, in, din, &zero, g->act[l], dout));
    size_t n = (size_t)batch * dout;
    bias_act<<<blocks(n, 256), 256, 0, g->stream>>>(g->act[l], g->params + g->boff[l], batch,
                                                    dout, l < g->nl);
    CK(cudaGetLastError());
    in = g->act[l];
  }
  return 0;
}

extern "C" int mlp_cuda_loss_backward(mlp_cuda *g, const float *d_x, const int32_t *d_labels,
                                      int batch, float scale) {
  const float one = 1.0f, zero = 0.0f;
  int C = g->classes;
  float *d = g->delta[0], *dnext = g->delta[1];
  softmax_xent<<<blocks((size_t)batch, 128), 128, 0, g->stream>>>(
      g->act[g->nl], d_labels, batch, C, scale / (float)batch, d, g->loss);
  CK(cudaGetLastError());
  for (int l = g->nl; l >= 1; l--) {
    int din = g->dims[l - 1], dout = g->dims[l];
    const float *in = l == 1 ? d_x : g->act[l - 1];
    bias_grad<<<blocks((size_t)dout, 128), 128, 0, g->stream>>>(d, batch, dout,
                                                                g->grads + g->boff[l]);
    CK(cudaGetLastError());
    // dW[dout, din] += d^T in: column-major dW^T = in^T d
    BK(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, din, dout, batch, &one, in, din, d, dout,
                   &one, g->grads + g->woff[l], din));
    if (l > 1) {
      // dnext[B, din] = d W: column-major dnext^T = W^T d^T
      BK(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, din, batch, dout, &one,
                     g->params + g->woff[l], din, d, dout, &zero, dnext, din));
      size_t n = (size_t)batch * din;
      relu_back<<<blocks(n, 256), 256, 0, g->stream>>>(dnext, g->act[l - 1], n);
      CK(cudaGetLastError());
      float *t = d;
      d = dnext;
      dnext = t;
    }
  }
  return 0;
}

extern "C" int mlp_cuda_hits(mlp_cuda *g, const int32_t *d_labels, int batch, uint8_t *d_hits) {
  hits<<<blocks((size_t)batch, 128), 128, 0, g->stream>>>(g->act[g->nl], d_labels, batch,
                                                          g->classes, d_hits);
  CK(cudaGetLastError());
  return 0;
}

extern "C" int mlp_cuda_take_loss(mlp_cuda *g, double *sum) {
  float v = 0.0f;
  CK(cudaMemcpyAsync(&v, g->loss, sizeof v, cudaMemcpyDeviceToHost, g->stream));
  CK(cudaMemsetAsync(g->loss, 0, sizeof(float), g->stream));
  CK(cudaStreamSynchronize(g->stream));
  *sum = v;
  return 0;
}
