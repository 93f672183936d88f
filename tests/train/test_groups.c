/* Parameter groups (regression for new-user review R2: one optimizer per learning rate updated
 * every weight twice). SGD and AdamW with two groups of different lr and weight decay against a
 * hand-computed reference, a parameter in no group left alone, bad group lists, schedulers
 * scaling each group's own base lr, checkpoint scalars per group, O(1) state access, and the
 * scheduler-sizing helper. */
#include <math.h>

#include "acc_test.h"

static float w[3], b[1], frozen[2], gw[3], gb[1], gf[2];

static acc_model *make_model(void) {
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, gw, 1, (int64_t[]){3}));
  REQUIRE_OK(acc_model_add_parameter(m, "b", b, gb, 1, (int64_t[]){1}));
  REQUIRE_OK(acc_model_add_parameter(m, "other", frozen, gf, 1, (int64_t[]){2}));
  return m;
}

static void reset(void) {
  for (int i = 0; i < 3; i++) {
    w[i] = 0.5f + 0.25f * (float)i;
    gw[i] = 0.1f * (float)(i + 1);
  }
  b[0] = -0.75f;
  gb[0] = 0.3f;
  frozen[0] = frozen[1] = 2.0f;
  gf[0] = gf[1] = 7.0f;
}

static const char *wn[] = {"w"}, *bn[] = {"b"};

static void test_sgd(void) {
  reset();
  acc_model *m = make_model();
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.1;
  so.weight_decay = 0.01;
  /* group 0: the options' lr (0.1), its own weight decay 0.2; group 1: lr 0.5, no weight decay */
  acc_param_group g[2] = {{wn, 1, -1.0, 0.2}, {bn, 1, 0.5, 0.0}};
  acc_optimizer *o = NULL;
  CHECK_OK(acc_optimizer_create_sgd_groups(&o, m, g, 2, &so));
  CHECK(acc_optimizer_group_count(o) == 2, "2 groups");
  CHECK(acc_optimizer_group_lr(o, 0) == 0.1 && acc_optimizer_group_lr(o, 1) == 0.5, "group lrs");
  CHECK(acc_optimizer_group_weight_decay(o, 0) == 0.2 && acc_optimizer_group_weight_decay(o, 1) == 0.0, "wd");
  CHECK(acc_optimizer_has_parameter(o, 0) && acc_optimizer_has_parameter(o, 1) && !acc_optimizer_has_parameter(o, 2),
        "membership");
  /* torch.optim.SGD: p -= lr * (g + wd * p), per group */
  float ew[3], eb = b[0] - 0.5f * gb[0];
  for (int i = 0; i < 3; i++) ew[i] = w[i] - 0.1f * (gw[i] + 0.2f * w[i]);
  CHECK_OK(acc_optimizer_step(o));
  for (int i = 0; i < 3; i++) CHECK(fabsf(w[i] - ew[i]) <= 1e-7f, "w[%d] = %.9g, expected %.9g", i, (double)w[i], (double)ew[i]);
  CHECK(fabsf(b[0] - eb) <= 1e-7f, "b = %.9g, expected %.9g", (double)b[0], (double)eb);
  CHECK(frozen[0] == 2.0f && frozen[1] == 2.0f, "a parameter in no group is not stepped");
  CHECK_OK(acc_optimizer_zero_grad(o));
  CHECK(gw[0] == 0 && gb[0] == 0 && gf[0] == 7.0f, "zero_grad zeroes only the optimizer's parameters");
  CHECK(acc_optimizer_scalar_count(o) == 9, "7 scalars + 2 for group 1 (got %zu)", acc_optimizer_scalar_count(o));
  CHECK_OK(acc_optimizer_scalar_set(o, "group1.lr", 0.25));
  CHECK(acc_optimizer_group_lr(o, 1) == 0.25, "group1.lr set");
  CHECK_ERR(acc_optimizer_scalar_set(o, "group1.lr", -1.0), ACC_ERR_INVALID_ARGUMENT, "group1.lr");
  CHECK_ERR(acc_optimizer_scalar_set(o, "group2.lr", 0.1), ACC_ERR_MISMATCH, "group2.lr");
  /* set_lr: every group */
  CHECK_OK(acc_optimizer_set_lr(o, 0.3));
  CHECK(acc_optimizer_group_lr(o, 0) == 0.3 && acc_optimizer_group_lr(o, 1) == 0.3, "set_lr sets every group");
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
}

static void test_adamw(void) {
  reset();
  acc_model *m = make_model();
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  ao.lr = 0.01;
  ao.weight_decay = 0.1;
  acc_param_group g[2] = {{wn, 1, 0.02, -1.0}, {bn, 1, 0.05, 0.0}};
  acc_optimizer *o = NULL;
  CHECK_OK(acc_optimizer_create_adamw_groups(&o, m, g, 2, &ao));
  CHECK(acc_optimizer_group_weight_decay(o, 0) == 0.1, "group 0 takes the options' weight decay");
  /* Reference, two steps with the same gradient, in double: decoupled decay, then Adam. */
  double rw[3], rb = b[0], mw[3] = {0}, vw[3] = {0}, mb = 0, vb = 0;
  for (int i = 0; i < 3; i++) rw[i] = w[i];
  for (int t = 1; t <= 2; t++) {
    double bc1 = 1 - pow(0.9, t), bc2 = 1 - pow(0.999, t);
    for (int i = 0; i < 3; i++) {
      rw[i] *= 1 - 0.02 * 0.1;
      mw[i] = 0.9 * mw[i] + 0.1 * gw[i];
      vw[i] = 0.999 * vw[i] + 0.001 * (double)gw[i] * gw[i];
      rw[i] -= 0.02 / bc1 * mw[i] / (sqrt(vw[i]) / sqrt(bc2) + 1e-8);
    }
    mb = 0.9 * mb + 0.1 * gb[0];
    vb = 0.999 * vb + 0.001 * (double)gb[0] * gb[0];
    rb -= 0.05 / bc1 * mb / (sqrt(vb) / sqrt(bc2) + 1e-8);
    CHECK_OK(acc_optimizer_step(o));
  }
  for (int i = 0; i < 3; i++)
    CHECK(fabs(w[i] - rw[i]) <= 1e-6 * fabs(rw[i]) + 1e-7, "w[%d] = %.9g, expected %.9g", i, (double)w[i], rw[i]);
  CHECK(fabs(b[0] - rb) <= 1e-6 * fabs(rb) + 1e-7, "b = %.9g, expected %.9g", (double)b[0], rb);
  CHECK(frozen[0] == 2.0f, "a parameter in no group is not stepped");
  /* state: only the optimizer's parameters, O(1) per index, names in parameter order */
  CHECK(acc_optimizer_state_count(o) == 4, "4 state tensors (got %zu)", acc_optimizer_state_count(o));
  const char *name = NULL;
  CHECK_OK(acc_optimizer_state_get(o, 3, &name, NULL, NULL, NULL, NULL));
  CHECK(name && strcmp(name, "state.b.exp_avg_sq") == 0, "state 3 is %s", name ? name : "?");
  CHECK_ERR(acc_optimizer_state_get(o, 4, &name, NULL, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out of range");
  float z[2] = {0, 0};
  CHECK_ERR(acc_optimizer_state_set(o, "state.other.exp_avg", z, 2, 1, (int64_t[]){2}), ACC_ERR_MISMATCH,
            "state.other.exp_avg");

  /* a scheduler scales each group's own base lr */
  acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
  sc.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  sc.num_warmup_steps = 4;
  sc.num_training_steps = 10;
  acc_scheduler *s = NULL;
  CHECK_OK(acc_scheduler_create(&s, o, &sc));
  CHECK(acc_scheduler_group_count(s) == 2, "scheduler groups");
  CHECK(acc_optimizer_group_lr(o, 0) == 0.0 && acc_optimizer_group_lr(o, 1) == 0.0, "warmup starts at 0");
  CHECK_OK(acc_scheduler_step(s));
  CHECK(acc_optimizer_group_lr(o, 0) == 0.02 * 0.25 && acc_optimizer_group_lr(o, 1) == 0.05 * 0.25,
        "step 1: lrs %g %g", acc_optimizer_group_lr(o, 0), acc_optimizer_group_lr(o, 1));
  CHECK_OK(acc_scheduler_set_group_base_lr(s, 1, 0.08));
  CHECK(acc_optimizer_group_lr(o, 1) == 0.08 * 0.25, "set_group_base_lr re-applies");
  CHECK_ERR(acc_scheduler_set_group_base_lr(s, 2, 0.1), ACC_ERR_INVALID_ARGUMENT, "group 2");
  acc_scheduler_destroy(s);
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
}

static void test_bad_groups(void) {
  acc_model *m = make_model();
  acc_optimizer *o = NULL;
  const char *missing[] = {"nope"}, *both[] = {"w", "b"};
  acc_param_group g1[1] = {{missing, 1, -1, -1}};
  CHECK_ERR(acc_optimizer_create_sgd_groups(&o, m, g1, 1, NULL), ACC_ERR_INVALID_ARGUMENT, "'nope'");
  CHECK(o == NULL, "no optimizer on failure");
  acc_param_group g2[2] = {{both, 2, -1, -1}, {wn, 1, -1, -1}};
  CHECK_ERR(acc_optimizer_create_adamw_groups(&o, m, g2, 2, NULL), ACC_ERR_INVALID_ARGUMENT, "'w' is in group 0 and in group 1");
  CHECK_ERR(acc_optimizer_create_sgd_groups(&o, m, g2, 0, NULL), ACC_ERR_INVALID_ARGUMENT, "n_groups is 0");
  CHECK_ERR(acc_optimizer_create_sgd_groups(&o, m, NULL, 1, NULL), ACC_ERR_INVALID_ARGUMENT, "groups is NULL");
  acc_param_group g3[1] = {{wn, 1, INFINITY, -1}};
  CHECK_ERR(acc_optimizer_create_sgd_groups(&o, m, g3, 1, NULL), ACC_ERR_INVALID_ARGUMENT, "group 0");
  acc_model_destroy(m);
}

static void test_training_steps(void) {
  int64_t t = 0, wu = 0;
  /* 25 batches per process, 3 epochs, accumulation 4: 7 optimizer steps per epoch (the last
   * window is partial), 2 processes step the scheduler twice each */
  CHECK_OK(acc_scheduler_training_steps(25, 3, 4, 2, 0, 0.1, &t, &wu));
  CHECK(t == 42 && wu == 4, "training %lld warmup %lld", (long long)t, (long long)wu);
  CHECK_OK(acc_scheduler_training_steps(25, 3, 4, 2, 1, 0.0, &t, &wu));
  CHECK(t == 21 && wu == 0, "split_batches: one scheduler step per optimizer step (%lld)", (long long)t);
  /* the same global batch of 32 at 1 x 32 and 2 x 16 over 480 samples: 15 optimizer steps,
   * 10 % warmup; the learning rate after every optimizer step is identical (the scheduler steps
   * once per process per optimizer step, as the Accelerator steps it) */
  double lr1[15], lr2[15];
  for (int np = 1; np <= 2; np++) {
    CHECK_OK(acc_scheduler_training_steps(15, 1, 1, np, 0, 0.1, &t, &wu));
    CHECK(t == 15 * np && wu == np, "%d process(es): training %lld warmup %lld, expected %d and %d", np,
          (long long)t, (long long)wu, 15 * np, np);
    float wv[1] = {0}, gv[1] = {0};
    int64_t s1[1] = {1};
    acc_model *m;
    REQUIRE_OK(acc_model_create(&m));
    REQUIRE_OK(acc_model_add_parameter(m, "w", wv, gv, 1, s1));
    acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
    so.lr = 1.0;
    acc_optimizer *o;
    REQUIRE_OK(acc_optimizer_create_sgd(&o, m, &so));
    acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
    sc.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
    sc.num_training_steps = t;
    sc.num_warmup_steps = wu;
    acc_scheduler *s;
    REQUIRE_OK(acc_scheduler_create(&s, o, &sc));
    for (int k = 0; k < 15; k++) {
      for (int r = 0; r < np; r++) REQUIRE_OK(acc_scheduler_step(s));
      (np == 1 ? lr1 : lr2)[k] = acc_optimizer_get_lr(o);
    }
    acc_scheduler_destroy(s);
    acc_optimizer_destroy(o);
    acc_model_destroy(m);
  }
  int diff = 0;
  for (int k = 0; k < 15; k++) diff += lr1[k] != lr2[k];
  CHECK(diff == 0, "1 x 32 and 2 x 16: %d optimizer steps with different learning rates (step 1: %g vs %g)", diff,
        lr1[0], lr2[0]);
  CHECK_ERR(acc_scheduler_training_steps(25, 3, 0, 2, 0, 0.1, &t, &wu), ACC_ERR_INVALID_ARGUMENT,
            "gradient_accumulation_steps");
  CHECK_ERR(acc_scheduler_training_steps(INT64_MAX / 2, INT64_MAX / 2, 1, 2, 0, 0.1, &t, &wu),
            ACC_ERR_INVALID_ARGUMENT, "overflows");
}

int main(void) {
  test_sgd();
  test_adamw();
  test_bad_groups();
  test_training_steps();
  return acc_test_finish("train_groups");
}
