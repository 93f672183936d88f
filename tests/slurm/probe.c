/* What one process of a launcher sees: one line with its rank, size, local rank and size, the
 * launcher and backend the library detected, the MPI module mapped into it, the threads it was
 * given, and the sum of an all_reduce of rank + 1 over the job (which it checks itself). The
 * scripts of tests/slurm and tests/mpi run it under srun, sbatch, mpirun and mpirun.mpich and
 * compare the lines with what each launcher must give.
 *   probe            -> "probe rank R of S local L of LS launcher X backend B module M omp T blas T sum N"
 *                       exit 0, or 1 with the library's error on stderr (or when a linked
 *                       OpenBLAS runs another number of threads than OPENBLAS_NUM_THREADS says) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelerate.h"

#ifdef ACC_PROBE_OPENBLAS
int openblas_get_num_threads(void); /* OpenBLAS's own (cblas.h spells it the same) */
#endif

/* The MPI module in this process's address space ("none" when no module is mapped). */
static void mapped_module(char *out, size_t cap) {
  snprintf(out, cap, "none");
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    char *p = strstr(line, "libaccelerate-mpi");
    if (!p) continue;
    p[strcspn(p, "\n")] = '\0';
    snprintf(out, cap, "%s", p);
    break;
  }
  fclose(f);
}

int main(void) {
  acc_state *st = NULL;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "probe: acc_state_create: %s\n", acc_last_error());
    return 1;
  }
  int rank = acc_state_process_index(st), size = acc_state_num_processes(st);
  double x = rank + 1, sum = 0;
  if (acc_all_reduce(st, &x, &sum, 1, ACC_F64, ACC_SUM) != ACC_OK) {
    fprintf(stderr, "probe: rank %d: all_reduce: %s\n", rank, acc_last_error());
    acc_state_destroy(st);
    return 1;
  }
  double want = size * (size + 1) / 2.0;
  char module[256];
  mapped_module(module, sizeof module);
  const char *omp = getenv("OMP_NUM_THREADS"), *blas = getenv("OPENBLAS_NUM_THREADS");
  printf("probe rank %d of %d local %d of %d launcher %s backend %s module %s omp %s blas %s sum %g\n",
         rank, size, acc_state_local_process_index(st), acc_state_local_num_processes(st),
         acc_state_launcher(st), acc_state_backend_name(st), module, omp ? omp : "unset",
         blas ? blas : "unset", sum);
  fflush(stdout);
  acc_state_destroy(st);
#ifdef ACC_PROBE_OPENBLAS
  /* OpenBLAS sized its pool when it was loaded, before main; the state must have told it. */
  if (blas && openblas_get_num_threads() != atoi(blas)) {
    fprintf(stderr, "probe: rank %d: OPENBLAS_NUM_THREADS=%s but OpenBLAS runs %d threads\n", rank,
            blas, openblas_get_num_threads());
    return 1;
  }
#endif
  if (sum != want) {
    fprintf(stderr, "probe: rank %d: all_reduce of rank+1 gave %g, expected %g\n", rank, sum, want);
    return 1;
  }
  return 0;
}
