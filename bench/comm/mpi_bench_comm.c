/* mpi_bench_comm: the same table as acc_bench_comm with MPI_Allreduce / MPI_Bcast /
 * MPI_Allgather / MPI_Reduce_scatter_block / MPI_Barrier, for comparison. Run: mpirun -np 2 mpi_bench_comm [max_bytes] */
#include <mpi.h>

#include "bench_common.h"

static int run_op(const char *op, float *buf, float *big, size_t count) {
  if (strcmp(op, "all_reduce") == 0)
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (strcmp(op, "broadcast") == 0) return MPI_Bcast(buf, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (strcmp(op, "all_gather") == 0)
    return MPI_Allgather(buf, (int)count, MPI_FLOAT, big, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
  if (strcmp(op, "reduce_scatter") == 0)
    return MPI_Reduce_scatter_block(big, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  size_t maxb = argc > 1 ? (size_t)atoll(argv[1]) : (64u << 20);
  int n, rank;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  float *buf = calloc(maxb / 4 + 1, 4), *big = calloc((maxb / 4 + 1) * (size_t)n, 4);
  double *t = malloc(sizeof(double) * 2000);
  if (rank == 0) bench_header("Open MPI", n);
  const char *ops[] = {"barrier", "all_reduce", "broadcast", "all_gather", "reduce_scatter"};
  for (int o = 0; o < 5; o++) {
    if (!bench_op_on(ops[o])) continue;
    for (size_t bytes = 4; bytes <= maxb; bytes *= 4) {
      if (o > 0 && bytes < bench_min_bytes()) continue;
      size_t count = bytes / 4;
      int it = bench_iters(bytes);
      for (int w = 0; w < (it < 10 ? 3 : it / 10); w++) run_op(ops[o], buf, big, count);
      for (int i = 0; i < it; i++) {
        double t0 = bench_now();
        run_op(ops[o], buf, big, count);
        t[i] = bench_now() - t0;
      }
      qsort(t, (size_t)it, sizeof *t, bench_cmp);
      if (rank == 0) bench_row(ops[o], o == 0 ? 0 : bytes, o == 0 ? 0 : count, t[it / 2], n);
      if (o == 0) break;
    }
  }
  free(buf), free(big), free(t);
  MPI_Finalize();
  return 0;
}
