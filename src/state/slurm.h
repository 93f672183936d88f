/* Slurm's launch environment (src/state/slurm.c). */
#ifndef ACC_STATE_SLURM_H
#define ACC_STATE_SLURM_H

#include "core/internal.h"

/* 1 when this process is a task of an srun step (SLURM_PROCID and a real SLURM_STEP_ID) that no
 * launcher inside the step (Open MPI's, Hydra's, MVAPICH's) started: Slurm's variables then win
 * over the PMI_* ones its pmi2 plugin sets. */
int acc__slurm_is_task(void);

/* 1 when SLURM_PROCID is set but this is no srun step: the batch script (or the extern or
 * interactive step) running the program itself, which is one process. */
int acc__slurm_batch_step(void);

/* An srun task's rank and size (SLURM_PROCID, SLURM_STEP_NUM_TASKS, else SLURM_NTASKS), its local
 * rank (SLURM_LOCALID), the tasks on its node (entry SLURM_NODEID of SLURM_STEP_TASKS_PER_NODE,
 * else of SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE, else size / SLURM_NNODES) and the
 * step's nodes (SLURM_STEP_NUM_NODES, else the list's length). Errors name the variable. */
acc_result acc__slurm_detect(long *rank, long *size, long *lrank, long *lsize, long *machines);

/* The PMI that srun's mpi plugin gave the task: "pmix" (PMIX_RANK), "pmi2" (PMI_RANK) or "none". */
const char *acc__slurm_pmi(void);

/* srun --mpi=none (no PMI) across nodes: the processes join through the rendezvous store
 * (rank 0 hosts it) and gloo, from SLURM_PROCID/NTASKS/LOCALID/NODEID (docs/slurm-and-mpi.md). */
struct acc__env_info;
int acc__slurm_store_bootstrap(const struct acc__env_info *e);
/* 1 when every node of the step runs as many tasks (SLURM_STEP_TASKS_PER_NODE, else
 * SLURM_TASKS_PER_NODE, is one "N" or "N(xM)" entry). */
int acc__slurm_uniform_tasks(void);
/* The store's address under srun --mpi=none: MASTER_ADDR, else the first host of
 * SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST: "n[01-04],m7" -> "n01"), into buf. */
void acc__slurm_store_host(char *buf, size_t cap);

#endif
