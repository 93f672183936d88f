/* acc_tensor and zero-copy DLPack exchange (CPU, contiguous tensors only). */
#include "core/internal.h"

#if defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#define ACC_HAVE_DLPACK 1
#endif
#endif

#ifdef ACC_HAVE_DLPACK
#include <string.h>

#include "accelerate/tensor.h"

acc_result acc_tensor_init(acc_tensor *t, void *data, acc_dtype dtype, int ndim, const int64_t *shape) {
  if (!t) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_init: t is NULL");
  if (acc_dtype_size(dtype) == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_init: unknown dtype %d", (int)dtype);
  if (ndim < 0 || ndim > ACC_MAX_DIMS || (ndim > 0 && !shape))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_init: ndim %d must be 0..%d with a shape", ndim,
                      ACC_MAX_DIMS);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_init: dimension %d has negative size %lld", d,
                        (long long)shape[d]);
  memset(t, 0, sizeof *t);
  t->data = data;
  t->dtype = dtype;
  t->ndim = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t->shape[d] = shape[d];
    t->strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return ACC_OK;
}

size_t acc_tensor_numel(const acc_tensor *t) {
  if (!t) return 0;
  size_t n = 1;
  for (int d = 0; d < t->ndim && d < ACC_MAX_DIMS; d++) n *= (size_t)(t->shape[d] > 0 ? t->shape[d] : 0);
  return n;
}

/* Row-major compact check; dimensions of size 1 may have any stride (as in DLPack/PyTorch). */
static int compact(int ndim, const int64_t *shape, const int64_t *strides) {
  int64_t expect = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    if (shape[d] == 0) return 1; /* empty tensor: no element is ever addressed */
    if (shape[d] != 1 && strides[d] != expect) return 0;
    expect *= shape[d];
  }
  return 1;
}

int acc_tensor_is_contiguous(const acc_tensor *t) {
  if (!t || t->ndim < 0 || t->ndim > ACC_MAX_DIMS) return 0;
  return compact(t->ndim, t->shape, t->strides);
}

acc_result acc_tensor_to_dlpack(const acc_tensor *t, DLTensor *out) {
  if (!t || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_to_dlpack: NULL argument");
  if (t->ndim < 0 || t->ndim > ACC_MAX_DIMS)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_to_dlpack: ndim %d is out of range 0..%d", t->ndim,
                      ACC_MAX_DIMS);
  DLDataType dt = {0, 0, 1};
  switch (t->dtype) {
    case ACC_F32: dt.code = kDLFloat; dt.bits = 32; break;
    case ACC_F64: dt.code = kDLFloat; dt.bits = 64; break;
    case ACC_F16: dt.code = kDLFloat; dt.bits = 16; break;
    case ACC_BF16: dt.code = kDLBfloat; dt.bits = 16; break;
    case ACC_I32: dt.code = kDLInt; dt.bits = 32; break;
    case ACC_I64: dt.code = kDLInt; dt.bits = 64; break;
    case ACC_U8: dt.code = kDLUInt; dt.bits = 8; break;
    case ACC_U64: dt.code = kDLUInt; dt.bits = 64; break;
    default:
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_tensor_to_dlpack: unknown dtype %d", (int)t->dtype);
  }
  if (!acc_tensor_is_contiguous(t))
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "acc_tensor_to_dlpack: the tensor is not contiguous (row-major); only contiguous tensors "
                      "are exchanged");
  memset(out, 0, sizeof *out);
  out->data = t->data;
  out->device.device_type = kDLCPU;
  out->device.device_id = 0;
  out->ndim = t->ndim;
  out->dtype = dt;
  out->shape = t->ndim ? (int64_t *)t->shape : NULL;
  out->strides = t->ndim ? (int64_t *)t->strides : NULL;
  out->byte_offset = 0;
  return ACC_OK;
}

acc_result acc_tensor_from_dlpack(const DLTensor *dl, acc_tensor *out) {
  const char *fn = "acc_tensor_from_dlpack";
  if (!dl || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
  if (dl->device.device_type != kDLCPU)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "%s: the tensor is on device type %d (id %d); only CPU (kDLCPU = %d) "
                      "tensors are supported", fn, (int)dl->device.device_type, dl->device.device_id, (int)kDLCPU);
  if (dl->ndim < 0 || dl->ndim > ACC_MAX_DIMS)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "%s: ndim %d is out of range 0..%d", fn, dl->ndim, ACC_MAX_DIMS);
  if (dl->ndim > 0 && !dl->shape) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: ndim %d but shape is NULL", fn, dl->ndim);
  acc_dtype dtype = ACC_DTYPE_COUNT_;
  if (dl->dtype.lanes == 1) {
    unsigned code = dl->dtype.code, bits = dl->dtype.bits;
    if (code == kDLFloat && bits == 32) dtype = ACC_F32;
    else if (code == kDLFloat && bits == 64) dtype = ACC_F64;
    else if (code == kDLFloat && bits == 16) dtype = ACC_F16;
    else if (code == kDLBfloat && bits == 16) dtype = ACC_BF16;
    else if (code == kDLInt && bits == 32) dtype = ACC_I32;
    else if (code == kDLInt && bits == 64) dtype = ACC_I64;
    else if (code == kDLUInt && bits == 8) dtype = ACC_U8;
    else if (code == kDLUInt && bits == 64) dtype = ACC_U64;
  }
  if (dtype == ACC_DTYPE_COUNT_)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "%s: dtype (code %u, bits %u, lanes %u) is not supported (expected float16/32/64, bfloat16, "
                      "int32/64, uint8 or uint64 with 1 lane)",
                      fn, (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits, (unsigned)dl->dtype.lanes);
  for (int d = 0; d < dl->ndim; d++)
    if (dl->shape[d] < 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: dimension %d has negative size %lld", fn, d,
                        (long long)dl->shape[d]);
  if (dl->strides && !compact(dl->ndim, dl->shape, dl->strides))
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "%s: the tensor is not contiguous (strides are not row-major compact); make a contiguous "
                      "copy first",
                      fn);
  acc_result rc = acc_tensor_init(out, dl->data ? (char *)dl->data + dl->byte_offset : NULL, dtype, dl->ndim, dl->shape);
  return rc;
}
#endif
