/* Fail-fast, signals, cleanup of `accelerate launch` through the real binary.
 * argv[1] = accelerate, argv[2] = launch_helper. This process is a child subreaper: any rank the
 * launcher failed to stop or reap would end up as our child, which lu_no_leftovers detects. */
#include "acc_test.h"
#include "launch_util.h"

static char *acc, *helper;
static run_out r;

static void test_exit_status(void) {
  char *argv[] = {acc, "launch", "--num_processes", "4", helper, "fail", "2", "3", NULL};
  lu_run(&r, argv, NULL);
  CHECK(r.status == 3, "status %d, expected the failing rank's 3", r.status);
  CHECK(strstr(r.err, "rank 2 (pid ") != NULL && strstr(r.err, "exited with status 3") != NULL,
        "message: %s", r.err);
  CHECK(strstr(r.err, "stopping the other 3 ranks") != NULL, "message: %s", r.err);
  /* the others were blocked in pause(): fail-fast stops them at once, no grace period needed */
  CHECK(r.secs < 3.0, "fail-fast took %.2f s", r.secs);
  CHECK(lu_no_leftovers(), "ranks left behind after a failure");
  /* -q: same status, no report */
  char *argq[] = {acc, "launch", "-q", "--num_processes", "2", helper, "fail", "0", "4", NULL};
  lu_run(&r, argq, NULL);
  CHECK(r.status == 4 && strstr(r.err, "rank 0") == NULL, "quiet: %d '%s'", r.status, r.err);
}

static void test_signal_death(void) {
  char sig[8];
  snprintf(sig, sizeof sig, "%d", SIGUSR1);
  char *argv[] = {acc, "launch", "--num_processes", "3", helper, "signal", "1", sig, NULL};
  lu_run(&r, argv, NULL);
  CHECK(r.status == 128 + SIGUSR1, "status %d, expected %d", r.status, 128 + SIGUSR1);
  CHECK(strstr(r.err, "rank 1 (pid ") && strstr(r.err, "was killed by SIGUSR1"), "message: %s", r.err);
  CHECK(r.secs < 3.0, "took %.2f s", r.secs);
  snprintf(sig, sizeof sig, "%d", SIGKILL);
  char *argv2[] = {acc, "launch", "--num_processes", "2", helper, "signal", "0", sig, NULL};
  lu_run(&r, argv2, NULL);
  CHECK(r.status == 137 && strstr(r.err, "rank 0") && strstr(r.err, "SIGKILL"), "%d: %s", r.status, r.err);
  CHECK(lu_no_leftovers(), "ranks left behind after a signal death");
}

static void test_sigkill_after_grace(void) {
  static const char *const env[] = {"ACCELERATE_LAUNCH_GRACE_PERIOD=0.3", NULL};
  char dir[64];
  lu_make_dir(dir, sizeof dir);
  char *argv[] = {acc, "launch", "--num_processes", "3", helper, "ignore_term", "0", dir, NULL};
  lu_run(&r, argv, env);
  lu_remove_dir(dir);
  CHECK(r.status == 5, "status %d", r.status);
  CHECK(strstr(r.err, "2 ranks still running 0.3 s after SIGTERM; sending SIGKILL"), "message: %s", r.err);
  CHECK(r.secs >= 0.3 && r.secs < 5.0, "took %.2f s (grace 0.3 s)", r.secs);
  CHECK(lu_no_leftovers(), "SIGTERM-ignoring ranks left behind");
}

static int wait_ready(const char *dir, int n, double timeout_s) {
  double t0 = lu_now();
  while (lu_now() - t0 < timeout_s) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
      char name[32];
      snprintf(name, sizeof name, "ready.%d", i);
      ok &= lu_file_exists(dir, name);
    }
    if (ok) return 1;
    usleep(1000);
  }
  return 0;
}

static void test_forwarding(int sig) {
  char dir[64];
  lu_make_dir(dir, sizeof dir);
  char *argv[] = {acc, "launch", "--num_processes", "3", helper, "marker", dir, NULL};
  double t0 = lu_now();
  pid_t p = lu_start(argv, NULL);
  int ready = wait_ready(dir, 3, 10.0);
  CHECK(ready, "ranks did not start");
  kill(p, sig);
  lu_finish(p, t0, 20.0, &r);
  CHECK(r.status == 128 + sig, "%s: launcher status %d, expected %d", (sig == SIGINT ? "SIGINT" : "SIGTERM"),
        r.status, 128 + sig);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "marker.%d.%d", i, sig);
    CHECK(lu_file_exists(dir, name), "rank %d did not receive signal %d", i, sig);
  }
  CHECK(strstr(r.err, "forwarding it to 3 ranks") != NULL, "stderr: %s", r.err);
  CHECK(lu_no_leftovers(), "ranks left behind after signal %d", sig);
  lu_remove_dir(dir);
}

static void test_shm_cleanup(void) {
  char dir[64], id[128], path[256];
  lu_make_dir(dir, sizeof dir);
  char *argv[] = {acc, "launch", "--num_processes", "2", helper, "shm", dir, NULL};
  lu_run(&r, argv, NULL);
  CHECK(r.status == 0, "status %d: %s", r.status, r.err);
  snprintf(path, sizeof path, "%s/runid", dir);
  lu_read_file(path, id, sizeof id);
  CHECK(id[0] != '\0', "no run id recorded");
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "/dev/shm/acc-test-%s-%d", id, i);
    CHECK(access(path, F_OK) != 0, "%s was left behind", path);
    unlink(path);
  }
  lu_remove_dir(dir);
}

static void test_orphan_killed(void) {
  char dir[64], text[64], path[128];
  lu_make_dir(dir, sizeof dir);
  char *argv[] = {acc, "launch", "--num_processes", "2", helper, "orphan", dir, NULL};
  lu_run(&r, argv, NULL);
  CHECK(r.status == 9, "status %d: %s", r.status, r.err);
  snprintf(path, sizeof path, "%s/grandchild", dir);
  lu_read_file(path, text, sizeof text);
  CHECK(atol(text) > 0, "grandchild pid not recorded");
  /* The grandchild was killed with the group and, orphaned, reaped by the launcher (a child
   * subreaper): it no longer exists, and nothing was reparented to us. */
  pid_t g = (pid_t)atol(text);
  CHECK(g > 0 && kill(g, 0) != 0 && errno == ESRCH, "grandchild %ld still exists", (long)g);
  CHECK(lu_no_leftovers(), "processes left behind by a rank's child");
  lu_remove_dir(dir);
}

/* Issue 20 N6: one rank fails with its own error, the others fail because of it and exit
 * first; the report names the rank that failed first with its own message. */
static void test_blame_cause(void) {
  for (int n = 2; n <= 3; n++) {
    char np[8];
    snprintf(np, sizeof np, "%d", n);
    char *argv[] = {acc, "launch", "--num_processes", np, helper, "blame", NULL};
    lu_run(&r, argv, NULL);
    char want[64];
    snprintf(want, sizeof want, "accelerate launch: rank %d (pid ", n - 1);
    const char *report = strstr(r.err, want);
    CHECK(r.status == 1, "np %d: status %d, expected 1", n, r.status);
    CHECK(report != NULL, "np %d: the report does not name rank %d first: %s", n, n - 1, r.err);
    if (report) {
      CHECK(strstr(report, "exited with status 1 (its last library error: dataloader: the dataset fetch callback returned") != NULL,
            "np %d: the report lacks rank %d's own message: %s", n, n - 1, r.err);
      CHECK(strstr(report, "exited before it, with status 1, because of it") != NULL,
            "np %d: the report does not say another rank exited before it: %s", n, r.err);
    }
    /* the ranks that only followed are never reported as the failure */
    for (int k = 0; k < n - 1; k++) {
      snprintf(want, sizeof want, "accelerate launch: rank %d (pid ", k);
      CHECK(strstr(r.err, want) == NULL, "np %d: rank %d blamed: %s", n, k, r.err);
    }
    CHECK(lu_no_leftovers(), "ranks left behind");
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_launch_failfast ACCELERATE HELPER\n");
    return 2;
  }
  acc = argv[1];
  helper = argv[2];
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  test_exit_status();
  test_signal_death();
  test_sigkill_after_grace();
  test_blame_cause();
  test_forwarding(SIGTERM);
  test_forwarding(SIGINT);
  test_shm_cleanup();
  test_orphan_killed();
  CHECK(lu_no_leftovers(), "a process was left behind");
  lu_remove_dir(lu_capdir);
  return acc_test_finish("test_launch_failfast");
}
