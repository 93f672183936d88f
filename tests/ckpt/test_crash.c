/* Crash safety: a child process saves checkpoints in a loop (automatic naming, total_limit 3,
 * sharded weights + a JSON file) and reports every durable step on a pipe; the parent SIGKILLs it
 * after a number of steps derived from a seed. After every kill, the latest complete checkpoint
 * must load and hold exactly the values of its number, every complete checkpoint must load, and
 * the next child resumes from it (next save = k + 1). No sleeps: the pipe is the only clock.
 * Usage: test_ckpt_crash [trials] [seed] */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt_util.h"

#define NUMEL (64 * 1024) /* 256 KiB of f32 per checkpoint, 4 shards */

static int progress_fd = -1;

static void hook(const char *phase) {
  (void)phase;
  char c = 'x';
  if (write(progress_fd, &c, 1) != 1) _exit(3);
}

static acc_project_config *open_project(const char *proj) {
  acc_project_options o = ACC_PROJECT_OPTIONS_INIT;
  o.project_dir = proj;
  o.automatic_checkpoint_naming = 1;
  o.total_limit = 3;
  acc_project_config *p;
  REQUIRE_OK(acc_project_config_create(&p, &o));
  return p;
}

/* Four parameters of NUMEL / 4 floats: with a shard limit of one parameter, four shards. */
static acc_result add_params(acc_model *m, float *w) {
  int64_t s[2] = {64, NUMEL / 4 / 64};
  const char *names[4] = {"w0", "w1", "w2", "w3"};
  for (int i = 0; i < 4; i++) ACC_CHECK(acc_model_add_parameter(m, names[i], w + i * (NUMEL / 4), NULL, 2, s));
  return ACC_OK;
}

/* Saves checkpoint number iteration with every value equal to it. */
static acc_result save_ckpt(acc_project_config *p, float *w) {
  long it = acc_project_config_iteration(p);
  for (size_t i = 0; i < NUMEL; i++) w[i] = (float)it;
  acc_model *m;
  ACC_CHECK(acc_model_create(&m));
  acc_checkpoint *c = NULL;
  acc_result rc = add_params(m, w);
  if (rc == ACC_OK) rc = acc_checkpoint_begin(p, NULL, &c);
  if (rc == ACC_OK) rc = acc_save_model(NULL, m, acc_checkpoint_dir(c), NUMEL * 4 / 4, ACC_F32);
  char path[1200], json[64];
  if (rc == ACC_OK) {
    snprintf(path, sizeof path, "%s/state.json", acc_checkpoint_dir(c));
    int n = snprintf(json, sizeof json, "{\"step\": %ld}\n", it);
    rc = acc__write_file_atomic(path, json, (size_t)n);
  }
  if (rc == ACC_OK)
    rc = acc_checkpoint_commit(c);
  else
    acc_checkpoint_abort(c);
  acc_model_destroy(m);
  return rc;
}

/* The child: resume from the latest checkpoint, then save until killed. */
static void child(const char *proj, int fd) {
  progress_fd = fd;
  acc_project_config *p = open_project(proj);
  char *latest = NULL;
  if (acc_project_latest_checkpoint(p, &latest) != ACC_OK) _exit(4);
  if (acc_project_checkpoint_loaded(p, latest) != ACC_OK) _exit(5);
  acc_free(latest);
  float *w = malloc(NUMEL * sizeof *w);
  acc__fs_progress_hook = hook;
  for (int i = 0; i < 1000; i++)
    if (save_ckpt(p, w) != ACC_OK) {
      fprintf(stderr, "child: %s\n", acc_last_error());
      _exit(6);
    }
  _exit(0);
}

/* Loads dir and checks every value equals expect. */
static int check_ckpt(const char *dir, long expect, float *w) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(add_params(m, w));
  memset(w, 0xff, NUMEL * sizeof *w);
  acc_result rc = acc_load_checkpoint_in_model(m, dir, NULL, NULL);
  CHECK(rc == ACC_OK, "complete checkpoint %s does not load: %s", dir, acc_last_error());
  int good = rc == ACC_OK;
  for (size_t i = 0; good && i < NUMEL; i++) good = w[i] == (float)expect;
  CHECK(good, "checkpoint %s does not hold the value %ld", dir, expect);
  char path[1200];
  snprintf(path, sizeof path, "%s/state.json", dir);
  char *json = ckpt_read_file(path, NULL);
  char want[64];
  snprintf(want, sizeof want, "{\"step\": %ld}\n", expect);
  CHECK(json && strcmp(json, want) == 0, "%s: state.json is %s", dir, json ? json : "(missing)");
  free(json);
  acc_model_destroy(m);
  return good;
}

static long number_of(const char *dir) {
  const char *s = strrchr(dir, '_');
  return s ? strtol(s + 1, NULL, 10) : -1;
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 30;
  unsigned long seed = argc > 2 ? strtoul(argv[2], NULL, 10) : 20240527ul;
  fprintf(stderr, "ckpt_crash: %d trials, seed %lu\n", trials, seed);
  char *root = ckpt_tmpdir("crash");
  float *w = malloc(NUMEL * sizeof *w);
  acc_project_config *p = open_project(root);
  REQUIRE_OK(save_ckpt(p, w)); /* checkpoint_0 */
  acc_project_config_destroy(p);
  long prev = 0;
  int incomplete_seen = 0;
  unsigned long x = seed;
  for (int t = 0; t < trials; t++) {
    x = x * 6364136223846793005ul + 1442695040888963407ul;
    int kill_after = 1 + (int)((x >> 33) % 40); /* a save is 8 steps: kills land in every phase */
    int fds[2];
    REQUIRE_OK(pipe(fds) == 0 ? ACC_OK : ACC_ERR_SYSTEM);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      child(root, fds[1]);
    }
    close(fds[1]);
    int got = 0;
    char buf;
    while (got < kill_after && read(fds[0], &buf, 1) == 1) got++;
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    close(fds[0]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "trial %d: child ended otherwise (status %d)", t, status);

    /* Latest must be complete and intact, and never go backwards. */
    p = open_project(root);
    char *latest = NULL;
    CHECK_OK(acc_project_latest_checkpoint(p, &latest));
    if (latest) {
      long k = number_of(latest);
      CHECK(k >= prev, "trial %d: latest went back from %ld to %ld", t, prev, k);
      check_ckpt(latest, k, w);
      prev = k;
      acc_free(latest);
    }
    /* Every complete checkpoint is intact; count the leftovers of the crash. */
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/checkpoints", root);
    for (long k = 0; k <= prev + 1; k++) {
      char d[1200], tmp[1300];
      snprintf(d, sizeof d, "%s/checkpoint_%ld", ck, k);
      snprintf(tmp, sizeof tmp, "%s%s", d, ACC__CKPT_TMP_SUFFIX);
      if (acc_checkpoint_is_complete(d)) {
        CHECK(k <= prev, "trial %d: checkpoint_%ld is complete but latest is %ld", t, k, prev);
        check_ckpt(d, k, w);
      } else if (acc__is_dir(d) || acc__is_dir(tmp)) {
        incomplete_seen++;
      }
    }
    acc_project_config_destroy(p);
  }
  fprintf(stderr, "ckpt_crash: %d trials left an incomplete checkpoint; last complete checkpoint_%ld\n",
          incomplete_seen, prev);
  CHECK(trials == 0 || incomplete_seen > 0, "no kill ever interrupted a save: the test did not test anything");
  CHECK(trials == 0 || prev > 0, "no checkpoint was ever completed by a child");
  free(w);
  acc__rmtree(root);
  free(root);
  return acc_test_finish("ckpt_crash");
}
