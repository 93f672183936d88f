/* The device communicator (src/device/dcomm.c) over the strict fake device's NCCL
 * (src/device/fake_nccl.c), called directly through the launcher on N processes: all-gather,
 * reduce-scatter and all-reduce on device memory, separate and in place, float32 / bf16 / int32 /
 * float64, results read back through the device's copies and checked element by element; the fake
 * NCCL's call counter; a host pointer where device memory is expected is refused on every process
 * (the fake device's strictness) and the communicator is aborted after it; the cpu device has no
 * NCCL (auto: none; always: an error), never: none. */
#include <stdint.h>
#include <string.h>

#include "acc_test.h"
#include "device/dcomm.h"
#include "device/device.h"
#include "device/nccl_boot.h"

enum { C = 5 }; /* elements per process's block */

#define REQUIRE(cond, ...)                                   \
  do {                                                       \
    if (!(cond)) {                                           \
      fprintf(stderr, "[rank %d] FATAL: ", acc_test_rank);   \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, "\n");                                 \
      exit(1);                                               \
    }                                                        \
  } while (0)

static acc__device *dev;
static acc__dstream *s;
static int rank, world;

static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (acc__device_alloc(dev, bytes, &p) != ACC_OK) return NULL;
  return p;
}

static acc_result put(void *d, const void *h, size_t bytes) {
  ACC_CHECK(acc__device_copy(dev, d, h, bytes, ACC__COPY_H2D, s));
  return acc__dstream_sync(dev, s);
}

static acc_result get(void *h, const void *d, size_t bytes) {
  ACC_CHECK(acc__device_copy(dev, h, d, bytes, ACC__COPY_D2H, s));
  return acc__dstream_sync(dev, s);
}

/* value j of process r's block, as a double (exact in every tested dtype) */
static double val(int r, int j) { return (double)(r * 16 + j + 1); }

static void store(void *buf, acc_dtype dt, size_t i, double v) {
  if (dt == ACC_F32) ((float *)buf)[i] = (float)v;
  else if (dt == ACC_F64) ((double *)buf)[i] = v;
  else if (dt == ACC_I32) ((int32_t *)buf)[i] = (int32_t)v;
  else { /* bf16: small integers are exact */
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    ((uint16_t *)buf)[i] = (uint16_t)(b >> 16);
  }
}

static double load(const void *buf, acc_dtype dt, size_t i) {
  if (dt == ACC_F32) return ((const float *)buf)[i];
  if (dt == ACC_F64) return ((const double *)buf)[i];
  if (dt == ACC_I32) return ((const int32_t *)buf)[i];
  uint32_t b = (uint32_t)((const uint16_t *)buf)[i] << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static void gather_case(acc__dcomm *c, acc_dtype dt, int inplace) {
  size_t es = acc_dtype_size(dt), all = (size_t)world * C;
  unsigned char h[8 * 64 * C], mine[8 * C];
  char *d_all = dalloc(all * es), *d_mine = inplace ? d_all + (size_t)rank * C * es : dalloc(C * es);
  REQUIRE(d_all && d_mine, "device memory");
  memset(h, 0xee, all * es);
  REQUIRE_OK(put(d_all, h, all * es)); /* junk everywhere: the gather must overwrite it */
  for (int j = 0; j < C; j++) store(mine, dt, (size_t)j, val(rank, j));
  REQUIRE_OK(put(d_mine, mine, C * es));
  CHECK_OK(acc__dcomm_all_gather(c, d_mine, d_all, C, dt, s));
  REQUIRE_OK(get(h, d_all, all * es));
  int bad = 0;
  for (int r = 0; r < world; r++)
    for (int j = 0; j < C; j++) bad += load(h, dt, (size_t)r * C + (size_t)j) != val(r, j);
  CHECK(bad == 0, "all_gather %s%s: %d wrong elements", acc_dtype_name(dt), inplace ? " in place" : "", bad);
  if (!inplace) acc__device_free(dev, d_mine);
  acc__device_free(dev, d_all);
}

static void scatter_case(acc__dcomm *c, acc_dtype dt, int inplace) {
  size_t es = acc_dtype_size(dt), all = (size_t)world * C;
  unsigned char h[8 * 64 * C], out[8 * C];
  char *d_all = dalloc(all * es), *d_out = inplace ? d_all + (size_t)rank * C * es : dalloc(C * es);
  REQUIRE(d_all && d_out, "device memory");
  /* element k of this process's send buffer: (rank + 1) * (k + 1) */
  for (size_t k = 0; k < all; k++) store(h, dt, k, (double)((rank + 1) * (int)(k + 1)));
  REQUIRE_OK(put(d_all, h, all * es));
  CHECK_OK(acc__dcomm_reduce_scatter(c, d_all, d_out, C, dt, ACC_SUM, s));
  REQUIRE_OK(get(out, d_out, C * es));
  int bad = 0;
  const double ranks = (double)world * (world + 1) / 2; /* sum of (r + 1) */
  for (int j = 0; j < C; j++) bad += load(out, dt, (size_t)j) != ranks * (double)(rank * C + j + 1);
  CHECK(bad == 0, "reduce_scatter %s%s: %d wrong elements", acc_dtype_name(dt), inplace ? " in place" : "", bad);
  if (!inplace) acc__device_free(dev, d_out);
  acc__device_free(dev, d_all);
}

static void reduce_case(acc__dcomm *c) {
  int32_t h[C], out[C];
  int32_t *d = dalloc(sizeof h);
  REQUIRE(d != NULL, "device memory");
  for (int j = 0; j < C; j++) h[j] = (int32_t)val(rank, j);
  REQUIRE_OK(put(d, h, sizeof h));
  CHECK_OK(acc__dcomm_all_reduce(c, d, d, C, ACC_I32, ACC_MAX, s));
  REQUIRE_OK(get(out, d, sizeof out));
  int bad = 0;
  for (int j = 0; j < C; j++) bad += out[j] != (int32_t)val(world - 1, j);
  CHECK(bad == 0, "all_reduce MAX int32 in place: %d wrong elements", bad);
  acc__device_free(dev, d);
}

int main(void) {
  acc_state *st;
  acc_state_options so;
  REQUIRE_OK(acc_state_options_init(&so, ACC_STATE_OPTIONS_VERSION));
  REQUIRE_OK(acc_state_create(&st, &so));
  rank = acc_test_rank = acc_state_process_index(st);
  world = acc_state_num_processes(st);
  REQUIRE(world <= 64, "at most 64 processes");
  acc__nccl_boot_note_device(ACC__DEVICE_FAKE, ""); /* what placement records for the fake device */
  REQUIRE_OK(acc__device_open(&dev, ACC__DEVICE_FAKE, 0));
  REQUIRE_OK(acc__dstream_create(dev, &s));

  acc__dcomm *c = NULL;
  REQUIRE_OK(acc__dcomm_create(st, dev, 2, &c));
  CHECK(c == NULL, "never: no communicator");
  REQUIRE_OK(acc__dcomm_create(st, dev, 0, &c));
  REQUIRE(c != NULL, "auto on the fake device with %d processes: a communicator", world);
  unsigned long long before = acc__dcomm_fake_calls();
  const acc_dtype dts[] = {ACC_F32, ACC_BF16, ACC_I32, ACC_F64};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
    for (int inplace = 0; inplace < 2; inplace++) {
      gather_case(c, dts[k], inplace);
      scatter_case(c, dts[k], inplace);
    }
  reduce_case(c);
  unsigned long long calls = acc__dcomm_fake_calls() - before;
  CHECK(calls == 17, "the fake NCCL counted %llu collectives, 17 were made", calls);

  /* the cpu device has no NCCL: auto makes none, always says why */
  acc__device *cpu = NULL;
  acc__dcomm *none = NULL;
  REQUIRE_OK(acc__device_open(&cpu, ACC__DEVICE_CPU, 0));
  CHECK_OK(acc__dcomm_create(st, cpu, 0, &none));
  CHECK(none == NULL, "auto on the cpu device: no communicator");
  CHECK_ERR(acc__dcomm_create(st, cpu, 1, &none), ACC_ERR_NOT_SUPPORTED, "has no NCCL");
  acc__device_close(cpu);

  /* strictness: a host pointer where device memory is expected, on every process alike; the
   * communicator is aborted after it (and the job marked broken, as after an NCCL failure) */
  float host[C * 64] = {0};
  CHECK_ERR(acc__dcomm_all_gather(c, host, host, C, ACC_F32, s), ACC_ERR_INVALID_ARGUMENT, "not device memory");
  printf("host pointer refused: %s\n", acc_last_error());
  CHECK_ERR(acc__dcomm_all_reduce(c, host, host, C, ACC_F32, ACC_SUM, s), ACC_ERR_BACKEND, "aborted");
  acc__dcomm_destroy(c);
  REQUIRE_OK(acc__dstream_destroy(dev, s));
  acc__device_close(dev);
  int rc = acc_test_finish("device_dcomm");
  acc_state_destroy(st);
  return rc;
}
