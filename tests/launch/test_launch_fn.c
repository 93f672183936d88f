/* acc_launch_function: a C function run in N forked processes. */
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "launch_util.h"
#include "state/state.h"

typedef struct job {
  char dir[64];
  int fail_rank, fail_code, fail_signal;
} job;

/* Each rank records what it sees; a rank selected by the job fails. */
static int work(void *payload) {
  job *j = payload;
  acc__env_info e;
  if (acc__detect_env(&e) != ACC_OK) return 50;
  char name[128], text[256];
  snprintf(name, sizeof name, "%s/rank.%d", j->dir, e.rank);
  FILE *f = fopen(name, "wx");
  if (!f) return 51;
  snprintf(text, sizeof text, "%s %d/%d local %d/%d run %s", e.launcher, e.rank, e.size, e.local_rank,
           e.local_size, getenv("ACCELERATE_RUN_ID") ? getenv("ACCELERATE_RUN_ID") : "-");
  fputs(text, f);
  fclose(f);
  if (e.rank == j->fail_rank) {
    if (j->fail_signal) raise(j->fail_signal);
    return j->fail_code;
  }
  if (j->fail_rank >= 0)
    for (;;) pause(); /* the launcher must stop us */
  return 0;
}

static void test_ok(int n) {
  job j = {.fail_rank = -1};
  lu_make_dir(j.dir, sizeof j.dir);
  double t0 = lu_now();
  CHECK_OK(acc_launch_function(n, work, &j));
  CHECK(lu_now() - t0 < 5.0, "n=%d took %.2f s", n, lu_now() - t0);
  if (n > 1) {
    char first_run[64] = "";
    for (int r = 0; r < n; r++) {
      char path[128], text[256], want[64];
      snprintf(path, sizeof path, "%s/rank.%d", j.dir, r);
      lu_read_file(path, text, sizeof text);
      snprintf(want, sizeof want, "accelerate %d/%d local %d/%d run ", r, n, r, n);
      CHECK(strncmp(text, want, strlen(want)) == 0, "rank %d saw '%s'", r, text);
      const char *run = text + strlen(want);
      if (r == 0) snprintf(first_run, sizeof first_run, "%s", run);
      CHECK(strcmp(run, first_run) == 0 && strlen(run) > 4, "rank %d run id '%s'", r, run);
    }
  }
  CHECK(lu_count_entries(j.dir) == (n > 1 ? n : 1), "n=%d: %d files", n, lu_count_entries(j.dir));
  /* every child was reaped */
  CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "n=%d left a child behind", n);
  lu_remove_dir(j.dir);
}

static void test_fail(int n, int rank, int code, int sig, const char *want) {
  job j = {.fail_rank = rank, .fail_code = code, .fail_signal = sig};
  lu_make_dir(j.dir, sizeof j.dir);
  double t0 = lu_now();
  CHECK_ERR(acc_launch_function(n, work, &j), ACC_ERR_REMOTE, want);
  CHECK(lu_now() - t0 < 5.0, "fail-fast took %.2f s", lu_now() - t0);
  CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "a child was left behind");
  lu_remove_dir(j.dir);
}

int main(void) {
  test_ok(1);
  test_ok(2);
  test_ok(4);
  test_fail(4, 2, 3, 0, "rank 2");
  test_fail(4, 2, 3, 0, "exited with status 3");
  test_fail(2, 1, 0, SIGUSR1, "rank 1");
  test_fail(2, 1, 0, SIGUSR1, "killed by SIGUSR1");
  job j = {.fail_rank = -1};
  CHECK_ERR(acc_launch_function(0, work, &j), ACC_ERR_INVALID_ARGUMENT, "num_processes is 0");
  CHECK_ERR(acc_launch_function(2, NULL, &j), ACC_ERR_INVALID_ARGUMENT, "fn is NULL");
  /* 1 process runs in place; its return value is reported */
  job one = {.fail_rank = 0, .fail_code = 4};
  lu_make_dir(one.dir, sizeof one.dir);
  CHECK_ERR(acc_launch_function(1, work, &one), ACC_ERR_REMOTE, "rank 0 returned 4");
  lu_remove_dir(one.dir);
  return acc_test_finish("test_launch_fn");
}
