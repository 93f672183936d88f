/* Cross-check with an independent reader/writer: writes a file, runs check_safetensors.py on it
 * (python3, struct + json only), then reads the file the script wrote (unaligned header, other
 * key order, 0-d tensor). Usage: test_ckpt_python PYTHON3 SCRIPT */
#include "acc_test.h"
#include "ckpt_util.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PYTHON3 SCRIPT\n", argv[0]);
    return 2;
  }
  char *dir = ckpt_tmpdir("py");
  float f32[6];
  for (int i = 0; i < 6; i++) f32[i] = 0.5f * (float)i - 1.0f;
  double f64[3] = {1.0 / 3.0, -1e300, 42.0};
  uint16_t f16[2] = {0x3c00, 0xc000}, bf16[2] = {0x3f80, 0xbf80};
  int32_t i32 = -123456;
  int64_t i64[2] = {INT64_MIN, INT64_MAX};
  uint8_t u8[5] = {0, 1, 127, 128, 255};
  uint64_t u64[2] = {0x0123456789abcdefull, UINT64_MAX}; /* an RNG state: ACC_U64 (since 0.3) */
  acc_tensor_view t[9] = {
      {"w.f32", ACC_F32, 2, {2, 3}, f32, 0}, {"w.f64", ACC_F64, 1, {3}, f64, 0},
      {"w.f16", ACC_F16, 1, {2}, f16, 0},    {"w.bf16", ACC_BF16, 1, {2}, bf16, 0},
      {"scalar", ACC_I32, 0, {0}, &i32, 0},  {"w.i64", ACC_I64, 1, {2}, i64, 0},
      {"bytes", ACC_U8, 1, {5}, u8, 0},      {"rng.u64", ACC_U64, 1, {2}, u64, 0},
      {"empty", ACC_F32, 1, {0}, NULL, 0},
  };
  char ours[1024], theirs[1024], cmd[4096];
  snprintf(ours, sizeof ours, "%s/ours.safetensors", dir);
  snprintf(theirs, sizeof theirs, "%s/theirs.safetensors", dir);
  const char *k[1] = {"step"}, *v[1] = {"7"};
  REQUIRE_OK(acc_safetensors_write(ours, t, 9, k, v, 1));
  /* A sharded model with a non-ASCII name: a [6] | "zé" [10] | b [4] at 40-byte shards. */
  float wa[6] = {0}, wb[4] = {0}, wz[10] = {0};
  int64_t s6[1] = {6}, s4[1] = {4}, s10[1] = {10};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "a", wa, NULL, 1, s6));
  REQUIRE_OK(acc_model_add_parameter(m, "z\xc3\xa9", wz, NULL, 1, s10));
  REQUIRE_OK(acc_model_add_parameter(m, "b", wb, NULL, 1, s4));
  char mdir[1100], index[1200];
  snprintf(mdir, sizeof mdir, "%s/model", dir);
  REQUIRE_OK(acc_save_model(NULL, m, mdir, 40, ACC_F32));
  acc_model_destroy(m);
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", mdir);
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' '%s'", argv[1], argv[2], ours, theirs, index);
  int st = system(cmd);
  CHECK(st == 0, "check_safetensors.py failed (status %d)", st);

  acc_safetensors *f = NULL;
  CHECK_OK(acc_safetensors_open(&f, ours)); /* ACC_U64 back from our own file */
  if (f) {
    acc_tensor_view u;
    uint64_t back[2] = {0, 0};
    CHECK_OK(acc_safetensors_find(f, "rng.u64", &u));
    if (u.data) memcpy(back, u.data, sizeof back);
    CHECK(u.dtype == ACC_U64 && u.nbytes == 16 && back[0] == u64[0] && back[1] == u64[1], "rng.u64 read back");
    CHECK(strcmp(acc_dtype_name(ACC_U64), "u64") == 0 && acc_dtype_size(ACC_U64) == 8, "ACC_U64 name and size");
    acc_safetensors_close(f);
    f = NULL;
  }
  CHECK_OK(acc_safetensors_open(&f, theirs));
  if (f) {
    CHECK(acc_safetensors_count(f) == 2, "count %zu", acc_safetensors_count(f));
    CHECK(acc_safetensors_metadata(f, "format") == NULL, "no metadata expected");
    acc_tensor_view a, b;
    CHECK_OK(acc_safetensors_tensor(f, 0, &a));
    CHECK_OK(acc_safetensors_tensor(f, 1, &b));
    CHECK(strcmp(a.name, "a") == 0 && strcmp(b.name, "b") == 0, "data order: %s %s", a.name, b.name);
    float av[2];
    double bv;
    memcpy(av, a.data, 8);
    memcpy(&bv, b.data, 8);
    CHECK(a.dtype == ACC_F32 && a.ndim == 1 && a.shape[0] == 2 && av[0] == 1.25f && av[1] == -7.5f, "tensor a");
    CHECK(b.dtype == ACC_F64 && b.ndim == 0 && b.nbytes == 8 && bv == 2.5, "tensor b (0-d)");
    acc_safetensors_close(f);
  }
  acc__rmtree(dir);
  free(dir);
  return acc_test_finish("ckpt_python");
}
