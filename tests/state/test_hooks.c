/* save_state / load_state pre-hooks at 1 and 2 processes: registration order, the arguments
 * (accelerator, directory being written or loaded, payload), a file a save hook writes ends up in
 * the checkpoint, a hook failing on one process fails the save / load on every process with an
 * error naming the hook (nothing committed, nothing loaded), removal by id (twice is a no-op,
 * an id never issued is an error), and no registration from inside a hook.
 * Usage: test_state_hooks <dir> */
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt/ckpt_dir.h"

#define N 4

static int rank, nprocs;
static acc_accelerator *the_acc;
static char log_buf[64];
static char last_dir[4096];
static int payload_ok = 1, acc_ok = 1;
static acc_result nested_rc = ACC_OK;

typedef struct hook_ctx {
  char tag;
  int fail_on_last; /* fail on the last process only */
  int set_message;
  int write_file;
  int try_register;
} hook_ctx;

static acc_result hook(acc_accelerator *acc, const char *dir, void *payload) {
  hook_ctx *h = payload;
  size_t n = strlen(log_buf);
  if (n + 1 < sizeof log_buf) {
    log_buf[n] = h->tag;
    log_buf[n + 1] = 0;
  }
  if (acc != the_acc) acc_ok = 0;
  if (!h || h->tag < 'A' || h->tag > 'Z') payload_ok = 0;
  snprintf(last_dir, sizeof last_dir, "%s", dir);
  if (h->try_register) nested_rc = acc_accelerator_register_save_state_pre_hook(acc, hook, h, "nested", NULL);
  if (h->write_file) {
    char path[4200];
    snprintf(path, sizeof path, "%s/hook_%d.txt", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f) return acc_error_set(ACC_ERR_IO, "hook: cannot write '%s'", path);
    fprintf(f, "written by the save hook of process %d\n", rank);
    fclose(f);
  }
  if (h->fail_on_last && rank == nprocs - 1) {
    if (h->set_message) return acc_error_set(ACC_ERR_IO, "hook broke (simulated)");
    return ACC_ERR_IO;
  }
  return ACC_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  the_acc = acc;
  acc_state *st = acc_accelerator_state(acc);
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  char base[1000];
  snprintf(base, sizeof base, "%s/np%d", argv[1], nprocs);
  if (rank == 0) {
    REQUIRE_OK(acc__rmtree(base));
    mkdir(argv[1], 0755);
    CHECK(mkdir(base, 0755) == 0, "mkdir %s", base);
  }
  REQUIRE_OK(acc_barrier(st));

  float w[N] = {1, 2, 3, 4}, g[N] = {0};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t shape[1] = {N};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, shape));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));

  hook_ctx a = {'A', 0, 0, 1, 0}, b = {'B', 0, 0, 0, 1}, l = {'L', 0, 0, 0, 0};
  hook_ctx f = {'F', 1, 1, 0, 0}, q = {'Q', 1, 0, 0, 0}, lf = {'M', 1, 1, 0, 0};
  uint64_t ida = 0, idb = 0, idl = 0, idf = 0, idq = 0, idlf = 0;
  CHECK_ERR(acc_accelerator_register_save_state_pre_hook(acc, NULL, &a, "x", &ida), ACC_ERR_INVALID_ARGUMENT,
            "hook function is NULL");
  CHECK_OK(acc_accelerator_register_save_state_pre_hook(acc, hook, &a, "first", &ida));
  CHECK_OK(acc_accelerator_register_load_state_pre_hook(acc, hook, &l, "loader", &idl));
  CHECK_OK(acc_accelerator_register_save_state_pre_hook(acc, hook, &b, "second", &idb));
  CHECK(ida == 1 && idl == 2 && idb == 3, "ids in registration order: %llu %llu %llu", (unsigned long long)ida,
        (unsigned long long)idl, (unsigned long long)idb);

  /* Order and arguments; the file the first hook writes is part of the checkpoint. */
  char d1[1100], *saved = NULL;
  snprintf(d1, sizeof d1, "%s/one", base);
  log_buf[0] = 0;
  CHECK_OK(acc_accelerator_save_state(acc, d1, &saved));
  CHECK(strcmp(log_buf, "AB") == 0, "save hooks in registration order, load hook not run: \"%s\"", log_buf);
  CHECK(acc_ok && payload_ok, "hooks got the accelerator and their payload");
  CHECK(strncmp(last_dir, d1, strlen(d1)) == 0, "hook dir '%s' is the checkpoint being written (%s)", last_dir, d1);
  CHECK(nested_rc == ACC_ERR_INVALID_USAGE,
        "registering from inside a hook is refused: %s", acc_result_name(nested_rc));
  CHECK(saved && strcmp(saved, d1) == 0 && acc_checkpoint_is_complete(d1), "saved to %s", saved ? saved : "(null)");
  acc_free(saved);
  REQUIRE_OK(acc_barrier(st));
  for (int r = 0; r < nprocs; r++) {
    char path[1200], line[128] = "";
    snprintf(path, sizeof path, "%s/hook_%d.txt", d1, r);
    FILE *fp = fopen(path, "r");
    CHECK(fp != NULL, "the file the hook of process %d wrote is in the checkpoint: %s", r, path);
    if (fp) {
      CHECK(fgets(line, sizeof line, fp) && strstr(line, "save hook of process"), "content: %s", line);
      fclose(fp);
    }
  }

  /* The load hook gets the checkpoint directory. */
  log_buf[0] = 0;
  last_dir[0] = 0;
  CHECK_OK(acc_accelerator_load_state(acc, d1, NULL));
  CHECK(strcmp(log_buf, "L") == 0, "only the load hook runs on load: \"%s\"", log_buf);
  CHECK(strcmp(last_dir, d1) == 0, "load hook dir '%s' (expected %s)", last_dir, d1);

  /* Removal: the removed hook no longer runs; twice is a no-op; unknown ids are errors. */
  CHECK_OK(acc_accelerator_remove_state_hook(acc, ida));
  CHECK_OK(acc_accelerator_remove_state_hook(acc, ida));
  CHECK_ERR(acc_accelerator_remove_state_hook(acc, 99), ACC_ERR_INVALID_ARGUMENT, "id 99");
  CHECK_ERR(acc_accelerator_remove_state_hook(acc, 0), ACC_ERR_INVALID_ARGUMENT, "id 0");
  b.try_register = 0;
  char d2[1100];
  snprintf(d2, sizeof d2, "%s/two", base);
  log_buf[0] = 0;
  CHECK_OK(acc_accelerator_save_state(acc, d2, NULL));
  CHECK(strcmp(log_buf, "B") == 0, "after removing 'first': \"%s\"", log_buf);

  /* A hook failing on the last process: every process fails, naming the hook; nothing saved. */
  CHECK_OK(acc_accelerator_register_save_state_pre_hook(acc, hook, &f, "failing", &idf));
  char d3[1100];
  snprintf(d3, sizeof d3, "%s/three", base);
  log_buf[0] = 0;
  acc_result rc = acc_accelerator_save_state(acc, d3, NULL);
  CHECK(rc == ACC_ERR_IO, "every process fails with the hook's code: %s (%s)", acc_result_name(rc), acc_last_error());
  CHECK(strstr(acc_last_error(), "save_state: pre-hook 'failing'") && strstr(acc_last_error(), "hook broke (simulated)"),
        "the message names the hook: %s", acc_last_error());
  CHECK(strcmp(log_buf, "BF") == 0, "hooks ran up to the failing one: \"%s\"", log_buf);
  REQUIRE_OK(acc_barrier(st));
  struct stat sb;
  CHECK(stat(d3, &sb) != 0 && !acc_checkpoint_is_complete(d3), "a failed save leaves no checkpoint at %s", d3);
  char d3tmp[1200];
  snprintf(d3tmp, sizeof d3tmp, "%s.tmp-writing", d3);
  CHECK(stat(d3tmp, &sb) != 0, "and no temporary directory %s", d3tmp);
  REQUIRE_OK(acc_barrier(st)); /* every process looked before the next save creates it again */
  CHECK_OK(acc_accelerator_remove_state_hook(acc, idf));

  /* A hook failing without a message is named by its id. */
  CHECK_OK(acc_accelerator_register_save_state_pre_hook(acc, hook, &q, NULL, &idq));
  char idname[64];
  snprintf(idname, sizeof idname, "pre-hook #%llu", (unsigned long long)idq);
  CHECK_ERR(acc_accelerator_save_state(acc, d3, NULL), ACC_ERR_IO, idname);
  CHECK_OK(acc_accelerator_remove_state_hook(acc, idq));
  REQUIRE_OK(acc_barrier(st));
  CHECK_OK(acc_accelerator_save_state(acc, d3, NULL)); /* the same directory now works */
  CHECK(acc_checkpoint_is_complete(d3), "saved once the failing hooks are removed");

  /* A failing load hook: every process fails and nothing is loaded. */
  CHECK_OK(acc_accelerator_register_load_state_pre_hook(acc, hook, &lf, "bad-loader", &idlf));
  w[0] = 99;
  log_buf[0] = 0;
  rc = acc_accelerator_load_state(acc, d1, NULL);
  CHECK(rc == ACC_ERR_IO && strstr(acc_last_error(), "load_state: pre-hook 'bad-loader'"),
        "load fails on every process naming the hook: %s (%s)", acc_result_name(rc), acc_last_error());
  CHECK(strcmp(log_buf, "LM") == 0, "load hooks in order: \"%s\"", log_buf);
  CHECK(w[0] == 99, "nothing was loaded (w[0] = %g)", (double)w[0]);
  CHECK_OK(acc_accelerator_remove_state_hook(acc, idlf));
  CHECK_OK(acc_accelerator_load_state(acc, d1, NULL));
  CHECK(w[0] == 1, "loaded after removing the failing hook (w[0] = %g)", (double)w[0]);

  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
  return acc_test_finish("state_hooks");
}
