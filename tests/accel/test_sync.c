/* Accelerate's gradient-synchronization rules and scheduler stepping
 * rules through a real prepared loader, run by the launcher.
 *  - 80 samples, batch 16, gradient_accumulation_steps 2: sync flags F,T,F,T,T on 1 process,
 *    F,T,T on 2 (3 batches each); the counter restarts every epoch;
 *  - before any accumulate() every batch syncs;
 *  - optimizer_step / zero_grad do nothing on non-sync batches;
 *  - LambdaLR 1 - n/10 at lr 1.0: 0.9 after one step on 1 process, 0.8 on 2; unchanged after a
 *    skipped (fp16 overflow) step; step_scheduler_with_optimizer=0: 0.9 then 0.8 always;
 *    split_batches: one step per call. */
#include <math.h>

#include "acc_test.h"

static int rank, nprocs;

static int64_t ids[80];

typedef struct tiny {
  float w[2], g[2];
  acc_model *m;
} tiny;

static void tiny_init(tiny *t) {
  memset(t, 0, sizeof *t);
  t->w[0] = 1.0f;
  t->w[1] = -2.0f;
  REQUIRE_OK(acc_model_create(&t->m));
  int64_t shape[1] = {2};
  REQUIRE_OK(acc_model_add_parameter(t->m, "w", t->w, t->g, 1, shape));
}

/* The flags Accelerate produces: sync on every gas-th batch and on the last one. */
static int expected_sync(int64_t i, int64_t nbatches, int gas) {
  return (i + 1) % gas == 0 || i == nbatches - 1;
}

static void test_sync_flags(int gas) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = gas;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_gradient_accumulation_steps(acc) == gas, "gas %d",
        acc_accelerator_gradient_accumulation_steps(acc));
  tiny t;
  tiny_init(&t);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, t.m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.5;
  acc_optimizer *opt;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, t.m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));

  /* before any accumulate(): sync_gradients is 1 and the optimizer steps */
  CHECK(acc_accelerator_sync_gradients(acc) == 1, "sync_gradients must start at 1");
  CHECK(acc_accelerator_step(acc) == 0, "step counter starts at 0");
  t.g[0] = 1.0f;
  t.g[1] = 2.0f;
  REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
  CHECK(t.w[0] == 0.5f && t.w[1] == -3.0f, "step without accumulate: w = %g %g", t.w[0], t.w[1]);
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  CHECK(t.g[0] == 0.0f && t.g[1] == 0.0f, "zero_grad without accumulate must zero");

  acc_field_desc f = {ACC_I64, 1};
  const void *data[1] = {ids};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 80, &f, 1, data));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 16;
  lo.prefetch = 0;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  const int64_t nb = acc_dataloader_len(dl);
  const int64_t expect_nb = (5 + nprocs - 1) / nprocs; /* 5 batches, even_batches pads */
  CHECK(nb == expect_nb, "batches per process %lld, expected %lld", (long long)nb, (long long)expect_nb);

  for (int epoch = 0; epoch < 2; epoch++) {
    char got[16] = {0};
    int64_t i = 0;
    const acc_batch *b;
    for (;;) {
      REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &b));
      if (!b) break;
      REQUIRE_OK(acc_accelerator_accumulate(acc));
      int s = acc_accelerator_sync_gradients(acc);
      if (i < 15) got[i] = s ? 'T' : 'F';
      CHECK(s == expected_sync(i, nb, gas), "epoch %d batch %lld: sync %d", epoch, (long long)i, s);
      /* a gradient for this batch; on non-sync batches step/zero_grad must be no-ops */
      float w0 = t.w[0], w1 = t.w[1];
      t.g[0] += 1.0f;
      t.g[1] += 1.0f;
      float g0 = t.g[0];
      REQUIRE_OK(acc_accelerator_backward(acc));
      REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
      if (!s) {
        CHECK(t.w[0] == w0 && t.w[1] == w1, "optimizer_step changed parameters on a non-sync batch");
      } else {
        CHECK(t.w[0] != w0, "optimizer_step did not step on a sync batch");
      }
      REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
      if (!s)
        CHECK(t.g[0] == g0, "zero_grad dropped accumulated gradients on a non-sync batch (%g)", t.g[0]);
      else
        CHECK(t.g[0] == 0.0f && t.g[1] == 0.0f, "zero_grad did not zero on a sync batch");
      i++;
    }
    CHECK(i == nb, "epoch %d: %lld batches", epoch, (long long)i);
    CHECK(acc_accelerator_step(acc) == 0, "the last batch restarts the counter: step %lld",
          (long long)acc_accelerator_step(acc));
    if (gas == 2 && nprocs == 1) CHECK(strcmp(got, "FTFTT") == 0, "1 process: flags %s, expected FTFTT", got);
    if (gas == 2 && nprocs == 2) CHECK(strcmp(got, "FTT") == 0, "2 processes: flags %s, expected FTT", got);
    if (gas == 3 && nprocs == 1) CHECK(strcmp(got, "FFTFT") == 0, "1 process gas 3: flags %s", got);
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(t.m);
  acc_accelerator_destroy(acc);
}

/* Manual accumulation outside a loader: plain modulo counter, never reset. */
static void test_sync_without_loader(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = 3;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  const char *want = "FFTFFTFFT";
  for (int i = 0; i < 9; i++) {
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    CHECK(acc_accelerator_sync_gradients(acc) == (want[i] == 'T'), "batch %d: sync %d", i,
          acc_accelerator_sync_gradients(acc));
    CHECK(acc_accelerator_step(acc) == i + 1, "counter %lld", (long long)acc_accelerator_step(acc));
  }
  /* backward scale is 1/gas without fp16 */
  CHECK(acc_accelerator_backward_scale(acc) == 1.0f / 3.0f, "backward_scale %g", acc_accelerator_backward_scale(acc));
  acc_accelerator_destroy(acc);
}

static double one_minus_tenth(int64_t n, void *payload) {
  (void)payload;
  return 1.0 - (double)n / 10.0;
}

typedef struct sched_setup {
  acc_accelerator *acc;
  tiny t;
  acc_optimizer *opt;
  acc_scheduler *sched;
} sched_setup;

static void sched_setup_create(sched_setup *s, int mp, int split, int with_opt) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.mixed_precision = mp;
  ao.split_batches = split;
  ao.step_scheduler_with_optimizer = with_opt;
  REQUIRE_OK(acc_accelerator_create(&s->acc, &ao));
  tiny_init(&s->t);
  REQUIRE_OK(acc_accelerator_prepare_model(s->acc, s->t.m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 1.0;
  REQUIRE_OK(acc_optimizer_create_sgd(&s->opt, s->t.m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(s->acc, s->opt));
  acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
  sc.kind = ACC_SCHEDULER_LAMBDA;
  sc.fn = one_minus_tenth;
  REQUIRE_OK(acc_scheduler_create(&s->sched, s->opt, &sc));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(s->acc, s->sched));
  CHECK(acc_scheduler_get_last_lr(s->sched) == 1.0, "initial lr %g", acc_scheduler_get_last_lr(s->sched));
}

static void sched_setup_destroy(sched_setup *s) {
  acc_scheduler_destroy(s->sched);
  acc_optimizer_destroy(s->opt);
  acc_model_destroy(s->t.m);
  acc_accelerator_destroy(s->acc);
}

/* One training step (gradients 0.01 per element, or inf when overflow). */
static void train_step(sched_setup *s, int overflow) {
  REQUIRE_OK(acc_accelerator_accumulate(s->acc));
  float sc = acc_accelerator_backward_scale(s->acc);
  s->t.g[0] = overflow ? INFINITY : 0.01f * sc;
  s->t.g[1] = 0.01f * sc;
  REQUIRE_OK(acc_accelerator_backward(s->acc));
  REQUIRE_OK(acc_accelerator_optimizer_step(s->acc, s->opt));
  REQUIRE_OK(acc_accelerator_scheduler_step(s->acc, s->sched));
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(s->acc, s->opt));
}

static int close_to(double a, double b) { return fabs(a - b) < 1e-12; }

static void test_scheduler_rules(void) {
  /* stepped with the optimizer: num_processes inner steps per call */
  sched_setup s;
  sched_setup_create(&s, ACC_PRECISION_NO, 0, 1);
  train_step(&s, 0);
  double want = nprocs == 1 ? 0.9 : 1.0 - nprocs / 10.0;
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), want), "after one step: lr %g, expected %g",
        acc_scheduler_get_last_lr(s.sched), want);
  CHECK(close_to(acc_optimizer_get_lr(s.opt), want), "optimizer lr %g", acc_optimizer_get_lr(s.opt));
  sched_setup_destroy(&s);

  /* fp16: a skipped step leaves the lr unchanged (Accelerate's test: 0.8 stays 0.8 on 2 processes) */
  sched_setup_create(&s, ACC_PRECISION_FP16, 0, 1);
  train_step(&s, 0);
  CHECK(!acc_accelerator_optimizer_step_was_skipped(s.acc), "a finite step was skipped");
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), want), "fp16 first step: lr %g", acc_scheduler_get_last_lr(s.sched));
  float w0 = s.t.w[0];
  train_step(&s, 1);
  CHECK(acc_accelerator_optimizer_step_was_skipped(s.acc), "an inf gradient must skip the step");
  CHECK(s.t.w[0] == w0, "a skipped step changed the parameters");
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), want), "after a skipped step: lr %g, expected %g",
        acc_scheduler_get_last_lr(s.sched), want);
  sched_setup_destroy(&s);

  /* step_scheduler_with_optimizer = 0: one inner step per call, always */
  sched_setup_create(&s, ACC_PRECISION_NO, 0, 0);
  train_step(&s, 0);
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), 0.9), "not with optimizer: lr %g, expected 0.9",
        acc_scheduler_get_last_lr(s.sched));
  train_step(&s, 0);
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), 0.8), "not with optimizer: lr %g, expected 0.8",
        acc_scheduler_get_last_lr(s.sched));
  sched_setup_destroy(&s);

  /* ... even on a non-sync batch */
  {
    acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
    ao.gradient_accumulation_steps = 2;
    ao.step_scheduler_with_optimizer = 0;
    sched_setup s2;
    REQUIRE_OK(acc_accelerator_create(&s2.acc, &ao));
    tiny_init(&s2.t);
    acc_optimizer *o;
    acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
    so.lr = 1.0;
    REQUIRE_OK(acc_optimizer_create_sgd(&o, s2.t.m, &so));
    acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
    sc.kind = ACC_SCHEDULER_LAMBDA;
    sc.fn = one_minus_tenth;
    acc_scheduler *sch;
    REQUIRE_OK(acc_scheduler_create(&sch, o, &sc));
    REQUIRE_OK(acc_accelerator_accumulate(s2.acc));
    CHECK(!acc_accelerator_sync_gradients(s2.acc), "first of two batches does not sync");
    REQUIRE_OK(acc_accelerator_scheduler_step(s2.acc, sch));
    CHECK(close_to(acc_scheduler_get_last_lr(sch), 0.9), "non-sync batch, not with optimizer: lr %g",
          acc_scheduler_get_last_lr(sch));
    acc_scheduler_destroy(sch);
    acc_optimizer_destroy(o);
    acc_model_destroy(s2.t.m);
    acc_accelerator_destroy(s2.acc);
  }

  /* with the optimizer, a non-sync batch does not step the scheduler */
  {
    acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
    ao.gradient_accumulation_steps = 2;
    acc_accelerator *acc;
    REQUIRE_OK(acc_accelerator_create(&acc, &ao));
    tiny t;
    tiny_init(&t);
    acc_optimizer *o;
    acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
    so.lr = 1.0;
    REQUIRE_OK(acc_optimizer_create_sgd(&o, t.m, &so));
    acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
    sc.kind = ACC_SCHEDULER_LAMBDA;
    sc.fn = one_minus_tenth;
    acc_scheduler *sch;
    REQUIRE_OK(acc_scheduler_create(&sch, o, &sc));
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    REQUIRE_OK(acc_accelerator_scheduler_step(acc, sch));
    CHECK(acc_scheduler_get_last_lr(sch) == 1.0, "non-sync batch stepped the scheduler: lr %g",
          acc_scheduler_get_last_lr(sch));
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    REQUIRE_OK(acc_accelerator_scheduler_step(acc, sch));
    CHECK(close_to(acc_scheduler_get_last_lr(sch), want), "sync batch: lr %g, expected %g",
          acc_scheduler_get_last_lr(sch), want);
    acc_scheduler_destroy(sch);
    acc_optimizer_destroy(o);
    acc_model_destroy(t.m);
    acc_accelerator_destroy(acc);
  }

  /* split_batches: one inner step per call whatever the number of processes */
  sched_setup_create(&s, ACC_PRECISION_NO, 1, 1);
  train_step(&s, 0);
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), 0.9), "split_batches: lr %g, expected 0.9",
        acc_scheduler_get_last_lr(s.sched));
  train_step(&s, 0);
  CHECK(close_to(acc_scheduler_get_last_lr(s.sched), 0.8), "split_batches: lr %g, expected 0.8",
        acc_scheduler_get_last_lr(s.sched));
  sched_setup_destroy(&s);
}

int main(void) {
  for (int i = 0; i < 80; i++) ids[i] = i;
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  if (getenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")) {
    fprintf(stderr, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS is set: it overrides the test's values\n");
    return 1;
  }
  test_sync_flags(2);
  test_sync_flags(3);
  test_sync_without_loader();
  test_scheduler_rules();
  acc_state_destroy(st);
  return acc_test_finish("accel_sync");
}
