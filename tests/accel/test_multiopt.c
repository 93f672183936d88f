/* Several optimizers under fp16 (regression for new-user review R2: the second optimizer_step
 * unscaled the gradients again and the scaler was updated once per optimizer). The review's
 * "twoopt" probe as assertions, with two optimizers over disjoint parameters (a GAN's generator
 * and discriminator): gradients are unscaled exactly once, the scaler is updated once per
 * iteration, an overflow anywhere makes every optimizer skip, an optimizer stepping alone (the
 * other one idle) has its update at the next accumulate, and overlapping optimizers are refused
 * at prepare_optimizer naming the parameter. Also the accelerator's process-control wrappers and
 * the scheduler sizing helper. Run through the launcher at 1 and 2 processes. */
#include <math.h>

#include "acc_test.h"

static float g_w[2] = {1, 1}, g_g[2], d_w[1] = {1}, d_g[1];

static void set_grads(acc_accelerator *acc, float gen, float disc) {
  float s = acc_accelerator_backward_scale(acc);
  g_g[0] = g_g[1] = gen * s; /* the true gradient, scaled as the backward pass would */
  d_g[0] = disc * s;
}

int main(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.mixed_precision = ACC_PRECISION_FP16;
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 1024.0f;
  so.growth_interval = 1000;
  ao.scaler = &so;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  acc_test_rank = acc_accelerator_process_index(acc);
  int n = acc_accelerator_num_processes(acc);
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "gen.w", g_w, g_g, 1, (int64_t[]){2}));
  REQUIRE_OK(acc_model_add_parameter(m, "disc.w", d_w, d_g, 1, (int64_t[]){1}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  const char *gen[] = {"gen.w"}, *disc[] = {"disc.w"};
  acc_sgd_options sgd = ACC_SGD_OPTIONS_INIT;
  sgd.lr = 0.0; /* lr 0: only the gradients matter, as in the probe */
  acc_optimizer *og = NULL, *od = NULL, *all = NULL;
  REQUIRE_OK(acc_optimizer_create_sgd_groups(&og, m, (acc_param_group[]){{gen, 1, -1, -1}}, 1, &sgd));
  REQUIRE_OK(acc_optimizer_create_sgd_groups(&od, m, (acc_param_group[]){{disc, 1, -1, -1}}, 1, &sgd));
  REQUIRE_OK(acc_optimizer_create_sgd(&all, m, &sgd));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, og));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, od));
  /* overlapping parameter sets are refused, naming the parameter */
  CHECK_ERR(acc_accelerator_prepare_optimizer(acc, all), ACC_ERR_INVALID_USAGE, "'gen.w'");

  /* iteration 1: the probe. True gradient 0.25 everywhere. */
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  set_grads(acc, 0.25f, 0.25f);
  CHECK_OK(acc_accelerator_backward(acc));
  CHECK_OK(acc_accelerator_optimizer_step(acc, og));
  CHECK(g_g[0] == 0.25f && d_g[0] == 0.25f, "after step(gen): grads %g %g (expected 0.25)", (double)g_g[0],
        (double)d_g[0]);
  CHECK_ERR(acc_accelerator_optimizer_step(acc, og), ACC_ERR_INVALID_USAGE, "already stepped");
  CHECK_OK(acc_accelerator_optimizer_step(acc, od));
  CHECK(g_g[0] == 0.25f && d_g[0] == 0.25f, "after step(disc): grads %g %g (expected 0.25: unscaled once)",
        (double)g_g[0], (double)d_g[0]);
  float scale = 0;
  int64_t tracker = -1;
  REQUIRE_OK(acc_grad_scaler_get_state(acc_accelerator_grad_scaler(acc), &scale, &tracker));
  CHECK(tracker == 1 && scale == 1024.0f, "one scaler update per iteration: tracker %lld (expected 1), scale %g",
        (long long)tracker, (double)scale);
  CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, og));
  CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, od));

  /* iteration 2: an overflow in the discriminator's gradient on the last process: both skip,
   * the scale backs off once. */
  sgd.lr = 0.5;
  REQUIRE_OK(acc_optimizer_set_lr(og, 0.5));
  REQUIRE_OK(acc_optimizer_set_lr(od, 0.5));
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  set_grads(acc, 0.25f, acc_accelerator_process_index(acc) == n - 1 ? INFINITY : 0.25f);
  CHECK_OK(acc_accelerator_backward(acc));
  CHECK_OK(acc_accelerator_optimizer_step(acc, og));
  CHECK(acc_accelerator_optimizer_step_was_skipped(acc), "the generator's step is skipped");
  CHECK(g_w[0] == 1.0f, "generator weights unchanged (%g)", (double)g_w[0]);
  CHECK_OK(acc_accelerator_optimizer_step(acc, od));
  CHECK(d_w[0] == 1.0f, "discriminator weights unchanged (%g)", (double)d_w[0]);
  REQUIRE_OK(acc_grad_scaler_get_state(acc_accelerator_grad_scaler(acc), &scale, &tracker));
  CHECK(scale == 512.0f && tracker == 0, "one backoff: scale %g (expected 512), tracker %lld", (double)scale,
        (long long)tracker);
  CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, og));
  CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, od));

  /* iteration 3: only the discriminator steps; the scaler update waits for the next accumulate */
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  set_grads(acc, 0.0f, 0.5f);
  CHECK_OK(acc_accelerator_backward(acc));
  CHECK_OK(acc_accelerator_optimizer_step(acc, od));
  CHECK(d_w[0] == 0.75f, "discriminator stepped: %g (expected 0.75)", (double)d_w[0]);
  REQUIRE_OK(acc_grad_scaler_get_state(acc_accelerator_grad_scaler(acc), &scale, &tracker));
  CHECK(tracker == 0, "update pending while the generator has not stepped (tracker %lld)", (long long)tracker);
  CHECK_OK(acc_accelerator_optimizer_zero_grad(acc, od));
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  REQUIRE_OK(acc_grad_scaler_get_state(acc_accelerator_grad_scaler(acc), &scale, &tracker));
  CHECK(tracker == 1 && scale == 512.0f, "updated once at the next accumulate (tracker %lld)", (long long)tracker);
  /* iteration 4 (already begun): the generator alone */
  set_grads(acc, 1.0f, 0.0f);
  CHECK_OK(acc_accelerator_backward(acc));
  CHECK_OK(acc_accelerator_optimizer_step(acc, og));
  CHECK(g_w[0] == 0.5f && g_w[1] == 0.5f, "generator stepped: %g (expected 0.5)", (double)g_w[0]);
  CHECK(d_w[0] == 0.75f, "discriminator untouched by the generator's optimizer");

  /* process control through the accelerator */
  CHECK(acc_accelerator_is_main_process(acc) == (acc_accelerator_process_index(acc) == 0), "is_main_process");
  CHECK(acc_accelerator_is_local_main_process(acc) == (acc_accelerator_local_process_index(acc) == 0),
        "is_local_main_process");
  CHECK_OK(acc_accelerator_wait_for_everyone(acc));
  acc_split sp;
  CHECK_OK(acc_accelerator_split_between_processes(acc, 10, 0, &sp));
  int64_t mine = (int64_t)sp.count, total = 0;
  CHECK_OK(acc_accelerator_all_reduce(acc, &mine, &total, 1, ACC_I64, ACC_SUM));
  CHECK(total == 10, "split covers 10 items (%lld)", (long long)total);
  int64_t ids[8] = {0}, me = acc_accelerator_process_index(acc);
  CHECK_OK(acc_accelerator_all_gather(acc, &me, ids, 1, ACC_I64));
  for (int r = 0; r < n; r++) CHECK(ids[r] == r, "all_gather[%d] = %lld", r, (long long)ids[r]);
  acc_result rc = ACC_OK;
  ACC_ACCELERATOR_MAIN_PROCESS_FIRST(acc, rc) { mine++; }
  CHECK(rc == ACC_OK, "main_process_first: %s", acc_last_error());
  CHECK(acc_accelerator_print(acc, "%s", "") == 0, "print");

  /* the schedule is sized the same at every process count (regression for review F3) */
  static float xs[96];
  acc_dataset *ds = NULL;
  acc_field_desc f[1] = {{ACC_F32, 1}};
  REQUIRE_OK(acc_dataset_create_memory(&ds, 96, f, 1, (const void *const[]){xs}));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 4;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  int64_t t = 0, wu = 0;
  CHECK_OK(acc_accelerator_scheduler_steps(acc, dl, 2, 0.25, &t, &wu));
  CHECK(t == 48 && wu == 12, "96 samples / batch 4 x 2 epochs: %lld training, %lld warmup steps at %d processes "
        "(expected 48, 12)", (long long)t, (long long)wu, n);
  /* and the scheduler really takes that many steps over the run */
  acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
  sc.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  sc.num_training_steps = t;
  sc.num_warmup_steps = wu;
  acc_scheduler *sched = NULL;
  REQUIRE_OK(acc_scheduler_create(&sched, og, &sc));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, sched));
  for (int e = 0; e < 2; e++) {
    const acc_batch *bt = NULL;
    while (acc_accelerator_next_batch(acc, dl, &bt) == ACC_OK && bt) {
      REQUIRE_OK(acc_accelerator_accumulate(acc));
      set_grads(acc, 0.0f, 0.0f);
      REQUIRE_OK(acc_accelerator_backward(acc));
      REQUIRE_OK(acc_accelerator_optimizer_step(acc, og));
      REQUIRE_OK(acc_accelerator_optimizer_step(acc, od));
      REQUIRE_OK(acc_accelerator_scheduler_step(acc, sched));
      REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, og));
      REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, od));
    }
  }
  int64_t sstep = 0;
  REQUIRE_OK(acc_scheduler_get_state(sched, &sstep, NULL));
  CHECK(sstep == t, "the scheduler took %lld steps (sized %lld)", (long long)sstep, (long long)t);
  CHECK(acc_scheduler_get_last_lr(sched) == 0.0, "the linear schedule ends at 0 (%g)", acc_scheduler_get_last_lr(sched));
  acc_scheduler_destroy(sched);
  acc_dataloader_destroy(dl);

  acc_optimizer_destroy(all);
  acc_optimizer_destroy(og);
  acc_optimizer_destroy(od);
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  acc_dataset_destroy(ds);
  return acc_test_finish("accel_multiopt");
}
