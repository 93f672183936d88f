/* LR schedulers: lr at chosen steps against transformers' formulas computed here, torch LambdaLR
 * step-0 behaviour, state round trip, errors. */
#include <math.h>

#include "acc_test.h"

static const double PI = 3.14159265358979323846;

static double expect(acc_scheduler_kind kind, int64_t s, int64_t w, int64_t t) {
  double warm = (double)s / (double)(w > 1 ? w : 1);
  switch (kind) {
    case ACC_SCHEDULER_CONSTANT: return 1.0;
    case ACC_SCHEDULER_CONSTANT_WITH_WARMUP: return s < w ? warm : 1.0;
    case ACC_SCHEDULER_LINEAR_WITH_WARMUP: return s < w ? warm : fmax(0.0, (double)(t - s) / (double)(t - w));
    case ACC_SCHEDULER_COSINE_WITH_WARMUP:
      return s < w ? warm : fmax(0.0, 0.5 * (1.0 + cos(PI * 0.5 * 2.0 * (double)(s - w) / (double)(t - w))));
    default: return NAN;
  }
}

static double one_minus_tenth(int64_t step, void *payload) {
  (void)payload;
  return 1.0 - (double)step / 10.0;
}

static int calls;
static double counted(int64_t step, void *payload) {
  calls++;
  return *(double *)payload * (double)step;
}

int main(void) {
  acc_model *m;
  float w[1] = {0}, g[1] = {0};
  int64_t s1[] = {1};
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, s1));
  acc_optimizer *o;
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.5;

  acc_scheduler_kind kinds[] = {ACC_SCHEDULER_CONSTANT, ACC_SCHEDULER_CONSTANT_WITH_WARMUP,
                                ACC_SCHEDULER_LINEAR_WITH_WARMUP, ACC_SCHEDULER_COSINE_WITH_WARMUP};
  for (int ki = 0; ki < 4; ki++) {
    REQUIRE_OK(acc_optimizer_create_sgd(&o, m, &so));
    acc_scheduler_options opts = ACC_SCHEDULER_OPTIONS_INIT;
    opts.kind = kinds[ki];
    opts.num_warmup_steps = 3;
    opts.num_training_steps = 11;
    acc_scheduler *s;
    REQUIRE_OK(acc_scheduler_create(&s, o, &opts));
    for (int64_t step = 0; step <= 14; step++) {
      if (step > 0) CHECK_OK(acc_scheduler_step(s));
      double want = 0.5 * expect(kinds[ki], step, 3, 11);
      CHECK(fabs(acc_scheduler_get_last_lr(s) - want) <= 1e-15, "kind %d step %lld: lr %.17g, want %.17g", ki,
            (long long)step, acc_scheduler_get_last_lr(s), want);
      CHECK(acc_optimizer_get_lr(o) == acc_scheduler_get_last_lr(s), "optimizer lr follows");
    }
    acc_scheduler_destroy(s);
    acc_optimizer_destroy(o);
  }

  /* Hand-picked values: warmup 3, 11 training steps, base 0.5. */
  REQUIRE_OK(acc_optimizer_create_sgd(&o, m, &so));
  acc_scheduler_options opts = ACC_SCHEDULER_OPTIONS_INIT;
  opts.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  opts.num_warmup_steps = 3;
  opts.num_training_steps = 11;
  acc_scheduler *s;
  REQUIRE_OK(acc_scheduler_create(&s, o, &opts));
  CHECK(acc_optimizer_get_lr(o) == 0.0, "warmup starts at 0 (torch LambdaLR applies step 0 at creation)");
  CHECK_OK(acc_scheduler_step(s));
  CHECK(fabs(acc_optimizer_get_lr(o) - 0.5 / 3) < 1e-16, "step 1: %.17g", acc_optimizer_get_lr(o));
  CHECK_OK(acc_scheduler_set_state(s, 7, 0.5));
  CHECK(acc_optimizer_get_lr(o) == 0.25, "linear step 7: %.17g", acc_optimizer_get_lr(o));
  CHECK_OK(acc_scheduler_set_state(s, 11, 0.5));
  CHECK(acc_optimizer_get_lr(o) == 0.0, "linear ends at 0");
  acc_scheduler_destroy(s);
  opts.kind = ACC_SCHEDULER_COSINE_WITH_WARMUP;
  REQUIRE_OK(acc_optimizer_set_lr(o, 0.5));
  REQUIRE_OK(acc_scheduler_create(&s, o, &opts));
  CHECK_OK(acc_scheduler_set_state(s, 3, 0.5));
  CHECK(acc_optimizer_get_lr(o) == 0.5, "cosine peak");
  CHECK_OK(acc_scheduler_set_state(s, 7, 0.5));
  CHECK(fabs(acc_optimizer_get_lr(o) - 0.25) < 1e-16, "cosine half-way: %.17g", acc_optimizer_get_lr(o));
  int64_t st;
  double base;
  CHECK_OK(acc_scheduler_get_state(s, &st, &base));
  CHECK(st == 7 && base == 0.5, "state");
  acc_scheduler_destroy(s);
  acc_optimizer_destroy(o);

  /* Lambda, as Accelerate's test: 1 - n/10 from lr 1 gives 0.9 then 0.8. */
  so.lr = 1.0;
  REQUIRE_OK(acc_optimizer_create_sgd(&o, m, &so));
  opts = (acc_scheduler_options)ACC_SCHEDULER_OPTIONS_INIT;
  opts.kind = ACC_SCHEDULER_LAMBDA;
  opts.fn = one_minus_tenth;
  REQUIRE_OK(acc_scheduler_create(&s, o, &opts));
  CHECK(acc_optimizer_get_lr(o) == 1.0, "lambda step 0");
  CHECK_OK(acc_scheduler_step(s));
  CHECK(acc_optimizer_get_lr(o) == 0.9, "lambda step 1: %.17g", acc_optimizer_get_lr(o));
  CHECK_OK(acc_scheduler_step(s));
  CHECK(acc_optimizer_get_lr(o) == 0.8, "lambda step 2: %.17g", acc_optimizer_get_lr(o));
  /* a restored scheduler continues identically */
  acc_scheduler *s2;
  REQUIRE_OK(acc_scheduler_create(&s2, o, &opts));
  CHECK_OK(acc_scheduler_get_state(s, &st, &base));
  CHECK_OK(acc_scheduler_set_state(s2, st, base));
  CHECK_OK(acc_scheduler_step(s));
  double a = acc_scheduler_get_last_lr(s);
  CHECK_OK(acc_scheduler_step(s2));
  CHECK(a == acc_scheduler_get_last_lr(s2) && a == 0.7, "resumed lambda %.17g", acc_scheduler_get_last_lr(s2));
  acc_scheduler_destroy(s2);
  acc_scheduler_destroy(s);
  /* payload is passed; one call per step; a negative factor is refused and the step undone */
  double k = -0.25;
  opts.fn = counted;
  opts.payload = &k;
  REQUIRE_OK(acc_scheduler_create(&s, o, &opts));
  calls = 0;
  CHECK_ERR(acc_scheduler_step(s), ACC_ERR_INVALID_ARGUMENT, "step 1");
  CHECK(calls == 1, "one call per step");
  CHECK_OK(acc_scheduler_get_state(s, &st, NULL));
  CHECK(st == 0, "failed step not counted");
  acc_scheduler_destroy(s);

  opts = (acc_scheduler_options)ACC_SCHEDULER_OPTIONS_INIT;
  opts.kind = ACC_SCHEDULER_LAMBDA;
  CHECK_ERR(acc_scheduler_create(&s, o, &opts), ACC_ERR_INVALID_ARGUMENT, "fn");
  opts.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  CHECK_ERR(acc_scheduler_create(&s, o, &opts), ACC_ERR_INVALID_ARGUMENT, "num_training_steps");
  CHECK_ERR(acc_scheduler_create(&s, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "optimizer");
  acc_scheduler_destroy(NULL);
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
  return acc_test_finish("train_sched");
}
