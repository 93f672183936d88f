/* The fake device's rules: what a GPU would make fail (or silently corrupt) is refused with a
 * message naming the operation and the argument, and stream order is enforced. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acc_test.h"
#include "device/device.h"

static acc__device *dev;

/* A host pointer (or garbage) where device memory is expected, and the reverse. */
static void test_pointer_kinds(void) {
  float host[16] = {0};
  float *d = NULL;
  REQUIRE_OK(acc__device_alloc(dev, sizeof host, (void **)&d));
  int yes = -1;
  CHECK_OK(acc__device_is_device_ptr(dev, d, &yes));
  CHECK(yes == 1, "a device allocation is not a device pointer");
  CHECK_OK(acc__device_is_device_ptr(dev, d + 5, &yes));
  CHECK(yes == 1, "the inside of a device allocation is not a device pointer");
  CHECK_OK(acc__device_is_device_ptr(dev, host, &yes));
  CHECK(yes == 0, "a host array is a device pointer");

  acc__adamw_args a = {0};
  acc__adamw_args_set(&a, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1);
  a.w = host; /* host weights */
  a.g = a.m = a.v = d;
  a.n = 16;
  CHECK_ERR(acc__device_adamw(dev, &a, NULL), ACC_ERR_INVALID_ARGUMENT,
            "adamw: argument w");
  CHECK(strstr(acc_last_error(), "not device memory") != NULL, "message: %s", acc_last_error());
  CHECK_ERR(acc__device_memset(dev, host, 0, sizeof host, NULL), ACC_ERR_INVALID_ARGUMENT,
            "memset: argument dst");
  /* host to device with a device source / device to host into device memory */
  CHECK_ERR(acc__device_copy(dev, d, d, sizeof host, ACC__COPY_H2D, NULL),
            ACC_ERR_INVALID_ARGUMENT, "argument src");
  CHECK(strstr(acc_last_error(), "device memory where a host pointer is expected") != NULL,
        "message: %s", acc_last_error());
  CHECK_ERR(acc__device_copy(dev, host, host, sizeof host, ACC__COPY_D2H, NULL),
            ACC_ERR_INVALID_ARGUMENT, "copy: argument src");
  /* past the end of the allocation */
  CHECK_ERR(acc__device_copy(dev, d + 8, host, sizeof host, ACC__COPY_H2D, NULL),
            ACC_ERR_INVALID_ARGUMENT, "run past the end of its 64-byte device allocation");
  CHECK_ERR(acc__device_unscale(dev, d, 16, 1.0f, NULL, NULL), ACC_ERR_INVALID_ARGUMENT,
            "found_inf is NULL");
  /* freeing: not the start, a host pointer, then a use after free and a double free */
  CHECK_ERR(acc__device_free(dev, d + 1), ACC_ERR_INVALID_ARGUMENT, "not its start");
  CHECK_ERR(acc__device_free(dev, host), ACC_ERR_INVALID_ARGUMENT, "is not device memory");
  CHECK_OK(acc__device_free(dev, d));
  CHECK_ERR(acc__device_memset(dev, d, 0, 4, NULL), ACC_ERR_INVALID_ARGUMENT,
            "memory already freed");
  CHECK_ERR(acc__device_free(dev, d), ACC_ERR_INVALID_ARGUMENT, "freed twice");
  CHECK_OK(acc__device_free(dev, NULL));
}

/* Operations run at synchronization points, in stream order; a host copy is garbage until then. */
static void test_deferred(void) {
  enum { N = 1000 };
  float *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back), *d;
  for (int i = 0; i < N; i++) h[i] = (float)i;
  REQUIRE_OK(acc__device_alloc(dev, N * sizeof(float), (void **)&d));
  acc__dstream *s;
  REQUIRE_OK(acc__dstream_create(dev, &s));
  CHECK_OK(acc__device_copy(dev, d, h, N * sizeof(float), ACC__COPY_H2D, s));
  /* the copy waits in the queue (the device memory itself is unreachable from host code) */
  CHECK(acc__device_queued(dev) == 1, "the copy ran before any synchronization (%zu queued)",
        acc__device_queued(dev));
  CHECK_OK(acc__device_copy(dev, back, d, N * sizeof(float), ACC__COPY_D2H, s));
  uint32_t bits;
  memcpy(&bits, &back[7], 4);
  CHECK(bits == 0xffffffffu, "the host copy is readable before the stream was synchronized");
  acc__devent *e;
  REQUIRE_OK(acc__devent_create(dev, &e));
  CHECK_OK(acc__devent_record(dev, e, s));
  int done = 0;
  CHECK_OK(acc__devent_query(dev, e, &done)); /* the queued work makes progress */
  CHECK(done == 1, "event query did not complete");
  CHECK(back[7] == 7.0f && back[N - 1] == (float)(N - 1), "copy back: %g %g", (double)back[7],
        (double)back[N - 1]);
  /* in and out of the same host buffer on one stream is legal: no poison over the pending read */
  for (int i = 0; i < N; i++) h[i] = (float)(2 * i);
  CHECK_OK(acc__device_copy(dev, d, h, N * sizeof(float), ACC__COPY_H2D, s));
  CHECK_OK(acc__device_copy(dev, h, d, N * sizeof(float), ACC__COPY_D2H, s));
  CHECK_OK(acc__dstream_sync(dev, s));
  CHECK(h[11] == 22.0f, "round trip through one host buffer: %g", (double)h[11]);
  CHECK_OK(acc__devent_destroy(dev, e));
  CHECK_OK(acc__dstream_destroy(dev, s));
  acc__device_free(dev, d);
  free(h);
  free(back);
}

/* A kernel on stream B reading a buffer that a copy on stream A has not finished writing is
 * refused; after B waits on an event recorded on A, it is accepted and sees the data. */
static void test_stream_order(void) {
  enum { N = 64 };
  acc__device *outer = dev; /* a fresh device: its created streams are numbered 1 and 2 */
  REQUIRE_OK(acc__device_open(&dev, ACC__DEVICE_FAKE, 0));
  float h[N], out[N];
  for (int i = 0; i < N; i++) h[i] = 2.0f;
  float *d, *dcoef, coef = 0.5f;
  REQUIRE_OK(acc__device_alloc(dev, sizeof h, (void **)&d));
  REQUIRE_OK(acc__device_alloc(dev, sizeof coef, (void **)&dcoef));
  acc__dstream *a, *b;
  acc__devent *e;
  REQUIRE_OK(acc__dstream_create(dev, &a));
  REQUIRE_OK(acc__dstream_create(dev, &b));
  REQUIRE_OK(acc__devent_create(dev, &e));
  CHECK_OK(acc__device_copy(dev, dcoef, &coef, sizeof coef, ACC__COPY_H2D, NULL));
  CHECK_OK(acc__dstream_sync(dev, NULL));
  CHECK_OK(acc__device_copy(dev, d, h, sizeof h, ACC__COPY_H2D, a));
  CHECK_ERR(acc__device_scale(dev, d, N, dcoef, b), ACC_ERR_INVALID_USAGE,
            "stream order violation: scale on stream 2 writes buf");
  CHECK(strstr(acc_last_error(), "copy queued on stream 1") != NULL &&
            strstr(acc_last_error(), "record an event on stream 1") != NULL,
        "message: %s", acc_last_error());
  /* reading only (a copy out of d on b) conflicts with the pending write as well */
  CHECK_ERR(acc__device_copy(dev, out, d, sizeof out, ACC__COPY_D2H, b), ACC_ERR_INVALID_USAGE,
            "copy on stream 2 reads src");
  /* the default stream is a stream like the others (created streams do not wait for it) */
  CHECK_ERR(acc__device_memset(dev, d, 0, sizeof h, NULL), ACC_ERR_INVALID_USAGE,
            "memset on stream 0 writes dst");
  /* ordered: accepted */
  CHECK_OK(acc__devent_record(dev, e, a));
  CHECK_OK(acc__dstream_wait(dev, b, e));
  CHECK_OK(acc__device_scale(dev, d, N, dcoef, b));
  CHECK_OK(acc__device_copy(dev, out, d, sizeof out, ACC__COPY_D2H, b));
  CHECK_OK(acc__dstream_sync(dev, b));
  CHECK(out[0] == 1.0f && out[N - 1] == 1.0f, "scaled data: %g %g", (double)out[0],
        (double)out[N - 1]);
  /* two streams reading the same buffer need no order */
  CHECK_OK(acc__device_copy(dev, out, d, sizeof out, ACC__COPY_D2H, a));
  float out2[N];
  CHECK_OK(acc__device_copy(dev, out2, d, sizeof out2, ACC__COPY_D2H, b));
  CHECK_OK(acc__dstream_sync(dev, a));
  CHECK_OK(acc__dstream_sync(dev, b));
  CHECK(out2[3] == 1.0f, "second reader: %g", (double)out2[3]);
  /* ordering is transitive, and only what waited is ordered: c writes d; b waits for c's event;
   * a (which did not wait) touching d is refused even though c's write has run; after a waits for
   * b's event (which carries c's), it is accepted */
  CHECK_OK(acc__dstream_sync(dev, a));
  acc__dstream *c;
  acc__devent *eb;
  REQUIRE_OK(acc__dstream_create(dev, &c));
  REQUIRE_OK(acc__devent_create(dev, &eb));
  CHECK_OK(acc__device_memset(dev, d, 0, sizeof h, c));
  CHECK_OK(acc__devent_record(dev, e, c));
  CHECK_OK(acc__dstream_wait(dev, b, e));
  CHECK_OK(acc__device_scale(dev, d, N, dcoef, b)); /* ordered after c's memset */
  CHECK_ERR(acc__device_copy(dev, out, d, sizeof out, ACC__COPY_D2H, a), ACC_ERR_INVALID_USAGE,
            "nothing orders the two");
  CHECK_OK(acc__devent_record(dev, eb, b));
  CHECK_OK(acc__dstream_wait(dev, a, eb));
  CHECK_OK(acc__device_copy(dev, out, d, sizeof out, ACC__COPY_D2H, a));
  CHECK_OK(acc__dstream_sync(dev, a));
  CHECK(out[4] == 0.0f, "after memset and scale: %g", (double)out[4]);
  /* the host waiting for a stream orders everything queued afterwards */
  CHECK_OK(acc__device_memset(dev, d, 0, sizeof h, c));
  CHECK_OK(acc__dstream_sync(dev, c));
  CHECK_OK(acc__device_scale(dev, d, N, dcoef, b));
  CHECK_OK(acc__dstream_sync(dev, b));
  CHECK_OK(acc__devent_destroy(dev, eb));
  CHECK_OK(acc__dstream_destroy(dev, c));
  CHECK_OK(acc__device_copy(dev, d, h, sizeof h, ACC__COPY_H2D, NULL)); /* back to 2 * 0.5 */
  CHECK_OK(acc__device_scale(dev, d, N, dcoef, NULL));
  CHECK_OK(acc__dstream_sync(dev, NULL));
  /* a write after a pending read on another stream is a hazard too */
  CHECK_OK(acc__device_copy(dev, out, d, sizeof out, ACC__COPY_D2H, a));
  CHECK_ERR(acc__device_memset(dev, d, 0, sizeof h, b), ACC_ERR_INVALID_USAGE,
            "which copy queued on stream 1 reads (argument src)");
  /* freeing synchronizes everything first, like cudaFree */
  CHECK_OK(acc__device_free(dev, d));
  CHECK(out[9] == 1.0f, "the pending copy did not run before the free: %g", (double)out[9]);
  CHECK_OK(acc__devent_destroy(dev, e));
  CHECK_OK(acc__dstream_destroy(dev, a));
  CHECK_OK(acc__dstream_destroy(dev, b));
  acc__device_free(dev, dcoef);
  acc__device_close(dev);
  dev = outer;
}

/* Several threads, each with its own stream and buffers, on one fake device (the device's state
 * is shared: run under ThreadSanitizer by the tsan preset). */
enum { TN = 512, TITER = 200 };
static char thread_msg[4][512];
static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  static float bufs[4][TN];
  float *h = bufs[t], *d, *dcoef, coef = 0.5f;
  acc__dstream *s;
  if (acc__dstream_create(dev, &s) != ACC_OK) return (void *)1;
  if (acc__device_alloc(dev, TN * sizeof(float), (void **)&d) != ACC_OK) return (void *)1;
  if (acc__device_alloc(dev, sizeof coef, (void **)&dcoef) != ACC_OK) return (void *)1;
  acc_result rc = acc__device_copy(dev, dcoef, &coef, sizeof coef, ACC__COPY_H2D, s);
  for (int it = 0; it < TITER && rc == ACC_OK; it++) {
    for (int i = 0; i < TN; i++) h[i] = (float)(i + it);
    rc = acc__device_copy(dev, d, h, TN * sizeof(float), ACC__COPY_H2D, s);
    if (rc == ACC_OK) rc = acc__device_scale(dev, d, TN, dcoef, s);
    if (rc == ACC_OK) rc = acc__device_copy(dev, h, d, TN * sizeof(float), ACC__COPY_D2H, s);
    if (rc == ACC_OK) rc = acc__dstream_sync(dev, s);
    if (rc != ACC_OK) snprintf(thread_msg[t], sizeof thread_msg[t], "%s", acc_last_error());
    for (int i = 0; i < TN && rc == ACC_OK; i++)
      if (h[i] != 0.5f * (float)(i + it)) {
        snprintf(thread_msg[t], sizeof thread_msg[t], "iteration %d element %d: %g", it, i,
                 (double)h[i]);
        rc = ACC_ERR_INTERNAL;
      }
  }
  acc__device_free(dev, d);
  acc__device_free(dev, dcoef);
  acc__dstream_destroy(dev, s);
  return rc == ACC_OK ? NULL : (void *)1;
}

static void test_threads(void) {
  enum { T = 4 };
  pthread_t th[T];
  for (int t = 0; t < T; t++)
    REQUIRE_OK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) ? ACC_ERR_SYSTEM : ACC_OK);
  for (int t = 0; t < T; t++) {
    void *r = NULL;
    pthread_join(th[t], &r);
    CHECK(r == NULL, "thread %d: %s", t, thread_msg[t]);
  }
}

/* The cpu device runs everything at once and takes host memory. */
static void test_cpu(void) {
  acc__device *cpu;
  REQUIRE_OK(acc__device_open(&cpu, ACC__DEVICE_CPU, 0));
  float h[4] = {1, 2, 3, 4}, coef = 0.5f;
  CHECK_OK(acc__device_scale(cpu, h, 4, &coef, NULL));
  CHECK(h[3] == 2.0f, "cpu scale did not run at once: %g", (double)h[3]);
  int yes = 0;
  CHECK_OK(acc__device_is_device_ptr(cpu, h, &yes));
  CHECK(yes == 1, "cpu: host memory is its device memory");
  CHECK_ERR(acc__device_sgd(cpu, &(acc__sgd_args){.w = h, .n = 4}, NULL),
            ACC_ERR_INVALID_ARGUMENT, "cpu device: sgd: argument g is NULL");
  acc__device_close(cpu);
  CHECK_ERR(acc__device_open(&cpu, ACC__DEVICE_CPU, 1), ACC_ERR_INVALID_ARGUMENT,
            "ordinal 1 does not exist");
  CHECK_ERR(acc__device_open(&cpu, ACC__DEVICE_FAKE, ACC__MAX_GPUS), ACC_ERR_INVALID_ARGUMENT,
            "does not exist (0..15)");
}

int main(void) {
  REQUIRE_OK(acc__device_open(&dev, ACC__DEVICE_FAKE, 0));
  CHECK(strcmp(acc__device_name(dev), "fake:0") == 0, "name %s", acc__device_name(dev));
  test_pointer_kinds();
  test_deferred();
  test_stream_order();
  test_threads();
  test_cpu();
  acc__device_close(dev);
  return acc_test_finish("device_fake");
}
