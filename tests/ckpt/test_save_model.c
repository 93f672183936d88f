/* acc_save_model / acc_load_checkpoint_in_model: single file, sharding with an exact index,
 * stale shard removal, f16/bf16 saving, strict and non-strict loading with exact messages,
 * directory resolution errors. */
#include <math.h>

#include "acc_test.h"
#include "ckpt_util.h"

static float A[6], B[4], C[10], D[1];

static acc_model *make_model(float *a, float *b, float *c, float *d) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t sa[2] = {2, 3}, sb[1] = {4}, sc[1] = {10}, sd[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(m, "a", a, NULL, 2, sa));
  REQUIRE_OK(acc_model_add_parameter(m, "b", b, NULL, 1, sb));
  REQUIRE_OK(acc_model_add_parameter(m, "c", c, NULL, 1, sc));
  REQUIRE_OK(acc_model_add_parameter(m, "d", d, NULL, 1, sd));
  return m;
}

static void fill(void) {
  for (int i = 0; i < 6; i++) A[i] = 0.5f * (float)i - 1.0f;
  for (int i = 0; i < 4; i++) B[i] = 10.0f + (float)i;
  for (int i = 0; i < 10; i++) C[i] = -0.25f * (float)i;
  D[0] = 3.0f;
}

/* Loads dir into a zeroed copy of the model and compares with A..D. */
static void check_loads(const char *path, const char *what) {
  float a[6] = {0}, b[4] = {0}, c[10] = {0}, d[1] = {0};
  acc_model *m = make_model(a, b, c, d);
  acc_load_report r;
  CHECK_OK(acc_load_checkpoint_in_model(m, path, NULL, &r));
  CHECK(r.n_loaded == 4 && r.n_missing == 0 && r.n_unexpected == 0 && r.n_mismatched == 0, "%s: report %zu/%zu/%zu/%zu",
        what, r.n_loaded, r.n_missing, r.n_unexpected, r.n_mismatched);
  CHECK(memcmp(a, A, sizeof a) == 0 && memcmp(b, B, sizeof b) == 0 && memcmp(c, C, sizeof c) == 0 &&
            memcmp(d, D, sizeof d) == 0, "%s: values differ after load", what);
  acc_load_report_clear(&r);
  acc_model_destroy(m);
}

static const char expected_index[] =
    "{\n"
    "  \"metadata\": {\n"
    "    \"total_size\": 84\n"
    "  },\n"
    "  \"weight_map\": {\n"
    "    \"a\": \"model-00001-of-00003.safetensors\",\n"
    "    \"b\": \"model-00003-of-00003.safetensors\",\n"
    "    \"c\": \"model-00002-of-00003.safetensors\",\n"
    "    \"d\": \"model-00003-of-00003.safetensors\"\n"
    "  }\n"
    "}\n";

static void test_save_and_shard(const char *root) {
  fill();
  acc_model *m = make_model(A, B, C, D);
  char dir[1024], p[1200];
  snprintf(dir, sizeof dir, "%s/model", root);

  /* One shard. */
  CHECK_OK(acc_save_model(NULL, m, dir, 0, ACC_F32));
  CHECK(ckpt_exists(dir, "model.safetensors") && !ckpt_exists(dir, "model.safetensors.index.json"), "single layout");
  check_loads(dir, "single dir");
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  check_loads(p, "single file");
  acc_safetensors *f;
  CHECK_OK(acc_safetensors_open(&f, p));
  acc_tensor_view v;
  for (size_t i = 0; i < 4; i++) {
    CHECK_OK(acc_safetensors_tensor(f, i, &v));
    CHECK(v.name[0] == "abcd"[i] && v.name[1] == 0 && v.dtype == ACC_F32, "order: tensor %zu is %s", i, v.name);
  }
  acc_safetensors_close(f);

  /* Sharded at 30 bytes: a (24) | b (16) + d (4) | c (40, own shard, numbered before b's shard). */
  FILE *stale = fopen((snprintf(p, sizeof p, "%s/model-00004-of-00005.safetensors", dir), p), "w");
  fclose(stale);
  FILE *keep = fopen((snprintf(p, sizeof p, "%s/model-notes.txt", dir), p), "w");
  fclose(keep);
  CHECK_OK(acc_save_model(NULL, m, dir, 30, ACC_F32));
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
  char *idx = ckpt_read_file(p, NULL);
  CHECK(idx && strcmp(idx, expected_index) == 0, "index content:\n%s", idx ? idx : "(missing)");
  free(idx);
  CHECK(ckpt_exists(dir, "model-00001-of-00003.safetensors") && ckpt_exists(dir, "model-00002-of-00003.safetensors") &&
            ckpt_exists(dir, "model-00003-of-00003.safetensors"), "three shards");
  CHECK(!ckpt_exists(dir, "model-00004-of-00005.safetensors"), "stale shard not removed");
  CHECK(!ckpt_exists(dir, "model.safetensors"), "old single file not removed");
  CHECK(ckpt_exists(dir, "model-notes.txt"), "unrelated file removed");
  snprintf(p, sizeof p, "%s/model-00003-of-00003.safetensors", dir);
  CHECK_OK(acc_safetensors_open(&f, p));
  CHECK(acc_safetensors_count(f) == 2, "shard 3 has %zu tensors", acc_safetensors_count(f));
  CHECK_OK(acc_safetensors_tensor(f, 1, &v));
  CHECK(strcmp(v.name, "d") == 0, "shard 3 second tensor %s", v.name);
  acc_safetensors_close(f);
  check_loads(dir, "sharded dir");
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
  check_loads(p, "index file");

  /* Back to one file: shards and index go away. */
  CHECK_OK(acc_save_model(NULL, m, dir, 1000, ACC_F32));
  CHECK(!ckpt_exists(dir, "model-00001-of-00003.safetensors") && !ckpt_exists(dir, "model.safetensors.index.json"),
        "shards left after single save");

  /* A file where the directory should be. */
  snprintf(p, sizeof p, "%s/model-notes.txt", dir);
  CHECK_ERR(acc_save_model(NULL, m, p, 0, ACC_F32), ACC_ERR_INVALID_ARGUMENT, "is a file, not a directory");
  CHECK_ERR(acc_save_model(NULL, m, dir, 0, ACC_I32), ACC_ERR_INVALID_ARGUMENT, "dtype i32 is not allowed");

  /* Through a (single-process) state: only the main process writes, then a barrier. */
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  snprintf(p, sizeof p, "%s/viastate", root);
  CHECK_OK(acc_save_model(st, m, p, 0, ACC_F32));
  check_loads(p, "state save");
  acc_state_destroy(st);
  acc_model_destroy(m);
}

static void test_half(const char *root) {
  float w[4] = {1.5f, -2.0f, 1.0f + 0x1p-10f, 1.0f + 0x1p-11f};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t s[1] = {4};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, NULL, 1, s));
  char dir[1024];
  float back[4];
  acc_model *m2;
  REQUIRE_OK(acc_model_create(&m2));
  REQUIRE_OK(acc_model_add_parameter(m2, "w", back, NULL, 1, s));
  acc_dtype dts[2] = {ACC_F16, ACC_BF16};
  /* f16 keeps 1+2^-10 and rounds 1+2^-11 to even (1); bf16 (8 bits of mantissa) rounds both to 1. */
  float expect[2][4] = {{1.5f, -2.0f, 1.0f + 0x1p-10f, 1.0f}, {1.5f, -2.0f, 1.0f, 1.0f}};
  for (int k = 0; k < 2; k++) {
    snprintf(dir, sizeof dir, "%s/half%d", root, k);
    CHECK_OK(acc_save_model(NULL, m, dir, 0, dts[k]));
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    acc_safetensors *f;
    acc_tensor_view v;
    CHECK_OK(acc_safetensors_open(&f, p));
    CHECK_OK(acc_safetensors_tensor(f, 0, &v));
    CHECK(v.dtype == dts[k] && v.nbytes == 8, "saved dtype %d nbytes %zu", (int)v.dtype, v.nbytes);
    acc_safetensors_close(f);
    memset(back, 0, sizeof back);
    CHECK_OK(acc_load_checkpoint_in_model(m2, dir, NULL, NULL));
    for (int i = 0; i < 4; i++) CHECK(back[i] == expect[k][i], "%s[%d] = %.9g", acc_dtype_name(dts[k]), i, back[i]);
  }
  /* F64 and I32 files. */
  double d64[4] = {0.1, 2.0, -3.0, 1e-3};
  int32_t i32[4] = {1, 2, 3, 4};
  acc_tensor_view tv = {"w", ACC_F64, 1, {4}, d64, 0};
  char p[1200];
  snprintf(p, sizeof p, "%s/f64.safetensors", root);
  CHECK_OK(acc_safetensors_write(p, &tv, 1, NULL, NULL, 0));
  CHECK_OK(acc_load_checkpoint_in_model(m2, p, NULL, NULL));
  CHECK(back[0] == (float)0.1 && back[3] == (float)1e-3, "f64 load %g %g", back[0], back[3]);
  tv.dtype = ACC_I32;
  tv.data = i32;
  snprintf(p, sizeof p, "%s/i32.safetensors", root);
  CHECK_OK(acc_safetensors_write(p, &tv, 1, NULL, NULL, 0));
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_MISMATCH,
            "tensor 'w' has dtype I32 in the checkpoint, which cannot be loaded into a f32 parameter");
  acc_model_destroy(m);
  acc_model_destroy(m2);
}

static void test_strict(const char *root) {
  fill();
  acc_model *m = make_model(A, B, C, D);
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/strict", root);
  CHECK_OK(acc_save_model(NULL, m, dir, 0, ACC_F32));
  acc_model_destroy(m);

  float a[6], b[4], c[10], e[5];
  for (int i = 0; i < 6; i++) a[i] = 7;
  for (int i = 0; i < 4; i++) b[i] = 7;
  for (int i = 0; i < 10; i++) c[i] = 7;
  for (int i = 0; i < 5; i++) e[i] = 7;
  acc_model *m2;
  REQUIRE_OK(acc_model_create(&m2));
  int64_t sa[2] = {3, 2}, sb[1] = {4}, sc[1] = {10}, se[1] = {5};
  REQUIRE_OK(acc_model_add_parameter(m2, "a", a, NULL, 2, sa));
  REQUIRE_OK(acc_model_add_parameter(m2, "b", b, NULL, 1, sb));
  REQUIRE_OK(acc_model_add_parameter(m2, "c", c, NULL, 1, sc));
  REQUIRE_OK(acc_model_add_parameter(m2, "e", e, NULL, 1, se));
  char expected[2048];
  snprintf(expected, sizeof expected,
           "checkpoint '%s' does not match the model: tensor 'a' has shape [2, 3] in the checkpoint but [3, 2] in "
           "the model; missing tensor 'e' (model shape [5]); unexpected tensor 'd' (checkpoint shape [1]) (nothing "
           "was loaded; to load only the matching tensors, call acc_load_checkpoint_in_model with options.strict = 0)",
           dir);
  acc_load_report r;
  CHECK(acc_load_checkpoint_in_model(m2, dir, NULL, &r) == ACC_ERR_MISMATCH, "strict mismatch");
  CHECK(strcmp(acc_last_error(), expected) == 0, "message:\n%s\nexpected:\n%s", acc_last_error(), expected);
  CHECK(b[0] == 7 && c[0] == 7, "strict failure loaded something");
  acc_load_report_clear(&r);

  acc_load_options o = ACC_LOAD_OPTIONS_INIT;
  o.strict = 0;
  CHECK_OK(acc_load_checkpoint_in_model(m2, dir, &o, &r));
  CHECK(r.n_loaded == 2, "non-strict loaded %zu", r.n_loaded);
  CHECK(r.n_missing == 1 && strcmp(r.missing[0], "e") == 0, "missing list");
  CHECK(r.n_unexpected == 1 && strcmp(r.unexpected[0], "d") == 0, "unexpected list");
  CHECK(r.n_mismatched == 1 && strcmp(r.mismatched[0], "a") == 0, "mismatched list");
  CHECK(memcmp(b, B, sizeof b) == 0 && memcmp(c, C, sizeof c) == 0, "matching tensors not loaded");
  CHECK(a[0] == 7 && e[0] == 7, "mismatched / missing tensors touched");
  acc_load_report_clear(&r);
  acc_load_report_clear(NULL);
  acc_load_options zero = {0};
  CHECK_ERR(acc_load_checkpoint_in_model(m2, dir, &zero, NULL), ACC_ERR_INVALID_USAGE, "ACC_LOAD_OPTIONS_INIT");

  /* Directory resolution. */
  char p[1200], q[1300];
  snprintf(p, sizeof p, "%s/emptydir", root);
  REQUIRE_OK(acc__mkdirs(p));
  snprintf(expected, sizeof expected, "'%s' is not a folder containing a .index.json file or a model.safetensors file", p);
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, expected);
  snprintf(q, sizeof q, "%s/x.index.json", p);
  REQUIRE_OK(acc__write_file_atomic(q, "{}", 2));
  snprintf(q, sizeof q, "%s/y.index.json", p);
  REQUIRE_OK(acc__write_file_atomic(q, "{}", 2));
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_INVALID_ARGUMENT,
            "contains more than one .index.json file");
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "delete the irrelevant ones");
  CHECK_ERR(acc_load_checkpoint_in_model(m2, q, NULL, NULL), ACC_ERR_FORMAT, "has no \"weight_map\" object");
  snprintf(p, sizeof p, "%s/nothing-here", root);
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_IO, "does not exist");
  /* An index naming a tensor its shard lacks, and one escaping the directory. */
  snprintf(p, sizeof p, "%s/strict/bad.index.json", root);
  const char *bad = "{\"weight_map\": {\"a\": \"model.safetensors\", \"zz\": \"model.safetensors\"}}";
  REQUIRE_OK(acc__write_file_atomic(p, bad, strlen(bad)));
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_FORMAT,
            "says tensor 'zz' is in 'model.safetensors', but that file has no such tensor");
  bad = "{\"weight_map\": {\"a\": \"../model.safetensors\"}}";
  REQUIRE_OK(acc__write_file_atomic(p, bad, strlen(bad)));
  CHECK_ERR(acc_load_checkpoint_in_model(m2, p, NULL, NULL), ACC_ERR_FORMAT, "not a file name in the same directory");
  acc_model_destroy(m2);
}

int main(void) {
  char *root = ckpt_tmpdir("model");
  test_save_and_shard(root);
  test_half(root);
  test_strict(root);
  acc__rmtree(root);
  free(root);
  return acc_test_finish("ckpt_save_model");
}
