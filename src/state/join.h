/* Several machines without MPI: joining the job's rendezvous store (src/state/join.c). */
#ifndef ACC_STATE_JOIN_H
#define ACC_STATE_JOIN_H

#include "backend/backend.h"
#include "state/state.h"

/* Joins the store (rank 0 hosts it when no `accelerate launch` does) and waits for every process;
 * fills info->store, machine_rank, num_machines. Errors name host:port and what differs. */
acc_result acc__state_join(const acc__env_info *e, acc__proc_info *info);
/* The store connection of this process (NULL when it did not join one) and its machine rank.
 * For bootstrap exchanges in the main thread (the NCCL id: src/device/nccl_boot.c). */
struct acc__store *acc__state_join_store(int *machine_rank);
/* Leaves the store (rank 0, when it hosts it, waits for every process, bounded). */
void acc__state_leave(void);

#endif
