/* The program of tests/multinode/rdzv.sh's nccl and restart modes, run on 2 "machines" (network
 * namespaces) x 2 processes through per-machine `accelerate launch`.
 *
 *   mm_prog nccl DIR: the CPU part of the NCCL bootstrap on the fake device
 *     (ACCELERATE_TEST_DEVICE=fake): twice, the unique id made by process 0 and the table of
 *     every process's GPU, through the rendezvous store. Each process writes DIR/nccl.<rank>:
 *     "via store|backend", then per bootstrap "id <k> <hex>" and "gpus <k> <rank:machine:bus>...".
 *     The script compares the files of all processes.
 *   mm_prog train DIR STEPS: a linear model, AdamW, a shuffled loader; saves its state after
 *     every step (DIR/checkpoints), resumes from the latest checkpoint when there is one. With
 *     ACC_TEST_DIE_RANK=r and ACC_TEST_DIE_STEP=s, rank r kills itself (SIGKILL) before step s
 *     in launch attempt 0 (ACCELERATE_RESTART_COUNT=0). Process 0 prints
 *     "final: steps N loss L weights HEX" (loss and weights bit for bit, as hex).
 *   mm_prog hang R: every process all-reduces once; rank R first blocks (pause) until it is
 *     stopped: what the others and the launchers report about a rank hung on another machine. */
#include <signal.h>
#include <unistd.h>

#include "acc_test.h"
#include "device/nccl_boot.h"

#define NSAMPLES 64
#define DIM 6
#define B 4

static int rank, nprocs;
static float xs[NSAMPLES][DIM], ys[NSAMPLES];

static void hex(FILE *f, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(f, "%02x", ((const unsigned char *)p)[i]);
}

static int nccl_mode(const char *dir) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  acc_state *st = acc_accelerator_state(acc);
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE, "on the fake device: %s",
        acc_accelerator_device_name(acc));
  char path[1024];
  snprintf(path, sizeof path, "%s/nccl.%d", dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  acc__nccl_peer *peers = calloc((size_t)nprocs, sizeof *peers);
  for (int k = 0; k < 2; k++) {
    uint8_t id[ACC__NCCL_ID_BYTES];
    int via = -1;
    REQUIRE_OK(acc__device_nccl_bootstrap(st, id, peers, &via));
    if (k == 0) fprintf(f, "via %s\n", via ? "store" : "backend");
    fprintf(f, "id %d ", k);
    hex(f, id, sizeof id);
    fprintf(f, "\ngpus %d", k);
    for (int r = 0; r < nprocs; r++) fprintf(f, " %d:%d:%s", (int)peers[r].rank, (int)peers[r].machine, peers[r].bus);
    fprintf(f, "\n");
  }
  free(peers);
  fclose(f);
  acc_accelerator_destroy(acc);
  return acc_test_finish("mm_prog nccl");
}

static int fetch(int64_t i, void *const *fields, void *payload) {
  (void)payload;
  memcpy(fields[0], xs[i], sizeof xs[i]);
  memcpy(fields[1], &ys[i], sizeof(float));
  return 0;
}

typedef struct counter {
  int64_t steps;
} counter;

static acc_result counter_save(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, &((counter *)obj)->steps, sizeof(int64_t));
  return ACC_OK;
}

static acc_result counter_load(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return ACC_ERR_FORMAT;
  memcpy(&((counter *)obj)->steps, data, sizeof(int64_t));
  return ACC_OK;
}

static int train_mode(const char *dir, long steps) {
  for (int i = 0; i < NSAMPLES; i++) {
    ys[i] = 0.5f;
    for (int d = 0; d < DIM; d++) {
      xs[i][d] = (float)((i * 7 + d * 3) % 11) / 11.0f - 0.4f;
      ys[i] += (float)(d + 1) * 0.1f * xs[i][d];
    }
  }
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  acc_state *st = acc_accelerator_state(acc);
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  REQUIRE_OK(acc_accelerator_set_seed(acc, 99, 1));
  acc_field_desc fd[2] = {{ACC_F32, DIM}, {ACC_F32, 1}};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, NSAMPLES, fd, 2, fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = B;
  lo.shuffle = 1;
  lo.seed = 5;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  float w[DIM], b[1] = {0}, gw[DIM] = {0}, gb[1] = {0};
  for (int d = 0; d < DIM; d++) w[d] = 0.03f * (float)(d - 2);
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  int64_t sw[1] = {DIM}, sb[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(m, "linear.weight", w, gw, 1, sw));
  REQUIRE_OK(acc_model_add_parameter(m, "linear.bias", b, gb, 1, sb));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_adamw_options a = ACC_ADAMW_OPTIONS_INIT;
  a.lr = 0.02;
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_adamw(&opt, m, &a));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  counter cnt = {0};
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(acc, &cnt, counter_save, counter_load));
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = dir;
  po.automatic_checkpoint_naming = 1;
  po.total_limit = 2;
  REQUIRE_OK(acc_accelerator_set_project_config(acc, &po));
  char *from = NULL;
  acc_result lr = acc_accelerator_load_state(acc, NULL, &from);
  if (lr == ACC_OK) {
    if (rank == 0) printf("resumed from %s at step %lld\n", from, (long long)cnt.steps);
    acc_free(from);
  } else if (lr != ACC_ERR_NOT_FOUND) {
    fprintf(stderr, "load_state: %s\n", acc_last_error());
    return 1;
  }
  const char *die_rank = getenv("ACC_TEST_DIE_RANK"), *die_step = getenv("ACC_TEST_DIE_STEP");
  const char *attempt = getenv("ACCELERATE_RESTART_COUNT");
  float loss = 0;
  while (cnt.steps < steps) {
    if (die_rank && die_step && attempt && strcmp(attempt, "0") == 0 && atoi(die_rank) == rank &&
        atol(die_step) == cnt.steps) {
      fprintf(stderr, "rank %d: killing itself before step %lld (attempt 0)\n", rank,
              (long long)cnt.steps);
      fflush(stderr);
      raise(SIGKILL);
    }
    const acc_batch *bt = NULL;
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &bt));
    if (!bt) REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &bt)); /* next epoch */
    if (!bt) {
      fprintf(stderr, "empty epoch\n");
      return 1;
    }
    const float *x = bt->fields[0], *y = bt->fields[1];
    float l = 0;
    for (int64_t i = 0; i < bt->size; i++) {
      float pred = b[0];
      for (int d = 0; d < DIM; d++) pred += w[d] * x[i * DIM + d];
      float e = pred - y[i];
      l += e * e / (float)bt->size;
      float g = 2.0f * e / (float)bt->size;
      for (int d = 0; d < DIM; d++) gw[d] += g * x[i * DIM + d];
      gb[0] += g;
    }
    REQUIRE_OK(acc_accelerator_backward(acc));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
    REQUIRE_OK(acc_all_reduce(st, &l, &loss, 1, ACC_F32, ACC_MEAN));
    cnt.steps++;
    REQUIRE_OK(acc_accelerator_save_state(acc, NULL, NULL));
  }
  if (rank == 0) {
    printf("final: steps %lld loss ", (long long)cnt.steps);
    hex(stdout, &loss, sizeof loss);
    printf(" weights ");
    hex(stdout, w, sizeof w);
    hex(stdout, b, sizeof b);
    printf("\n");
    fflush(stdout);
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
  return acc_test_finish("mm_prog train");
}

static int hang_mode(int hung) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  acc_state *st = acc_accelerator_state(acc);
  rank = acc_state_process_index(st);
  acc_test_rank = rank;
  if (rank == hung) {
    fprintf(stderr, "rank %d: hanging before the all_reduce\n", rank);
    fflush(stderr);
    for (;;) pause();
  }
  float x = 1, y = 0;
  acc_result rc = acc_all_reduce(st, &x, &y, 1, ACC_F32, ACC_SUM);
  if (rc != ACC_OK) {
    fprintf(stderr, "rank %d: all_reduce: %s: %s\n", rank, acc_result_name(rc), acc_last_error());
    return 1;
  }
  acc_accelerator_destroy(acc);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "hang") == 0) return hang_mode(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "nccl") == 0) return nccl_mode(argv[2]);
  if (argc >= 4 && strcmp(argv[1], "train") == 0) return train_mode(argv[2], atol(argv[3]));
  fprintf(stderr, "usage: mm_prog nccl DIR | train DIR STEPS\n");
  return 2;
}
