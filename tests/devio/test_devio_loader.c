/* Data loader device placement on the fake device, through accelerate launch (2 processes, each
 * with its own fake GPU): a loader prepared by an accelerator that trains on a device delivers
 * every batch in device memory, byte for byte the batch of the same loader without placement,
 * over two epochs, in every mode (prefetch thread or none, shuffle, dispatch_batches, an
 * iterable dataset, skip_first_batches, a mid-epoch resume, join_uneven_inputs).
 *
 * Every device batch is read back with acc_accelerator_memcpy, an operation queued on the
 * accelerator's compute stream: the fake device refuses it unless the loader's copy (on its own
 * copy stream) was ordered before it by an event, and refuses the loader's next copy into the
 * same device buffer unless it waits for the compute stream's release of the batch. So these
 * checks also prove the ordering. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accelerate.h"
#include "acc_test.h"
#include "train/accel_device.h"
#include "device/device.h"

#define N 53
#define DIM 7

static float feats[N][DIM];
static int32_t labels[N];
static int64_t stream_pos;

static int it_next(void *const *fields, void *payload) {
  (void)payload;
  if (stream_pos >= N) return 0;
  memcpy(fields[0], feats[stream_pos], sizeof feats[0]);
  memcpy(fields[1], &labels[stream_pos], sizeof labels[0]);
  stream_pos++;
  return 1;
}
static int it_reset(int64_t epoch, void *payload) {
  (void)epoch;
  (void)payload;
  stream_pos = 0;
  return 0;
}

/* What a run saw: per batch (epoch, index, size, bytes of each field, then the bytes). */
typedef struct trace {
  uint8_t *buf;
  size_t len, cap;
} trace;

static void put(trace *t, const void *p, size_t n) {
  if (t->len + n > t->cap) {
    t->cap = (t->len + n) * 2 + 4096;
    t->buf = realloc(t->buf, t->cap);
    if (!t->buf) abort();
  }
  memcpy(t->buf + t->len, p, n);
  t->len += n;
}

/* The device side of a placed run: every device batch is copied, on the compute stream and
 * without any host synchronization in between (as a program's kernels would read it), into one
 * device buffer; the host views of the same batches go, in the same order, into `host`. At the
 * end both must hold the same bytes. */
#define DEV_TRACE (256 * 1024)
typedef struct dev_trace {
  uint8_t *d;
  size_t len;
  trace host;
} dev_trace;

/* Records one batch: its bytes (host view) into t; for a placed batch also the device copy. */
static void record(acc_accelerator *acc, const acc_batch *b, int placed, trace *t,
                   dev_trace *dt) {
  int64_t head[3] = {b->epoch, b->index, b->size};
  put(t, head, sizeof head);
  CHECK((b->device_fields != NULL) == placed, "batch %lld: device_fields %p, placement %d",
        (long long)b->index, (void *)b->device_fields, placed);
  for (int f = 0; f < b->num_fields; f++) {
    size_t n = b->field_bytes[f];
    put(t, &n, sizeof n);
    put(t, b->fields[f], n);
    if (!placed || !b->device_fields) continue;
    CHECK(acc_accelerator_is_device_pointer(acc, b->device_fields[f]) == 1,
          "field %d of batch %lld is in device memory", f, (long long)b->index);
    CHECK(acc_accelerator_is_device_pointer(acc, b->fields[f]) == 0,
          "field %d's host view is host memory", f);
    if (dt->len + n > DEV_TRACE) {
      CHECK(0, "device trace buffer too small");
      continue;
    }
    acc__devctx *ad = acc__accelerator_dev(acc);
    CHECK_OK(acc__device_copy(ad->dev, dt->d + dt->len, b->device_fields[f], n, ACC__COPY_D2D,
                              ad->stream));
    dt->len += n;
    put(&dt->host, b->fields[f], n);
  }
}

enum { PLAIN, JOINED };

/* Runs `epochs` epochs (the first starting at its current position) and records them. */
static void run(acc_accelerator *acc, acc_dataloader *dl, int placed, int mode, int epochs,
                trace *t, dev_trace *dt) {
  for (int e = 0; e < epochs; e++) {
    for (;;) {
      const acc_batch *b = NULL;
      if (mode == JOINED) {
        int more = 0;
        acc_result rc = acc_accelerator_next_batch_joined(acc, dl, &b, &more);
        CHECK_OK(rc);
        if (rc != ACC_OK || !more) break;
        if (!b) { /* this process has run out, the others go on */
          int64_t none = -1;
          put(t, &none, sizeof none);
          continue;
        }
      } else {
        acc_result rc = acc_accelerator_next_batch(acc, dl, &b);
        CHECK_OK(rc);
        if (rc != ACC_OK || !b) break;
      }
      record(acc, b, placed, t, dt);
    }
  }
}

typedef struct cfg {
  const char *name;
  int iterable, prefetch, shuffle, dispatch, skip, resume_at, mode;
} cfg;

static acc_dataloader *make(acc_accelerator *acc, acc_dataset *ds, const cfg *c, int placement) {
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 4;
  o.shuffle = c->shuffle;
  o.seed = 11;
  o.prefetch = c->prefetch;
  o.dispatch_batches = c->dispatch;
  o.device_placement = placement;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &o, &dl));
  if (c->skip) REQUIRE_OK(acc_dataloader_skip_first_batches(dl, c->skip));
  return dl;
}

/* One configuration: the placed loader and the reference (no placement) give the same trace. */
static void compare(acc_accelerator *acc, acc_dataset *map_ds, acc_dataset *it_ds, const cfg *c) {
  acc_dataset *ds = c->iterable ? it_ds : map_ds;
  trace got = {0}, want = {0};
  for (int placed = 1; placed >= 0; placed--) {
    trace *t = placed ? &got : &want;
    acc_dataloader *dl = make(acc, ds, c, placed);
    if (c->resume_at > 0) { /* a checkpointed position, restored into a fresh loader */
      acc_dataloader_state s = {11, 0, c->resume_at};
      CHECK_OK(acc_dataloader_state_set(dl, &s));
    }
    dev_trace dt = {0};
    if (placed) REQUIRE_OK(acc_accelerator_alloc(acc, DEV_TRACE, (void **)&dt.d));
    run(acc, dl, placed, c->mode, 2, t, &dt);
    acc_dataloader_destroy(dl);
    if (placed) { /* only now does the host wait for the compute stream */
      uint8_t *back = malloc(DEV_TRACE);
      if (!back) abort();
      CHECK_OK(acc_accelerator_memcpy(acc, back, dt.d, dt.len, ACC_COPY_DEVICE_TO_HOST));
      CHECK(dt.len == dt.host.len && dt.len > 0 && memcmp(back, dt.host.buf, dt.len) == 0,
            "%s: the device batches (%zu bytes) differ from their host views (%zu bytes)",
            c->name, dt.len, dt.host.len);
      free(back);
      free(dt.host.buf);
      CHECK_OK(acc_accelerator_free(acc, dt.d));
    }
  }
  CHECK(got.len == want.len && got.len > 0 && memcmp(got.buf, want.buf, got.len) == 0,
        "%s: the device batches (%zu bytes of trace) differ from the host batches (%zu)", c->name,
        got.len, want.len);
  free(got.buf);
  free(want.buf);
}

/* The loader outlives its accelerator: it goes on from the same position with host batches. */
static void outlive(acc_dataset *ds) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  cfg c = {"outlive", 0, 2, 1, 0, 0, 0, PLAIN};
  acc_dataloader *dl = make(acc, ds, &c, 1);
  acc_dataloader *ref = make(acc, ds, &c, 0);
  const acc_batch *b = NULL, *r = NULL;
  for (int i = 0; i < 3; i++) {
    CHECK_OK(acc_dataloader_next(dl, &b));
    CHECK_OK(acc_dataloader_next(ref, &r));
  }
  CHECK(b && b->device_fields, "placed before the accelerator goes");
  acc_accelerator_destroy(acc);
  int n = 0;
  for (;;) {
    acc_result rc1 = acc_dataloader_next(dl, &b), rc2 = acc_dataloader_next(ref, &r);
    CHECK_OK(rc1);
    CHECK_OK(rc2);
    if (rc1 != ACC_OK || rc2 != ACC_OK || !b || !r) {
      CHECK(!b && !r, "both loaders end the epoch together");
      break;
    }
    CHECK(b->device_fields == NULL, "host batches only after the accelerator is gone");
    CHECK(b->index == r->index && b->size == r->size &&
              memcmp(b->fields[0], r->fields[0], b->field_bytes[0]) == 0,
          "batch %lld after the accelerator is gone: same as the reference", (long long)b->index);
    n++;
  }
  CHECK(n > 0, "batches after the accelerator is gone");
  acc_dataloader_destroy(dl);
  acc_dataloader_destroy(ref);
}

int main(void) {
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < DIM; j++) feats[i][j] = (float)i + 0.125f * (float)j;
    labels[i] = 1000 + i;
  }
  acc_field_desc fd[2] = {{ACC_F32, DIM}, {ACC_I32, 1}};
  const void *data[2] = {feats, labels};
  acc_dataset *map_ds = NULL, *it_ds = NULL;
  REQUIRE_OK(acc_dataset_create_memory(&map_ds, N, fd, 2, data));
  REQUIRE_OK(acc_dataset_create_iterable(&it_ds, N, fd, 2, it_next, it_reset, NULL));

  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  acc_test_rank = acc_accelerator_process_index(acc);
  CHECK(acc_accelerator_num_processes(acc) == 2, "run through accelerate launch with 2 processes");
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE,
        "the fake device (ACCELERATE_TEST_DEVICE=fake), got %s", acc_accelerator_device_name(acc));

  static const cfg cfgs[] = {
      {"prefetch 2, shuffled", 0, 2, 1, 0, 0, 0, PLAIN},
      {"no prefetch thread", 0, 0, 1, 0, 0, 0, PLAIN},
      {"prefetch 5, sequential", 0, 5, 0, 0, 0, 0, PLAIN},
      {"dispatch_batches", 0, 0, 1, 1, 0, 0, PLAIN},
      {"dispatch_batches over an iterable", 1, 0, 0, 1, 0, 0, PLAIN},
      {"iterable dataset", 1, 2, 0, 0, 0, 0, PLAIN},
      {"skip_first_batches", 0, 2, 1, 0, 3, 0, PLAIN},
      {"mid-epoch resume", 0, 2, 1, 0, 0, 4, PLAIN},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) compare(acc, map_ds, it_ds, &cfgs[i]);

  /* placement off: host batches only */
  {
    cfg c = {"off", 0, 2, 0, 0, 0, 0, PLAIN};
    acc_dataloader *dl = make(acc, map_ds, &c, 0);
    const acc_batch *b = NULL;
    CHECK_OK(acc_accelerator_next_batch(acc, dl, &b));
    CHECK(b && b->device_fields == NULL, "device_placement 0: no device batch");
    acc_dataloader_destroy(dl);
  }
  /* a program built against version 2 of the options (no device_placement): placement is on */
  {
    acc_dataloader_options o2;
    CHECK_OK(acc_dataloader_options_init(&o2, 2));
    CHECK(o2.version == 2 && o2.size == offsetof(acc_dataloader_options, device_placement),
          "version 2 options: size %zu", o2.size);
    o2.batch_size = 4;
    acc_dataloader *dl = NULL;
    CHECK_OK(acc_accelerator_prepare_dataloader(acc, map_ds, &o2, &dl));
    const acc_batch *b = NULL;
    if (dl) CHECK_OK(acc_accelerator_next_batch(acc, dl, &b));
    CHECK(b && b->device_fields != NULL, "version 2 options: device placement by default");
    acc_dataloader_destroy(dl);
  }
  acc_accelerator_destroy(acc);

  /* join_uneven_inputs: even_batches off, one process runs out first */
  ao.even_batches = 0;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  cfg joined = {"join_uneven_inputs", 0, 2, 1, 0, 0, 0, JOINED};
  compare(acc, map_ds, it_ds, &joined);
  acc_accelerator_destroy(acc);

  outlive(map_ds);

  /* a CPU accelerator: no placement whatever the option says */
  ao = (acc_accelerator_options)ACC_ACCELERATOR_OPTIONS_INIT;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  {
    cfg c = {"cpu", 0, 2, 0, 0, 0, 0, PLAIN};
    acc_dataloader *dl = make(acc, map_ds, &c, 1);
    const acc_batch *b = NULL;
    CHECK_OK(acc_accelerator_next_batch(acc, dl, &b));
    CHECK(b && b->device_fields == NULL, "training on the CPU: no device batch");
    acc_dataloader_destroy(dl);
  }
  acc_accelerator_destroy(acc);

  acc_dataset_destroy(map_ds);
  acc_dataset_destroy(it_ds);
  return acc_test_finish("devio_loader");
}
