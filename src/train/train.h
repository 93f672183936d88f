/* Training on a device: what acc_accelerator_* does when its parameters, gradients and optimizer
 * state live in device memory (the fake device in CI, a GPU through the CUDA module). Not API.
 *
 * The training calls of src/train/accelerator.c, src/train/grad_sync.c, src/ckpt/accel_state.c and
 * src/ckpt/save_model.c keep their CPU code and hand over to these functions with one line when
 * acc__devctx_offhost() is true. Every kernel is queued on the accelerator's compute stream;
 * the host waits only where a value must reach it (the fp16 overflow flag, a gradient norm the
 * caller asked for, the host-staged gradient all-reduce, checkpoints).
 *
 *   train_sync.c   prepare_model checks, the initial parameter broadcast, gradient averaging
 *                  (host-staged through the CPU backend, or NCCL on a communication stream)
 *   train_optim.c  optimizer steps, fp16 unscale / overflow, clipping, zero_grad, low precision
 *   train_ckpt.c   host staging of parameters and optimizer state for checkpoints */
#ifndef ACC_DEVICE_TRAIN_H
#define ACC_DEVICE_TRAIN_H

#include "train/grad_sync.h"
#include "device/devctx.h"
#include "device/device.h"

typedef struct acc__dev_train acc__dev_train; /* per accelerator, owned by its acc__devctx */
typedef struct acc__dev_gsync acc__dev_gsync; /* per gradient-sync object (grad_sync.c) */

/* ---- train_sync.c ------------------------------------------------------------------------ */

/* prepare_model on a device: every parameter's data and gradient must be device memory of the
 * accelerator's device (ACC_ERR_INVALID_ARGUMENT naming the parameter otherwise); ZeRO is not
 * supported there; process 0's parameters go to every process through host staging. */
acc_result acc__dev_prepare_model(acc_accelerator *acc, acc_model *m);
/* Gradient averaging of grad_sync.c on the device. order[0..n) are the parameter indices of the
 * buckets in bucket order. */
acc_result acc__dev_gsync_create(acc__dev_gsync **out, acc__devctx *d, acc_state *st,
                                 acc_model *m, const size_t *order, size_t n, size_t nbuckets);
void acc__dev_gsync_free(acc__dev_gsync *g);
/* Averages one bucket: params order[first..first+count) (numel floats in all; inplace: their
 * gradients are one contiguous range starting there, else NULL). May run on the reducer
 * thread. */
acc_result acc__dev_gsync_bucket(acc__dev_gsync *g, size_t bucket, size_t first, size_t count,
                                 size_t numel, float *inplace);
/* A comm hook on host memory (PowerSGD, train/powersgd.h): every bucket is staged to the host
 * (also where NCCL averages otherwise) and fn leaves the result in the staged gradients, which go
 * back to the device. grads[k] is the host copy of parameter order[first + k]'s gradient. */
typedef acc_result (*acc__host_reduce_fn)(void *ctx, const size_t *params, size_t count, float *const *grads);
acc_result acc__dev_gsync_set_host_reducer(acc__dev_gsync *g, acc__host_reduce_fn fn, void *ctx);
/* After the last bucket of a step: later work of the compute stream waits for the averaged
 * gradients (NCCL: an event on the communication stream; host-staged: nothing to do). */
acc_result acc__dev_gsync_finish(acc__dev_gsync *g);
/* Whether the NCCL path is in use (tests, docs). */
int acc__dev_gsync_uses_nccl(const acc__dev_gsync *g);

/* ---- train_optim.c ----------------------------------------------------------------------- */

acc_result acc__dev_train_get(acc__devctx *d, acc__dev_train **out); /* created on first use */
void acc__dev_train_free(acc__devctx *d); /* from acc_accelerator_destroy, before the device closes */
/* The program's stream (NULL: none): enter makes the compute stream wait for the work the program
 * queued on it so far (an event recorded there); leave makes the program's stream wait for the
 * library's work queued so far (an event recorded on the compute stream). No-ops without one. */
acc_result acc__dev_prog_stream_set(acc__devctx *d, acc__dstream *s);
acc__dstream *acc__dev_prog_stream(const acc__devctx *d);
acc_result acc__dev_prog_enter(acc__devctx *d);
acc_result acc__dev_prog_leave(acc__devctx *d);

/* One optimizer step with the device kernels; fp16: the kernels skip when the agreed overflow
 * flag (on the device) is set. */
acc_result acc__dev_optimizer_step(acc_accelerator *acc, acc_optimizer *opt, int fp16);
/* The optimizer state in device memory (allocated at prepare_optimizer or the first step). */
acc_result acc__dev_prepare_optimizer(acc_accelerator *acc, acc_optimizer *opt);
acc_result acc__dev_zero_grad(acc_accelerator *acc, acc_optimizer *opt);
/* fp16: gradients rounded to fp16 (backward), then unscaled with the overflow check; the flag
 * reaches the host in one 4-byte copy and the scaler records it. */
acc_result acc__dev_round_grads_f16(acc_accelerator *acc);
acc_result acc__dev_unscale(acc_accelerator *acc);
/* The overflow agreed across processes back into the device flag the kernels skip on. */
acc_result acc__dev_agree_overflow(acc_accelerator *acc, int32_t agreed);
acc_result acc__dev_clip_grad_norm(acc_accelerator *acc, float max_norm, double norm_type,
                                   float *total_norm);
acc_result acc__dev_clip_grad_value(acc_accelerator *acc, float clip_value);
/* The low-precision copy of the parameters in device memory. */
acc_result acc__dev_low_precision_alloc(acc_accelerator *acc, acc_model *m);
acc_result acc__dev_refresh_low_precision(acc_accelerator *acc);
const uint16_t *acc__dev_low_precision(const acc_accelerator *acc);

/* ---- train_ckpt.c ------------------------------------------------------------------------ */

/* A host copy of a model whose parameters are device memory of a registered device (*out NULL
 * when they are host memory): same names and shapes, data copied in (and gradients too with
 * grads). *dev: the device it came from. Free with acc__dev_host_model_free. */
acc_result acc__dev_host_model(const acc_model *m, int grads, acc_model **out,
                               acc__devctx **dev);
acc_result acc__dev_host_model_of(acc__devctx *d, const acc_model *m, int grads,
                                  acc_model **out);
/* Copies the host copy's data (and gradients with grads) back into the device model. */
acc_result acc__dev_host_model_push(acc__devctx *d, const acc_model *host, acc_model *m,
                                    int grads);
void acc__dev_host_model_free(acc_model *host);
/* save_state / load_state: the prepared optimizers' device state to their host buffers (before
 * writing) and back (after reading). */
acc_result acc__dev_state_to_host(acc_accelerator *acc);
acc_result acc__dev_state_from_host(acc_accelerator *acc);

/* ---- hooks implemented outside src/device ------------------------------------------------ */

/* src/train/optim.c: a parameter's group (-1: not updated, or frozen), whether a state buffer holds a
 * value, its host buffer (allocated on demand), and the bookkeeping of a step run on a device
 * (the step count, SGD's momentum buffers now present). */
int acc__optimizer_param_group(const acc_optimizer *o, size_t i);
int acc__optimizer_state_present(const acc_optimizer *o, size_t i, int b);
/* The state slot (parameter *pi, buffer *pb) called `name`, checked against the parameter's shape
 * and requires_grad (acc_optimizer_state_set and load_state); ACC_ERR_MISMATCH naming fn, the
 * tensor and the parameter otherwise. */
acc_result acc__optimizer_state_find(const acc_optimizer *o, const char *fn, const char *name, int ndim,
                                     const int64_t *shape, size_t numel, size_t *pi, int *pb);
float *acc__optimizer_state_host(acc_optimizer *o, size_t i, int b);
/* load_state putting back what it changed: marks buffer b of parameter i present or absent. */
void acc__optimizer_state_set_present(acc_optimizer *o, size_t i, int b, int present);
/* The name ("state.<param>.<buffer>") of buffer b of parameter i; NULL past the optimizer's buffers. */
const char *acc__optimizer_state_name(const acc_optimizer *o, size_t i, int b);
acc_result acc__optimizer_device_stepped(acc_optimizer *o);
/* src/train/precision.c: the gradients were unscaled on the device; found_inf: the local overflow. */
void acc__grad_scaler_mark_unscaled(acc_grad_scaler *s, int found_inf);
/* src/train/grad_sync.c: averaging on the device (called by prepare_model). */
acc_result acc__grad_sync_use_device(acc__grad_sync *gs, acc__devctx *d);
/* src/train/grad_sync.c: the comm hook of the device buckets (acc__dev_gsync_set_host_reducer). */
acc_result acc__grad_sync_set_device_hook(acc__grad_sync *gs, acc__host_reduce_fn fn, void *ctx);

#endif
