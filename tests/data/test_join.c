/* Uneven inputs (even_batches off + acc_accelerator_next_batch_joined), run by the launcher at
 * 1, 2 and 3 processes: processes with fewer batches keep answering the others' gradient
 * all-reduces with zeros until every process is done. Checked: the number of steps is the
 * largest per-process batch count, gather_for_metrics sees every sample once, the SGD result is
 * the one computed by hand (every sample's gradient applied once, averaged over all processes),
 * identical on every process; with gradient accumulation the last step syncs everywhere. */
#include <math.h>

#include "acc_test.h"

static int rank, nprocs;
static int64_t ids[64];

static void run(int64_t n, int64_t bs, int gas) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.even_batches = 0;
  ao.gradient_accumulation_steps = gas;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  float w[1] = {100.0f}, g[1] = {0.0f};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t shape[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, shape));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 1.0;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_field_desc f = {ACC_I64, 1};
  const void *data[1] = {ids};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_memory(&ds, n, &f, 1, data));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = bs;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  const int64_t L = (n + bs - 1) / bs;                  /* batches of the epoch, all processes */
  const int64_t steps_want = (L + nprocs - 1) / nprocs; /* process 0 has the most */
  for (int ep = 0; ep < 2; ep++) {
    const float w0 = w[0];
    int64_t steps = 0, mine = 0, total = 0, recv[64];
    int last_synced = 0, more = 1;
    while (more) {
      const acc_batch *b;
      REQUIRE_OK(acc_accelerator_next_batch_joined(acc, dl, &b, &more));
      if (!more) break;
      steps++;
      REQUIRE_OK(acc_accelerator_accumulate(acc));
      int64_t sum = 0;
      if (b) {
        mine++;
        for (int64_t i = 0; i < b->size; i++) sum += ((const int64_t *)b->fields[0])[i];
      }
      /* loss = sum of this batch's ids x w: dL/dw = sum (zero on a process that ran out) */
      g[0] += acc_accelerator_backward_scale(acc) * (float)sum;
      REQUIRE_OK(acc_accelerator_backward(acc));
      last_synced = acc_accelerator_sync_gradients(acc);
      REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
      REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
      int64_t kept = 0;
      int64_t send[16];
      for (int64_t i = 0; b && i < b->size; i++) send[i] = b->indices[i];
      REQUIRE_OK(acc_accelerator_gather_for_metrics(acc, send, b ? b->size : 0, 1, ACC_I64, recv,
                                                    64, &kept));
      total += kept;
    }
    CHECK(steps == steps_want, "n %lld bs %lld gas %d epoch %d: %lld steps, want %lld",
          (long long)n, (long long)bs, gas, ep, (long long)steps, (long long)steps_want);
    int64_t mine_want = L / nprocs + (rank < L % nprocs ? 1 : 0);
    CHECK(mine == mine_want, "process %d had %lld batches, want %lld", rank, (long long)mine,
          (long long)mine_want);
    CHECK(total == n, "n %lld: gather_for_metrics kept %lld samples over the epoch", (long long)n,
          (long long)total);
    CHECK(last_synced, "gas %d: the last step of the epoch did not sync", gas);
    if (gas == 1) {
      /* each step subtracts the mean over all processes: in total sum(0..n-1) / nprocs */
      double want = (double)w0 - (double)(n * (n - 1) / 2) / nprocs;
      CHECK(fabs(w[0] - want) < 1e-3, "epoch %d: w %.4f, want %.4f", ep, w[0], want);
    }
    float all[8];
    REQUIRE_OK(acc_accelerator_all_gather(acc, w, all, 1, ACC_F32));
    for (int r = 0; r < nprocs; r++)
      CHECK(all[r] == w[0], "w differs between processes: %g on %d, %g here", all[r], r, w[0]);
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(opt);
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
}

int main(void) {
  for (int i = 0; i < 64; i++) ids[i] = i;
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  static const int64_t sizes[] = {9, 11, 13, 3, 1};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    run(sizes[i], 2, 1);
    run(sizes[i], 2, 2);
  }
  acc_state_destroy(st);
  return acc_test_finish("data_join");
}
