/* MLP: parameter layout, init, gradients against central finite differences, gradient scaling
 * and accumulation, and training on a tiny synthetic set. Built twice: cblas and plain C. */
#include <math.h>

#include "acc_test.h"
#include "mlp.h"

static uint64_t rng_state = 12345;
static float urand(void) { /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(rng_state >> 40) / 8388608.0f - 1.0f;
}

static void test_layout(void) {
  mlp_config cfg = MLP_CONFIG_DEFAULT;
  mlp *m = NULL;
  CHECK(mlp_create(&m, &cfg) == 0, "create default: %s", mlp_last_error());
  if (!m) return;
  CHECK(mlp_num_params(m) == 203530, "784-256-10 has 203530 parameters, got %zu", mlp_num_params(m));
  CHECK(mlp_num_tensors(m) == 4, "4 tensors");
  const char *names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  const size_t offsets[4] = {0, 200704, 200960, 203520}, numels[4] = {200704, 256, 2560, 10};
  const int64_t shapes[4][2] = {{256, 784}, {256, 0}, {10, 256}, {10, 0}};
  acc_model *model = NULL;
  CHECK_OK(acc_model_create(&model));
  for (int i = 0; i < 4; i++) {
    const mlp_tensor *t = mlp_tensor_at(m, i);
    CHECK(t && strcmp(t->name, names[i]) == 0, "tensor %d name %s", i, t ? t->name : "NULL");
    CHECK(t && t->offset == offsets[i] && t->numel == numels[i], "tensor %d offset %zu numel %zu",
          i, t ? t->offset : 0, t ? t->numel : 0);
    CHECK(t && t->ndim == (i % 2 ? 1 : 2) && t->shape[0] == shapes[i][0] &&
              (t->ndim == 1 || t->shape[1] == shapes[i][1]),
          "tensor %d shape", i);
    if (t)
      CHECK_OK(acc_model_add_parameter(model, t->name, mlp_params(m) + t->offset,
                                       mlp_grads(m) + t->offset, t->ndim, t->shape));
  }
  CHECK(mlp_tensor_at(m, 4) == NULL && mlp_tensor_at(m, -1) == NULL, "out-of-range tensor");
  CHECK(acc_model_numel(model) == 203530, "registered numel %zu", acc_model_numel(model));
  acc_model_destroy(model);

  /* nn.Linear-style init: |w| <= 1/sqrt(fan_in); reproducible from the seed. */
  mlp_init(m, 7);
  const float *p = mlp_params(m);
  float max1 = 0, max2 = 0;
  double mean1 = 0;
  for (size_t i = 0; i < 200960; i++) {
    max1 = fabsf(p[i]) > max1 ? fabsf(p[i]) : max1;
    mean1 += p[i];
  }
  for (size_t i = 200960; i < 203530; i++) max2 = fabsf(p[i]) > max2 ? fabsf(p[i]) : max2;
  mean1 /= 200960;
  CHECK(max1 <= 1.0f / 28.0f && max1 > 0.99f / 28.0f, "fc1 bound 1/28: max %g", max1);
  CHECK(max2 <= 1.0f / 16.0f && max2 > 0.99f / 16.0f, "fc2 bound 1/16: max %g", max2);
  CHECK(fabs(mean1) < 2e-4, "fc1 mean %g ~ 0", mean1);
  float first = p[0], last = p[203529];
  mlp_init(m, 7);
  CHECK(p[0] == first && p[203529] == last, "same seed, same parameters");
  mlp_init(m, 8);
  CHECK(p[0] != first, "another seed, other parameters");

  /* Errors name the problem. */
  float x[784] = {0};
  CHECK(mlp_forward(m, x, 257) == -1 && strstr(mlp_last_error(), "batch 257 is outside 1..256"),
        "batch bound: %s", mlp_last_error());
  CHECK(mlp_forward(m, x, 1) == 0, "forward 1 row");
  int32_t bad = 10;
  float loss;
  CHECK(mlp_loss(m, &bad, 1, &loss) == -1 && strstr(mlp_last_error(), "label 10 of row 0 is outside 0..9"),
        "label range: %s", mlp_last_error());
  CHECK(mlp_backward(m, x, &bad, 1, 1.0f) == -1 && strstr(mlp_last_error(), "mlp_loss"),
        "backward before loss: %s", mlp_last_error());
  mlp_config bad_cfg = {784, 256, 1, 10, 0};
  mlp *none = (mlp *)1;
  CHECK(mlp_create(&none, &bad_cfg) == -1 && none == NULL && strstr(mlp_last_error(), "max_batch=0"),
        "bad config: %s", mlp_last_error());
  mlp_destroy(m);
  mlp_destroy(NULL);
}

/* Loss at the current parameters for a fixed batch. */
static double loss_at(mlp *m, const float *x, const int32_t *y, int B) {
  float l = 0;
  if (mlp_forward(m, x, B) || mlp_loss(m, y, B, &l)) return NAN;
  return l;
}

static void test_gradcheck(int hidden_layers) {
  enum { IN = 7, H = 6, C = 4, B = 5 };
  mlp_config cfg = {IN, H, hidden_layers, C, 8};
  mlp *m = NULL;
  CHECK(mlp_create(&m, &cfg) == 0, "create: %s", mlp_last_error());
  if (!m) return;
  mlp_init(m, 3);
  float *p = mlp_params(m), *g = mlp_grads(m);
  /* Larger weights than the init so that every layer matters for the loss. */
  for (size_t i = 0; i < mlp_num_params(m); i++) p[i] = urand();
  float x[B * IN];
  int32_t y[B] = {0, 3, 1, 2, 3};
  for (int i = 0; i < B * IN; i++) x[i] = urand();
  float loss;
  CHECK(mlp_forward(m, x, B) == 0 && mlp_loss(m, y, B, &loss) == 0, "forward: %s", mlp_last_error());
  mlp_zero_grad(m);
  CHECK(mlp_backward(m, x, y, B, 1.0f) == 0, "backward: %s", mlp_last_error());

  const float eps = 1e-2f;
  int checked = 0, bad = 0;
  for (int t = 0; t < mlp_num_tensors(m); t++) {
    const mlp_tensor *tn = mlp_tensor_at(m, t);
    size_t stride = tn->numel > 30 ? tn->numel / 30 : 1;
    for (size_t k = 0; k < tn->numel; k += stride) {
      size_t i = tn->offset + k;
      float saved = p[i];
      p[i] = saved + eps;
      double lp = loss_at(m, x, y, B);
      p[i] = saved - eps;
      double lm = loss_at(m, x, y, B);
      p[i] = saved;
      double num = (lp - lm) / (2.0 * eps), ana = g[i];
      double denom = fmax(fmax(fabs(num), fabs(ana)), 1e-3);
      double rel = fabs(num - ana) / denom;
      checked++;
      if (rel >= 1e-2) {
        bad++;
        CHECK(0, "%d hidden layer(s): %s[%zu]: analytic %.6g, numeric %.6g, rel err %.3g",
              hidden_layers, tn->name, k, ana, num, rel);
      }
    }
  }
  CHECK(checked >= 30 * (hidden_layers + 1), "checked %d coordinates", checked);
  CHECK(bad == 0, "%d of %d coordinates off", bad, checked);

  /* Scale and accumulation: two backward passes at scale 0.25 add up to 0.5x the gradient. */
  size_t P = mlp_num_params(m);
  float *ref = malloc(P * sizeof *ref);
  memcpy(ref, g, P * sizeof *ref);
  mlp_zero_grad(m);
  CHECK(mlp_forward(m, x, B) == 0 && mlp_loss(m, y, B, &loss) == 0, "forward again");
  CHECK(mlp_backward(m, x, y, B, 0.25f) == 0 && mlp_backward(m, x, y, B, 0.25f) == 0, "backward x2");
  double worst = 0;
  for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs(g[i] - 0.5 * ref[i]));
  CHECK(worst <= 1e-7, "2 x 0.25 accumulates to 0.5 x the gradient (max diff %g)", worst);
  free(ref);
  mlp_destroy(m);
}

/* Full-batch gradient descent on 4 separable clusters: the loss falls, every point is right. */
static void test_training(void) {
  enum { IN = 8, C = 4, N = 32 };
  mlp_config cfg = {IN, 16, 1, C, N};
  mlp *m = NULL;
  CHECK(mlp_create(&m, &cfg) == 0, "create: %s", mlp_last_error());
  if (!m) return;
  mlp_init(m, 11);
  float x[N * IN];
  int32_t y[N];
  for (int i = 0; i < N; i++) {
    y[i] = i % C;
    for (int d = 0; d < IN; d++) x[i * IN + d] = (d % C == y[i] ? 1.0f : 0.0f) + 0.2f * urand();
  }
  float *p = mlp_params(m), *g = mlp_grads(m);
  size_t P = mlp_num_params(m);
  float first = 0, prev = INFINITY, loss = 0;
  int increases = 0;
  for (int step = 0; step < 50; step++) {
    mlp_zero_grad(m);
    CHECK(mlp_forward(m, x, N) == 0 && mlp_loss(m, y, N, &loss) == 0 &&
              mlp_backward(m, x, y, N, 1.0f) == 0,
          "step %d: %s", step, mlp_last_error());
    if (step == 0) first = loss;
    if (loss > prev) increases++;
    prev = loss;
    for (size_t i = 0; i < P; i++) p[i] -= 0.5f * g[i];
  }
  CHECK(fabsf(first - logf(4.0f)) < 0.15f, "initial loss %g ~ ln 4 = 1.386", first);
  CHECK(increases == 0, "the loss went up %d times in 50 full-batch steps", increases);
  CHECK(loss < 0.1f * first, "loss %g -> %g after 50 steps", first, loss);
  CHECK(mlp_forward(m, x, N) == 0, "final forward");
  CHECK(mlp_count_correct(m, y, N) == N, "training accuracy %d/%d", mlp_count_correct(m, y, N), N);
  int32_t pred[N];
  mlp_predict(m, N, pred);
  CHECK(pred[0] == 0 && pred[1] == 1 && pred[2] == 2 && pred[3] == 3, "predictions");
  mlp_destroy(m);
}

int main(void) {
  test_layout();
  test_gradcheck(1);
  test_gradcheck(2);
  test_gradcheck(0);
  test_training();
  return acc_test_finish("example_mlp");
}
