/* FSDP (include/accelerate/fsdp.h) through the real launcher.
 *
 *   test_fsdp train STRATEGY [nosync|prefetch_post|fwd_prefetch|die]
 *       an MLP (3 layers, sizes that do not divide by 2, 3 or 4, a unit smaller than 4 elements)
 *       trained 50 steps with AdamW (weight decay), clipping and 2 accumulation micro-steps, under
 *       STRATEGY and, side by side in the same processes, under NO_SHARD; the parameters must agree
 *       to 1e-5 relative, every step's clip norm too. nosync: the first micro-step under no_sync.
 *       die: the last process exits inside step 5; the others print their error and exit 3.
 *       Also checks the memory accounting (shards = ceil(U / N) per unit, a bound on the pool buffers in use,
 *       pool buffers sized per unit).
 *   test_fsdp save STRATEGY TYPE DIR     train 25 steps, save_state (TYPE: FULL_STATE_DICT or
 *       SHARDED_STATE_DICT), train 25 more and write the final parameters to DIR.expected (process 0).
 *       FULL_STATE_DICT: model.safetensors must be byte-identical to acc_save_model of the same values.
 *   test_fsdp resume STRATEGY DIR        a new process group (any count, any strategy) loads DIR, trains
 *       25 steps and must end at DIR.expected (1e-5 relative).
 *   test_fsdp merge DIR OUT               merge-weights of a sharded DIR equals a FULL save's file.
 *   test_fsdp errors                      bad input, one process: overlapping units, a row in no unit,
 *       unknown strategy / prefetch values, HYBRID accepted on one process, a contradicting reshard_after_forward, a
 *       gathered buffer written after its unit ended, calls out of order, a checkpoint of another table,
 *       a torn checkpoint.
 *   test_fsdp mismatch [STRATEGY]         2+ processes: units that differ between processes are named at
 *       prepare; a process that runs another unit gets ACC_ERR_MISMATCH, not a hang.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"
#include "accelerate.h"

#define ACC_CHECK(x)                  \
  do {                                \
    acc_result rc__ = (x);            \
    if (rc__ != ACC_OK) return rc__;  \
  } while (0)

enum { D = 7, H = 13, O = 3, G = 12, STEPS = 50, MICRO = 2 };

static const acc_param_spec table[] = {
    {"l1.w", 2, {H, D}}, {"l1.b", 1, {H}}, {"l2.w", 2, {H, H}}, {"l2.b", 1, {H}}, {"l3.w", 2, {O, H}}, {"l3.b", 1, {O}},
};
enum { NROWS = 6 };
static size_t total_numel(void) { return H * D + H + H * H + H + O * H + O; }

static acc_accelerator *acc;
static int rank, world;

static float sample(size_t g, int k, int step) { return (float)sin(0.7 * (double)g + 1.3 * k + 0.17 * step); }

static void init_params(float *p) {
  size_t n = total_numel();
  for (size_t i = 0; i < n; i++) p[i] = 0.4f * (float)cos(0.91 * (double)i);
}

typedef struct run {
  acc_fsdp *f;
  acc_optimizer *opt;
  size_t u[4]; /* units: layer 1, layer 2, the head's weight, the head's bias (3 elements: at 4
                  processes one process owns only padding) */
} run;

static acc_result make_run(run *r, int strategy, int bwd, int fwd, int sdt) {
  acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
  pl.sharding_strategy = strategy;
  if (bwd) pl.backward_prefetch = bwd;
  pl.forward_prefetch = fwd;
  if (sdt) pl.state_dict_type = sdt;
  ACC_CHECK(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &r->f));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer1", 0, 2, &r->u[0]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer2", 2, 2, &r->u[1]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head", 4, 1, &r->u[2]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head_bias", 5, 1, &r->u[3]));
  float *p = malloc(total_numel() * sizeof *p);
  init_params(p);
  acc_result rc = acc_fsdp_prepare(r->f, p);
  free(p); /* the program keeps no full copy */
  ACC_CHECK(rc);
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

/* y = W x + b, rows of W contiguous */
static void affine(const float *w, const float *b, const float *x, float *y, int out, int in) {
  for (int o = 0; o < out; o++) {
    float s = b[o];
    for (int i = 0; i < in; i++) s += w[o * in + i] * x[i];
    y[o] = s;
  }
}

/* One micro-step: this process's samples of the global batch (G / world each), the gradient of the
 * mean loss over the global batch times world (the library averages over processes). */
static int die_at = -1; /* variant "die": the last process exits inside this step (hybrid_netns.sh) */

static acc_result micro_step(run *r, int step, int micro) {
  int per = G / world;
  float x[G][D], h1[G][H], h2[G][H], y[G][O];
  const float *p1, *p2, *p3, *p3b;
  for (int s = 0; s < per; s++)
    for (int k = 0; k < D; k++) x[s][k] = sample((size_t)(rank * per + s), k, step * MICRO + micro);
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[0], &p1));
  for (int s = 0; s < per; s++) {
    affine(p1, p1 + H * D, x[s], h1[s], H, D);
    for (int k = 0; k < H; k++) h1[s][k] = tanhf(h1[s][k]);
  }
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[0]));
  if (step == die_at && micro == 1 && rank == world - 1) {
    fprintf(stderr, "[rank %d] exits inside step %d (test)\n", rank, step);
    _exit(7);
  }
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[1], &p2));
  for (int s = 0; s < per; s++) {
    affine(p2, p2 + H * H, h1[s], h2[s], H, H);
    for (int k = 0; k < H; k++) h2[s][k] = tanhf(h2[s][k]);
  }
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[1]));
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[2], &p3)); /* two units gathered at once */
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[3], &p3b));
  for (int s = 0; s < per; s++) affine(p3, p3b, h2[s], y[s], O, H);
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[2]));
  /* backward, head first */
  const float scale = (float)world / (float)(G * MICRO);
  float dy[G][O], dh2[G][H], dh1[G][H];
  for (int s = 0; s < per; s++)
    for (int o = 0; o < O; o++) dy[s][o] = (y[s][o] - sample((size_t)(rank * per + s), 100 + o, step)) * scale;
  float *g, *gb;
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[3], &p3b, &gb));
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[2], &p3, &g));
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh2[s][k] = 0;
    for (int o = 0; o < O; o++) {
      for (int k = 0; k < H; k++) {
        g[o * H + k] += dy[s][o] * h2[s][k];
        dh2[s][k] += p3[o * H + k] * dy[s][o];
      }
      gb[o] += dy[s][o];
    }
    for (int k = 0; k < H; k++) dh2[s][k] *= 1 - h2[s][k] * h2[s][k];
  }
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[2]));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[1], &p2, &g));
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh1[s][k] = 0;
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < H; k++) {
        g[o * H + k] += dh2[s][o] * h1[s][k];
        dh1[s][k] += p2[o * H + k] * dh2[s][o];
      }
      g[H * H + o] += dh2[s][o];
    }
    for (int k = 0; k < H; k++) dh1[s][k] *= 1 - h1[s][k] * h1[s][k];
  }
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[1]));
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[0], &p1, &g));
  for (int s = 0; s < per; s++)
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < D; k++) g[o * D + k] += dh1[s][o] * x[s][k];
      g[H * D + o] += dh1[s][o];
    }
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[0]));
  return ACC_OK;
}

static acc_result train_step(run *r, int step, int nosync, float *norm) {
  for (int m = 0; m < MICRO; m++) {
    ACC_CHECK(acc_fsdp_set_no_sync(r->f, nosync && m < MICRO - 1));
    ACC_CHECK(micro_step(r, step, m));
  }
  ACC_CHECK(acc_fsdp_clip_grad_norm(r->f, 0.5f, 2.0, norm));
  ACC_CHECK(acc_optimizer_step(r->opt));
  return acc_optimizer_zero_grad(r->opt);
}

/* The full parameters, gathered the way a forward does (every process). */
static acc_result full_params(run *r, float *out) {
  size_t off = 0;
  for (int k = 0; k < 4; k++) {
    const float *p;
    size_t n;
    ACC_CHECK(acc_fsdp_unit_info(r->f, r->u[k], NULL, NULL, NULL, &n));
    ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[k], &p));
    memcpy(out + off, p, n * sizeof(float));
    ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[k]));
    off += n;
  }
  /* SHARD_GRAD_OP keeps the units gathered until a backward: an evaluation pass reshards */
  return acc_fsdp_reshard(r->f);
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-6);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

/* max |a - b| over max |b|: a relative error for values that decay towards zero */
static double norm_diff(const float *a, const float *b, size_t n) {
  double worst = 0, big = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
    if (fabs((double)b[i]) > big) big = fabs((double)b[i]);
  }
  return worst / (big > 0 ? big : 1);
}

static int parse_strategy(const char *s) {
  return !strcmp(s, "FULL_SHARD") ? ACC_FSDP_FULL_SHARD : !strcmp(s, "SHARD_GRAD_OP") ? ACC_FSDP_SHARD_GRAD_OP
         : !strcmp(s, "NO_SHARD") ? ACC_FSDP_NO_SHARD : !strcmp(s, "HYBRID_SHARD") ? ACC_FSDP_HYBRID_SHARD
         : !strcmp(s, "HYBRID_SHARD_ZERO2") ? ACC_FSDP_HYBRID_SHARD_ZERO2 : ACC_UNSET;
}

static int is_hybrid(int strategy) { return strategy == ACC_FSDP_HYBRID_SHARD || strategy == ACC_FSDP_HYBRID_SHARD_ZERO2; }

/* the processes a unit is spread over: the machine's under HYBRID, all otherwise */
static int shard_world(int strategy) {
  return is_hybrid(strategy) ? acc_state_local_num_processes(acc_accelerator_state(acc)) : world;
}

static void test_train(int strategy, const char *variant) {
  run a = {0}, ref = {0};
  int bwd = variant && !strcmp(variant, "prefetch_post") ? ACC_FSDP_BACKWARD_POST : 0;
  int fwd = variant && !strcmp(variant, "fwd_prefetch");
  int nosync = variant && !strcmp(variant, "nosync");
  if (variant && !strcmp(variant, "die")) die_at = 5;
  acc_result mrc = make_run(&a, strategy, bwd, fwd, 0);
  CHECK_OK(mrc);
  if (mrc != ACC_OK) return; /* (the gloo refusal of hybrid_netns.sh ends here) */
  CHECK_OK(make_run(&ref, ACC_FSDP_NO_SHARD, ACC_FSDP_NO_PREFETCH, 0, 0));
  /* HYBRID on one machine: the same arithmetic as FULL_SHARD (SHARD_GRAD_OP), checked bit for bit;
   * a prefetch variant (its gathers in flight on the comm worker while the program computes): the
   * same strategy without prefetch, bit for bit */
  run same = {0};
  int prefetching = bwd == ACC_FSDP_BACKWARD_POST || fwd;
  int one_machine = (is_hybrid(strategy) && acc_state_num_machines(acc_accelerator_state(acc)) == 1) ||
                    (prefetching && !is_hybrid(strategy));
  if (one_machine && prefetching)
    CHECK_OK(make_run(&same, strategy, ACC_FSDP_NO_PREFETCH, 0, 0));
  else if (one_machine)
    CHECK_OK(make_run(&same, strategy == ACC_FSDP_HYBRID_SHARD ? ACC_FSDP_FULL_SHARD : ACC_FSDP_SHARD_GRAD_OP, bwd,
                      fwd, 0));
  if (is_hybrid(strategy))
    CHECK((int)acc_fsdp_strategy(a.f) == strategy, "strategy %d reported as %d", strategy, acc_fsdp_strategy(a.f));
  size_t n = total_numel();
  float *pa = malloc(n * sizeof *pa), *pr = malloc(n * sizeof *pr);
  double worst_norm = 0;
  for (int s = 0; s < STEPS; s++) {
    float na = 0, nr = 0, ns = 0;
    if (die_at >= 0) { /* the others: an error (the dead process named), never a hang */
      acc_result rc = train_step(&a, s, nosync, &na);
      if (rc != ACC_OK) {
        fprintf(stderr, "[rank %d] step %d after the death: %s\n", rank, s, acc_last_error());
        _exit(3);
      }
    } else {
      CHECK_OK(train_step(&a, s, nosync, &na));
    }
    CHECK_OK(train_step(&ref, s, nosync, &nr));
    if (one_machine) {
      CHECK_OK(train_step(&same, s, nosync, &ns));
      CHECK(memcmp(&na, &ns, sizeof na) == 0, "step %d: clip norm %.9g under HYBRID, %.9g under its one-machine twin", s,
            (double)na, (double)ns);
    }
    double d = fabs((double)na - nr) / (fabs((double)nr) + 1e-12);
    if (d > worst_norm) worst_norm = d;
  }
  CHECK(worst_norm <= 1e-5, "clip norms differ by %g relative", worst_norm);
  CHECK_OK(full_params(&a, pa));
  CHECK_OK(full_params(&ref, pr));
  if (one_machine) {
    float *ps = malloc(n * sizeof *ps);
    CHECK_OK(full_params(&same, ps));
    CHECK(memcmp(ps, pa, n * sizeof *pa) == 0, "%s", prefetching && !is_hybrid(strategy)
                                                         ? "with prefetch the parameters differ from the run without"
                                                         : "HYBRID on one machine differs from FULL_SHARD / SHARD_GRAD_OP");
    free(ps);
    free_run(&same);
  }
  double d = rel_diff(pa, pr, n);
  CHECK(d <= 1e-5, "%d vs NO_SHARD: parameters differ by %g relative after %d steps", strategy, d, STEPS);
  float init[1024];
  init_params(init);
  CHECK(rel_diff(pa, init, n) > 1e-3, "the parameters did not move");
  /* every process holds the same parameters */
  float *all = malloc(n * (size_t)world * sizeof *all);
  CHECK_OK(acc_all_gather(acc_accelerator_state(acc), pa, all, n, ACC_F32));
  for (int r = 0; r < world; r++) CHECK(memcmp(all + (size_t)r * n, pa, n * sizeof *pa) == 0, "process %d differs", r);
  free(all);
  /* memory: the shards are ceil(U / N) per unit (FULL_SHARD / SHARD_GRAD_OP), at most three unit buffers */
  acc_fsdp_memory m;
  CHECK_OK(acc_fsdp_memory_stats(a.f, &m));
  size_t want = 0;
  for (int k = 0; k < 4; k++) {
    size_t u;
    acc_fsdp_unit_info(a.f, a.u[k], NULL, NULL, NULL, &u);
    size_t sw = (size_t)shard_world(strategy);
    want += strategy == ACC_FSDP_NO_SHARD ? u : (u + sw - 1) / sw;
  }
  CHECK(m.shard_params == want * sizeof(float), "shard bytes %zu, expected %zu", m.shard_params, want * sizeof(float));
  size_t cap = strategy == ACC_FSDP_SHARD_GRAD_OP || strategy == ACC_FSDP_HYBRID_SHARD_ZERO2 ? 6 : 5; /* the head and its bias are in backward together */
  CHECK(m.pool_peak_in_use <= cap, "%zu pool buffers in use at once (at most %zu expected)", m.pool_peak_in_use, cap);
  CHECK(m.no_sync_bytes == 0, "no_sync buffers left after the sync step: %zu bytes", m.no_sync_bytes);
  /* pool buffers are sized per unit: the 3-element bias unit takes a buffer of its own size, not
   * one of the largest unit's, so the pool is smaller than its count x the largest unit */
  CHECK(m.pool_peak_bytes <= m.pool_bytes && m.pool_buffers > 0 && m.pool_bytes < m.pool_buffers * m.unit_buffer_bytes,
        "pool: %zu buffers, %zu bytes (largest unit %zu B), peak %zu bytes in use", m.pool_buffers, m.pool_bytes,
        m.unit_buffer_bytes, m.pool_peak_bytes);
  if (rank == 0)
    fprintf(stderr, "fsdp %d on %d: params %zu B/process (full %zu B), pool %zu x %zu B (peak %zu), diff %.3g\n",
            strategy, world, m.shard_params, m.total_params * sizeof(float), m.pool_buffers, m.unit_buffer_bytes,
            m.pool_peak_in_use, d);
  free(pa);
  free(pr);
  free_run(&a);
  free_run(&ref);
}

static int write_file(const char *path, const void *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return 0;
  int ok = fwrite(p, 1, n, fp) == n;
  return fclose(fp) == 0 && ok;
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

static void test_save(int strategy, int sdt, const char *dir) {
  run a = {0};
  CHECK_OK(make_run(&a, strategy, 0, 0, sdt));
  for (int s = 0; s < STEPS / 2; s++) CHECK_OK(train_step(&a, s, 0, NULL));
  CHECK_OK(acc_fsdp_save_state(a.f, a.opt, dir));
  size_t n = total_numel();
  float *p = malloc(n * sizeof *p);
  if (sdt == ACC_FSDP_FULL_STATE_DICT) {
    /* byte-identical to what an unsharded run writes for the same values */
    CHECK_OK(full_params(&a, p));
    char ref[1024], got[1024];
    snprintf(ref, sizeof ref, "%s.unsharded", dir);
    if (rank == 0) {
      acc_model *m;
      CHECK_OK(acc_model_create(&m));
      CHECK_OK(acc_model_add_flat(m, table, NROWS, p, NULL, NULL));
      CHECK_OK(acc_save_model(NULL, m, ref, 0, ACC_F32));
      acc_model_destroy(m);
      snprintf(got, sizeof got, "%s/model.safetensors", dir);
      snprintf(ref + strlen(ref), sizeof ref - strlen(ref), "/model.safetensors");
      size_t n1 = 0, n2 = 0;
      char *b1 = read_file(got, &n1), *b2 = read_file(ref, &n2);
      CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "%s differs from acc_save_model's %s (%zu vs %zu bytes)",
            got, ref, n1, n2);
      free(b1);
      free(b2);
    }
  }
  /* acc_fsdp_save_model writes the same file */
  char md[1024];
  snprintf(md, sizeof md, "%s.model", dir);
  CHECK_OK(acc_fsdp_save_model(a.f, md));
  for (int s = STEPS / 2; s < STEPS; s++) CHECK_OK(train_step(&a, s, 0, NULL));
  CHECK_OK(full_params(&a, p));
  char ex[1024];
  snprintf(ex, sizeof ex, "%s.expected", dir);
  if (rank == 0) CHECK(write_file(ex, p, n * sizeof *p), "writing %s", ex);
  acc_wait_for_everyone(acc_accelerator_state(acc));
  free(p);
  free_run(&a);
}

static void test_resume(int strategy, const char *dir, int exact) {
  run a = {0};
  CHECK_OK(make_run(&a, strategy, 0, 0, 0));
  CHECK_OK(acc_fsdp_load_state(a.f, a.opt, dir));
  CHECK(acc_optimizer_step_count(a.opt) == STEPS / 2, "step count %lld after load", (long long)acc_optimizer_step_count(a.opt));
  for (int s = STEPS / 2; s < STEPS; s++) CHECK_OK(train_step(&a, s, 0, NULL));
  size_t n = total_numel(), got = 0;
  float *p = malloc(n * sizeof *p);
  CHECK_OK(full_params(&a, p));
  char ex[1024];
  snprintf(ex, sizeof ex, "%s.expected", dir);
  float *want = read_file(ex, &got);
  CHECK(want && got == n * sizeof(float), "reading %s", ex);
  if (want && got == n * sizeof(float)) {
    /* on the saving process count the arithmetic is the same: bit-exact; on another count the
     * gradient sums run in another order: 1e-5 of the largest parameter */
    double d = exact ? rel_diff(p, want, n) : norm_diff(p, want, n);
    CHECK(exact ? d == 0 : d <= 1e-5, "resumed under %d on %d processes: %g from the uninterrupted run%s", strategy,
          world, d, exact ? " (expected bit-exact)" : "");
    if (rank == 0) fprintf(stderr, "resume: %.3g relative from the uninterrupted run\n", d);
  }
  free(want);
  free(p);
  free_run(&a);
}

static void test_merge(const char *dir, const char *out) {
  CHECK_OK(acc_fsdp_merge_weights(dir, out));
  char a[1024], b[1024];
  snprintf(a, sizeof a, "%s/model.safetensors", out);
  snprintf(b, sizeof b, "%s.model/model.safetensors", dir);
  size_t n1 = 0, n2 = 0;
  char *b1 = read_file(a, &n1), *b2 = read_file(b, &n2);
  CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "merged %s differs from the FULL save %s", a, b);
  free(b1);
  free(b2);
}

#define EXPECT_ERR(call, code, frag)                                                                           \
  do {                                                                                                         \
    acc_result rc_ = (call);                                                                                   \
    CHECK(rc_ == (code), "%s: got %s (%s), expected %s", #call, acc_result_string(rc_), acc_last_error(), #code); \
    CHECK(strstr(acc_last_error(), frag) != NULL, "%s: message lacks '%s': %s", #call, frag, acc_last_error()); \
  } while (0)

static void test_errors(const char *tmpdir) {
  acc_fsdp *f = NULL;
  float *p = malloc(total_numel() * sizeof *p);
  init_params(p);
  /* overlap */
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f));
  CHECK_OK(acc_fsdp_add_unit(f, "a", 0, 3, NULL));
  CHECK_OK(acc_fsdp_add_unit(f, "b", 2, 4, NULL));
  EXPECT_ERR(acc_fsdp_prepare(f, p), ACC_ERR_INVALID_ARGUMENT, "units 'a' and 'b' overlap: both hold parameter 'l2.w'");
  acc_fsdp_destroy(f);
  /* a row left out */
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f));
  CHECK_OK(acc_fsdp_add_unit(f, "a", 0, 2, NULL));
  CHECK_OK(acc_fsdp_add_unit(f, "b", 3, 3, NULL));
  EXPECT_ERR(acc_fsdp_prepare(f, p), ACC_ERR_INVALID_ARGUMENT, "parameter 'l2.w' (row 2) is in no unit");
  EXPECT_ERR(acc_fsdp_add_unit(f, "c", 5, 2, NULL), ACC_ERR_INVALID_ARGUMENT, "outside the table");
  acc_fsdp_destroy(f);
  /* values we cannot honour */
  acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
  pl.sharding_strategy = ACC_FSDP_HYBRID_SHARD_ZERO2; /* one process: accepted (= SHARD_GRAD_OP) */
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &f));
  CHECK(acc_fsdp_strategy(f) == ACC_FSDP_HYBRID_SHARD_ZERO2, "HYBRID_SHARD_ZERO2 reported as %d", acc_fsdp_strategy(f));
  acc_fsdp_destroy(f);
  pl.sharding_strategy = ACC_FSDP_HYBRID_SHARD;
  pl.reshard_after_forward = 0;
  EXPECT_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &f), ACC_ERR_INVALID_ARGUMENT, "contradicts");
  pl.reshard_after_forward = ACC_UNSET;
  pl.sharding_strategy = 9;
  EXPECT_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &f), ACC_ERR_INVALID_ARGUMENT, "sharding_strategy 9");
  pl.sharding_strategy = ACC_FSDP_SHARD_GRAD_OP;
  pl.reshard_after_forward = 1;
  EXPECT_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &f), ACC_ERR_INVALID_ARGUMENT, "contradicts");
  setenv("FSDP_SHARDING_STRATEGY", "QUARTER_SHARD", 1);
  EXPECT_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f), ACC_ERR_INVALID_ARGUMENT,
             "FSDP_SHARDING_STRATEGY=\"QUARTER_SHARD\"");
  setenv("FSDP_SHARDING_STRATEGY", "2", 1);
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f));
  CHECK(acc_fsdp_strategy(f) == ACC_FSDP_SHARD_GRAD_OP, "FSDP_SHARDING_STRATEGY=2 gave %d", acc_fsdp_strategy(f));
  acc_fsdp_destroy(f);
  unsetenv("FSDP_SHARDING_STRATEGY");
  setenv("FSDP_BACKWARD_PREFETCH", "SOMETIMES", 1);
  EXPECT_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f), ACC_ERR_INVALID_ARGUMENT, "FSDP_BACKWARD_PREFETCH");
  unsetenv("FSDP_BACKWARD_PREFETCH");
  setenv("FSDP_RESHARD_AFTER_FORWARD", "false", 1);
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f));
  CHECK(acc_fsdp_strategy(f) == ACC_FSDP_SHARD_GRAD_OP, "reshard_after_forward false gave %d", acc_fsdp_strategy(f));
  acc_fsdp_destroy(f);
  unsetenv("FSDP_RESHARD_AFTER_FORWARD");
  /* bf16 / fp16 tables: tests/fsdp/test_fsdp_lowp.c; a dtype that is not a parameter dtype */
  EXPECT_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F64, NULL, &f), ACC_ERR_INVALID_ARGUMENT, "not a parameter dtype");
  /* a gathered gradient buffer written after its unit ended; calls out of order */
  run r = {0};
  CHECK_OK(make_run(&r, ACC_FSDP_FULL_SHARD, 0, 0, 0));
  const float *pp;
  float *g;
  EXPECT_ERR(acc_fsdp_unit_forward_end(r.f, r.u[1]), ACC_ERR_INVALID_USAGE, "unit 'layer2' is not started");
  CHECK_OK(acc_fsdp_unit_backward_begin(r.f, r.u[1], &pp, &g));
  EXPECT_ERR(acc_fsdp_unit_forward_begin(r.f, r.u[1], &pp), ACC_ERR_INVALID_USAGE, "unit 'layer2' is in backward");
  CHECK_OK(acc_fsdp_unit_backward_end(r.f, r.u[1]));
  g[3] = 1.0f; /* too late */
  EXPECT_ERR(acc_fsdp_unit_forward_begin(r.f, r.u[0], &pp), ACC_ERR_INVALID_USAGE,
             "gradient buffer of unit 'layer2' was written after the unit ended");
  free_run(&r);
  /* a checkpoint of another table */
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/errors_ckpt", tmpdir);
  CHECK_OK(make_run(&r, ACC_FSDP_FULL_SHARD, 0, 0, 0));
  CHECK_OK(acc_fsdp_save_state(r.f, r.opt, dir));
  EXPECT_ERR(acc_fsdp_save_state(r.f, r.opt, dir), ACC_ERR_INVALID_USAGE, "already exists");
  acc_param_spec other[NROWS];
  memcpy(other, table, sizeof other);
  other[3].name = "l2.bias";
  acc_fsdp *g2 = NULL;
  CHECK_OK(acc_fsdp_create(acc, other, NROWS, ACC_F32, NULL, &g2));
  CHECK_OK(acc_fsdp_prepare(g2, p));
  EXPECT_ERR(acc_fsdp_load_state(g2, NULL, dir), ACC_ERR_MISMATCH, "row 3 is 'l2.b:13' there");
  acc_fsdp_destroy(g2);
  /* a torn checkpoint (no completion marker) is refused, and the state is unchanged */
  char torn[1100];
  snprintf(torn, sizeof torn, "%s/torn", tmpdir);
  mkdir(torn, 0755);
  EXPECT_ERR(acc_fsdp_load_state(r.f, r.opt, torn), ACC_ERR_NOT_FOUND, "not a complete checkpoint");
  free_run(&r);
  free(p);
}

static void test_mismatch(int strategy) {
  float *p = malloc(total_numel() * sizeof *p);
  init_params(p);
  acc_fsdp *f = NULL;
  CHECK_OK(acc_fsdp_create(acc, table, NROWS, ACC_F32, NULL, &f));
  if (rank == 1) {
    CHECK_OK(acc_fsdp_add_unit(f, "a", 0, 4, NULL));
    CHECK_OK(acc_fsdp_add_unit(f, "b", 4, 2, NULL));
  } else {
    CHECK_OK(acc_fsdp_add_unit(f, "a", 0, 2, NULL));
    CHECK_OK(acc_fsdp_add_unit(f, "b", 2, 4, NULL));
  }
  EXPECT_ERR(acc_fsdp_prepare(f, p), ACC_ERR_MISMATCH, rank != 1 ? "differs on process 1" : "differs on process 0");
  acc_fsdp_destroy(f);
  /* the same units, but process 1 runs unit 2 where the others run unit 0 */
  run r = {0};
  CHECK_OK(make_run(&r, strategy, 0, 0, 0));
  const float *pp;
  acc_result rc = acc_fsdp_unit_forward_begin(r.f, rank == 1 ? r.u[2] : r.u[0], &pp);
  acc_state *st = acc_accelerator_state(acc);
  int local_n = acc_state_local_num_processes(st);
  if (is_hybrid(strategy) && acc_state_num_machines(st) > 1 && rank / local_n != 1 / local_n && rc == ACC_OK) {
    /* HYBRID across machines: this machine's processes gathered the same unit (their group is
     * another machine's); the job's next collective must fail (the other machine's processes are
     * broken and leave), never hang */
    rc = acc_barrier(st);
    CHECK(rc != ACC_OK, "a job-wide call after another machine's mismatch succeeded");
    fprintf(stderr, "[rank %d] expected error (another machine's mismatch): %s\n", rank, acc_last_error());
    free_run(&r);
    free(p);
    return;
  }
  CHECK(rc != ACC_OK, "a process running another unit was not detected");
  CHECK(strstr(acc_last_error(), "FSDP unit") != NULL, "message does not name the FSDP unit: %s", acc_last_error());
  fprintf(stderr, "[rank %d] expected error: %s\n", rank, acc_last_error());
  free_run(&r);
  free(p);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_fsdp train|save|resume|merge|errors|mismatch ...\n");
    return 2;
  }
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  if (acc_accelerator_create(&acc, &o) != ACC_OK) {
    fprintf(stderr, "accelerator: %s\n", acc_last_error());
    return 1;
  }
  rank = acc_state_process_index(acc_accelerator_state(acc));
  world = acc_state_num_processes(acc_accelerator_state(acc));
  acc_test_rank = rank;
  const char *mode = argv[1];
  if (!strcmp(mode, "train") && argc >= 3) test_train(parse_strategy(argv[2]), argc > 3 ? argv[3] : NULL);
  else if (!strcmp(mode, "train_env") && argc >= 3) {
    /* the strategy from the environment the launcher exported; it must be argv[2] */
    run r = {0};
    CHECK_OK(make_run(&r, ACC_UNSET, 0, 0, 0));
    CHECK((int)acc_fsdp_strategy(r.f) == parse_strategy(argv[2]), "the launcher's strategy reached the program as %d, "
          "expected %s", acc_fsdp_strategy(r.f), argv[2]);
    free_run(&r);
    test_train(parse_strategy(argv[2]), NULL);
  } else if (!strcmp(mode, "save") && argc >= 5)
    test_save(parse_strategy(argv[2]), !strcmp(argv[3], "FULL_STATE_DICT") ? ACC_FSDP_FULL_STATE_DICT : ACC_FSDP_SHARDED_STATE_DICT,
              argv[4]);
  else if (!strcmp(mode, "resume") && argc >= 4) test_resume(parse_strategy(argv[2]), argv[3], argc > 4 && !strcmp(argv[4], "exact"));
  else if (!strcmp(mode, "merge") && argc >= 4) test_merge(argv[2], argv[3]);
  else if (!strcmp(mode, "errors") && argc >= 3) test_errors(argv[2]);
  else if (!strcmp(mode, "mismatch")) test_mismatch(argc > 2 ? parse_strategy(argv[2]) : ACC_FSDP_FULL_SHARD);
  else {
    fprintf(stderr, "test_fsdp: bad arguments\n");
    return 2;
  }
  acc_accelerator_destroy(acc);
  return acc_test_finish("test_fsdp");
}
