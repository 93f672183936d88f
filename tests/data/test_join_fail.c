/* A fetch failing on one process inside next_batch_joined (red-team 3, N6): every process fails,
 * and the others' message names the failing process and its reason (it said only "1 other
 * process(es) could not load their next batch"). Run by the launcher at 2 and 3 processes; the
 * last process's fetch fails for its first sample. */
#include "acc_test.h"

static int rank, nprocs;

static int fetch(int64_t index, void *const *fields, void *payload) {
  (void)payload;
  if (rank == nprocs - 1 && index >= 4 * (nprocs - 1)) return -1;
  *(float *)fields[0] = (float)index;
  return 0;
}

int main(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.even_batches = 0;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  acc_field_desc f[1] = {{ACC_F32, 1}};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 25, f, 1, fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 4;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  acc_result rc = ACC_OK;
  for (int i = 0; i < 20 && rc == ACC_OK; i++) {
    const acc_batch *b = NULL;
    int more = 0;
    rc = acc_accelerator_next_batch_joined(acc, dl, &b, &more);
    if (rc == ACC_OK && !more) break;
  }
  CHECK(rc != ACC_OK, "every process fails (the last one's fetch failed)");
  if (rank != nprocs - 1) {
    char want[96];
    snprintf(want, sizeof want, "process %d could not load its next batch", nprocs - 1);
    CHECK(rc == ACC_ERR_REMOTE && strstr(acc_last_error(), want) != NULL, "message names the process: %s",
          acc_last_error());
    CHECK(strstr(acc_last_error(), "returned -1") != NULL, "message carries the reason: %s", acc_last_error());
  } else {
    CHECK(strstr(acc_last_error(), "returned -1") != NULL, "the failing process has its own reason: %s",
          acc_last_error());
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
  return acc_test_finish("data_join_fail");
}
