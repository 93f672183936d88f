/* SGD and AdamW against hand-computed steps and an independent double-precision reference,
 * state export/import (bit-exact resume), state mismatch errors, and gradient clipping. */
#include <math.h>

#include "acc_test.h"

#define NEAR(got, want) (fabs((double)(got) - (want)) <= 2e-6 * fmax(1.0, fabs(want)))

static const float P0[3] = {1.0f, -2.0f, 0.5f};
/* gradient of element k at step t (1-based); element 0 always gets 1 (hand-computed column) */
static float grad_at(int k, int t) {
  static const float g[3][3] = {{1.0f, 1.0f, 1.0f}, {0.5f, -0.25f, 2.0f}, {-3.0f, 0.75f, 0.125f}};
  return g[k][t - 1];
}

typedef struct fixture {
  acc_model *m;
  float w[3], g[3];
} fixture;

static void fixture_init(fixture *f, const char *name) {
  REQUIRE_OK(acc_model_create(&f->m));
  memcpy(f->w, P0, sizeof f->w);
  memset(f->g, 0, sizeof f->g);
  int64_t shape[] = {3};
  REQUIRE_OK(acc_model_add_parameter(f->m, name, f->w, f->g, 1, shape));
}

static void set_grads(fixture *f, int t) {
  for (int k = 0; k < 3; k++) f->g[k] = grad_at(k, t);
}

/* torch.optim.SGD's documented algorithm, in double. */
static void ref_sgd(double lr, double mom, double damp, int nesterov, double wd, double out[3][3]) {
  double p[3] = {P0[0], P0[1], P0[2]}, b[3] = {0};
  for (int t = 1; t <= 3; t++)
    for (int k = 0; k < 3; k++) {
      double g = grad_at(k, t) + wd * p[k];
      if (mom != 0) {
        b[k] = t == 1 ? g : mom * b[k] + (1 - damp) * g;
        g = nesterov ? g + mom * b[k] : b[k];
      }
      p[k] -= lr * g;
      out[t - 1][k] = p[k];
    }
}

static void run_sgd(const char *what, double lr, double mom, double damp, int nesterov, double wd,
                    const double hand[3]) {
  fixture f;
  fixture_init(&f, "w");
  acc_sgd_options o = ACC_SGD_OPTIONS_INIT;
  o.lr = lr; o.momentum = mom; o.dampening = damp; o.nesterov = nesterov; o.weight_decay = wd;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, f.m, &o));
  double ref[3][3];
  ref_sgd(lr, mom, damp, nesterov, wd, ref);
  for (int t = 1; t <= 3; t++) {
    set_grads(&f, t);
    CHECK_OK(acc_optimizer_step(opt));
    for (int k = 0; k < 3; k++)
      CHECK(NEAR(f.w[k], ref[t - 1][k]), "%s step %d elem %d: %.9g, reference %.9g", what, t, k, f.w[k], ref[t - 1][k]);
    CHECK(NEAR(f.w[0], hand[t - 1]), "%s step %d: %.9g, hand-computed %.9g", what, t, f.w[0], hand[t - 1]);
  }
  CHECK(acc_optimizer_step_count(opt) == 3, "step count");
  acc_optimizer_destroy(opt);
  acc_model_destroy(f.m);
}

static void test_sgd(void) {
  /* element 0: p = 1, g = 1 every step (worked by hand in docs/optimizers.md) */
  run_sgd("plain", 0.1, 0, 0, 0, 0, (const double[]){0.9, 0.8, 0.7});
  run_sgd("momentum", 0.1, 0.9, 0, 0, 0, (const double[]){0.9, 0.71, 0.439});
  run_sgd("nesterov", 0.1, 0.9, 0, 1, 0, (const double[]){0.81, 0.539, 0.1951});
  run_sgd("dampening", 0.1, 0.9, 0.5, 0, 0, (const double[]){0.9, 0.76, 0.584});
  run_sgd("weight_decay", 0.1, 0, 0, 0, 0.1, (const double[]){0.89, 0.7811, 0.673289});
  run_sgd("all", 0.05, 0.8, 0, 1, 0.01, (const double[]){0.9091, 0.78596181, 0.637107532});
}

static void ref_adamw(double lr, double b1, double b2, double eps, double wd, double out[3][3]) {
  double p[3] = {P0[0], P0[1], P0[2]}, m[3] = {0}, v[3] = {0};
  for (int t = 1; t <= 3; t++)
    for (int k = 0; k < 3; k++) {
      double g = grad_at(k, t);
      p[k] *= 1 - lr * wd;
      m[k] = b1 * m[k] + (1 - b1) * g;
      v[k] = b2 * v[k] + (1 - b2) * g * g;
      double mhat = m[k] / (1 - pow(b1, t)), vhat = v[k] / (1 - pow(b2, t));
      p[k] -= lr * mhat / (sqrt(vhat) + eps);
      out[t - 1][k] = p[k];
    }
}

static void test_adamw(void) {
  fixture f;
  fixture_init(&f, "w");
  acc_adamw_options o = ACC_ADAMW_OPTIONS_INIT;
  CHECK(o.lr == 1e-3 && o.beta1 == 0.9 && o.beta2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 1e-2,
        "torch defaults");
  o.lr = 0.1;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_adamw(&opt, f.m, &o));
  double ref[3][3];
  ref_adamw(0.1, 0.9, 0.999, 1e-8, 0.01, ref);
  /* constant gradient: bias-corrected m/sqrt(v) = 1, so each step subtracts lr after decay */
  const double hand[3] = {0.899, 0.798101, 0.697302899};
  for (int t = 1; t <= 3; t++) {
    set_grads(&f, t);
    CHECK_OK(acc_optimizer_step(opt));
    for (int k = 0; k < 3; k++)
      CHECK(NEAR(f.w[k], ref[t - 1][k]), "adamw step %d elem %d: %.9g, reference %.9g", t, k, f.w[k], ref[t - 1][k]);
    CHECK(NEAR(f.w[0], hand[t - 1]), "adamw step %d: %.9g, hand %.9g", t, f.w[0], hand[t - 1]);
  }
  /* exp_avg after 3 steps of g = 1: 0.271; exp_avg_sq: 1 - 0.999^3 */
  const char *name;
  const float *data;
  size_t numel;
  CHECK(acc_optimizer_state_count(opt) == 2, "two AdamW buffers");
  CHECK_OK(acc_optimizer_state_get(opt, 0, &name, &data, &numel, NULL, NULL));
  CHECK(strcmp(name, "state.w.exp_avg") == 0 && numel == 3 && NEAR(data[0], 0.271), "%s %g", name, data[0]);
  CHECK_OK(acc_optimizer_state_get(opt, 1, &name, &data, NULL, NULL, NULL));
  CHECK(strcmp(name, "state.w.exp_avg_sq") == 0 && NEAR(data[0], 1 - pow(0.999, 3)), "%s %g", name, data[0]);
  acc_optimizer_destroy(opt);
  acc_model_destroy(f.m);
}

/* Runs 2 steps on A, copies params + optimizer state into fresh B, then one more step on both:
 * parameters and state must be bit-identical. */
static void resume_case(int adamw) {
  fixture a, b;
  fixture_init(&a, "layer.weight");
  fixture_init(&b, "layer.weight");
  acc_optimizer *oa, *ob;
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.03; so.momentum = 0.9; so.dampening = 0.1; so.weight_decay = 0.001;
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  ao.lr = 0.01; ao.beta1 = 0.8; ao.beta2 = 0.95;
  if (adamw) {
    REQUIRE_OK(acc_optimizer_create_adamw(&oa, a.m, &ao));
    ao.lr = 0.5; ao.beta1 = 0.5; /* deliberately different: the scalars must be restored */
    REQUIRE_OK(acc_optimizer_create_adamw(&ob, b.m, &ao));
  } else {
    REQUIRE_OK(acc_optimizer_create_sgd(&oa, a.m, &so));
    so.lr = 0.5;
    REQUIRE_OK(acc_optimizer_create_sgd(&ob, b.m, &so));
    CHECK(acc_optimizer_state_count(oa) == 0, "no momentum buffer before the first step");
  }
  for (int t = 1; t <= 2; t++) {
    set_grads(&a, t);
    CHECK_OK(acc_optimizer_step(oa));
  }
  /* checkpoint A -> B */
  memcpy(b.w, a.w, sizeof a.w);
  for (size_t i = 0; i < acc_optimizer_scalar_count(oa); i++) {
    const char *name;
    double v;
    CHECK_OK(acc_optimizer_scalar_get(oa, i, &name, &v));
    CHECK_OK(acc_optimizer_scalar_set(ob, name, v));
  }
  size_t n = acc_optimizer_state_count(oa);
  CHECK(n == (adamw ? 2u : 1u), "state count %zu", n);
  for (size_t i = 0; i < n; i++) {
    const char *name;
    const float *data;
    size_t numel;
    int ndim;
    const int64_t *shape;
    CHECK_OK(acc_optimizer_state_get(oa, i, &name, &data, &numel, &ndim, &shape));
    CHECK_OK(acc_optimizer_state_set(ob, name, data, numel, ndim, shape));
  }
  CHECK(acc_optimizer_state_count(ob) == n, "restored count");
  CHECK(acc_optimizer_step_count(ob) == 2 && acc_optimizer_get_lr(ob) == acc_optimizer_get_lr(oa), "scalars");
  set_grads(&a, 3);
  set_grads(&b, 3);
  CHECK_OK(acc_optimizer_step(oa));
  CHECK_OK(acc_optimizer_step(ob));
  CHECK(memcmp(a.w, b.w, sizeof a.w) == 0, "%s resume: params differ (%.9g vs %.9g)", adamw ? "adamw" : "sgd", a.w[1],
        b.w[1]);
  for (size_t i = 0; i < n; i++) {
    const float *da, *db;
    CHECK_OK(acc_optimizer_state_get(oa, i, NULL, &da, NULL, NULL, NULL));
    CHECK_OK(acc_optimizer_state_get(ob, i, NULL, &db, NULL, NULL, NULL));
    CHECK(memcmp(da, db, 3 * sizeof(float)) == 0, "state %zu differs", i);
  }
  acc_optimizer_destroy(oa);
  acc_optimizer_destroy(ob);
  acc_model_destroy(a.m);
  acc_model_destroy(b.m);
}

static void test_state_errors(void) {
  fixture a;
  fixture_init(&a, "w");
  acc_model *m4;
  float w4[4] = {0}, g4[4] = {0};
  int64_t s22[] = {2, 2}, s3[] = {3};
  REQUIRE_OK(acc_model_create(&m4));
  REQUIRE_OK(acc_model_add_parameter(m4, "w", w4, g4, 2, s22));
  acc_optimizer *oa, *o4, *sgd;
  REQUIRE_OK(acc_optimizer_create_adamw(&oa, a.m, NULL));
  REQUIRE_OK(acc_optimizer_create_adamw(&o4, m4, NULL));
  REQUIRE_OK(acc_optimizer_create_sgd(&sgd, a.m, NULL));
  const char *name;
  const float *data;
  size_t numel;
  int ndim;
  const int64_t *shape;
  CHECK_OK(acc_optimizer_state_get(oa, 0, &name, &data, &numel, &ndim, &shape));
  CHECK_ERR(acc_optimizer_state_set(o4, name, data, numel, ndim, shape), ACC_ERR_MISMATCH, "parameter 'w' has shape [2, 2]");
  CHECK(strstr(acc_last_error(), "[3]") != NULL, "message names the saved shape: %s", acc_last_error());
  CHECK_ERR(acc_optimizer_state_set(sgd, name, data, numel, ndim, shape), ACC_ERR_MISMATCH, "state.w.exp_avg");
  CHECK_ERR(acc_optimizer_state_set(oa, "state.v.exp_avg", data, 3, 1, s3), ACC_ERR_MISMATCH, "state.v.exp_avg");
  CHECK_ERR(acc_optimizer_scalar_set(sgd, "kind", 1.0), ACC_ERR_MISMATCH, "SGD");
  CHECK_ERR(acc_optimizer_scalar_set(sgd, "beta1", 0.9), ACC_ERR_MISMATCH, "beta1");
  CHECK_ERR(acc_optimizer_scalar_set(oa, "beta2", 1.5), ACC_ERR_INVALID_ARGUMENT, "beta2");
  CHECK_ERR(acc_optimizer_scalar_set(oa, "step", 1.5), ACC_ERR_INVALID_ARGUMENT, "step");
  CHECK_ERR(acc_optimizer_state_get(oa, 2, &name, NULL, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out of range");
  acc_sgd_options bad = ACC_SGD_OPTIONS_INIT;
  bad.nesterov = 1;
  acc_optimizer *x;
  CHECK_ERR(acc_optimizer_create_sgd(&x, a.m, &bad), ACC_ERR_INVALID_ARGUMENT, "Nesterov");
  CHECK_ERR(acc_optimizer_set_lr(sgd, -1.0), ACC_ERR_INVALID_ARGUMENT, "lr");
  /* a parameter added after creation is an error, not silently ignored */
  float w1[1], g1[1];
  int64_t s1[] = {1};
  REQUIRE_OK(acc_model_add_parameter(a.m, "late", w1, g1, 1, s1));
  CHECK_ERR(acc_optimizer_step(sgd), ACC_ERR_INVALID_USAGE, "created over 1");
  acc_optimizer_destroy(oa);
  acc_optimizer_destroy(o4);
  acc_optimizer_destroy(sgd);
  acc_optimizer_destroy(NULL);
  acc_model_destroy(a.m);
  acc_model_destroy(m4);
}

static void test_zero_grad_and_frozen(void) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  float w[2] = {1, 2}, g[2] = {5, 6}, fz[1] = {7};
  int64_t s2[] = {2}, s1[] = {1};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, s2));
  REQUIRE_OK(acc_model_add_parameter(m, "frozen", fz, NULL, 1, s1));
  acc_optimizer *o;
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 1.0; so.momentum = 0.5;
  REQUIRE_OK(acc_optimizer_create_sgd(&o, m, &so));
  CHECK_OK(acc_optimizer_step(o));
  CHECK(w[0] == -4.0f && w[1] == -4.0f && fz[0] == 7.0f, "step skips frozen: %g %g %g", w[0], w[1], fz[0]);
  CHECK(acc_optimizer_state_count(o) == 1, "no state for the frozen parameter");
  CHECK_OK(acc_optimizer_zero_grad(o));
  CHECK(g[0] == 0.0f && g[1] == 0.0f, "zero_grad");
  CHECK_OK(acc_optimizer_set_lr(o, 0.25));
  CHECK(acc_optimizer_get_lr(o) == 0.25, "get_lr");
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
}

static void test_clipping(void) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  float a[2], ga[2], b[1], gb[1];
  int64_t s2[] = {2}, s1[] = {1};
  REQUIRE_OK(acc_model_add_parameter(m, "a", a, ga, 1, s2));
  REQUIRE_OK(acc_model_add_parameter(m, "b", b, gb, 1, s1));
  float total = 0;
  /* 2-norm of (3, 4, -12) is 13 */
  ga[0] = 3; ga[1] = 4; gb[0] = -12;
  CHECK_OK(acc_clip_grad_norm(m, 20.0f, 2.0, &total));
  CHECK(total == 13.0f && ga[0] == 3 && ga[1] == 4 && gb[0] == -12, "no clipping below max_norm (total %g)", total);
  CHECK_OK(acc_clip_grad_norm(m, 6.5f, 2.0, &total));
  float coef = 6.5f / (13.0f + 1e-6f);
  CHECK(total == 13.0f, "total %g", total);
  CHECK(ga[0] == 3 * coef && ga[1] == 4 * coef && gb[0] == -12 * coef, "clipped %.9g %.9g %.9g", ga[0], ga[1], gb[0]);
  CHECK(fabsf(ga[0] - 1.5f) < 1e-6f && fabsf(gb[0] + 6.0f) < 1e-6f, "about half");
  /* inf norm: the largest |g| */
  ga[0] = 3; ga[1] = -4; gb[0] = 2;
  CHECK_OK(acc_clip_grad_norm(m, 1.0f, INFINITY, &total));
  coef = 1.0f / (4.0f + 1e-6f);
  CHECK(total == 4.0f && ga[1] == -4 * coef && gb[0] == 2 * coef, "inf norm %g", total);
  CHECK_ERR(acc_clip_grad_norm(m, 1.0f, 1.0, &total), ACC_ERR_NOT_SUPPORTED, "norm_type 1");
  /* clip by value */
  ga[0] = 3; ga[1] = -4; gb[0] = 1;
  CHECK_OK(acc_clip_grad_value(m, 2.5f));
  CHECK(ga[0] == 2.5f && ga[1] == -2.5f && gb[0] == 1.0f, "clip value %g %g %g", ga[0], ga[1], gb[0]);
  CHECK_ERR(acc_clip_grad_value(m, -1.0f), ACC_ERR_INVALID_ARGUMENT, "clip_value");
  acc_model_destroy(m);
}

int main(void) {
  test_sgd();
  test_adamw();
  resume_case(0);
  resume_case(1);
  test_state_errors();
  test_zero_grad_and_frozen();
  test_clipping();
  return acc_test_finish("train_optim");
}
