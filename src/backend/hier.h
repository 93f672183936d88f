/* The hierarchical backend (src/backend/hier.c): shm inside a machine, a leaders' group (gloo)
 * between machines. Internal. */
#ifndef ACC_HIER_H
#define ACC_HIER_H

#include "backend/backend.h"

/* Creates a backend over info's ranks, its store keys under prefix (the gloo module's
 * backend_create_group). */
typedef acc_result (*acc__group_create_fn)(acc__backend **out, const acc__proc_info *info,
                                           const char *prefix);

/* info: the whole job (rank, size, local_rank, local_size, machine_rank, num_machines, store);
 * leaders_create builds the group of local ranks 0 (rank = machine, size = machines); its
 * backend must have all_gather_strided (the pipelined all_gather's pieces land in place). */
acc_result acc__backend_hier_create(acc__backend **out, const acc__proc_info *info,
                                    acc__group_create_fn leaders_create);

#endif
