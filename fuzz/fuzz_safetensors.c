/* libFuzzer target for the safetensors reader: any byte string is opened as a file in memory;
 * when it validates, every tensor is read end to end, looked up by name, and every metadata
 * entry is read, so that any out-of-bounds offset the validation missed is caught by ASan. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "accelerate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  acc_safetensors *f = NULL;
  if (acc_safetensors_open_memory(&f, data, size, "fuzz") != ACC_OK) {
    /* A failure must come with a message naming the input. */
    if (!strstr(acc_last_error(), "fuzz")) __builtin_trap();
    return 0;
  }
  volatile unsigned sum = 0;
  for (size_t i = 0; i < acc_safetensors_count(f); i++) {
    acc_tensor_view v, w;
    if (acc_safetensors_tensor(f, i, &v) != ACC_OK) __builtin_trap();
    size_t numel = 1;
    for (int d = 0; d < v.ndim; d++) numel *= (size_t)v.shape[d];
    if (v.nbytes != numel * acc_dtype_size(v.dtype)) __builtin_trap();
    const unsigned char *p = v.data;
    if ((const uint8_t *)p < data || (const uint8_t *)p + v.nbytes > data + size) __builtin_trap();
    for (size_t b = 0; b < v.nbytes; b++) sum += p[b];
    if (acc_safetensors_find(f, v.name, &w) != ACC_OK || w.data != v.data) __builtin_trap();
  }
  for (size_t i = 0; i < acc_safetensors_metadata_count(f); i++) {
    const char *k, *val;
    if (acc_safetensors_metadata_at(f, i, &k, &val) != ACC_OK) __builtin_trap();
    if (acc_safetensors_metadata(f, k) == NULL) __builtin_trap();
    sum += (unsigned)strlen(val);
  }
  acc_safetensors_close(f);
  (void)sum;
  return 0;
}
