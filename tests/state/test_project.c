/* save_state / load_state with a project configuration, at 1 and 2 processes: automatic naming,
 * total_limit pruning by number across 12 saves, the counter after load_state (the next save
 * does not collide), "load latest" skipping incomplete checkpoints, clear errors for an
 * incomplete or temporary directory named explicitly, for a different number of processes and
 * for different registered objects, and a failure on one process making every process fail.
 * Usage: test_state_project <dir> */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt/ckpt_dir.h"

#define N 6

typedef struct setup {
  acc_accelerator *acc;
  acc_model *m;
  acc_optimizer *opt;
  float w[N], g[N];
} setup;

static int rank, nprocs;
static char base[900];

static void make(setup *s, int automatic, int total_limit, long iteration) {
  memset(s, 0, sizeof *s);
  REQUIRE_OK(acc_accelerator_create(&s->acc, NULL));
  rank = acc_state_process_index(acc_accelerator_state(s->acc));
  nprocs = acc_state_num_processes(acc_accelerator_state(s->acc));
  acc_test_rank = rank;
  REQUIRE_OK(acc_model_create(&s->m));
  int64_t shape[1] = {N};
  REQUIRE_OK(acc_model_add_parameter(s->m, "w", s->w, s->g, 1, shape));
  REQUIRE_OK(acc_accelerator_prepare_model(s->acc, s->m));
  REQUIRE_OK(acc_optimizer_create_sgd(&s->opt, s->m, NULL));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(s->acc, s->opt));
  if (automatic >= 0) {
    acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
    po.project_dir = base;
    po.automatic_checkpoint_naming = automatic;
    po.total_limit = total_limit;
    po.iteration = iteration;
    REQUIRE_OK(acc_accelerator_set_project_config(s->acc, &po));
  }
}

static void destroy(setup *s) {
  acc_optimizer_destroy(s->opt);
  acc_model_destroy(s->m);
  acc_accelerator_destroy(s->acc);
}

/* The checkpoint numbers present under base/checkpoints (complete or not), as a bit set. */
static uint64_t present(int *tmp_dirs) {
  char dir[1000];
  snprintf(dir, sizeof dir, "%s/checkpoints", base);
  uint64_t bits = 0;
  *tmp_dirs = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int k;
    char rest[64] = "";
    if (sscanf(e->d_name, "checkpoint_%d%63s", &k, rest) >= 1) {
      if (rest[0]) (*tmp_dirs)++;
      else if (k >= 0 && k < 64) bits |= 1ull << k;
    }
  }
  closedir(d);
  return bits;
}

static int fail_save;
static acc_result obj_save(void *obj, void *buf, size_t cap, size_t *len) {
  (void)obj;
  if (fail_save && rank == 0) return acc__error(ACC_ERR_IO, "obj_save: disk full (simulated)");
  *len = 3;
  if (buf && cap >= 3) memcpy(buf, "abc", 3);
  return ACC_OK;
}
static acc_result obj_load(void *obj, const void *data, size_t len) {
  (void)obj;
  (void)data;
  return len == 3 ? ACC_OK : ACC_ERR_FORMAT;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  setup s;
  make(&s, -1, 0, 0);
  snprintf(base, sizeof base, "%s_np%d", argv[1], nprocs);
  if (rank == 0) REQUIRE_OK(acc__rmtree(base));
  REQUIRE_OK(acc_barrier(acc_accelerator_state(s.acc)));

  /* No project configuration: a directory is needed. */
  CHECK_ERR(acc_accelerator_load_state(s.acc, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "automatic checkpoint naming is off");
  CHECK_ERR(acc_accelerator_register_for_checkpointing(s.acc, &s, obj_save, NULL), ACC_ERR_INVALID_ARGUMENT,
            "both a save and a load callback");
  destroy(&s);

  /* 12 saves with total_limit 3: checkpoints 9, 10, 11 remain (pruned by number, not string). */
  make(&s, 1, 3, 0);
  for (int i = 0; i < 12; i++) {
    for (int k = 0; k < N; k++) s.w[k] = (float)i + 0.5f * (float)k;
    char *saved = NULL;
    CHECK_OK(acc_accelerator_save_state(s.acc, NULL, &saved));
    char want[1000];
    snprintf(want, sizeof want, "%s/checkpoints/checkpoint_%d", base, i);
    CHECK(saved && strcmp(saved, want) == 0, "save %d went to %s", i, saved ? saved : "(null)");
    acc_free(saved);
    CHECK(acc_project_config_iteration(acc_accelerator_project_config(s.acc)) == i + 1, "iteration after save %d", i);
  }
  int tmp = 0;
  uint64_t bits = present(&tmp);
  CHECK(bits == ((1ull << 9) | (1ull << 10) | (1ull << 11)) && tmp == 0, "checkpoints left: %#llx (+%d temporary)",
        (unsigned long long)bits, tmp);
  destroy(&s);

  /* A fresh accelerator at iteration 0: load latest = checkpoint_11, the counter continues at 12. */
  make(&s, 1, 3, 0);
  char *loaded = NULL;
  CHECK_OK(acc_accelerator_load_state(s.acc, NULL, &loaded));
  CHECK(loaded && strstr(loaded, "/checkpoints/checkpoint_11") != NULL, "loaded %s", loaded ? loaded : "(null)");
  acc_free(loaded);
  CHECK(s.w[0] == 11.0f && s.w[5] == 13.5f, "weights of checkpoint 11: %g %g", (double)s.w[0], (double)s.w[5]);
  CHECK(acc_project_config_iteration(acc_accelerator_project_config(s.acc)) == 12, "iteration %ld after load",
        acc_project_config_iteration(acc_accelerator_project_config(s.acc)));
  s.w[0] = 12.0f;
  CHECK_OK(acc_accelerator_save_state(s.acc, NULL, NULL));
  bits = present(&tmp);
  CHECK(bits == ((1ull << 10) | (1ull << 11) | (1ull << 12)), "after save 12: %#llx", (unsigned long long)bits);

  /* Incomplete checkpoints: ignored by "latest", rejected by name. */
  char inc[1000], tmpd[1000], cj[1000];
  snprintf(inc, sizeof inc, "%s/checkpoints/checkpoint_50", base);
  snprintf(tmpd, sizeof tmpd, "%s/checkpoints/checkpoint_51.tmp-writing", base);
  REQUIRE_OK(acc_barrier(acc_accelerator_state(s.acc))); /* every process has listed */
  if (rank == 0) {
    REQUIRE_OK(acc__mkdirs(inc));
    REQUIRE_OK(acc__mkdirs(tmpd));
  }
  REQUIRE_OK(acc_barrier(acc_accelerator_state(s.acc)));
  CHECK_OK(acc_accelerator_load_state(s.acc, NULL, &loaded));
  CHECK(loaded && strstr(loaded, "checkpoint_12") != NULL, "latest complete is 12: %s", loaded ? loaded : "(null)");
  acc_free(loaded);
  CHECK(s.w[0] == 12.0f, "weights of checkpoint 12");
  CHECK_ERR(acc_accelerator_load_state(s.acc, inc, NULL), ACC_ERR_INVALID_USAGE, "is incomplete");
  CHECK_ERR(acc_accelerator_load_state(s.acc, tmpd, NULL), ACC_ERR_INVALID_USAGE, "temporary directory");
  CHECK_ERR(acc_accelerator_load_state(s.acc, "/nonexistent/ckpt", NULL), ACC_ERR_INVALID_ARGUMENT, "does not exist");

  /* A checkpoint saved by another number of processes: strict, a clear error, saved vs current. */
  snprintf(cj, sizeof cj, "%s/checkpoints/checkpoint_12/checkpoint.json", base);
  if (rank == 0) {
    FILE *f = fopen(cj, "rb");
    char text[2048] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    char from[64], to[64], out[2100];
    snprintf(from, sizeof from, "\"num_processes\": %d", nprocs);
    snprintf(to, sizeof to, "\"num_processes\": %d", nprocs + 3);
    char *at = strstr(text, from);
    CHECK(at != NULL, "checkpoint.json holds %s", from);
    if (at) {
      snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
      REQUIRE_OK(acc__write_file_atomic(cj, out, strlen(out)));
    }
  }
  REQUIRE_OK(acc_barrier(acc_accelerator_state(s.acc)));
  char want[200];
  snprintf(want, sizeof want, "saved by %d processes but %d", nprocs + 3, nprocs);
  /* refused with a strict process count (Accelerate's behaviour), resumed by default (fewer
   * processes than saved: each keeps its own random state, the others are dropped) */
  CHECK_OK(acc_accelerator_set_strict_process_count(s.acc, 1));
  CHECK_ERR(acc_accelerator_load_state(s.acc, NULL, NULL), ACC_ERR_MISMATCH, want);
  CHECK_OK(acc_accelerator_set_strict_process_count(s.acc, 0));
  CHECK_OK(acc_accelerator_load_state(s.acc, NULL, NULL));

  /* A registered object the checkpoint does not hold. */
  int obj = 0;
  CHECK_OK(acc_accelerator_register_for_checkpointing(s.acc, &obj, obj_save, obj_load));
  snprintf(inc, sizeof inc, "%s/checkpoints/checkpoint_11", base);
  CHECK_ERR(acc_accelerator_load_state(s.acc, inc, NULL), ACC_ERR_MISMATCH, "registered objects: 1");

  /* A save that fails on process 0 fails on every process and commits nothing. */
  fail_save = 1;
  long it = acc_project_config_iteration(acc_accelerator_project_config(s.acc));
  acc_result rc = acc_accelerator_save_state(s.acc, NULL, NULL);
  CHECK(rc == ACC_ERR_IO && strstr(acc_last_error(), "disk full (simulated)"), "every process reports process 0's "
        "error: %s (%s)", acc_result_string(rc), acc_last_error());
  CHECK(acc_project_config_iteration(acc_accelerator_project_config(s.acc)) == it, "iteration unchanged");
  REQUIRE_OK(acc_barrier(acc_accelerator_state(s.acc)));
  bits = present(&tmp);
  CHECK(bits == ((1ull << 10) | (1ull << 11) | (1ull << 12) | (1ull << 50)) && tmp == 1,
        "failed save left %#llx (+%d temporary: only the planted one)", (unsigned long long)bits, tmp);
  fail_save = 0;
  REQUIRE_OK(acc_barrier(acc_accelerator_state(s.acc))); /* every process has listed */
  CHECK_OK(acc_accelerator_save_state(s.acc, NULL, NULL)); /* then works: checkpoint_13 */
  CHECK_OK(acc_accelerator_load_state(s.acc, NULL, &loaded));
  CHECK(loaded && strstr(loaded, "checkpoint_13") != NULL, "loaded %s", loaded ? loaded : "(null)");
  acc_free(loaded);
  destroy(&s);

  /* Explicit directories without automatic naming; saving over a complete one is refused. */
  make(&s, 0, 0, 0);
  char ex[1000];
  snprintf(ex, sizeof ex, "%s/explicit", base);
  s.w[2] = 42.0f;
  CHECK_OK(acc_accelerator_save_state(s.acc, ex, NULL));
  CHECK(acc_checkpoint_is_complete(ex), "explicit checkpoint complete");
  CHECK_ERR(acc_accelerator_save_state(s.acc, ex, NULL), ACC_ERR_INVALID_USAGE, "already exists");
  s.w[2] = 0.0f;
  CHECK_OK(acc_accelerator_load_state(s.acc, ex, NULL));
  CHECK(s.w[2] == 42.0f, "explicit checkpoint loaded");
  destroy(&s);
  return acc_test_finish("state_project");
}
