/* FSDP's memory operations (src/train/fsdp_mem.c): one call per operation whether FSDP's buffers
 * (the shards, the pool of unit buffers, the no_sync buffers) are host memory (an accelerator on
 * the CPU) or device memory of the accelerator's device (f->dev set). On a device every call goes
 * through the device interface on the accelerator's compute stream; host code never loads or
 * stores FSDP's buffers. Not API. docs/fsdp.md, "On a device". */
#ifndef ACC_TRAIN_FSDP_MEM_H
#define ACC_TRAIN_FSDP_MEM_H

#include "train/fsdp.h"

/* n floats, zeroed (at least one element is allocated). */
acc_result acc__fsdp_mem_alloc(acc_fsdp *f, size_t n, float **out);
void acc__fsdp_mem_free(acc_fsdp *f, float *p);
acc_result acc__fsdp_mem_zero(acc_fsdp *f, float *p, size_t n);
/* dst = src, both FSDP buffers (queued on the compute stream on a device). */
acc_result acc__fsdp_mem_copy(acc_fsdp *f, float *dst, const float *src, size_t n);
/* dst (an FSDP buffer) = src, src host memory or memory of f's device; done when it returns (src
 * may be freed). */
acc_result acc__fsdp_mem_in(acc_fsdp *f, float *dst, const float *src, size_t n);
/* h_dst (host) = src (an FSDP buffer, or any host memory); done when it returns. */
acc_result acc__fsdp_mem_out(acc_fsdp *f, float *h_dst, const float *src, size_t n);
/* dst[i] = dst[i] + src[i] * a (two roundings, never fused: the same bits on host and device). */
acc_result acc__fsdp_mem_axpy(acc_fsdp *f, float *dst, const float *src, size_t n, float a);
/* dst[i] *= coef (coef < 1: gradient clipping). */
acc_result acc__fsdp_mem_scale(acc_fsdp *f, float *p, size_t n, float coef);
/* dst (n 16-bit values of dtype ACC_BF16 / ACC_F16) = src rounded to nearest even (the bits of
 * acc_f32_to_bf16 / acc_f32_to_f16: the device's cast kernel); widen: dst = src exactly (the
 * device's widen kernel). Both FSDP buffers (or both host memory on the CPU); queued. */
acc_result acc__fsdp_mem_narrow(acc_fsdp *f, void *dst, const float *src, size_t n, acc_dtype dtype);
acc_result acc__fsdp_mem_widen(acc_fsdp *f, float *dst, const void *src, size_t n, acc_dtype dtype);
/* The loss scaler's unscale over p[0, n): *found set to 1 when an element is Inf or NaN (looked at
 * before the multiplication, as acc_grad_scaler_unscale does), then p[i] *= inv (the device's
 * unscale kernel; the 4-byte flag read back). *found is left alone otherwise. */
acc_result acc__fsdp_mem_unscale(acc_fsdp *f, float *p, size_t n, float inv, int *found);
/* Fills a released buffer with the poison (every byte 0xff: a NaN in float32, bf16 and fp16). */
acc_result acc__fsdp_mem_poison(acc_fsdp *f, float *p, size_t n);
/* *at = the first element that is no longer the poison, SIZE_MAX when the buffer is intact (on a
 * device: read back through a bounded host buffer). */
acc_result acc__fsdp_mem_poison_find(acc_fsdp *f, const float *p, size_t n, size_t *at);
/* The sum of squares of p[0, n) added into *sum, as partial sums of ACC__NORM_CHUNK elements in
 * double taken in order (the device's norm_partials), or the largest |p[i]| into *max when max is
 * not NULL (NaN wins). */
acc_result acc__fsdp_mem_norm(acc_fsdp *f, const float *p, size_t n, double *sum, double *max);
/* The shards' side (docs/fsdp.md, "offload_params"): the float32 master and gradient shards, the
 * no_sync buffers and (on a device) the optimizer's state. Memory of f's device when training on
 * one, host memory under offload_params (and on the CPU); the acc__fsdp_mem_* calls above are the
 * pool's side (the unit buffers the program reads and writes: memory of f's device when training on
 * one). The shard_* calls act on the shards' side; the cross-side calls name both and copy through
 * the device interface (bounded host staging where a conversion runs on the host): host code never
 * touches memory of the device. Without offload they are the pool-side calls. */
int acc__fsdp_shard_on_device(const acc_fsdp *f);
acc_result acc__fsdp_shard_alloc(acc_fsdp *f, size_t n, float **out);
void acc__fsdp_shard_free(acc_fsdp *f, float *p);
acc_result acc__fsdp_shard_zero(acc_fsdp *f, float *p, size_t n);
acc_result acc__fsdp_shard_scale(acc_fsdp *f, float *p, size_t n, float coef);
acc_result acc__fsdp_shard_unscale(acc_fsdp *f, float *p, size_t n, float inv, int *found);
acc_result acc__fsdp_shard_norm(acc_fsdp *f, const float *p, size_t n, double *sum, double *max);
/* dst (a shard-side buffer) = src (host memory or memory of f's device); done when it returns. */
acc_result acc__fsdp_shard_in(acc_fsdp *f, float *dst, const float *src, size_t n);
/* dst (a pool buffer: n values of dtype) = src (a shard-side buffer, n floats): copied (ACC_F32;
 * also the raw words of a 16-bit no_sync buffer) or rounded to ACC_BF16 / ACC_F16 (the bits of the
 * device's cast kernel); under offload done when it returns (the host may change src after). */
acc_result acc__fsdp_shard_to_pool(acc_fsdp *f, void *dst, const float *src, size_t n, acc_dtype dtype);
/* dst (a shard-side buffer) = src (a pool buffer), n words; done when it returns under offload. */
acc_result acc__fsdp_shard_from_pool(acc_fsdp *f, float *dst, const float *src, size_t n);
/* dst (a shard-side buffer) += src (a pool buffer) * a, as acc__fsdp_mem_axpy (the same bits). */
acc_result acc__fsdp_shard_add(acc_fsdp *f, float *dst, const float *src, size_t n, float a);

/* Around the unit calls on a device: FSDP's work on the compute stream comes after what the
 * program queued on its stream (acc_accelerator_set_program_stream), and the program's later work
 * after FSDP's. No-ops on the host. */
acc_result acc__fsdp_mem_enter(acc_fsdp *f);
acc_result acc__fsdp_mem_leave(acc_fsdp *f);
/* Frees the device scalars and host staging fsdp_mem.c keeps (destroy). */
void acc__fsdp_mem_release(acc_fsdp *f);
/* Waits for everything FSDP queued on the compute stream. */
acc_result acc__fsdp_mem_sync(acc_fsdp *f);

/* The library's optimizer over acc_fsdp_model on a device (fsdp_optim.c): install sets the model's
 * stepper (a no-op on the host); sync moves opt's device state to its host buffers (to_host 1,
 * before a save) or back (0, after a load); free releases the device state. */
void acc__fsdp_optim_install(acc_fsdp *f);
acc_result acc__fsdp_optim_sync(acc_fsdp *f, acc_optimizer *opt, int to_host);
void acc__fsdp_optim_free(acc_fsdp *f);

/* FSDP's collectives on its buffers (src/train/fsdp_coll.c). On a device with NCCL (the CUDA
 * module built with it, or the fake device's NCCL) over the job (not HYBRID) they run on device
 * memory through FSDP's own communicator (device/dcomm.h), else through the comm layer (host
 * staging on a device). ACCELERATE_FSDP_NCCL: auto, always, never. The caller's acc__comm_origin
 * goes with either. setup is collective (acc_fsdp_prepare). */
acc_result acc__fsdp_coll_setup(acc_fsdp *f);
void acc__fsdp_coll_free(acc_fsdp *f);
acc_result acc__fsdp_coll_all_gather(acc_fsdp *f, int group, const void *send, void *recv, size_t count,
                                     acc_dtype dtype);
acc_result acc__fsdp_coll_reduce_scatter(acc_fsdp *f, int group, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op);
acc_result acc__fsdp_coll_all_reduce(acc_fsdp *f, int group, const void *send, void *recv, size_t count,
                                     acc_dtype dtype, acc_op op);

#endif
