/* One rank of a job started by tests/rdzv/pidns.sh: creates the process state (the shared-memory
 * rendezvous; rank 0 also reclaims stale segments), all-reduces 1.0, prints the sum. */
#include <stdio.h>

#include "accelerate.h"

int main(void) {
  acc_state *st = NULL;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "pidns_probe: %s\n", acc_last_error());
    return 1;
  }
  float x = 1.0f;
  acc_result rc = acc_all_reduce(st, &x, &x, 1, ACC_F32, ACC_SUM);
  if (rc != ACC_OK) fprintf(stderr, "pidns_probe: %s\n", acc_last_error());
  else printf("pidns_probe rank %d: sum %g\n", acc_state_process_index(st), (double)x);
  int ok = rc == ACC_OK && x == (float)acc_state_num_processes(st);
  acc_state_destroy(st);
  return ok ? 0 : 1;
}
