/* FSDP over a bf16 / fp16 table (docs/fsdp.md, "Precision") through the real launcher.
 *
 *   test_fsdp_lowp train bf16|fp16 STRATEGY [nosync]
 *       the MLP of test_fsdp.c with its parameters read as 16-bit values (acc_fsdp_*_begin_typed)
 *       and its gradients added into the 16-bit buffers (the program's own 16-bit arithmetic),
 *       trained 50 steps with AdamW, clipping and 2 accumulation micro-steps under STRATEGY and,
 *       side by side in the same processes, under NO_SHARD: the float32 master shards must agree
 *       to 1e-5 relative, every step's clip norm too. Also: the gathered 16-bit values are exactly
 *       the master weights rounded (every element of every unit), the masters keep bits below
 *       16-bit precision (they are float32, not rounded), the shards are float32; and the same
 *       program over a float32 table (the typed calls with ACC_F32) ends near (bf16: 2e-2, fp16: 2e-3
 *       of the largest weight) but not at the 16-bit run's weights.
 *       fp16: the accelerator runs fp16 mixed precision; the program seeds its backward with
 *       acc_accelerator_backward_scale; at step 5 process 0 alone writes an inf into a gradient:
 *       the step is skipped on every process under both strategies, the loss scale backs off and
 *       grows again identically (the scaler's state is compared after every step).
 *   test_fsdp_lowp ckpt STRATEGY DIR
 *       bf16: 25 steps, a SHARDED_STATE_DICT save and a FULL save (acc_fsdp_save_model), 25 more;
 *       a new FSDP state loads the sharded checkpoint and its 25 steps end bit for bit where the
 *       uninterrupted run ended; a float32 and an fp16 table load it to the same float32 masters.
 *       Process 0: the FULL model.safetensors is byte-identical to what
 *       acc_save_model writes for an unsharded bf16 typed table (acc_model_add_flat_typed) holding
 *       the same float32 master weights.
 *   test_fsdp_lowp errors                 bad input, one process, fp16 accelerator: a dtype that is
 *       not a parameter dtype; the float begin calls on a bf16 table, a typed call with another 16-bit
 *       dtype or a non-float dtype; a released 16-bit buffer reads NaN and a write into it is named
 *       (unit, element); unscaling while a unit is in backward; a pass after unscaling without
 *       acc_fsdp_optimizer_step; the typed calls with ACC_F32 on a float32 table.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_test.h"
#include "accelerate.h"

#define ACC_CHECK(x)                 \
  do {                               \
    acc_result rc__ = (x);           \
    if (rc__ != ACC_OK) return rc__; \
  } while (0)

enum { D = 7, H = 13, O = 3, G = 12, STEPS = 50, MICRO = 2, NUNITS = 4, INF_STEP = 5 };

static const acc_param_spec table[] = {
    {"l1.w", 2, {H, D}}, {"l1.b", 1, {H}}, {"l2.w", 2, {H, H}}, {"l2.b", 1, {H}}, {"l3.w", 2, {O, H}}, {"l3.b", 1, {O}},
};
enum { NROWS = 6 };
static size_t total_numel(void) { return H * D + H + H * H + H + O * H + O; }

static acc_accelerator *acc;
static int rank, world;
static acc_dtype DT = ACC_BF16; /* the table's dtype of the run being built or stepped */
static int inject_inf;          /* fp16: process 0 writes an inf into a gradient at INF_STEP */

static float sample(size_t g, int k, int step) { return (float)sin(0.7 * (double)g + 1.3 * k + 0.17 * step); }

static void init_params(float *p) {
  size_t n = total_numel();
  for (size_t i = 0; i < n; i++) p[i] = 0.4f * (float)cos(0.91 * (double)i);
}

/* the program's 16-bit arithmetic: widen to compute, round to store */
static void to32(float *d, const void *s, size_t n) {
  if (DT == ACC_F32) memcpy(d, s, n * sizeof *d);
  else if (DT == ACC_BF16) acc_bf16_to_f32(d, s, n);
  else acc_f16_to_f32(d, s, n);
}
static void to16(void *d, const float *s, size_t n) {
  if (DT == ACC_F32) memcpy(d, s, n * sizeof *s);
  else if (DT == ACC_BF16) acc_f32_to_bf16(d, s, n);
  else acc_f32_to_f16(d, s, n);
}
/* g16 += g (one rounding per element, as a 16-bit kernel's accumulate) */
static void add16(void *g16, const float *g, size_t n) {
  float *t = malloc(n * sizeof *t);
  to32(t, g16, n);
  for (size_t i = 0; i < n; i++) t[i] += g[i];
  to16(g16, t, n);
  free(t);
}

typedef struct run {
  acc_fsdp *f;
  acc_optimizer *opt;
  size_t u[NUNITS];
  size_t numel[NUNITS];
} run;

static acc_result make_run(run *r, int strategy) {
  acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
  pl.sharding_strategy = strategy;
  ACC_CHECK(acc_fsdp_create(acc, table, NROWS, DT, &pl, &r->f));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer1", 0, 2, &r->u[0]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer2", 2, 2, &r->u[1]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head", 4, 1, &r->u[2]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head_bias", 5, 1, &r->u[3]));
  float *p = malloc(total_numel() * sizeof *p);
  init_params(p);
  acc_result rc = acc_fsdp_prepare(r->f, p);
  free(p);
  ACC_CHECK(rc);
  for (int k = 0; k < NUNITS; k++) ACC_CHECK(acc_fsdp_unit_info(r->f, r->u[k], NULL, NULL, NULL, &r->numel[k]));
  acc_adamw_options ao;
  acc_adamw_options_init(&ao, ACC_ADAMW_OPTIONS_VERSION);
  ao.lr = 0.01;
  ao.weight_decay = 0.05;
  return acc_optimizer_create_adamw(&r->opt, acc_fsdp_model(r->f), &ao);
}

static void free_run(run *r) {
  acc_optimizer_destroy(r->opt);
  acc_fsdp_destroy(r->f);
}

static void affine(const float *w, const float *b, const float *x, float *y, int out, int in) {
  for (int o = 0; o < out; o++) {
    float s = b[o];
    for (int i = 0; i < in; i++) s += w[o * in + i] * x[i];
    y[o] = s;
  }
}

/* unit k's gathered 16-bit parameters, widened into w (numel floats) */
static acc_result fwd(run *r, int k, float *w) {
  const void *p;
  ACC_CHECK(acc_fsdp_unit_forward_begin_typed(r->f, r->u[k], DT, &p));
  to32(w, p, r->numel[k]);
  return ACC_OK;
}

static acc_result micro_step(run *r, int step, int micro) {
  int per = G / world;
  float x[G][D], h1[G][H], h2[G][H], y[G][O];
  float w1[H * D + H], w2[H * H + H], w3[O * H], w3b[O];
  for (int s = 0; s < per; s++)
    for (int k = 0; k < D; k++) x[s][k] = sample((size_t)(rank * per + s), k, step * MICRO + micro);
  ACC_CHECK(fwd(r, 0, w1));
  for (int s = 0; s < per; s++) {
    affine(w1, w1 + H * D, x[s], h1[s], H, D);
    for (int k = 0; k < H; k++) h1[s][k] = tanhf(h1[s][k]);
  }
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[0]));
  ACC_CHECK(fwd(r, 1, w2));
  for (int s = 0; s < per; s++) {
    affine(w2, w2 + H * H, h1[s], h2[s], H, H);
    for (int k = 0; k < H; k++) h2[s][k] = tanhf(h2[s][k]);
  }
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[1]));
  ACC_CHECK(fwd(r, 2, w3));
  ACC_CHECK(fwd(r, 3, w3b));
  for (int s = 0; s < per; s++) affine(w3, w3b, h2[s], y[s], O, H);
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[2]));
  /* backward, seeded with the accelerator's factor (the loss scale under fp16) */
  const float scale = (float)world / (float)(G * MICRO) * acc_accelerator_backward_scale(acc);
  float dy[G][O], dh2[G][H], dh1[G][H];
  float g1[H * D + H] = {0}, g2[H * H + H] = {0}, g3[O * H] = {0}, g3b[O] = {0};
  for (int s = 0; s < per; s++)
    for (int o = 0; o < O; o++) dy[s][o] = (y[s][o] - sample((size_t)(rank * per + s), 100 + o, step)) * scale;
  const void *p;
  void *gb16, *g16;
  ACC_CHECK(acc_fsdp_unit_backward_begin_typed(r->f, r->u[3], DT, &p, &gb16));
  ACC_CHECK(acc_fsdp_unit_backward_begin_typed(r->f, r->u[2], DT, &p, &g16));
  to32(w3, p, O * H);
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh2[s][k] = 0;
    for (int o = 0; o < O; o++) {
      for (int k = 0; k < H; k++) {
        g3[o * H + k] += dy[s][o] * h2[s][k];
        dh2[s][k] += w3[o * H + k] * dy[s][o];
      }
      g3b[o] += dy[s][o];
    }
    for (int k = 0; k < H; k++) dh2[s][k] *= 1 - h2[s][k] * h2[s][k];
  }
  add16(g16, g3, O * H);
  add16(gb16, g3b, O);
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[2]));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_backward_begin_typed(r->f, r->u[1], DT, &p, &g16));
  to32(w2, p, H * H + H);
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh1[s][k] = 0;
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < H; k++) {
        g2[o * H + k] += dh2[s][o] * h1[s][k];
        dh1[s][k] += w2[o * H + k] * dh2[s][o];
      }
      g2[H * H + o] += dh2[s][o];
    }
    for (int k = 0; k < H; k++) dh1[s][k] *= 1 - h1[s][k] * h1[s][k];
  }
  add16(g16, g2, H * H + H);
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[1]));
  ACC_CHECK(acc_fsdp_unit_backward_begin_typed(r->f, r->u[0], DT, &p, &g16));
  for (int s = 0; s < per; s++)
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < D; k++) g1[o * D + k] += dh1[s][o] * x[s][k];
      g1[H * D + o] += dh1[s][o];
    }
  /* fp16: an overflow on process 0 only (its gradient of element 0 of layer 1) */
  if (inject_inf && step == INF_STEP && micro == 0 && rank == 0) g1[0] = INFINITY;
  add16(g16, g1, H * D + H);
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[0]));
  return ACC_OK;
}

static acc_result train_step(run *r, int step, int nosync, float *norm) {
  for (int m = 0; m < MICRO; m++) {
    ACC_CHECK(acc_fsdp_set_no_sync(r->f, nosync && m < MICRO - 1));
    ACC_CHECK(micro_step(r, step, m));
  }
  ACC_CHECK(acc_fsdp_clip_grad_norm(r->f, 0.5f, 2.0, norm));
  ACC_CHECK(acc_fsdp_optimizer_step(r->f, r->opt));
  return acc_optimizer_zero_grad(r->opt);
}

/* The float32 master weights of the whole table, from every process's shard (all-gathered). */
static acc_result full_masters(run *r, float *out) {
  acc_model *m = acc_fsdp_model(r->f);
  size_t off = 0;
  for (int k = 0; k < NUNITS; k++) {
    const acc_param *p = acc_model_parameter(m, r->u[k]);
    if (acc_fsdp_strategy(r->f) == ACC_FSDP_NO_SHARD) {
      memcpy(out + off, p->data, r->numel[k] * sizeof(float));
    } else {
      float *all = malloc(p->numel * (size_t)world * sizeof *all);
      acc_result rc = acc_all_gather(acc_accelerator_state(acc), p->data, all, p->numel, ACC_F32);
      if (rc == ACC_OK) memcpy(out + off, all, r->numel[k] * sizeof(float));
      free(all);
      ACC_CHECK(rc);
    }
    off += r->numel[k];
  }
  return ACC_OK;
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-6);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

static int parse_strategy(const char *s) {
  return !strcmp(s, "FULL_SHARD") ? ACC_FSDP_FULL_SHARD : !strcmp(s, "SHARD_GRAD_OP") ? ACC_FSDP_SHARD_GRAD_OP
         : !strcmp(s, "NO_SHARD") ? ACC_FSDP_NO_SHARD : !strcmp(s, "HYBRID_SHARD") ? ACC_FSDP_HYBRID_SHARD
                                                    : ACC_UNSET;
}

/* The 16-bit values a forward gathers are the master weights rounded, every element. */
static void check_gathered(run *r, const float *masters) {
  size_t off = 0;
  for (int k = 0; k < NUNITS; k++) {
    size_t n = r->numel[k];
    uint16_t *want = malloc(n * sizeof(float)); /* to16 also serves float32 runs */
    to16(want, masters + off, n);
    const void *p;
    CHECK_OK(acc_fsdp_unit_forward_begin_typed(r->f, r->u[k], DT, &p));
    CHECK(memcmp(p, want, n * sizeof *want) == 0, "unit %d: the gathered 16-bit values are not the rounded masters", k);
    CHECK_OK(acc_fsdp_unit_forward_end(r->f, r->u[k]));
    free(want);
    off += n;
  }
  CHECK_OK(acc_fsdp_reshard(r->f));
}

static void test_train(int strategy, int nosync) {
  run a = {0}, ref = {0}, f32 = {0};
  const acc_dtype want = DT;
  CHECK_OK(make_run(&a, strategy));
  CHECK_OK(make_run(&ref, ACC_FSDP_NO_SHARD));
  /* and the same program over a float32 table (the typed calls with ACC_F32): where 16-bit training
   * should land near, which a mistake common to both strategies (a wrong scale, a lost gradient)
   * would not */
  DT = ACC_F32;
  CHECK_OK(make_run(&f32, strategy));
  DT = want;
  CHECK(acc_fsdp_dtype(a.f) == DT, "acc_fsdp_dtype");
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  CHECK((DT == ACC_F16) == (sc != NULL && acc_grad_scaler_enabled(sc)), "the accelerator's scaler");
  double worst_norm = 0, worst_n32 = 0, first_n32 = 0;
  int skipped = 0;
  float scale_after_inf = 0;
  for (int s = 0; s < STEPS; s++) {
    float na = 0, nr = 0, s0 = 0, sa = 0, sr = 0;
    int64_t t0 = 0, ta = 0, tr = 0;
    if (sc) CHECK_OK(acc_grad_scaler_get_state(sc, &s0, &t0));
    CHECK_OK(train_step(&a, s, nosync, &na));
    int skip_a = acc_fsdp_optimizer_step_was_skipped(a.f);
    CHECK(skip_a == acc_accelerator_optimizer_step_was_skipped(acc), "the accelerator's skipped flag");
    if (sc) {
      CHECK_OK(acc_grad_scaler_get_state(sc, &sa, &ta));
      CHECK_OK(acc_grad_scaler_set_state(sc, s0, t0)); /* the reference run steps from the same scale */
    }
    CHECK_OK(train_step(&ref, s, nosync, &nr));
    int skip_r = acc_fsdp_optimizer_step_was_skipped(ref.f);
    if (sc) CHECK_OK(acc_grad_scaler_get_state(sc, &sr, &tr));
    if (sc) CHECK_OK(acc_grad_scaler_set_state(sc, s0, t0));
    DT = ACC_F32;
    float n32 = 0;
    CHECK_OK(train_step(&f32, s, nosync, &n32));
    DT = want;
    /* the true gradient's norm (after unscaling), as the float32 run computes it: a wrong scale, a
     * lost or doubled contribution shows here (AdamW's steps would hide it) */
    if (!skip_a) worst_n32 = fmax(worst_n32, fabs((double)na - n32) / n32);
    if (s == 0) first_n32 = fabs((double)na - n32) / n32;
    CHECK(acc_fsdp_optimizer_step_was_skipped(f32.f) == skip_a, "step %d: the float32 run skipped %d", s,
          acc_fsdp_optimizer_step_was_skipped(f32.f));
    if (sc) CHECK_OK(acc_grad_scaler_set_state(sc, sa, ta));
    CHECK(skip_a == skip_r && sa == sr && ta == tr, "step %d: skipped %d/%d, scale %g/%g, tracker %lld/%lld", s, skip_a,
          skip_r, (double)sa, (double)sr, (long long)ta, (long long)tr);
    CHECK(skip_a == (DT == ACC_F16 && s == INF_STEP), "step %d skipped: %d (only step %d may skip)", s, skip_a,
          INF_STEP);
    skipped += skip_a;
    if (s == INF_STEP && sc) {
      CHECK(sa == s0 * 0.5f, "the overflow did not back the scale off: %g -> %g", (double)s0, (double)sa);
      scale_after_inf = sa;
    }
    if (!skip_a) {
      double d = fabs((double)na - nr) / (fabs((double)nr) + 1e-12);
      if (d > worst_norm) worst_norm = d;
    }
  }
  CHECK(worst_norm <= 1e-5, "clip norms differ by %g relative", worst_norm);
  if (sc) {
    float fin;
    CHECK_OK(acc_grad_scaler_get_state(sc, &fin, NULL));
    CHECK(skipped == 1 && fin > scale_after_inf, "fp16: %d skipped steps, the scale %g after the overflow, %g at "
          "the end",
          skipped, (double)scale_after_inf, (double)fin);
  }
  size_t n = total_numel();
  float *pa = malloc(n * sizeof *pa), *pr = malloc(n * sizeof *pr), *init = malloc(n * sizeof *init);
  CHECK_OK(full_masters(&a, pa));
  CHECK_OK(full_masters(&ref, pr));
  double d = rel_diff(pa, pr, n);
  CHECK(d <= 1e-5, "%s %d vs NO_SHARD: master weights differ by %g relative after %d steps", acc_dtype_name(DT),
        strategy, d, STEPS);
  init_params(init);
  CHECK(rel_diff(pa, init, n) > 1e-3, "the parameters did not move");
  /* near the float32 run, and not equal to it (the 16-bit values were used) */
  float *p32 = malloc(n * sizeof *p32);
  DT = ACC_F32;
  CHECK_OK(full_masters(&f32, p32));
  DT = want;
  double d32 = 0, big = 0;
  for (size_t i = 0; i < n; i++) {
    d32 = fmax(d32, fabs((double)pa[i] - p32[i]));
    big = fmax(big, fabs((double)p32[i]));
  }
  /* AdamW moves weights whose gradient is near zero by about lr whatever its size, so the weights
   * part by more than the 16-bit rounding (measured 2e-2 of the largest for bf16 and fp16 alike) */
  CHECK(d32 > 0 && d32 <= 5e-2 * big, "%s: master weights %.3g from the float32 run's (largest %.3g; at most %.3g)",
        acc_dtype_name(DT), d32, big, 5e-2 * big);
  const double tol_n = DT == ACC_BF16 ? 1e-2 : 1e-3;
  CHECK(first_n32 > 0 && first_n32 <= tol_n && worst_n32 <= 10 * tol_n, "%s: gradient norms %.3g (first step) and "
        "%.3g (worst) from the float32 run's, relative", acc_dtype_name(DT), first_n32, worst_n32);
  free(p32);
  /* float32 masters: some hold bits a 16-bit value cannot */
  uint16_t *h = malloc(n * sizeof(float)); /* to16 also serves float32 runs */
  float *back = malloc(n * sizeof *back);
  to16(h, pa, n);
  to32(back, h, n);
  size_t finer = 0;
  for (size_t i = 0; i < n; i++) finer += back[i] != pa[i];
  CHECK(finer > n / 2, "only %zu of %zu master weights hold more than 16-bit precision", finer, n);
  check_gathered(&a, pa);
  check_gathered(&ref, pr);
  /* the shards are float32: ceil(U / N) floats per unit, N the processes sharing a unit (under
   * HYBRID across machines, the machine's) */
  acc_fsdp_memory m;
  CHECK_OK(acc_fsdp_memory_stats(a.f, &m));
  const size_t sn = strategy == ACC_FSDP_HYBRID_SHARD || strategy == ACC_FSDP_HYBRID_SHARD_ZERO2
                        ? (size_t)acc_state_local_num_processes(acc_accelerator_state(acc))
                        : (size_t)world;
  size_t floats = 0;
  for (int k = 0; k < NUNITS; k++) floats += (a.numel[k] + sn - 1) / sn;
  CHECK(m.shard_params == floats * sizeof(float) && m.shard_grads == m.shard_params, "shard bytes %zu, expected %zu",
        m.shard_params, floats * sizeof(float));
  CHECK(m.no_sync_bytes == 0, "no_sync buffers left after the sync step: %zu bytes", m.no_sync_bytes);
  if (rank == 0)
    fprintf(stderr, "fsdp %s %d on %d: masters within %.3g of NO_SHARD, %.3g of float32 (largest %.3g), norms "
            "%.3g / %.3g of float32's, %zu skipped, pool %zu B (peak %zu B)\n", acc_dtype_name(DT), strategy, world,
            d, d32, big, first_n32, worst_n32, (size_t)skipped, m.pool_bytes, m.pool_peak_bytes);
  free(h);
  free(back);
  free(pa);
  free(pr);
  free(init);
  free_run(&a);
  free_run(&ref);
  free_run(&f32);
}

static void *read_file(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long len = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  void *p = malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, fp);
  fclose(fp);
  return p;
}

/* this process's shards, concatenated */
static size_t own_shards(run *r, float *out) {
  acc_model *m = acc_fsdp_model(r->f);
  size_t off = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    memcpy(out + off, p->data, p->numel * sizeof(float));
    off += p->numel;
  }
  return off;
}

static void test_ckpt(int strategy, const char *dir) {
  char sharded[1024], full[1024], unsharded[1024];
  snprintf(sharded, sizeof sharded, "%s/sharded", dir);
  snprintf(full, sizeof full, "%s/full", dir);
  snprintf(unsharded, sizeof unsharded, "%s/unsharded", dir);
  size_t n = total_numel();
  run a = {0}, b = {0};
  CHECK_OK(make_run(&a, strategy));
  for (int s = 0; s < STEPS / 2; s++) CHECK_OK(train_step(&a, s, 0, NULL));
  CHECK_OK(acc_fsdp_save_state(a.f, a.opt, sharded));
  CHECK_OK(acc_fsdp_save_model(a.f, full));
  float *masters = malloc(n * sizeof *masters);
  CHECK_OK(full_masters(&a, masters));
  for (int s = STEPS / 2; s < STEPS; s++) CHECK_OK(train_step(&a, s, 0, NULL));
  float *want = malloc(n * 2 * sizeof *want), *got = malloc(n * 2 * sizeof *got);
  size_t nw = own_shards(&a, want);
  /* resumed: bit for bit */
  CHECK_OK(make_run(&b, strategy));
  CHECK_OK(acc_fsdp_load_state(b.f, b.opt, sharded));
  for (int s = STEPS / 2; s < STEPS; s++) CHECK_OK(train_step(&b, s, 0, NULL));
  size_t ng = own_shards(&b, got);
  CHECK(nw == ng && memcmp(want, got, nw * sizeof *want) == 0, "the resumed bf16 run does not end bit for bit where "
        "the uninterrupted one ended");
  /* the checkpoint holds float32 masters: a float32 table and an fp16 table load the same values */
  const acc_dtype saved = DT;
  const acc_dtype other[2] = {ACC_F32, ACC_F16};
  for (int o = 0; o < 2; o++) {
    run c = {0};
    float *loaded = malloc(n * sizeof *loaded);
    DT = other[o];
    CHECK_OK(make_run(&c, strategy));
    CHECK_OK(acc_fsdp_load_state(c.f, c.opt, sharded));
    CHECK_OK(full_masters(&c, loaded));
    CHECK(memcmp(loaded, masters, n * sizeof *loaded) == 0, "the bf16 run's checkpoint loaded into a %s table does "
          "not hold its float32 master weights", acc_dtype_name(DT));
    free(loaded);
    free_run(&c);
  }
  DT = saved;
  /* FULL: what an unsharded bf16 typed table with these master weights writes */
  if (rank == 0) {
    acc_model *m;
    uint16_t *p16 = calloc(n, sizeof *p16);
    CHECK_OK(acc_model_create(&m));
    CHECK_OK(acc_model_add_flat_typed(m, table, NROWS, ACC_BF16, p16, NULL, NULL));
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", full);
    CHECK_OK(acc_load_checkpoint_in_model(m, file, NULL, NULL));
    size_t off = 0;
    for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
      const acc_param *p = acc_model_parameter(m, i);
      CHECK(memcmp(p->data, masters + off, p->numel * sizeof(float)) == 0,
            "the FULL file's '%s' is not the float32 master weights", p->name);
      off += p->numel;
    }
    CHECK_OK(acc_save_model(NULL, m, unsharded, 0, ACC_F32));
    acc_model_destroy(m);
    free(p16);
    char f2[1100];
    snprintf(f2, sizeof f2, "%s/model.safetensors", unsharded);
    size_t n1 = 0, n2 = 0;
    char *b1 = read_file(file, &n1), *b2 = read_file(f2, &n2);
    CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0,
          "%s differs from acc_save_model's file of the unsharded bf16 table %s (%zu vs %zu bytes)", file, f2, n1, n2);
    free(b1);
    free(b2);
  }
  free(masters);
  free(want);
  free(got);
  free_run(&a);
  free_run(&b);
}

static void test_errors(void) {
  acc_fsdp *f = NULL;
  CHECK_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F64, NULL, &f), ACC_ERR_INVALID_ARGUMENT,
            "dtype f64 is not a parameter dtype");
  run r = {0};
  CHECK_OK(make_run(&r, ACC_FSDP_FULL_SHARD));
  const float *pf;
  float *gf;
  const void *p;
  void *g;
  CHECK_ERR(acc_fsdp_unit_forward_begin(r.f, 0, &pf), ACC_ERR_MISMATCH,
            "unit 'layer1' is gathered as bf16 (the dtype given to acc_fsdp_create) but the call asks for float32: use "
            "acc_fsdp_unit_forward_begin_typed");
  CHECK_ERR(acc_fsdp_unit_forward_begin_typed(r.f, 0, ACC_F16, &p), ACC_ERR_MISMATCH,
            "gathered as bf16 (the dtype given to acc_fsdp_create) but the call asks for fp16: pass the table's dtype");
  CHECK_ERR(acc_fsdp_unit_forward_begin_typed(r.f, 0, ACC_I32, &p), ACC_ERR_INVALID_ARGUMENT,
            "dtype i32 is not a parameter dtype");
  CHECK_ERR(acc_fsdp_unit_backward_begin(r.f, 0, &pf, &gf), ACC_ERR_MISMATCH, "acc_fsdp_unit_backward_begin: unit "
            "'layer1' is gathered as bf16");
  CHECK_ERR(acc_fsdp_unit_forward_begin_typed(r.f, 0, ACC_BF16, NULL), ACC_ERR_INVALID_ARGUMENT, "params is NULL");
  /* a released 16-bit buffer reads as NaN, and a write into it is reported */
  CHECK_OK(acc_fsdp_unit_forward_begin_typed(r.f, 0, ACC_BF16, &p));
  CHECK_OK(acc_fsdp_unit_forward_end(r.f, 0));
  float v;
  acc_bf16_to_f32(&v, (const uint16_t *)p + 3, 1);
  CHECK(isnan(v), "a released bf16 parameter buffer reads %g, not NaN", (double)v);
  ((uint16_t *)p)[3] = 0x3f80; /* 1.0 */
  CHECK_ERR(acc_fsdp_unit_forward_begin_typed(r.f, 1, ACC_BF16, &p), ACC_ERR_INVALID_USAGE,
            "the gathered parameter buffer of unit 'layer1' was written after the unit ended (element 3)");
  /* fp16 (this accelerator runs it): unscaling while a unit is in backward is refused */
  CHECK_OK(acc_fsdp_reshard(r.f));
  CHECK_OK(acc_fsdp_unit_forward_begin_typed(r.f, 3, ACC_BF16, &p));
  CHECK_OK(acc_fsdp_unit_forward_end(r.f, 3));
  CHECK_OK(acc_fsdp_unit_backward_begin_typed(r.f, 3, ACC_BF16, &p, &g));
  CHECK_ERR(acc_fsdp_unscale_gradients(r.f, NULL), ACC_ERR_INVALID_USAGE,
            "unit 'head_bias' is still in backward: end every unit's backward before unscaling");
  CHECK_ERR(acc_fsdp_optimizer_step(r.f, NULL), ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_optimizer_step: opt is NULL");
  CHECK_OK(acc_fsdp_unit_backward_end(r.f, 3));
  int inf = -1;
  CHECK_OK(acc_fsdp_unscale_gradients(r.f, &inf));
  CHECK(inf == 0, "found_inf %d on finite gradients", inf);
  /* unscaled gradients stepped by the plain optimizer step: the next pass is refused */
  CHECK_ERR(acc_fsdp_unit_forward_begin_typed(r.f, 0, ACC_BF16, &p), ACC_ERR_INVALID_USAGE,
            "the gradients of the last step were unscaled but acc_fsdp_optimizer_step did not run");
  CHECK_OK(acc_fsdp_optimizer_step(r.f, r.opt));
  CHECK_OK(acc_fsdp_unit_forward_begin_typed(r.f, 0, ACC_BF16, &p));
  CHECK_OK(acc_fsdp_unit_forward_end(r.f, 0));
  CHECK(!acc_fsdp_optimizer_step_was_skipped(r.f), "a finite step was skipped");
  free_run(&r);
  /* a float32 table: the typed calls take ACC_F32 (generic code), the float calls work */
  acc_fsdp *f32 = NULL;
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f32));
  float *init = calloc(total_numel(), sizeof *init);
  CHECK_OK(acc_fsdp_prepare(f32, init));
  CHECK_ERR(acc_fsdp_unit_forward_begin_typed(f32, 0, ACC_BF16, &p), ACC_ERR_MISMATCH,
            "unit 'model' is gathered as float32 (the dtype given to acc_fsdp_create) but the call asks for bf16");
  CHECK_OK(acc_fsdp_unit_forward_begin_typed(f32, 0, ACC_F32, &p));
  CHECK_OK(acc_fsdp_unit_forward_end(f32, 0));
  free(init);
  acc_fsdp_destroy(f32);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_fsdp_lowp train|ckpt|errors ...\n");
    return 2;
  }
  const char *mode = argv[1];
  int fp16 = (!strcmp(mode, "train") && argc >= 3 && !strcmp(argv[2], "fp16")) || !strcmp(mode, "errors");
  DT = !strcmp(mode, "train") && fp16 ? ACC_F16 : ACC_BF16;
  inject_inf = DT == ACC_F16;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 256.0f;
  so.growth_interval = 10;
  o.mixed_precision = fp16 ? ACC_PRECISION_FP16 : ACC_PRECISION_BF16;
  o.scaler = &so;
  if (acc_accelerator_create(&acc, &o) != ACC_OK) {
    fprintf(stderr, "accelerator: %s\n", acc_last_error());
    return 1;
  }
  rank = acc_state_process_index(acc_accelerator_state(acc));
  world = acc_state_num_processes(acc_accelerator_state(acc));
  acc_test_rank = rank;
  if (!strcmp(mode, "train") && argc >= 4) test_train(parse_strategy(argv[3]), argc > 4 && !strcmp(argv[4], "nosync"));
  else if (!strcmp(mode, "ckpt") && argc >= 4) test_ckpt(parse_strategy(argv[2]), argv[3]);
  else if (!strcmp(mode, "errors")) test_errors();
  else {
    fprintf(stderr, "test_fsdp_lowp: bad arguments\n");
    return 2;
  }
  acc_accelerator_destroy(acc);
  return acc_test_finish("test_fsdp_lowp");
}
