/* The device layer: one internal interface over the memory, streams, events and training kernels
 * of a compute device. Not API. Three implementations:
 *   - cpu:  host memory, every operation runs at once on the calling thread;
 *   - fake: host memory behind the same rules as a GPU (device pointers come from a tracked arena,
 *           copies are explicit, operations queue per stream and run at synchronization points,
 *           a use of a buffer that another stream has not finished with is refused);
 *   - cuda: the CUDA module (libaccelerate-cuda.so), loaded with dlopen on first use.
 * The core library links no CUDA library; the module is reached only through acc__device_ops.
 *
 * Every function returns acc_result and sets acc_last_error() on failure. Pointers named d_* must
 * be device pointers of the device (from acc__device_alloc); h_* host pointers. */
#ifndef ACC_DEVICE_H
#define ACC_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "device/device_ops.h"

typedef struct acc__device acc__device;
typedef struct acc__dstream acc__dstream; /* a stream: operations run in the order queued */
typedef struct acc__devent acc__devent;   /* a point in a stream's order */

typedef enum acc__device_kind {
  ACC__DEVICE_CPU,
  ACC__DEVICE_FAKE,
  ACC__DEVICE_CUDA
} acc__device_kind;

/* Opens device `ordinal` of a kind (cpu and fake: ordinal 0 only). The CUDA kind loads the module
 * and fails with ACC_ERR_NOT_SUPPORTED and the reason (module not built, no driver, no GPU). */
acc_result acc__device_open(acc__device **out, acc__device_kind kind, int ordinal);
void acc__device_close(acc__device *d);
const char *acc__device_name(const acc__device *d); /* "cpu", "fake", "cuda:0" */
acc__device_kind acc__device_get_kind(const acc__device *d);

/* Memory. acc__device_free(NULL) is a no-op. */
acc_result acc__device_alloc(acc__device *d, size_t bytes, void **d_out);
acc_result acc__device_free(acc__device *d, void *d_ptr);
/* *yes = 1 when p points into memory of this device (CUDA: cudaPointerGetAttributes; fake: the
 * tracked arena; cpu: always 1, host memory is its device memory). */
acc_result acc__device_is_device_ptr(acc__device *d, const void *p, int *yes);

/* Host memory for staging copies: page-locked where the device has it (CUDA), else ordinary host
 * memory (acc__malloc). Free with acc__device_host_free (NULL: no-op), after every copy using it
 * has run. */
acc_result acc__device_host_alloc(acc__device *d, size_t bytes, void **h_out);
void acc__device_host_free(acc__device *d, void *h_ptr);

/* Streams and events. A NULL stream is the device's default stream. */
acc_result acc__dstream_create(acc__device *d, acc__dstream **out);
acc_result acc__dstream_destroy(acc__device *d, acc__dstream *s); /* synchronizes first */
acc_result acc__dstream_sync(acc__device *d, acc__dstream *s);
acc_result acc__devent_create(acc__device *d, acc__devent **out);
acc_result acc__devent_destroy(acc__device *d, acc__devent *e);
acc_result acc__devent_record(acc__device *d, acc__devent *e, acc__dstream *s);
/* Later operations of s wait for everything before e's record point. */
acc_result acc__dstream_wait(acc__device *d, acc__dstream *s, acc__devent *e);
acc_result acc__devent_sync(acc__device *d, acc__devent *e);
acc_result acc__devent_query(acc__device *d, acc__devent *e, int *done);

/* Copies and memset, queued on s. A host destination holds the data only after the stream (or
 * an event recorded after the copy) has been synchronized. */
acc_result acc__device_copy(acc__device *d, void *dst, const void *src, size_t bytes,
                            acc__copy_kind kind, acc__dstream *s);
acc_result acc__device_memset(acc__device *d, void *d_dst, int value, size_t bytes,
                              acc__dstream *s);

/* The constants of one optimizer step, computed on the host exactly as acc_optimizer_step does
 * (the pointers, n, grad_scale and skip_if of *a are left to the caller). first: the momentum
 * buffer has no value yet (first step); step: the AdamW step number, from 1. */
void acc__sgd_args_set(acc__sgd_args *a, double lr, double momentum, double dampening,
                       int nesterov, double weight_decay, int first);
void acc__adamw_args_set(acc__adamw_args *a, double lr, double beta1, double beta2, double eps,
                         double weight_decay, int64_t step);

/* Training kernels over flat fp32 buffers (see device_ops.h for the arguments); queued on s.
 * Parameter groups with their own learning rate or weight decay: one call per group's range. */
acc_result acc__device_sgd(acc__device *d, const acc__sgd_args *a, acc__dstream *s);
acc_result acc__device_adamw(acc__device *d, const acc__adamw_args *a, acc__dstream *s);
/* d_found_inf (an int32 on the device) is set to 1 when an element of d_grad is Inf or NaN
 * (it is never reset: zero it first); every element is multiplied by inv_scale. */
acc_result acc__device_unscale(acc__device *d, float *d_grad, size_t n, float inv_scale,
                               int32_t *d_found_inf, acc__dstream *s);
/* Sum of squares of each ACC__NORM_CHUNK elements of d_grad into d_partials (double,
 * acc__norm_partials(n) of them). */
acc_result acc__device_norm_partials(acc__device *d, const float *d_grad, size_t n,
                                     double *d_partials, acc__dstream *s);
/* From count partials (in order): *d_norm = sqrt(sum), *d_coef = max_norm / (norm + 1e-6). */
acc_result acc__device_norm_finish(acc__device *d, const double *d_partials, size_t count,
                                   float max_norm, float *d_norm, float *d_coef, acc__dstream *s);
/* d_buf[i] *= *d_coef when *d_coef < 1 (gradient clipping without a host round trip). */
acc_result acc__device_scale(acc__device *d, float *d_buf, size_t n, const float *d_coef,
                             acc__dstream *s);
/* fp32 -> bf16 or f16 (dtype ACC_BF16 / ACC_F16), round to nearest even, the bits of
 * acc_f32_to_bf16 / acc_f32_to_f16. */
acc_result acc__device_cast(acc__device *d, uint16_t *d_dst, const float *d_src, size_t n,
                            acc_dtype dtype, acc__dstream *s);
/* bf16 or f16 (dtype ACC_BF16 / ACC_F16) -> fp32, exact: the bits of acc_bf16_to_f32 /
 * acc_f16_to_f32 (the widening of bf16/fp16 parameter tables, src/train/typed.c). */
acc_result acc__device_widen(acc__device *d, float *d_dst, const uint16_t *d_src, size_t n,
                             acc_dtype dtype, acc__dstream *s);

/* d_buf[i] clamped to [-clip, clip] (acc_clip_grad_value's arithmetic; clip >= 0). */
acc_result acc__device_clamp(acc__device *d, float *d_buf, size_t n, float clip, acc__dstream *s);
/* d_dst[i] = d_dst[i] + d_src[i] * a (acc__k_axpy: two roundings, never fused). */
acc_result acc__device_axpy(acc__device *d, float *d_dst, const float *d_src, size_t n, float a,
                            acc__dstream *s);
/* d_buf[i] rounded to the nearest fp16 value, kept in fp32 (fp16 gradients). */
acc_result acc__device_round_f16(acc__device *d, float *d_buf, size_t n, acc__dstream *s);

/* Runs fn(arg) as a host "kernel" of the device (device_ops.h, host_kernel): on the cpu device
 * a plain call; on the fake device after all queued work, with device memory open to host code
 * while fn runs; on CUDA ACC_ERR_NOT_SUPPORTED (host code cannot reach GPU memory). */
acc_result acc__device_host_kernel(acc__device *d, void (*fn)(void *), void *arg);

/* Tests: the operations queued on the fake device and not yet run (0 on the other devices). */
size_t acc__device_queued(acc__device *d);

/* The device's ops table and context (for the NCCL members, which have no wrapper here). */
const acc__device_ops *acc__device_ops_of(const acc__device *d, void **ctx);

/* ---- the CUDA module -------------------------------------------------------------------- */

/* Loads a device module by name ("cuda"): libaccelerate-<name>.so from $ACCELERATE_CUDA_MODULE,
 * next to the library (or program) holding this code, in ../<libdir> from there, the install
 * library directory, then the dynamic loader's search path; checks its ops table. The result is
 * cached (the module is never unloaded). On failure *ops = NULL and the error says every place
 * tried. */
acc_result acc__device_module_load(const char *name, const acc__device_ops **ops);
/* What the CUDA module sees: fills *info (module path, versions, GPUs) and returns ACC_OK when
 * at least one GPU is usable; else ACC_ERR_NOT_SUPPORTED with one line saying why (module not
 * built, cannot be loaded, no driver, no GPU), info filled as far as it got. */
acc_result acc__device_cuda_probe(acc__device_probe_info *info);

/* The NCCL unique id, made by process 0's CUDA module and sent to every process: through the
 * rendezvous store when the job was joined through it, else over the CPU backend of st (a
 * collective: every process calls it; src/device/nccl_boot.c, which also exchanges and checks
 * the processes' GPU bus ids). Process 0's failure (no module, no NCCL) reaches every process as
 * the same error instead of leaving them waiting. */
acc_result acc__device_nccl_bootstrap_id(acc_state *st, uint8_t id[ACC__NCCL_ID_BYTES]);

#endif
