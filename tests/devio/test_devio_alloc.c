/* Allocation-failure torture of the device I/O paths on the fake device (one process): a loader
 * with device placement (created, iterated over two epochs, destroyed; also destroyed after its
 * accelerator) and collectives on device buffers. Allocation n fails, for n = 0, 1, ... until the
 * operation runs through without reaching n: every failure must be an error with a message, no
 * crash; under the asan preset LeakSanitizer checks that no failure path leaks. */
#include <stdlib.h>
#include <string.h>

#include "acc_test.h"
#include "core/internal.h"
#include "alloc_torture.h"

#define N 21

static float feats[N][3];
static acc_dataset *ds;
static acc_accelerator *acc;
static float *dbuf;

static void torture(const char *what, acc_torture_op op) { acc_test_torture(what, op, NULL); }

static acc_result op_loader(void) {
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 4;
  o.shuffle = 1;
  acc_dataloader *dl = NULL;
  ACC_CHECK(acc_accelerator_prepare_dataloader(acc, ds, &o, &dl));
  acc_result rc = ACC_OK;
  float back[12];
  for (int e = 0; e < 2 && rc == ACC_OK; e++)
    for (;;) {
      const acc_batch *b = NULL;
      rc = acc_accelerator_next_batch(acc, dl, &b);
      if (rc != ACC_OK || !b) break;
      if (!b->device_fields) {
        rc = acc__error(ACC_ERR_INTERNAL, "no device batch");
        break;
      }
      rc = acc_accelerator_memcpy(acc, back, b->device_fields[0], b->field_bytes[0],
                                  ACC_COPY_DEVICE_TO_HOST);
      if (rc == ACC_OK && memcmp(back, b->fields[0], b->field_bytes[0]) != 0)
        rc = acc__error(ACC_ERR_INTERNAL, "device batch differs from its host view");
      if (rc != ACC_OK) break;
    }
  acc_dataloader_destroy(dl);
  return rc;
}

/* A placed loader that outlives its accelerator (detach replaces nothing on the fake device, but
 * frees the device side; the accelerator is made and destroyed inside the operation). */
static acc_result op_outlive(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_AUTO;
  acc_accelerator *a = NULL;
  ACC_CHECK(acc_accelerator_create(&a, &ao));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 4;
  acc_dataloader *dl = NULL;
  acc_result rc = acc_accelerator_prepare_dataloader(a, ds, &o, &dl);
  const acc_batch *b = NULL;
  if (rc == ACC_OK) rc = acc_dataloader_next(dl, &b);
  acc_accelerator_destroy(a);
  if (rc == ACC_OK) rc = acc_dataloader_next(dl, &b);
  if (rc == ACC_OK && (!b || b->device_fields))
    rc = acc__error(ACC_ERR_INTERNAL, "expected a host batch after the accelerator is gone");
  acc_dataloader_destroy(dl);
  return rc;
}

static acc_result op_collectives(void) {
  acc_state *st = acc_accelerator_state(acc);
  float h[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8];
  ACC_CHECK(acc_accelerator_memcpy(acc, dbuf, h, sizeof h, ACC_COPY_HOST_TO_DEVICE));
  ACC_CHECK(acc_all_reduce(st, dbuf, dbuf, 8, ACC_F32, ACC_SUM));
  ACC_CHECK(acc_broadcast(st, dbuf, 8, ACC_F32, 0));
  int64_t n = 0;
  ACC_CHECK(acc_accelerator_gather_for_metrics(acc, dbuf, 4, 2, ACC_F32, dbuf + 8, 4, &n));
  ACC_CHECK(acc_accelerator_pad_across_processes(acc, dbuf, 3, 2, ACC_F32, 0.0, 0, 4, &n));
  ACC_CHECK(acc_accelerator_memcpy(acc, back, dbuf + 8, sizeof back, ACC_COPY_DEVICE_TO_HOST));
  if (memcmp(back, h, sizeof h) != 0) return acc__error(ACC_ERR_INTERNAL, "wrong gathered values");
  return ACC_OK;
}

int main(void) {
  setenv("ACCELERATE_TEST_DEVICE", "fake", 1);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 3; j++) feats[i][j] = (float)(i * 3 + j);
  acc_field_desc fd[1] = {{ACC_F32, 3}};
  const void *data[1] = {feats};
  REQUIRE_OK(acc_dataset_create_memory(&ds, N, fd, 1, data));
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE, "fake device");
  REQUIRE_OK(acc_accelerator_alloc(acc, 16 * sizeof(float), (void **)&dbuf));
  torture("placed loader", op_loader);
  torture("loader outliving its accelerator", op_outlive);
  torture("collectives on device buffers", op_collectives);
  CHECK_OK(acc_accelerator_free(acc, dbuf));
  acc_accelerator_destroy(acc);
  acc_dataset_destroy(ds);
  return acc_test_finish("devio_alloc");
}
