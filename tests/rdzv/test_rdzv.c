/* Rendezvous of the shared-memory backend: bounded waiting for ranks that never attach, the
 * launcher's board of exited ranks, reclaim of segments left by a killed rank 0, bounded wait
 * phases. Like tests/dist/test_failure.c, this program forks its own ranks with the environment
 * `accelerate launch` sets (so that a rank can fail without a launcher stopping the others) and
 * asserts on the survivors' reports.
 * Usage: test_rdzv <scenario> [accelerate-cli]; scenarios are listed in main(). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "backend/shm.h"
#include "core/internal.h"
#include "backend/rdzv.h"

typedef struct report {
  int rank;
  int rc;
  double elapsed;
  char msg[1800];
} report;

static int g_wfd = -1;
static char g_run_id[64];

static double slack(void) {
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  double v = m ? atof(m) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

static void send_report(int rank, acc_result rc, double elapsed) {
  report r;
  memset(&r, 0, sizeof r);
  r.rank = rank;
  r.rc = rc;
  r.elapsed = elapsed;
  snprintf(r.msg, sizeof r.msg, "%s", rc == ACC_OK ? "" : acc_last_error());
  if (write(g_wfd, &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
}

typedef void (*rank_fn)(int rank, int n);

/* Starts ranks [first, first + count) of a world of n with env (name, value pairs) and the run id
 * run_id; they run fn. Returns the read end of the report pipe. */
static int start_ranks(const char *run_id, int first, int count, int n, rank_fn fn,
                       const char *const *env, pid_t *pids) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  for (int r = first; r < first + count; r++) {
    pid_t p = fork();
    if (p == 0) {
      close(fds[0]);
      g_wfd = fds[1];
      alarm((unsigned)(30 * slack())); /* hang guard of each rank */
      char b[32];
      setenv("ACCELERATE_RUN_ID", run_id, 1);
      snprintf(b, sizeof b, "%d", r);
      setenv("RANK", b, 1);
      setenv("LOCAL_RANK", b, 1);
      snprintf(b, sizeof b, "%d", n);
      setenv("WORLD_SIZE", b, 1);
      setenv("LOCAL_WORLD_SIZE", b, 1);
      static const char *const clear[] = {
          "ACCELERATE_DEBUG_MODE",  "ACCELERATE_TIMEOUT",     "ACCELERATE_BACKEND",
          "ACCELERATE_RENDEZVOUS_TIMEOUT", "ACCELERATE_RENDEZVOUS_TOKEN",
          "ACCELERATE_LAUNCHER_STATUS_FD", "ACCELERATE_SHM_SPIN_US", "ACCELERATE_SHM_YIELD_US"};
      for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++) unsetenv(clear[i]);
      for (int i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
      fn(r, n);
      _exit(0);
    }
    pids[r - first] = p;
  }
  close(fds[1]);
  return fds[0];
}

/* Reads the reports of a job and reaps count ranks (statuses into pids). */
static void collect(int rfd, report *reps, int n, pid_t *pids, int count) {
  for (int r = 0; r < n; r++) reps[r].rank = -1;
  report rep;
  while (read(rfd, &rep, sizeof rep) == (ssize_t)sizeof rep)
    if (rep.rank >= 0 && rep.rank < n) reps[rep.rank] = rep;
  close(rfd);
  for (int i = 0; i < count; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    pids[i] = st;
  }
}

static void expect(const report *r, acc_result rc, const char *substr, const char *sc) {
  CHECK(r->rank >= 0, "%s: a rank sent no report", sc);
  CHECK(r->rc == (int)rc, "%s: rank %d got %s, want %s: %s", sc, r->rank,
        acc_result_string((acc_result)r->rc), acc_result_string(rc), r->msg);
  if (substr)
    CHECK(strstr(r->msg, substr) != NULL, "%s: rank %d message lacks \"%s\": %s", sc, r->rank,
          substr, r->msg);
}

/* Number of /dev/shm entries and token files whose name contains id. */
static int leftovers(const char *id, const char *runtime_dir) {
  int n = 0;
  const char *dirs[2] = {"/dev/shm", runtime_dir};
  for (int k = 0; k < 2; k++) {
    DIR *d = dirs[k] ? opendir(dirs[k]) : NULL;
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d)))
      if (strstr(e->d_name, id)) {
        if (getenv("ACC_TEST_VERBOSE")) fprintf(stderr, "left: %s/%s\n", dirs[k], e->d_name);
        n++;
      }
    closedir(d);
  }
  return n;
}

/* ---- rank bodies ------------------------------------------------------------------------- */

/* Rank 1 (or 0) fails before acc_state_create, like a program that rejects its arguments. */
static int g_dead_rank;
static void rk_dead_before_join(int rank, int n) {
  if (rank == g_dead_rank) _exit(2);
  acc_state *st = NULL;
  double t0 = acc__now();
  acc_result rc = acc_state_create(&st, NULL);
  send_report(rank, rc, acc__now() - t0);
  acc_state_destroy(st);
  (void)n;
}

/* A full job: join, one all_reduce, leave. */
static void rk_ok(int rank, int n) {
  acc_state *st = NULL;
  acc_result rc = acc_state_create(&st, NULL);
  float x = 1.0f;
  if (rc == ACC_OK) rc = acc_all_reduce(st, &x, &x, 1, ACC_F32, ACC_SUM);
  if (rc == ACC_OK && x != (float)n) rc = acc__error(ACC_ERR_INTERNAL, "sum %g, want %d", x, n);
  send_report(rank, rc, 0);
  acc_state_destroy(st);
}

/* Rank 0 alone: blocks in the rendezvous until killed. */
static void rk_join_forever(int rank, int n) {
  acc_state *st = NULL;
  acc_result rc = acc_state_create(&st, NULL);
  send_report(rank, rc, 0);
  (void)n;
}

/* Rank 1 dies after some barriers; the others loop until the failure is reported. */
static void rk_kill_in_loop(int rank, int n) {
  acc_state *st = NULL;
  acc_result rc = acc_state_create(&st, NULL);
  if (rc != ACC_OK) return send_report(rank, rc, 0);
  if (rank == 1) {
    for (int i = 0; i < 50; i++) acc_barrier(st);
    raise(SIGKILL);
  }
  double t = 0;
  for (int i = 0; i < 1000000 && rc == ACC_OK; i++) {
    double t0 = acc__now();
    rc = acc_barrier(st);
    t = acc__now() - t0;
  }
  send_report(rank, rc, t);
  acc_state_destroy(st);
  (void)n;
}

/* Rank 0 creates a registered buffer's file and waits in the allocation for rank 1, which never
 * comes: both are killed there (red team 4, R4-4). */
static void rk_reg_stuck(int rank, int n) {
  acc_accelerator *acc = NULL;
  acc_result rc = acc_accelerator_create(&acc, NULL);
  if (rc != ACC_OK) return send_report(rank, rc, 0);
  if (rank == 1) pause();
  void *p = NULL;
  rc = acc_accelerator_alloc_shared(acc, (size_t)1 << 20, &p);
  send_report(rank, rc, 0);
  (void)n;
}

/* Rank 1 ends on a library error of its own (here a refused call; across machines, a peer that
 * closed its connection) and exits without acc_state_destroy while rank 0 waits in a barrier
 * (ecosystem 4, D4/D9). */
static void rk_exit_after_error(int rank, int n) {
  acc_state *st = NULL;
  acc_result rc = acc_state_create(&st, NULL);
  if (rc != ACC_OK) return send_report(rank, rc, 0);
  if (rank == 1) {
    acc_all_reduce(st, NULL, NULL, 1, ACC_F32, ACC_SUM); /* fails: NULL buffers */
    send_report(rank, acc__last_error_code(), 0);
    exit(1);
  }
  rc = acc_barrier(st);
  send_report(rank, rc, 0);
  (void)n;
}

static void rk_create_only(int rank, int n) {
  acc_state *st = NULL;
  acc_result rc = acc_state_create(&st, NULL);
  send_report(rank, rc, 0);
  acc_state_destroy(st);
  (void)n;
}

/* ---- under the launcher ------------------------------------------------------------------ */

/* Run by `accelerate launch` (child mode): rank 1 exits 3 before joining; rank 0 ignores the
 * launcher's SIGTERM (as a program that checkpoints on SIGTERM would) and writes what its
 * acc_state_create returned into the file argv[2]. */
static int launched_child(const char *out) {
  char ready[300];
  snprintf(ready, sizeof ready, "%s.ready", out);
  alarm((unsigned)(30 * slack()));
  const char *r = getenv("RANK");
  if (r && strcmp(r, "1") == 0) {
    /* exit only once rank 0 ignores SIGTERM, or the launcher's SIGTERM could end it first */
    while (access(ready, F_OK) != 0) usleep(1000);
    return 3;
  }
  signal(SIGTERM, SIG_IGN);
  FILE *rf = fopen(ready, "w");
  if (rf) fclose(rf);
  acc_state *st = NULL;
  double t0 = acc__now();
  acc_result rc = acc_state_create(&st, NULL);
  double el = acc__now() - t0;
  FILE *f = fopen(out, "w");
  if (!f) return 1;
  fprintf(f, "%d %.3f %s\n", (int)rc, el, rc == ACC_OK ? "" : acc_last_error());
  fclose(f);
  acc_state_destroy(st);
  return 0;
}

static void sc_launcher_sibling(const char *cli, const char *self, const char *sc) {
  char out[256];
  snprintf(out, sizeof out, "/tmp/acc-test-rdzv-%ld.out", (long)getpid());
  unlink(out);
  pid_t p = fork();
  if (p == 0) {
    static const char *const clear[] = {"ACCELERATE_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                        "LOCAL_WORLD_SIZE", "ACCELERATE_TIMEOUT",
                                        "ACCELERATE_RENDEZVOUS_TOKEN",
                                        "ACCELERATE_LAUNCHER_STATUS_FD"};
    for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++) unsetenv(clear[i]);
    /* neither the rendezvous timeout nor the launcher's SIGKILL may be what ends rank 0 */
    setenv("ACCELERATE_RENDEZVOUS_TIMEOUT", "60", 1);
    setenv("ACCELERATE_LAUNCH_GRACE_PERIOD", "60", 1);
    execl(cli, cli, "launch", "--quiet", "--num_processes", "2", self, "launched_child", out,
          (char *)NULL);
    _exit(127);
  }
  double t0 = acc__now();
  int st = 0;
  waitpid(p, &st, 0);
  double el = acc__now() - t0;
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3, "%s: the launcher should exit 3 (rank 1's status)",
        sc);
  FILE *f = fopen(out, "r");
  char ready[300];
  snprintf(ready, sizeof ready, "%s.ready", out);
  unlink(ready);
  CHECK(f != NULL, "%s: rank 0 wrote no report (%s)", sc, out);
  if (!f) return;
  char line[2048] = "";
  if (!fgets(line, sizeof line, f)) line[0] = '\0';
  fclose(f);
  unlink(out);
  int rc = -1;
  double rel = -1;
  sscanf(line, "%d %lf", &rc, &rel);
  CHECK(rc == ACC_ERR_REMOTE, "%s: rank 0 got %d, want ACC_ERR_REMOTE: %s", sc, rc, line);
  CHECK(strstr(line, "rank 1 (pid ") != NULL, "%s: no dead rank in: %s", sc, line);
  CHECK(strstr(line, "exited with status 3") != NULL, "%s: no exit status in: %s", sc, line);
  CHECK(strstr(line, "reported by accelerate launch") != NULL, "%s: %s", sc, line);
  CHECK(rel >= 0 && rel < 5.0 * slack(), "%s: rank 0 needed %.2f s to learn of rank 1", sc, rel);
  if (getenv("ACC_TEST_VERBOSE")) fprintf(stderr, "%s (launcher %.2f s)", line, el);
}

/* ---- driver ------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  const char *sc = argc > 1 ? argv[1] : "";
  if (strcmp(sc, "launched_child") == 0) return argc > 2 ? launched_child(argv[2]) : 2;
  const double k = slack();
  snprintf(g_run_id, sizeof g_run_id, "trz%ld%s", (long)getpid(), sc);
  for (char *p = g_run_id; *p; p++)
    if (*p == '_') *p = '-';
  char rdir[4096];
  REQUIRE_OK(acc__rdzv_runtime_dir(rdir, sizeof rdir));
  report reps[4];
  pid_t pids[4];
  if (strcmp(sc, "dead_before_join") == 0 || strcmp(sc, "dead_rank0_before_join") == 0) {
    /* regression for red-team D4: a rank that exits before attaching bounds the others' wait by
     * the rendezvous timeout, not by ACCELERATE_TIMEOUT (1800 s here) */
    g_dead_rank = strcmp(sc, "dead_before_join") == 0 ? 1 : 0;
    const char *env[] = {"ACCELERATE_RENDEZVOUS_TIMEOUT", "1", NULL};
    int rfd = start_ranks(g_run_id, 0, 2, 2, rk_dead_before_join, env, pids);
    collect(rfd, reps, 2, pids, 2);
    int alive = 1 - g_dead_rank;
    expect(&reps[alive], ACC_ERR_TIMEOUT, "after 1 s (ACCELERATE_RENDEZVOUS_TIMEOUT)", sc);
    if (alive == 0) expect(&reps[0], ACC_ERR_TIMEOUT, "attached: [0], not attached: [1]", sc);
    else expect(&reps[1], ACC_ERR_TIMEOUT, "waiting for rank 0 to create the shared-memory", sc);
    CHECK(reps[alive].elapsed >= 1.0 && reps[alive].elapsed < 1.0 + 4.0 * k,
          "%s: rank %d gave up after %.2f s, want about 1 s", sc, alive, reps[alive].elapsed);
    CHECK(leftovers(g_run_id, rdir) == 0, "%s: a segment or token file was left behind", sc);
  } else if (strcmp(sc, "launcher_sibling") == 0) {
    /* regression for red-team D4 under the launcher: the survivor learns of the dead sibling
     * from the launcher's board at once */
    CHECK(argc > 2, "usage: test_rdzv launcher_sibling <accelerate cli>");
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    if (argc > 2) sc_launcher_sibling(argv[2], self, sc);
  } else if (strcmp(sc, "stale_kill") == 0) {
    /* regression for red-team D5: rank 0 killed during the rendezvous leaves its segment and
     * token file; the next job of the user reclaims them */
    int rfd = start_ranks(g_run_id, 0, 1, 2, rk_join_forever, NULL, pids);
    /* wait (poll, bounded) until the segment exists with its creator recorded */
    char seg[300] = "";
    double t0 = acc__now();
    while (!seg[0] && acc__now() - t0 < 20.0 * k) {
      DIR *d = opendir("/dev/shm");
      struct dirent *e;
      while (d && (e = readdir(d))) {
        if (!strstr(e->d_name, g_run_id)) continue;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        int fd = open(path, O_RDONLY);
        acc__shm_header h;
        if (fd >= 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
            h.magic == ACC_SHM_MAGIC && h.creator_pid == pids[0])
          snprintf(seg, sizeof seg, "%s", path);
        if (fd >= 0) close(fd);
      }
      if (d) closedir(d);
      if (!seg[0]) usleep(1000);
    }
    CHECK(seg[0] != 0, "%s: rank 0 never created its segment", sc);
    kill(pids[0], SIGKILL);
    collect(rfd, reps, 2, pids, 1);
    CHECK(WIFSIGNALED(pids[0]), "%s: rank 0 was not killed", sc);
    CHECK(leftovers(g_run_id, rdir) == 2, "%s: expected the segment and the token file left by "
          "the killed rank 0, found %d entries", sc, leftovers(g_run_id, rdir));
    /* the next job (another run id) reclaims them */
    char next[80];
    snprintf(next, sizeof next, "%s-next", g_run_id);
    rfd = start_ranks(next, 0, 2, 2, rk_ok, NULL, pids);
    collect(rfd, reps, 2, pids, 2);
    for (int r = 0; r < 2; r++) expect(&reps[r], ACC_OK, NULL, sc);
    CHECK(leftovers(g_run_id, rdir) == 0, "%s: %d entries of the killed job are still there", sc,
          leftovers(g_run_id, rdir));
  } else if (strcmp(sc, "reg_kill") == 0) {
    /* red team 4, R4-4: a registered buffer's file left by a SIGKILL is reclaimed by the next
     * job, like the segment */
    int rfd = start_ranks(g_run_id, 0, 2, 2, rk_reg_stuck, NULL, pids);
    char reg[300] = "";
    double t0 = acc__now();
    while (!reg[0] && acc__now() - t0 < 20.0 * k) {
      DIR *d = opendir("/dev/shm");
      struct dirent *e;
      while (d && (e = readdir(d)))
        if (strstr(e->d_name, g_run_id) && strstr(e->d_name, "-a1-r0"))
          snprintf(reg, sizeof reg, "/dev/shm/%s", e->d_name);
      if (d) closedir(d);
      if (!reg[0]) usleep(1000);
    }
    CHECK(reg[0] != 0, "%s: rank 0 never created its registered buffer's file", sc);
    /* the file is complete once it has its size (the owner page is written before) */
    struct stat sb;
    while (reg[0] && acc__now() - t0 < 20.0 * k && (stat(reg, &sb) != 0 || sb.st_size < (1 << 20)))
      usleep(1000);
    kill(pids[0], SIGKILL);
    kill(pids[1], SIGKILL);
    collect(rfd, reps, 2, pids, 2);
    CHECK(access(reg, F_OK) == 0, "%s: the killed rank's file %s is not there", sc, reg);
    char next[80];
    snprintf(next, sizeof next, "%s-next", g_run_id);
    rfd = start_ranks(next, 0, 2, 2, rk_ok, NULL, pids);
    collect(rfd, reps, 2, pids, 2);
    for (int r = 0; r < 2; r++) expect(&reps[r], ACC_OK, NULL, sc);
    CHECK(access(reg, F_OK) != 0, "%s: %s was not reclaimed", sc, reg);
    CHECK(leftovers(g_run_id, rdir) == 0, "%s: %d entries of the killed job are still there", sc,
          leftovers(g_run_id, rdir));
  } else if (strcmp(sc, "exit_after_error") == 0) {
    /* a rank that exited on an error of its own is named with that error, not as a rank that
     * "died before arriving (killed, crashed, ...)" */
    int rfd = start_ranks(g_run_id, 0, 2, 2, rk_exit_after_error, NULL, pids);
    collect(rfd, reps, 2, pids, 2);
    expect(&reps[0], ACC_ERR_REMOTE, "rank 1 (pid ", sc);
    expect(&reps[0], ACC_ERR_REMOTE, "exited before arriving, after an error of its own: ", sc);
    CHECK(strstr(reps[0].msg, "died before arriving") == NULL, "%s: rank 0 says: %s", sc, reps[0].msg);
  } else if (strcmp(sc, "phase_bounds") == 0) {
    /* regression for red-team D8: the spin and yield tunables are bounded, and a death is seen
     * promptly even when both phases are at their maximum */
    const char *vars[2] = {"ACCELERATE_SHM_SPIN_US", "ACCELERATE_SHM_YIELD_US"};
    for (int i = 0; i < 2; i++) {
      const char *env[] = {vars[i], "100000000", NULL};
      int rfd = start_ranks(g_run_id, 0, 1, 2, rk_create_only, env, pids);
      collect(rfd, reps, 2, pids, 1);
      char want[128];
      snprintf(want, sizeof want, "%s=100000000 is out of range: expected 0..1000000", vars[i]);
      expect(&reps[0], ACC_ERR_INVALID_ARGUMENT, want, sc);
    }
    const char *env[] = {vars[0], "1000000", vars[1], "1000000", NULL};
    int rfd = start_ranks(g_run_id, 0, 2, 2, rk_kill_in_loop, env, pids);
    collect(rfd, reps, 2, pids, 2);
    expect(&reps[0], ACC_ERR_REMOTE, "rank 1 (pid ", sc);
    expect(&reps[0], ACC_ERR_REMOTE, "died before arriving", sc);
    /* without checks inside the spin and yield phases this takes more than 2 s */
    CHECK(reps[0].elapsed < 0.9 * k, "%s: rank 0 needed %.2f s to notice the death", sc,
          reps[0].elapsed);
    CHECK(leftovers(g_run_id, rdir) == 0, "%s: a segment or token file was left behind", sc);
  } else {
    fprintf(stderr, "usage: test_rdzv dead_before_join|dead_rank0_before_join|stale_kill|"
                    "phase_bounds|launcher_sibling <accelerate cli>\n");
    return 2;
  }
  if (getenv("ACC_TEST_VERBOSE"))
    for (int r = 0; r < 2; r++)
      fprintf(stderr, "rank %d: %s (%.3f s)\n", r, reps[r].msg, reps[r].elapsed);
  return acc_test_finish(sc);
}
