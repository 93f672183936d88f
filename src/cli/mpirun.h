/* The mpirun command line of `accelerate launch --use_mpi / --mpirun_hostfile`, by MPI flavor.
 * Pure functions (tested on captured `mpirun --version` outputs) plus the probe that runs it. */
#ifndef ACC_CLI_MPIRUN_H
#define ACC_CLI_MPIRUN_H

#include <stddef.h>

typedef enum acc_mpi_flavor {
  ACC_MPI_UNKNOWN = 0, /* no recognizable output: the Hydra form (as for Intel MPI / MVAPICH) */
  ACC_MPI_OPENMPI,
  ACC_MPI_INTEL,
  ACC_MPI_MVAPICH,
  ACC_MPI_MPICH
} acc_mpi_flavor;

/* The flavor named by the output of `mpirun --version` (NULL or empty: unknown). */
acc_mpi_flavor acc_mpi_flavor_parse(const char *version_output);
const char *acc_mpi_flavor_name(acc_mpi_flavor f);

/* Fills argv[0..) with the mpirun options placed before the exported variables and the program:
 * Open MPI:  mpirun [--hostfile H --npernode K] -n N [--bind-to socket]   (binding with H only)
 * others:    mpirun [-f H -ppn K] -n N
 * per_node and total are decimal strings (kept borrowed). Returns the count (at most 10). */
int acc_mpirun_prefix(acc_mpi_flavor f, const char *mpirun, const char *hostfile,
                      const char *per_node, const char *total, char **argv);
/* Whether the flavor's mpirun takes `-x VAR` to export a variable (Open MPI). The Hydra-based
 * ones (Intel MPI, MVAPICH, MPICH) pass the launching environment on by default. */
int acc_mpi_flavor_exports_with_x(acc_mpi_flavor f);

/* Runs `<mpirun> --version` and parses it; ACC_MPI_UNKNOWN when it cannot be run. */
acc_mpi_flavor acc_mpi_flavor_probe(const char *mpirun);

#endif
