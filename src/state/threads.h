/* Threads per process under launchers other than accelerate launch (src/state/threads.c). */
#ifndef ACC_STATE_THREADS_H
#define ACC_STATE_THREADS_H

#include "state/state.h"

/* With several processes on this machine, OMP_NUM_THREADS and OPENBLAS_NUM_THREADS that are not
 * set become 1 (the rule of accelerate launch, src/cli/launch.c), and an OpenBLAS or OpenMP
 * runtime already loaded is told so. Values the user or the launcher set are kept. */
void acc__limit_threads(const acc__env_info *e);

#endif
