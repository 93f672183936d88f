/* The device ops table: the one boundary between the core library and a device implementation
 * (cpu, fake, and the CUDA module libaccelerate-cuda.so). Not API; compiled into the module, so
 * it depends on nothing but the C library and the public dtype/result enums.
 *
 * A module exports one symbol, acc_device_<name>_ops_v1 (ACC__DEVICE_OPS_SYMBOL), a function
 * returning a pointer to its table. The table starts with abi_version (ACC__DEVICE_ABI_VERSION)
 * and size (sizeof the table the module was built with), so the loader refuses a module of
 * another version and later versions may append members. Every int-returning member returns an
 * acc_result; on failure the module's last_error() holds a one-line message for this thread. */
#ifndef ACC_DEVICE_OPS_H
#define ACC_DEVICE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "accelerate/common.h"

#define ACC__DEVICE_ABI_VERSION 8u
#define ACC__DEVICE_OPS_SYMBOL(name) "acc_device_" name "_ops_v1"
#define ACC__NORM_CHUNK 4096 /* elements per partial sum of squares */
#define ACC__NCCL_ID_BYTES 128
#define ACC__MAX_GPUS 16

typedef enum acc__copy_kind {
  ACC__COPY_H2D = 0, /* host to device */
  ACC__COPY_D2H = 1, /* device to host */
  ACC__COPY_D2D = 2  /* device to device */
} acc__copy_kind;

/* One SGD step over n elements, the arithmetic of acc_optimizer_step (set the constants with
 * acc__sgd_args_set). buf is the momentum buffer (unused when momentum is 0). Optional device
 * scalars: grad_scale multiplies each gradient first (clip coefficient; NULL: none), skip_if
 * (int32) makes the kernel do nothing when nonzero (an overflow found by acc__device_unscale). */
typedef struct acc__sgd_args {
  float *w;
  const float *g;
  float *buf;
  size_t n;
  float neg_lr, wd, mom, damp1;
  int has_momentum, decay, nesterov, first;
  const float *grad_scale;
  const int32_t *skip_if;
} acc__sgd_args;

/* One AdamW step (decoupled weight decay), the arithmetic of acc_optimizer_step; the bias
 * corrections are computed on the host by acc__adamw_args_set. m, v: first and second moments. */
typedef struct acc__adamw_args {
  float *w;
  const float *g;
  float *m, *v;
  size_t n;
  float decay, w1, b2, c2, neg_step_size, bc2s, eps;
  const float *grad_scale;
  const int32_t *skip_if;
} acc__adamw_args;

typedef struct acc__gpu_info {
  char name[256];
  size_t total_mem;
  int cc_major, cc_minor;
  char pci_bus_id[32];
} acc__gpu_info;

typedef struct acc__device_probe_info {
  char module_path[1024]; /* the module file that was loaded ("" when none) */
  int runtime_version;    /* CUDA runtime the module was built with, e.g. 13000 */
  int driver_version;     /* 0: no driver */
  int nccl_version;       /* 0: module built without NCCL */
  int device_count;
  acc__gpu_info gpus[ACC__MAX_GPUS];
} acc__device_probe_info;

typedef struct acc__device_ops {
  uint32_t abi_version; /* first: ACC__DEVICE_ABI_VERSION */
  uint32_t size;        /* sizeof(acc__device_ops) in the module */
  const char *name;
  const char *(*last_error)(void); /* NULL: the implementation sets acc_last_error() itself */
  int (*probe)(acc__device_probe_info *info);
  int (*open)(int ordinal, void **ctx);
  void (*close)(void *ctx);
  int (*alloc)(void *ctx, size_t bytes, void **p);
  int (*free)(void *ctx, void *p);
  int (*is_device_ptr)(void *ctx, const void *p, int *yes);
  int (*stream_create)(void *ctx, void **s);
  int (*stream_destroy)(void *ctx, void *s);
  int (*stream_sync)(void *ctx, void *s);
  int (*event_create)(void *ctx, void **e);
  int (*event_destroy)(void *ctx, void *e);
  int (*event_record)(void *ctx, void *e, void *s);
  int (*stream_wait)(void *ctx, void *s, void *e);
  int (*event_sync)(void *ctx, void *e);
  int (*event_query)(void *ctx, void *e, int *done);
  int (*copy)(void *ctx, void *dst, const void *src, size_t bytes, int kind, void *s);
  int (*memset)(void *ctx, void *dst, int value, size_t bytes, void *s);
  int (*sgd)(void *ctx, const acc__sgd_args *a, void *s);
  int (*adamw)(void *ctx, const acc__adamw_args *a, void *s);
  int (*unscale)(void *ctx, float *g, size_t n, float inv_scale, int32_t *found_inf, void *s);
  int (*norm_partials)(void *ctx, const float *g, size_t n, double *partials, void *s);
  int (*norm_finish)(void *ctx, const double *partials, size_t count, float max_norm,
                     float *norm, float *coef, void *s);
  int (*scale)(void *ctx, float *buf, size_t n, const float *coef, void *s);
  int (*cast)(void *ctx, uint16_t *dst, const float *src, size_t n, int dtype, void *s);
  /* NCCL (all NULL when the module was built without it). Compiled, not yet run on a GPU. */
  int (*nccl_unique_id)(uint8_t id[ACC__NCCL_ID_BYTES]);
  /* Non-blocking init bounded by timeout_s; on failure or timeout the communicator is aborted. */
  int (*nccl_init)(void *ctx, void **comm, int nranks, int rank,
                   const uint8_t id[ACC__NCCL_ID_BYTES], double timeout_s);
  /* The collectives (all_reduce here, all_gather and reduce_scatter below) return once their
   * work is queued on s (a non-blocking communicator's ncclInProgress is polled out first), so
   * an event recorded on s next marks their end. */
  int (*nccl_all_reduce)(void *ctx, void *comm, const void *send, void *recv, size_t count,
                         int dtype, int op, void *s);
  /* Waits for s, polling the communicator's asynchronous error; aborts it on error/timeout. */
  int (*nccl_wait)(void *ctx, void *comm, void *s, double timeout_s);
  int (*nccl_destroy)(void *ctx, void *comm, int abort);
  /* ABI 2: buf[i] = clamp(buf[i], -clip, clip) (NaN stays NaN); buf[i] rounded to fp16 and back
   * (what fp16 gradients hold). */
  int (*clamp)(void *ctx, float *buf, size_t n, float clip, void *s);
  int (*round_f16)(void *ctx, float *buf, size_t n, void *s);
  /* ---- ABI 3 ---- */
  /* Page-locked host memory for staging copies (CUDA: cudaMallocHost / cudaFreeHost). NULL: the
   * device has none (cpu, fake); acc__device_host_alloc then uses ordinary host memory. */
  int (*host_alloc)(void *ctx, size_t bytes, void **p);
  int (*host_free)(void *ctx, void *p);
  /* ---- ABI 4: the watchdog (src/device/watchdog.h); NULL without NCCL ---- */
  /* ACC_OK, or the communicator's asynchronous error (last_error holds it). Any thread; makes
   * the communicator's GPU current in the calling thread. */
  int (*nccl_check)(void *ctx, void *comm);
  /* ncclCommAbort: the operations in flight end; the communicator is unusable afterwards (its
   * calls fail, nccl_destroy only frees). Never concurrently with a call issuing on it. */
  int (*nccl_abort)(void *ctx, void *comm);
  /* ---- ABI 5: bf16/fp16 tables with float32 master weights (src/train/typed.c) ---- */
  /* dst[i] = src[i] widened to fp32 (dtype ACC_BF16 or ACC_F16): exact, the bits of
   * acc_bf16_to_f32 / acc_f16_to_f32. The reverse direction is `cast`. */
  int (*widen)(void *ctx, float *dst, const uint16_t *src, size_t n, int dtype, void *s);
  /* ---- ABI 6 ---- */
  /* Runs fn(arg) on the host as the device's kernel: after everything queued, with the device's
   * memory readable and writable by host code for the duration of the call (cpu: fn(arg); fake:
   * its memory is otherwise unreachable from host code). NULL: host code can never reach the
   * device's memory (CUDA). */
  int (*host_kernel)(void *ctx, void (*fn)(void *), void *arg);
  /* ---- ABI 7: FSDP on a device (src/train/fsdp_mem.c) ---- */
  /* dst[i] = dst[i] + src[i] * a (no fused multiply-add: acc__k_axpy), the reduce-scatter's
   * averaged gradient added into the gradient shard. */
  int (*axpy)(void *ctx, float *dst, const float *src, size_t n, float a, void *s);
  /* ---- ABI 8: FSDP's collectives on device memory (src/device/dcomm.c); NULL without NCCL ---- */
  /* recv (count x nranks elements) = every rank's send (count elements) in rank order; in place
   * when send == recv + rank x count. Queued on s; nccl_wait completes it. */
  int (*nccl_all_gather)(void *ctx, void *comm, const void *send, void *recv, size_t count,
                         int dtype, void *s);
  /* recv (count elements) = op over the ranks of block `rank` of send (count x nranks elements);
   * in place when recv == send + rank x count. Queued on s; nccl_wait completes it. */
  int (*nccl_reduce_scatter)(void *ctx, void *comm, const void *send, void *recv, size_t count,
                             int dtype, int op, void *s);
} acc__device_ops;

/* The entry point a module exports under ACC__DEVICE_OPS_SYMBOL. */
typedef const acc__device_ops *(*acc__device_ops_fn)(void);

#endif
