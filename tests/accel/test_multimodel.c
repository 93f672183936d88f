/* Several models in one accelerator, run through the launcher: a small least-squares GAN
 * (generator G: z -> x, discriminator D: x -> score), two models, two optimizers (AdamW for G,
 * SGD with momentum for D), alternating steps: D steps every batch (backward_model(D), with
 * grad_ready_model and overlap in the second pass), G accumulates over two batches under
 * no_sync. The run equals one process with the whole batch (a communication-free reference in
 * the same program) up to float rounding; save_state / load_state with two models resumes
 * bit-exactly (model.safetensors + model_1.safetensors); a checkpoint of two models refuses an
 * accelerator with one. Then fp16: an overflow in one model skips every optimizer of the
 * iteration, a model under no_sync keeps its scaled partial sums through the other model's
 * unscale. argv: <dir> [zero_stage]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "acc_test.h"

#define B 4  /* samples per process per batch */
#define ZD 2
#define XD 3
#define ITERS 8

typedef struct gan {
  float gw[XD * ZD], gb[XD], ggw[XD * ZD], ggb[XD]; /* generator and its gradients */
  float dw[XD], db[1], gdw[XD], gdb[1];             /* discriminator */
  acc_model *G, *D;
  acc_optimizer *og, *od;
} gan;

static int rank, nprocs;

static void sample(int it, int k, float *z, float *x) {
  for (int j = 0; j < ZD; j++) z[j] = sinf(0.37f * (float)(it * 31 + k * 7 + j) + 0.1f);
  for (int i = 0; i < XD; i++) x[i] = 1.0f + 0.5f * cosf(0.23f * (float)(it * 17 + k * 5 + i));
}

static void gen(const gan *g, const float *z, float *x) {
  for (int i = 0; i < XD; i++) {
    x[i] = g->gb[i];
    for (int j = 0; j < ZD; j++) x[i] += g->gw[i * ZD + j] * z[j];
  }
}

static float disc(const gan *g, const float *x) {
  float s = g->db[0];
  for (int i = 0; i < XD; i++) s += g->dw[i] * x[i];
  return s;
}

/* D's loss per sample: ((D(x) - 1)^2 + D(G(z))^2) / 2; gradients times scale added. */
static void d_grads(gan *g, int it, int k0, int nk, float scale) {
  for (int k = k0; k < k0 + nk; k++) {
    float z[ZD], x[XD], f[XD];
    sample(it, k, z, x);
    gen(g, z, f);
    float er = disc(g, x) - 1.0f, ef = disc(g, f);
    for (int i = 0; i < XD; i++) g->gdw[i] += scale * (er * x[i] + ef * f[i]);
    g->gdb[0] += scale * (er + ef);
  }
}

/* G's loss per sample: (D(G(z)) - 1)^2 / 2 (D's gradients of it are not needed). */
static void g_grads(gan *g, int it, int k0, int nk, float scale) {
  for (int k = k0; k < k0 + nk; k++) {
    float z[ZD], x[XD], f[XD];
    sample(it, k, z, x);
    gen(g, z, f);
    float e = disc(g, f) - 1.0f;
    for (int i = 0; i < XD; i++) {
      float dx = scale * e * g->dw[i];
      g->ggb[i] += dx;
      for (int j = 0; j < ZD; j++) g->ggw[i * ZD + j] += dx * z[j];
    }
  }
}

static void gan_init(gan *g) {
  memset(g, 0, sizeof *g);
  for (int i = 0; i < XD * ZD; i++) g->gw[i] = 0.3f * sinf((float)i + 1.0f);
  for (int i = 0; i < XD; i++) g->gb[i] = 0.1f * (float)i;
  for (int i = 0; i < XD; i++) g->dw[i] = 0.2f * cosf((float)i);
  g->db[0] = -0.1f;
  REQUIRE_OK(acc_model_create(&g->G));
  REQUIRE_OK(acc_model_add_parameter(g->G, "gen.weight", g->gw, g->ggw, 2, (int64_t[]){XD, ZD}));
  REQUIRE_OK(acc_model_add_parameter(g->G, "gen.bias", g->gb, g->ggb, 1, (int64_t[]){XD}));
  REQUIRE_OK(acc_model_create(&g->D));
  REQUIRE_OK(acc_model_add_parameter(g->D, "disc.weight", g->dw, g->gdw, 1, (int64_t[]){XD}));
  REQUIRE_OK(acc_model_add_parameter(g->D, "disc.bias", g->db, g->gdb, 1, (int64_t[]){1}));
}

static void gan_optimizers(gan *g) {
  acc_adamw_options a = ACC_ADAMW_OPTIONS_INIT;
  a.lr = 0.05;
  REQUIRE_OK(acc_optimizer_create_adamw(&g->og, g->G, &a));
  acc_sgd_options s = ACC_SGD_OPTIONS_INIT;
  s.lr = 0.1;
  s.momentum = 0.9;
  REQUIRE_OK(acc_optimizer_create_sgd(&g->od, g->D, &s));
}

static void gan_free(gan *g) {
  acc_optimizer_destroy(g->og);
  acc_optimizer_destroy(g->od);
  acc_model_destroy(g->G);
  acc_model_destroy(g->D);
}

/* Iterations [it0, it1). acc NULL: the reference, one process with the whole batch. */
static void train(gan *g, acc_accelerator *acc, int it0, int it1, int overlap) {
  int k0 = acc ? rank * B : 0, nk = acc ? B : nprocs * B;
  float inv = 1.0f / (float)nk;
  for (int it = it0; it < it1; it++) {
    if (acc) REQUIRE_OK(acc_accelerator_accumulate(acc));
    /* the discriminator, every batch */
    memset(g->gdw, 0, sizeof g->gdw);
    g->gdb[0] = 0;
    d_grads(g, it, k0, nk, inv);
    if (acc) {
      if (overlap) { /* the backward pass produces the bias's gradient last: mark in reverse */
        REQUIRE_OK(acc_accelerator_grad_ready_model(acc, g->D, 1));
        REQUIRE_OK(acc_accelerator_grad_ready_model(acc, g->D, 0));
      }
      REQUIRE_OK(acc_accelerator_backward_model(acc, g->D));
      REQUIRE_OK(acc_accelerator_optimizer_step(acc, g->od));
    } else {
      REQUIRE_OK(acc_optimizer_step(g->od));
    }
    /* the generator, over windows of two batches (the mean of both) */
    int last = it % 2 == 1;
    if (acc) REQUIRE_OK(acc_accelerator_no_sync(acc, g->G, !last));
    g_grads(g, it, k0, nk, 0.5f * inv);
    if (acc) {
      if (!last) /* under no_sync its optimizer must not step on partial sums */
        CHECK_ERR(acc_accelerator_optimizer_step(acc, g->og), ACC_ERR_INVALID_USAGE, "under no_sync");
      REQUIRE_OK(acc_accelerator_backward_model(acc, g->G));
      if (last) {
        REQUIRE_OK(acc_accelerator_optimizer_step(acc, g->og));
        REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, g->og));
      }
    } else if (last) {
      REQUIRE_OK(acc_optimizer_step(g->og));
      REQUIRE_OK(acc_optimizer_zero_grad(g->og));
    }
  }
}

static void compare(const gan *a, const gan *b, const char *what, float tol) {
  const float *x[4] = {a->gw, a->gb, a->dw, a->db}, *y[4] = {b->gw, b->gb, b->dw, b->db};
  const int n[4] = {XD * ZD, XD, XD, 1};
  for (int t = 0; t < 4; t++)
    for (int i = 0; i < n[t]; i++) {
      float d = fabsf(x[t][i] - y[t][i]);
      if (tol == 0.0f)
        CHECK(memcmp(&x[t][i], &y[t][i], sizeof(float)) == 0, "%s: tensor %d[%d] %.9g vs %.9g (bit-exact)", what,
              t, i, (double)x[t][i], (double)y[t][i]);
      else
        CHECK(d <= tol * (1.0f + fabsf(y[t][i])), "%s: tensor %d[%d] %.9g vs reference %.9g", what, t, i,
              (double)x[t][i], (double)y[t][i]);
    }
}

static acc_accelerator *make_acc(int zero, int overlap) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.zero_stage = zero;
  o.overlap_grad_sync = overlap;
  o.bucket_cap_bytes = 2 * sizeof(float); /* several buckets per model */
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  return acc;
}

static void equivalence(const char *dir, int zero, int overlap) {
  gan ref, g;
  gan_init(&ref);
  gan_optimizers(&ref);
  train(&ref, NULL, 0, ITERS, 0);

  acc_accelerator *acc = make_acc(zero, overlap);
  gan_init(&g);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, g.G));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, g.D));
  gan_optimizers(&g);
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, g.og));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, g.od));
  /* overlap: one model's buckets in flight at a time */
  if (overlap && nprocs > 1) {
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    memset(g.gdw, 0, sizeof g.gdw);
    g.gdb[0] = 0;
    REQUIRE_OK(acc_accelerator_grad_ready_model(acc, g.D, 1));
    if (zero != 1) /* stage 1 reduces in backward only: nothing is in flight */
      CHECK_ERR(acc_accelerator_grad_ready_model(acc, g.G, 1), ACC_ERR_INVALID_USAGE, "in flight");
    REQUIRE_OK(acc_accelerator_backward_model(acc, g.D));
    memset(g.gdw, 0, sizeof g.gdw);
    g.gdb[0] = 0;
  }
  char ck[512];
  snprintf(ck, sizeof ck, "%s/ckpt_np%d_z%d_o%d", dir, nprocs, zero, overlap);
  if (rank == 0) { /* a checkpoint of an earlier run of the test */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ck);
    CHECK(system(cmd) == 0, "%s", cmd);
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  train(&g, acc, 0, ITERS / 2, overlap);
  REQUIRE_OK(acc_accelerator_save_state(acc, ck, NULL));
  train(&g, acc, ITERS / 2, ITERS, overlap);
  compare(&g, &ref, "two models vs one process with the whole batch", 2e-5f);
  gan straight = g;

  /* resume: the state of both models and both optimizers comes back, bit-exactly */
  for (int i = 0; i < XD; i++) g.dw[i] = g.gw[i] = 7.0f;
  REQUIRE_OK(acc_accelerator_load_state(acc, ck, NULL));
  train(&g, acc, ITERS / 2, ITERS, overlap);
  compare(&g, &straight, "resumed", 0.0f);
  char path[600];
  snprintf(path, sizeof path, "%s/model_1.safetensors", ck);
  struct stat sb;
  CHECK(stat(path, &sb) == 0, "save_state wrote the second model as %s", path);
  snprintf(path, sizeof path, "%s/model_2.safetensors", ck);
  CHECK(stat(path, &sb) != 0, "no third model file (%s)", path);
  snprintf(path, sizeof path, "%s/checkpoint.json", ck);
  char *meta = acc_test_slurp(path);
  CHECK(meta && strstr(meta, "\"models\": 2"), "checkpoint.json counts 2 models: %s", meta ? meta : "(unreadable)");
  /* the second model's file holds its weights (prepare order: G first, D second) */
  snprintf(path, sizeof path, "%s/model_1.safetensors", ck);
  acc_safetensors *sf = NULL;
  acc_tensor_view tv;
  if (acc_safetensors_open(&sf, path) == ACC_OK) {
    CHECK(acc_safetensors_find(sf, "disc.weight", &tv) == ACC_OK, "model_1.safetensors holds disc.weight");
    CHECK(acc_safetensors_find(sf, "gen.weight", &tv) != ACC_OK, "model_1.safetensors holds only D");
    acc_safetensors_close(sf);
  } else {
    CHECK(0, "open %s: %s", path, acc_last_error());
  }
  gan_free(&g);
  acc_accelerator_destroy(acc);

  /* the checkpoint holds two models: an accelerator with one is refused, naming both counts */
  acc = make_acc(zero, overlap);
  gan one;
  gan_init(&one);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, one.G));
  gan_optimizers(&one);
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, one.og));
  CHECK_ERR(acc_accelerator_load_state(acc, ck, NULL), ACC_ERR_MISMATCH, "holds 2 model(s) but 1 is prepared");
  gan_free(&one);
  gan_free(&ref);
  acc_accelerator_destroy(acc);
}

/* fp16: one scaler for both models. */
static void fp16(void) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.mixed_precision = ACC_PRECISION_FP16;
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 1024.0f;
  so.growth_interval = 1000;
  o.scaler = &so;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  gan g;
  gan_init(&g);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, g.G));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, g.D));
  acc_sgd_options s = ACC_SGD_OPTIONS_INIT;
  s.lr = 0.5;
  REQUIRE_OK(acc_optimizer_create_sgd(&g.og, g.G, &s));
  REQUIRE_OK(acc_optimizer_create_sgd(&g.od, g.D, &s));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, g.og));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, g.od));
  float scale = 0;
  int64_t tracker = 0;

  /* an overflow in G's gradient on the last process: both optimizers of the iteration skip */
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  float bs = acc_accelerator_backward_scale(acc);
  for (int i = 0; i < XD; i++) g.gdw[i] = g.ggb[i] = 0.25f * bs;
  if (rank == nprocs - 1) g.ggw[0] = INFINITY;
  gan before = g;
  REQUIRE_OK(acc_accelerator_backward_model(acc, g.D));
  REQUIRE_OK(acc_accelerator_backward_model(acc, g.G));
  REQUIRE_OK(acc_accelerator_optimizer_step(acc, g.od));
  CHECK(acc_accelerator_optimizer_step_was_skipped(acc), "D's step is skipped for G's overflow");
  REQUIRE_OK(acc_accelerator_optimizer_step(acc, g.og));
  CHECK(memcmp(g.dw, before.dw, sizeof g.dw) == 0 && memcmp(g.gb, before.gb, sizeof g.gb) == 0,
        "no weight moved in the skipped iteration");
  REQUIRE_OK(acc_grad_scaler_get_state(sc, &scale, &tracker));
  CHECK(scale == 512.0f, "one backoff for the iteration: scale %g (expected 512)", (double)scale);
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, g.og));
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, g.od));

  /* alternating order: D's backward and step, then G's: two iterations, two scaler updates;
   * G under no_sync keeps its scaled partial sums through D's unscale */
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  bs = acc_accelerator_backward_scale(acc);
  REQUIRE_OK(acc_accelerator_no_sync(acc, g.G, 1));
  for (int i = 0; i < XD; i++) g.gdw[i] = 0.25f * bs;
  for (int i = 0; i < XD; i++) g.ggb[i] = 0.125f * bs;
  REQUIRE_OK(acc_accelerator_backward_model(acc, g.D));
  REQUIRE_OK(acc_accelerator_optimizer_step(acc, g.od));
  CHECK(g.gdw[0] == 0.25f, "D's gradient unscaled once: %g", (double)g.gdw[0]);
  CHECK(g.ggb[0] == 0.125f * bs, "G under no_sync keeps its scaled gradient %g, got %g", (double)(0.125f * bs),
        (double)g.ggb[0]);
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, g.od));
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  REQUIRE_OK(acc_grad_scaler_get_state(sc, &scale, &tracker));
  CHECK(tracker == 1, "D's iteration updated the scaler once (tracker %lld)", (long long)tracker);
  REQUIRE_OK(acc_accelerator_no_sync(acc, g.G, 0));
  for (int i = 0; i < XD; i++) g.ggb[i] += 0.125f * acc_accelerator_backward_scale(acc);
  float gb0 = g.gb[0];
  REQUIRE_OK(acc_accelerator_backward_model(acc, g.G));
  REQUIRE_OK(acc_accelerator_optimizer_step(acc, g.og));
  CHECK(g.ggb[0] == 0.25f, "G's window unscaled once: %g (expected 0.25)", (double)g.ggb[0]);
  CHECK(g.gb[0] == gb0 - 0.5f * 0.25f, "G stepped: %g (expected %g)", (double)g.gb[0], (double)(gb0 - 0.125f));
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  REQUIRE_OK(acc_grad_scaler_get_state(sc, &scale, &tracker));
  CHECK(tracker == 2 && scale == 512.0f, "G's iteration updated the scaler once more (tracker %lld, scale %g)",
        (long long)tracker, (double)scale);
  gan_free(&g);
  acc_accelerator_destroy(acc);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_multimodel <dir> [zero_stage]\n");
    return 2;
  }
  int zero = argc > 2 ? atoi(argv[2]) : 0;
  acc_accelerator *probe = NULL;
  REQUIRE_OK(acc_accelerator_create(&probe, NULL));
  rank = acc_accelerator_process_index(probe);
  nprocs = acc_accelerator_num_processes(probe);
  acc_test_rank = rank;
  /* probe holds the process state (and the group) while the test's accelerators come and go */
  equivalence(argv[1], zero, 0);
  equivalence(argv[1], zero, 1);
  if (zero == 0) fp16();
  acc_accelerator_destroy(probe);
  return acc_test_finish("accel_multimodel");
}
