/* Collectives over a subgroup of the job (comm_group.c): this machine's processes, or this local
 * rank's "rail" (one process per machine). Internal: for the library's layers above comm (FSDP's
 * HYBRID strategies); the program's collectives always run over the whole job. */
#ifndef ACC_COMM_GROUP_H
#define ACC_COMM_GROUP_H

#include "backend/collcheck.h" /* ACC__GROUP_WORLD, ACC__GROUP_LOCAL, ACC__GROUP_RAIL */
#include "core/internal.h"

/* Local, no communication: this process's rank in group `which` and the group's size. WORLD:
 * the job's. On one machine LOCAL is the job and RAIL this process alone; with one process per
 * machine LOCAL is this process alone and RAIL the job; otherwise the backend's groups (the
 * hierarchical backend: its shm group and its gloo rail). ACC_ERR_NOT_SUPPORTED, with a sentence
 * naming the backend, where it has none (gloo or MPI over several machines with several
 * processes each). A LOCAL rank r of machine m is the job's rank m * size + r (the placement
 * the hierarchical backend requires). */
acc_result acc__comm_group_info(acc_state *st, int which, int *rank, int *size);

/* The collectives of comm.c over group `which` (every member of the group, the same order; every
 * process of the job makes the same subgroup calls, so each group's members agree): the same
 * argument checks, the call descriptor with its group (mismatch detection: the group's backend,
 * or a tag exchange over the group), broken-group handling (a failure marks the job's group
 * broken: one process's loss breaks the job), device staging; WORLD is the public call. MEAN
 * divides by the group's size. */
acc_result acc__comm_group_all_gather_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, const char *file, int line);
acc_result acc__comm_group_reduce_scatter_at(acc_state *st, int which, const void *send, void *recv,
                                             size_t count, acc_dtype dtype, acc_op op, const char *file,
                                             int line);
acc_result acc__comm_group_all_reduce_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op, const char *file, int line);

#define acc__comm_group_all_gather(st, g, send, recv, count, dtype) \
  acc__comm_group_all_gather_at((st), (g), (send), (recv), (count), (dtype), __FILE__, __LINE__)
#define acc__comm_group_reduce_scatter(st, g, send, recv, count, dtype, op) \
  acc__comm_group_reduce_scatter_at((st), (g), (send), (recv), (count), (dtype), (op), __FILE__, __LINE__)
#define acc__comm_group_all_reduce(st, g, send, recv, count, dtype, op) \
  acc__comm_group_all_reduce_at((st), (g), (send), (recv), (count), (dtype), (op), __FILE__, __LINE__)

#endif
