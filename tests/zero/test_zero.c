/* ZeRO stage 1 and 2 through the real launcher.
 *
 *   test_zero train STAGE   every process trains a small model (AdamW with two parameter
 *                           groups, a warmup + linear scheduler, global-norm clipping, a frozen
 *                           parameter, sizes that do not divide by the number of processes)
 *                           with the accelerator at zero_stage STAGE, and compares every step's
 *                           gradient norm and the final weights with a reference computed in
 *                           this process without any communication: the plain optimizer on the
 *                           gradient averaged over every process's data (what stage 0 computes).
 *                           It also checks the optimizer state held per process (1/N at stage 1
 *                           and 2) and, at stage 2, that no full-size gradient buffer exists (the
 *                           buckets are reduced to their owners as grad_ready marks them, on the
 *                           overlap thread).
 *   test_zero train_sgd STAGE  the same with SGD + momentum (lazily created state buffers)
 *   test_zero train_env STAGE  the same, with the stage left to ACCELERATE_ZERO_STAGE (exported
 *                           by `accelerate launch --zero_stage` or the config file's zero_stage)
 *   test_zero save|resume STAGE DIR [SAVED_N]
 *                           the same training, saving the state half way (save) or starting from
 *                           that state (resume, a new process group): the files hold full tensors,
 *                           so a run saved at stage 1 or 2 resumes at any stage and ends like the
 *                           reference; SAVED_N: the checkpoint was saved by that many processes
 *                           (the reference's first half runs on SAVED_N). save also writes the
 *                           final weights with acc_save_model to DIR/final and checks they are the
 *                           full tensors.
 *   test_zero fp16          fp16 with loss-scale overflows and a one-process inf: stages 0, 1
 *                           and 2 side by side skip the same steps and end alike
 *   test_zero errors        out-of-range stages are refused with a clear error,
 *                           from the option and from ACCELERATE_ZERO_STAGE; an optimizer that is
 *                           not prepared cannot step under ZeRO.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_test.h"
#include "accelerate.h"
#include "core/internal.h"

enum { NW = 35, NB = 7, NC = 13, NF = 3, STEPS = 8 };

typedef struct net {
  float w[NW], b[NB], c[NC], f[NF];
  float gw[NW], gb[NB], gc[NC];
  acc_model *m;
  acc_optimizer *opt;
  acc_scheduler *sched;
} net;

static int use_sgd; /* SGD with momentum instead of AdamW (one state buffer, created lazily) */

static float target(int r, size_t k, int step) {
  return 3.0f * (float)sin(0.37 * (double)k + 1.3 * r + 0.11 * step);
}

/* This process's gradient of 2 * sum (p - target)^2 over every trainable element. */
static void local_grad(float *g, const float *p, size_t n, size_t base, int r, int step) {
  for (size_t k = 0; k < n; k++) g[k] = 4.0f * (p[k] - target(r, base + k, step));
}

static void build(net *t) {
  int64_t sw[2] = {5, 7}, sb[1] = {NB}, sc[1] = {NC}, sf[1] = {NF};
  for (size_t k = 0; k < NW; k++) t->w[k] = 0.1f * (float)k - 1.0f;
  for (size_t k = 0; k < NB; k++) t->b[k] = 0.5f - 0.05f * (float)k;
  for (size_t k = 0; k < NC; k++) t->c[k] = (float)cos((double)k);
  for (size_t k = 0; k < NF; k++) t->f[k] = 7.0f + (float)k;
  REQUIRE_OK(acc_model_create(&t->m));
  REQUIRE_OK(acc_model_add_parameter(t->m, "w", t->w, t->gw, 2, sw));
  REQUIRE_OK(acc_model_add_parameter(t->m, "frozen", t->f, NULL, 1, sf));
  REQUIRE_OK(acc_model_add_parameter(t->m, "b", t->b, t->gb, 1, sb));
  REQUIRE_OK(acc_model_add_parameter(t->m, "c", t->c, t->gc, 1, sc));
  const char *g0[] = {"w", "c"}, *g1[] = {"b"};
  acc_param_group groups[2] = {{g0, 2, -1.0, 0.01}, {g1, 1, 0.2, 0.0}};
  if (use_sgd) {
    acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
    so.lr = 0.05;
    so.momentum = 0.9;
    REQUIRE_OK(acc_optimizer_create_sgd_groups(&t->opt, t->m, groups, 2, &so));
  } else {
    acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
    ao.lr = 0.05;
    REQUIRE_OK(acc_optimizer_create_adamw_groups(&t->opt, t->m, groups, 2, &ao));
  }
  acc_scheduler_options so = ACC_SCHEDULER_OPTIONS_INIT;
  so.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  so.num_warmup_steps = 2;
  so.num_training_steps = 64;
  REQUIRE_OK(acc_scheduler_create(&t->sched, t->opt, &so));
}

static void destroy(net *t) {
  acc_scheduler_destroy(t->sched);
  acc_optimizer_destroy(t->opt);
  acc_model_destroy(t->m);
}

static void all_grads(net *t, int r, int step) {
  local_grad(t->gw, t->w, NW, 0, r, step);
  local_grad(t->gb, t->b, NB, NW, r, step);
  local_grad(t->gc, t->c, NC, NW + NB, r, step);
}

/* The number of processes of the first half of the run when it was saved by another number of
 * processes than the one resuming it (0: the same). */
static int saved_nprocs;

/* Stage 0's arithmetic without communication: the sum over processes in process order, times
 * 1/N, clipping, the step, and N scheduler steps per optimizer step (one per process's batch).
 * With saved_nprocs, the first STEPS / 2 steps ran on that many processes. */
static void reference(net *ref, int n_now, float norms[STEPS]) {
  build(ref);
  net tmp;
  for (int s = use_sgd ? -1 : 0; s < STEPS; s++) {
    int n = saved_nprocs && s < STEPS / 2 ? saved_nprocs : n_now;
    float sw[NW] = {0}, sb[NB] = {0}, sc[NC] = {0};
    for (int r = 0; r < n; r++) {
      memcpy(tmp.w, ref->w, sizeof tmp.w), memcpy(tmp.b, ref->b, sizeof tmp.b), memcpy(tmp.c, ref->c, sizeof tmp.c);
      all_grads(&tmp, r, s);
      for (size_t k = 0; k < NW; k++) sw[k] = r ? sw[k] + tmp.gw[k] : tmp.gw[k];
      for (size_t k = 0; k < NB; k++) sb[k] = r ? sb[k] + tmp.gb[k] : tmp.gb[k];
      for (size_t k = 0; k < NC; k++) sc[k] = r ? sc[k] + tmp.gc[k] : tmp.gc[k];
    }
    const float inv = n > 1 ? 1.0f / (float)n : 1.0f;
    for (size_t k = 0; k < NW; k++) ref->gw[k] = sw[k] * inv;
    for (size_t k = 0; k < NB; k++) ref->gb[k] = sb[k] * inv;
    for (size_t k = 0; k < NC; k++) ref->gc[k] = sc[k] * inv;
    if (s >= 0) REQUIRE_OK(acc_clip_grad_norm(ref->m, 1.0f, 2.0, &norms[s]));
    REQUIRE_OK(acc_optimizer_step(ref->opt));
    if (s < 0) continue; /* the SGD warm-up step: no scheduler step (as in train) */
    for (int r = 0; r < n; r++) REQUIRE_OK(acc_scheduler_step(ref->sched));
  }
}

static int close_to(float a, float b) { return fabsf(a - b) <= 2e-5f * (1.0f + fabsf(b)); }

static void compare(const char *what, const float *got, const float *want, size_t n) {
  for (size_t k = 0; k < n; k++)
    CHECK(close_to(got[k], want[k]), "%s[%zu] = %.9g, reference %.9g", what, k, (double)got[k],
          (double)want[k]);
}

/* mode: NULL (train STEPS steps), "save" (save_state to dir after STEPS / 2 steps, then go on)
 * or "resume" (load_state from dir, then the last STEPS / 2 steps). */
static int train(int stage, const char *mode, const char *dir) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.zero_stage = stage;
  if (stage == 2) { /* several buckets, reduced on the overlap thread as grad_ready marks them */
    o.overlap_grad_sync = 1;
    o.bucket_cap_bytes = 16 * sizeof(float);
  }
  if (mode && strcmp(mode, "env") == 0) o.zero_stage = ACC_UNSET, mode = NULL; /* the launcher's */
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  acc_state *st = acc_accelerator_state(acc);
  int n = acc_state_num_processes(st), r = acc_state_process_index(st);
  acc_test_rank = r;
  const char *want_be = getenv("ACCELERATE_BACKEND");
  if (n > 1 && want_be && *want_be && strcmp(want_be, "auto") != 0)
    CHECK(strcmp(acc_state_backend_name(st), want_be) == 0, "backend %s, expected %s", acc_state_backend_name(st),
          want_be);
  CHECK(acc_accelerator_zero_stage(acc) == stage, "zero stage %d, expected %d", acc_accelerator_zero_stage(acc), stage);
  net t;
  build(&t);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, t.m));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, t.opt));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, t.sched));

  /* Optimizer state per process: exp_avg and exp_avg_sq of the elements it updates (SGD: the
   * momentum buffer, created by the first step). */
  const size_t trainable = NW + NB + NC, shard = (trainable + (size_t)n - 1) / (size_t)n;
  const size_t nb = use_sgd ? 1 : 2;
  if (use_sgd) { /* one step first, so that the momentum buffers exist */
    CHECK_OK(acc_accelerator_accumulate(acc));
    all_grads(&t, r, -1);
    CHECK_OK(acc_accelerator_backward(acc));
    CHECK_OK(acc_accelerator_optimizer_step(acc, t.opt));
    CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, t.opt));
  }
  size_t held = acc__optimizer_state_floats(t.opt);
  if (stage >= 1) {
    size_t lo = (size_t)r * shard, hi = lo + shard < trainable ? lo + shard : trainable;
    size_t mine = hi > lo ? hi - lo : 0;
    /* (SGD allocates one float for an empty range) */
    CHECK(held >= nb * mine && held <= nb * mine + 4, "stage %d: %zu state floats on process %d, expected %zu * %zu",
          stage, held, r, nb, mine);
    int64_t total = (int64_t)(nb * mine);
    CHECK_OK(acc_accelerator_all_reduce(acc, &total, &total, 1, ACC_I64, ACC_SUM));
    CHECK(total == (int64_t)(nb * trainable), "stage %d: %lld state floats in all, expected %zu", stage,
          (long long)total, nb * trainable);
    /* the gradient buffers of the accelerator: stage 1 one flat copy of every gradient; stage 2
     * one bucket (16 floats, or the largest parameter, w: NW) or a chunk of the parameter
     * all-gather, never the whole */
    size_t zbuf = acc__accelerator_sync_buffer_floats(acc);
    if (stage == 1 && n > 1)
      CHECK(zbuf == shard * (size_t)n, "stage 1: %zu buffer floats, expected %zu", zbuf, shard * (size_t)n);
    if (stage == 2 && n > 1)
      CHECK(zbuf <= NW && zbuf < trainable, "stage 2: %zu buffer floats (expected at most a bucket, %d)", zbuf, NW);
  } else {
    CHECK(held == nb * trainable, "stage 0: %zu state floats, expected %zu", held, nb * trainable);
  }
  /* The state accessors refuse a sharded optimizer instead of reading past its buffers. */
  if (stage >= 1) CHECK_ERR(acc_optimizer_state_get(t.opt, 0, NULL, NULL, NULL, NULL, NULL), ACC_ERR_INVALID_USAGE, "sharded");

  float norms[STEPS];
  int first = 0;
  if (mode && strcmp(mode, "resume") == 0) {
    REQUIRE_OK(acc_accelerator_load_state(acc, dir, NULL));
    first = STEPS / 2;
    CHECK(acc_optimizer_step_count(t.opt) == first, "resumed at optimizer step %lld, expected %d",
          (long long)acc_optimizer_step_count(t.opt), first);
    CHECK(acc__optimizer_state_floats(t.opt) == held, "load_state changed the state held: %zu floats, %zu before",
          acc__optimizer_state_floats(t.opt), held);
  }
  for (int s = 0; s < first; s++) norms[s] = 0.0f;
  for (int s = first; s < STEPS; s++) {
    if (mode && strcmp(mode, "save") == 0 && s == STEPS / 2) {
      REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
      CHECK(acc__optimizer_state_floats(t.opt) == held, "save_state left %zu state floats, %zu before",
            acc__optimizer_state_floats(t.opt), held);
    }
    CHECK_OK(acc_accelerator_accumulate(acc));
    all_grads(&t, r, s);
    if (stage == 2) /* the backward pass's order: the last parameter's gradient is final first */
      for (size_t i = 4; i-- > 0;) CHECK_OK(acc_accelerator_grad_ready(acc, i));
    CHECK_OK(acc_accelerator_backward(acc));
    if (stage == 2 && n > 1) { /* the gradients are this process's shard of the mean, zero elsewhere */
      size_t lo = (size_t)r * shard, hi = lo + shard;
      const float *gs[3] = {t.gw, t.gb, t.gc};
      const size_t ns[3] = {NW, NB, NC};
      for (size_t q = 0, off = 0; q < 3; off += ns[q++])
        for (size_t k = 0; k < ns[q]; k++)
          if (off + k < lo || off + k >= hi) CHECK(gs[q][k] == 0.0f, "stage 2: gradient element %zu outside the shard "
                                                   "is %g", off + k, (double)gs[q][k]);
    }
    CHECK_OK(acc_accelerator_clip_grad_norm(acc, 1.0f, 2.0, &norms[s]));
    CHECK_OK(acc_accelerator_optimizer_step(acc, t.opt));
    CHECK_OK(acc_accelerator_scheduler_step(acc, t.sched));
    CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, t.opt));
  }
  if (mode && strcmp(mode, "save") == 0) { /* save_model: ordinary full weights, whatever the stage */
    char out[1024];
    snprintf(out, sizeof out, "%s/final", dir);
    REQUIRE_OK(acc_save_model(st, t.m, out, 0, ACC_F32));
    snprintf(out, sizeof out, "%s/final/model.safetensors", dir);
    acc_safetensors *sf = NULL;
    REQUIRE_OK(acc_safetensors_open(&sf, out));
    const char *names[4] = {"w", "frozen", "b", "c"};
    const float *want[4] = {t.w, t.f, t.b, t.c};
    const size_t ns[4] = {NW, NF, NB, NC};
    CHECK(acc_safetensors_count(sf) == 4, "%s holds %zu tensors, expected 4", out, acc_safetensors_count(sf));
    for (int q = 0; q < 4; q++) {
      acc_tensor_view v;
      CHECK_OK(acc_safetensors_find(sf, names[q], &v));
      size_t numel = 1;
      for (int d = 0; d < v.ndim; d++) numel *= (size_t)v.shape[d];
      CHECK(v.dtype == ACC_F32 && numel == ns[q] && memcmp(v.data, want[q], ns[q] * sizeof(float)) == 0,
            "save_model: tensor '%s' is not the full f32 weight (%zu elements, expected %zu)", names[q], numel, ns[q]);
    }
    acc_safetensors_close(sf);
  }
  net ref;
  float ref_norms[STEPS];
  reference(&ref, n, ref_norms);
  for (int s = first; s < STEPS; s++)
    CHECK(close_to(norms[s], ref_norms[s]), "step %d: gradient norm %.9g, reference %.9g", s, (double)norms[s],
          (double)ref_norms[s]);
  CHECK(ref_norms[0] > 1.5f, "the reference norm %g does not exercise clipping", (double)ref_norms[0]);
  compare("w", t.w, ref.w, NW);
  compare("b", t.b, ref.b, NB);
  compare("c", t.c, ref.c, NC);
  for (size_t k = 0; k < NF; k++) CHECK(t.f[k] == 7.0f + (float)k, "the frozen parameter changed");
  CHECK(fabs(acc_optimizer_group_lr(t.opt, 1) - acc_optimizer_group_lr(ref.opt, 1)) < 1e-12, "group 1 lr %g vs %g",
        acc_optimizer_group_lr(t.opt, 1), acc_optimizer_group_lr(ref.opt, 1));
  destroy(&ref);
  destroy(&t);
  acc_accelerator_destroy(acc);
  return acc_test_finish("zero train");
}

/* fp16 under both stages side by side in one process group (two accelerators share the process
 * state): the loss scale starts too high, so the first steps overflow and are skipped, and at
 * step 6 the last process alone sees an inf in the first element (owned by process 0 at stage 1):
 * every process must skip together, at both stages, and end with the same weights and scale. */
static int fp16(void) {
  acc_accelerator *acc[3] = {NULL, NULL, NULL};
  net t[3];
  for (int z = 0; z < 3; z++) {
    acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
    o.zero_stage = z;
    o.mixed_precision = ACC_PRECISION_FP16;
    REQUIRE_OK(acc_accelerator_create(&acc[z], &o));
    build(&t[z]);
    REQUIRE_OK(acc_accelerator_prepare_model(acc[z], t[z].m));
    REQUIRE_OK(acc_accelerator_prepare_optimizer(acc[z], t[z].opt));
    REQUIRE_OK(acc_accelerator_prepare_scheduler(acc[z], t[z].sched));
  }
  acc_state *st = acc_accelerator_state(acc[0]);
  int n = acc_state_num_processes(st), r = acc_state_process_index(st);
  acc_test_rank = r;
  int skipped[3] = {0, 0, 0};
  for (int s = 0; s < 24; s++) {
    int was[3];
    float norms[3];
    for (int z = 0; z < 3; z++) {
      CHECK_OK(acc_accelerator_accumulate(acc[z]));
      all_grads(&t[z], r, s);
      float scale = acc_accelerator_backward_scale(acc[z]);
      for (size_t k = 0; k < NW; k++) t[z].gw[k] *= scale;
      for (size_t k = 0; k < NB; k++) t[z].gb[k] *= scale;
      for (size_t k = 0; k < NC; k++) t[z].gc[k] *= scale;
      if (s == 16 && r == n - 1) t[z].gw[0] = INFINITY;
      CHECK_OK(acc_accelerator_backward(acc[z]));
      CHECK_OK(acc_accelerator_clip_grad_norm(acc[z], 1.0f, 2.0, &norms[z]));
      CHECK_OK(acc_accelerator_optimizer_step(acc[z], t[z].opt));
      CHECK_OK(acc_accelerator_scheduler_step(acc[z], t[z].sched));
      CHECK_OK(acc_accelerator_optimizer_zero_grad(acc[z], t[z].opt));
      was[z] = acc_accelerator_optimizer_step_was_skipped(acc[z]);
      skipped[z] += was[z];
    }
    for (int z = 1; z < 3; z++) {
      CHECK(was[0] == was[z], "step %d: skipped %d at stage 0, %d at stage %d", s, was[0], was[z], z);
      if (s == 16) CHECK(was[z], "step 16: the inf on process %d did not make stage %d skip", n - 1, z);
      if (!was[0]) CHECK(close_to(norms[z], norms[0]), "step %d: norm %g at stage %d, %g at stage 0", s,
                         (double)norms[z], z, (double)norms[0]);
    }
  }
  CHECK(skipped[0] >= 2 && skipped[0] < 20, "%d skipped steps (the test needs some, not all)", skipped[0]);
  for (int z = 1; z < 3; z++) {
    compare("w", t[z].w, t[0].w, NW);
    compare("b", t[z].b, t[0].b, NB);
    compare("c", t[z].c, t[0].c, NC);
    CHECK(acc_optimizer_step_count(t[z].opt) == acc_optimizer_step_count(t[0].opt), "optimizer steps differ");
  }
  for (int z = 2; z >= 0; z--) {
    destroy(&t[z]);
    acc_accelerator_destroy(acc[z]);
  }
  return acc_test_finish("zero fp16");
}

static int errors(void) {
  acc_accelerator *acc = NULL;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.zero_stage = 3;
  CHECK_ERR(acc_accelerator_create(&acc, &o), ACC_ERR_INVALID_ARGUMENT, "zero_stage is 3");
  o.zero_stage = ACC_UNSET;
  setenv("ACCELERATE_ZERO_STAGE", "2", 1);
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  CHECK(acc_accelerator_zero_stage(acc) == 2, "ACCELERATE_ZERO_STAGE=2 gave stage %d", acc_accelerator_zero_stage(acc));
  acc_accelerator_destroy(acc);
  acc = NULL;
  setenv("ACCELERATE_ZERO_STAGE", "7", 1);
  CHECK_ERR(acc_accelerator_create(&acc, &o), ACC_ERR_INVALID_ARGUMENT, "ACCELERATE_ZERO_STAGE");
  setenv("ACCELERATE_ZERO_STAGE", "1", 1);
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  CHECK(acc_accelerator_zero_stage(acc) == 1, "ACCELERATE_ZERO_STAGE=1 gave stage %d", acc_accelerator_zero_stage(acc));
  net t;
  build(&t);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, t.m));
  CHECK_OK(acc_accelerator_accumulate(acc));
  all_grads(&t, 0, 0);
  CHECK_OK(acc_accelerator_backward(acc));
  CHECK_ERR(acc_accelerator_optimizer_step(acc, t.opt), ACC_ERR_INVALID_USAGE, "must be prepared");
  destroy(&t);
  acc_accelerator_destroy(acc);
  unsetenv("ACCELERATE_ZERO_STAGE");
  return acc_test_finish("zero errors");
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "train") == 0) return train(atoi(argv[2]), NULL, NULL);
  if (argc >= 3 && strcmp(argv[1], "train_sgd") == 0) {
    use_sgd = 1;
    return train(atoi(argv[2]), NULL, NULL);
  }
  if (argc >= 3 && strcmp(argv[1], "train_env") == 0) return train(atoi(argv[2]), "env", NULL);
  if (argc >= 4 && (strcmp(argv[1], "save") == 0 || strcmp(argv[1], "resume") == 0)) {
    if (argc >= 5) saved_nprocs = atoi(argv[4]);
    return train(atoi(argv[2]), argv[1], argv[3]);
  }
  if (argc >= 2 && strcmp(argv[1], "errors") == 0) return errors();
  if (argc >= 2 && strcmp(argv[1], "fp16") == 0) return fp16();
  fprintf(stderr, "usage: %s train STAGE | errors\n", argv[0]);
  return 2;
}
