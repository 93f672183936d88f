/* load_state reads the model's parameters and the optimizer's state straight into their buffers
 * once every process checked the whole checkpoint (src/ckpt/load_defer.c). Run at 1 and 2
 * processes:
 *  - the loaded values are the saved ones, bit for bit, in the same buffers (the program's
 *    parameters, the optimizer's state and a buffer registered with
 *    acc_accelerator_register_buffers are not moved);
 *  - a load that fails after the tensors were checked (here: the scheduler's file, read after
 *    them) changes none of them;
 *  - a checkpoint changed in place while it loads (an object's load callback, which runs after
 *    the tensors were checked and before they are read in, truncates the optimizer file) is an
 *    ACC_ERR_IO on every process naming the file, not a crash; the next load of an intact
 *    checkpoint restores everything.
 * Usage: test_ckpt_load_inplace <dir> */
#include <stdint.h>
#include <unistd.h>

#include "acc_test.h"

enum { NP = 3, N0 = 1000, N1 = 37, N2 = 4096, NB = 333 };
static float own_buf[NB]; /* a buffer of the program's, registered with acc_accelerator_register_buffers */
static const size_t sizes[NP] = {N0, N1, N2};
static float w0[N0], w1[N1], w2[N2], g0[N0], g1[N1], g2[N2];
static float *const ws[NP] = {w0, w1, w2}, *const gs[NP] = {g0, g1, g2};

static int rank;
static acc_accelerator *acc;
static char trunc_path[1100]; /* non-empty: the object's load callback truncates this file */

static acc_result obj_save(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, obj, sizeof(int64_t));
  return ACC_OK;
}

static acc_result obj_load(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return acc_error_set(ACC_ERR_FORMAT, "object: %zu bytes, expected 8", len);
  memcpy(obj, data, len);
  if (!trunc_path[0]) return ACC_OK;
  /* Every process calls this callback at the same point of load_state, after it checked the
   * tensors: once all of them are here (a barrier), process 0 truncates the file; no process
   * reads a tensor in before every process returned from here (an agreement comes first). */
  acc_result rc = acc_accelerator_wait_for_everyone(acc);
  if (rc == ACC_OK && rank == 0 && truncate(trunc_path, 4096) != 0)
    return acc_error_set(ACC_ERR_IO, "cannot truncate %s", trunc_path);
  return rc;
}

/* The model's parameters and the optimizer's state tensors, bytes and addresses. */
typedef struct snap {
  float *vals; /* parameters, then state tensors, in order */
  size_t n;
  const void *addr[NP + 2 * NP];
} snap;
/* The parameters, the state tensors and the program's buffer (in s.vals, after them). */

static snap take(acc_optimizer *o) {
  snap s;
  memset(&s, 0, sizeof s);
  size_t total = N0 + N1 + N2, ns = acc_optimizer_state_count(o);
  s.vals = malloc((3 * total + NB) * sizeof(float));
  if (!s.vals || ns != 2 * NP) {
    fprintf(stderr, "snapshot: %zu state tensors (expected %d)\n", ns, 2 * NP);
    exit(1);
  }
  for (int p = 0; p < NP; p++) {
    memcpy(s.vals + s.n, ws[p], sizeof(float) * sizes[p]);
    s.n += sizes[p];
    s.addr[p] = ws[p];
  }
  for (size_t i = 0; i < ns; i++) {
    const char *name = NULL;
    const float *d = NULL;
    size_t numel = 0;
    REQUIRE_OK(acc_optimizer_state_get(o, i, &name, &d, &numel, NULL, NULL));
    memcpy(s.vals + s.n, d, numel * sizeof(float));
    s.n += numel;
    s.addr[NP + i] = d;
  }
  memcpy(s.vals + s.n, own_buf, sizeof own_buf);
  s.n += NB;
  return s;
}

static int same_vals(const snap *a, const snap *b) { return a->n == b->n && !memcmp(a->vals, b->vals, a->n * 4); }
static int same_addr(const snap *a, const snap *b) { return !memcmp(a->addr, b->addr, sizeof a->addr); }

static void train_step(acc_accelerator *a, acc_optimizer *o, int it) {
  for (int p = 0; p < NP; p++)
    for (size_t k = 0; k < sizes[p]; k++) gs[p][k] = 0.001f * (float)((k * 7 + (size_t)it * 13 + (size_t)p) % 101);
  for (int k = 0; k < NB; k++) own_buf[k] += 0.25f * (float)(k % 5 + it);
  REQUIRE_OK(acc_accelerator_backward(a));
  REQUIRE_OK(acc_accelerator_optimizer_step(a, o));
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(a, o));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_accelerator_process_index(acc);
  const int nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  char base[900];
  snprintf(base, sizeof base, "%s/np%d", argv[1], nprocs);
  if (rank == 0) {
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  for (int p = 0; p < NP; p++)
    for (size_t k = 0; k < sizes[p]; k++) ws[p][k] = (float)((k * 31 + (size_t)p) % 997) * 1e-3f - 0.5f;
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "a.weight", w0, g0, 2, (int64_t[]){10, 100}));
  REQUIRE_OK(acc_model_add_parameter(m, "a.bias", w1, g1, 1, (int64_t[]){N1})); /* odd size */
  REQUIRE_OK(acc_model_add_parameter(m, "b.weight", w2, g2, 2, (int64_t[]){64, 64}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_optimizer *opt = NULL;
  REQUIRE_OK(acc_optimizer_create_adamw(&opt, m, NULL));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_scheduler_options sco = ACC_SCHEDULER_OPTIONS_INIT;
  acc_scheduler *sch = NULL;
  REQUIRE_OK(acc_scheduler_create(&sch, opt, &sco));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, sch));
  int64_t counter = 10;
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(acc, &counter, obj_save, obj_load));
  acc_named_buffer nb[1] = {{"own", ACC_F32, NULL, NB, own_buf}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "program_state", nb, 1));

  char good[1000], bad[1000], trunc[1000];
  snprintf(good, sizeof good, "%s/good", base);
  snprintf(bad, sizeof bad, "%s/bad_scheduler", base);
  snprintf(trunc, sizeof trunc, "%s/truncated", base);
  for (int it = 0; it < 3; it++) train_step(acc, opt, it);
  REQUIRE_OK(acc_accelerator_save_state(acc, good, NULL));
  REQUIRE_OK(acc_accelerator_save_state(acc, bad, NULL));
  REQUIRE_OK(acc_accelerator_save_state(acc, trunc, NULL));
  snap saved = take(opt);
  for (int it = 3; it < 6; it++) train_step(acc, opt, it); /* the state now differs from the checkpoints */
  snap before = take(opt);
  CHECK(!same_vals(&saved, &before), "training on changed nothing: the test would not see a load");

  /* 1. a load that fails after the tensors were checked leaves them as they were */
  if (rank == 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s/scheduler.json", bad);
    FILE *f = fopen(path, "w");
    if (!f || fputs("{\"step\": -3, \"base_lr\": 0.001}\n", f) < 0 || fclose(f) != 0) return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  CHECK(acc_accelerator_load_state(acc, bad, NULL) != ACC_OK, "a load with a bad scheduler file succeeded");
  snap after_bad = take(opt);
  CHECK(same_vals(&after_bad, &before) && same_addr(&after_bad, &before),
        "the failed load changed the parameters or the optimizer state");

  /* 2. the checkpoint changed in place while it loads: an error naming the file, no crash */
  snprintf(trunc_path, sizeof trunc_path, "%s/optimizer.safetensors", trunc);
  acc_result rc = acc_accelerator_load_state(acc, trunc, NULL);
  CHECK(rc == ACC_ERR_IO, "a checkpoint truncated while it loads: %s, expected ACC_ERR_IO (%s)",
        acc_result_string(rc), acc_last_error());
  CHECK(strstr(acc_last_error(), "optimizer.safetensors") && strstr(acc_last_error(), "changed while it was loading"),
        "the message names the file and says what happened: %s", acc_last_error());
  trunc_path[0] = 0;

  /* 3. an intact checkpoint: the saved bytes, in the same buffers */
  CHECK_OK(acc_accelerator_load_state(acc, good, NULL));
  snap loaded = take(opt);
  CHECK(same_vals(&loaded, &saved), "the loaded parameters and optimizer state differ from the saved ones");
  CHECK(same_addr(&loaded, &before), "load_state moved a parameter or an optimizer state buffer");
  CHECK(counter == 10, "the registered object: %lld, expected 10", (long long)counter);
  /* and training goes on from there */
  train_step(acc, opt, 6);
  free(saved.vals);
  free(before.vals);
  free(after_bad.vals);
  free(loaded.vals);
  acc_accelerator_destroy(acc);
  acc_scheduler_destroy(sch);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  return acc_test_finish("ckpt_load_inplace");
}
