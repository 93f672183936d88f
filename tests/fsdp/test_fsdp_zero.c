/* An accelerator checkpoint (save_state at ZeRO stage 2) resumed under FSDP on another number of
 * processes (issue 30 item 4: "ZeRO-2 on 2 -> FULL_SHARD on 3"), through the real launcher.
 *
 *   test_fsdp_zero save DIR          the accelerator at zero_stage 2 trains an MLP (a flat table,
 *       AdamW with weight decay, clipping) 25 steps, save_state into DIR/ckpt, trains 25 more and
 *       writes the final parameters to DIR/expected.f32 (process 0).
 *   test_fsdp_zero resume DIR STRATEGY   FSDP (units per layer) loads DIR/ckpt: the weights, the
 *       AdamW moments and the optimizer's scalars (step 25: the bias correction continues), trains
 *       the 25 remaining steps and must end within 1e-5 of the largest parameter of the
 *       uninterrupted run (another process count sums the gradients in another order; on the
 *       saving count, 2, bit-identical).
 *   test_fsdp_zero fresh DIR STRATEGY    the same without loading: must end far from it (the check
 *       above can fail).
 *   test_fsdp_zero elastic DIR STRATEGY  under accelerate launch --max_restarts 1: sharded
 *       checkpoints every 10 steps; process 1 dies inside step 23 of the first attempt; the restarted
 *       group resumes from step_20 and ends bit-identical to an uninterrupted run.
 *
 * Both sides compute the same gradients from the same full parameters: the global batch of G
 * samples split over the processes, the gradient of the mean loss times the number of processes
 * (each library averages over processes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_test.h"
#include "accelerate.h"

enum { D = 7, H = 13, O = 3, G = 12, STEPS = 50, HALF = 25 };

static const acc_param_spec table[] = {
    {"l1.w", 2, {H, D}}, {"l1.b", 1, {H}}, {"l2.w", 2, {H, H}}, {"l2.b", 1, {H}}, {"l3.w", 2, {O, H}}, {"l3.b", 1, {O}},
};
enum { NROWS = 6, NUMEL = H * D + H + H * H + H + O * H + O };

static int rank, world;

static float sample(size_t g, int k, int step) { return (float)sin(0.7 * (double)g + 1.3 * k + 0.17 * step); }

static void init_params(float *p) {
  for (size_t i = 0; i < NUMEL; i++) p[i] = 0.4f * (float)cos(0.91 * (double)i);
}

static void affine(const float *w, const float *b, const float *x, float *y, int out, int in) {
  for (int o = 0; o < out; o++) {
    float s = b[o];
    for (int i = 0; i < in; i++) s += w[o * in + i] * x[i];
    y[o] = s;
  }
}

/* Adds this process's part of the step's gradient into g (the whole table's layout). */
static void mlp_grad(const float *p, float *g, int step) {
  const float *w1 = p, *b1 = w1 + H * D, *w2 = b1 + H, *b2 = w2 + H * H, *w3 = b2 + H, *b3 = w3 + O * H;
  float *gw1 = g, *gb1 = gw1 + H * D, *gw2 = gb1 + H, *gb2 = gw2 + H * H, *gw3 = gb2 + H, *gb3 = gw3 + O * H;
  const int per = G / world;
  const float scale = (float)world / (float)G;
  for (int s = 0; s < per; s++) {
    const size_t id = (size_t)(rank * per + s);
    float x[D], h1[H], h2[H], y[O], dy[O], dh2[H], dh1[H];
    for (int k = 0; k < D; k++) x[k] = sample(id, k, step);
    affine(w1, b1, x, h1, H, D);
    for (int k = 0; k < H; k++) h1[k] = tanhf(h1[k]);
    affine(w2, b2, h1, h2, H, H);
    for (int k = 0; k < H; k++) h2[k] = tanhf(h2[k]);
    affine(w3, b3, h2, y, O, H);
    for (int o = 0; o < O; o++) dy[o] = (y[o] - sample(id, 100 + o, step)) * scale;
    for (int k = 0; k < H; k++) dh2[k] = 0;
    for (int o = 0; o < O; o++) {
      for (int k = 0; k < H; k++) {
        gw3[o * H + k] += dy[o] * h2[k];
        dh2[k] += w3[o * H + k] * dy[o];
      }
      gb3[o] += dy[o];
    }
    for (int k = 0; k < H; k++) dh2[k] *= 1 - h2[k] * h2[k];
    for (int k = 0; k < H; k++) dh1[k] = 0;
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < H; k++) {
        gw2[o * H + k] += dh2[o] * h1[k];
        dh1[k] += w2[o * H + k] * dh2[o];
      }
      gb2[o] += dh2[o];
    }
    for (int k = 0; k < H; k++) dh1[k] *= 1 - h1[k] * h1[k];
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < D; k++) gw1[o * D + k] += dh1[o] * x[k];
      gb1[o] += dh1[o];
    }
  }
}

static acc_adamw_options adamw(void) {
  acc_adamw_options ao;
  acc_adamw_options_init(&ao, ACC_ADAMW_OPTIONS_VERSION);
  ao.lr = 0.01;
  ao.weight_decay = 0.05;
  return ao;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* The accelerator at ZeRO stage 2: the program keeps the full parameters, the library shards the
 * gradients and the optimizer state. */
static int run_save(const char *dir) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.zero_stage = 2;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  rank = acc_accelerator_process_index(acc);
  world = acc_accelerator_num_processes(acc);
  static float p[NUMEL], g[NUMEL];
  init_params(p);
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_flat(m, table, NROWS, p, g, NULL));
  acc_optimizer *opt = NULL;
  acc_adamw_options ao = adamw();
  REQUIRE_OK(acc_optimizer_create_adamw(&opt, m, &ao));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  char *ck = join(dir, "ckpt");
  for (int step = 0; step < STEPS; step++) {
    if (step == HALF) REQUIRE_OK(acc_accelerator_save_state(acc, ck, NULL));
    mlp_grad(p, g, step);
    REQUIRE_OK(acc_accelerator_backward(acc));
    float norm;
    REQUIRE_OK(acc_accelerator_clip_grad_norm(acc, 0.5f, 2.0, &norm));
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  }
  if (rank == 0) {
    char *ex = join(dir, "expected.f32");
    FILE *fp = fopen(ex, "wb");
    CHECK(fp && fwrite(p, sizeof(float), NUMEL, fp) == NUMEL && fclose(fp) == 0, "cannot write %s", ex);
    free(ex);
  }
  free(ck);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
  return acc_test_finish("test_fsdp_zero");
}

static int parse_strategy(const char *s) {
  if (!strcmp(s, "FULL_SHARD")) return ACC_FSDP_FULL_SHARD;
  if (!strcmp(s, "SHARD_GRAD_OP")) return ACC_FSDP_SHARD_GRAD_OP;
  return ACC_FSDP_NO_SHARD;
}

/* FSDP with one unit per layer. */
typedef struct fs {
  acc_fsdp *f;
  acc_optimizer *opt;
  size_t u[3];
  size_t off[4]; /* each unit's first element in the table */
} fs;

static acc_result make_fs(acc_accelerator *acc, const char *strategy, fs *r) {
  acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
  pl.sharding_strategy = parse_strategy(strategy);
  acc_result rc = acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &r->f);
  for (int k = 0; k < 3 && rc == ACC_OK; k++) {
    char name[16];
    snprintf(name, sizeof name, "layer%d", k + 1);
    rc = acc_fsdp_add_unit(r->f, name, (size_t)(2 * k), 2, &r->u[k]);
  }
  static float p[NUMEL];
  init_params(p);
  if (rc == ACC_OK) rc = acc_fsdp_prepare(r->f, p);
  acc_adamw_options ao = adamw();
  if (rc == ACC_OK) rc = acc_optimizer_create_adamw(&r->opt, acc_fsdp_model(r->f), &ao);
  r->off[0] = 0;
  for (int k = 0; k < 3 && rc == ACC_OK; k++) {
    size_t n = 0;
    rc = acc_fsdp_unit_info(r->f, r->u[k], NULL, NULL, NULL, &n);
    r->off[k + 1] = r->off[k] + n;
  }
  return rc;
}

static void free_fs(fs *r) {
  acc_optimizer_destroy(r->opt);
  acc_fsdp_destroy(r->f);
}

/* The full parameters, every unit gathered into p (an evaluation-style forward). */
static acc_result fs_params(fs *r, float *p) {
  for (int k = 0; k < 3; k++) {
    const float *pk;
    acc_result rc = acc_fsdp_unit_forward_begin(r->f, r->u[k], &pk);
    if (rc != ACC_OK) return rc;
    memcpy(p + r->off[k], pk, (r->off[k + 1] - r->off[k]) * sizeof(float));
    if ((rc = acc_fsdp_unit_forward_end(r->f, r->u[k])) != ACC_OK) return rc;
  }
  return acc_fsdp_reshard(r->f);
}

/* One step: the gradient computed from the gathered parameters, each unit's part handed to its
 * backward, clipping, AdamW. die: this process exits inside unit 1's forward (a crash
 * in the middle of a step, while the others wait in a collective). */
static acc_result fs_step(fs *r, int step, int die) {
  static float p[NUMEL], g[NUMEL];
  acc_result rc = ACC_OK;
  for (int k = 0; k < 3 && rc == ACC_OK; k++) {
    const float *pk;
    rc = acc_fsdp_unit_forward_begin(r->f, r->u[k], &pk);
    if (rc != ACC_OK) break;
    if (die == 2 && k == 1) {
      fprintf(stderr, "[rank %d] test_fsdp_zero: stopping on purpose at step %d, inside unit layer2's forward\n",
              rank, step);
      fflush(stderr);
      for (;;) pause(); /* a hung process: alive, in no collective; the launcher ends it */
    }
    if (die && k == 1) {
      fprintf(stderr, "[rank %d] test_fsdp_zero: dying on purpose at step %d, inside unit layer2's forward\n", rank,
              step);
      fflush(stderr);
      _Exit(3);
    }
    memcpy(p + r->off[k], pk, (r->off[k + 1] - r->off[k]) * sizeof(float));
    rc = acc_fsdp_unit_forward_end(r->f, r->u[k]);
  }
  if (rc != ACC_OK) return rc;
  memset(g, 0, sizeof g);
  mlp_grad(p, g, step);
  for (int k = 3; k-- > 0 && rc == ACC_OK;) {
    const float *pk;
    float *gk;
    rc = acc_fsdp_unit_backward_begin(r->f, r->u[k], &pk, &gk);
    if (rc != ACC_OK) break;
    for (size_t i = r->off[k]; i < r->off[k + 1]; i++) gk[i - r->off[k]] += g[i];
    rc = acc_fsdp_unit_backward_end(r->f, r->u[k]);
  }
  float norm;
  if (rc == ACC_OK) rc = acc_fsdp_clip_grad_norm(r->f, 0.5f, 2.0, &norm);
  if (rc == ACC_OK) rc = acc_optimizer_step(r->opt);
  if (rc == ACC_OK) rc = acc_optimizer_zero_grad(r->opt);
  return rc;
}

static acc_accelerator *open_acc(void) {
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_accelerator_process_index(acc);
  world = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  return acc;
}

/* Loads DIR/ckpt (or not), trains the second half, compares with DIR/expected.f32. */
static int run_resume(const char *dir, const char *strategy, int load) {
  acc_accelerator *acc = open_acc();
  fs r;
  REQUIRE_OK(make_fs(acc, strategy, &r));
  char *ck = join(dir, "ckpt");
  if (load) REQUIRE_OK(acc_fsdp_load_state(r.f, r.opt, ck));
  for (int step = HALF; step < STEPS; step++) REQUIRE_OK(fs_step(&r, step, 0));
  static float p[NUMEL], want[NUMEL];
  REQUIRE_OK(fs_params(&r, p));
  char *ex = join(dir, "expected.f32");
  FILE *fp = fopen(ex, "rb");
  CHECK(fp && fread(want, sizeof(float), NUMEL, fp) == NUMEL, "cannot read %s", ex);
  if (fp) fclose(fp);
  double top = 0, worst = 0;
  for (size_t i = 0; i < NUMEL; i++) {
    top = fmax(top, fabs((double)want[i]));
    double d = fabs((double)p[i] - want[i]);
    worst = isnan(d) ? INFINITY : fmax(worst, d);
  }
  if (load && world == 2) /* the saving count: the same sums in the same order */
    CHECK(worst == 0, "resumed under %s on the saving count (2) ends %.3g from the uninterrupted ZeRO-2 run; "
          "expected bit-identical", strategy, worst);
  else if (load)
    CHECK(worst <= 1e-5 * top, "resumed under %s on %d processes ends %.3g from the uninterrupted ZeRO-2 run (largest "
          "parameter %.3g; allowed 1e-5 of it)", strategy, world, worst, top);
  else
    CHECK(worst > 1e-3 * top, "a run that did not load ends %.3g from the reference: the check cannot fail", worst);
  if (rank == 0) printf("%s on %d processes, %s: largest difference %.3g (largest parameter %.3g)\n", strategy, world,
                        load ? "resumed" : "fresh", worst, top);
  free(ex);
  free(ck);
  free_fs(&r);
  acc_accelerator_destroy(acc);
  return acc_test_finish("test_fsdp_zero");
}

/* Elastic restart under FSDP (accelerate launch --max_restarts 1): sharded checkpoints every 10
 * steps into DIR/step_<n>; in the first attempt process 1 dies inside step 23; the restarted group
 * loads the newest complete checkpoint (step_20) and must end bit-identical to an uninterrupted
 * run computed alongside in the same processes. */
static int run_elastic(const char *dir, const char *strategy) {
  acc_accelerator *acc = open_acc();
  const char *rc_env = getenv("ACCELERATE_RESTART_COUNT");
  const int attempt = rc_env ? atoi(rc_env) : 0;
  fs r;
  REQUIRE_OK(make_fs(acc, strategy, &r));
  int start = 0;
  for (int s = STEPS; s > 0 && !start; s -= 10) {
    char name[32];
    snprintf(name, sizeof name, "step_%d", s);
    char *ck = join(dir, name);
    if (acc_checkpoint_is_complete(ck)) {
      REQUIRE_OK(acc_fsdp_load_state(r.f, r.opt, ck));
      start = s;
    }
    free(ck);
  }
  if (attempt == 0)
    CHECK(start == 0, "the first attempt found checkpoint step_%d: the directory was not clean", start);
  else
    CHECK(start == 20, "attempt %d resumed from step %d; expected 20 (process 1 died in step 23)", attempt, start);
  for (int step = start; step < STEPS; step++) {
    if (step > 0 && step % 10 == 0 && step > start) {
      char name[32];
      snprintf(name, sizeof name, "step_%d", step);
      char *ck = join(dir, name);
      REQUIRE_OK(acc_fsdp_save_state(r.f, r.opt, ck));
      free(ck);
    }
    REQUIRE_OK(fs_step(&r, step, attempt == 0 && step == 23 && rank == 1));
  }
  CHECK(attempt == 1, "the run finished in attempt %d; process 1 should have died in attempt 0", attempt);
  fs ref;
  REQUIRE_OK(make_fs(acc, strategy, &ref));
  for (int step = 0; step < STEPS; step++) REQUIRE_OK(fs_step(&ref, step, 0));
  static float a[NUMEL], b[NUMEL];
  REQUIRE_OK(fs_params(&r, a));
  REQUIRE_OK(fs_params(&ref, b));
  size_t at = 0;
  CHECK(acc_test_same_f32_n(a, b, NUMEL, &at), "the restarted run differs from the uninterrupted one at element %zu "
        "(%.9g vs %.9g)", at, (double)a[at], (double)b[at]);
  if (rank == 0) printf("%s on %d processes: restarted from step %d in attempt %d, bit-identical\n", strategy, world,
                        start, attempt);
  free_fs(&ref);
  free_fs(&r);
  acc_accelerator_destroy(acc);
  return acc_test_finish("test_fsdp_zero");
}

/* Process 1 stops (alive, in no collective) inside unit layer2's forward at step 3; the others wait
 * in the next FSDP collective, print a hang report naming it, and fail at ACCELERATE_TIMEOUT with
 * an error naming the unit (checked by the ctest's output regex): never a silent hang. */
static int run_hang(const char *strategy) {
  acc_accelerator *acc = open_acc();
  fs r;
  REQUIRE_OK(make_fs(acc, strategy, &r));
  for (int step = 0; step < 5; step++) {
    acc_result rc = fs_step(&r, step, step == 3 && rank == 1 ? 2 : 0);
    if (rc != ACC_OK) {
      fprintf(stderr, "[rank %d] test_fsdp_zero: step %d failed: %s\n", rank, step, acc_last_error());
      return 1;
    }
  }
  fprintf(stderr, "[rank %d] test_fsdp_zero: all 5 steps finished although process 1 stopped\n", rank);
  return 1;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "save")) return run_save(argv[2]);
  if (argc >= 4 && !strcmp(argv[1], "resume")) return run_resume(argv[2], argv[3], 1);
  if (argc >= 4 && !strcmp(argv[1], "fresh")) return run_resume(argv[2], argv[3], 0);
  if (argc >= 4 && !strcmp(argv[1], "elastic")) return run_elastic(argv[2], argv[3]);
  if (argc >= 3 && !strcmp(argv[1], "hang")) return run_hang(argv[2]);
  fprintf(stderr, "usage: test_fsdp_zero save DIR | resume DIR STRATEGY | fresh DIR STRATEGY | elastic DIR STRATEGY\n");
  return 2;
}
