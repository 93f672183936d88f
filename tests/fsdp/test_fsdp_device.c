/* FSDP on a device (docs/fsdp.md, "On a device") through the real launcher. The program's forward
 * and backward are host code staged through acc_accelerator_memcpy (parameters copied out of the
 * gathered buffer, gradients added into the device gradient buffer through a host copy), so the
 * same program runs on the CPU, the strict fake device (ACCELERATE_TEST_DEVICE=fake) and a GPU.
 *
 *   test_fsdp_device train STRATEGY DEVICE OUT
 *       the MLP of test_fsdp.c (3 layers, 4 units, one smaller than 4 elements) trained 50 steps
 *       with AdamW (weight decay), clipping and 2 accumulation micro-steps (the first under
 *       no_sync) under STRATEGY and, side by side, NO_SHARD, on DEVICE (cpu, fake or cuda): the
 *       parameters must agree to 1e-5 relative, the clip norms too; the library's optimizer steps
 *       the device shards. Process 0 writes the STRATEGY run's final parameters and clip norms to
 *       OUT (a CPU run's file and a fake-device run's must be byte-identical: `same`).
 *       A trailing bf16 / fp16 makes the table 16-bit (the typed begin calls, the program's 16-bit
 *       gradients) under the accelerator's mixed precision of that type; fp16: process 0 alone writes
 *       an inf into a gradient at step 5, which must be skipped on every process (both strategies),
 *       with the two strategies' scaler states equal after every step. The file holds the float32
 *       master weights and the clip norms.
 *   test_fsdp_device hook STRATEGY DEVICE OUT [bf16|fp16]
 *       the accelerator's comm hook (ACCELERATE_COMM_HOOK) on FSDP's reductions: STRATEGY and
 *       NO_SHARD, no clipping, 50 steps: the masters must be bit-identical (2 processes); OUT: the
 *       masters.
 *   test_fsdp_device hookgrad STRATEGY DEVICE -
 *       one backward of known gradients under the comm hook: each process's gradient shard is the
 *       hook's 16-bit arithmetic computed by the test (2 processes: bit for bit; more: within one
 *       16-bit rounding per addition, the sum's order being the backend's).
 *   test_fsdp_device differ A B TOL     master files that differ, by at most TOL of B's largest.
 *   test_fsdp_device psgd cpu|fake      (ACCELERATE_COMM_HOOK=power_sgd) acc_fsdp_create refuses it.
 *   test_fsdp_device same A B [TOL]       the files are identical (TOL: within TOL relative).
 *   test_fsdp_device save STRATEGY DEVICE DIR [FULL] [bf16|fp16]
 *       25 steps, acc_fsdp_save_state (SHARDED_STATE_DICT; FULL: FULL_STATE_DICT) into DIR/ckpt, 25
 *       more; process 0 writes the final master weights to DIR/expected (and the fp16 scaler's
 *       state at the save to DIR/scaler: FSDP's checkpoint does not hold it, the accelerator's does).
 *   test_fsdp_device resume STRATEGY DEVICE DIR [FULL] [bf16|fp16]
 *       a new run takes one step of its own (so that the device optimizer state exists and differs),
 *       loads DIR/ckpt, trains steps 25-49: its parameters must be DIR/expected bit for bit (on
 *       the saving process count; DEVICE may differ from the saving run's).
 *   test_fsdp_device fault              (fake device, one process) the pointers the begin calls
 *       return and the shards under acc_fsdp_model are device memory: a host read or write dies by
 *       SIGSEGV; a released buffer reads back NaN through a device copy, and a write into it (a
 *       device copy) is reported by the next begin call; prepare from init_params in device
 *       memory gives the shards prepare from host memory gives; bf16 / fp16 tables: the 16-bit
 *       gathered parameters and gradient buffers fault on host access, the unscale, clipping and
 *       step run, a write into a released 16-bit buffer is named by element.
 *   test_fsdp_device die STRATEGY fake DIR
 *       process N-1 exits before step 3 (ACCELERATE_FSDP_NCCL=always: the fake NCCL path); every
 *       other process's step returns an error, written to DIR/died_<rank>.txt (exit 3).
 *   test_fsdp_device mismatch STRATEGY fake DIR
 *       process N-1 makes an all_reduce of its own at step 3 where the others gather a unit's
 *       parameters through the NCCL path: every process reports the mismatch (DIR/died_<rank>.txt).
 *   ACC_TEST_FSDP_NCCL=yes|no (train, hook): FSDP's collectives did (did not) go through the fake
 *       device's NCCL (its call counter).
 *   test_fsdp_device probe              exit 77 unless a CUDA GPU is usable.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "accelerate.h"
#include "device/device.h" /* the CUDA probe; also ACC_CHECK (return on error) */
#include "device/dcomm.h"  /* acc__dcomm_fake_calls: the fake NCCL's collectives (the path taken) */

enum { D = 7, H = 13, O = 3, G = 12, STEPS = 50, HALF = 25, MICRO = 2, INF_STEP = 5 };

static const acc_param_spec table[] = {
    {"l1.w", 2, {H, D}}, {"l1.b", 1, {H}}, {"l2.w", 2, {H, H}}, {"l2.b", 1, {H}}, {"l3.w", 2, {O, H}}, {"l3.b", 1, {O}},
};
enum { NROWS = 6, NUMEL = H * D + H + H * H + H + O * H + O };

static acc_accelerator *acc;
static int rank, world;
static acc_dtype DT = ACC_F32; /* the table's dtype (trailing argument bf16 / fp16) */
static int inject_inf;         /* fp16: process 0 writes an inf into a gradient at INF_STEP */
static float clip_max = 0.5f;  /* hook: no clipping (the norms' partial sums differ by strategy) */

static float sample(size_t g, int k, int step) { return (float)sin(0.7 * (double)g + 1.3 * k + 0.17 * step); }

typedef struct run {
  acc_fsdp *f;
  acc_optimizer *opt;
  size_t u[4];
} run;

static int sdt = ACC_FSDP_SHARDED_STATE_DICT; /* save / resume: the last argument FULL: FULL_STATE_DICT */

static int dev_init; /* fault: init_params in device memory */

static acc_result make_run(run *r, int strategy) {
  acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
  pl.sharding_strategy = strategy;
  pl.state_dict_type = sdt;
  ACC_CHECK(acc_fsdp_create(acc, table, NROWS, DT, &pl, &r->f));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer1", 0, 2, &r->u[0]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer2", 2, 2, &r->u[1]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head", 4, 1, &r->u[2]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head_bias", 5, 1, &r->u[3]));
  float *p = malloc(NUMEL * sizeof *p); /* host memory: the library copies its ranges to the device */
  for (size_t i = 0; i < NUMEL; i++) p[i] = 0.4f * (float)cos(0.91 * (double)i);
  float *d = NULL;
  acc_result rc = ACC_OK;
  if (dev_init) {
    rc = acc_accelerator_alloc(acc, NUMEL * sizeof *p, (void **)&d);
    if (rc == ACC_OK) rc = acc_accelerator_memcpy(acc, d, p, NUMEL * sizeof *p, ACC_COPY_HOST_TO_DEVICE);
  }
  if (rc == ACC_OK) rc = acc_fsdp_prepare(r->f, dev_init ? d : p);
  acc_accelerator_free(acc, d);
  free(p);
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

/* the staging of a host program on a device: n values of the table's dtype at d, widened into h */
static acc_result fetch(float *h, const void *d, size_t n) {
  if (DT == ACC_F32) return acc_accelerator_memcpy(acc, h, d, n * sizeof(float), ACC_COPY_DEVICE_TO_HOST);
  uint16_t t[H * H + H];
  ACC_CHECK(acc_accelerator_memcpy(acc, t, d, n * sizeof *t, ACC_COPY_DEVICE_TO_HOST));
  return DT == ACC_BF16 ? acc_bf16_to_f32(h, t, n) : acc_f16_to_f32(h, t, n);
}

/* d += h, through a host copy of d (16-bit: widened, added, rounded once, as a 16-bit kernel) */
static acc_result add_into(void *d, const float *h, size_t n) {
  float tmp[H * H + H];
  ACC_CHECK(fetch(tmp, d, n));
  for (size_t i = 0; i < n; i++) tmp[i] += h[i];
  if (DT == ACC_F32) return acc_accelerator_memcpy(acc, d, tmp, n * sizeof(float), ACC_COPY_HOST_TO_DEVICE);
  uint16_t t[H * H + H];
  ACC_CHECK(DT == ACC_BF16 ? acc_f32_to_bf16(t, tmp, n) : acc_f32_to_f16(t, tmp, n));
  return acc_accelerator_memcpy(acc, d, t, n * sizeof *t, ACC_COPY_HOST_TO_DEVICE);
}

static acc_result fwd_begin(run *r, int k, const void **p) {
  return acc_fsdp_unit_forward_begin_typed(r->f, r->u[k], DT, p);
}

static acc_result bwd_begin(run *r, int k, const void **p, void **g) {
  return acc_fsdp_unit_backward_begin_typed(r->f, r->u[k], DT, p, g);
}

static void affine(const float *w, const float *b, const float *x, float *y, int out, int in) {
  for (int o = 0; o < out; o++) {
    float s = b[o];
    for (int i = 0; i < in; i++) s += w[o * in + i] * x[i];
    y[o] = s;
  }
}

/* One micro-step of test_fsdp.c's MLP, staged. */
static acc_result micro_step(run *r, int step, int micro) {
  int per = G / world;
  float x[G][D], h1[G][H], h2[G][H], y[G][O];
  float w1[H * D + H], w2[H * H + H], w3[O * H], w3b[O];
  const void *p;
  for (int s = 0; s < per; s++)
    for (int k = 0; k < D; k++) x[s][k] = sample((size_t)(rank * per + s), k, step * MICRO + micro);
  ACC_CHECK(fwd_begin(r, 0, &p));
  ACC_CHECK(fetch(w1, p, H * D + H));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[0]));
  for (int s = 0; s < per; s++) {
    affine(w1, w1 + H * D, x[s], h1[s], H, D);
    for (int k = 0; k < H; k++) h1[s][k] = tanhf(h1[s][k]);
  }
  ACC_CHECK(fwd_begin(r, 1, &p));
  ACC_CHECK(fetch(w2, p, H * H + H));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[1]));
  for (int s = 0; s < per; s++) {
    affine(w2, w2 + H * H, h1[s], h2[s], H, H);
    for (int k = 0; k < H; k++) h2[s][k] = tanhf(h2[s][k]);
  }
  const void *p3, *p3b;
  ACC_CHECK(fwd_begin(r, 2, &p3)); /* two units gathered at once */
  ACC_CHECK(fwd_begin(r, 3, &p3b));
  ACC_CHECK(fetch(w3, p3, O * H));
  ACC_CHECK(fetch(w3b, p3b, O));
  for (int s = 0; s < per; s++) affine(w3, w3b, h2[s], y[s], O, H);
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[2]));
  /* seeded with the accelerator's factor (the loss scale under fp16) */
  const float scale = (float)world / (float)(G * MICRO) * acc_accelerator_backward_scale(acc);
  float dy[G][O], dh2[G][H], dh1[G][H];
  for (int s = 0; s < per; s++)
    for (int o = 0; o < O; o++) dy[s][o] = (y[s][o] - sample((size_t)(rank * per + s), 100 + o, step)) * scale;
  void *g, *gb;
  float hg[H * H + H], hgb[O];
  ACC_CHECK(bwd_begin(r, 3, &p3b, &gb));
  ACC_CHECK(bwd_begin(r, 2, &p3, &g));
  ACC_CHECK(fetch(w3, p3, O * H));
  memset(hg, 0, sizeof hg);
  memset(hgb, 0, sizeof hgb);
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh2[s][k] = 0;
    for (int o = 0; o < O; o++) {
      for (int k = 0; k < H; k++) {
        hg[o * H + k] += dy[s][o] * h2[s][k];
        dh2[s][k] += w3[o * H + k] * dy[s][o];
      }
      hgb[o] += dy[s][o];
    }
    for (int k = 0; k < H; k++) dh2[s][k] *= 1 - h2[s][k] * h2[s][k];
  }
  ACC_CHECK(add_into(g, hg, O * H));
  ACC_CHECK(add_into(gb, hgb, O));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[2]));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[3]));
  ACC_CHECK(bwd_begin(r, 1, &p, &g));
  ACC_CHECK(fetch(w2, p, H * H + H));
  memset(hg, 0, sizeof hg);
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh1[s][k] = 0;
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < H; k++) {
        hg[o * H + k] += dh2[s][o] * h1[s][k];
        dh1[s][k] += w2[o * H + k] * dh2[s][o];
      }
      hg[H * H + o] += dh2[s][o];
    }
    for (int k = 0; k < H; k++) dh1[s][k] *= 1 - h1[s][k] * h1[s][k];
  }
  ACC_CHECK(add_into(g, hg, H * H + H));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[1]));
  ACC_CHECK(bwd_begin(r, 0, &p, &g));
  memset(hg, 0, sizeof hg);
  for (int s = 0; s < per; s++)
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < D; k++) hg[o * D + k] += dh1[s][o] * x[s][k];
      hg[H * D + o] += dh1[s][o];
    }
  /* fp16: an overflow on process 0 only (its gradient of element 0 of layer 1) */
  if (inject_inf && step == INF_STEP && micro == 0 && rank == 0) hg[0] = INFINITY;
  ACC_CHECK(add_into(g, hg, H * D + H));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[0]));
  return ACC_OK;
}

static acc_result train_step(run *r, int step, float *norm) {
  for (int m = 0; m < MICRO; m++) {
    ACC_CHECK(acc_fsdp_set_no_sync(r->f, m < MICRO - 1)); /* the first micro-step under no_sync */
    ACC_CHECK(micro_step(r, step, m));
  }
  ACC_CHECK(acc_fsdp_clip_grad_norm(r->f, clip_max, 2.0, norm));
  ACC_CHECK(acc_fsdp_optimizer_step(r->f, r->opt)); /* fp16: skips on overflow, updates the scale */
  return acc_optimizer_zero_grad(r->opt);
}

/* n floats of a shard (acc_fsdp_model's parameters and gradients) into h: a device copy, or under
 * offload_params (host memory) a plain read */
static acc_result shard_read(float *h, const float *shard, size_t n) {
  if (!acc_accelerator_is_device_pointer(acc, shard)) {
    memcpy(h, shard, n * sizeof *h);
    return ACC_OK;
  }
  return acc_accelerator_memcpy(acc, h, shard, n * sizeof *h, ACC_COPY_DEVICE_TO_HOST);
}

/* The full parameters, gathered as a forward does (every process). */
static acc_result full_params(run *r, float *out) {
  size_t off = 0;
  for (int k = 0; k < 4; k++) {
    const void *p;
    size_t n;
    ACC_CHECK(acc_fsdp_unit_info(r->f, r->u[k], NULL, NULL, NULL, &n));
    ACC_CHECK(fwd_begin(r, k, &p));
    ACC_CHECK(fetch(out + off, p, n));
    ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[k]));
    off += n;
  }
  return acc_fsdp_reshard(r->f);
}

/* The float32 master weights of the whole table: each process's shards staged to the host and
 * all-gathered (NO_SHARD: the shards are the whole units). */
static acc_result full_masters(run *r, float *out) {
  acc_model *m = acc_fsdp_model(r->f);
  size_t off = 0;
  for (int k = 0; k < 4; k++) {
    const acc_param *p = acc_model_parameter(m, r->u[k]);
    size_t n;
    ACC_CHECK(acc_fsdp_unit_info(r->f, r->u[k], NULL, NULL, NULL, &n));
    float *mine = malloc(p->numel * sizeof *mine), *all = malloc(p->numel * (size_t)world * sizeof *all);
    acc_result rc = mine && all ? ACC_OK : ACC_ERR_NOMEM;
    if (rc == ACC_OK) rc = shard_read(mine, p->data, p->numel);
    if (rc == ACC_OK && acc_fsdp_strategy(r->f) == ACC_FSDP_NO_SHARD) memcpy(all, mine, n * sizeof *all);
    else if (rc == ACC_OK) rc = acc_all_gather(acc_accelerator_state(acc), mine, all, p->numel, ACC_F32);
    if (rc == ACC_OK) memcpy(out + off, all, n * sizeof *out);
    free(mine);
    free(all);
    ACC_CHECK(rc);
    off += n;
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
         : !strcmp(s, "HYBRID_SHARD_ZERO2") ? ACC_FSDP_HYBRID_SHARD_ZERO2 : ACC_UNSET;
}

static void open_acc(const char *device) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  acc_device_type want = !strcmp(device, "cpu") ? ACC_DEVICE_CPU : !strcmp(device, "cuda") ? ACC_DEVICE_CUDA
                                                                                           : ACC_DEVICE_FAKE;
  o.device = want == ACC_DEVICE_FAKE ? ACC_DEVICE_AUTO : want; /* AUTO + ACCELERATE_TEST_DEVICE=fake */
  /* a 16-bit table runs under the accelerator's mixed precision of that type (fp16: its loss
   * scaler, small growth interval so that the scale grows back within the run) */
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 256.0f;
  so.growth_interval = 10;
  o.scaler = &so;
  if (DT != ACC_F32) o.mixed_precision = DT == ACC_F16 ? ACC_PRECISION_FP16 : ACC_PRECISION_BF16;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  rank = acc_state_process_index(acc_accelerator_state(acc));
  world = acc_state_num_processes(acc_accelerator_state(acc));
  acc_test_rank = world > 1 ? rank : -1;
  if (acc_accelerator_device_type(acc) != want) {
    fprintf(stderr, "FATAL: the accelerator trains on %s, not %s (ACCELERATE_TEST_DEVICE=fake for the fake device)\n",
            acc_accelerator_device_name(acc), device);
    exit(1);
  }
}

static int write_file(const char *path, const void *a, size_t an, const void *b, size_t bn) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return 0;
  int ok = fwrite(a, 1, an, fp) == an && (!bn || fwrite(b, 1, bn, fp) == bn);
  return fclose(fp) == 0 && ok;
}

static size_t read_file(const char *path, void *buf, size_t cap) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return 0;
  size_t n = fread(buf, 1, cap, fp);
  fclose(fp);
  return n;
}

static const char *dt_word(void) { return DT == ACC_BF16 ? "bf16" : DT == ACC_F16 ? "fp16" : "float32"; }

/* Both runs step from the same loss scale (fp16): the reference run's scaler state is set back to
 * what it was before the strategy's step; the two must agree after each step. */
/* ACC_TEST_FSDP_NCCL=yes: FSDP's collectives went through the fake device's NCCL (at least one
 * reduction per unit and step); no: none did (the host-staged path). Unset: not checked. */
static void check_path(void) {
  const char *want = getenv("ACC_TEST_FSDP_NCCL");
  if (!want || !*want) return;
  unsigned long long calls = acc__dcomm_fake_calls();
  if (!strcmp(want, "yes"))
    CHECK(calls >= (unsigned long long)STEPS * 4, "FSDP's collectives ran on the fake NCCL: %llu calls", calls);
  else
    CHECK(calls == 0, "FSDP's collectives were host-staged: %llu fake NCCL calls", calls);
  printf("fake NCCL collectives on process %d: %llu\n", rank, calls);
}

/* A process dies (process N-1, before step 3) under STRATEGY on the fake device's NCCL: every other
 * process's next step returns an error (written to DIR/died_<rank>.txt), never a hang. The
 * survivors ignore SIGTERM, so that the launcher's clean-up (after the death) cannot end them
 * before the library reports it (the launcher SIGKILLs after ACCELERATE_LAUNCH_GRACE_PERIOD). */
static void test_die(int strategy, const char *dir, int mismatch) {
  signal(SIGTERM, SIG_IGN);
  run a = {0};
  REQUIRE_OK(make_run(&a, strategy));
  for (int s = 0; s < STEPS; s++) {
    if (s == 3 && rank == world - 1 && !mismatch) {
      fprintf(stderr, "[rank %d] exits before step %d (test)\n", rank, s);
      _exit(7);
    }
    float norm, x[5] = {0};
    /* mismatch: process N-1 makes a collective of its own where the others gather a unit */
    acc_result rc = s == 3 && rank == world - 1 && mismatch
                        ? acc_all_reduce(acc_accelerator_state(acc), x, x, 5, ACC_F32, ACC_SUM)
                        : train_step(&a, s, &norm);
    if (rc == ACC_OK && s == 3 && rank == world - 1 && mismatch) rc = train_step(&a, s, &norm);
    if (rc != ACC_OK) {
      char path[4096];
      snprintf(path, sizeof path, "%s/died_%d.txt", dir, rank);
      FILE *fp = fopen(path, "w");
      if (fp) {
        fprintf(fp, "step %d: %s\n", s, acc_last_error());
        fclose(fp);
      }
      fprintf(stderr, "[rank %d] step %d after the death: %s\n", rank, s, acc_last_error());
      _exit(3);
    }
  }
  CHECK(0, "process %d trained %d steps although process %d died", rank, STEPS, world - 1);
}

static void test_train(int strategy, const char *out) {
  run a = {0}, ref = {0};
  REQUIRE_OK(make_run(&a, strategy));
  REQUIRE_OK(make_run(&ref, ACC_FSDP_NO_SHARD));
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  if (!acc_grad_scaler_enabled(sc)) sc = NULL;
  CHECK((DT == ACC_F16) == (sc != NULL), "the accelerator's fp16 scaler is on exactly for an fp16 table");
  float norms[STEPS], pa[NUMEL], pr[NUMEL];
  double worst_norm = 0;
  int skipped = 0;
  for (int s = 0; s < STEPS; s++) {
    float nr = 0, s0 = 1, sa = 1, sr = 1;
    int64_t t0 = 0, ta = 0, tr = 0;
    if (sc) CHECK_OK(acc_grad_scaler_get_state(sc, &s0, &t0));
    REQUIRE_OK(train_step(&a, s, &norms[s]));
    if (sc) {
      CHECK_OK(acc_grad_scaler_get_state(sc, &sa, &ta));
      CHECK_OK(acc_grad_scaler_set_state(sc, s0, t0));
    }
    REQUIRE_OK(train_step(&ref, s, &nr));
    if (sc) {
      CHECK_OK(acc_grad_scaler_get_state(sc, &sr, &tr));
      CHECK(sa == sr && ta == tr, "step %d: the scaler states agree (%g/%lld, %g/%lld)", s, (double)sa, (long long)ta,
            (double)sr, (long long)tr);
      if (s == INF_STEP) CHECK(sa == s0 * 0.5f, "the overflow backed the scale off: %g -> %g", (double)s0, (double)sa);
    }
    int sk = acc_fsdp_optimizer_step_was_skipped(a.f), skr = acc_fsdp_optimizer_step_was_skipped(ref.f);
    CHECK(sk == (inject_inf && s == INF_STEP) && skr == sk, "step %d skipped on this process (%d, NO_SHARD %d) "
          "exactly at the overflow step %d", s, sk, skr, INF_STEP);
    skipped += sk;
    if (s == INF_STEP || !isfinite(nr)) continue; /* the overflow step's norm is inf (both) */
    double d = fabs((double)norms[s] - nr) / (fabs((double)nr) + 1e-12);
    if (d > worst_norm) worst_norm = d;
  }
  CHECK(skipped == (inject_inf ? 1 : 0), "%d steps skipped", skipped);
  CHECK(worst_norm <= 1e-5, "clip norms differ by %g relative", worst_norm);
  REQUIRE_OK(full_masters(&a, pa));
  REQUIRE_OK(full_masters(&ref, pr));
  double d = rel_diff(pa, pr, NUMEL);
  CHECK(d <= 1e-5, "the float32 masters differ from NO_SHARD by %g relative", d);
  int moved = 0;
  for (size_t i = 0; i < NUMEL; i++) moved |= pa[i] != 0.4f * (float)cos(0.91 * (double)i);
  CHECK(moved, "the parameters were trained");
  if (DT != ACC_F32) { /* the gathered 16-bit values are the masters rounded */
    float g[NUMEL];
    uint16_t want[NUMEL];
    REQUIRE_OK(full_params(&a, g));
    REQUIRE_OK(DT == ACC_BF16 ? acc_f32_to_bf16(want, pa, NUMEL) : acc_f32_to_f16(want, pa, NUMEL));
    float w32[NUMEL];
    REQUIRE_OK(DT == ACC_BF16 ? acc_bf16_to_f32(w32, want, NUMEL) : acc_f16_to_f32(w32, want, NUMEL));
    CHECK(memcmp(g, w32, sizeof g) == 0, "the gathered %s parameters are the master weights rounded", dt_word());
  }
  /* FSDP_OFFLOAD_PARAMS on the device: the shards (parameters, gradients) host memory, the program's
   * buffers the device's; without it, all of them the device's */
  const char *off = getenv("FSDP_OFFLOAD_PARAMS");
  int offload = off && (!strcmp(off, "true") || !strcmp(off, "1"));
  if (acc_accelerator_device_type(acc) != ACC_DEVICE_CPU) {
    const acc_param *sh = acc_model_parameter(acc_fsdp_model(a.f), a.u[1]);
    CHECK(acc_accelerator_is_device_pointer(acc, sh->data) == !offload &&
              acc_accelerator_is_device_pointer(acc, sh->grad) == !offload,
          "the shards are %s memory", offload ? "host" : "device");
    const void *gp;
    REQUIRE_OK(fwd_begin(&a, 1, &gp));
    CHECK(acc_accelerator_is_device_pointer(acc, gp), "the gathered parameters are device memory");
    REQUIRE_OK(acc_fsdp_unit_forward_end(a.f, a.u[1]));
    REQUIRE_OK(acc_fsdp_reshard(a.f));
  }
  acc_fsdp_memory m;
  REQUIRE_OK(acc_fsdp_memory_stats(a.f, &m));
  CHECK(m.pool_buffers > 0 || strategy == ACC_FSDP_NO_SHARD, "unit buffers were used");
  if (rank == 0) CHECK(write_file(out, pa, sizeof pa, norms, sizeof norms), "wrote %s", out);
  check_path();
  printf("train%s: %s %s on %s, %d processes: masters within %.3g of NO_SHARD, clip norms within %.3g, %d skipped\n",
         offload ? " (offload_params)" : "", acc_fsdp_strategy(a.f) == ACC_FSDP_FULL_SHARD ? "FULL_SHARD"
         : acc_fsdp_strategy(a.f) == ACC_FSDP_SHARD_GRAD_OP ? "SHARD_GRAD_OP"
                                                             : "another strategy", dt_word(),
         acc_accelerator_device_name(acc), world, d, worst_norm, skipped);
  free_run(&a);
  free_run(&ref);
}

/* The accelerator's comm hook (ACCELERATE_COMM_HOOK) on FSDP's reductions: STRATEGY and NO_SHARD
 * side by side, no clipping (its norm's partial sums differ by strategy); on 2 processes the
 * 16-bit sums are the same under the reduce-scatter and the all-reduce, so the masters must be
 * bit-identical. OUT: the strategy's masters. */
static void test_hook(int strategy, const char *out) {
  run a = {0}, ref = {0};
  clip_max = 1e30f;
  REQUIRE_OK(make_run(&a, strategy));
  REQUIRE_OK(make_run(&ref, ACC_FSDP_NO_SHARD));
  float pa[NUMEL], pr[NUMEL], norm;
  for (int s = 0; s < STEPS; s++) {
    REQUIRE_OK(train_step(&a, s, &norm));
    REQUIRE_OK(train_step(&ref, s, &norm));
  }
  REQUIRE_OK(full_masters(&a, pa));
  REQUIRE_OK(full_masters(&ref, pr));
  CHECK(memcmp(pa, pr, sizeof pa) == 0, "the masters equal NO_SHARD's with the same hook bit for bit (%g relative)",
        rel_diff(pa, pr, NUMEL));
  if (rank == 0) CHECK(write_file(out, pa, sizeof pa, NULL, 0), "wrote %s", out);
  check_path();
  printf("hook: comm hook %d, %s table, %d processes on %s: masters equal NO_SHARD's bit for bit\n",
         acc_accelerator_comm_hook(acc), dt_word(), world, acc_accelerator_device_name(acc));
  free_run(&a);
  free_run(&ref);
}

/* One backward of every unit under the accelerator's comm hook, the gradients known: process r
 * adds value(r, k, i) to element i of unit k. Each process's gradient shard must hold what the
 * hook's arithmetic gives, computed here in the same 16-bit roundings (2 processes: exact, the sum of
 * two is one rounding whatever the order; more: within the roundings another order of the sum
 * can make, the backend may add in another order), and differ from the float32 mean (so the compression is visible). */
static float hook_value(int r, int k, size_t i) {
  return (float)(1.2345 * sin(1.7 * (double)i + 0.3 * r + k) * pow(10.0, -(double)(i % 4)));
}

static float r16(acc_dtype dt, float x) {
  uint16_t h;
  float y;
  if (dt == ACC_BF16) {
    acc_f32_to_bf16(&h, &x, 1);
    acc_bf16_to_f32(&y, &h, 1);
  } else {
    acc_f32_to_f16(&h, &x, 1);
    acc_f16_to_f32(&y, &h, 1);
  }
  return y;
}

static void test_hookgrad(int strategy) {
  int hook = acc_accelerator_comm_hook(acc);
  acc_dtype dt = hook == ACC_COMM_HOOK_FP16 ? ACC_F16 : ACC_BF16;
  CHECK(hook == ACC_COMM_HOOK_FP16 || hook == ACC_COMM_HOOK_BF16, "the accelerator runs an fp16 / bf16 hook");
  int pre = 1;
  while (world % pre == 0 && world / pre > pre) pre *= 2;
  const float post = (float)world / (float)pre;
  run r = {0};
  REQUIRE_OK(make_run(&r, strategy));
  for (int k = 0; k < 4; k++) {
    const void *p;
    void *g;
    size_t n;
    REQUIRE_OK(acc_fsdp_unit_info(r.f, r.u[k], NULL, NULL, NULL, &n));
    float v[H * H + H];
    for (size_t i = 0; i < n; i++) v[i] = hook_value(rank, k, i);
    REQUIRE_OK(fwd_begin(&r, k, &p));
    REQUIRE_OK(acc_fsdp_unit_forward_end(r.f, r.u[k]));
    REQUIRE_OK(bwd_begin(&r, k, &p, &g));
    REQUIRE_OK(add_into(g, v, n));
    REQUIRE_OK(acc_fsdp_unit_backward_end(r.f, r.u[k]));
  }
  acc_model *m = acc_fsdp_model(r.f);
  size_t checked = 0, off16 = 0, same32 = 0;
  for (int k = 0; k < 4; k++) {
    size_t lo, hi;
    REQUIRE_OK(acc_fsdp_shard_range(r.f, r.u[k], &lo, &hi));
    const acc_param *sp = acc_model_parameter(m, r.u[k]);
    float got[H * H + H];
    REQUIRE_OK(shard_read(got, sp->grad, hi - lo));
    for (size_t i = lo; i < hi; i++) {
      float sum = 0, mean32 = 0;
      double mag = 0; /* the addends' magnitude: the bound on another order's rounding */
      for (int q = 0; q < world; q++) {
        float h = r16(dt, r16(dt, hook_value(q, k, i)) * (1.0f / (float)pre));
        sum = q == 0 ? h : r16(dt, sum + h);
        mean32 += hook_value(q, k, i);
        mag += fabs((double)h);
      }
      mean32 *= 1.0f / (float)world;
      float want = post > 1.0f ? r16(dt, sum * (1.0f / post)) : sum;
      float g = got[i - lo];
      if (world == 2) {
        if (g == want) checked++;
        else if (off16++ < 3)
          fprintf(stderr, "unit %d element %zu: %.9g, the hook's arithmetic gives %.9g\n", k, i, (double)g, (double)want);
      } else {
        /* each addition of another order rounds once more: at most (N - 1) 16-bit roundings of
         * partial sums no larger than the addends', then the post-division's */
        const double eps = dt == ACC_BF16 ? 1.0 / 256 : 1.0 / 2048; /* one 16-bit step, relative */
        double step = (double)(world - 1) * mag * eps / post + fabs((double)want) * eps + 1e-30;
        if (fabs((double)g - want) <= step) checked++;
        else if (off16++ < 3)
          fprintf(stderr, "unit %d element %zu: %.9g, the hook's arithmetic gives %.9g (bound %.3g)\n", k, i,
                  (double)g, (double)want, step);
      }
      same32 += g == mean32;
    }
  }
  CHECK(off16 == 0 && checked > 0, "%zu gradient elements are the hook's 16-bit arithmetic (%zu are not)", checked,
        off16);
  CHECK(same32 < checked, "the compressed gradients are not the float32 mean (%zu of %zu equal)", same32, checked);
  printf("hookgrad: %s hook, %d processes (divided by %d before the sum, %g after): %zu elements checked, %zu equal "
         "to the float32 mean\n", dt == ACC_F16 ? "fp16" : "bf16", world, pre, (double)post, checked, same32);
  free_run(&r);
}

/* A and B (masters) differ, by at most tol of B's largest |value| */
static int test_differ(const char *pa, const char *pb, double tol) {
  static float a[NUMEL + 1], b[NUMEL + 1];
  size_t na = read_file(pa, a, sizeof a), nb = read_file(pb, b, sizeof b);
  CHECK(na == NUMEL * sizeof(float) && nb == na, "%s (%zu bytes) and %s (%zu bytes) hold the masters", pa, na, pb, nb);
  if (na != nb || na != NUMEL * sizeof(float)) return acc_test_finish("differ");
  double big = 0, worst = 0;
  for (size_t i = 0; i < NUMEL; i++) {
    if (fabs((double)b[i]) > big) big = fabs((double)b[i]);
    if (fabs((double)a[i] - b[i]) > worst) worst = fabs((double)a[i] - b[i]);
  }
  CHECK(memcmp(a, b, na) != 0, "%s and %s differ (the compression changed the training)", pa, pb);
  CHECK(worst <= tol * big, "%s is within %g of %s's largest weight (%g)", pa, tol, pb, worst / big);
  printf("differ: largest difference %g of the largest weight\n", worst / big);
  return acc_test_finish("differ");
}

/* PowerSGD does not apply to FSDP: refused at create, with a sentence, under every strategy */
static void test_psgd(void) {
  CHECK(acc_accelerator_comm_hook(acc) == ACC_COMM_HOOK_POWERSGD, "the accelerator runs PowerSGD");
  for (int strat = ACC_FSDP_FULL_SHARD; strat <= ACC_FSDP_NO_SHARD; strat++) {
    acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
    pl.sharding_strategy = strat;
    acc_fsdp *f = NULL;
    CHECK_ERR(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &f), ACC_ERR_NOT_SUPPORTED,
              "comm_hook power_sgd (ACCELERATE_COMM_HOOK) does not apply to FSDP");
    CHECK(f == NULL, "a refused create returns no state");
  }
}

static int test_same(const char *pa, const char *pb, double tol) {
  static unsigned char a[1 << 16], b[1 << 16];
  size_t na = read_file(pa, a, sizeof a), nb = read_file(pb, b, sizeof b);
  CHECK(na > 0 && na == nb, "%s (%zu bytes) and %s (%zu bytes) exist with the same size", pa, na, pb, nb);
  if (na != nb || !na) return acc_test_finish("same");
  if (tol == 0) {
    CHECK(memcmp(a, b, na) == 0, "%s and %s are byte-identical", pa, pb);
  } else {
    double d = rel_diff((const float *)(void *)a, (const float *)(void *)b, NUMEL);
    CHECK(d <= tol, "%s and %s agree to %g relative (%g)", pa, pb, tol, d);
  }
  return acc_test_finish("same");
}

static char *join(const char *dir, const char *name) {
  static char buf[2][4096];
  static int k;
  k ^= 1;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static void test_save(int strategy, const char *dir) {
  run r = {0};
  REQUIRE_OK(make_run(&r, strategy));
  float norm, p[NUMEL];
  for (int s = 0; s < HALF; s++) REQUIRE_OK(train_step(&r, s, &norm));
  CHECK_OK(acc_fsdp_save_state(r.f, r.opt, join(dir, "ckpt")));
  /* fp16: the loss scaler's state travels with the accelerator's checkpoint, not FSDP's: the test
   * carries it */
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  float sst[2] = {0, 0};
  int64_t tracker = 0;
  if (acc_grad_scaler_enabled(sc)) CHECK_OK(acc_grad_scaler_get_state(sc, &sst[0], &tracker));
  sst[1] = (float)tracker;
  if (rank == 0) CHECK(write_file(join(dir, "scaler"), sst, sizeof sst, NULL, 0), "wrote the scaler state");
  for (int s = HALF; s < STEPS; s++) REQUIRE_OK(train_step(&r, s, &norm));
  REQUIRE_OK(full_masters(&r, p));
  if (rank == 0) CHECK(write_file(join(dir, "expected"), p, sizeof p, NULL, 0), "wrote the expected parameters");
  free_run(&r);
}

static void test_resume(int strategy, const char *dir) {
  run r = {0};
  REQUIRE_OK(make_run(&r, strategy));
  float norm, p[NUMEL], want[NUMEL];
  /* a step of its own first: the device optimizer state exists, and the load must replace it */
  REQUIRE_OK(train_step(&r, 7, &norm));
  CHECK_OK(acc_fsdp_load_state(r.f, r.opt, join(dir, "ckpt")));
  acc_grad_scaler *sc = acc_accelerator_grad_scaler(acc);
  float sst[2];
  CHECK(read_file(join(dir, "scaler"), sst, sizeof sst) == sizeof sst, "read the scaler state");
  if (acc_grad_scaler_enabled(sc)) CHECK_OK(acc_grad_scaler_set_state(sc, sst[0], (int64_t)sst[1]));
  for (int s = HALF; s < STEPS; s++) REQUIRE_OK(train_step(&r, s, &norm));
  REQUIRE_OK(full_masters(&r, p));
  CHECK(read_file(join(dir, "expected"), want, sizeof want) == sizeof want, "read the expected parameters");
  CHECK(memcmp(p, want, sizeof p) == 0, "the resumed run ends bit for bit where the uninterrupted one did "
        "(largest difference %g relative)", rel_diff(p, want, NUMEL));
  free_run(&r);
}

/* ---- fault ---------------------------------------------------------------------------------- */

static const float *touch_p;
static volatile float sink;

/* 1 when touch (read or write of touch_p) died by SIGSEGV (or ASan's SEGV report) in a child */
static int faults(int write) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    if (write) ((volatile float *)(uintptr_t)touch_p)[0] = 1.0f;
    else sink = touch_p[0];
    _exit(0);
  }
  close(fds[1]);
  char err[8192];
  size_t got = 0;
  ssize_t n;
  while ((n = read(fds[0], err + got, sizeof err - 1 - got)) > 0) got += (size_t)n;
  err[got] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return 1;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(err, "SEGV")) return 1;
  return 0;
}

static void test_fault(void) {
  run r = {0};
  REQUIRE_OK(make_run(&r, ACC_FSDP_FULL_SHARD));
  const float *p;
  float *g;
  REQUIRE_OK(acc_fsdp_unit_forward_begin(r.f, r.u[1], &p));
  touch_p = p;
  CHECK(faults(0) == 1, "a host read of the gathered parameters dies");
  CHECK(faults(1) == 1, "a host write into the gathered parameters dies");
  CHECK(acc_accelerator_is_device_pointer(acc, p), "the gathered parameters are device memory");
  REQUIRE_OK(acc_fsdp_unit_forward_end(r.f, r.u[1]));
  const acc_param *shard = acc_model_parameter(acc_fsdp_model(r.f), 1);
  touch_p = shard->data;
  CHECK(faults(0) == 1, "a host read of the parameter shard dies");
  touch_p = shard->grad;
  CHECK(faults(1) == 1, "a host write into the gradient shard dies");
  REQUIRE_OK(acc_fsdp_unit_backward_begin(r.f, r.u[1], &p, &g));
  touch_p = g;
  CHECK(faults(1) == 1, "a host write into the gradient buffer dies");
  REQUIRE_OK(acc_fsdp_unit_backward_end(r.f, r.u[1]));
  /* released: NaN through a device copy; a device write into it is reported by the next begin */
  float v[4] = {0};
  REQUIRE_OK(fetch(v, p, 4));
  CHECK(isnan(v[0]) && isnan(v[3]), "a released parameter buffer reads NaN (%g %g)", (double)v[0], (double)v[3]);
  float one = 1.0f;
  REQUIRE_OK(acc_accelerator_memcpy(acc, (float *)(uintptr_t)p + 2, &one, sizeof one, ACC_COPY_HOST_TO_DEVICE));
  CHECK_ERR(acc_fsdp_unit_forward_begin(r.f, r.u[0], &p), ACC_ERR_INVALID_USAGE,
            "buffer of unit 'layer2' was written after the unit ended (element 2)");
  /* the library's optimizer runs on the device shards (a host loop would die here) */
  CHECK_OK(acc_optimizer_step(r.opt));
  CHECK_OK(acc_optimizer_zero_grad(r.opt));
  float clip = 0;
  CHECK_OK(acc_fsdp_clip_grad_norm(r.f, 1.0f, INFINITY, &clip));
  CHECK(clip == 0.0f, "the max norm of zero gradients is 0 (%g)", (double)clip);
  free_run(&r);
  /* init_params in device memory: the same shards as from host memory */
  run h = {0}, dv = {0};
  float ph[NUMEL], pd[NUMEL];
  REQUIRE_OK(make_run(&h, ACC_FSDP_FULL_SHARD));
  dev_init = 1;
  REQUIRE_OK(make_run(&dv, ACC_FSDP_FULL_SHARD));
  dev_init = 0;
  REQUIRE_OK(full_params(&h, ph));
  REQUIRE_OK(full_params(&dv, pd));
  CHECK(memcmp(ph, pd, sizeof ph) == 0 && ph[5] != 0.0f, "prepare from device memory gives the same parameters");
  free_run(&h);
  free_run(&dv);
  /* 16-bit tables on the device: the rounded gathers (the cast kernel), the gradients widened for
   * the reduction (the widen kernel) and the unscale are device work; host access dies */
  for (int k = 0; k < 2; k++) {
    DT = k == 0 ? ACC_BF16 : ACC_F16;
    run t = {0};
    REQUIRE_OK(make_run(&t, k == 0 ? ACC_FSDP_FULL_SHARD : ACC_FSDP_NO_SHARD));
    const void *tp;
    void *tg;
    REQUIRE_OK(fwd_begin(&t, 1, &tp));
    touch_p = tp;
    CHECK(faults(0) == 1, "%s: a host read of the gathered 16-bit parameters dies", dt_word());
    float w[4];
    REQUIRE_OK(fetch(w, tp, 4));
    CHECK(w[0] != 0.0f && isfinite(w[0]), "%s: the gathered parameters read through a device copy (%g)", dt_word(),
          (double)w[0]);
    REQUIRE_OK(acc_fsdp_unit_forward_end(t.f, t.u[1]));
    REQUIRE_OK(bwd_begin(&t, 1, &tp, &tg));
    touch_p = tg;
    CHECK(faults(1) == 1, "%s: a host write into the 16-bit gradient buffer dies", dt_word());
    float ones[4] = {1, 1, 1, 1};
    REQUIRE_OK(add_into(tg, ones, 4));
    REQUIRE_OK(acc_fsdp_unit_backward_end(t.f, t.u[1]));
    int inf = -1;
    CHECK_OK(acc_fsdp_unscale_gradients(t.f, &inf));
    CHECK(inf == 0, "%s: no overflow in finite gradients", dt_word());
    float norm2 = 0;
    CHECK_OK(acc_fsdp_clip_grad_norm(t.f, 1e30f, 2.0, &norm2));
    CHECK(norm2 == 2.0f, "%s: the norm of four gradients of 1 is 2 (%g)", dt_word(), (double)norm2);
    CHECK_OK(acc_fsdp_optimizer_step(t.f, t.opt));
    CHECK_OK(acc_optimizer_zero_grad(t.opt));
    /* a write into a released 16-bit buffer, element 3 (the high half of a word), is named */
    uint16_t bits = 0x3c00;
    REQUIRE_OK(acc_accelerator_memcpy(acc, (uint16_t *)(uintptr_t)tp + 3, &bits, sizeof bits,
                                      ACC_COPY_HOST_TO_DEVICE));
    /* (the parameters are a pool buffer under both strategies: NO_SHARD's are rounded copies) */
    CHECK_ERR(fwd_begin(&t, 0, &tp), ACC_ERR_INVALID_USAGE, "was written after the unit ended (element 3)");
    free_run(&t);
  }
  DT = ACC_F32;
}

/* offload_params on the strict fake device (FSDP_OFFLOAD_PARAMS=true): the shards and their
 * gradients are host memory (a host read and write succeed and see the values a device copy of the
 * gathered unit shows), the unit buffers the program gets still die on host access; no_sync's
 * gradients kept between micro-steps, the clip, the optimizer step (the host AdamW) and zero_grad
 * run on the host shards. */
static void test_fault_offload(void) {
  run r = {0};
  REQUIRE_OK(make_run(&r, ACC_FSDP_NO_SHARD)); /* NO_SHARD: the whole unit is this process's shard */
  const acc_param *shard = acc_model_parameter(acc_fsdp_model(r.f), r.u[1]);
  touch_p = shard->data;
  CHECK(faults(0) == 0, "a host read of the parameter shard succeeds under offload_params");
  touch_p = shard->grad;
  CHECK(faults(1) == 0, "a host write into the gradient shard succeeds under offload_params");
  const float *p;
  float *g;
  REQUIRE_OK(acc_fsdp_unit_forward_begin(r.f, r.u[1], &p));
  touch_p = p;
  CHECK(faults(0) == 1, "a host read of the gathered parameters still dies under offload_params");
  float v[H * D + H];
  REQUIRE_OK(fetch(v, p, H * D + H));
  CHECK(memcmp(v, shard->data, sizeof v) == 0 && v[3] != 0.0f,
        "the device copy of the unit holds the host shard's values");
  REQUIRE_OK(acc_fsdp_unit_forward_end(r.f, r.u[1]));
  /* two micro-steps, the first under no_sync: the gradients of both reach the host gradient shard */
  float ones[H * D + H];
  for (size_t i = 0; i < H * D + H; i++) ones[i] = 1.0f;
  for (int m = 0; m < 2; m++) {
    REQUIRE_OK(acc_fsdp_set_no_sync(r.f, m == 0));
    REQUIRE_OK(acc_fsdp_unit_backward_begin(r.f, r.u[1], &p, &g));
    touch_p = g;
    CHECK(faults(1) == 1, "a host write into the gradient buffer still dies under offload_params");
    REQUIRE_OK(add_into(g, ones, H * D + H));
    REQUIRE_OK(acc_fsdp_unit_backward_end(r.f, r.u[1]));
    acc_fsdp_memory ms;
    REQUIRE_OK(acc_fsdp_memory_stats(r.f, &ms));
    CHECK((ms.no_sync_bytes > 0) == (m == 0), "micro-step %d: no_sync gradients kept (%zu bytes)", m,
          ms.no_sync_bytes);
  }
  CHECK(shard->grad[0] == 2.0f && shard->grad[H * D + H - 1] == 2.0f,
        "the host gradient shard holds both micro-steps (%g %g)", (double)shard->grad[0],
        (double)shard->grad[H * D + H - 1]);
  float before = shard->data[0], norm = 0;
  CHECK_OK(acc_fsdp_clip_grad_norm(r.f, 1e30f, 2.0, &norm));
  CHECK(norm > 0.0f, "the clip norm over the host shards (%g)", (double)norm);
  CHECK_OK(acc_optimizer_step(r.opt));
  CHECK(shard->data[0] != before, "the host AdamW stepped the host shard (%g -> %g)", (double)before,
        (double)shard->data[0]);
  CHECK_OK(acc_optimizer_zero_grad(r.opt));
  CHECK(shard->grad[0] == 0.0f, "zero_grad zeroed the host gradient shard");
  free_run(&r);
}

static int probe(void) {
  acc__device_probe_info info;
  memset(&info, 0, sizeof info);
  if (acc__device_cuda_probe(&info) != ACC_OK) {
    printf("SKIP: no usable CUDA GPU here: %s\n", acc_last_error());
    return 77;
  }
  return 0;
}

/* The trailing arguments: FULL (save / resume: FULL_STATE_DICT), bf16 / fp16 (the table's dtype). */
static void trailing(int argc, char **argv, int from) {
  for (int i = from; i < argc; i++) {
    if (!strcmp(argv[i], "FULL")) sdt = ACC_FSDP_FULL_STATE_DICT;
    else if (!strcmp(argv[i], "bf16")) DT = ACC_BF16;
    else if (!strcmp(argv[i], "fp16")) DT = ACC_F16;
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      exit(2);
    }
  }
  inject_inf = DT == ACC_F16;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "probe")) return probe();
  if (argc >= 4 && !strcmp(argv[1], "same")) return test_same(argv[2], argv[3], argc > 4 ? atof(argv[4]) : 0);
  if (argc >= 5 && !strcmp(argv[1], "differ")) return test_differ(argv[2], argv[3], atof(argv[4]));
  if (argc >= 2 && !strcmp(argv[1], "fault")) {
    open_acc("fake");
    const char *off = getenv("FSDP_OFFLOAD_PARAMS");
    if (off && !strcmp(off, "true")) test_fault_offload();
    else test_fault();
  } else if (argc >= 3 && !strcmp(argv[1], "psgd")) {
    open_acc(argv[2]);
    test_psgd();
  } else if (argc >= 5) {
    int strategy = parse_strategy(argv[2]);
    if (strategy == ACC_UNSET) {
      fprintf(stderr, "unknown strategy %s\n", argv[2]);
      return 2;
    }
    trailing(argc, argv, 5);
    open_acc(argv[3]);
    if (!strcmp(argv[1], "train")) test_train(strategy, argv[4]);
    else if (!strcmp(argv[1], "hook")) test_hook(strategy, argv[4]);
    else if (!strcmp(argv[1], "hookgrad")) test_hookgrad(strategy);
    else if (!strcmp(argv[1], "save")) test_save(strategy, argv[4]);
    else if (!strcmp(argv[1], "resume")) test_resume(strategy, argv[4]);
    else if (!strcmp(argv[1], "die")) test_die(strategy, argv[4], 0);
    else if (!strcmp(argv[1], "mismatch")) test_die(strategy, argv[4], 1);
    else return 2;
  } else {
    fprintf(stderr, "usage: test_fsdp_device train|hook|save|resume STRATEGY cpu|fake|cuda OUT [FULL] [bf16|fp16] | "
                    "same A B [TOL] | differ A B TOL | psgd cpu|fake | fault | probe\n");
    return 2;
  }
  int rc = acc_test_finish(argv[1]);
  acc_accelerator_destroy(acc);
  return rc;
}
