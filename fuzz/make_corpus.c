/* Writes the valid seed files of fuzz/corpus with the library's own writer:
 *   make_corpus DIR */
#include <stdio.h>

#include "accelerate.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  char p[4096];
  float f32[6] = {1, 2, 3, 4, 5, 6};
  double f64[2] = {0.5, -1};
  unsigned short h[3] = {0x3c00, 0x4000, 0x7e00};
  int i32 = 7;
  long long i64[2] = {-1, 1};
  unsigned char u8[3] = {1, 2, 3};
  acc_tensor_view all[8] = {
      {"a.f32", ACC_F32, 2, {2, 3}, f32, 0}, {"b.f64", ACC_F64, 1, {2}, f64, 0},
      {"c.f16", ACC_F16, 1, {3}, h, 0},      {"d.bf16", ACC_BF16, 1, {3}, h, 0},
      {"e.i32", ACC_I32, 0, {0}, &i32, 0},   {"f.i64", ACC_I64, 2, {1, 2}, i64, 0},
      {"g.u8", ACC_U8, 1, {3}, u8, 0},       {"h.empty", ACC_F32, 2, {0, 4}, NULL, 0},
  };
  const char *k[2] = {"step", "epoch"}, *v[2] = {"12", "3"};
  int rc = 0;
  snprintf(p, sizeof p, "%s/valid_all_dtypes.safetensors", argv[1]);
  rc |= acc_safetensors_write(p, all, 8, k, v, 2);
  snprintf(p, sizeof p, "%s/valid_no_tensors.safetensors", argv[1]);
  rc |= acc_safetensors_write(p, NULL, 0, NULL, NULL, 0);
  snprintf(p, sizeof p, "%s/valid_scalar.safetensors", argv[1]);
  rc |= acc_safetensors_write(p, &all[4], 1, NULL, NULL, 0);
  snprintf(p, sizeof p, "%s/valid_empty_tensor.safetensors", argv[1]);
  rc |= acc_safetensors_write(p, &all[7], 1, k, v, 1);
  snprintf(p, sizeof p, "%s/valid_one_tensor.safetensors", argv[1]);
  rc |= acc_safetensors_write(p, all, 1, k, v, 2);
  if (rc) fprintf(stderr, "make_corpus: %s\n", acc_last_error());
  return rc ? 1 : 0;
}
