#define _POSIX_C_SOURCE 200809L
/* The MPI backend's collective timeout. Run under mpirun -np 2 with ACCELERATE_TIMEOUT=1:
 * rank 1 is late (it does not join the all-reduce for 30 s, the hang guard); rank 0's
 * all-reduce must fail with ACC_ERR_TIMEOUT after about 1 s, naming the operation, and the next
 * collective must fail at once with ACC_ERR_REMOTE (MPI cannot cancel the first one). Rank 0
 * prints "late_peer: PASS" when all of that held; the script checks that line, since mpirun
 * then ends the job because rank 0 did not finalize. */
#include <string.h>
#include <time.h>

#include "acc_test.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  int rank = acc_state_process_index(st);
  float buf[4] = {1, 2, 3, 4};
  REQUIRE_OK(acc_all_reduce(st, buf, buf, 4, ACC_F32, ACC_SUM)); /* both present: works */
  CHECK(buf[0] == 2.0f && buf[3] == 8.0f, "got %g %g", buf[0], buf[3]);
  if (rank == 1) {
    /* the late peer: stays away far longer than the timeout (mpirun ends it when rank 0 exits) */
    struct timespec ts = {30, 0};
    nanosleep(&ts, NULL);
    return 3;
  }
  double t0 = now();
  acc_result rc = acc_all_reduce(st, buf, buf, 4, ACC_F32, ACC_SUM);
  double dt = now() - t0;
  const char *msg = acc_last_error();
  printf("late_peer: all_reduce returned %d after %.2f s: %s\n", (int)rc, dt, msg);
  CHECK(rc == ACC_ERR_TIMEOUT, "rc %d", (int)rc);
  CHECK(strstr(msg, "all_reduce") != NULL, "%s", msg);
  CHECK(strstr(msg, "timed out after 1 s") != NULL, "%s", msg);
  CHECK(dt >= 0.95 && dt < 5.0, "waited %.2f s", dt);
  t0 = now();
  rc = acc_barrier(st);
  dt = now() - t0;
  printf("late_peer: then barrier returned %d after %.3f s: %s\n", (int)rc, dt, acc_last_error());
  CHECK(rc == ACC_ERR_REMOTE, "rc %d", (int)rc);
  CHECK(strstr(acc_last_error(), "broken by an earlier failure") != NULL, "%s", acc_last_error());
  CHECK(dt < 0.5, "waited %.3f s", dt);
  acc_state_destroy(st); /* must not hang (skips MPI_Finalize) */
  if (acc_test_failures == 0) printf("late_peer: PASS\n");
  fflush(stdout);
  return acc_test_failures ? 1 : 0;
}
