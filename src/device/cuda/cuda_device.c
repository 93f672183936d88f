/* The CUDA device module (libaccelerate-cuda.so), host side, C11 against the CUDA runtime. The
 * core library loads it with dlopen only when a CUDA device is asked for, and reaches it only
 * through the ops table returned by acc_device_cuda_ops_v1 (device_ops.h). Kernels are in
 * kernels.cu, NCCL in nccl.c, errors in cuda_errors.c.
 *
 * NOT YET RUN ON A GPU: this file compiles and runs its no-driver paths on a machine without a
 * GPU; everything past cudaGetDeviceCount has not been executed. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device/cuda/cuda_module.h"

#define CK(call, what) ACC_CHECK((acc_result)acc__cuda_check((call), (what)))

static int set_dev(const acc__cuda_ctx *c) {
  return acc__cuda_check(cudaSetDevice(c->dev), "cudaSetDevice");
}

/* ---- probe, open, close ------------------------------------------------------------------- */

/* The number of GPUs, or why there are none, in words a user without a GPU can act on. */
static int count_gpus(int *n, int *driver, int *runtime) {
  *n = 0;
  cudaRuntimeGetVersion(runtime);
  if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
  cudaError_t e = cudaGetDeviceCount(n);
  if (e == cudaErrorInsufficientDriver && *driver == 0)
    return acc__cuda_fail(ACC_ERR_NOT_SUPPORTED,
                          "no CUDA driver: the NVIDIA driver (libcuda.so.1) is not installed or "
                          "cannot be loaded (cudaGetDeviceCount: %s)",
                          cudaGetErrorString(e));
  if (e == cudaErrorInsufficientDriver)
    return acc__cuda_fail(ACC_ERR_NOT_SUPPORTED,
                          "the CUDA driver is too old: it supports CUDA %d.%d, the module was "
                          "built with CUDA %d.%d",
                          *driver / 1000, *driver % 1000 / 10, *runtime / 1000,
                          *runtime % 1000 / 10);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && *n == 0))
    return acc__cuda_fail(ACC_ERR_NOT_SUPPORTED,
                          "no CUDA GPU: the driver sees none (check CUDA_VISIBLE_DEVICES)");
  return acc__cuda_check(e, "cudaGetDeviceCount");
}

static int probe(acc__device_probe_info *info) {
  info->nccl_version = acc__cuda_nccl_version();
  int n = 0;
  ACC_CHECK((acc_result)count_gpus(&n, &info->driver_version, &info->runtime_version));
  info->device_count = n;
  for (int i = 0; i < n && i < ACC__MAX_GPUS; i++) {
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, i), "cudaGetDeviceProperties");
    acc__gpu_info *g = &info->gpus[i];
    snprintf(g->name, sizeof g->name, "%s", p.name);
    g->total_mem = p.totalGlobalMem;
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    if (cudaDeviceGetPCIBusId(g->pci_bus_id, (int)sizeof g->pci_bus_id, i) != cudaSuccess)
      snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "unknown");
  }
  return ACC_OK;
}

static int dev_open(int ordinal, void **ctx) {
  int n = 0, driver = 0, runtime = 0;
  ACC_CHECK((acc_result)count_gpus(&n, &driver, &runtime));
  if (ordinal < 0 || ordinal >= n)
    return acc__cuda_fail(ACC_ERR_INVALID_ARGUMENT,
                          "cuda:%d does not exist: %d GPU(s) visible (CUDA_VISIBLE_DEVICES limits "
                          "them)",
                          ordinal, n);
  CK(cudaSetDevice(ordinal), "cudaSetDevice");
  acc__cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) return acc__cuda_fail(ACC_ERR_NOMEM, "out of host memory");
  c->dev = ordinal;
  *ctx = c;
  return ACC_OK;
}

static void dev_close(void *ctx) {
  acc__cuda_ctx *c = ctx;
  if (!c) return;
  if (set_dev(c) == ACC_OK) cudaDeviceSynchronize();
  free(c);
}

/* ---- memory ------------------------------------------------------------------------------- */

static int dev_alloc(void *ctx, size_t bytes, void **p) {
  ACC_CHECK((acc_result)set_dev(ctx));
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  if (e == cudaErrorMemoryAllocation) {
    size_t free_b = 0, total = 0;
    (void)cudaGetLastError();
    cudaMemGetInfo(&free_b, &total);
    return acc__cuda_fail(ACC_ERR_NOMEM,
                          "cudaMalloc of %zu bytes failed: out of GPU memory (%zu of %zu bytes "
                          "free)",
                          bytes, free_b, total);
  }
  return acc__cuda_check(e, "cudaMalloc");
}

static int dev_free(void *ctx, void *p) { return acc__cuda_check(cudaFree(p), "cudaFree"); }

/* Page-locked host memory: the staging buffers of the data loader and of host-staged
 * collectives, so that copies from and to it are real asynchronous DMA transfers. */
static int host_alloc(void *ctx, size_t bytes, void **p) {
  ACC_CHECK((acc_result)set_dev(ctx));
  cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return acc__cuda_fail(ACC_ERR_NOMEM, "cudaMallocHost of %zu bytes failed: out of pinned memory",
                          bytes);
  }
  return acc__cuda_check(e, "cudaMallocHost");
}

static int host_free(void *ctx, void *p) {
  return acc__cuda_check(cudaFreeHost(p), "cudaFreeHost");
}

static int is_device_ptr(void *ctx, const void *p, int *yes) {
  struct cudaPointerAttributes a;
  *yes = 0;
  if (!p) return ACC_OK;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return ACC_OK; /* not memory CUDA knows: a host pointer */
  }
  *yes = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  return ACC_OK;
}

/* ---- streams and events ------------------------------------------------------------------- */

static int stream_create(void *ctx, void **s) {
  ACC_CHECK((acc_result)set_dev(ctx));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  *s = st;
  return ACC_OK;
}
static int stream_destroy(void *ctx, void *s) {
  CK(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return acc__cuda_check(cudaStreamDestroy(s), "cudaStreamDestroy");
}
static int stream_sync(void *ctx, void *s) {
  return acc__cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}
static int event_create(void *ctx, void **e) {
  ACC_CHECK((acc_result)set_dev(ctx));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  *e = ev;
  return ACC_OK;
}
static int event_destroy(void *ctx, void *e) {
  return acc__cuda_check(cudaEventDestroy(e), "cudaEventDestroy");
}
static int event_record(void *ctx, void *e, void *s) {
  return acc__cuda_check(cudaEventRecord(e, s), "cudaEventRecord");
}
static int stream_wait(void *ctx, void *s, void *e) {
  return acc__cuda_check(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
}
static int event_sync(void *ctx, void *e) {
  return acc__cuda_check(cudaEventSynchronize(e), "cudaEventSynchronize");
}
static int event_query(void *ctx, void *e, int *done) {
  cudaError_t r = cudaEventQuery(e);
  *done = r == cudaSuccess;
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return ACC_OK;
  }
  return acc__cuda_check(r, "cudaEventQuery");
}

static int copy(void *ctx, void *dst, const void *src, size_t bytes, int kind, void *s) {
  static const enum cudaMemcpyKind k[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                          cudaMemcpyDeviceToDevice};
  if (!bytes) return ACC_OK;
  return acc__cuda_check(cudaMemcpyAsync(dst, src, bytes, k[kind], s), "cudaMemcpyAsync");
}
static int memset_(void *ctx, void *dst, int value, size_t bytes, void *s) {
  if (!bytes) return ACC_OK;
  return acc__cuda_check(cudaMemsetAsync(dst, value, bytes, s), "cudaMemsetAsync");
}

/* ---- kernels (launchers in kernels.cu) ---------------------------------------------------- */

#define LAUNCH(call, what)                                  \
  do {                                                      \
    ACC_CHECK((acc_result)set_dev(ctx));                    \
    CK((call), what);                                       \
    return acc__cuda_check(cudaGetLastError(), what);       \
  } while (0)

static int sgd(void *ctx, const acc__sgd_args *a, void *s) {
  if (!a->n) return ACC_OK;
  LAUNCH(acc__cuda_launch_sgd(a, s), "sgd kernel");
}
static int adamw(void *ctx, const acc__adamw_args *a, void *s) {
  if (!a->n) return ACC_OK;
  LAUNCH(acc__cuda_launch_adamw(a, s), "adamw kernel");
}
static int unscale(void *ctx, float *g, size_t n, float inv, int32_t *flag, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_unscale(g, n, inv, flag, s), "unscale kernel");
}
static int norm_partials(void *ctx, const float *g, size_t n, double *partials, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_norm_partials(g, n, partials, s), "norm partials kernel");
}
static int norm_finish(void *ctx, const double *partials, size_t count, float max_norm,
                       float *norm, float *coef, void *s) {
  LAUNCH(acc__cuda_launch_norm_finish(partials, count, max_norm, norm, coef, s),
         "norm finish kernel");
}
static int scale(void *ctx, float *buf, size_t n, const float *coef, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_scale(buf, n, coef, s), "scale kernel");
}
static int cast(void *ctx, uint16_t *dst, const float *src, size_t n, int dtype, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_cast(dst, src, n, dtype == ACC_BF16, s), "cast kernel");
}

static int widen(void *ctx, float *dst, const uint16_t *src, size_t n, int dtype, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_widen(dst, src, n, dtype == ACC_BF16, s), "widen kernel");
}

static int clamp(void *ctx, float *buf, size_t n, float clip, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_clamp(buf, n, clip, s), "clamp kernel");
}
static int round_f16(void *ctx, float *buf, size_t n, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_round_f16(buf, n, s), "round_f16 kernel");
}

static int axpy(void *ctx, float *dst, const float *src, size_t n, float a, void *s) {
  if (!n) return ACC_OK;
  LAUNCH(acc__cuda_launch_axpy(dst, src, n, a, s), "axpy kernel");
}

static const acc__device_ops ops = {
    ACC__DEVICE_ABI_VERSION, sizeof(acc__device_ops), "cuda", acc__cuda_last_error, probe,
    dev_open, dev_close, dev_alloc, dev_free, is_device_ptr, stream_create, stream_destroy,
    stream_sync, event_create, event_destroy, event_record, stream_wait, event_sync, event_query,
    copy, memset_, sgd, adamw, unscale, norm_partials, norm_finish, scale, cast,
#ifdef ACC_CUDA_HAVE_NCCL
    acc__nccl_unique_id, acc__nccl_init, acc__nccl_all_reduce, acc__nccl_wait, acc__nccl_destroy,
#else
    NULL, NULL, NULL, NULL, NULL,
#endif
    clamp, round_f16, host_alloc, host_free,
#ifdef ACC_CUDA_HAVE_NCCL
    acc__nccl_check, acc__nccl_abort,
#else
    NULL, NULL,
#endif
    widen,
    NULL, /* host_kernel: host code never reaches GPU memory */
    axpy,
#ifdef ACC_CUDA_HAVE_NCCL
    acc__nccl_all_gather, acc__nccl_reduce_scatter,
#else
    NULL, NULL,
#endif
};

__attribute__((visibility("default"))) const acc__device_ops *acc_device_cuda_ops_v1(void) {
  return &ops;
}
