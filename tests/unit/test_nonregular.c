/* A FIFO (or a directory) where a checkpoint file is expected is refused with a message naming
 * the file, at once, instead of blocking in open (regression for red-team D10): every file of a
 * save_state checkpoint (model and optimizer safetensors, random_states_<p>.json, the state
 * JSON, custom objects), a sharded index and its shards, a lone safetensors file. Runs under
 * accelerate launch at 1 and 2 processes; an alarm turns a hang into a failure.
 * Usage: test_unit_nonregular <dir> */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt/ckpt_dir.h"

#define N 5

static int rank, nprocs;
static acc_state *st;

static acc_result obj_save(void *obj, void *buf, size_t cap, size_t *len) {
  (void)obj;
  *len = 3;
  if (buf && cap >= 3) memcpy(buf, "abc", 3);
  return ACC_OK;
}
static acc_result obj_load(void *obj, const void *data, size_t len) {
  (void)obj;
  (void)data;
  return len == 3 ? ACC_OK : ACC_ERR_FORMAT;
}

#define REQUIRE(cond, ...)         \
  do {                             \
    int req_ok_ = (cond);          \
    CHECK(req_ok_, __VA_ARGS__);   \
    if (!req_ok_) exit(1);         \
  } while (0)

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The regular files directly in dir, sorted (the same list on every process). */
static size_t list_files(const char *dir, char names[][256], size_t cap) {
  DIR *d = opendir(dir);
  size_t n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL && n < cap) {
    char *p = acc__path_join(dir, e->d_name);
    if (p && acc__is_file(p)) snprintf(names[n++], 256, "%s", e->d_name);
    acc__free(p);
  }
  if (d) closedir(d);
  char *ptrs[64];
  for (size_t i = 0; i < n; i++) ptrs[i] = names[i];
  qsort(ptrs, n, sizeof *ptrs, cmp);
  char sorted[64][256];
  for (size_t i = 0; i < n; i++) snprintf(sorted[i], 256, "%s", ptrs[i]);
  memcpy(names, sorted, n * 256);
  return n;
}

/* Replaces dir/name by a FIFO (kind 0) or a directory (kind 1) on process 0; restore puts the
 * file back. Both end with a barrier. */
static void swap_in(const char *dir, const char *name, int kind) {
  char p[1200], bak[1300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  snprintf(bak, sizeof bak, "%s.bak", p);
  if (rank == 0) {
    REQUIRE(rename(p, bak) == 0, "rename %s", p);
    REQUIRE((kind == 0 ? mkfifo(p, 0644) : mkdir(p, 0755)) == 0, "mkfifo/mkdir %s", p);
  }
  REQUIRE_OK(acc_barrier(st));
}
static void restore(const char *dir, const char *name) {
  char p[1200], bak[1300];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  snprintf(bak, sizeof bak, "%s.bak", p);
  REQUIRE_OK(acc_barrier(st));
  if (rank == 0) {
    unlink(p);
    rmdir(p);
    REQUIRE(rename(bak, p) == 0, "restore %s", p);
  }
  REQUIRE_OK(acc_barrier(st));
}

/* The process that reads name: random_states_<p>.json is read by process p only; the other
 * files by every process. */
static int reads(const char *name) {
  int p;
  if (sscanf(name, "random_states_%d.json", &p) == 1) return p == rank;
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  alarm((unsigned)(40 * (m && atoi(m) > 0 ? atoi(m) : 1))); /* a hang is a failure (SIGALRM) */
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  st = acc_accelerator_state(acc);
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  float w[N] = {1, 2, 3, 4, 5}, g[N] = {0};
  float w2[N] = {6, 7}, g2[N] = {0};
  acc_model *model = NULL;
  REQUIRE_OK(acc_model_create(&model));
  int64_t shape[1] = {N};
  REQUIRE_OK(acc_model_add_parameter(model, "w", w, g, 1, shape));
  REQUIRE_OK(acc_model_add_parameter(model, "v", w2, g2, 1, shape));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, model));
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, model, NULL));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  int obj = 0;
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(acc, &obj, obj_save, obj_load));

  char base[1000], ck[1100], shards[1100];
  snprintf(base, sizeof base, "%s_np%d", argv[1], nprocs);
  snprintf(ck, sizeof ck, "%s/ck", base);
  snprintf(shards, sizeof shards, "%s/shards", base);
  if (rank == 0) {
    REQUIRE_OK(acc__rmtree(base));
    REQUIRE_OK(acc__mkdirs(base));
  }
  REQUIRE_OK(acc_barrier(st));
  REQUIRE_OK(acc_accelerator_save_state(acc, ck, NULL));
  REQUIRE_OK(acc_accelerator_load_state(acc, ck, NULL));

  /* every file of the checkpoint, as a FIFO and as a directory */
  char names[64][256];
  size_t n = list_files(ck, names, 64);
  CHECK(n >= 5, "only %zu files in %s", n, ck);
  REQUIRE_OK(acc_barrier(st)); /* every process listed before process 0 changes anything */
  int seen_states = 0, seen_custom = 0, seen_model = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(names[i], ACC_CHECKPOINT_MARKER)) continue;
    seen_states += !strncmp(names[i], "random_states_", 14);
    seen_custom += !strncmp(names[i], "custom_checkpoint_", 18);
    seen_model += !strcmp(names[i], "model.safetensors");
    for (int kind = 0; kind < 2; kind++) {
      swap_in(ck, names[i], kind);
      double t0 = acc__now();
      acc_result rc = acc_accelerator_load_state(acc, ck, NULL);
      CHECK(rc != ACC_OK, "%s as a %s: load_state succeeded", names[i], kind ? "directory" : "FIFO");
      if (reads(names[i])) {
        /* a directory named model.safetensors gets the model loader's own message */
        char want[600];
        snprintf(want, sizeof want, "%s' is %s", names[i],
                 kind ? (strcmp(names[i], "model.safetensors") ? "a directory, not a regular file"
                                                               : "not a folder containing")
                      : "a FIFO, not a regular file");
        CHECK(strstr(acc_last_error(), want) != NULL, "%s: message lacks \"%s\": %s", names[i], want,
              acc_last_error());
      }
      CHECK(acc__now() - t0 < 10, "%s: %.1f s", names[i], acc__now() - t0);
      restore(ck, names[i]);
    }
  }
  CHECK(seen_states == nprocs && seen_custom == 1 && seen_model == 1,
        "checkpoint layout: %d random states, %d custom, %d model", seen_states, seen_custom, seen_model);
  REQUIRE_OK(acc_accelerator_load_state(acc, ck, NULL)); /* intact again */

  /* a sharded model: the index and a shard; and a lone safetensors file */
  REQUIRE_OK(acc_save_model(st, model, shards, 4 * N, ACC_F32));
  char index[1300], shard[1300];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", shards);
  snprintf(shard, sizeof shard, "%s/model-00001-of-00002.safetensors", shards);
  CHECK(acc__is_file(index) && acc__is_file(shard), "sharded save: no %s or %s", index, shard);
  REQUIRE_OK(acc_barrier(st));
  REQUIRE_OK(acc_load_checkpoint_in_model(model, shards, NULL, NULL));
  REQUIRE_OK(acc_barrier(st)); /* every process read the intact files before process 0 swaps one */
  static const char *const sharded[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors"};
  for (int i = 0; i < 2; i++) {
    swap_in(shards, sharded[i], 0);
    const char *path = i == 0 ? index : shards;
    CHECK_ERR(acc_load_checkpoint_in_model(model, path, NULL, NULL), ACC_ERR_IO, "is a FIFO, not a regular file");
    CHECK(strstr(acc_last_error(), sharded[i]) != NULL, "message lacks %s: %s", sharded[i], acc_last_error());
    acc_safetensors *f = NULL;
    if (i == 1) {
      CHECK_ERR(acc_safetensors_open(&f, shard), ACC_ERR_IO, "model-00001-of-00002.safetensors' is a FIFO");
      CHECK(f == NULL, "handle on error");
    }
    restore(shards, sharded[i]);
  }
  REQUIRE_OK(acc_load_checkpoint_in_model(model, shards, NULL, NULL));

  REQUIRE_OK(acc_barrier(st));
  if (rank == 0) acc__rmtree(base);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return acc_test_finish("unit_nonregular");
}
