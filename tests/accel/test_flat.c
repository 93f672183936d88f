/* Registering what a trainer already has (acc_model_add_flat, acc_model_set_flat_grads,
 * acc_model_set_grad), run by the launcher at 1..3 processes:
 *  - a table of (name, shape) over one parameter buffer: each parameter's data and gradient at
 *    the running offset; the table is checked whole (bad shape, duplicate, NULL buffer: clear
 *    errors, model unchanged);
 *  - gradients still missing at backward / grad_ready: an error naming the first such parameter;
 *  - attached after prepare_model: backward averages the attached buffer in place, and no staging
 *    buffer exists (sync buffer floats 0 with buckets smaller than the model, while the same
 *    model with scattered gradients needs one: the check can fail);
 *  - replaced between steps: the next backward reduces the new buffer and leaves the old alone;
 *  - a library AdamW created before the gradients were attached steps them like one created on
 *    a model that had them from the start. */
#include <math.h>

#include "acc_test.h"
#include "core/internal.h"

size_t acc__accelerator_sync_buffer_floats(const acc_accelerator *acc);

static int rank, nprocs;

#define NT 4
static const acc_param_spec table[NT] = {
    {"wte", 2, {5, 3}}, {"ln.w", 1, {3}}, {"fc.w", 2, {3, 4}}, {"fc.b", 1, {4}},
}; /* 15 + 3 + 12 + 4 = 34 floats */
#define NUMEL 34

static float gval(int r, size_t k) { return 0.25f * (float)(r + 1) + 0.01f * (float)k; }

static void test_table(void) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  float params[NUMEL], grads[NUMEL];
  size_t first = 99;
  CHECK_OK(acc_model_add_flat(m, table, NT, params, grads, &first));
  CHECK(first == 0, "first index %zu, expected 0", first);
  CHECK(acc_model_num_parameters(m) == NT && acc_model_numel(m) == NUMEL, "%zu parameters, %zu floats",
        acc_model_num_parameters(m), acc_model_numel(m));
  size_t off = 0;
  for (size_t i = 0; i < NT; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    CHECK(strcmp(p->name, table[i].name) == 0 && p->data == params + off && p->grad == grads + off,
          "parameter %zu '%s' at offset %zu", i, p->name, off);
    CHECK(acc_model_requires_grad(m, i), "parameter %zu takes a gradient", i);
    off += p->numel;
  }
  /* a second table appended: its index returned */
  float p2[6];
  acc_param_spec t2[2] = {{"head.w", 1, {4}}, {"head.b", 1, {2}}};
  CHECK_OK(acc_model_add_flat(m, t2, 2, p2, NULL, &first));
  CHECK(first == NT, "second table starts at %zu, expected %d", first, NT);
  CHECK(acc_model_parameter(m, NT)->grad == NULL && acc_model_requires_grad(m, NT),
        "a table without gradients takes them later");
  /* errors: the model is left as it was */
  acc_param_spec bad[2] = {{"x", 1, {4}}, {"y", 2, {3, 0}}};
  CHECK_ERR(acc_model_add_flat(m, bad, 2, p2, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "'y' (row 1) has dimension 1");
  acc_param_spec dup[2] = {{"x", 1, {4}}, {"x", 1, {2}}};
  CHECK_ERR(acc_model_add_flat(m, dup, 2, p2, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "'x' appears twice");
  acc_param_spec again[1] = {{"wte", 1, {4}}};
  CHECK_ERR(acc_model_add_flat(m, again, 1, p2, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "'wte' is already registered");
  CHECK_ERR(acc_model_add_flat(m, t2, 2, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "parameter buffer is NULL");
  CHECK(acc_model_num_parameters(m) == NT + 2, "failed calls registered nothing (%zu)", acc_model_num_parameters(m));
  CHECK_ERR(acc_model_set_flat_grads(m, 1, grads), ACC_ERR_INVALID_ARGUMENT, "does not start a table");
  CHECK_ERR(acc_model_set_grad(m, 77, grads), ACC_ERR_INVALID_ARGUMENT, "index 77 is out of range");
  CHECK_ERR(acc_model_set_grad(m, 0, NULL), ACC_ERR_INVALID_ARGUMENT, "gradient of 'wte' is NULL");
  /* a frozen parameter (add_parameter without gradient) becomes trainable by set_grad */
  float f[2], fg[2];
  int64_t s2[1] = {2};
  CHECK_OK(acc_model_add_parameter(m, "frozen", f, NULL, 1, s2));
  CHECK(!acc_model_requires_grad(m, NT + 2), "frozen");
  CHECK_OK(acc_model_set_grad(m, NT + 2, fg));
  CHECK(acc_model_requires_grad(m, NT + 2) && acc_model_parameter(m, NT + 2)->grad == fg, "attached");
  acc_model_destroy(m);
}

static acc_accelerator *make_acc(void) {
  acc_accelerator_options o;
  REQUIRE_OK(acc_accelerator_options_init(&o, ACC_ACCELERATOR_OPTIONS_VERSION));
  o.bucket_cap_bytes = 20 * sizeof(float); /* two buckets over the 34 floats, of several parameters */
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  return acc;
}

static void test_lazy(void) {
  acc_accelerator *acc = make_acc();
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  float params[NUMEL];
  for (size_t k = 0; k < NUMEL; k++) params[k] = 0.5f * (float)k;
  size_t first;
  REQUIRE_OK(acc_model_add_flat(m, table, NT, params, NULL, &first));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  CHECK_ERR(acc_accelerator_backward(acc), ACC_ERR_INVALID_USAGE, "parameter 'wte' takes a gradient but none");
  CHECK_ERR(acc_accelerator_grad_ready(acc, 0), ACC_ERR_INVALID_USAGE, "parameter 'wte' takes a gradient but none");
  /* allocated lazily, as on a trainer's first backward pass */
  float *grads = calloc(NUMEL, sizeof(float)), *grads2 = calloc(NUMEL, sizeof(float));
  REQUIRE_OK(acc_model_set_flat_grads(m, first, grads));
  for (size_t k = 0; k < NUMEL; k++) grads[k] = gval(rank, k);
  CHECK_OK(acc_accelerator_backward(acc));
  int bad = 0;
  for (size_t k = 0; k < NUMEL; k++) {
    double want = 0;
    for (int r = 0; r < nprocs; r++) want += gval(r, k);
    want /= nprocs;
    if (fabs(grads[k] - want) > 1e-6) bad++;
  }
  CHECK(bad == 0, "%d gradients differ from the mean over processes", bad);
  CHECK(acc__accelerator_sync_buffer_floats(acc) == 0,
        "flat gradients are reduced in place: no staging buffer, got %zu floats",
        acc__accelerator_sync_buffer_floats(acc));
  /* replaced between steps: the next backward reduces the new buffer */
  REQUIRE_OK(acc_model_set_flat_grads(m, first, grads2));
  for (size_t k = 0; k < NUMEL; k++) grads[k] = -1.0f, grads2[k] = (float)(rank + 1);
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  CHECK_OK(acc_accelerator_backward(acc));
  float mean = (float)(nprocs + 1) / 2.0f;
  CHECK(grads2[0] == mean && grads2[NUMEL - 1] == mean, "replaced buffer averaged: %g, expected %g", grads2[0], mean);
  CHECK(grads[0] == -1.0f && grads[NUMEL - 1] == -1.0f, "the old buffer is left alone: %g", grads[0]);
  CHECK(acc__accelerator_sync_buffer_floats(acc) == 0, "still no staging buffer after the rebuild");
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  free(grads);
  free(grads2);

  /* the same model with scattered gradients needs a staging buffer (the check above can fail) */
  acc = make_acc();
  REQUIRE_OK(acc_model_create(&m));
  float *scattered = calloc(2 * NUMEL, sizeof(float));
  size_t off = 0;
  for (size_t i = 0; i < NT; i++) {
    const acc_param_spec *s = &table[i];
    REQUIRE_OK(acc_model_add_parameter(m, s->name, params + off, scattered + 2 * off, s->ndim, s->shape));
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    off += n;
  }
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  CHECK(acc__accelerator_sync_buffer_floats(acc) > 0, "scattered gradients are staged");
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  free(scattered);
}

/* AdamW created before the gradients exist, then steps them like one over eager gradients */
static void test_optimizer_lazy(void) {
  float pa[NUMEL], pb[NUMEL], ga[NUMEL], gb[NUMEL];
  for (size_t k = 0; k < NUMEL; k++) pa[k] = pb[k] = 0.1f * (float)k, ga[k] = gb[k] = gval(0, k);
  acc_model *ma, *mb;
  REQUIRE_OK(acc_model_create(&ma));
  REQUIRE_OK(acc_model_create(&mb));
  size_t fa;
  REQUIRE_OK(acc_model_add_flat(ma, table, NT, pa, NULL, &fa));
  REQUIRE_OK(acc_model_add_flat(mb, table, NT, pb, gb, NULL));
  acc_adamw_options ao;
  REQUIRE_OK(acc_adamw_options_init(&ao, ACC_ADAMW_OPTIONS_VERSION));
  ao.lr = 0.01;
  acc_optimizer *oa, *ob;
  REQUIRE_OK(acc_optimizer_create_adamw(&oa, ma, &ao));
  REQUIRE_OK(acc_optimizer_create_adamw(&ob, mb, &ao));
  REQUIRE_OK(acc_model_set_flat_grads(ma, fa, ga));
  for (int s = 0; s < 3; s++) {
    CHECK_OK(acc_optimizer_step(oa));
    CHECK_OK(acc_optimizer_step(ob));
  }
  CHECK(memcmp(pa, pb, sizeof pa) == 0, "lazy and eager gradients step the same");
  CHECK(pa[0] != 0.0f || pa[1] != 0.1f, "the step changed the parameters");
  acc_optimizer_destroy(oa);
  acc_optimizer_destroy(ob);
  acc_model_destroy(ma);
  acc_model_destroy(mb);
}

int main(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  test_table();
  test_lazy();
  test_optimizer_lazy();
  return acc_test_finish("accel_flat");
}
