/* Gradient averaging in buckets (torch DDP's reducer, in C). Internal. */
#ifndef ACC_GRAD_SYNC_H
#define ACC_GRAD_SYNC_H

#include "core/internal.h"

typedef struct acc__grad_sync acc__grad_sync;

/*
 * Buckets the model's gradients in reverse registration order (the order a backward pass
 * produces them), each bucket up to bucket_cap_bytes (a parameter larger than the cap gets its
 * own bucket). A bucket whose gradients are adjacent in memory is reduced in place; otherwise it
 * is staged through a buffer allocated (and touched) once here. With overlap, a background
 * thread reduces each bucket as soon as all its gradients were marked ready.
 */
acc_result acc__grad_sync_create(acc__grad_sync **out, acc_state *st, acc_model *m,
                                 size_t bucket_cap_bytes, int overlap);
void acc__grad_sync_destroy(acc__grad_sync *gs);

/* Replaces the all-reduce of each bucket: fn gets the bucket's parameter indices (bucket order,
 * i.e. descending) and its element count, and leaves whatever it documents in the gradients
 * (ZeRO stage 2: the bucket's mean reduced to the processes owning it). Called on the thread that
 * reduces the bucket (the overlap thread or the caller of finish), one bucket at a time, in the
 * same bucket order on every process. Set it right after create. */
typedef acc_result (*acc__bucket_reduce_fn)(void *ctx, const size_t *params, size_t count, size_t numel);
void acc__grad_sync_set_reducer(acc__grad_sync *gs, acc__bucket_reduce_fn fn, void *ctx);

/* Compression of the all-reduce (torch DDP's fp16/bf16 compress hooks): with dtype ACC_F16 or
 * ACC_BF16 every bucket is cast to dtype, divided by the number of processes in dtype (the f32
 * quotient rounded to dtype), all-reduced with ACC_SUM in dtype and cast back to f32. ACC_F32:
 * none (the default). Allocates the 16-bit buffer (largest bucket) once, here. Not with a
 * reducer (ZeRO 2) or device gradients. */
acc_result acc__grad_sync_set_compression(acc__grad_sync *gs, acc_dtype dtype);

/* Floats of the staging buffer (buckets that are not contiguous in memory). */
size_t acc__grad_sync_staging_floats(const acc__grad_sync *gs);

/* Number of buckets, and how many of them are reduced in place (for tests and docs). */
size_t acc__grad_sync_num_buckets(const acc__grad_sync *gs);
size_t acc__grad_sync_num_inplace(const acc__grad_sync *gs);

/* 1 when some gradient of this step was marked ready and not reduced yet by finish. */
int acc__grad_sync_in_flight(const acc__grad_sync *gs);

/* Marks parameter `index` as having its final gradient for this step. With overlap, a bucket
 * whose parameters are all ready is handed to the background thread at once. */
acc_result acc__grad_sync_mark_ready(acc__grad_sync *gs, size_t index);
/* How many buckets mark_ready started (all their parameters ready before finish), since gs was
 * created: the evidence that averaging overlapped the program's backward. */
size_t acc__grad_sync_early(const acc__grad_sync *gs);

/* Reduces every bucket not yet reduced (all of them when nothing was marked), waits for the
 * background thread, and leaves the mean over processes in every gradient. Collective. */
acc_result acc__grad_sync_finish(acc__grad_sync *gs);

#endif
