/* join_uneven_inputs(..., even_batches=0) over a loader prepared with even_batches on, run by the
 * launcher at 2 and 3 processes: during the join the processes get their real, uneven numbers
 * of batches (every sample exactly once over the processes, next_batch_joined runs as many steps
 * as the longest); after the join the loader pads again. 9 samples (ids 0..8), batch size 2:
 * the BatchSampler has 5 batches [0,1] [2,3] [4,5] [6,7] [8]. By hand (spec 6.2):
 *   2 processes, even off: p0 3 batches (0, 2, 4), p1 2 (1, 3); sum of ids 36
 *               even on:   3 each, p1's third is [1,2] (the short [8] is completed with 0
 *                          for p0: [8,0]); sum 36 + 0 + 1 + 2 = 39
 *   3 processes, even off: p0 2, p1 2, p2 1; sum 36
 *               even on:   2 each, p1's [8] completed to [8,0], p2's second [1,2]; sum 39 */
#include "acc_test.h"

static const int64_t uneven[2][3] = {{3, 2, 0}, {2, 2, 1}};

int main(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL)); /* even_batches: 1 (the default) */
  acc_state *st = acc_accelerator_state(acc);
  const int np = acc_accelerator_num_processes(acc), me = acc_accelerator_process_index(acc);
  if (np < 2 || np > 3) {
    fprintf(stderr, "run at 2 or 3 processes (got %d)\n", np);
    return 1;
  }
  int64_t ids[9];
  for (int i = 0; i < 9; i++) ids[i] = i;
  acc_field_desc f = {ACC_I64, 1};
  const void *cols[1] = {ids};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 9, &f, 1, cols));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 2;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  CHECK(acc_dataloader_even_batches(dl) == 1, "prepared with even_batches on");

  /* errors: end without begin, a bad value; nothing changes */
  CHECK_ERR(acc_join_uneven_inputs_end(&dl, 1), ACC_ERR_INVALID_USAGE, "loader 0 is not inside a join");
  CHECK_ERR(acc_join_uneven_inputs_begin(&dl, 1, 7), ACC_ERR_INVALID_ARGUMENT, "even_batches is 7");
  CHECK(acc_dataloader_even_batches(dl) == 1, "unchanged after refusals");

  for (int round = 0; round < 2; round++) {
    /* the join: even_batches off for its duration */
    REQUIRE_OK(acc_join_uneven_inputs_begin(&dl, 1, 0));
    CHECK(acc_dataloader_even_batches(dl) == 0, "overridden");
    CHECK(acc_dataloader_len(dl) == uneven[np - 2][me], "len %lld during the join, want %lld",
          (long long)acc_dataloader_len(dl), (long long)uneven[np - 2][me]);
    CHECK_ERR(acc_join_uneven_inputs_begin(&dl, 1, 0), ACC_ERR_INVALID_USAGE, "already inside a join");
    int64_t mine = 0, steps = 0, sum = 0;
    int more = 1;
    while (more) {
      const acc_batch *b;
      REQUIRE_OK(acc_accelerator_next_batch_joined(acc, dl, &b, &more));
      if (!more) break;
      steps++;
      if (b) {
        mine++;
        for (int64_t i = 0; i < b->size; i++) sum += ((const int64_t *)b->fields[0])[i];
      }
    }
    CHECK(mine == uneven[np - 2][me], "round %d: %lld batches during the join, want %lld", round,
          (long long)mine, (long long)uneven[np - 2][me]);
    CHECK(steps == uneven[np - 2][0], "round %d: %lld joined steps, want %lld", round,
          (long long)steps, (long long)uneven[np - 2][0]);
    REQUIRE_OK(acc_all_reduce(st, &sum, &sum, 1, ACC_I64, ACC_SUM));
    CHECK(sum == 36, "round %d: the ids sum to %lld over the processes during the join, want 36 "
          "(every sample once)", round, (long long)sum);
    REQUIRE_OK(acc_join_uneven_inputs_end(&dl, 1));
    CHECK(acc_dataloader_even_batches(dl) == 1, "restored after the join");

    /* after the join: padded again, the same number of full batches everywhere */
    const int64_t even_len = np == 2 ? 3 : 2;
    CHECK(acc_dataloader_len(dl) == even_len, "len %lld after the join, want %lld",
          (long long)acc_dataloader_len(dl), (long long)even_len);
    int64_t got = 0;
    sum = 0;
    const acc_batch *b;
    for (;;) {
      REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
      if (!b) break;
      got++;
      CHECK(b->size == 2, "a padded epoch has full batches (got %lld)", (long long)b->size);
      for (int64_t i = 0; i < b->size; i++) sum += ((const int64_t *)b->fields[0])[i];
      if (got == 1 && round == 1) { /* mid-epoch: refused, the epoch goes on unchanged */
        CHECK_ERR(acc_join_uneven_inputs_begin(&dl, 1, 0), ACC_ERR_INVALID_USAGE,
                  "loader 0 is in the middle of epoch");
        CHECK(acc_dataloader_even_batches(dl) == 1, "unchanged after the mid-epoch refusal");
      }
    }
    CHECK(got == even_len, "round %d: %lld batches after the join, want %lld", round,
          (long long)got, (long long)even_len);
    REQUIRE_OK(acc_all_reduce(st, &sum, &sum, 1, ACC_I64, ACC_SUM));
    CHECK(sum == 39, "round %d: the ids sum to %lld after the join, want 39 (padding from the "
          "start)", round, (long long)sum);
  }
  /* ACC_UNSET: a join without an override leaves the setting */
  REQUIRE_OK(acc_join_uneven_inputs_begin(&dl, 1, ACC_UNSET));
  CHECK(acc_dataloader_even_batches(dl) == 1, "ACC_UNSET overrides nothing");
  REQUIRE_OK(acc_join_uneven_inputs_end(&dl, 1));

  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
  return acc_test_finish("data_join_even");
}
