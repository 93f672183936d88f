/* A rank that dies in the middle of an all-reduce loop: rank 1 SIGKILLs itself at iteration 20;
 * the others keep reducing. Run by kill_rank.sh, which checks that the job ends in bounded time
 * with a message that says what happened. Returns 0 only if no rank died (which is a failure
 * for the script). */
#include <signal.h>

#include "acc_test.h"

int main(void) {
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  int rank = acc_state_process_index(st);
  float buf[256];
  for (int it = 0; it < 200000; it++) {
    for (int i = 0; i < 256; i++) buf[i] = (float)(rank + i);
    if (rank == 1 && it == 20) raise(SIGKILL);
    acc_result rc = acc_all_reduce(st, buf, buf, 256, ACC_F32, ACC_SUM);
    if (rc != ACC_OK) {
      fprintf(stderr, "[rank %d] all_reduce failed at iteration %d: %s\n", rank, it, acc_last_error());
      acc_state_destroy(st);
      return 3;
    }
  }
  acc_state_destroy(st);
  return 0;
}
