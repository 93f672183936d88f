/* One compute thread per process when several share a machine, under every launcher: accelerate
 * launch sets OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1 for its children (src/cli/launch.c); srun,
 * mpirun and torchrun-style environments do not, so the state does it when it is created. A
 * runtime that read its variable when it was loaded (OpenBLAS sizes its pool in a constructor)
 * is told through its own setter, found with dlsym, so nothing links OpenBLAS or OpenMP. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/log.h"
#include "state/threads.h"

static void call_setter(const char *symbol) {
  void *sym = dlsym(RTLD_DEFAULT, symbol);
  if (!sym) return;
  void (*fn)(int);
  memcpy(&fn, &sym, sizeof fn); /* object pointer -> function pointer, as POSIX allows */
  fn(1);
}

void acc__limit_threads(const acc__env_info *e) {
  if (e->local_size <= 1 && e->local_known) return;
  static const char *const vars[][2] = {{"OMP_NUM_THREADS", "omp_set_num_threads"},
                                        {"OPENBLAS_NUM_THREADS", "openblas_set_num_threads"}};
  int changed = 0;
  for (int i = 0; i < 2; i++) {
    const char *v = acc__env_str(vars[i][0]);
    if (v && *v) continue; /* the user's (or accelerate launch's) choice */
    setenv(vars[i][0], "1", 1);
    call_setter(vars[i][1]);
    changed = 1;
  }
  if (changed)
    acc__log(ACC_LOG_DEBUG, "%d processes on this machine (%s): OMP_NUM_THREADS and "
             "OPENBLAS_NUM_THREADS not set, using 1 thread per process", e->local_size, e->launcher);
}
