/* Regression for red-team D1: a second local user can neither hijack nor block the
 * shared-memory rendezvous. Needs root (it creates two users with useradd -M and removes them
 * at the end); exits 77 (skipped) otherwise. The victim's ranks are forked here and run as the
 * victim user with the environment `accelerate launch` sets; the attacker runs shm_attacker
 * (tests/rdzv/shm_attacker.c) as the attacker user.
 * Usage: test_rdzv_users <path of shm_attacker> */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "core/internal.h"

typedef struct report {
  int rank;
  int rc;
  float sum;
  char msg[1500];
} report;

static char g_victim[32], g_attacker[32];
static char g_copy[64]; /* the directory of the attacker program's copy, removed at exit */
static uid_t g_vuid, g_auid;
static gid_t g_vgid, g_agid;
static int g_users_made;
static char g_xdg[64];

static double slack(void) {
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  double v = m ? atof(m) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

static void rm_dir_of(uid_t uid) {
  char p[64];
  snprintf(p, sizeof p, "/tmp/accelerate-%u", (unsigned)uid);
  rmdir(p);
}

static void cleanup(void) {
  if (!g_users_made) return;
  rm_dir_of(g_vuid);
  rm_dir_of(g_auid);
  if (g_xdg[0]) rmdir(g_xdg);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "userdel %s >/dev/null 2>&1", g_victim);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove user %s\n", g_victim);
  snprintf(cmd, sizeof cmd, "userdel %s >/dev/null 2>&1", g_attacker);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove user %s\n", g_attacker);
  if (g_copy[0]) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_copy);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_copy);
  }
  g_users_made = 0;
}

static void on_fatal(int sig) {
  cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

static int make_user(const char *name, uid_t *uid, gid_t *gid) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "useradd -M -N -s /usr/sbin/nologin %s >/dev/null 2>&1", name);
  if (system(cmd) != 0) return -1;
  struct passwd *pw = getpwnam(name);
  if (!pw) return -1;
  *uid = pw->pw_uid;
  *gid = pw->pw_gid;
  return 0;
}

/* In a child: become uid/gid for good. */
static void become(uid_t uid, gid_t gid) {
  if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(120);
  setenv("HOME", "/nonexistent", 1);
}

/* Runs the victim's world of 2 (as the victim user) with the extra environment; returns
 * reports in reps[0..1]. Each rank: acc_state_create, then all_reduce of 1.0. */
static void run_victim(const char *run_id, const char *const *env, report *reps) {
  int fds[2];
  if (pipe(fds) != 0) return;
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pid_t p = fork();
    if (p == 0) {
      close(fds[0]);
      become(g_vuid, g_vgid);
      alarm((unsigned)(30 * slack()));
      char b[16];
      setenv("ACCELERATE_RUN_ID", run_id, 1);
      snprintf(b, sizeof b, "%d", r);
      setenv("RANK", b, 1);
      setenv("LOCAL_RANK", b, 1);
      setenv("WORLD_SIZE", "2", 1);
      setenv("LOCAL_WORLD_SIZE", "2", 1);
      setenv("ACCELERATE_TIMEOUT", "10", 1);
      unsetenv("ACCELERATE_RENDEZVOUS_TOKEN");
      unsetenv("ACCELERATE_LAUNCHER_STATUS_FD");
      unsetenv("XDG_RUNTIME_DIR");
      for (int i = 0; env && env[i]; i += 2) setenv(env[i], env[i + 1], 1);
      report rep;
      memset(&rep, 0, sizeof rep);
      rep.rank = r;
      acc_state *st = NULL;
      float x = 1.0f;
      acc_result rc = acc_state_create(&st, NULL);
      if (rc == ACC_OK) rc = acc_all_reduce(st, &x, &x, 1, ACC_F32, ACC_SUM);
      rep.rc = rc;
      rep.sum = x;
      snprintf(rep.msg, sizeof rep.msg, "%s", rc == ACC_OK ? "" : acc_last_error());
      if (write(fds[1], &rep, sizeof rep) != (ssize_t)sizeof rep) _exit(3);
      acc_state_destroy(st);
      _exit(0);
    }
    pids[r] = p;
  }
  close(fds[1]);
  reps[0].rank = reps[1].rank = -1;
  report rep;
  while (read(fds[0], &rep, sizeof rep) == (ssize_t)sizeof rep)
    if (rep.rank == 0 || rep.rank == 1) reps[rep.rank] = rep;
  close(fds[0]);
  for (int r = 0; r < 2; r++) waitpid(pids[r], NULL, 0);
  if (getenv("ACC_TEST_VERBOSE"))
    for (int r = 0; r < 2; r++)
      fprintf(stderr, "%s rank %d: sum %g %s\n", run_id, r, reps[r].sum, reps[r].msg);
}

typedef struct attacker {
  pid_t pid;
  int out; /* its stdout */
} attacker;

/* Starts shm_attacker as the attacker user on name; waits for its "ready". */
static int start_attacker(const char *prog, const char *name, attacker *a) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t p = fork();
  if (p == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    become(g_auid, g_agid);
    execl(prog, prog, name, "20", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  a->pid = p;
  a->out = fds[0];
  char buf[16] = "";
  ssize_t n = read(fds[0], buf, 6);
  return n == 6 && strncmp(buf, "ready\n", 6) == 0 ? 0 : -1;
}

/* Stops the attacker; returns 1 when it received any of the victim's data. */
static int stop_attacker(attacker *a) {
  kill(a->pid, SIGKILL);
  waitpid(a->pid, NULL, 0);
  char buf[4096];
  size_t len = 0;
  ssize_t n;
  while (len + 1 < sizeof buf && (n = read(a->out, buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)n;
  buf[len] = '\0';
  close(a->out);
  if (len && getenv("ACC_TEST_VERBOSE")) fprintf(stderr, "attacker output: %s", buf);
  return strstr(buf, "victim rank 1 sent") != NULL;
}

static int has_program(const char *name) {
  const char *dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
  for (size_t i = 0; i < 4; i++) {
    char p[64];
    snprintf(p, sizeof p, "%s/%s", dirs[i], name);
    if (access(p, X_OK) == 0) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_rdzv_users <shm_attacker>\n");
    return 2;
  }
  if (geteuid() != 0) {
    printf("SKIP: needs root to create the victim and attacker users (running as uid %u)\n",
           (unsigned)geteuid());
    return 77;
  }
  if (!has_program("useradd") || !has_program("userdel")) {
    printf("SKIP: useradd/userdel not found\n");
    return 77;
  }
  snprintf(g_victim, sizeof g_victim, "accv%ld", (long)getpid());
  snprintf(g_attacker, sizeof g_attacker, "acca%ld", (long)getpid());
  if (make_user(g_victim, &g_vuid, &g_vgid) != 0) {
    printf("SKIP: useradd %s failed\n", g_victim);
    return 77;
  }
  g_users_made = 1;
  atexit(cleanup);
  signal(SIGTERM, on_fatal);
  signal(SIGINT, on_fatal);
  signal(SIGALRM, on_fatal);
  alarm((unsigned)(50 * slack()));
  if (make_user(g_attacker, &g_auid, &g_agid) != 0) {
    fprintf(stderr, "FAIL: useradd %s failed\n", g_attacker);
    return 1;
  }
  /* The attacker user must be able to execute its program: the build directory may not be
   * reachable by other users (a root build in /root, mode 0700), so run a copy from a fresh
   * directory under /tmp that everyone can traverse. */
  static char copydir[64] = "/tmp/acc_rdzv_users_XXXXXX", prog[128];
  if (!mkdtemp(copydir) || chmod(copydir, 0755) != 0) {
    printf("SKIP: cannot create a directory for the attacker program under /tmp\n");
    return 77;
  }
  snprintf(prog, sizeof prog, "%s/shm_attacker", copydir);
  char cp[4400];
  snprintf(cp, sizeof cp, "cp '%s' '%s' && chmod 0755 '%s'", argv[1], prog, prog);
  if (strlen(argv[1]) > 4000 || system(cp) != 0) {
    printf("SKIP: cannot copy %s to %s for the attacker user\n", argv[1], prog);
    return 77;
  }
  snprintf(g_copy, sizeof g_copy, "%s", copydir);
  report reps[2];
  attacker att;
  char run_id[64], name[256];

  /* 1. The attacker pre-creates the name of the earlier scheme, "/acc-<job id>", which anyone
   *    can derive (Slurm/torchrun/mpirun ids and the parent pid are public): with the random
   *    token in the name, the job neither fails nor talks to the attacker. */
  snprintf(run_id, sizeof run_id, "usr%ld-a", (long)getpid());
  snprintf(name, sizeof name, "/acc-accelerate-%s-x-%ld", run_id, (long)getpid());
  REQUIRE_OK(start_attacker(prog, name, &att) == 0 ? ACC_OK : ACC_ERR_SYSTEM);
  run_victim(run_id, NULL, reps);
  CHECK(!stop_attacker(&att), "predictable name: the attacker received the victim's data");
  for (int r = 0; r < 2; r++) {
    CHECK(reps[r].rank == r, "predictable name: rank %d sent no report", r);
    CHECK(reps[r].rc == ACC_OK && reps[r].sum == 2.0f,
          "predictable name: rank %d: %s, sum %g (want OK and 2): %s", r,
          acc_result_string((acc_result)reps[r].rc), reps[r].sum, reps[r].msg);
  }
  shm_unlink(name);

  /* 2. Even with the exact name (as if it had leaked: the token is exported here), a segment
   *    that another user created with mode 0666 is refused before it is mapped. */
  static const char token[] = "feedfacefeedfacefeedfacefeedface";
  snprintf(run_id, sizeof run_id, "usr%ld-b", (long)getpid());
  snprintf(name, sizeof name, "/acc-accelerate-%s-x-%ld-%s", run_id, (long)getpid(), token);
  REQUIRE_OK(start_attacker(prog, name, &att) == 0 ? ACC_OK : ACC_ERR_SYSTEM);
  const char *env_tok[] = {"ACCELERATE_RENDEZVOUS_TOKEN", token, NULL};
  run_victim(run_id, env_tok, reps);
  CHECK(!stop_attacker(&att), "known name: the attacker received the victim's data");
  char want[160];
  CHECK(reps[1].rank == 1 && reps[1].rc == ACC_ERR_SYSTEM &&
            strstr(reps[1].msg, "refusing the shared-memory segment") &&
            strstr(reps[1].msg, "mode 0666"),
        "known name: rank 1 should refuse the attacker's segment: %s (sum %g)", reps[1].msg,
        reps[1].sum);
  snprintf(want, sizeof want, "belongs to uid %u", (unsigned)g_auid);
  CHECK(reps[0].rank == 0 && reps[0].rc == ACC_ERR_SYSTEM && strstr(reps[0].msg, want),
        "known name: rank 0 should name the owner (%s): %s", want, reps[0].msg);
  shm_unlink(name);

  /* 3. The attacker squats the victim's fallback runtime directory /tmp/accelerate-<uid>: a
   *    clear error (never a directory of another user), and XDG_RUNTIME_DIR is the remedy. */
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/accelerate-%u", (unsigned)g_vuid);
  rmdir(dir);
  REQUIRE_OK(mkdir(dir, 0777) == 0 && chown(dir, g_auid, g_agid) == 0 && chmod(dir, 0777) == 0
                 ? ACC_OK
                 : ACC_ERR_SYSTEM);
  snprintf(run_id, sizeof run_id, "usr%ld-c", (long)getpid());
  run_victim(run_id, NULL, reps);
  snprintf(want, sizeof want, "%s is owned by uid %u", dir, (unsigned)g_auid);
  for (int r = 0; r < 2; r++)
    CHECK(reps[r].rc == ACC_ERR_SYSTEM && strstr(reps[r].msg, want) &&
              strstr(reps[r].msg, "XDG_RUNTIME_DIR"),
          "squatted directory: rank %d: %s", r, reps[r].msg);
  snprintf(g_xdg, sizeof g_xdg, "/tmp/acc-xdg-%ld", (long)getpid());
  REQUIRE_OK(mkdir(g_xdg, 0700) == 0 && chown(g_xdg, g_vuid, g_vgid) == 0 ? ACC_OK
                                                                          : ACC_ERR_SYSTEM);
  const char *env_xdg[] = {"XDG_RUNTIME_DIR", g_xdg, NULL};
  snprintf(run_id, sizeof run_id, "usr%ld-d", (long)getpid());
  run_victim(run_id, env_xdg, reps);
  for (int r = 0; r < 2; r++)
    CHECK(reps[r].rc == ACC_OK && reps[r].sum == 2.0f, "with XDG_RUNTIME_DIR: rank %d: %s", r,
          reps[r].msg);
  rmdir(dir);
  return acc_test_finish("rdzv_users");
}
