/* A failed load_state leaves every prepared object exactly as it was (red-team 3, N2), and an
 * optimizer checkpoint missing state tensors is refused (N3). The program trains, saves one
 * checkpoint per case, trains on (so its state differs from the checkpoints), then one process
 * damages one file of each case in another way; every load must fail on every process, and a
 * hash of the model, the optimizer (tensors, which are present, scalars), the scheduler, the
 * global RNG, the loader position, the accumulation step and a registered object must be what it
 * was before the load. Run at 1 and 2 processes: at 2 only the last process's file is damaged
 * in the per-process cases, so process 0 loads its own files and must put them back.
 * Usage: test_state_load_atomic <dir> */
#include <stdint.h>

#include "acc_test.h"

static int rank, nprocs;
static acc_accelerator *acc;
static char base[900];
static int64_t counter = 42;

static acc_result save_cb(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, obj, sizeof(int64_t));
  return ACC_OK;
}

static acc_result load_cb(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return acc_error_set(ACC_ERR_FORMAT, "counter: %zu bytes, expected 8", len);
  memcpy(obj, data, sizeof(int64_t));
  return ACC_OK;
}

static uint64_t h;
static void mix(const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

static uint64_t state_hash(acc_model *m, acc_optimizer *o, acc_scheduler *s, acc_dataloader *dl) {
  h = 14695981039346656037ull;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    mix(p->data, p->numel * sizeof(float));
  }
  size_t n = acc_optimizer_state_count(o);
  mix(&n, sizeof n);
  for (size_t i = 0; i < n; i++) {
    const char *name = NULL;
    const float *d = NULL;
    size_t numel = 0;
    REQUIRE_OK(acc_optimizer_state_get(o, i, &name, &d, &numel, NULL, NULL));
    mix(name, strlen(name));
    mix(d, numel * sizeof(float));
  }
  for (size_t i = 0; i < acc_optimizer_scalar_count(o); i++) {
    double v = 0;
    REQUIRE_OK(acc_optimizer_scalar_get(o, i, NULL, &v));
    mix(&v, sizeof v);
  }
  int64_t step = 0;
  double lr = 0;
  REQUIRE_OK(acc_scheduler_get_state(s, &step, &lr));
  mix(&step, sizeof step);
  mix(&lr, sizeof lr);
  uint8_t rng[ACC_RNG_STATE_SIZE];
  acc_rng_state_get(acc_rng_global(), rng);
  mix(rng, sizeof rng);
  acc_dataloader_state ds;
  memset(&ds, 0, sizeof ds);
  REQUIRE_OK(acc_dataloader_state_get(dl, &ds));
  mix(&ds, sizeof ds);
  int64_t as = acc_accelerator_step(acc);
  mix(&as, sizeof as);
  mix(&counter, sizeof counter);
  return h;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  if (len) *len = n;
  return buf;
}

static void write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

/* In <dir>/<file>, the value after `"key": ` becomes `value`. */
static void set_value(const char *dir, const char *file, const char *key, const char *value) {
  char path[1100], pat[64], out[1 << 16];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  const char *text = read_all(path, NULL);
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *at = strstr(text, pat);
  if (!at) {
    fprintf(stderr, "no %s in %s\n", pat, path);
    exit(1);
  }
  const char *v = at + strlen(pat), *end = v + strcspn(v, ",\n}");
  int n = snprintf(out, sizeof out, "%.*s%s%s", (int)(v - text), text, value, end);
  write_all(path, out, (size_t)n);
}

/* optimizer.safetensors rewritten without the tensor named `drop` (NULL: without any). */
static void drop_tensor(const char *dir, const char *drop) {
  char path[1100];
  snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
  acc_safetensors *f = NULL;
  REQUIRE_OK(acc_safetensors_open(&f, path));
  acc_tensor_view keep[16];
  size_t nk = 0;
  for (size_t i = 0; i < acc_safetensors_count(f) && nk < 16; i++) {
    acc_tensor_view tv;
    REQUIRE_OK(acc_safetensors_tensor(f, i, &tv));
    if (drop && strcmp(tv.name, drop) != 0) keep[nk++] = tv;
  }
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  REQUIRE_OK(acc_safetensors_write(tmp, keep, nk, NULL, NULL, 0));
  acc_safetensors_close(f);
  if (rename(tmp, path) != 0) exit(1);
}

enum { RS_STEP, RS_BATCHES, OPT_GARBAGE, OPT_DROP_ONE, OPT_EMPTY, OPT_BETA2, SCHED_STEP, CUSTOM_SHORT, MODEL_SHAPE, NCASES };
static const char *const case_names[NCASES] = {"rs_step", "rs_batches", "opt_garbage", "opt_drop_one",
                                               "opt_empty", "opt_beta2", "sched_step", "custom_short",
                                               "model_shape"};

/* Damages case c's checkpoint (on the process that owns the file); everyone waits. */
static void damage(int c, const char *dir) {
  char last[64];
  snprintf(last, sizeof last, "random_states_%d.json", nprocs - 1);
  int who = c == RS_STEP || c == RS_BATCHES ? nprocs - 1 : 0;
  if (rank == who) {
    char path[1100];
    switch (c) {
      case RS_STEP: set_value(dir, last, "step", "-1"); break;
      case RS_BATCHES: set_value(dir, last, "batches", nprocs > 1 ? "7" : "-7"); break;
      case OPT_GARBAGE:
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        write_all(path, "garbage", 7);
        break;
      case OPT_DROP_ONE: drop_tensor(dir, "state.b.exp_avg_sq"); break;
      case OPT_EMPTY: drop_tensor(dir, NULL); break;
      case OPT_BETA2: set_value(dir, "optimizer.json", "beta2", "1.0"); break;
      case SCHED_STEP: set_value(dir, "scheduler.json", "step", "-3"); break;
      case MODEL_SHAPE: { /* w saved as [2, 2] instead of [4]: load_state cannot take options */
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        acc_safetensors *f = NULL;
        REQUIRE_OK(acc_safetensors_open(&f, path));
        acc_tensor_view tv[2];
        REQUIRE_OK(acc_safetensors_find(f, "w", &tv[0]));
        REQUIRE_OK(acc_safetensors_find(f, "b", &tv[1]));
        tv[0].ndim = 2;
        tv[0].shape[0] = tv[0].shape[1] = 2;
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        REQUIRE_OK(acc_safetensors_write(tmp, tv, 2, NULL, NULL, 0));
        acc_safetensors_close(f);
        if (rename(tmp, path) != 0) exit(1);
        break;
      }
      case CUSTOM_SHORT:
        snprintf(path, sizeof path, "%s/custom_checkpoint_0.bin", dir);
        write_all(path, "abc", 3);
        break;
    }
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
}

static const char *const expected_text[NCASES] = {
    "\"step\" is -1", "batch", "optimizer.safetensors", "'state.b.exp_avg_sq' is missing",
    "is missing (4 of the 4", "beta2", "\"step\" is -3", "counter: 3 bytes, expected 8",
    "call acc_load_checkpoint_in_model with options.strict = 0"};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  snprintf(base, sizeof base, "%s/np%d", argv[1], nprocs);
  if (rank == 0) {
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  acc_set_seed(7);

  float w[4] = {1, 2, 3, 4}, gw[4] = {0}, b[2] = {0.5f, -0.5f}, gb[2] = {0};
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, gw, 1, (int64_t[]){4}));
  REQUIRE_OK(acc_model_add_parameter(m, "b", b, gb, 1, (int64_t[]){2}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_adamw(&opt, m, &ao));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_scheduler_options so = ACC_SCHEDULER_OPTIONS_INIT;
  acc_scheduler *sch = NULL;
  REQUIRE_OK(acc_scheduler_create(&sch, opt, &so));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, sch));
  static float xs[40];
  for (int i = 0; i < 40; i++) xs[i] = (float)i;
  acc_field_desc f[1] = {{ACC_F32, 1}};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 40, f, 1, (const void *const[]){xs}));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 2;
  lo.shuffle = 1;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(acc, &counter, save_cb, load_cb));

  for (int it = 0; it < 5; it++) {
    if (it == 3) { /* the checkpoints hold the state after 3 steps */
      for (int c = 0; c < NCASES; c++) {
        char dir[1000];
        snprintf(dir, sizeof dir, "%s/%s", base, case_names[c]);
        REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
      }
      counter = 43;
    }
    const acc_batch *bt = NULL;
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &bt));
    for (int k = 0; k < 4; k++) gw[k] = ((const float *)bt->fields[0])[0] * (float)(k + 1) * 0.01f;
    gb[0] = 0.3f;
    gb[1] = -0.2f;
    REQUIRE_OK(acc_accelerator_backward(acc));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_scheduler_step(acc, sch));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  }
  (void)acc_rng_u64(acc_rng_global()); /* the RNG moved on too */

  const uint64_t before = state_hash(m, opt, sch, dl);
  for (int c = 0; c < NCASES; c++) {
    char dir[1000];
    snprintf(dir, sizeof dir, "%s/%s", base, case_names[c]);
    damage(c, dir);
    acc_result rc = acc_accelerator_load_state(acc, dir, NULL);
    CHECK(rc != ACC_OK, "case %s: load_state succeeded", case_names[c]);
    /* the process that read the damaged file names it; the others may report the agreement */
    if (rank == (c == RS_STEP || c == RS_BATCHES ? nprocs - 1 : 0) || nprocs == 1)
      CHECK(strstr(acc_last_error(), expected_text[c]) != NULL, "case %s: message lacks \"%s\": %s",
            case_names[c], expected_text[c], acc_last_error());
    uint64_t after = state_hash(m, opt, sch, dl);
    CHECK(after == before, "case %s: the failed load changed the prepared objects (hash %016llx -> %016llx; w[0] %g, "
          "counter %lld, step %lld)", case_names[c], (unsigned long long)before, (unsigned long long)after,
          (double)w[0], (long long)counter, (long long)acc_accelerator_step(acc));
  }
  /* and training continues from the unchanged state: a good checkpoint still loads */
  char good[1000];
  snprintf(good, sizeof good, "%s/good", base);
  CHECK_OK(acc_accelerator_save_state(acc, good, NULL));
  CHECK_OK(acc_accelerator_load_state(acc, good, NULL));
  CHECK(state_hash(m, opt, sch, dl) == before, "a good save + load round-trips the state");
  /* cluster trial F11: optimizer.json holds the counters as integers */
  char ojson[1100];
  snprintf(ojson, sizeof ojson, "%s/optimizer.json", good);
  const char *oj = read_all(ojson, NULL);
  CHECK(strstr(oj, "\"step\": 5,") != NULL && strstr(oj, "\"kind\": 1,") != NULL,
        "optimizer.json stores step and kind as integers: %s", oj);

  acc_accelerator_destroy(acc);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_scheduler_destroy(sch);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  return acc_test_finish("state_load_atomic");
}
