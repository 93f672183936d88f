/* Crash safety of save_state: children save training states in a loop (automatic naming,
 * total_limit 2) and SIGKILL themselves at a random durable step of save_state (every file
 * write, fsync/rename, commit and pruning step reports through the progress hook; the step
 * number comes from a seeded generator). Each next child first checks the surviving state:
 * load_state() of the latest checkpoint must succeed and hold exactly the values saved under
 * that number (weights, optimizer lr, RNG), the counter must continue after it, and every
 * incomplete directory must be rejected by name with a clear error. No sleeps: a child dies at
 * a chosen step, the parent waits for it.
 * With a launcher, the same at 2 processes: either process is killed (the launcher then stops
 * the other), and every next run checks the surviving checkpoint on both processes.
 * Usage: test_state_kill <dir> [trials] [seed] [accelerate-cli] */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt/ckpt_dir.h"

#define N 4096
#define SAVES_PER_CHILD 3

static long kill_at, events;
static int kill_rank, my_rank;

static void hook(const char *phase) {
  (void)phase;
  if (my_rank == kill_rank && ++events == kill_at) raise(SIGKILL);
}

static const char *fail_file; /* multi-process children report verification failures here */

static float w[N], g[N];

/* The values a checkpoint numbered k holds. */
static void fill(long k, acc_optimizer *opt) {
  for (int i = 0; i < N; i++) w[i] = (float)k + (float)i * 0.001f;
  acc_optimizer_set_lr(opt, 0.5 + (double)k);
  acc_set_seed((uint64_t)k);
}

#define FAILX(code, ...)                          \
  do {                                            \
    fprintf(stderr, __VA_ARGS__);                 \
    fprintf(stderr, "\n");                        \
    FILE *ff_ = fail_file ? fopen(fail_file, "a") : NULL; \
    if (ff_) {                                    \
      fprintf(ff_, __VA_ARGS__);                  \
      fclose(ff_);                                \
    }                                             \
    _exit(code);                                  \
  } while (0)

/* Returns 0 after verifying the latest checkpoint and saving SAVES_PER_CHILD more (unless killed). */
static int child(const char *dir, int verify_only) {
  acc_accelerator *acc;
  acc_model *m;
  acc_optimizer *opt;
  if (acc_accelerator_create(&acc, NULL) || acc_model_create(&m)) FAILX(5, "setup: %s", acc_last_error());
  my_rank = acc_state_process_index(acc_accelerator_state(acc));
  int64_t shape[1] = {N};
  if (acc_model_add_parameter(m, "w", w, g, 1, shape) || acc_accelerator_prepare_model(acc, m) ||
      acc_optimizer_create_adamw(&opt, m, NULL) || acc_accelerator_prepare_optimizer(acc, opt))
    FAILX(5, "setup: %s", acc_last_error());
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = dir;
  po.automatic_checkpoint_naming = 1;
  po.total_limit = 2;
  if (acc_accelerator_set_project_config(acc, &po)) FAILX(5, "project: %s", acc_last_error());
  acc_project_config *p = acc_accelerator_project_config(acc);

  char *latest = NULL;
  if (acc_project_latest_checkpoint(p, &latest) == ACC_OK) {
    char *loaded = NULL;
    if (acc_accelerator_load_state(acc, NULL, &loaded) != ACC_OK)
      FAILX(4, "the latest checkpoint %s does not load: %s", latest, acc_last_error());
    const char *num = strrchr(loaded, '_');
    long k = num ? atol(num + 1) : -1;
    if (strcmp(loaded, latest) != 0) FAILX(4, "loaded %s, latest is %s", loaded, latest);
    for (int i = 0; i < N; i++)
      if (w[i] != (float)k + (float)i * 0.001f) FAILX(4, "%s: w[%d] = %g, saved %g", loaded, i, (double)w[i],
                                                     (double)((float)k + (float)i * 0.001f));
    if (acc_optimizer_get_lr(opt) != 0.5 + (double)k) FAILX(4, "%s: lr %g", loaded, acc_optimizer_get_lr(opt));
    acc_rng r;
    acc_rng_seed(&r, (uint64_t)k);
    if (acc_rng_u64(acc_rng_global()) != acc_rng_u64(&r)) FAILX(4, "%s: RNG state differs", loaded);
    if (acc_project_config_iteration(p) != k + 1)
      FAILX(4, "after loading %s the iteration is %ld", loaded, acc_project_config_iteration(p));
    acc_free(loaded);
    acc_free(latest);
  }
  /* Every directory that is not a complete checkpoint is rejected by name. The barriers make
   * every process list the same directory contents (no save is running meanwhile). */
  if (acc_barrier(acc_accelerator_state(acc))) FAILX(5, "barrier: %s", acc_last_error());
  char base[1100];
  snprintf(base, sizeof base, "%s/checkpoints", dir);
  DIR *d = opendir(base);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", base, e->d_name);
    if (acc_checkpoint_is_complete(path)) continue;
    acc_result rc = acc_accelerator_load_state(acc, path, NULL);
    if (rc != ACC_ERR_INVALID_USAGE || (!strstr(acc_last_error(), "incomplete") && !strstr(acc_last_error(), "temporary")))
      FAILX(4, "incomplete %s: %s (%s)", path, acc_result_string(rc), acc_last_error());
  }
  if (d) closedir(d);
  if (acc_barrier(acc_accelerator_state(acc))) FAILX(5, "barrier: %s", acc_last_error());
  acc__fs_progress_hook = hook;
  for (int s = 0; s < (verify_only ? 0 : SAVES_PER_CHILD); s++) {
    fill(acc_project_config_iteration(p), opt);
    if (acc_accelerator_save_state(acc, NULL, NULL) != ACC_OK) FAILX(5, "save: %s", acc_last_error());
  }
  acc__fs_progress_hook = NULL;
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
  return 0;
}

static int run_child(const char *dir, long at, int verify_only) {
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    kill_at = at;
    _exit(child(dir, verify_only));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGKILL ? 100 : -WTERMSIG(status);
  return WEXITSTATUS(status);
}

/* Multi-process trials: `accelerate launch --num_processes 2 <this> --child DIR AT RANK VERIFY`
 * kills process RANK at its AT-th durable step; the launcher then stops the other one. */
static int run_launched(const char *launcher, const char *self, const char *dir, long at, int rank, int verify) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' launch --num_processes 2 '%s' --child '%s' %ld %d %d >/dev/null 2>&1", launcher,
           self, dir, at, rank, verify);
  fflush(stderr);
  return system(cmd);
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--child") == 0) {
    char ff[1200];
    snprintf(ff, sizeof ff, "%s.failed", argv[2]);
    fail_file = ff;
    kill_at = atol(argv[3]);
    kill_rank = atoi(argv[4]);
    return child(argv[2], atoi(argv[5]));
  }
  if (argc < 2) return 2;
  const char *dir = argv[1];
  int trials = argc > 2 ? atoi(argv[2]) : 60;
  uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
  REQUIRE_OK(acc__rmtree(dir));
  acc_rng r;
  acc_rng_seed(&r, seed);
  int killed = 0, finished = 0;
  for (int t = 0; t < trials; t++) {
    long at = 1 + (long)acc_rng_bounded(&r, 25 * SAVES_PER_CHILD);
    int st = run_child(dir, at, 0);
    CHECK(st == 100 || st == 0, "trial %d (kill at step %ld): child status %d", t, at, st);
    if (st == 100) killed++;
    if (st == 0) finished++;
  }
  int st = run_child(dir, 0, 1);
  CHECK(st == 0, "final verification: status %d", st);
  CHECK(killed > trials / 2, "%d of %d children were killed during save_state", killed, trials);
  fprintf(stderr, "%d children killed mid-save, %d finished\n", killed, finished);

  /* 2 processes: either process killed at a random step of save_state. */
  if (argc > 4) {
    char dir2[1100], ff[1200];
    snprintf(dir2, sizeof dir2, "%s_np2", dir);
    snprintf(ff, sizeof ff, "%s.failed", dir2);
    REQUIRE_OK(acc__rmtree(dir2));
    remove(ff);
    int trials2 = trials / 3, nonzero = 0;
    for (int t = 0; t < trials2; t++) {
      int kr = (int)acc_rng_bounded(&r, 2);
      long at = 1 + (long)acc_rng_bounded(&r, kr == 0 ? 25 * SAVES_PER_CHILD : 3 * SAVES_PER_CHILD);
      if (run_launched(argv[4], argv[0], dir2, at, kr, 0) != 0) nonzero++;
      CHECK(!acc__is_file(ff), "2 processes, trial %d (process %d killed at step %ld): verification failed", t, kr, at);
    }
    CHECK(run_launched(argv[4], argv[0], dir2, 0, 0, 1) == 0 && !acc__is_file(ff), "2 processes: final verification");
    CHECK(nonzero > trials2 / 2, "%d of %d launches were killed", nonzero, trials2);
    fprintf(stderr, "2 processes: %d of %d launches killed mid-save\n", nonzero, trials2);
  }
  return acc_test_finish("state_kill");
}
