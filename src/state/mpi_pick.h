/* Which MPI module fits the launcher (src/state/mpi_pick.c). */
#ifndef ACC_STATE_MPI_PICK_H
#define ACC_STATE_MPI_PICK_H

#include "backend/module.h"
#include "state/state.h"

/* The MPI flavor whose runtime can start under this launch environment: "openmpi" (Open MPI's
 * mpirun, srun --mpi=pmix), "mpich" (Hydra's mpirun.mpich/mpiexec, MVAPICH, srun --mpi=pmi2), or
 * NULL (no MPI process manager: srun --mpi=none, accelerate launch, torchrun, a bare program).
 * ACCELERATE_MPI_FLAVOR overrides. *why names the evidence ("srun --mpi=pmi2 (PMI_RANK)"). */
const char *acc__mpi_flavor(const acc__env_info *e, const char **why);

/* Loads the MPI module of that flavor (libaccelerate-mpi-<flavor>.so). Never loads a module whose
 * MPI cannot start here (Open MPI aborts inside MPI_Init under srun --mpi=pmi2 or none): fails
 * instead, naming the launcher, the module wanted, the one installed and what to do. */
acc_result acc__mpi_module_for(const acc__env_info *e, const acc__module_ops **mod);

#endif
