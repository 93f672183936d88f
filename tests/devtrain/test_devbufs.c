/* The program's device buffers in checkpoints (issue 33 item 2): buffers in device memory of the
 * strict fake device (host code faults on them) registered with acc_accelerator_register_buffers,
 * staged chunk by chunk through host memory by save_state and load_state. Run by the launcher at 1
 * and 2 processes with ACCELERATE_TEST_DEVICE=fake.
 *
 * Checks, for every dtype (F32, F64, F16, BF16, I32, I64, U8, U64: bit patterns that include NaN
 * payloads, negative zeros and every byte value), next to a host buffer and a fixed counter:
 *  - for several chunk sizes (ACCELERATE_CKPT_STAGE_BYTES unset, 7 bytes: smaller than some
 *    elements and dividing none, 4096, and 64 KiB against a 256 KiB buffer): save_state writes
 *    every buffer bit for bit (the file read back on process 0), load_state after the buffers were
 *    overwritten brings every one back bit for bit on every process, the number of chunks copied
 *    is exactly the sum of ceil(bytes / chunk) with the chunk rounded down to whole elements (at
 *    least one), and the largest host staging buffer is the largest chunk: never a whole buffer;
 *  - a failed load_state leaves every device buffer as it was: a checkpoint whose file is
 *    truncated, whose header is garbage, or whose LAST tensor has another dtype (so every tensor
 *    before it would already have been copied if the checks ran chunk by chunk) fails naming the
 *    file or tensor, copies no chunk, and the device buffers keep the values they had.
 *
 * Usage (through accelerate launch): test_devbufs DIR */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt/accel_state.h"

#define NDT 8
#define BIG_COUNT ((size_t)1 << 16) /* F32: 256 KiB */

static int rank, nprocs;
static acc_accelerator *acc;
static const acc_dtype dts[NDT] = {ACC_F32, ACC_F64, ACC_F16, ACC_BF16, ACC_I32, ACC_I64, ACC_U8, ACC_U64};
static const char *const names[NDT] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "u64"};
static size_t counts[NDT + 1];
static void *dev[NDT + 1];     /* device buffers: one per dtype, then the big F32 one */
static unsigned char *want[NDT + 1]; /* what each holds at the save */
static double hostbuf[5];
static int64_t step_counter;

static size_t bytes_of(int i) { return counts[i] * acc_dtype_size(i < NDT ? dts[i] : ACC_F32); }
static size_t esize(int i) { return acc_dtype_size(i < NDT ? dts[i] : ACC_F32); }

/* A pattern that differs per buffer and per salt, every byte value included; floats get NaN
 * payloads and negative zeros (bit-exact means bits, not values). */
static void fill(unsigned char *p, size_t n, int i, unsigned salt) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) + salt;
  for (size_t k = 0; k < n; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[k] = (unsigned char)(k < 256 ? k : x >> 24);
  }
  if (i < NDT && dts[i] == ACC_F32 && n >= 8) memcpy(p, (uint32_t[]){0x7fc12345u, 0x80000000u}, 8);
  if (i < NDT && dts[i] == ACC_F64 && n >= 16)
    memcpy(p, (uint64_t[]){0x7ff8000000abcdefull, 0x8000000000000000ull}, 16);
  if (i < NDT && (dts[i] == ACC_F16 || dts[i] == ACC_BF16) && n >= 4) memcpy(p, (uint16_t[]){0x7e01u, 0x8000u}, 4);
}

static void put_all(unsigned salt) {
  for (int i = 0; i <= NDT; i++) {
    unsigned char *h = malloc(bytes_of(i));
    REQUIRE_OK(h ? ACC_OK : ACC_ERR_NOMEM);
    fill(h, bytes_of(i), i, salt);
    REQUIRE_OK(acc_accelerator_memcpy(acc, dev[i], h, bytes_of(i), ACC_COPY_HOST_TO_DEVICE));
    free(h);
  }
}

/* Every device buffer holds the pattern of salt (or want[] when salt is 0). */
static int device_holds(unsigned salt, const char *what) {
  int ok = 1;
  for (int i = 0; i <= NDT; i++) {
    unsigned char *h = malloc(bytes_of(i)), *w = malloc(bytes_of(i));
    REQUIRE_OK(h && w ? ACC_OK : ACC_ERR_NOMEM);
    REQUIRE_OK(acc_accelerator_memcpy(acc, h, dev[i], bytes_of(i), ACC_COPY_DEVICE_TO_HOST));
    if (salt) fill(w, bytes_of(i), i, salt);
    else memcpy(w, want[i], bytes_of(i));
    size_t at = 0;
    while (at < bytes_of(i) && h[at] == w[at]) at++;
    CHECK(at == bytes_of(i), "%s: device buffer %s differs at byte %zu of %zu (%02x vs %02x)", what,
          i < NDT ? names[i] : "big", at, bytes_of(i), at < bytes_of(i) ? h[at] : 0, at < bytes_of(i) ? w[at] : 0);
    ok &= at == bytes_of(i);
    free(h);
    free(w);
  }
  return ok;
}

/* The chunk count and largest staging buffer the library should use with stage bytes s (0:
 * the default) for one pass over every device buffer. */
static void expect(size_t s, uint64_t *chunks, size_t *peak) {
  *chunks = 0;
  *peak = 0;
  for (int i = 0; i <= NDT; i++) {
    size_t es = esize(i), c = s ? s : (size_t)64 << 20;
    c -= c % es;
    if (c < es) c = es;
    if (c > bytes_of(i)) c = bytes_of(i);
    *chunks += (bytes_of(i) + c - 1) / c;
    if (c > *peak) *peak = c;
  }
}

static void check_file(const char *dir) {
  if (rank != 0) return;
  char path[1600];
  snprintf(path, sizeof path, "%s/moments.safetensors", dir);
  acc_safetensors *f = NULL;
  REQUIRE_OK(acc_safetensors_open(&f, path));
  for (int i = 0; i <= NDT; i++) {
    acc_tensor_view v;
    REQUIRE_OK(acc_safetensors_find(f, i < NDT ? names[i] : "big", &v));
    CHECK(v.dtype == (i < NDT ? dts[i] : ACC_F32) && v.nbytes == bytes_of(i) && memcmp(v.data, want[i], v.nbytes) == 0,
          "%s: tensor %s is not the device buffer bit for bit", path, i < NDT ? names[i] : "big");
  }
  acc_safetensors_close(f);
}

static void round_trip(const char *root, size_t s, unsigned salt) {
  char dir[1400], label[64];
  if (s) {
    char v[32];
    snprintf(v, sizeof v, "%zu", s);
    setenv("ACCELERATE_CKPT_STAGE_BYTES", v, 1);
    snprintf(label, sizeof label, "stage %zu bytes", s);
  } else {
    unsetenv("ACCELERATE_CKPT_STAGE_BYTES");
    snprintf(label, sizeof label, "stage default");
  }
  snprintf(dir, sizeof dir, "%s/ckpt_%zu", root, s);
  put_all(salt);
  for (int i = 0; i <= NDT; i++) fill(want[i], bytes_of(i), i, salt);
  hostbuf[2] = (double)salt;
  step_counter = 1000 + salt;
  uint64_t want_chunks, chunks;
  size_t want_peak, peak;
  expect(s, &want_chunks, &want_peak);
  acc__own_state_stage_stats(NULL, NULL, 1);
  REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
  acc__own_state_stage_stats(&chunks, &peak, 1);
  /* the main process alone writes the buffers */
  CHECK(chunks == (rank == 0 ? want_chunks : 0), "%s: save_state copied %llu chunks, expected %llu", label,
        (unsigned long long)chunks, (unsigned long long)(rank == 0 ? want_chunks : 0));
  CHECK(peak == (rank == 0 ? want_peak : 0), "%s: save_state staged through %zu host bytes, expected %zu", label, peak,
        rank == 0 ? want_peak : 0);
  check_file(dir);
  put_all(salt + 7); /* the program goes on: everything changes */
  hostbuf[2] = -1;
  step_counter = -1;
  REQUIRE_OK(acc_accelerator_load_state(acc, dir, NULL));
  acc__own_state_stage_stats(&chunks, &peak, 1);
  CHECK(chunks == want_chunks && peak == want_peak, "%s: load_state copied %llu chunks through %zu host bytes, "
        "expected %llu through %zu", label, (unsigned long long)chunks, peak, (unsigned long long)want_chunks, want_peak);
  device_holds(0, label);
  CHECK(hostbuf[2] == (double)salt && step_counter == 1000 + salt, "%s: host buffer %g, counter %lld", label,
        hostbuf[2], (long long)step_counter);
  size_t total = 0;
  for (int i = 0; i <= NDT; i++) total += bytes_of(i);
  if (rank == 0)
    printf("devbufs: %s: %llu chunks of at most %zu bytes for %zu bytes of device buffers, bit for bit\n", label,
           (unsigned long long)want_chunks, want_peak, total);
}

/* A copy of checkpoint good as bad, damaged by cmd (run by process 0 in the copy). */
static void damaged(const char *good, const char *bad, const char *cmd) {
  char sh[8192];
  snprintf(sh, sizeof sh, "rm -rf '%s' && cp -r '%s' '%s' && cd '%s' && %s", bad, good, bad, bad, cmd);
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  if (rank == 0) REQUIRE_OK(system(sh) == 0 ? ACC_OK : ACC_ERR_IO);
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
}

/* Failed loads of a damaged copy of the last checkpoint (want[] holds what it saved). */
static void failed_loads(const char *root, size_t last_stage) {
  setenv("ACCELERATE_CKPT_STAGE_BYTES", "64", 1);
  char good[1400], bad[1400];
  snprintf(good, sizeof good, "%s/ckpt_%zu", root, last_stage);
  snprintf(bad, sizeof bad, "%s/bad", root);
  struct {
    const char *what, *cmd, *msg;
  } cases[] = {
      {"truncated", "truncate -s 2000 moments.safetensors", "moments.safetensors"},
      {"garbage header", "printf 'XXXXXXXX{not json' | dd of=moments.safetensors bs=1 conv=notrunc 2>/dev/null",
       "moments.safetensors"},
      {"last tensor of another dtype", NULL, "tensor 'big' of"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    damaged(good, bad, cases[c].cmd ? cases[c].cmd : "true");
    if (!cases[c].cmd && rank == 0) {
      /* the same tensors, but the last registered one ("big", F32) written as I32: every check
       * passes up to it */
      char path[1600];
      snprintf(path, sizeof path, "%s/moments.safetensors", bad);
      acc_tensor_view v[NDT + 1];
      for (int i = 0; i <= NDT; i++) {
        v[i] = (acc_tensor_view){.name = i < NDT ? names[i] : "big", .dtype = i < NDT ? dts[i] : ACC_I32, .ndim = 1,
                                 .data = want[i]};
        v[i].shape[0] = (int64_t)counts[i];
      }
      REQUIRE_OK(acc_safetensors_write(path, v, NDT + 1, NULL, NULL, 0));
    }
    REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
    put_all(99);
    hostbuf[2] = 42;
    step_counter = 42;
    acc__own_state_stage_stats(NULL, NULL, 1);
    acc_result rc = acc_accelerator_load_state(acc, bad, NULL);
    CHECK(rc != ACC_OK, "%s: a damaged checkpoint loads", cases[c].what);
    CHECK(strstr(acc_last_error(), cases[c].msg) != NULL, "%s: the error lacks \"%s\": %s", cases[c].what,
          cases[c].msg, acc_last_error());
    uint64_t chunks;
    acc__own_state_stage_stats(&chunks, NULL, 1);
    CHECK(chunks == 0, "%s: a failed load copied %llu chunks into the device", cases[c].what,
          (unsigned long long)chunks);
    device_holds(99, cases[c].what);
    CHECK(hostbuf[2] == 42 && step_counter == 42, "%s: a failed load changed the host buffer (%g) or counter (%lld)",
          cases[c].what, hostbuf[2], (long long)step_counter);
    if (rank == 0) printf("devbufs: a %s checkpoint fails and leaves the device buffers: %s\n", cases[c].what,
                          acc_last_error());
  }
  /* and the good one still loads */
  REQUIRE_OK(acc_accelerator_load_state(acc, good, NULL));
  device_holds(0, "the good checkpoint after the failed ones");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_devbufs DIR\n");
    return 2;
  }
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = nprocs > 1 ? rank : -1;
  CHECK(acc_accelerator_device_type(acc) != ACC_DEVICE_CPU, "the accelerator trains on the fake device");
  char root[1100];
  snprintf(root, sizeof root, "%s/np%d", argv[1], nprocs);
  mkdir(argv[1], 0755);
  mkdir(root, 0755);
  for (int i = 0; i < NDT; i++) counts[i] = 1000 + 37 * (size_t)i;
  counts[NDT] = BIG_COUNT;
  acc_named_buffer nb[NDT + 1];
  for (int i = 0; i <= NDT; i++) {
    REQUIRE_OK(acc_accelerator_alloc(acc, bytes_of(i), &dev[i]));
    want[i] = malloc(bytes_of(i));
    REQUIRE_OK(want[i] ? ACC_OK : ACC_ERR_NOMEM);
    nb[i] = (acc_named_buffer){i < NDT ? names[i] : "big", i < NDT ? dts[i] : ACC_F32, &dev[i], counts[i], NULL};
  }
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "moments", nb, NDT + 1));
  void *hp = hostbuf;
  acc_named_buffer hb[2] = {{"host", ACC_F64, &hp, 5, NULL}, {"t", ACC_I64, NULL, 1, &step_counter}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "program", hb, 2));

  const size_t stages[] = {0, 7, 4096, (size_t)1 << 16};
  const size_t nst = sizeof stages / sizeof stages[0];
  for (size_t s = 0; s < nst; s++) round_trip(root, stages[s], 3 + (unsigned)s);
  failed_loads(root, stages[nst - 1]);
  for (int i = 0; i <= NDT; i++) {
    acc_accelerator_free(acc, dev[i]);
    free(want[i]);
  }
  acc_accelerator_destroy(acc);
  return acc_test_finish("devbufs");
}
