/* A failed load_state leaves the program's own state as it was: buffers registered with
 * acc_accelerator_register_buffers and objects registered with
 * acc_accelerator_register_for_checkpointing_per_process are staged by load_state and written
 * only once everything else loaded, and put back when a later check fails on any process. Run at
 * 1 and 2 processes. The program trains, saves one checkpoint per case, trains on (its state then
 * differs from the checkpoints), then one process damages one file of each case, each in a part
 * that is read or checked after the program's state was staged; every load must fail on every
 * process and the bytes of every buffer, the NULL-ness of a lazily allocated one, both objects on
 * every process and the model must hash as before. Usage: test_ckpt_own_atomic <dir> */
#include <stdint.h>

#include "acc_test.h"

static int rank, nprocs;
static acc_accelerator *acc;

typedef struct counter {
  int64_t v;
} counter;
static counter obj0, obj1; /* per-process objects: different on every process */

static acc_result csave(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, &((counter *)obj)->v, sizeof(int64_t));
  return ACC_OK;
}

static acc_result cload(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return acc_error_set(ACC_ERR_FORMAT, "counter: %zu bytes, expected 8", len);
  memcpy(&((counter *)obj)->v, data, len);
  return ACC_OK;
}

static float *moments;      /* lazily allocated: NULL again before the loads */
static int64_t own_step;    /* a fixed buffer */
static float w[4] = {1, 2, 3, 4}, gw[4];

static uint64_t h;
static void mix(const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
}

static uint64_t own_hash(void) {
  h = 14695981039346656037ull;
  int allocated = moments != NULL;
  mix(&allocated, sizeof allocated);
  if (moments) mix(moments, 8 * sizeof(float));
  mix(&own_step, sizeof own_step);
  mix(&obj0.v, sizeof obj0.v);
  mix(&obj1.v, sizeof obj1.v);
  mix(w, sizeof w);
  return h;
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
  char path[1100], pat[64];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *text = acc_test_slurp(path);
  if (!text) exit(1);
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *at = strstr(text, pat);
  if (!at) {
    fprintf(stderr, "no %s in %s\n", pat, path);
    exit(1);
  }
  static char out[1 << 16];
  const char *v = at + strlen(pat), *end = v + strcspn(v, ",\n}");
  int n = snprintf(out, sizeof out, "%.*s%s%s", (int)(v - text), text, value, end);
  write_all(path, out, (size_t)n);
}

/* Each case damages what load_state reads or checks after the program's state is staged:
 *  sched_step: the scheduler's file (read after the buffers were staged);
 *  positions:  the last process's loader position (np 1: out of range; np 2: valid but different
 *              from process 0's, found by the check across processes after the commit);
 *  obj1_short: the last process's file of the second per-process object, rejected by its load
 *              callback during the commit, after the first object and the buffers were written;
 *  buf_dtype:  the buffers' file with a tensor of another size (staging fails). */
enum { SCHED_STEP, POSITIONS, OBJ1_SHORT, BUF_SIZE, NCASES };
static const char *const case_names[NCASES] = {"sched_step", "positions", "obj1_short", "buf_size"};
static const char *const expected_text[NCASES] = {"\"step\" is -3", "batch", "counter: 3 bytes, expected 8",
                                                  "expected F32 with 8 elements"};

static void damage(int c, const char *dir) {
  int who = c == POSITIONS || c == OBJ1_SHORT ? nprocs - 1 : 0;
  if (rank == who) {
    char path[1100], file[64];
    switch (c) {
      case SCHED_STEP: set_value(dir, "scheduler.json", "step", "-3"); break;
      case POSITIONS:
        snprintf(file, sizeof file, "random_states_%d.json", nprocs - 1);
        set_value(dir, file, "batches", nprocs > 1 ? "7" : "-7");
        break;
      case OBJ1_SHORT:
        snprintf(path, sizeof path, "%s/process_object_1_%d.bin", dir, nprocs - 1);
        write_all(path, "abc", 3);
        break;
      case BUF_SIZE: {
        float four[4] = {0};
        int64_t one = 0;
        acc_tensor_view v[2] = {{.name = "m", .dtype = ACC_F32, .ndim = 1, .data = four},
                                {.name = "t", .dtype = ACC_I64, .ndim = 1, .data = &one}};
        v[0].shape[0] = 4;
        v[1].shape[0] = 1;
        snprintf(path, sizeof path, "%s/own_adamw.safetensors", dir);
        REQUIRE_OK(acc_safetensors_write(path, v, 2, NULL, NULL, 0));
        break;
      }
    }
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  char base[900];
  snprintf(base, sizeof base, "%s/np%d", argv[1], nprocs);
  if (rank == 0) { /* a fresh directory: the checkpoints of a previous run would refuse the saves */
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));

  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, gw, 1, (int64_t[]){4}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_scheduler_options sco = ACC_SCHEDULER_OPTIONS_INIT;
  acc_scheduler *sch = NULL;
  REQUIRE_OK(acc_scheduler_create(&sch, opt, &sco));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, sch));
  static float xs[32];
  for (int i = 0; i < 32; i++) xs[i] = (float)i;
  acc_field_desc f[1] = {{ACC_F32, 1}};
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 32, f, 1, (const void *const[]){xs}));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 2;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  acc_named_buffer bufs[2] = {{"m", ACC_F32, (void **)&moments, 8, NULL}, {"t", ACC_I64, NULL, 1, &own_step}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "own_adamw", bufs, 2));
  REQUIRE_OK(acc_accelerator_register_for_checkpointing_per_process(acc, &obj0, csave, cload));
  REQUIRE_OK(acc_accelerator_register_for_checkpointing_per_process(acc, &obj1, csave, cload));

  moments = calloc(8, sizeof(float));
  if (!moments) return 1;
  for (int it = 0; it < 5; it++) {
    if (it == 2)
      for (int c = 0; c < NCASES; c++) {
        char dir[1000];
        snprintf(dir, sizeof dir, "%s/%s", base, case_names[c]);
        REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
      }
    const acc_batch *bt = NULL;
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &bt));
    for (int k = 0; k < 4; k++) gw[k] = ((const float *)bt->fields[0])[0] * 0.01f * (float)(k + 1);
    REQUIRE_OK(acc_accelerator_backward(acc));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_scheduler_step(acc, sch));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
    for (int k = 0; k < 8; k++) moments[k] += 0.5f * (float)(k + it + 1);
    own_step++;
    obj0.v = 100 * (rank + 1) + it;
    obj1.v = -100 * (rank + 1) - it;
  }

  /* two states before the loads: buffer allocated, and buffer not allocated yet (a load that
   * allocates it must free it again when it fails) */
  for (int alloc = 1; alloc >= 0; alloc--) {
    if (!alloc) {
      free(moments);
      moments = NULL;
    }
    const uint64_t before = own_hash();
    for (int c = 0; c < NCASES; c++) {
      char dir[1000];
      snprintf(dir, sizeof dir, "%s/%s", base, case_names[c]);
      if (alloc) damage(c, dir);
      acc_result rc = acc_accelerator_load_state(acc, dir, NULL);
      CHECK(rc != ACC_OK, "case %s: load_state succeeded", case_names[c]);
      int reader = (c == POSITIONS || c == OBJ1_SHORT) ? nprocs - 1 : 0;
      if (rank == reader || nprocs == 1)
        CHECK(strstr(acc_last_error(), expected_text[c]) != NULL, "case %s: message lacks \"%s\": %s",
              case_names[c], expected_text[c], acc_last_error());
      CHECK(own_hash() == before,
            "case %s (buffer %s before): the failed load changed the program's state (moments %s, t %lld, objects "
            "%lld %lld, w[0] %g)", case_names[c], alloc ? "allocated" : "NULL", moments ? "allocated" : "NULL",
            (long long)own_step, (long long)obj0.v, (long long)obj1.v, (double)w[0]);
    }
  }
  /* an intact checkpoint still loads everything: the saved values come back */
  char good[1000];
  snprintf(good, sizeof good, "%s/good", base);
  moments = calloc(8, sizeof(float));
  if (!moments) return 1;
  moments[3] = 42.0f;
  own_step = 77;
  obj0.v = 5 + rank;
  obj1.v = 6 + rank;
  REQUIRE_OK(acc_accelerator_save_state(acc, good, NULL));
  const uint64_t saved = own_hash();
  free(moments);
  moments = NULL;
  own_step = obj0.v = obj1.v = 0;
  CHECK_OK(acc_accelerator_load_state(acc, good, NULL));
  CHECK(own_hash() == saved && moments && moments[3] == 42.0f && obj0.v == 5 + rank,
        "a good load restores the buffers and objects (t %lld, objects %lld %lld)", (long long)own_step,
        (long long)obj0.v, (long long)obj1.v);

  free(moments);
  acc_accelerator_destroy(acc);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_scheduler_destroy(sch);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  return acc_test_finish("ckpt_own_atomic");
}
