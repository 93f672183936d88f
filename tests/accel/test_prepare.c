/* prepare_model, mixed precision wiring and error paths of the Accelerator, run by the launcher:
 *  - prepare_model broadcasts process 0's parameters (every process starts different); preparing
 *    the same model again is fine; a second model is an error naming the problem;
 *  - bf16: no scaler, autocast BF16; fp16: a scaler, backward_scale = scale / gas;
 *    clip_grad_norm under fp16 unscales first and returns the unscaled norm;
 *  - backward / grad_ready / clip before prepare_model, NULL arguments, a zero-filled options
 *    struct, bad option values: clear errors (message text checked). */
#include <math.h>

#include "acc_test.h"

static int rank, nprocs;

typedef struct m2 {
  float a[3], ga[3], b[2], gb[2];
  acc_model *m;
} m2;

static void m2_init(m2 *t, float base) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < 3; i++) t->a[i] = base + (float)i;
  for (int i = 0; i < 2; i++) t->b[i] = -base - (float)i;
  REQUIRE_OK(acc_model_create(&t->m));
  int64_t s3[1] = {3}, s2[1] = {2};
  REQUIRE_OK(acc_model_add_parameter(t->m, "a", t->a, t->ga, 1, s3));
  REQUIRE_OK(acc_model_add_parameter(t->m, "b", t->b, t->gb, 1, s2));
}

static void test_prepare_model(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  m2 t, other;
  m2_init(&t, 10.0f * (float)(rank + 1)); /* every process starts different */
  m2_init(&other, 0.5f);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, t.m));
  CHECK(t.a[0] == 10.0f && t.a[1] == 11.0f && t.a[2] == 12.0f, "a = %g %g %g, expected process 0's 10 11 12",
        t.a[0], t.a[1], t.a[2]);
  CHECK(t.b[0] == -10.0f && t.b[1] == -11.0f, "b = %g %g, expected process 0's -10 -11", t.b[0], t.b[1]);
  /* the same model again: fine, no second broadcast needed */
  t.a[0] = 99.0f;
  CHECK_OK(acc_accelerator_prepare_model(acc, t.m));
  CHECK(t.a[0] == 99.0f, "preparing the same model twice must not touch it");
  t.a[0] = 10.0f;
  /* a second model: prepared too (process 0's parameters broadcast), numbered in prepare order */
  other.a[0] = 0.5f + (float)rank;
  CHECK_OK(acc_accelerator_prepare_model(acc, other.m));
  CHECK(other.a[0] == 0.5f, "the second model must get process 0's parameters, got %g", other.a[0]);
  CHECK(acc_accelerator_num_models(acc) == 2, "%d models prepared, expected 2", acc_accelerator_num_models(acc));
  CHECK(acc_accelerator_model(acc, 0) == t.m && acc_accelerator_model(acc, 1) == other.m &&
        acc_accelerator_model(acc, 2) == NULL, "models in prepare order");
  CHECK_OK(acc_accelerator_prepare_model(acc, other.m));
  CHECK(acc_accelerator_num_models(acc) == 2, "preparing the second model again must not add it");
  CHECK_ERR(acc_accelerator_no_sync(acc, NULL, 1), ACC_ERR_INVALID_ARGUMENT, "was not prepared");
  CHECK_ERR(acc_accelerator_grad_ready_model(acc, NULL, 0), ACC_ERR_INVALID_ARGUMENT, "was not prepared");
  CHECK_ERR(acc_accelerator_backward_model(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "was not prepared");
  CHECK_OK(acc_accelerator_no_sync(acc, other.m, 1)); /* the second model stays out of the backward below */
  CHECK_ERR(acc_accelerator_prepare_model(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "model is NULL");
  /* the prepared model still works: a backward averages */
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  for (int i = 0; i < 3; i++) t.ga[i] = (float)(rank + 1);
  t.gb[0] = t.gb[1] = 0;
  for (int i = 0; i < 3; i++) other.ga[i] = (float)(rank + 1);
  REQUIRE_OK(acc_accelerator_backward(acc));
  float mean = (float)(nprocs + 1) / 2.0f;
  CHECK(t.ga[0] == mean && t.ga[2] == mean, "mean gradient %g, expected %g", t.ga[0], mean);
  CHECK(other.ga[0] == (float)(rank + 1), "the model under no_sync keeps its local gradient %d, got %g", rank + 1,
        other.ga[0]);
  /* out of no_sync, backward_model averages that model alone */
  CHECK_OK(acc_accelerator_no_sync(acc, other.m, 0));
  for (int i = 0; i < 3; i++) t.ga[i] = (float)(rank + 1);
  REQUIRE_OK(acc_accelerator_backward_model(acc, other.m));
  CHECK(other.ga[0] == mean, "backward_model: mean gradient %g, expected %g", other.ga[0], mean);
  CHECK(t.ga[0] == (float)(rank + 1), "backward_model must leave the other model alone, got %g", t.ga[0]);
  /* clipping: one norm over every model not under no_sync, or over one model */
  memset(t.ga, 0, sizeof t.ga), memset(t.gb, 0, sizeof t.gb), memset(other.ga, 0, sizeof other.ga);
  memset(other.gb, 0, sizeof other.gb);
  t.ga[0] = 3.0f, other.gb[1] = 4.0f;
  float norm = 0;
  CHECK_OK(acc_accelerator_clip_grad_norm(acc, 100.0f, 2.0, &norm));
  CHECK(norm == 5.0f, "clip_grad_norm over both models: %g, expected 5", (double)norm);
  CHECK_OK(acc_accelerator_clip_grad_norm_model(acc, other.m, 100.0f, 2.0, &norm));
  CHECK(norm == 4.0f, "clip_grad_norm_model(second model): %g, expected 4", (double)norm);
  CHECK_OK(acc_accelerator_no_sync(acc, other.m, 1));
  CHECK_OK(acc_accelerator_clip_grad_norm(acc, 1.5f, 2.0, &norm));
  CHECK(norm == 3.0f && other.gb[1] == 4.0f, "clip_grad_norm skips the model under no_sync: %g, its gradient %g",
        (double)norm, (double)other.gb[1]);
  CHECK(fabsf(t.ga[0] - 1.5f) < 1e-5f, "the first model clipped to 1.5: %g", (double)t.ga[0]);
  CHECK_ERR(acc_accelerator_clip_grad_norm_model(acc, NULL, 1.0f, 2.0, &norm), ACC_ERR_INVALID_ARGUMENT,
            "was not prepared");
  CHECK_OK(acc_accelerator_no_sync(acc, other.m, 0));
  CHECK(acc_accelerator_low_precision_params_model(acc, other.m) == NULL, "no low-precision copy without the option");
  acc_model_destroy(other.m);
  acc_model_destroy(t.m);
  acc_accelerator_destroy(acc);
}

/* Packed broadcast (review R16): parameters smaller than the bucket go several per broadcast,
 * larger ones alone; every process ends with process 0's values. */
static void test_prepare_packed(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.bucket_cap_bytes = 4 * sizeof(float);
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  float p[4][5], g[4][5];
  int64_t sizes[4] = {3, 1, 5, 1};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  for (int i = 0; i < 4; i++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", i);
    for (int k = 0; k < 5; k++) p[i][k] = (float)(100 * rank + 10 * i + k);
    REQUIRE_OK(acc_model_add_parameter(m, name, p[i], g[i], 1, &sizes[i]));
  }
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < sizes[i]; k++)
      CHECK(p[i][k] == (float)(10 * i + k), "p%d[%d] = %g, expected process 0's %d", i, k, (double)p[i][k], 10 * i + k);
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
}

static void test_mixed_precision(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  acc_accelerator *acc;

  ao.mixed_precision = ACC_PRECISION_NO;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_mixed_precision(acc) == ACC_PRECISION_NO, "no");
  CHECK(acc_accelerator_autocast_dtype(acc) == ACC_F32, "no: autocast f32");
  CHECK(acc_accelerator_grad_scaler(acc) == NULL, "no: no scaler");
  acc_accelerator_destroy(acc);

  ao.mixed_precision = ACC_PRECISION_BF16;
  ao.gradient_accumulation_steps = 4;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_mixed_precision(acc) == ACC_PRECISION_BF16, "bf16");
  CHECK(acc_accelerator_autocast_dtype(acc) == ACC_BF16, "bf16: autocast dtype %d", (int)acc_accelerator_autocast_dtype(acc));
  CHECK(acc_accelerator_grad_scaler(acc) == NULL, "bf16 must have no scaler");
  CHECK(acc_accelerator_backward_scale(acc) == 0.25f, "bf16: backward_scale %g, expected 1/4", acc_accelerator_backward_scale(acc));
  acc_accelerator_destroy(acc);

  ao.mixed_precision = ACC_PRECISION_FP16;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_autocast_dtype(acc) == ACC_F16, "fp16: autocast f16");
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  CHECK(sc != NULL, "fp16 must have a scaler");
  CHECK(acc_grad_scaler_scale(sc) == 65536.0f, "default init scale %g", acc_grad_scaler_scale(sc));
  CHECK(acc_accelerator_backward_scale(acc) == 16384.0f, "fp16: backward_scale %g, expected 65536/4",
        acc_accelerator_backward_scale(acc));
  acc_accelerator_destroy(acc);

  /* clip_grad_norm under fp16 unscales first: the returned norm is the unscaled one */
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 1024.0f;
  ao.scaler = &so;
  ao.gradient_accumulation_steps = 1;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  m2 t;
  m2_init(&t, 1.0f);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, t.m));
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  float s = acc_accelerator_backward_scale(acc);
  CHECK(s == 1024.0f, "backward_scale %g", s);
  /* unscaled gradients: a = [3, 0, 0], b = [4, 0] -> norm 5 */
  t.ga[0] = 3.0f * s;
  t.gb[0] = 4.0f * s;
  REQUIRE_OK(acc_accelerator_backward(acc));
  float norm = 0;
  REQUIRE_OK(acc_accelerator_clip_grad_norm(acc, 1.0f, 2.0, &norm));
  CHECK(fabsf(norm - 5.0f) < 1e-6f, "fp16 clip: norm %g, expected 5 (unscaled)", norm);
  /* clipped to max_norm 1: 3/5 and 4/5, times clip_coef 1/(5+1e-6) */
  CHECK(fabsf(t.ga[0] - 0.6f) < 1e-5f && fabsf(t.gb[0] - 0.8f) < 1e-5f, "clipped grads %g %g", t.ga[0], t.gb[0]);
  CHECK(acc_grad_scaler_is_unscaled(acc_accelerator_grad_scaler(acc)), "scaler must be marked unscaled");
  /* the step does not unscale a second time (that would be an error) */
  acc_optimizer *opt;
  acc_sgd_options oo = ACC_SGD_OPTIONS_INIT;
  oo.lr = 1.0;
  REQUIRE_OK(acc_optimizer_create_sgd(&opt, t.m, &oo));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  float a0 = t.a[0];
  CHECK_OK(acc_accelerator_optimizer_step(acc, opt));
  CHECK(!acc_accelerator_optimizer_step_was_skipped(acc), "finite step skipped");
  CHECK(fabsf(t.a[0] - (a0 - t.ga[0])) < 1e-6f, "step used the unscaled, clipped gradient: a0 %g", t.a[0]);
  acc_optimizer_destroy(opt);
  acc_model_destroy(t.m);
  acc_accelerator_destroy(acc);
}

static void test_errors(void) {
  /* NULL arguments */
  CHECK_ERR(acc_accelerator_create(NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_ERR(acc_accelerator_backward(NULL), ACC_ERR_INVALID_ARGUMENT, "backward: accelerator is NULL");
  CHECK_ERR(acc_accelerator_accumulate(NULL), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  CHECK(acc_accelerator_state(NULL) == NULL, "state(NULL)");
  acc_accelerator_destroy(NULL);

  /* a zero-filled options struct */
  acc_accelerator_options zero;
  memset(&zero, 0, sizeof zero);
  acc_accelerator *acc = (acc_accelerator *)&zero; /* must be reset to NULL */
  CHECK_ERR(acc_accelerator_create(&acc, &zero), ACC_ERR_INVALID_USAGE, "ACC_ACCELERATOR_OPTIONS_INIT");
  CHECK(acc == NULL, "*out must be NULL after a failure");

  /* bad values */
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = 0;
  CHECK_ERR(acc_accelerator_create(&acc, &ao), ACC_ERR_INVALID_ARGUMENT, "gradient_accumulation_steps is 0");
  ao.gradient_accumulation_steps = 1;
  ao.mixed_precision = 7;
  CHECK_ERR(acc_accelerator_create(&acc, &ao), ACC_ERR_INVALID_ARGUMENT, "unknown mixed_precision 7");

  /* before prepare_model */
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  CHECK_ERR(acc_accelerator_backward(acc), ACC_ERR_INVALID_USAGE, "prepare the model first");
  CHECK_ERR(acc_accelerator_grad_ready(acc, 0), ACC_ERR_INVALID_USAGE, "prepare the model first");
  CHECK_ERR(acc_accelerator_clip_grad_norm(acc, 1.0f, 2.0, NULL), ACC_ERR_INVALID_USAGE, "prepare the model first");
  CHECK_ERR(acc_accelerator_clip_grad_value(acc, 1.0f), ACC_ERR_INVALID_USAGE, "prepare the model first");
  CHECK_ERR(acc_accelerator_optimizer_step(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_ERR(acc_accelerator_optimizer_zero_grad(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_ERR(acc_accelerator_scheduler_step(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "scheduler is NULL");
  CHECK_ERR(acc_accelerator_prepare_optimizer(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "optimizer is NULL");
  CHECK_ERR(acc_accelerator_prepare_scheduler(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "scheduler is NULL");
  CHECK_ERR(acc_accelerator_prepare_dataloader(acc, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "NULL argument");
  CHECK_ERR(acc_accelerator_next_batch(acc, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "NULL argument");
  int64_t out;
  CHECK_ERR(acc_accelerator_gather_for_metrics(acc, NULL, 1, 1, ACC_F32, NULL, 0, &out), ACC_ERR_INVALID_ARGUMENT,
            "bad arguments");
  CHECK_ERR(acc_accelerator_gather_for_metrics(acc, &out, 1, 1, (acc_dtype)99, &out, 1, &out),
            ACC_ERR_INVALID_ARGUMENT, "unknown dtype 99");
  CHECK_ERR(acc_accelerator_pad_across_processes(acc, &out, 1, 1, ACC_I64, 0, 0, 1, NULL),
            ACC_ERR_INVALID_ARGUMENT, "pad_across_processes");
  /* an uninitialized dataloader options struct */
  {
    float x[4] = {0};
    acc_field_desc f = {ACC_F32, 1};
    const void *d[1] = {x};
    acc_dataset *ds;
    REQUIRE_OK(acc_dataset_create_memory(&ds, 4, &f, 1, d));
    acc_dataloader_options lz;
    memset(&lz, 0, sizeof lz);
    acc_dataloader *dl = NULL;
    CHECK_ERR(acc_accelerator_prepare_dataloader(acc, ds, &lz, &dl), ACC_ERR_INVALID_USAGE,
              "ACC_DATALOADER_OPTIONS_INIT");
    acc_dataset_destroy(ds);
  }
  /* grad_ready: out of range index, twice the same parameter */
  m2 t;
  m2_init(&t, 1.0f);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, t.m));
  CHECK_ERR(acc_accelerator_grad_ready(acc, 2), ACC_ERR_INVALID_ARGUMENT, "parameter index 2 is out of range");
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  if (nprocs == 1) { /* with one process, marking reduces the bucket at once (a no-op) */
    CHECK_OK(acc_accelerator_grad_ready(acc, 1));
    CHECK_ERR(acc_accelerator_grad_ready(acc, 1), ACC_ERR_INVALID_USAGE, "'b' was already marked ready");
  }
  REQUIRE_OK(acc_accelerator_backward(acc));
  acc_model_destroy(t.m);
  acc_accelerator_destroy(acc);
}

int main(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  if (getenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")) {
    fprintf(stderr, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS is set: it overrides the test's values\n");
    return 1;
  }
  test_errors();
  test_prepare_model();
  test_prepare_packed();
  test_mixed_precision();
  acc_state_destroy(st);
  return acc_test_finish("accel_prepare");
}
