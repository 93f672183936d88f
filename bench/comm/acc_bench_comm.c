/* acc_bench_comm: latency and bandwidth of accelerate-c collectives (nccl-tests style table).
 * Run: accelerate launch --num_processes 2 acc_bench_comm [max_bytes]
 * Rank 0 prints: op, size, count (f32 elements), median time, algbw, busbw. Timings are per
 * call, measured on rank 0 after a barrier-free warm-up of the same calls.
 * acc_bench_comm --table: prints the shm backend's algorithm table (src/backend/shm_algo.c) and
 * exits (bench/comm/algo_table.sh sets it beside the thresholds it measures).
 * ACC_BENCH_SHARED=1: the all_reduce buffer is memory the processes share (acc__comm_alloc_shared,
 * what acc_accelerator_alloc_shared gives), so the shm backend reduces it in place. */
#include <sched.h>

#include "accelerate.h"
#include "bench_common.h"
#include "backend/shm_impl.h" /* acc__shm_algo_print */
#include "comm/comm.h"         /* acc__comm_alloc_shared */

static acc_state *st;

static acc_result run_op(const char *op, float *buf, float *big, size_t count) {
  if (strcmp(op, "all_reduce") == 0) return acc_all_reduce(st, buf, buf, count, ACC_F32, ACC_SUM);
  if (strcmp(op, "broadcast") == 0) return acc_broadcast(st, buf, count, ACC_F32, 0);
  if (strcmp(op, "all_gather") == 0) return acc_all_gather(st, buf, big, count, ACC_F32);
  if (strcmp(op, "reduce_scatter") == 0) return acc_reduce_scatter(st, big, buf, count, ACC_F32, ACC_SUM);
  return acc_barrier(st);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--table") == 0) {
    acc__shm_algo_print(stdout);
    return 0;
  }
  size_t maxb = argc > 1 ? (size_t)atoll(argv[1]) : (64u << 20);
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "acc_bench_comm: %s\n", acc_last_error());
    return 1;
  }
  int n = acc_state_num_processes(st), rank = acc_state_process_index(st);
  const char *bind = getenv("ACC_BENCH_BIND");
  if (bind && atoi(bind)) { /* pin rank r to cpu r (like mpirun's default --bind-to core) */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank % CPU_SETSIZE, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  float *buf = NULL, *big = calloc((maxb / 4 + 1) * (size_t)n, 4);
  const char *shared = getenv("ACC_BENCH_SHARED");
  int own_buf = !(shared && atoi(shared));
  if (!own_buf && acc__comm_alloc_shared(st, (maxb / 4 + 1) * 4, (void **)&buf) != ACC_OK) goto fail;
  if (!buf) buf = calloc(maxb / 4 + 1, 4), own_buf = 1;
  double *t = malloc(sizeof(double) * 2000);
  if (rank == 0) bench_header("accelerate-c shm", n);
  const char *ops[] = {"barrier", "all_reduce", "broadcast", "all_gather", "reduce_scatter"};
  for (int o = 0; o < 5; o++) {
    if (!bench_op_on(ops[o])) continue;
    for (size_t bytes = 4; bytes <= maxb; bytes *= (o == 0 ? maxb : 4)) {
      if (o > 0 && bytes < bench_min_bytes()) continue;
      size_t count = bytes / 4;
      int it = bench_iters(bytes);
      for (int w = 0; w < (it < 10 ? 3 : it / 10); w++)
        if (run_op(ops[o], buf, big, count) != ACC_OK) goto fail;
      for (int i = 0; i < it; i++) {
        double t0 = bench_now();
        if (run_op(ops[o], buf, big, count) != ACC_OK) goto fail;
        t[i] = bench_now() - t0;
      }
      qsort(t, (size_t)it, sizeof *t, bench_cmp);
      if (rank == 0) bench_row(ops[o], o == 0 ? 0 : bytes, o == 0 ? 0 : count, t[it / 2], n);
      if (o == 0) break;
    }
  }
  if (own_buf) free(buf);
  else acc__comm_free_shared(st, buf);
  free(big), free(t);
  acc_state_destroy(st);
  return 0;
fail:
  fprintf(stderr, "acc_bench_comm: %s\n", acc_last_error());
  acc_state_destroy(st);
  return 1;
}
