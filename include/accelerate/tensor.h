/* accelerate-c: a minimal tensor descriptor and zero-copy DLPack exchange (CPU, contiguous), so a
 * program can hand its buffers to (or take them from) any DLPack-speaking library.
 * This is the only header that includes <dlpack/dlpack.h> (Debian: libdlpack-dev).
 * Threads: descriptors are plain values; a view is used from one thread at a time. */
#ifndef ACCELERATE_TENSOR_H
#define ACCELERATE_TENSOR_H

#include <dlpack/dlpack.h>

#include "common.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A view of caller memory: never owns data. strides are in elements (row-major when made by
 * acc_tensor_init). */
typedef struct acc_tensor {
  void *data;
  acc_dtype dtype;
  int ndim; /* 0..ACC_MAX_DIMS; 0 is a scalar */
  int64_t shape[ACC_MAX_DIMS];
  int64_t strides[ACC_MAX_DIMS];
} acc_tensor;

/**
 * Fills *t as a contiguous row-major view of data. shape entries must be >= 0.
 * Ownership: data stays the caller's. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_tensor_init(acc_tensor *t, void *data, acc_dtype dtype, int ndim, const int64_t *shape);
/** Number of elements (product of the shape; 1 for a scalar). @since 0.1 */
ACC_EXTERN size_t acc_tensor_numel(const acc_tensor *t);
/** 1 when the strides are row-major contiguous (dimensions of size 1 ignored). @since 0.1 */
ACC_EXTERN int acc_tensor_is_contiguous(const acc_tensor *t);

/**
 * Describes t as a DLTensor on the CPU (device {kDLCPU, 0}, byte_offset 0), zero-copy.
 * out->shape and out->strides point INTO *t: t must stay alive and unchanged while out is used.
 * A non-contiguous t is ACC_ERR_NOT_SUPPORTED. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_tensor_to_dlpack(const acc_tensor *t, DLTensor *out);
/**
 * Describes a DLTensor as an acc_tensor, zero-copy (data = dl->data + byte_offset). Accepts CPU
 * tensors (kDLCPU only: pinned kDLCUDAHost memory is refused too) with lanes 1 of float 16/32/64,
 * bfloat16, int 32/64 and uint 8, ndim <= ACC_MAX_DIMS, and strides NULL or row-major compact;
 * anything else is ACC_ERR_NOT_SUPPORTED saying what was found. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_tensor_from_dlpack(const DLTensor *dl, acc_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
