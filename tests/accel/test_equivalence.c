/* The heart of the Training issue: N processes x batch B give the same parameters after k steps
 * as 1 process x batch N*B (f32, relative error <= 1e-5) — plain, with gradient accumulation
 * (k x B equals one step of k*B), with clipping, with AdamW + a scheduler; and under fp16 every
 * process skips the same steps. Each process computes the single-process reference itself,
 * locally, with the plain optimizer, and compares. Run through the real launcher at 1..4 processes. */
#include <math.h>

#include "acc_test.h"

#define NSAMPLES 96
#define DIM 8
#define B 4

static float xs[NSAMPLES][DIM], ys[NSAMPLES];
static int rank, nprocs;

static int fetch(int64_t i, void *const *fields, void *payload) {
  (void)payload;
  memcpy(fields[0], xs[i], sizeof xs[i]);
  memcpy(fields[1], &ys[i], sizeof(float));
  return 0;
}

typedef struct linmodel {
  float w[DIM], b[1], gw[DIM], gb[1];
  acc_model *m;
} linmodel;

static void model_init(linmodel *lm, uint64_t seed) {
  memset(lm, 0, sizeof *lm);
  for (int d = 0; d < DIM; d++) lm->w[d] = 0.1f * (float)((int)((seed * 7 + (uint64_t)d * 13) % 11) - 5);
  lm->b[0] = 0.25f;
  REQUIRE_OK(acc_model_create(&lm->m));
  int64_t shape_w[1] = {DIM}, shape_b[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(lm->m, "linear.weight", lm->w, lm->gw, 1, shape_w));
  REQUIRE_OK(acc_model_add_parameter(lm->m, "linear.bias", lm->b, lm->gb, 1, shape_b));
}

/* grads += scale * d/dparams of mean_i 0.5*(w.x_i + b - y_i)^2 over the n samples */
static void backward(linmodel *lm, const float *x, const float *y, int64_t n, float scale) {
  for (int64_t i = 0; i < n; i++) {
    float pred = lm->b[0];
    for (int d = 0; d < DIM; d++) pred += lm->w[d] * x[i * DIM + d];
    float r = (pred - y[i]) * scale / (float)n;
    for (int d = 0; d < DIM; d++) lm->gw[d] += r * x[i * DIM + d];
    lm->gb[0] += r;
  }
}

static void make_data(void) {
  for (int i = 0; i < NSAMPLES; i++) {
    float y = 0.5f;
    for (int d = 0; d < DIM; d++) {
      xs[i][d] = (float)(((i * 31 + d * 17) % 23) - 11) / 11.0f;
      y += (float)(d + 1) * 0.3f * xs[i][d];
    }
    ys[i] = y + (float)((i * 7) % 5 - 2) * 0.05f;
  }
}

typedef enum { PLAIN, ACCUM, CLIP, ADAMW_SCHED } scenario;

static double rel_err(float a, float b) { return fabs((double)a - (double)b) / fmax(fabs((double)b), 1e-3); }

static void run(scenario sc) {
  const int gas = sc == ACCUM ? 2 : 1;
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = gas;
  ao.bucket_cap_bytes = 4 * sizeof(float); /* force two buckets */
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));

  /* distributed run: process p starts from a different init; prepare makes it rank 0's */
  linmodel dm, ref;
  model_init(&dm, (uint64_t)rank + 1);
  model_init(&ref, 1);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, dm.m));
  CHECK(memcmp(dm.w, ref.w, sizeof dm.w) == 0, "prepare_model must broadcast process 0's parameters");

  acc_optimizer *dopt, *ropt;
  acc_scheduler *dsched = NULL, *rsched = NULL;
  if (sc == ADAMW_SCHED) {
    acc_adamw_options o = ACC_ADAMW_OPTIONS_INIT;
    o.lr = 0.05;
    REQUIRE_OK(acc_optimizer_create_adamw(&dopt, dm.m, &o));
    REQUIRE_OK(acc_optimizer_create_adamw(&ropt, ref.m, &o));
  } else {
    acc_sgd_options o = ACC_SGD_OPTIONS_INIT;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    REQUIRE_OK(acc_optimizer_create_sgd(&dopt, dm.m, &o));
    REQUIRE_OK(acc_optimizer_create_sgd(&ropt, ref.m, &o));
  }
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, dopt));
  int64_t ref_steps = NSAMPLES / (B * nprocs * gas);
  if (sc == ADAMW_SCHED) {
    acc_scheduler_options so = ACC_SCHEDULER_OPTIONS_INIT;
    so.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
    so.num_warmup_steps = 2 * nprocs;             /* defined in single-process batches of size B */
    so.num_training_steps = NSAMPLES / B;
    REQUIRE_OK(acc_scheduler_create(&dsched, dopt, &so));
    REQUIRE_OK(acc_scheduler_create(&rsched, ropt, &so));
    REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, dsched));
  }

  acc_field_desc fields[2] = {{ACC_F32, DIM}, {ACC_F32, 1}};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_map(&ds, NSAMPLES, fields, 2, fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = B;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));

  /* distributed training loop, one epoch */
  int64_t syncs = 0;
  const acc_batch *batch;
  for (;;) {
    REQUIRE_OK(acc_accelerator_next_batch(acc, dl, &batch));
    if (!batch) break;
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    backward(&dm, batch->fields[0], batch->fields[1], batch->size, acc_accelerator_backward_scale(acc));
    REQUIRE_OK(acc_accelerator_backward(acc));
    if (acc_accelerator_sync_gradients(acc)) {
      syncs++;
      if (sc == CLIP) {
        float norm = 0;
        REQUIRE_OK(acc_accelerator_clip_grad_norm(acc, 0.5f, 2.0, &norm));
        CHECK(norm > 0, "norm %g", norm);
      }
    }
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, dopt));
    if (dsched) REQUIRE_OK(acc_accelerator_scheduler_step(acc, dsched));
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, dopt));
  }
  CHECK(syncs == ref_steps, "synced %lld times, expected %lld", (long long)syncs, (long long)ref_steps);

  /* single-process reference: batch N*B*gas, same order */
  const int64_t rb = (int64_t)B * nprocs * gas;
  for (int64_t s = 0; s < ref_steps; s++) {
    backward(&ref, xs[s * rb], &ys[s * rb], rb, 1.0f);
    if (sc == CLIP) {
      float norm;
      REQUIRE_OK(acc_clip_grad_norm(ref.m, 0.5f, 2.0, &norm));
    }
    REQUIRE_OK(acc_optimizer_step(ropt));
    if (rsched)
      for (int k = 0; k < nprocs; k++) REQUIRE_OK(acc_scheduler_step(rsched));
    REQUIRE_OK(acc_optimizer_zero_grad(ropt));
  }
  double worst = 0;
  for (int d = 0; d < DIM; d++) worst = fmax(worst, rel_err(dm.w[d], ref.w[d]));
  worst = fmax(worst, rel_err(dm.b[0], ref.b[0]));
  static const char *names[] = {"plain", "accumulation", "clipping", "adamw+scheduler"};
  CHECK(worst <= 1e-5, "%s: relative error %g > 1e-5 (w0 %.9g vs %.9g)", names[sc], worst, dm.w[0], ref.w[0]);
  if (dsched) CHECK(acc_scheduler_get_last_lr(dsched) == acc_scheduler_get_last_lr(rsched), "scheduler lr differs");
  /* and every process holds bit-identical parameters */
  float all[64 * (DIM + 1)], mine[DIM + 1];
  memcpy(mine, dm.w, sizeof dm.w);
  mine[DIM] = dm.b[0];
  REQUIRE_OK(acc_accelerator_all_gather(acc, mine, all, DIM + 1, ACC_F32));
  for (int r = 1; r < nprocs; r++)
    CHECK(memcmp(all, all + r * (DIM + 1), sizeof mine) == 0, "%s: process %d's parameters differ from process 0's", names[sc], r);

  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_scheduler_destroy(dsched);
  acc_scheduler_destroy(rsched);
  acc_optimizer_destroy(dopt);
  acc_optimizer_destroy(ropt);
  acc_model_destroy(dm.m);
  acc_model_destroy(ref.m);
  acc_accelerator_destroy(acc);
}

/* fp16: process 1 (or 0 alone) produces an inf gradient at its 3rd batch: every process must
 * skip that same step, back off the scale once, and keep identical parameters. */
static void run_fp16(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.mixed_precision = ACC_PRECISION_FP16;
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 1024.0f; /* small enough that only the injected inf overflows */
  ao.scaler = &so;
  ao.low_precision_params = 1;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  linmodel dm;
  model_init(&dm, 1);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, dm.m));
  acc_optimizer *opt;
  acc_sgd_options o = ACC_SGD_OPTIONS_INIT;
  o.lr = 0.05;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, dm.m, &o));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  CHECK(sc != NULL && acc_grad_scaler_scale(sc) == 1024.0f, "fp16 starts with the configured scale");
  int skipped = 0;
  for (int step = 0; step < 6; step++) {
    const int64_t off = (int64_t)(step * nprocs + rank) * B;
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    float s = acc_accelerator_backward_scale(acc);
    backward(&dm, xs[off], &ys[off], B, s);
    if (step == 2 && rank == (nprocs > 1 ? 1 : 0)) dm.gw[3] = INFINITY;
    REQUIRE_OK(acc_accelerator_backward(acc));
    float before[DIM];
    memcpy(before, dm.w, sizeof before);
    REQUIRE_OK(acc_accelerator_optimizer_step(acc, opt));
    if (acc_accelerator_optimizer_step_was_skipped(acc)) {
      skipped++;
      CHECK(step == 2, "skipped step %d", step);
      CHECK(memcmp(before, dm.w, sizeof before) == 0, "a skipped step must not change parameters");
    }
    REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, opt));
  }
  CHECK(skipped == 1, "skipped %d steps, expected exactly 1", skipped);
  /* the f16 copy of the parameters follows the fp32 master weights */
  const uint16_t *lp = acc_accelerator_low_precision_params(acc);
  CHECK(lp != NULL, "low_precision_params requested under fp16");
  if (lp) {
    uint16_t expect[DIM + 1];
    acc_f32_to_f16(expect, dm.w, DIM);
    acc_f32_to_f16(expect + DIM, dm.b, 1);
    CHECK(memcmp(lp, expect, sizeof expect) == 0, "the f16 copy is stale");
  }
  CHECK(acc_grad_scaler_scale(sc) == 512.0f, "scale after one overflow: %g", acc_grad_scaler_scale(sc));
  float all[64 * DIM];
  REQUIRE_OK(acc_accelerator_all_gather(acc, dm.w, all, DIM, ACC_F32));
  for (int r = 1; r < nprocs; r++)
    CHECK(memcmp(all, all + r * DIM, sizeof dm.w) == 0, "fp16: process %d diverged", r);
  acc_optimizer_destroy(opt);
  acc_model_destroy(dm.m);
  acc_accelerator_destroy(acc);
}

int main(void) {
  make_data();
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  run(PLAIN);
  run(ACCUM);
  run(CLIP);
  run(ADAMW_SCHED);
  run_fp16();
  acc_state_destroy(st);
  return acc_test_finish("equivalence");
}
