#define _POSIX_C_SOURCE 200809L
/* join_time: prints this process's rank and the wall-clock time (ns since the epoch) at which
 * acc_state_create returned, i.e. the process joined the group (store and backend). Used by
 * bench/multinode/run.sh to time "last launcher started -> every rank joined". */
#include <stdio.h>
#include <time.h>

#include "accelerate.h"

int main(void) {
  acc_state *st = NULL;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "join_time: %s\n", acc_last_error());
    return 1;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  printf("joined rank %d at %lld\n", acc_state_process_index(st),
         (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
  fflush(stdout);
  acc_barrier(st);
  acc_state_destroy(st);
  return 0;
}
