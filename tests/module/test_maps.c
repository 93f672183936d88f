/* libaccelerate.so loads Open MPI only when MPI is used (regression for new-user review R8).
 * Linked against the SHARED library. Modes:
 *   shm      (launched with N processes): after a collective, /proc/self/maps shows neither
 *            libmpi nor any libaccelerate-mpi-<flavor>.so;
 *   mpi      (under mpirun, ACCELERATE_BACKEND=mpi): both are mapped and the collective works,
 *            the module found next to libaccelerate.so;
 *   missing  (ACCELERATE_BACKEND=mpi, ACCELERATE_MODULE_DIR pointing nowhere): acc_state_create
 *            fails with a message naming the module and what to install. */
#include <stdio.h>
#include <string.h>

#include "acc_test.h"

static int mapped(const char *what) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, what)) found = 1;
  fclose(f);
  return found;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "shm";
  acc_state *st = NULL;
  if (strcmp(mode, "missing") == 0) {
    CHECK_ERR(acc_state_create(&st, NULL), ACC_ERR_NOT_SUPPORTED, "libaccelerate-mpi-openmpi.so");
    CHECK(strstr(acc_last_error(), "install") != NULL, "no install hint: %s", acc_last_error());
    CHECK(mapped("libmpi") == 0, "libmpi mapped after a failed load");
    return acc_test_finish("module_maps_missing");
  }
  REQUIRE_OK(acc_state_create(&st, NULL));
  acc_test_rank = acc_state_process_index(st);
  float x = 1.0f;
  CHECK_OK(acc_all_reduce(st, &x, &x, 1, ACC_F32, ACC_SUM));
  CHECK(x == (float)acc_state_num_processes(st), "all_reduce gave %g", x);
  CHECK(mapped("libaccelerate.so") == 1, "the test is not linked to the shared library");
  if (strcmp(mode, "mpi") == 0) {
    CHECK(strstr(acc_state_describe(st), "mpi") != NULL, "backend: %s", acc_state_describe(st));
    CHECK(mapped("libaccelerate-mpi-openmpi.so") == 1, "the Open MPI module is not mapped");
    CHECK(mapped("libaccelerate-mpi-mpich.so") == 0, "the MPICH module is mapped under Open MPI");
    CHECK(mapped("libmpi") == 1, "libmpi is not mapped under the MPI backend");
  } else {
    CHECK(mapped("libaccelerate-mpi-") == 0, "an MPI module is mapped in a %s run", mode);
    CHECK(mapped("libmpi") == 0, "libmpi is mapped in a %s run", mode);
  }
  acc_state_destroy(st);
  return acc_test_finish("module_maps");
}
