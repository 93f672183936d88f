/* Parameters and gradients in bf16 / fp16 with float32 master weights in the library
 * (acc_model_add_flat_typed), run by the launcher at 1 and 2 processes:
 *  - equivalence: a linear model trained with the library's AdamW through one accelerator, three
 *    times side by side (float32 table, bf16 table, fp16 table; three prepared models), each
 *    process taking its share of one global batch, against a plain single-process float32 loop
 *    in the same program (no library): the float32 table matches it to 1e-5, the bf16 table to
 *    TOL_BF16, the fp16 table to TOL_F16 (stated tolerances: max |w - w_ref| over all weights,
 *    while training moves the weights by more than 10x the tolerance);
 *  - layout: the program's bf16/fp16 parameters are exactly the master weights rounded, the
 *    master weights keep bits below bf16 precision, and after backward the program's gradients
 *    are the average rounded;
 *  - checkpoints: model_<i>.safetensors stores the float32 master weights (dtype F32, bit-equal);
 *  - bit-exact resume: save_state after K steps, train to N, load_state, train K..N again: the
 *    master weights, the program's half-precision buffers and the optimizer moments end bit for
 *    bit where the uninterrupted run ended;
 *  - dtype errors: gradients given as another dtype, the float32 calls on a typed table, an
 *    unknown dtype, gradients still missing at backward.
 * Usage: test_train_typed <dir> */
#include <math.h>

#include "acc_test.h"
#include "core/internal.h"

#define NI 8           /* inputs */
#define NO 4           /* outputs */
#define NW (NO * NI + NO)
#define GB 8           /* global batch */
#define STEPS 24
#define SAVE_AT 10
#define LR 0.02
#define TOL_F32 1e-5
#define TOL_BF16 5e-3
#define TOL_F16 5e-4

static int rank, nprocs;

static const acc_param_spec table[2] = {{"fc.w", 2, {NO, NI}}, {"fc.b", 1, {NO}}};

/* sample s of step t: inputs and targets, the same in every run */
static void sample(int t, int s, float *x, float *y) {
  for (int i = 0; i < NI; i++) x[i] = sinf(0.37f * (float)(t * GB + s) + 0.91f * (float)i);
  for (int o = 0; o < NO; o++) {
    float v = 0.1f * (float)o;
    for (int i = 0; i < NI; i++) v += (0.05f * (float)(i + 1) - 0.03f * (float)o) * x[i];
    y[o] = v;
  }
}

/* Mean squared error gradient of samples [lo, hi) of step t over weights w (float32), divided by
 * the global batch (the library averages the per-process sums' means: each process divides by
 * its share of the batch). */
static void grad_f32(const float *w, int t, int lo, int hi, int div, float *g) {
  memset(g, 0, NW * sizeof *g);
  for (int s = lo; s < hi; s++) {
    float x[NI], y[NO];
    sample(t, s, x, y);
    for (int o = 0; o < NO; o++) {
      float p = w[NO * NI + o];
      for (int i = 0; i < NI; i++) p += w[o * NI + i] * x[i];
      float d = 2.0f * (p - y[o]) / (float)div;
      for (int i = 0; i < NI; i++) g[o * NI + i] += d * x[i];
      g[NO * NI + o] += d;
    }
  }
}

static float to_f32(uint16_t v, acc_dtype dt) { return dt == ACC_BF16 ? acc__bf16_to_f32(v) : acc__f16_to_f32(v); }
static uint16_t from_f32(float v, acc_dtype dt) { return dt == ACC_BF16 ? acc__f32_to_bf16(v) : acc__f32_to_f16(v); }

/* The same gradient for half-precision weights: computed in float32 from the widened weights, then
 * stored in the gradients' dtype, as a bf16 trainer does. */
static void grad_half(const uint16_t *w, acc_dtype dt, int t, int lo, int hi, int div, uint16_t *g) {
  float wf[NW], gf[NW];
  for (int k = 0; k < NW; k++) wf[k] = to_f32(w[k], dt);
  grad_f32(wf, t, lo, hi, div, gf);
  for (int k = 0; k < NW; k++) g[k] = from_f32(gf[k], dt);
}

static void init_weights(float *w) {
  for (int k = 0; k < NW; k++) w[k] = 0.3f * cosf(1.3f * (float)k);
}

/* The reference: plain float32 AdamW (torch semantics, weight decay 0.01) on the whole batch. */
static void reference(float *w) {
  float m[NW] = {0}, v[NW] = {0}, g[NW];
  init_weights(w);
  for (int t = 0; t < STEPS; t++) {
    grad_f32(w, t, 0, GB, GB, g);
    float b1 = 0.9f, b2 = 0.999f, bc1 = 1.0f - powf(b1, (float)(t + 1)), bc2 = 1.0f - powf(b2, (float)(t + 1));
    for (int k = 0; k < NW; k++) {
      w[k] *= 1.0f - (float)LR * 0.01f;
      m[k] = b1 * m[k] + (1 - b1) * g[k];
      v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
      float denom = sqrtf(v[k]) / sqrtf(bc2) + 1e-8f;
      w[k] -= (float)LR / bc1 * m[k] / denom;
    }
  }
}

typedef struct run {
  acc_model *m[3];
  acc_optimizer *o[3];
  float w32[NW], g32[NW];
  uint16_t wb[NW], gb[NW], wh[NW], gh[NW];
  size_t first_b, first_h;
} run;

static const char *const kind_name[3] = {"float32", "bf16", "fp16"};

static void one_step(acc_accelerator *acc, run *r, int t) {
  int per = GB / nprocs, lo = rank * per, hi = lo + per;
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  grad_f32(r->w32, t, lo, hi, per, r->g32);
  grad_half(r->wb, ACC_BF16, t, lo, hi, per, r->gb);
  grad_half(r->wh, ACC_F16, t, lo, hi, per, r->gh);
  uint16_t local_b[NW];
  memcpy(local_b, r->gb, sizeof local_b);
  REQUIRE_OK(acc_accelerator_backward(acc));
  if (t == 0) { /* the program's bf16 gradients now hold the average, rounded */
    float all[2 * NW];
    float mine[NW];
    for (int k = 0; k < NW; k++) mine[k] = to_f32(local_b[k], ACC_BF16);
    REQUIRE_OK(acc_accelerator_all_gather(acc, mine, all, NW, ACC_F32));
    int bad = 0;
    for (int k = 0; k < NW; k++) {
      float avg = 0;
      for (int p = 0; p < nprocs; p++) avg += all[p * NW + k];
      avg /= (float)nprocs;
      if (r->gb[k] != acc__f32_to_bf16(avg)) bad++;
    }
    CHECK(bad == 0, "%d bf16 gradients are not the rounded float32 average after backward", bad);
  }
  for (int k = 0; k < 3; k++) REQUIRE_OK(acc_accelerator_optimizer_step(acc, r->o[k]));
  for (int k = 0; k < 3; k++) REQUIRE_OK(acc_accelerator_optimizer_zero_grad(acc, r->o[k]));
}

static uint64_t hash_run(const run *r) {
  uint64_t h = 14695981039346656037ull;
#define MIX(p, n)                                                              \
  for (size_t i_ = 0; i_ < (size_t)(n); i_++) h = (h ^ ((const unsigned char *)(p))[i_]) * 1099511628211ull
  MIX(r->w32, sizeof r->w32);
  MIX(r->wb, sizeof r->wb);
  MIX(r->wh, sizeof r->wh);
  for (int k = 1; k < 3; k++)
    for (size_t i = 0; i < acc_model_num_parameters(r->m[k]); i++) {
      const acc_param *p = acc_model_parameter(r->m[k], i);
      MIX(p->data, p->numel * sizeof(float));
    }
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < acc_optimizer_state_count(r->o[k]); i++) {
      const float *d = NULL;
      size_t n = 0;
      REQUIRE_OK(acc_optimizer_state_get(r->o[k], i, NULL, &d, &n, NULL, NULL));
      MIX(d, n * sizeof(float));
    }
  return h;
}

static const float *master(const run *r, int k) { return acc_model_parameter(r->m[k], 0)->data; }

static void test_errors(void) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  uint16_t w[NW], g[NW];
  memset(w, 0, sizeof w);
  size_t first = 0;
  CHECK_ERR(acc_model_add_flat_typed(m, table, 2, ACC_I32, w, NULL, NULL), ACC_ERR_INVALID_ARGUMENT,
            "choose ACC_F32, ACC_BF16 or ACC_F16");
  CHECK_OK(acc_model_add_flat_typed(m, table, 2, ACC_BF16, w, NULL, &first));
  CHECK(acc_model_parameter_dtype(m, 0) == ACC_BF16 && acc_model_parameter_dtype(m, 1) == ACC_BF16,
        "the table's parameters report bf16");
  CHECK(acc_model_parameter_storage(m, 1) == (const void *)(w + NO * NI), "fc.b's storage is the program's");
  CHECK_ERR(acc_model_set_flat_grads_typed(m, first, ACC_F16, g), ACC_ERR_MISMATCH,
            "holds bf16 parameters but the gradients are given as fp16");
  float gf[NW];
  CHECK_ERR(acc_model_set_flat_grads(m, first, gf), ACC_ERR_MISMATCH,
            "acc_model_set_flat_grads_typed(model, 0, ACC_BF16");
  CHECK_ERR(acc_model_set_grad(m, 1, gf), ACC_ERR_MISMATCH, "'fc.b' belongs to a bf16 table");
  CHECK_ERR(acc_model_set_flat_grads_typed(m, 1, ACC_BF16, g), ACC_ERR_INVALID_ARGUMENT, "does not start a table");
  acc_model_destroy(m);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  test_errors();
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = rank;
  if (GB % nprocs) {
    fprintf(stderr, "the global batch %d must divide by %d processes\n", GB, nprocs);
    return 2;
  }

  static run r;
  init_weights(r.w32);
  for (int k = 0; k < NW; k++) {
    r.wb[k] = acc__f32_to_bf16(r.w32[k]);
    r.wh[k] = acc__f32_to_f16(r.w32[k]);
  }
  for (int k = 0; k < 3; k++) REQUIRE_OK(acc_model_create(&r.m[k]));
  REQUIRE_OK(acc_model_add_flat(r.m[0], table, 2, r.w32, r.g32, NULL));
  /* the bf16 table's gradients come later, as in a trainer that allocates them lazily */
  REQUIRE_OK(acc_model_add_flat_typed(r.m[1], table, 2, ACC_BF16, r.wb, NULL, &r.first_b));
  REQUIRE_OK(acc_model_add_flat_typed(r.m[2], table, 2, ACC_F16, r.wh, r.gh, &r.first_h));
  for (int k = 0; k < 3; k++) REQUIRE_OK(acc_accelerator_prepare_model(acc, r.m[k]));
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  ao.lr = LR;
  ao.weight_decay = 0.01;
  for (int k = 0; k < 3; k++) {
    REQUIRE_OK(acc_optimizer_create_adamw(&r.o[k], r.m[k], &ao));
    REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, r.o[k]));
  }
  /* backward before the bf16 gradients exist: the error names the parameter */
  REQUIRE_OK(acc_accelerator_accumulate(acc));
  CHECK_ERR(acc_accelerator_backward(acc), ACC_ERR_INVALID_USAGE, "'fc.w' takes a gradient but none is attached");
  REQUIRE_OK(acc_model_set_flat_grads_typed(r.m[1], r.first_b, ACC_BF16, r.gb));

  char dir[900];
  snprintf(dir, sizeof dir, "%s/np%d", argv[1], nprocs);
  if (rank == 0) { /* a fresh directory: the checkpoint of a previous run would refuse the save */
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  float saved_master[NW];
  for (int t = 0; t < STEPS; t++) {
    if (t == SAVE_AT) {
      REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
      memcpy(saved_master, master(&r, 1), sizeof saved_master);
    }
    one_step(acc, &r, t);
  }

  /* equivalence with the plain float32 loop */
  float ref[NW], init[NW];
  reference(ref);
  init_weights(init);
  double moved = 0, err[3] = {0, 0, 0};
  const double tol[3] = {TOL_F32, TOL_BF16, TOL_F16};
  for (int k = 0; k < NW; k++) {
    moved = fmax(moved, fabs((double)ref[k] - init[k]));
    for (int q = 0; q < 3; q++) err[q] = fmax(err[q], fabs((double)master(&r, q)[k] - ref[k]));
  }
  CHECK(moved > 10 * TOL_BF16, "training moved the weights by only %g", moved);
  for (int q = 0; q < 3; q++)
    CHECK(err[q] <= tol[q], "%s table: max |w - w_ref| = %g, over the tolerance %g", kind_name[q], err[q], tol[q]);
  if (rank == 0)
    printf("max |w - w_ref| after %d steps at %d process(es): float32 %.3g, bf16 %.3g, fp16 %.3g "
           "(weights moved %.3g)\n",
           STEPS, nprocs, err[0], err[1], err[2], moved);

  /* the program's buffers are the master weights rounded; the master keeps more bits */
  int not_rounded = 0, finer = 0;
  for (int k = 0; k < NW; k++) {
    not_rounded += r.wb[k] != acc__f32_to_bf16(master(&r, 1)[k]) || r.wh[k] != acc__f32_to_f16(master(&r, 2)[k]);
    finer += acc__bf16_to_f32(acc__f32_to_bf16(master(&r, 1)[k])) != master(&r, 1)[k];
  }
  CHECK(not_rounded == 0, "%d program values are not the rounded master weights", not_rounded);
  CHECK(finer > NW / 2, "only %d of %d master weights hold bits below bf16 precision", finer, NW);

  /* the checkpoint holds the float32 master weights */
  char path[1000];
  snprintf(path, sizeof path, "%s/model_1.safetensors", dir);
  acc_safetensors *f = NULL;
  REQUIRE_OK(acc_safetensors_open(&f, path));
  acc_tensor_view tv;
  REQUIRE_OK(acc_safetensors_find(f, "fc.w", &tv));
  CHECK(tv.dtype == ACC_F32 && tv.nbytes == NO * NI * sizeof(float), "model_1.safetensors: fc.w is dtype %d, %zu bytes",
        (int)tv.dtype, tv.nbytes);
  CHECK(tv.nbytes == NO * NI * sizeof(float) && memcmp(tv.data, saved_master, tv.nbytes) == 0,
        "model_1.safetensors: fc.w is not the float32 master weights at the save");
  acc_safetensors_close(f);

  /* bit-exact resume: load at step SAVE_AT and train the rest again */
  const uint64_t straight = hash_run(&r);
  memset(r.wb, 0xff, sizeof r.wb); /* the program's copy is stale garbage: load_state must rewrite it */
  REQUIRE_OK(acc_accelerator_load_state(acc, dir, NULL));
  int stale = 0;
  for (int k = 0; k < NW; k++) stale += r.wb[k] != acc__f32_to_bf16(saved_master[k]);
  CHECK(stale == 0, "after load_state %d bf16 parameters are not the loaded master weights rounded", stale);
  for (int t = SAVE_AT; t < STEPS; t++) one_step(acc, &r, t);
  CHECK(hash_run(&r) == straight, "resumed at step %d, the run does not end bit for bit like the uninterrupted one",
        SAVE_AT);

  acc_accelerator_destroy(acc);
  for (int k = 0; k < 3; k++) {
    acc_optimizer_destroy(r.o[k]);
    acc_model_destroy(r.m[k]);
  }
  return acc_test_finish("train_typed");
}
