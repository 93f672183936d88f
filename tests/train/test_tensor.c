/* acc_tensor <-> DLTensor: zero-copy fields, dtype mapping, contiguity and device errors. */
#include "acc_test.h"

int main(void) {
  float buf[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[] = {2, 3};
  acc_tensor t;
  CHECK_OK(acc_tensor_init(&t, buf, ACC_F32, 2, shape));
  CHECK(t.strides[0] == 3 && t.strides[1] == 1 && acc_tensor_numel(&t) == 6 && acc_tensor_is_contiguous(&t), "init");
  DLTensor dl;
  CHECK_OK(acc_tensor_to_dlpack(&t, &dl));
  CHECK(dl.data == buf && dl.device.device_type == kDLCPU && dl.device.device_id == 0 && dl.ndim == 2, "to_dlpack");
  CHECK(dl.dtype.code == kDLFloat && dl.dtype.bits == 32 && dl.dtype.lanes == 1, "dtype");
  CHECK(dl.shape[0] == 2 && dl.shape[1] == 3 && dl.strides[0] == 3 && dl.strides[1] == 1 && dl.byte_offset == 0,
        "shape/strides");
  acc_tensor back;
  CHECK_OK(acc_tensor_from_dlpack(&dl, &back));
  CHECK(back.data == buf && back.dtype == ACC_F32 && back.ndim == 2 && back.shape[1] == 3, "round trip");

  /* dtype mapping both ways */
  acc_dtype dts[] = {ACC_F64, ACC_F16, ACC_BF16, ACC_I32, ACC_I64, ACC_U8};
  uint8_t codes[] = {kDLFloat, kDLFloat, kDLBfloat, kDLInt, kDLInt, kDLUInt};
  uint8_t bits[] = {64, 16, 16, 32, 64, 8};
  for (int i = 0; i < 6; i++) {
    CHECK_OK(acc_tensor_init(&t, buf, dts[i], 1, shape));
    CHECK_OK(acc_tensor_to_dlpack(&t, &dl));
    CHECK(dl.dtype.code == codes[i] && dl.dtype.bits == bits[i], "dtype %d", i);
    CHECK_OK(acc_tensor_from_dlpack(&dl, &back));
    CHECK(back.dtype == dts[i], "dtype back %d", i);
  }

  /* foreign tensor: NULL strides, byte offset, scalar */
  int64_t fshape[] = {4};
  DLTensor f = {buf, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, fshape, NULL, 8};
  CHECK_OK(acc_tensor_from_dlpack(&f, &back));
  CHECK(back.data == (void *)(buf + 2) && back.shape[0] == 4 && back.strides[0] == 1, "byte_offset applied");
  DLTensor sc = {buf, {kDLCPU, 0}, 0, {kDLFloat, 32, 1}, NULL, NULL, 0};
  CHECK_OK(acc_tensor_from_dlpack(&sc, &back));
  CHECK(back.ndim == 0 && acc_tensor_numel(&back) == 1, "scalar");
  /* size-1 dimensions may have any stride */
  int64_t s1[] = {1, 3}, st1[] = {99, 1};
  DLTensor one = {buf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s1, st1, 0};
  CHECK_OK(acc_tensor_from_dlpack(&one, &back));

  /* errors */
  int64_t tstrides[] = {1, 2}; /* the transpose of a 3x2 */
  DLTensor tr = {buf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, tstrides, 0};
  CHECK_ERR(acc_tensor_from_dlpack(&tr, &back), ACC_ERR_NOT_SUPPORTED, "not contiguous");
  DLTensor gpu = {buf, {kDLCUDA, 1}, 1, {kDLFloat, 32, 1}, fshape, NULL, 0};
  CHECK_ERR(acc_tensor_from_dlpack(&gpu, &back), ACC_ERR_NOT_SUPPORTED, "device type 2");
  DLTensor vec = {buf, {kDLCPU, 0}, 1, {kDLFloat, 32, 4}, fshape, NULL, 0};
  CHECK_ERR(acc_tensor_from_dlpack(&vec, &back), ACC_ERR_NOT_SUPPORTED, "lanes 4");
  DLTensor cplx = {buf, {kDLCPU, 0}, 1, {kDLComplex, 64, 1}, fshape, NULL, 0};
  CHECK_ERR(acc_tensor_from_dlpack(&cplx, &back), ACC_ERR_NOT_SUPPORTED, "code 5");
  DLTensor deep = {buf, {kDLCPU, 0}, ACC_MAX_DIMS + 1, {kDLFloat, 32, 1}, fshape, NULL, 0};
  CHECK_ERR(acc_tensor_from_dlpack(&deep, &back), ACC_ERR_NOT_SUPPORTED, "ndim 9");
  CHECK_OK(acc_tensor_init(&t, buf, ACC_F32, 2, shape));
  t.strides[0] = 1;
  t.strides[1] = 2;
  CHECK(!acc_tensor_is_contiguous(&t), "transposed is not contiguous");
  CHECK_ERR(acc_tensor_to_dlpack(&t, &dl), ACC_ERR_NOT_SUPPORTED, "not contiguous");
  CHECK_ERR(acc_tensor_init(&t, buf, ACC_F32, ACC_MAX_DIMS + 1, shape), ACC_ERR_INVALID_ARGUMENT, "ndim 9");
  return acc_test_finish("train_tensor");
}
