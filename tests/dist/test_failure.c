/* Failure behaviour of the shared-memory backend. This program is its own launcher: it forks the
 * ranks with the environment `accelerate launch` sets, so that one rank can die without the
 * launcher stopping the others; each rank sends a report (result, message, duration of the
 * failing call) through a pipe and the parent asserts on the survivors' reports.
 * Usage: test_failure <scenario>; scenarios are listed in main(). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "backend/shm.h"
#include "comm/comm.h" /* acc__comm_alloc_shared */
#include "core/internal.h"

#define MAXR 8

typedef struct report {
  int rank;
  int rc;
  double elapsed; /* seconds spent in the call that failed (or the last call) */
  int iterations;
  char msg[1800];
} report;

static int g_wfd = -1;
static char g_run_id[64];
/* Rendezvous token of the stale-segment scenarios (exported, so the forged name is the job's). */
static const char g_token[] = "0123456789abcdef0123456789abcdef";
/* Number of reports sent so far, shared by every rank (anonymous shared memory made before the
 * forks): a late rank waits on it instead of sleeping, so "late" holds however slow the machine. */
static _Atomic int *g_reported;

/* Upper bounds on how long a failure may take to be noticed are scaled like the ctest hang
 * guards (ACC_TEST_TIMEOUT_MULTIPLIER: 3 under sanitizers; more on slow machines). */
static double slack(void) {
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  double v = m ? atof(m) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

/* Blocks until k reports were sent (the rank's alarm() is the hang guard). */
static void wait_for_reports(int k) {
  while (atomic_load(g_reported) < k) usleep(1000);
}

static void send_report(int rank, acc_result rc, double elapsed, int it) {
  report r;
  memset(&r, 0, sizeof r);
  r.rank = rank;
  r.rc = rc;
  r.elapsed = elapsed;
  r.iterations = it;
  snprintf(r.msg, sizeof r.msg, "%s", rc == ACC_OK ? "" : acc_last_error());
  if (write(g_wfd, &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
  atomic_fetch_add(g_reported, 1);
}

typedef void (*scenario_fn)(int rank, int n);

static void on_vtalrm(int sig) {
  (void)sig;
  raise(SIGKILL);
}

/* ---- scenarios (run in each rank) --------------------------------------------------------- */

/* Runs `call` in a loop until it fails; reports the failing call. */
#define LOOP_UNTIL_FAIL(rank, max_it, call)                 \
  do {                                                      \
    acc_result rc_ = ACC_OK;                                \
    double t_ = 0;                                          \
    int it_ = 0;                                            \
    for (; it_ < (max_it); it_++) {                         \
      double t0_ = acc__now();                              \
      rc_ = (call);                                         \
      t_ = acc__now() - t0_;                                \
      if (rc_ != ACC_OK) break;                             \
    }                                                       \
    send_report((rank), rc_, t_, it_);                      \
  } while (0)

static void sc_kill_barrier(int rank, int n) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  if (rank == 1) {
    for (int i = 0; i < 200; i++) acc_barrier(st);
    raise(SIGKILL);
  }
  LOOP_UNTIL_FAIL(rank, 1000000, acc_barrier(st));
  acc_state_destroy(st);
  (void)n;
}

static void sc_kill_allreduce(int rank, int n) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  size_t count = 2u << 20; /* 8 MiB of f32: 32 chunks per call */
  float *buf = calloc(count, sizeof *buf);
  if (rank == 1) {
    /* die after ~30 ms of CPU time: almost surely in the middle of a chunked all_reduce */
    signal(SIGVTALRM, on_vtalrm);
    struct itimerval tv = {{0, 0}, {0, 30000}};
    setitimer(ITIMER_VIRTUAL, &tv, NULL);
  }
  LOOP_UNTIL_FAIL(rank, 100000, acc_all_reduce(st, buf, buf, count, ACC_F32, ACC_SUM));
  free(buf);
  acc_state_destroy(st);
  (void)n;
}

/* The same with the buffer in memory the processes share (registered buffers): the in-place
 * all_reduce reads and writes the dead rank's memory, and must fail the same way. */
static void sc_kill_shared(int rank, int n) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  size_t count = 2u << 20;
  float *buf = NULL;
  if (acc__comm_alloc_shared(st, count * sizeof *buf, (void **)&buf) != ACC_OK || !buf)
    return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  if (rank == 1) {
    signal(SIGVTALRM, on_vtalrm);
    struct itimerval tv = {{0, 0}, {0, 30000}};
    setitimer(ITIMER_VIRTUAL, &tv, NULL);
  }
  LOOP_UNTIL_FAIL(rank, 100000, acc_all_reduce(st, buf, buf, count, ACC_F32, ACC_SUM));
  acc__comm_free_shared(st, buf);
  acc_state_destroy(st);
  (void)n;
}

static void sc_left(int rank, int n) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  if (rank == 1) {
    for (int i = 0; i < 5; i++) acc_barrier(st);
    acc_state_destroy(st);
    send_report(rank, ACC_OK, 0, 5);
    return;
  }
  LOOP_UNTIL_FAIL(rank, 1000000, acc_barrier(st));
  acc_state_destroy(st);
  (void)n;
}

static void sc_timeout(int rank, int n) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  acc_result rc = acc_barrier(st);
  /* the late rank arrives only once the others have timed out and reported */
  if (rc == ACC_OK && rank == n - 1) wait_for_reports(n - 1);
  double t0 = acc__now();
  if (rc == ACC_OK) rc = acc_barrier(st);
  send_report(rank, rc, acc__now() - t0, 1);
  acc_state_destroy(st);
}

static void sc_late_join(int rank, int n) {
  if (rank == n - 1) wait_for_reports(n - 1); /* starts once the others have timed out */
  acc_state *st = NULL;
  double t0 = acc__now();
  acc_result rc = acc_state_create(&st, NULL);
  send_report(rank, rc, acc__now() - t0, 0);
  acc_state_destroy(st);
}

static void sc_debug_mismatch(int rank, int n) {
  acc_state *st;
  if (acc_state_create(&st, NULL) != ACC_OK) return send_report(rank, ACC_ERR_INTERNAL, 0, 0);
  float x[4] = {1, 2, 3, 4};
  acc_result rc = acc_barrier(st);
  if (rc == ACC_OK) {
    if (rank == 0) rc = acc_barrier(st);
    else if (rank == 1) rc = acc_all_reduce(st, x, x, 4, ACC_F32, ACC_SUM);
    else rc = acc_broadcast(st, x, 4, ACC_F32, 0);
  }
  send_report(rank, rc, 0, 0);
  acc_state_destroy(st);
  (void)n;
}

static void sc_stale(int rank, int n) {
  acc_state *st;
  /* rank 0 starts late, so the others surely find the stale segment first */
  if (rank == 0) usleep(300000);
  acc_result rc = acc_state_create(&st, NULL);
  if (rc != ACC_OK) return send_report(rank, rc, 0, 0);
  float x[8];
  for (int i = 0; i < 8; i++) x[i] = (float)(rank + 1);
  rc = acc_all_reduce(st, x, x, 8, ACC_F32, ACC_SUM);
  for (int i = 0; rc == ACC_OK && i < 8; i++)
    if (x[i] != (float)(n * (n + 1) / 2)) {
      rc = acc__error(ACC_ERR_INTERNAL, "all_reduce after a stale segment gave %g at %d", x[i], i);
    }
  if (rc == ACC_OK) rc = acc_barrier(st);
  send_report(rank, rc, 0, 0);
  acc_state_destroy(st);
}

/* ---- the driver --------------------------------------------------------------------------- */

static int run_job(int n, scenario_fn fn, const char *const *env, report *reps, pid_t *pids) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  atomic_store(g_reported, 0);
  for (int r = 0; r < n; r++) {
    pid_t p = fork();
    if (p == 0) {
      close(fds[0]);
      g_wfd = fds[1];
      alarm(30); /* hang guard of each rank */
      char b[32];
      setenv("ACCELERATE_RUN_ID", g_run_id, 1);
      snprintf(b, sizeof b, "%d", r);
      setenv("RANK", b, 1);
      setenv("LOCAL_RANK", b, 1);
      snprintf(b, sizeof b, "%d", n);
      setenv("WORLD_SIZE", b, 1);
      setenv("LOCAL_WORLD_SIZE", b, 1);
      unsetenv("ACCELERATE_DEBUG_MODE");
      unsetenv("ACCELERATE_TIMEOUT");
      unsetenv("ACCELERATE_BACKEND");
      for (int i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
      fn(r, n);
      _exit(0);
    }
    pids[r] = p;
  }
  close(fds[1]);
  for (int r = 0; r < n; r++) reps[r].rank = -1;
  report rep;
  while (read(fds[0], &rep, sizeof rep) == (ssize_t)sizeof rep)
    if (rep.rank >= 0 && rep.rank < n) reps[rep.rank] = rep;
  close(fds[0]);
  for (int r = 0; r < n; r++) {
    int status;
    waitpid(pids[r], &status, 0);
    pids[r] = status; /* reuse: exit status per rank */
  }
  return 0;
}

static void check_no_segment(const char *scenario) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    CHECK(!strstr(e->d_name, g_run_id), "%s: /dev/shm/%s was left behind", scenario, e->d_name);
  closedir(d);
}

static void expect(const report *r, acc_result rc, const char *substr, const char *scenario) {
  CHECK(r->rank >= 0, "%s: a rank sent no report", scenario);
  CHECK(r->rc == (int)rc, "%s: rank %d got %s, want %s: %s", scenario, r->rank,
        acc_result_string((acc_result)r->rc), acc_result_string(rc), r->msg);
  if (substr) CHECK(strstr(r->msg, substr) != NULL, "%s: rank %d message lacks \"%s\": %s", scenario, r->rank, substr, r->msg);
}

/* Writes a segment that looks like the one of an earlier job with the same id; with
 * dead_owner, rank 0's liveness lock is held by a process that has exited. */
static void forge_stale(int n, int dead_owner) {
  char name[256];
  snprintf(name, sizeof name, "/acc-accelerate-%s-x-%ld-%s", g_run_id, (long)getpid(), g_token);
  uint64_t chunk = 512 * 1024, total = acc__shm_total(n, chunk);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE_OK(fd >= 0 ? ACC_OK : ACC_ERR_SYSTEM);
  REQUIRE_OK(ftruncate(fd, (off_t)total) == 0 ? ACC_OK : ACC_ERR_SYSTEM);
  uint8_t *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  REQUIRE_OK(m != MAP_FAILED ? ACC_OK : ACC_ERR_SYSTEM);
  memset(m + acc__shm_slots_off(n), 0x7f, total - acc__shm_slots_off(n)); /* garbage data */
  acc__shm_header *h = (acc__shm_header *)m;
  h->magic = ACC_SHM_MAGIC;
  h->version = ACC_SHM_VERSION;
  h->world = n;
  h->chunk = chunk;
  h->total_bytes = total;
  acc__shm_ctrl *c = (acc__shm_ctrl *)(m + acc__shm_ctrl_off());
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int r = 0; r < n; r++) {
    pthread_mutex_init(&c[r].lock, &a);
    atomic_store(&c[r].seq, 1000 + (uint64_t)r); /* far ahead: reusing it would break steps */
    atomic_store(&c[r].registered, 1);
  }
  if (dead_owner) {
    pid_t p = fork();
    if (p == 0) {
      pthread_mutex_lock(&c[0].lock);
      _exit(0);
    }
    waitpid(p, NULL, 0);
  }
  atomic_store(&h->ready, 1);
  munmap(m, total);
}

int main(int argc, char **argv) {
  const char *sc = argc > 1 ? argv[1] : "";
  snprintf(g_run_id, sizeof g_run_id, "tf%ld%s", (long)getpid(), sc);
  for (char *p = g_run_id; *p; p++)
    if (*p == '_') *p = '-';
  g_reported = mmap(NULL, sizeof *g_reported, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_reported == MAP_FAILED) {
    fprintf(stderr, "test_failure: mmap: %s\n", strerror(errno));
    return 1;
  }
  const double k = slack();
  report reps[MAXR];
  pid_t pids[MAXR];
  char want[256];
  if (strcmp(sc, "kill_barrier") == 0 || strcmp(sc, "kill_allreduce") == 0 || strcmp(sc, "kill_shared") == 0) {
    int ar = strcmp(sc, "kill_barrier") != 0;
    run_job(3, strcmp(sc, "kill_shared") == 0 ? sc_kill_shared : ar ? sc_kill_allreduce : sc_kill_barrier, NULL,
            reps, pids);
    CHECK(WIFSIGNALED(pids[1]) && WTERMSIG(pids[1]) == SIGKILL, "rank 1 should have been killed");
    for (int r = 0; r < 3; r += 2) {
      expect(&reps[r], ACC_ERR_REMOTE, "died before arriving", sc);
      expect(&reps[r], ACC_ERR_REMOTE, ar ? "all_reduce (collective #" : "barrier (collective #", sc);
      expect(&reps[r], ACC_ERR_REMOTE, "arrived: [", sc);
      CHECK(reps[r].elapsed < 10.0 * k, "%s: rank %d needed %.2f s to notice the death", sc, r, reps[r].elapsed);
      CHECK(WIFEXITED(pids[r]) && WEXITSTATUS(pids[r]) == 0, "%s: rank %d did not exit cleanly", sc, r);
    }
    /* the pid is in the message: find it from rank 0's text and compare with rank 2's */
    CHECK(strstr(reps[0].msg, "rank 1 (pid ") != NULL, "%s: %s", sc, reps[0].msg);
  } else if (strcmp(sc, "left") == 0) {
    run_job(3, sc_left, NULL, reps, pids);
    for (int r = 0; r < 3; r += 2) {
      expect(&reps[r], ACC_ERR_REMOTE, "left the process group (acc_state_destroy or exit)", sc);
      expect(&reps[r], ACC_ERR_REMOTE, "rank 1 (pid ", sc);
      CHECK(reps[r].iterations == 5, "%s: rank %d failed at barrier %d, want 5", sc, r, reps[r].iterations);
      CHECK(reps[r].elapsed < 10.0 * k, "%s: rank %d needed %.2f s", sc, r, reps[r].elapsed);
    }
    expect(&reps[1], ACC_OK, NULL, sc);
  } else if (strcmp(sc, "timeout") == 0) {
    const char *env[] = {"ACCELERATE_TIMEOUT", "1", NULL};
    run_job(3, sc_timeout, env, reps, pids);
    for (int r = 0; r < 2; r++) {
      expect(&reps[r], ACC_ERR_TIMEOUT, "after 1 s (ACCELERATE_TIMEOUT)", sc);
      expect(&reps[r], ACC_ERR_TIMEOUT, "arrived: [0 1], not arrived: [2]", sc);
      CHECK(reps[r].elapsed >= 1.0 && reps[r].elapsed < 5.0 * k, "%s: rank %d timed out after %.2f s", sc,
            r, reps[r].elapsed);
    }
  } else if (strcmp(sc, "late_join") == 0) {
    const char *env[] = {"ACCELERATE_TIMEOUT", "1", NULL};
    run_job(3, sc_late_join, env, reps, pids);
    for (int r = 0; r < 2; r++) {
      expect(&reps[r], ACC_ERR_TIMEOUT, "attached: [0 1], not attached: [2]", sc);
      CHECK(reps[r].elapsed >= 1.0 && reps[r].elapsed < 5.0 * k, "%s: rank %d: %.2f s", sc, r, reps[r].elapsed);
    }
    expect(&reps[2], ACC_ERR_TIMEOUT, "waiting for rank 0 to create the shared-memory segment", sc);
  } else if (strcmp(sc, "debug_mismatch") == 0) {
    const char *env[] = {"ACCELERATE_DEBUG_MODE", "1", NULL};
    run_job(3, sc_debug_mismatch, env, reps, pids);
    for (int r = 0; r < 3; r++) {
      expect(&reps[r], ACC_ERR_MISMATCH, "process 0: barrier()", sc);
      expect(&reps[r], ACC_ERR_MISMATCH, "process 1: all_reduce(count=4, dtype=f32, op=sum)", sc);
      expect(&reps[r], ACC_ERR_MISMATCH, "process 2: broadcast(count=4, dtype=f32, root=0)", sc);
    }
  } else if (strcmp(sc, "stale_clean") == 0 || strcmp(sc, "stale_dead") == 0) {
    forge_stale(2, strcmp(sc, "stale_dead") == 0);
    const char *env[] = {"ACCELERATE_RENDEZVOUS_TOKEN", g_token, NULL};
    run_job(2, sc_stale, env, reps, pids);
    for (int r = 0; r < 2; r++) expect(&reps[r], ACC_OK, NULL, sc);
  } else {
    fprintf(stderr, "usage: test_failure kill_barrier|kill_allreduce|kill_shared|left|timeout|late_join|"
                    "debug_mismatch|stale_clean|stale_dead\n");
    return 2;
  }
  if (getenv("ACC_TEST_VERBOSE"))
    for (int r = 0; r < MAXR && r < 3; r++) fprintf(stderr, "rank %d: %s (%.3f s)\n", r, reps[r].msg, reps[r].elapsed);
  snprintf(want, sizeof want, "%s", sc);
  check_no_segment(want);
  return acc_test_finish(sc);
}
