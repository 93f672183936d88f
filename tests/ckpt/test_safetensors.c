/* safetensors writer and reader: round trip of every dtype (incl. 0-d and empty tensors),
 * header layout and alignment, metadata, and every malformed-file case -> ACC_ERR_FORMAT. */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdint.h>

#include "acc_test.h"
#include "ckpt_util.h"

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void test_round_trip(const char *dir) {
  float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e30f};
  double f64[3] = {1.0 / 3.0, -1e300, 42.0};
  uint16_t f16[4] = {0x3c00, 0xc000, 0x7c00, 0x0001};
  uint16_t bf16[4] = {0x3f80, 0xbf80, 0x7f80, 0x0001};
  int32_t i32 = -123456;
  int64_t i64[2] = {INT64_MIN, INT64_MAX};
  uint8_t u8[5] = {0, 1, 127, 128, 255};
  acc_tensor_view t[9] = {
      {"w.f32", ACC_F32, 2, {2, 3}, f32, 0},  {"w.f64", ACC_F64, 1, {3}, f64, 0},
      {"w.f16", ACC_F16, 2, {2, 2}, f16, 0},  {"w.bf16", ACC_BF16, 1, {4}, bf16, 0},
      {"scalar", ACC_I32, 0, {0}, &i32, 0},   {"w.i64", ACC_I64, 2, {2, 1}, i64, 0},
      {"bytes", ACC_U8, 1, {5}, u8, 0},       {"empty", ACC_F32, 1, {0}, NULL, 0},
      {"empty2d", ACC_I64, 2, {3, 0}, NULL, 0},
  };
  char path[1024];
  snprintf(path, sizeof path, "%s/rt.safetensors", dir);
  const char *keys[2] = {"step", "note"}, *vals[2] = {"7", "hello \"world\""};
  CHECK_OK(acc_safetensors_write(path, t, 9, keys, vals, 2));

  /* Raw layout: 8-byte length, header padded with spaces to a multiple of 8. */
  size_t len;
  unsigned char *raw = (unsigned char *)ckpt_read_file(path, &len);
  REQUIRE_OK(raw ? ACC_OK : ACC_ERR_IO);
  uint64_t n = le64(raw);
  CHECK(n % 8 == 0, "header length %llu is not a multiple of 8", (unsigned long long)n);
  size_t data = 24 + 24 + 8 + 8 + 4 + 16 + 5; /* bytes of all tensors */
  CHECK(len == 8 + n + data, "file is %zu bytes, expected %llu", len, (unsigned long long)(8 + n + data));
  CHECK(raw[8] == '{', "header starts with '%c'", raw[8]);
  CHECK(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', "header ends with '%c'", raw[8 + n - 1]);
  CHECK(memcmp(raw + 8 + n, f32, 24) == 0, "first tensor bytes not right after the header");
  CHECK(strstr((char *)raw + 8, "\"__metadata__\":{\"format\":\"pt\",\"step\":\"7\"") != NULL, "metadata: %.80s",
        raw + 8);
  CHECK(strstr((char *)raw + 8, "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}") != NULL,
        "tensor entry: %.200s", raw + 8);
  free(raw);

  acc_safetensors *f = NULL;
  CHECK_OK(acc_safetensors_open(&f, path));
  if (!f) return;
  CHECK(acc_safetensors_count(f) == 9, "count %zu", acc_safetensors_count(f));
  const void *datas[9] = {f32, f64, f16, bf16, &i32, i64, u8, NULL, NULL};
  size_t sizes[9] = {24, 24, 8, 8, 4, 16, 5, 0, 0};
  for (size_t i = 0; i < 9; i++) {
    acc_tensor_view v;
    CHECK_OK(acc_safetensors_tensor(f, i, &v));
    CHECK(strcmp(v.name, t[i].name) == 0, "tensor %zu is '%s', expected '%s'", i, v.name, t[i].name);
    CHECK(v.dtype == t[i].dtype, "dtype of %s", v.name);
    CHECK(v.ndim == t[i].ndim, "ndim of %s: %d", v.name, v.ndim);
    for (int d = 0; d < v.ndim; d++) CHECK(v.shape[d] == t[i].shape[d], "shape of %s", v.name);
    CHECK(v.nbytes == sizes[i], "nbytes of %s: %zu", v.name, v.nbytes);
    if (sizes[i]) CHECK(memcmp(v.data, datas[i], sizes[i]) == 0, "data of %s", v.name);
  }
  acc_tensor_view v;
  CHECK_OK(acc_safetensors_find(f, "scalar", &v));
  int32_t got;
  memcpy(&got, v.data, 4);
  CHECK(got == -123456 && v.ndim == 0, "scalar %d ndim %d", got, v.ndim);
  CHECK_ERR(acc_safetensors_find(f, "nope", &v), ACC_ERR_INVALID_ARGUMENT, "has no tensor named 'nope'");
  CHECK(strcmp(acc_safetensors_metadata(f, "format"), "pt") == 0, "format");
  CHECK(strcmp(acc_safetensors_metadata(f, "note"), "hello \"world\"") == 0, "note");
  CHECK(acc_safetensors_metadata(f, "absent") == NULL, "absent metadata");
  CHECK(acc_safetensors_metadata_count(f) == 3, "metadata count %zu", acc_safetensors_metadata_count(f));
  acc_safetensors_close(f);
  acc_safetensors_close(NULL);

  /* Overwriting is atomic and leaves no temporary files behind. */
  CHECK_OK(acc_safetensors_write(path, t, 1, NULL, NULL, 0));
  CHECK_OK(acc_safetensors_open(&f, path));
  CHECK(acc_safetensors_count(f) == 1, "after overwrite: %zu tensors", acc_safetensors_count(f));
  acc_safetensors_close(f);

  /* An empty file (no tensors) round-trips too. */
  snprintf(path, sizeof path, "%s/none.safetensors", dir);
  CHECK_OK(acc_safetensors_write(path, NULL, 0, NULL, NULL, 0));
  CHECK_OK(acc_safetensors_open(&f, path));
  CHECK(acc_safetensors_count(f) == 0, "empty file count");
  acc_safetensors_close(f);

  /* Writer argument errors. */
  acc_tensor_view dup[2] = {{"a", ACC_F32, 1, {1}, f32, 0}, {"a", ACC_F32, 1, {1}, f32, 0}};
  CHECK_ERR(acc_safetensors_write(path, dup, 2, NULL, NULL, 0), ACC_ERR_INVALID_ARGUMENT, "tensor name 'a' appears twice");
  acc_tensor_view bad = {"m", (acc_dtype)42, 1, {1}, f32, 0};
  CHECK_ERR(acc_safetensors_write(path, &bad, 1, NULL, NULL, 0), ACC_ERR_INVALID_ARGUMENT, "unknown dtype 42");
  acc_tensor_view nodata = {"m", ACC_F32, 1, {2}, NULL, 0};
  CHECK_ERR(acc_safetensors_write(path, &nodata, 1, NULL, NULL, 0), ACC_ERR_INVALID_ARGUMENT, "'m' has no data");
  acc_tensor_view meta = {"__metadata__", ACC_F32, 1, {1}, f32, 0};
  CHECK_ERR(acc_safetensors_write(path, &meta, 1, NULL, NULL, 0), ACC_ERR_INVALID_ARGUMENT, "not __metadata__");
  /* A failed write (rename onto a directory) leaves neither the target nor a temporary file. */
  char sub[1100];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  REQUIRE_OK(acc__mkdirs(sub));
  snprintf(path, sizeof path, "%s/sub/target", dir);
  REQUIRE_OK(acc__mkdirs(path));
  CHECK_ERR(acc_safetensors_write(path, t, 1, NULL, NULL, 0), ACC_ERR_IO, "could not rename");
  DIR *d = opendir(sub);
  int entries = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') entries++;
  if (d) closedir(d);
  CHECK(entries == 1, "%d entries left in %s after a failed write (expected only 'target')", entries, sub);
  snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
  CHECK_ERR(acc_safetensors_write(path, t, 1, NULL, NULL, 0), ACC_ERR_IO, "could not create");
}

/* Builds "len8 + header + data_len zero bytes" and expects ACC_ERR_FORMAT containing substr. */
static void expect_bad(const char *header, size_t data_len, const char *substr) {
  size_t hl = strlen(header), total = 8 + hl + data_len;
  unsigned char *buf = calloc(1, total);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  acc_safetensors *f = (acc_safetensors *)1;
  CHECK_ERR(acc_safetensors_open_memory(&f, buf, total, "bad.safetensors"), ACC_ERR_FORMAT, substr);
  CHECK(f == NULL, "handle not NULL on failure for %s", header);
  CHECK(strstr(acc_last_error(), "bad.safetensors") != NULL, "message lacks the file name: %s", acc_last_error());
  free(buf);
}

static void test_malformed(const char *dir) {
  acc_safetensors *f = NULL;
  unsigned char small[5] = {1, 2, 3, 4, 5};
  CHECK_ERR(acc_safetensors_open_memory(&f, small, 5, "tiny"), ACC_ERR_FORMAT,
            "'tiny' is 5 bytes, shorter than the 8-byte header length");
  CHECK_ERR(acc_safetensors_open_memory(&f, small, 0, "zero"), ACC_ERR_FORMAT, "is 0 bytes");
  unsigned char huge[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'};
  CHECK_ERR(acc_safetensors_open_memory(&f, huge, 16, "huge"), ACC_ERR_FORMAT, "header length 1099511627776 is absurd");
  unsigned char beyond[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  CHECK_ERR(acc_safetensors_open_memory(&f, beyond, 16, "beyond"), ACC_ERR_FORMAT,
            "header length 100 goes beyond the end of the file (16 bytes)");
  expect_bad("{\"a\":", 0, "header is not valid JSON");
  expect_bad("[1, 2]", 0, "header is not a JSON object");
  expect_bad("{\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
             "tensor 'a': unknown dtype 'BOOL'");
  expect_bad("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'a': \"dtype\" is missing");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":3,\"data_offsets\":[0,3]}}", 3, "tensor 'a': \"shape\" is missing or not a list");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
             "tensor 'a': shape entry 0 is not a non-negative integer");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,0]}}", 0, "shape entry 0");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
             "shape has 9 dimensions");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904,4611686018427387904],\"data_offsets\":[0,0]}}",
             0, "tensor 'a': shape is too large");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
             "tensor 'a': \"data_offsets\" is not a list [begin, end]");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[4,3]}}", 8,
             "tensor 'a': data_offsets [4, 3] are not 0 <= begin <= end");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 8, "are not 0 <= begin <= end");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
             "tensor 'a': data_offsets end 16 is beyond the data section (8 bytes");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8,
             "tensor 'a': data_offsets span 4 bytes but dtype F32 and its shape need 8");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 12,
             "tensor 'b' (bytes 4..12) overlaps tensor 'a' (which ends at 8)");
  /* R4-7: the tensors must tile the data section exactly: no hole, no overlap, no trailing bytes. */
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
             "bytes 0..4 of the data section belong to no tensor (a hole at the start, before tensor 'w' at "
             "data_offsets [4, 12])");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[5,7]}}", 7,
             "bytes 2..5 of the data section belong to no tensor (a hole between tensors, before tensor 'b' at "
             "data_offsets [5, 7])");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 6,
             "4 trailing bytes (2..6 of the data section) after the last tensor 'a' (data_offsets [0, 2])");
  expect_bad("{\"__metadata__\":{\"format\":\"pt\"}}", 3, "has no tensors but 3 bytes after its header");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
             "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
             "tensor 'e' (bytes 4..4) overlaps tensor 'a' (which ends at 8)");
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "overlaps tensor 'a'");
  { /* out of order in the header but tiling, with empty tensors at the seams: accepted */
    const char *h = "{\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[2,5]},"
                    "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]},"
                    "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                    "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}  ";
    size_t hl = strlen(h);
    unsigned char buf[512] = {0};
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, h, hl);
    CHECK_OK(acc_safetensors_open_memory(&f, buf, 8 + hl + 5, "tiled"));
    CHECK(f && acc_safetensors_count(f) == 4, "tiled file: %zu tensors", f ? acc_safetensors_count(f) : 0);
    acc_safetensors_close(f);
    f = NULL;
  }
  expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "duplicate object key");
  expect_bad("{\"__metadata__\":{\"x\":1}}", 0, "metadata entry 'x' is not a string");
  expect_bad("{\"__metadata__\":[]}", 0, "\"__metadata__\" is not an object");
  expect_bad("{\"a\":[1]}", 0, "tensor 'a': entry is not an object");

  /* Files: missing, a directory, truncated copy of a valid file. */
  char path[1024];
  snprintf(path, sizeof path, "%s/missing.safetensors", dir);
  CHECK_ERR(acc_safetensors_open(&f, path), ACC_ERR_IO, "missing.safetensors");
  CHECK_ERR(acc_safetensors_open(&f, dir), ACC_ERR_IO, "is a directory, not a regular file");
  float x[4] = {1, 2, 3, 4};
  acc_tensor_view t = {"x", ACC_F32, 1, {4}, x, 0};
  snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
  CHECK_OK(acc_safetensors_write(path, &t, 1, NULL, NULL, 0));
  size_t len;
  char *raw = ckpt_read_file(path, &len);
  FILE *out = fopen(path, "wb");
  fwrite(raw, 1, len - 4, out);
  fclose(out);
  free(raw);
  CHECK_ERR(acc_safetensors_open(&f, path), ACC_ERR_FORMAT, "tensor 'x': data_offsets end 16 is beyond the data section");
  /* A valid file with bytes appended (two writes interleaved) is refused, naming the file. */
  snprintf(path, sizeof path, "%s/trailing.safetensors", dir);
  CHECK_OK(acc_safetensors_write(path, &t, 1, NULL, NULL, 0));
  out = fopen(path, "ab");
  fwrite("JUNK", 1, 4, out);
  fclose(out);
  CHECK_ERR(acc_safetensors_open(&f, path), ACC_ERR_FORMAT, "4 trailing bytes (16..20 of the data section) after "
            "the last tensor 'x'");
  CHECK(strstr(acc_last_error(), "trailing.safetensors") != NULL, "message lacks the path: %s", acc_last_error());
  snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
  out = fopen(path, "wb");
  fclose(out);
  CHECK_ERR(acc_safetensors_open(&f, path), ACC_ERR_FORMAT, "is 0 bytes, shorter than the 8-byte header length");
}

/* A write that runs out of space (RLIMIT_FSIZE: write fails with EFBIG) is ACC_ERR_IO, keeps the
 * previous file intact and leaves no temporary file. */
static void test_disk_full(const char *dir) {
  char sub[1100], path[1200];
  snprintf(sub, sizeof sub, "%s/full", dir);
  REQUIRE_OK(acc__mkdirs(sub));
  snprintf(path, sizeof path, "%s/w.safetensors", sub);
  static float big[4096];
  for (int i = 0; i < 4096; i++) big[i] = (float)i;
  acc_tensor_view small = {"old", ACC_F32, 1, {4}, big, 0}, large = {"new", ACC_F32, 1, {4096}, big, 0};
  CHECK_OK(acc_safetensors_write(path, &small, 1, NULL, NULL, 0));
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 4096; /* bytes: the 16 KiB tensor does not fit */
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &lim);
  acc_result rc = acc_safetensors_write(path, &large, 1, NULL, NULL, 0);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  CHECK(rc == ACC_ERR_IO, "write past the size limit -> %s: %s", acc_result_string(rc), acc_last_error());
  CHECK(strstr(acc_last_error(), "could not write") != NULL, "message: %s", acc_last_error());
  acc_safetensors *f = NULL;
  acc_tensor_view v;
  CHECK_OK(acc_safetensors_open(&f, path));
  CHECK(f && acc_safetensors_count(f) == 1 && acc_safetensors_find(f, "old", &v) == ACC_OK, "previous file damaged");
  acc_safetensors_close(f);
  DIR *d = opendir(sub);
  int entries = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') entries++;
  if (d) closedir(d);
  CHECK(entries == 1, "%d files in %s after a failed write (expected 1)", entries, sub);
}

int main(void) {
  char *dir = ckpt_tmpdir("st");
  test_round_trip(dir);
  test_malformed(dir);
  test_disk_full(dir);
  acc__rmtree(dir);
  free(dir);
  return acc_test_finish("ckpt_safetensors");
}
