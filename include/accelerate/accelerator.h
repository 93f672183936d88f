/* accelerate-c: the Accelerator — prepare(), gradient accumulation and synchronization, mixed
 * precision, optimizer/scheduler stepping rules, metrics gathering.
 * Threads: an accelerator and the objects prepared with it are used from one thread at a time
 * (the thread that drives training); different accelerators share the one process state. */
#ifndef ACCELERATE_ACCELERATOR_H
#define ACCELERATE_ACCELERATOR_H

#include "checkpoint.h"
#include "comm.h"
#include "control.h"
#include "data.h"
#include "device.h"
#include "model.h"
#include "optim.h"
#include "precision.h"
#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_accelerator acc_accelerator;

/* 2: low_precision_params appended. 3: zero_stage appended. 4: device appended.
 * 5: comm_hook appended. */
#define ACC_ACCELERATOR_OPTIONS_VERSION 5

/** Compression of the gradient all-reduce, as torch DDP's communication hooks
 * (DistributedDataParallelKwargs(comm_hook=...)): each process casts its gradient bucket to the
 * 16-bit type, divides it by the number of processes in that type, the buckets are summed in that
 * type, and the result is cast back to f32. Half the bytes on the wire, at the 16-bit type's
 * precision (docs/performance-tuning in docs/PERFORMANCE.md). @since 0.2 */
typedef enum acc_comm_hook {
  ACC_COMM_HOOK_NONE = 0, /* f32 all-reduce (the default) */
  ACC_COMM_HOOK_FP16 = 1, /* torch's fp16_compress_hook */
  ACC_COMM_HOOK_BF16 = 2, /* torch's bf16_compress_hook */
  /* torch's powerSGD_hook (Accelerate's "power_sgd"): matrices travel as rank-r factors, with
   * error feedback and warm start; r = ACCELERATE_POWERSGD_RANK (1), uncompressed for the first
   * ACCELERATE_POWERSGD_START_ITER steps (1000). docs/mixed-precision.md. @since 0.2 */
  ACC_COMM_HOOK_POWERSGD = 3
} acc_comm_hook;

/**
 * Options of acc_accelerator_create. Initialize with ACC_ACCELERATOR_OPTIONS_INIT; fields left
 * ACC_UNSET come from the environment `accelerate launch` sets, then from Accelerate's defaults.
 */
typedef struct acc_accelerator_options {
  size_t size;                      /* sizeof, set by the INIT macro */
  uint32_t version;                 /* ACC_ACCELERATOR_OPTIONS_VERSION */
  acc_mixed_precision mixed_precision; /* ACC_UNSET (= ACC_PRECISION_UNSET):
                                          ACCELERATE_MIXED_PRECISION */
  int gradient_accumulation_steps;  /* ACC_UNSET: ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else 1 */
  int split_batches;                /* 0: batch_size is per process; 1: global, split */
  int even_batches;                 /* 1: every process gets the same number of full batches */
  int step_scheduler_with_optimizer;/* 1: scheduler steps follow optimizer steps */
  int sync_with_dataloader;         /* 1: the last batch of an epoch always syncs */
  int cpu;                          /* ACC_UNSET: ACCELERATE_USE_CPU */
  size_t bucket_cap_bytes;          /* gradient bucket size; 0: 25 MB (torch DDP's default) */
  int overlap_grad_sync;            /* 1: reduce buckets on a background thread as
                                       acc_accelerator_grad_ready marks them (see docs) */
  const acc_grad_scaler_options *scaler; /* fp16 loss scaling; NULL: torch's defaults */
  int low_precision_params;         /* 1 (fp16/bf16 only): keep a copy of the parameters in the
                                       autocast dtype, refreshed after every optimizer step and at
                                       prepare_model (acc_accelerator_low_precision_params) */
  int zero_stage;                   /* ACC_UNSET: ACCELERATE_ZERO_STAGE, else 0. 1: ZeRO stage 1,
                                       the optimizer state is sharded across processes; 2: the
                                       averaged gradients too (docs/zero.md) */
  int device;                       /* acc_device_type the program's kernels can run on; ACC_UNSET
                                       or ACC_DEVICE_CPU: the CPU (every program written before
                                       GPUs keeps working). ACC_DEVICE_AUTO: cuda:<LOCAL_RANK>
                                       when a GPU is present and --cpu is not given, else the
                                       CPU; ACC_DEVICE_CUDA: a GPU or an error (docs/gpu.md) */
  int comm_hook;                    /* acc_comm_hook; ACC_UNSET: ACCELERATE_COMM_HOOK, else
                                       ACC_COMM_HOOK_NONE. Host gradients, zero_stage 0 or 1 */
} acc_accelerator_options;

#define ACC_ACCELERATOR_OPTIONS_INIT                                                              \
  { sizeof(acc_accelerator_options), ACC_ACCELERATOR_OPTIONS_VERSION, ACC_PRECISION_UNSET,        \
    ACC_UNSET, 0, 1, 1, 1, ACC_UNSET, 0, 0, NULL, 0, ACC_UNSET, ACC_UNSET, ACC_UNSET }
/** Fills opts with the defaults of `version` (ACC_ACCELERATOR_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_options_init(acc_accelerator_options *opts, uint32_t version);

/**
 * Creates the accelerator and, through it, the process state (acc_state_create).
 * Collective: every process must call it. Ownership: acc_accelerator_destroy.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_create(acc_accelerator **out, const acc_accelerator_options *opts);
/** Releases the accelerator (not the prepared objects: they stay the program's) and its state
 * @since 0.1
 * reference. Accepts NULL. */
ACC_EXTERN void acc_accelerator_destroy(acc_accelerator *acc);

/** The process state (borrowed). @since 0.1 */
ACC_EXTERN acc_state *acc_accelerator_state(const acc_accelerator *acc);
/** The precision the accelerator runs (its option, else ACCELERATE_MIXED_PRECISION). The process
 * @since 0.1
 * state created by the accelerator reports the same in acc_state_describe. */
ACC_EXTERN acc_mixed_precision acc_accelerator_mixed_precision(const acc_accelerator *acc);
/** The ZeRO stage the accelerator runs (0, 1 or 2; 0 for an invalid handle). @since 0.1 */
ACC_EXTERN int acc_accelerator_zero_stage(const acc_accelerator *acc);
/**
 * ZeRO for a program that steps its own optimizer (llm.c's `-z 1`): the range of elements
 * [*first, *first + *count) of the prepared model (NULL: the first prepared) that this process
 * updates, in the ZeRO layout (the parameters that take a gradient, end to end in registration
 * order; for a flat table whose rows all train, the element offset in the table). Shards are
 * ceil(T / N) elements, the last ones shorter or empty. After backward the averaged gradient is
 * valid on this range (elsewhere: zero on the CPU, unspecified on a device). Not collective.
 * ACC_ERR_INVALID_USAGE at zero_stage 0. docs/zero.md.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_zero_shard(acc_accelerator *acc, acc_model *model, size_t *first,
                                                 size_t *count);
/**
 * After the program updated its range (acc_accelerator_zero_shard) of the parameters: every
 * process's range sent to every other, so that all hold the whole updated model (float32 values,
 * and for a bf16/fp16 table with the program's master its 16-bit values as the program rounded
 * them; a table with the library's master is rounded from it). On a device it runs after the
 * program's queued work on its named stream, through host staging of at most 2^20 elements per
 * process at a time. Collective; a no-op on one process. The library's optimizer_step does this
 * itself. @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_zero_gather(acc_accelerator *acc, acc_model *model);
/** The gradient compression the accelerator runs (acc_comm_hook; ACC_COMM_HOOK_NONE for an
 * invalid handle). @since 0.2 */
ACC_EXTERN int acc_accelerator_comm_hook(const acc_accelerator *acc);
/** The dtype the program's kernels should compute in (f32, or f16/bf16 under mixed precision). @since 0.1 */
ACC_EXTERN acc_dtype acc_accelerator_autocast_dtype(const acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN int acc_accelerator_gradient_accumulation_steps(const acc_accelerator *acc);

/* ---- the device (docs/gpu.md) --------------------------------------------------------------- */

/** The device this process trains on: ACC_DEVICE_CPU, ACC_DEVICE_CUDA (or ACC_DEVICE_FAKE in
 * @since 0.1
 * tests); never ACC_DEVICE_AUTO. */
ACC_EXTERN acc_device_type acc_accelerator_device_type(const acc_accelerator *acc);
/** "cpu", "cuda:<ordinal>", "fake:<ordinal>" (borrowed). @since 0.1 */
ACC_EXTERN const char *acc_accelerator_device_name(const acc_accelerator *acc);
/** The ordinal of the GPU (as the CUDA runtime numbers the visible GPUs); -1 on the CPU. @since 0.1 */
ACC_EXTERN int acc_accelerator_device_index(const acc_accelerator *acc);
/**
 * The stream the library queues its device work on (a cudaStream_t on CUDA; NULL on the CPU).
 * Run the program's kernels on it: the library's work on the gradients (backward, optimizer
 * steps) is then ordered after them without a host synchronization.
 * @since 0.1
 */
ACC_EXTERN void *acc_accelerator_stream(const acc_accelerator *acc);
/**
 * A new stream of the accelerator's device for the program's own kernels and copies (a
 * cudaStream_t on CUDA, non-blocking; an opaque handle on the fake device; NULL on the CPU,
 * which has no streams). Ownership: acc_accelerator_stream_destroy (synchronizes first).
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_stream_create(acc_accelerator *acc, void **out);
/** Destroys a stream of acc_accelerator_stream_create (no longer the program's stream then).
 * Accepts NULL. @since 0.3 */
ACC_EXTERN acc_result acc_accelerator_stream_destroy(acc_accelerator *acc, void *stream);
/** Waits on the host until everything queued on `stream` has run (no-op on the CPU). @since 0.3 */
ACC_EXTERN acc_result acc_accelerator_stream_synchronize(acc_accelerator *acc, void *stream);
/**
 * Names the program's stream (a cudaStream_t of the accelerator's GPU, the program's own or one of
 * acc_accelerator_stream_create; NULL: none, the default). torch's "current stream" rule, with no
 * host synchronization: every library call that touches the program's buffers (backward with its
 * averaging, unscale_gradients, clipping, optimizer_step, optimizer_zero_grad,
 * refresh_low_precision) queues its device work after everything the program queued on that
 * stream before the call (an event recorded there, waited for by the library's stream), and the
 * program's stream waits for the library's work of the call (an event recorded on the library's
 * stream) before anything the program queues there afterwards. Work the program queues on other
 * streams is not ordered (order it against its stream with its own events). save_state /
 * load_state / prepare_model synchronize the library's stream on the host; the program
 * synchronizes its stream before them. On the CPU only NULL is accepted. The stream must stay
 * valid until it is unset (NULL) or the accelerator is destroyed. @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_set_program_stream(acc_accelerator *acc, void *stream);
/** The stream of acc_accelerator_set_program_stream, or NULL. @since 0.3 */
ACC_EXTERN void *acc_accelerator_program_stream(const acc_accelerator *acc);
/**
 * Queues a copy on `stream` (a stream of the accelerator's device, NULL: the device's default
 * stream) and returns without waiting: the host source must stay unchanged, and a host
 * destination is valid, only after the stream is synchronized. A plain copy on the CPU.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_memcpy_async(acc_accelerator *acc, void *dst, const void *src,
                                                   size_t bytes, acc_copy_kind kind, void *stream);
/** Waits until every operation queued on the accelerator's stream has finished. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_synchronize(acc_accelerator *acc);
/** bytes of device memory (host memory on the CPU), zeroed. Ownership: acc_accelerator_free. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_alloc(acc_accelerator *acc, size_t bytes, void **out);
/**
 * Like acc_accelerator_alloc, but memory the processes of this machine share, for gradients:
 * an in-place all-reduce of a buffer inside it (as the accelerator makes of a model's gradients
 * after backward), made while every process's buffer lies in its block from the same call (at
 * any offset), reads the other processes' data where it lies and writes the result straight
 * into every process's buffer, with no copies through the backend's segment (docs/backends.md,
 * "Registered buffers"). A collective: every process calls it, in the same order, with the same
 * bytes (a different size fails with ACC_ERR_MISMATCH on every process). When the shared
 * memory cannot be had (e.g. /dev/shm too small, as in a container's default 64 MB) every
 * process gets ordinary memory and the main process logs a warning saying why. With one
 * process, on a GPU, or with a backend that shares no memory (MPI, gloo, several machines) it
 * is acc_accelerator_alloc. Zeroed; free with acc_accelerator_free (local). @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_alloc_shared(acc_accelerator *acc, size_t bytes, void **out);
/** Frees memory from acc_accelerator_alloc or acc_accelerator_alloc_shared. Accepts NULL. A
 * pointer that is not such memory is ACC_ERR_INVALID_ARGUMENT. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_free(acc_accelerator *acc, void *p);
/** Copies bytes in the accelerator's stream order and returns when the copy is done (the host
 * buffer may be reused and, for ACC_COPY_DEVICE_TO_HOST, read). A host pointer where device
 * memory is expected (or the reverse) is ACC_ERR_INVALID_ARGUMENT naming the argument.
 * @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_memcpy(acc_accelerator *acc, void *dst, const void *src,
                                             size_t bytes, acc_copy_kind kind);
/**
 * Runs fn(arg) on the host as a kernel of the accelerator's device: the fake twin of a kernel
 * launch, for programs and tests that compute with CPU code on the fake test device. On the fake
 * device (ACCELERATE_TEST_DEVICE=fake) its memory is otherwise unreachable from host code, as a
 * GPU's is (a host load or store through a pointer from acc_accelerator_alloc dies by SIGSEGV);
 * this call runs everything queued first, opens the device's memory to host code while fn runs,
 * and closes it again when fn returns. On the CPU it is a plain call fn(arg). On a GPU it is
 * ACC_ERR_NOT_SUPPORTED: host code never reaches GPU memory; launch a real kernel on
 * acc_accelerator_stream. fn may queue device work (copies, kernels) through the accelerator.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_host_kernel(acc_accelerator *acc, void (*fn)(void *arg),
                                                  void *arg);
/** 1 when p points into memory of the accelerator's device (always 1 on the CPU). @since 0.1 */
ACC_EXTERN int acc_accelerator_is_device_pointer(acc_accelerator *acc, const void *p);
/**
 * Converts n floats of src to dtype (ACC_BF16 or ACC_F16; round to nearest even, the bits of
 * acc_f32_to_bf16 / acc_f32_to_f16) into dst, in device memory on a device (the library's cast
 * kernel, queued on the accelerator's stream without waiting: e.g. a batch's inputs for bf16
 * kernels), in host memory on the CPU. dst and src must not overlap.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_cast(acc_accelerator *acc, uint16_t *dst, const float *src,
                                           size_t n, acc_dtype dtype);

/*
 * Process control through the accelerator (the same as the acc_state functions of state.h and
 * control.h on acc_accelerator_state(acc)), so a training program needs one handle.
 */
/** @since 0.1 */
ACC_EXTERN int acc_accelerator_process_index(const acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN int acc_accelerator_local_process_index(const acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN int acc_accelerator_num_processes(const acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN int acc_accelerator_is_main_process(const acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN int acc_accelerator_is_local_main_process(const acc_accelerator *acc);
/** Barrier. Collective. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_wait_for_everyone(acc_accelerator *acc);
/** printf on the main process only (flushes stdout); returns printf's count, 0 elsewhere. @since 0.1 */
ACC_EXTERN int acc_accelerator_print(const acc_accelerator *acc, const char *fmt, ...) ACC_PRINTF(2, 3);
/** acc_split_between_processes for this accelerator's processes. Not collective. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_split_between_processes(const acc_accelerator *acc, size_t n,
                                                              int apply_padding, acc_split *out);
/** main_process_first as a pair; prefer the block macro below. Collective. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_main_process_first_begin(acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_main_process_first_end(acc_accelerator *acc);
/* ACC_ACCELERATOR_MAIN_PROCESS_FIRST(acc, rc) { ...body... }: as ACC_MAIN_PROCESS_FIRST. */
#define ACC_ACCELERATOR_MAIN_PROCESS_FIRST(acc, rc)                                              \
  for (int acc__ampf_once = ((rc) = acc_accelerator_main_process_first_begin(acc), (rc) == ACC_OK); \
       acc__ampf_once; acc__ampf_once = 0, (rc) = acc_accelerator_main_process_first_end(acc))

/**
 * Seeds the library's global generator (acc_rng_global) with seed, plus the process index when
 * device_specific. Not collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_set_seed(acc_accelerator *acc, uint64_t seed, int device_specific);

/* ---- prepare -------------------------------------------------------------------------------- */

/**
 * Prepares a model: every process's parameters are overwritten with process 0's (so all start
 * identical), and its gradient buckets (and ZeRO layout) are built. Call it once per model for
 * several models (a GAN's generator and discriminator, a teacher and a student: Accelerate's
 * prepare(model_a, model_b)); they are numbered in prepare order (save_state writes
 * model.safetensors, model_1.safetensors, ...), at most 16. Preparing a model again is a no-op.
 * Collective. Ownership: the model stays the program's and must outlive the accelerator.
 * Training on a device: every parameter's data and gradient must be device memory of the
 * accelerator's device (acc_accelerator_alloc); host memory is ACC_ERR_INVALID_ARGUMENT.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_prepare_model(acc_accelerator *acc, acc_model *model);
/** The number of prepared models, and prepared model `index` (prepare order; NULL out of range).
 * @since 0.1 */
ACC_EXTERN int acc_accelerator_num_models(const acc_accelerator *acc);
/** @since 0.1 */
ACC_EXTERN acc_model *acc_accelerator_model(const acc_accelerator *acc, int index);
/**
 * Accelerate's no_sync(model): while on, backward leaves this model's gradients local (they
 * accumulate across batches without communication), grad_ready ignores it, clipping and fp16
 * unscaling skip it, and stepping one of its optimizers is ACC_ERR_INVALID_USAGE. Turn it off
 * before the backward of the batch that ends its window. Every process must set the same. Not
 * collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_no_sync(acc_accelerator *acc, acc_model *model, int on);
/** Registers an optimizer: its step/zero_grad then follow the accumulation rules. Several
 * prepared optimizers must update disjoint parameters (use parameter groups for several learning
 * @since 0.1
 * rates): an overlap is ACC_ERR_INVALID_USAGE naming the parameter. Not collective. */
ACC_EXTERN acc_result acc_accelerator_prepare_optimizer(acc_accelerator *acc, acc_optimizer *opt);
/** Registers a scheduler: stepped by acc_accelerator_scheduler_step with Accelerate's rules. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_prepare_scheduler(acc_accelerator *acc, acc_scheduler *sched);
/**
 * Creates a sharded data loader over ds (Accelerate's prepare(dataloader)): opts->shard is filled
 * from the process state and the accelerator's split_batches/even_batches, and the shuffle seed
 * is process 0's (broadcast), so every process walks the same permutation.
 * Collective. Ownership: acc_dataloader_destroy (ds borrowed).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_prepare_dataloader(acc_accelerator *acc, acc_dataset *ds,
                                                         const acc_dataloader_options *opts,
                                                         acc_dataloader **out);
/**
 * The next batch of a prepared loader; *out is NULL at the end of the epoch (the next call starts
 * the next epoch). Use this rather than acc_dataloader_next so the accelerator knows which loader
 * is active (end of epoch for accumulation, padding for gather_for_metrics).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_next_batch(acc_accelerator *acc, acc_dataloader *dl,
                                                 const acc_batch **out);
/**
 * Uneven inputs (Accelerate's join_uneven_inputs with even_batches off): the next batch of a
 * prepared loader whose processes may have different numbers of batches. Collective: every
 * process calls it once per step. *more is 1 while any process still has a batch this epoch;
 * then *out is this process's batch, or NULL when it has run out: it must still run the step
 * (accumulate, backward with zero gradients, optimizer_step, zero_grad) so that its collectives
 * answer the others' (its zero gradients are averaged in: the mean divides by all processes).
 * *more is 0 (and *out NULL) once every process has run out: the epoch is over everywhere. The
 * last step of the epoch is the last for every process (gradient sync, gather_for_metrics). A
 * load error on any process fails the call on every process.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_next_batch_joined(acc_accelerator *acc, acc_dataloader *dl,
                                                        const acc_batch **out, int *more);

/* ---- a training step -------------------------------------------------------------------------- */

/**
 * Call at the start of every batch (Accelerate's `with accelerator.accumulate(model):`).
 * Decides whether this batch synchronizes gradients: every gradient_accumulation_steps-th batch,
 * and always the last batch of the epoch. Not collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_accumulate(acc_accelerator *acc);
/** 1 when this batch ends an accumulation window: gradients will be averaged and the optimizer
 * @since 0.1
 * will step. */
ACC_EXTERN int acc_accelerator_sync_gradients(const acc_accelerator *acc);
/**
 * Accelerate's setters after creation. gradient_accumulation_steps (>= 1, else
 * ACC_ERR_INVALID_ARGUMENT) applies from the next acc_accelerator_accumulate (the counter is
 * kept, as Accelerate updates the plugin's num_steps); sync_gradients overrides the decision of
 * the current batch (Accelerate's `accelerator.sync_gradients = ...`); sync_each_batch (Accelerate's
 * GradientAccumulationPlugin.sync_each_batch) averages the gradients in every backward while the
 * optimizer still steps every gradient_accumulation_steps batches (less memory held unreduced,
 * more communication; refused with ZeRO stage 2, whose gradients are sharded). Not collective:
 * call them alike on every process.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_set_gradient_accumulation_steps(acc_accelerator *acc, int steps);
/** @since 0.2 */
ACC_EXTERN acc_result acc_accelerator_set_sync_gradients(acc_accelerator *acc, int sync);
/** @since 0.2 */
ACC_EXTERN acc_result acc_accelerator_set_sync_each_batch(acc_accelerator *acc, int on);
/** The factor to seed the backward pass with: 1/gradient_accumulation_steps (times the loss
 * @since 0.1
 * scale under fp16). Multiply d(loss)/d(output) by it. */
ACC_EXTERN float acc_accelerator_backward_scale(const acc_accelerator *acc);
/**
 * Optional, for overlap: the gradient of parameter `index` is final for this batch. With
 * overlap_grad_sync, a bucket whose gradients are all final is reduced at once on a background
 * thread while the backward pass continues. No effect on batches that do not sync. Every process
 * must mark the same parameters in the same order.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_grad_ready(acc_accelerator *acc, size_t index);
/**
 * grad_ready for parameter `index` of a prepared model (acc_accelerator_grad_ready means the first
 * prepared model). With overlap, one model's buckets are in flight at a time: finish its sync
 * (acc_accelerator_backward_model, or backward) before marking another model's parameters
 * (ACC_ERR_INVALID_USAGE otherwise).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_grad_ready_model(acc_accelerator *acc, acc_model *model,
                                                       size_t index);
/**
 * Call after the program's backward pass. On a sync batch: (fp16: gradients pass through half
 * precision, as a half-precision backward would produce them) then every gradient becomes the
 * mean over processes, in buckets. Otherwise nothing (gradients accumulate locally: no_sync).
 * Collective on sync batches.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_backward(acc_accelerator *acc);
/**
 * backward for one prepared model (the loss of this batch reached only its parameters: a GAN's
 * discriminator step): on a sync batch its gradients become the mean over processes; the other
 * models' gradients are left alone. Nothing while the model is under no_sync. Under fp16 an
 * iteration (one overflow decision, one loss-scale update) is the sync backward calls and the
 * optimizer steps after them: backward_model(a), backward_model(b), step(a), step(b) is one
 * iteration (an overflow in either skips both); backward_model(a), step(a), backward_model(b),
 * step(b) is two. Collective on sync batches.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_backward_model(acc_accelerator *acc, acc_model *model);
/** fp16, on a sync batch: divides every gradient by the loss scale, once per iteration whatever
 * @since 0.1
 * the number of optimizers. Otherwise (and on non-sync batches) nothing. */
ACC_EXTERN acc_result acc_accelerator_unscale_gradients(acc_accelerator *acc);
/** On a sync batch: unscales, then clips the global gradient norm (gradients are already
 * averaged, so every process computes the same norm). *total_norm (may be NULL) gets the norm
 * @since 0.1
 * before clipping. On non-sync batches the gradients are partial: nothing happens (*total_norm 0). */
ACC_EXTERN acc_result acc_accelerator_clip_grad_norm(acc_accelerator *acc, float max_norm,
                                                     double norm_type, float *total_norm);
/** clip_grad_norm over one prepared model's gradients (Accelerate's clip_grad_norm_ with that
 * model's parameters); acc_accelerator_clip_grad_norm covers every prepared model not under
 * @since 0.1
 * no_sync as one set of parameters (one norm). */
ACC_EXTERN acc_result acc_accelerator_clip_grad_norm_model(acc_accelerator *acc, acc_model *model,
                                                           float max_norm, double norm_type,
                                                           float *total_norm);
/** clip_grad_value over every prepared model not under no_sync (after unscaling). @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_clip_grad_value(acc_accelerator *acc, float clip_value);
/**
 * Steps a prepared optimizer on sync batches only. fp16, once per iteration (a sync backward and
 * the steps after it): the first step unscales every gradient and agrees on overflow across
 * processes (one 4-byte all-reduce); on overflow every optimizer of the iteration skips. Each
 * prepared optimizer steps at most once per iteration (a second call is ACC_ERR_INVALID_USAGE;
 * under fp16 the optimizer must be prepared). The loss scale is updated once per iteration: after
 * the last prepared optimizer stepped, else at the next accumulate(), sync backward() or
 * save_state(). Collective on sync batches under fp16.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_optimizer_step(acc_accelerator *acc, acc_optimizer *opt);
/** Zeroes the gradients on sync batches only. @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_optimizer_zero_grad(acc_accelerator *acc, acc_optimizer *opt);
/** 1 when the last optimizer step was skipped (fp16 overflow). @since 0.1 */
ACC_EXTERN int acc_accelerator_optimizer_step_was_skipped(const acc_accelerator *acc);
/**
 * Steps a prepared scheduler with Accelerate's rules: not on non-sync batches, not
 * when the optimizer step was skipped, num_processes times per call unless split_batches.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_scheduler_step(acc_accelerator *acc, acc_scheduler *sched);
/**
 * With options.low_precision_params under fp16/bf16: the parameters converted to the autocast
 * dtype (uint16_t values, concatenated in registration order as acc_precision_copy_params lays
 * them out), refreshed after every optimizer step that ran; the fp32 master weights stay in the
 * model. NULL otherwise. Borrowed: lives as long as the accelerator. Training on a device, it
 * is device memory, written on the compute stream.
 * @since 0.1
 */
ACC_EXTERN const uint16_t *acc_accelerator_low_precision_params(const acc_accelerator *acc);
/** The low-precision copy of a prepared model (low_precision_params means the first model);
 * @since 0.1
 * NULL without a copy or for a model that was not prepared. */
ACC_EXTERN const uint16_t *acc_accelerator_low_precision_params_model(const acc_accelerator *acc,
                                                                      const acc_model *model);
/** A low-precision copy with its element type, so that bf16 and fp16 bits are never confused.
 * @since 0.2 */
typedef struct acc_low_precision_view {
  acc_dtype dtype;     /* ACC_BF16 or ACC_F16: how to read data */
  const uint16_t *data; /* numel values (device memory when training on a device); borrowed */
  size_t numel;
  uint64_t generation; /* changes at every rewrite (prepare, optimizer step, load_state, refresh):
                          a copy the program derived from data is stale when it differs */
} acc_low_precision_view;
/**
 * The typed low-precision copy of a prepared model (NULL: the first). `expected` is the dtype the
 * caller's code reads (ACC_BF16 or ACC_F16); a copy of the other dtype is ACC_ERR_MISMATCH naming
 * both, so a bf16 run never feeds fp16 kernels by mistake. ACC_ERR_INVALID_USAGE without a copy.
 * Not collective. docs/mixed-precision.md, "Pitfalls of low-precision copies".
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_low_precision_view(const acc_accelerator *acc, const acc_model *model,
                                                         acc_dtype expected, acc_low_precision_view *out);
/** Converts a host low-precision view to float32 by its own dtype (dst: view->numel floats).
 * @since 0.2 */
ACC_EXTERN acc_result acc_low_precision_view_to_f32(const acc_low_precision_view *view, float *dst);
/**
 * Recomputes the low-precision copy from the model's fp32 parameters. load_state does it; call it
 * after changing the parameters yourself (e.g. acc_load_checkpoint_in_model). No-op without a
 * copy. Not collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_refresh_low_precision(acc_accelerator *acc);
/**
 * Sizes a learning-rate schedule as this accelerator steps it, from a prepared loader (its
 * per-process length), the number of epochs and the accelerator's gradient accumulation,
 * process count, split_batches, step_scheduler_with_optimizer and sync_with_dataloader:
 * *num_training_steps = the scheduler steps of the whole run, *num_warmup_steps (may be NULL) =
 * warmup_fraction of it. Pass them to acc_scheduler_create: the schedule then has the same shape
 * at every process count. Not collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_scheduler_steps(const acc_accelerator *acc,
                                                      const acc_dataloader *dl, int64_t num_epochs,
                                                      double warmup_fraction,
                                                      int64_t *num_training_steps,
                                                      int64_t *num_warmup_steps);
/** The grad scaler (NULL unless fp16). Borrowed. @since 0.1 */
ACC_EXTERN acc_grad_scaler *acc_accelerator_grad_scaler(const acc_accelerator *acc);
/** The accumulation counter (Accelerate's accelerator.step). @since 0.1 */
ACC_EXTERN int64_t acc_accelerator_step(const acc_accelerator *acc);

/* ---- metrics ------------------------------------------------------------------------------------ */

/** All-gather of count elements: every process receives every process's elements in rank order
 * @since 0.1
 * (recv holds count * num_processes elements). Collective. (acc_gather gathers to one root.) */
ACC_EXTERN acc_result acc_accelerator_all_gather(acc_accelerator *acc, const void *send, void *recv,
                                             size_t count, acc_dtype dtype);
/**
 * Gathers n_samples samples of sample_elems elements from every process (counts may differ) in
 * rank order and, on the last batch of the active prepared loader, drops the duplicated padding
 * samples (Accelerate's gather_for_metrics), so an evaluation over a whole epoch
 * counts every dataset sample exactly once. A prepared loader on its last batch whose batches did
 * not come through acc_accelerator_next_batch is ACC_ERR_INVALID_USAGE (its padding could not be
 * dropped). recv must hold capacity samples; *n_out receives the samples kept. Collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_gather_for_metrics(acc_accelerator *acc, const void *send,
                                                         int64_t n_samples, size_t sample_elems,
                                                         acc_dtype dtype, void *recv,
                                                         int64_t capacity, int64_t *n_out);
/** All-reduce with op: every process receives the result (Accelerate's accelerator.reduce, whose
 * @since 0.1
 * default op is sum). Collective. (acc_reduce reduces to one root.) */
ACC_EXTERN acc_result acc_accelerator_all_reduce(acc_accelerator *acc, const void *send, void *recv,
                                             size_t count, acc_dtype dtype, acc_op op);
/**
 * Pads buf (n_samples samples of sample_elems) along the sample axis to the largest n_samples of
 * any process, with pad_value (pad_first: at the front). buf must hold the padded size;
 * *n_out receives it. Collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_pad_across_processes(acc_accelerator *acc, void *buf,
                                                           int64_t n_samples, size_t sample_elems,
                                                           acc_dtype dtype, double pad_value,
                                                           int pad_first, int64_t capacity,
                                                           int64_t *n_out);

/* ---- checkpointing: save_state / load_state (see docs/checkpointing.md) ------------------------ */

/**
 * Sets the accelerator's project configuration (Accelerate's ProjectConfiguration): project_dir,
 * automatic_checkpoint_naming (checkpoints/checkpoint_<i>), total_limit, iteration. Without it,
 * save_state / load_state need an explicit directory. The options are copied; calling it again
 * replaces the configuration. Not collective, but give every process the same options.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_set_project_config(acc_accelerator *acc, const acc_project_options *opts);
/** The project configuration (borrowed; NULL until set_project_config or the first save_state). @since 0.1 */
ACC_EXTERN acc_project_config *acc_accelerator_project_config(const acc_accelerator *acc);

/**
 * Serializes a registered object. Called twice per save: with buf NULL to ask for the size in
 * *len, then with a buffer of cap >= that size to fill (set *len to the bytes written).
 */
typedef acc_result (*acc_checkpoint_save_fn)(void *obj, void *buf, size_t cap, size_t *len);
/** Restores a registered object from the bytes its save callback wrote. */
typedef acc_result (*acc_checkpoint_load_fn)(void *obj, const void *data, size_t len);
/*
 * A callback that fails should say why with acc_error_set (the error is cleared before each
 * call); when it sets no message the error reads "<which callback> of registered object <i>
 * returned <ACC_ERR_...>".
 */

/** The size limit of one registered object's bytes with acc_accelerator_register_for_checkpointing:
 * 1 GiB. A larger custom_checkpoint_<i>.bin is refused by load_state before it is read. */
#define ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT ((uint64_t)1 << 30)

/**
 * Registers an object to be saved by save_state and restored by load_state (Accelerate's
 * register_for_checkpointing): its bytes go to custom_checkpoint_<i>.bin, i = registration
 * order. Both callbacks are required. Saved by the main process; loaded by every process.
 * Ownership: obj is borrowed and must outlive the accelerator. Not collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_register_for_checkpointing(acc_accelerator *acc, void *obj,
                                                                 acc_checkpoint_save_fn save,
                                                                 acc_checkpoint_load_fn load);
/**
 * The same with an explicit size limit: save_state refuses to write more than max_bytes for this
 * object, and load_state refuses a larger file (checked with its size, before reading it), so
 * the load callback never sees more than max_bytes.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_register_for_checkpointing_limit(acc_accelerator *acc, void *obj,
                                                                       acc_checkpoint_save_fn save,
                                                                       acc_checkpoint_load_fn load,
                                                                       uint64_t max_bytes);

/**
 * A save_state / load_state pre-hook (Accelerate's register_save_state_pre_hook /
 * register_load_state_pre_hook). dir: for save_state, the directory being written (files the
 * hook writes there become part of the checkpoint when the save completes; it is renamed to the
 * final directory afterwards); for load_state, the checkpoint directory about to be loaded.
 * Return ACC_OK, or an error (say why with acc_error_set): the save or load is aborted on
 * every process with an error naming the hook. A hook must not register or remove hooks.
 */
typedef acc_result (*acc_state_hook_fn)(acc_accelerator *acc, const char *dir, void *payload);

/**
 * Registers a hook run at the start of every acc_accelerator_save_state, on every process, after
 * the checkpoint directory is chosen and before any file is written; hooks run in registration
 * order. name (copied, at most 63 bytes kept; NULL: "#<id>") names the hook in error messages.
 * @param id NULL, or receives the hook's id for acc_accelerator_remove_state_hook (ids start at
 *           1 and are never reused by one accelerator).
 * Not collective, but register the same hooks on every process.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_register_save_state_pre_hook(acc_accelerator *acc, acc_state_hook_fn fn,
                                                                   void *payload, const char *name, uint64_t *id);
/** The same for acc_accelerator_load_state: run after the checkpoint is found, before it is read.
 * @since 0.1 */
ACC_EXTERN acc_result acc_accelerator_register_load_state_pre_hook(acc_accelerator *acc, acc_state_hook_fn fn,
                                                                   void *payload, const char *name, uint64_t *id);
/**
 * Removes a save or load pre-hook by the id its registration returned (Accelerate's
 * RemovableHandle.remove()). Removing a hook already removed does nothing and returns ACC_OK;
 * an id this accelerator never issued is ACC_ERR_INVALID_ARGUMENT.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_remove_state_hook(acc_accelerator *acc, uint64_t id);

/**
 * Saves the whole training state into a crash-safe checkpoint directory: the model
 * (model.safetensors), every prepared optimizer (optimizer[_i].safetensors + optimizer[_i].json),
 * scheduler (scheduler[_i].json), the GradScaler (scaler.json), every process's global RNG,
 * accumulation step and data loader positions (random_states_<process>.json), registered objects
 * (custom_checkpoint_<i>.bin) and checkpoint.json. Files are written into "<dir>.tmp-writing",
 * fsync'd, renamed to dir, which is marked complete (COMPLETE) only after every process
 * finished; then the project iteration advances by one.
 * @param output_dir  the directory; ignored with automatic checkpoint naming (may be NULL then)
 * @param saved_dir   NULL, or receives the final directory. Ownership: acc_free.
 * Collective: yes (every process; a failure on any process makes every process return the
 * same error and leaves the previous checkpoints untouched). Save right after an optimizer step:
 * gradients accumulated for a step not yet taken are not saved. Every loader prepared with this
 * accelerator is saved, so do not destroy a prepared loader before the last save_state /
 * load_state call.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_save_state(acc_accelerator *acc, const char *output_dir, char **saved_dir);

/**
 * Restores everything save_state saved, bit for bit, into the prepared objects (prepare them
 * first, in the same order), then refreshes the low-precision copy. input_dir NULL: the latest
 * complete checkpoint (automatic naming; ACC_ERR_NOT_FOUND when there is none). A checkpoint
 * saved by another number of processes is resumed at the same global sample of the epoch
 * (acc_accelerator_set_strict_process_count refuses it instead). An incomplete checkpoint or a
 * different set of prepared objects is an error naming saved vs current; a missing key or an out-of-range value is ACC_ERR_FORMAT naming
 * the file and key; processes that restored different positions from their random_states_<p>.json
 * all get ACC_ERR_MISMATCH naming the file. Afterwards the next automatic checkpoint number is
 * the loaded one's plus one.
 * @param loaded_dir NULL, or receives the directory loaded. Ownership: acc_free.
 * Collective: yes.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_load_state(acc_accelerator *acc, const char *input_dir, char **loaded_dir);

/**
 * strict != 0: load_state refuses (ACC_ERR_MISMATCH) a checkpoint saved by another number of
 * processes, as Accelerate does. Default 0: it resumes it, keeping the global position in every
 * data loader's epoch and remapping the per-process random states (docs/checkpointing.md,
 * "Resuming on another number of processes"), and logs one warning line of what changed.
 * Not collective; set it on every process alike.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_accelerator_set_strict_process_count(acc_accelerator *acc, int strict);

#ifdef __cplusplus
}
#endif
#endif
