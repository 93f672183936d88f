/* Training on a device: the same program trained on the CPU and on the fake device (parameters,
 * gradients and optimizer state in device memory) ends with the same bits.
 *
 * The model is a two-layer perceptron (w1 [H x D], b1 [H], w2 [O x H], b2 [O]); its forward and
 * backward passes are host code. On the fake device they run inside acc_accelerator_host_kernel
 * (the fake twin of a kernel launch: the only way host code reaches the strict fake device's
 * memory), as a GPU program's kernels would on the compute stream. Each process gets its own data, so gradient
 * averaging matters with two processes.
 *
 * Usage (through accelerate launch, ACCELERATE_TEST_DEVICE=fake):
 *   test_devtrain equiv <config>     CPU run vs fake-device run, bit for bit
 *   test_devtrain refuse             host memory in a device model is refused
 *   test_devtrain ckpt <config> <dir> save on one side, resume on the other, bit for bit
 *   test_devtrain state <config> <dir> on the fake device: the program's buffers (host and
 *                                    device) and objects through save/load_state, a failed load
 *                                    leaving everything as it was, save_model and
 *                                    load_checkpoint_in_model of the device model
 * With a last argument `cuda` the device run is on a GPU (ACC_DEVICE_CUDA): the host passes
 * stage the parameters and gradients through acc_accelerator_memcpy (parameters and gradients to
 * the host, forward and backward there, gradients back), so no kernel of the test's own is
 * needed; the comparisons with the CPU are bit for bit except where the gradient norm clips
 * (sgd, fp16, bf16lp): the GPU's norm is summed in another order, so those compare within a
 * tolerance (relative 1e-4 + absolute 1e-6; the first norm within 1e-6 relative).
 * More modes:
 *   test_devtrain probe [ngpus]      exit 77 with the reason unless a CUDA GPU (ngpus of them)
 *                                    can be used (the GPU tests run it first)
 *   test_devtrain bigbatch <config> <dir> [cuda]   at 2 processes: trains on the device and
 *                                    writes the parameters; at 1 process: the same with both
 *                                    processes' data in one batch, compared within the tolerance
 *   test_devtrain kill <config> <dir> [cuda]   at 2 processes: process 1 is killed before its
 *                                    gradient all-reduce; process 0 must fail within seconds
 *                                    naming rank 1, the group broken
 * Configs: sgd (momentum, weight decay, clip_grad_norm returning the norm), adamw (two parameter
 * groups, clip_grad_value, gradient accumulation), fp16 (SGD + momentum, an overflow on process
 * 0 only, clipping), bf16lp (AdamW, the bf16 low-precision copy), split (each tensor its own
 * allocation, small buckets, grad_ready overlap, max-norm clipping). */
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "acc_test.h"
#include "device/device.h"
#include "device/dcomm.h" /* acc__dcomm_fake_calls: the fake NCCL's all-reduces (the path taken) */
#include "device/devctx.h"
#include "train/accel_device.h"

enum { D = 6, H = 8, O = 3, BATCH = 4, NP = 4 };
static const size_t numels[NP] = {H * D, H, O * H, O};
static const char *const names[NP] = {"w1", "b1", "w2", "b2"};

typedef struct cfg {
  const char *name;
  int adamw, groups, gas, fp16, bf16, low_precision, split, overlap;
  int clip; /* 0 none, 1 norm 2 (asking for the norm), 2 value, 3 max norm, 4 norm 2 (not asking) */
  int inf_step; /* >= 0: an inf gradient on process 0 at this optimizer step */
} cfg;

static const cfg cfgs[] = {
    {"sgd", 0, 0, 1, 0, 0, 0, 0, 0, 1, -1},
    {"adamw", 1, 1, 2, 0, 0, 0, 0, 0, 2, -1},
    {"fp16", 0, 0, 1, 1, 0, 0, 0, 0, 4, 3},
    {"bf16lp", 1, 0, 1, 0, 1, 1, 0, 0, 1, -1},
    {"split", 0, 0, 1, 0, 0, 0, 1, 1, 3, -1},
};

static const cfg *find_cfg(const char *name) {
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    if (!strcmp(cfgs[i].name, name)) return &cfgs[i];
  return NULL;
}

static int rank, nprocs;
static int cuda_mode;    /* the device run is on a GPU, the host passes staged through memcpy */
static int vranks = 1;   /* bigbatch at 1 process: the data of this many processes in one batch */
static int kill_mode;    /* a failing call ends the step with its result instead of the test */
static double tol_rel;   /* 0: bit for bit; else parameters and state within this relative */

/* A deterministic value in [-1, 1) from (a, b, c). */
static float hval(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 1) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86CD8B5ADull;
  x ^= x >> 29;
  return (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* ---- one run ------------------------------------------------------------------------------- */

typedef struct run {
  const cfg *c;
  int fake;
  acc_accelerator *acc;
  acc_model *model;
  acc_optimizer *opt;
  float *data[NP], *grad[NP];
  float *block_data, *block_grad; /* one allocation each unless split */
  float *hd[NP], *hg[NP];         /* what the host passes read and write (staged on a GPU) */
  float hbuf[2][H * D + H + O * H + O];
  int64_t micro;                  /* micro-steps done */
  int64_t opt_steps;              /* optimizer steps done (sync points) */
  float norms[64];
  int skipped[64];
  int nrec;
} run;

static acc_result dev_alloc(run *r, size_t bytes, float **out) {
  if (!r->fake) {
    *out = calloc(1, bytes);
    return *out ? ACC_OK : ACC_ERR_NOMEM;
  }
  return acc_accelerator_alloc(r->acc, bytes, (void **)out);
}

static void dev_free(run *r, float *p) {
  if (!p) return;
  if (r->fake) acc_accelerator_free(r->acc, p);
  else free(p);
}

static void run_open(run *r, const cfg *c, int fake) {
  memset(r, 0, sizeof *r);
  r->c = c;
  r->fake = fake;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = !fake ? ACC_DEVICE_CPU : cuda_mode ? ACC_DEVICE_CUDA : ACC_DEVICE_AUTO;
  o.gradient_accumulation_steps = c->gas;
  o.mixed_precision = c->fp16   ? ACC_PRECISION_FP16
                      : c->bf16 ? ACC_PRECISION_BF16
                                : ACC_PRECISION_NO;
  o.low_precision_params = c->low_precision;
  o.overlap_grad_sync = c->overlap;
  if (c->split) o.bucket_cap_bytes = 40 * sizeof(float); /* several buckets */
  REQUIRE_OK(acc_accelerator_create(&r->acc, &o));
  rank = acc_state_process_index(acc_accelerator_state(r->acc));
  nprocs = acc_state_num_processes(acc_accelerator_state(r->acc));
  acc_test_rank = nprocs > 1 ? rank : -1;
  /* cuda mode under ACCELERATE_TEST_DEVICE=fake: the staged passes on the fake device (CI) */
  const char *td = getenv("ACCELERATE_TEST_DEVICE");
  acc_device_type want = !fake                             ? ACC_DEVICE_CPU
                         : cuda_mode && !(td && !strcmp(td, "fake")) ? ACC_DEVICE_CUDA
                                                                     : ACC_DEVICE_FAKE;
  REQUIRE_OK(acc_accelerator_device_type(r->acc) == want
                 ? ACC_OK
                 : ACC_ERR_INTERNAL);
  size_t total = 0;
  for (int i = 0; i < NP; i++) total += numels[i];
  if (!c->split) {
    REQUIRE_OK(dev_alloc(r, total * sizeof(float), &r->block_data));
    REQUIRE_OK(dev_alloc(r, total * sizeof(float), &r->block_grad));
  }
  /* initial values: process-dependent, so the broadcast of process 0's values matters */
  float init[H * D];
  size_t off = 0;
  for (int i = 0; i < NP; i++) {
    if (c->split) {
      REQUIRE_OK(dev_alloc(r, numels[i] * sizeof(float), &r->data[i]));
      REQUIRE_OK(dev_alloc(r, numels[i] * sizeof(float), &r->grad[i]));
    } else {
      r->data[i] = r->block_data + off;
      r->grad[i] = r->block_grad + off;
    }
    r->hd[i] = fake && cuda_mode ? r->hbuf[0] + off : r->data[i];
    r->hg[i] = fake && cuda_mode ? r->hbuf[1] + off : r->grad[i];
    for (size_t k = 0; k < numels[i]; k++)
      init[k] = 0.5f * hval(1000 + (uint64_t)rank, (uint64_t)i, k);
    if (fake)
      REQUIRE_OK(acc_accelerator_memcpy(r->acc, r->data[i], init, numels[i] * sizeof(float),
                                        ACC_COPY_HOST_TO_DEVICE));
    else
      memcpy(r->data[i], init, numels[i] * sizeof(float));
    off += numels[i];
  }
  REQUIRE_OK(acc_model_create(&r->model));
  int64_t shapes[NP][2] = {{H, D}, {H, 0}, {O, H}, {O, 0}};
  for (int i = 0; i < NP; i++)
    REQUIRE_OK(acc_model_add_parameter(r->model, names[i], r->data[i], r->grad[i],
                                       shapes[i][1] ? 2 : 1, shapes[i]));
  if (c->adamw) {
    acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
    ao.lr = 0.01;
    ao.weight_decay = 0.1;
    if (c->groups) {
      const char *wn[] = {"w1", "w2"}, *bn[] = {"b1", "b2"};
      acc_param_group g[2] = {{wn, 2, -1.0, -1.0}, {bn, 2, 0.02, 0.0}};
      REQUIRE_OK(acc_optimizer_create_adamw_groups(&r->opt, r->model, g, 2, &ao));
    } else {
      REQUIRE_OK(acc_optimizer_create_adamw(&r->opt, r->model, &ao));
    }
  } else {
    acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
    so.lr = 0.05;
    so.momentum = c->split ? 0.0 : 0.9;
    so.weight_decay = c->split ? 0.0 : 0.01;
    REQUIRE_OK(acc_optimizer_create_sgd(&r->opt, r->model, &so));
  }
  REQUIRE_OK(acc_accelerator_prepare_model(r->acc, r->model));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(r->acc, r->opt));
  if (fake) {
    const acc_param *p = acc_model_parameter(r->model, 0);
    CHECK(acc_accelerator_is_device_pointer(r->acc, p->data) == 1, "device run: device params");
  }
}

static void run_close(run *r) {
  acc_accelerator_synchronize(r->acc);
  acc_optimizer_destroy(r->opt);
  acc_model_destroy(r->model);
  if (r->c->split) {
    for (int i = 0; i < NP; i++) {
      dev_free(r, r->data[i]);
      dev_free(r, r->grad[i]);
    }
  } else {
    dev_free(r, r->block_data);
    dev_free(r, r->block_grad);
  }
  acc_accelerator_destroy(r->acc);
}

/* Forward and backward of one micro-batch on the host, adding scale * dloss/dparam to the
 * gradients. */
static void forward_backward(run *r, int64_t micro) {
  const float *w1 = r->hd[0], *b1 = r->hd[1], *w2 = r->hd[2], *b2 = r->hd[3];
  float *g1 = r->hg[0], *gb1 = r->hg[1], *g2 = r->hg[2], *gb2 = r->hg[3];
  const float scale = acc_accelerator_backward_scale(r->acc) / (float)(BATCH * vranks);
  for (int vs = 0; vs < BATCH * vranks; vs++) {
    const int s = vs % BATCH, dr = vranks > 1 ? vs / BATCH : rank; /* whose data */
    float x[D], h[H], y[O], dy[O], dh[H];
    for (int k = 0; k < D; k++)
      x[k] = hval((uint64_t)micro, (uint64_t)dr * 97 + (uint64_t)s, (uint64_t)k);
    for (int j = 0; j < H; j++) {
      float a = b1[j];
      for (int k = 0; k < D; k++) a += w1[j * D + k] * x[k];
      h[j] = a > 0 ? a : 0.1f * a;
    }
    for (int o = 0; o < O; o++) {
      float a = b2[o];
      for (int j = 0; j < H; j++) a += w2[o * H + j] * h[j];
      y[o] = a;
      dy[o] = (a - hval((uint64_t)micro + 7, (uint64_t)dr, (uint64_t)(s * O + o))) * scale;
    }
    for (int j = 0; j < H; j++) {
      float a = 0;
      for (int o = 0; o < O; o++) a += w2[o * H + j] * dy[o];
      dh[j] = h[j] > 0 ? a : 0.1f * a;
    }
    for (int o = 0; o < O; o++) {
      gb2[o] += dy[o];
      for (int j = 0; j < H; j++) g2[o * H + j] += dy[o] * h[j];
    }
    for (int j = 0; j < H; j++) {
      gb1[j] += dh[j];
      for (int k = 0; k < D; k++) g1[j * D + k] += dh[j] * x[k];
    }
    (void)y;
  }
}

/* A call of a step: its failure ends the test, or in kill mode the step (returned). */
#define STEP_OK(call)                              \
  do {                                             \
    acc_result step_rc_ = (call);                  \
    if (kill_mode && step_rc_ != ACC_OK) return step_rc_; \
    REQUIRE_OK(step_rc_);                          \
  } while (0)

/* Staged passes on a GPU: parameters and gradients to the host (in) or gradients back (out). */
static acc_result stage(run *r, int in) {
  for (int i = 0; i < NP; i++) {
    size_t b = numels[i] * sizeof(float);
    if (in) {
      ACC_CHECK(acc_accelerator_memcpy(r->acc, r->hd[i], r->data[i], b, ACC_COPY_DEVICE_TO_HOST));
      ACC_CHECK(acc_accelerator_memcpy(r->acc, r->hg[i], r->grad[i], b, ACC_COPY_DEVICE_TO_HOST));
    } else {
      ACC_CHECK(acc_accelerator_memcpy(r->acc, r->grad[i], r->hg[i], b, ACC_COPY_HOST_TO_DEVICE));
    }
  }
  return ACC_OK;
}

/* forward_backward (and the injected overflow) as a host kernel on the fake device. */
typedef struct fb_args {
  run *r;
  int inject;
} fb_args;

static void fb_kernel(void *p) {
  fb_args *a = p;
  forward_backward(a->r, a->r->micro);
  if (a->inject) a->r->hg[2][5] = INFINITY;
}

/* One micro-step: accumulate, forward/backward, and at a sync point the optimizer step. */
static acc_result run_step(run *r) {
  const cfg *c = r->c;
  int staged = r->fake && cuda_mode;
  STEP_OK(acc_accelerator_accumulate(r->acc));
  STEP_OK(acc_accelerator_synchronize(r->acc)); /* the host "kernels" read device memory */
  if (staged) STEP_OK(stage(r, 1));
  int sync = acc_accelerator_sync_gradients(r->acc);
  fb_args fa = {r, sync && c->inf_step == (int)r->opt_steps && rank == 0};
  if (r->fake && !staged) STEP_OK(acc_accelerator_host_kernel(r->acc, fb_kernel, &fa));
  else fb_kernel(&fa);
  if (staged) STEP_OK(stage(r, 0));
  if (kill_mode && rank == 1 && r->micro == 3) raise(SIGKILL); /* before its all-reduce */
  if (c->overlap)
    for (int i = NP; i-- > 0;) STEP_OK(acc_accelerator_grad_ready(r->acc, (size_t)i));
  STEP_OK(acc_accelerator_backward(r->acc));
  float norm = -1.0f;
  if (c->clip == 1) STEP_OK(acc_accelerator_clip_grad_norm(r->acc, 0.5f, 2.0, &norm));
  if (c->clip == 2) STEP_OK(acc_accelerator_clip_grad_value(r->acc, 0.05f));
  if (c->clip == 3) STEP_OK(acc_accelerator_clip_grad_norm(r->acc, 0.2f, INFINITY, &norm));
  if (c->clip == 4) STEP_OK(acc_accelerator_clip_grad_norm(r->acc, 0.5f, 2.0, NULL));
  /* On the fake device queued work runs only at synchronization points: optimizer_step and
   * zero_grad queue their kernels without waiting (fp16 waits once, for the overflow flag,
   * inside its first step), so work is still queued after them. */
  static float before[H * D], after[H * D];
  int watch = r->fake && !cuda_mode && sync && !c->fp16;
  if (watch)
    STEP_OK(acc_accelerator_memcpy(r->acc, before, r->data[0], sizeof before,
                                   ACC_COPY_DEVICE_TO_HOST));
  STEP_OK(acc_accelerator_optimizer_step(r->acc, r->opt));
  STEP_OK(acc_accelerator_optimizer_zero_grad(r->acc, r->opt));
  if (watch) {
    CHECK(acc__device_queued(acc__accelerator_dev(r->acc)->dev) > 0,
          "%s: optimizer_step synchronized with the device", c->name);
    REQUIRE_OK(acc_accelerator_memcpy(r->acc, after, r->data[0], sizeof after,
                                      ACC_COPY_DEVICE_TO_HOST));
    CHECK(memcmp(before, after, sizeof before) != 0, "%s: the step changed w1", c->name);
  }
  if (sync) {
    if (r->nrec < 64) {
      r->norms[r->nrec] = norm;
      r->skipped[r->nrec] = acc_accelerator_optimizer_step_was_skipped(r->acc);
      r->nrec++;
    }
    r->opt_steps++;
  }
  r->micro++;
  return ACC_OK;
}

/* Everything that must match: parameters, optimizer state tensors, the low-precision copy. */
typedef struct snap {
  float params[H * D + H + O * H + O];
  float state[2 * (H * D + H + O * H + O)];
  size_t nstate;
  uint16_t low[H * D + H + O * H + O];
  int64_t opt_step;
  float scale;
} snap;

static void take(run *r, snap *s) {
  memset(s, 0, sizeof *s);
  REQUIRE_OK(acc_accelerator_synchronize(r->acc));
  size_t off = 0;
  for (int i = 0; i < NP; i++) {
    if (r->fake)
      REQUIRE_OK(acc_accelerator_memcpy(r->acc, s->params + off, r->data[i],
                                        numels[i] * sizeof(float), ACC_COPY_DEVICE_TO_HOST));
    else
      memcpy(s->params + off, r->data[i], numels[i] * sizeof(float));
    off += numels[i];
  }
  const uint16_t *low = acc_accelerator_low_precision_params(r->acc);
  if (r->c->low_precision) {
    CHECK(low != NULL, "%s: a low-precision copy", r->fake ? "fake" : "cpu");
    if (low) {
      if (r->fake) {
        CHECK(acc_accelerator_is_device_pointer(r->acc, low) == 1, "low copy in device memory");
        REQUIRE_OK(acc_accelerator_memcpy(r->acc, s->low, low, sizeof s->low,
                                          ACC_COPY_DEVICE_TO_HOST));
      } else {
        memcpy(s->low, low, sizeof s->low);
      }
    }
  }
  /* the optimizer state as a checkpoint sees it: save_state stages it through the host */
  s->opt_step = acc_optimizer_step_count(r->opt);
  s->scale = acc_grad_scaler_scale(acc_accelerator_grad_scaler(r->acc));
}

static void state_of(run *r, snap *s, const char *dir) {
  /* save_state moves a device optimizer's state into its host buffers */
  REQUIRE_OK(acc_accelerator_save_state(r->acc, dir, NULL));
  s->nstate = 0;
  for (size_t k = 0; k < acc_optimizer_state_count(r->opt); k++) {
    const float *data;
    size_t n;
    REQUIRE_OK(acc_optimizer_state_get(r->opt, k, NULL, &data, &n, NULL, NULL));
    memcpy(s->state + s->nstate, data, n * sizeof(float));
    s->nstate += n;
  }
}

static int close_to(float a, float b, double rel) {
  if (acc_test_same_f32(a, b)) return 1; /* the same bits, or two NaNs (docs/gpu.md) */
  if (!(rel > 0) || isnan(a) || isnan(b)) return 0;
  return fabs((double)a - (double)b) <= rel * fmax(fabs((double)a), fabs((double)b)) + 1e-6;
}

static int all_close(const float *a, const float *b, size_t n, double rel, size_t *at) {
  for (size_t k = 0; k < n; k++)
    if (!close_to(a[k], b[k], rel)) {
      *at = k;
      return 0;
    }
  return 1;
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void compare(const char *what, const snap *a, const snap *b) {
  size_t np = sizeof a->params / sizeof(float), at = 0;
  int ok = all_close(a->params, b->params, np, tol_rel, &at);
  CHECK(ok, "%s: parameters differ%s", what, tol_rel > 0 ? " beyond the tolerance" : "");
  if (!ok)
    fprintf(stderr, "  first difference at %zu: %.9g vs %.9g\n", at, (double)a->params[at],
            (double)b->params[at]);
  CHECK(a->nstate == b->nstate && all_close(a->state, b->state, a->nstate, tol_rel, &at),
        "%s: optimizer state differs (%zu vs %zu floats)", what, a->nstate, b->nstate);
  int low_ok = 1;
  for (size_t k = 0; k < np; k++)
    if (!acc_test_same_half(&a->low[k], &b->low[k], 1, 1) &&
        !(tol_rel > 0 && close_to(bf16_to_f32(a->low[k]), bf16_to_f32(b->low[k]), 1.0 / 64)))
      low_ok = 0;
  CHECK(low_ok, "%s: low-precision copy differs", what);
  CHECK(a->opt_step == b->opt_step, "%s: step count %lld vs %lld", what, (long long)a->opt_step,
        (long long)b->opt_step);
  CHECK(a->scale == b->scale, "%s: loss scale %g vs %g", what, (double)a->scale, (double)b->scale);
}

/* ---- modes --------------------------------------------------------------------------------- */

enum { STEPS = 12 };

static void equiv(const cfg *c, const char *dir) {
  run cpu, fake;
  snap a, b;
  char d1[1024], d2[1024];
  snprintf(d1, sizeof d1, "%s/equiv_%s_cpu", dir, c->name);
  snprintf(d2, sizeof d2, "%s/equiv_%s_fake", dir, c->name);
  run_open(&cpu, c, 0);
  for (int s = 0; s < STEPS * c->gas; s++) REQUIRE_OK(run_step(&cpu));
  take(&cpu, &a);
  state_of(&cpu, &a, d1);
  run_open(&fake, c, 1);
  for (int s = 0; s < STEPS * c->gas; s++) REQUIRE_OK(run_step(&fake));
  take(&fake, &b);
  state_of(&fake, &b, d2);
  compare(c->name, &a, &b);
  size_t at = 0;
  CHECK(all_close(cpu.norms, fake.norms, 64, tol_rel, &at) &&
            close_to(cpu.norms[0], fake.norms[0], tol_rel > 0 ? 1e-6 : 0),
        "%s: clip norms differ (%g vs %g at step %zu)", c->name, (double)cpu.norms[at],
        (double)fake.norms[at], at);
  CHECK(memcmp(cpu.skipped, fake.skipped, sizeof cpu.skipped) == 0, "%s: skipped steps differ",
        c->name);
  if (c->inf_step >= 0)
    CHECK(fake.skipped[c->inf_step] == 1, "%s: the overflow step was skipped on every process",
          c->name);
  if (c->clip == 1) CHECK(fake.norms[0] > 0.0f, "%s: a norm was returned", c->name);
  /* acc_save_model of the device model writes the same file as the CPU model */
  if (rank == 0 && !(tol_rel > 0)) {
    char p1[1100], p2[1100];
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
    FILE *f1 = fopen(p1, "rb"), *f2 = fopen(p2, "rb");
    CHECK(f1 && f2, "model files %s %s", p1, p2);
    if (f1 && f2) {
      static char x1[1 << 16], x2[1 << 16];
      size_t n1 = fread(x1, 1, sizeof x1, f1), n2 = fread(x2, 1, sizeof x2, f2);
      CHECK(n1 == n2 && n1 > 0 && memcmp(x1, x2, n1) == 0, "%s: model.safetensors differ", c->name);
    }
    if (f1) fclose(f1);
    if (f2) fclose(f2);
  }
  run_close(&cpu);
  run_close(&fake);
}

static void refuse(void) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  REQUIRE_OK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE ? ACC_OK : ACC_ERR_INTERNAL);
  float host_w[4] = {0}, *dev_w = NULL, *dev_g = NULL;
  REQUIRE_OK(acc_accelerator_alloc(acc, sizeof host_w, (void **)&dev_w));
  REQUIRE_OK(acc_accelerator_alloc(acc, sizeof host_w, (void **)&dev_g));
  int64_t shape[1] = {4};
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "ok", dev_w, dev_g, 1, shape));
  float host_g[4];
  REQUIRE_OK(acc_model_add_parameter(m, "hosted", host_w, host_g, 1, shape));
  CHECK_ERR(acc_accelerator_prepare_model(acc, m), ACC_ERR_INVALID_ARGUMENT,
            "parameter 'hosted': its data");
  CHECK(strstr(acc_last_error(), "acc_accelerator_alloc") != NULL, "says how: %s",
        acc_last_error());
  acc_model_destroy(m);
  /* a device parameter whose gradient is host memory */
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", dev_w, host_g, 1, shape));
  CHECK_ERR(acc_accelerator_prepare_model(acc, m), ACC_ERR_INVALID_ARGUMENT,
            "parameter 'w': its gradient");
  acc_model_destroy(m);
  /* ACCELERATE_DEVICE_NCCL: a bad value is an error saying why; never: the host-staged path
   * (always on the fake device takes its NCCL stand-in: the devtrain_nccl_* tests) */
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", dev_w, dev_g, 1, shape));
  setenv("ACCELERATE_DEVICE_NCCL", "sometimes", 1);
  CHECK_ERR(acc_accelerator_prepare_model(acc, m), ACC_ERR_INVALID_ARGUMENT,
            "ACCELERATE_DEVICE_NCCL");
  setenv("ACCELERATE_DEVICE_NCCL", "never", 1);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  unsetenv("ACCELERATE_DEVICE_NCCL");
  acc_model_destroy(m);
  /* ZeRO on a device: the model is accepted (the program's own optimizer on its range,
   * acc_accelerator_zero_shard / zero_gather), the library's optimizer refused with the way out */
  acc_accelerator_free(acc, dev_w);
  acc_accelerator_free(acc, dev_g);
  acc_accelerator_destroy(acc);
  o.zero_stage = 1;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  REQUIRE_OK(acc_accelerator_alloc(acc, sizeof host_w, (void **)&dev_w));
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", dev_w, NULL, 1, shape));
  CHECK_OK(acc_accelerator_prepare_model(acc, m));
  acc_optimizer *zo = NULL;
  acc_sgd_options zso = ACC_SGD_OPTIONS_INIT;
  REQUIRE_OK(acc_optimizer_create_sgd(&zo, m, &zso));
  CHECK_ERR(acc_accelerator_prepare_optimizer(acc, zo), ACC_ERR_NOT_SUPPORTED, "acc_accelerator_zero_shard");
  acc_optimizer_destroy(zo);
  acc_model_destroy(m);
  acc_accelerator_free(acc, dev_w);
  acc_accelerator_destroy(acc);
}

/* Save after K steps on one side, load on the other (or the same) side, K more steps: the same
 * bits as 2K steps straight on the CPU. */
static void ckpt(const cfg *c, const char *dir) {
  enum { K = 5 };
  snap straight, got;
  run r;
  run_open(&r, c, 0);
  for (int s = 0; s < 2 * K * c->gas; s++) REQUIRE_OK(run_step(&r));
  take(&r, &straight);
  run_close(&r);
  static const int sides[3][2] = {{1, 0}, {0, 1}, {1, 1}}; /* {saved on fake, resumed on fake} */
  for (int k = 0; k < 3; k++) {
    char d[1024], what[128];
    snprintf(d, sizeof d, "%s/ckpt_%s_%d", dir, c->name, k);
    snprintf(what, sizeof what, "%s: saved on %s, resumed on %s", c->name,
             sides[k][0] ? "fake" : "cpu", sides[k][1] ? "fake" : "cpu");
    run_open(&r, c, sides[k][0]);
    for (int s = 0; s < K * c->gas; s++) REQUIRE_OK(run_step(&r));
    REQUIRE_OK(acc_accelerator_save_state(r.acc, d, NULL));
    run_close(&r);
    run_open(&r, c, sides[k][1]);
    REQUIRE_OK(acc_accelerator_load_state(r.acc, d, NULL));
    r.micro = K * c->gas;
    r.opt_steps = K;
    for (int s = 0; s < K * c->gas; s++) REQUIRE_OK(run_step(&r));
    take(&r, &got);
    straight.nstate = got.nstate = 0; /* the parameters carry the state's effect */
    compare(what, &straight, &got);
    run_close(&r);
  }
  /* saved and resumed on the device against 10 steps straight on the device: bit for bit
   * always (on a GPU too, where the comparisons with the CPU above may need the tolerance) */
  snap dev_straight, resumed;
  run_open(&r, c, 1);
  for (int s = 0; s < 2 * K * c->gas; s++) REQUIRE_OK(run_step(&r));
  take(&r, &dev_straight);
  run_close(&r);
  char d[1024];
  snprintf(d, sizeof d, "%s/ckpt_%s_dev", dir, c->name);
  run_open(&r, c, 1);
  for (int s = 0; s < K * c->gas; s++) REQUIRE_OK(run_step(&r));
  REQUIRE_OK(acc_accelerator_save_state(r.acc, d, NULL));
  run_close(&r);
  run_open(&r, c, 1);
  REQUIRE_OK(acc_accelerator_load_state(r.acc, d, NULL));
  r.micro = K * c->gas;
  r.opt_steps = K;
  for (int s = 0; s < K * c->gas; s++) REQUIRE_OK(run_step(&r));
  take(&r, &resumed);
  run_close(&r);
  dev_straight.nstate = resumed.nstate = 0;
  double keep = tol_rel;
  tol_rel = 0;
  compare("resumed on the device vs straight on the device", &dev_straight, &resumed);
  tol_rel = keep;
}

/* ---- state: the rest of the training state on the strict fake device -------------------- */

/* A per-process object: a counter that differs per process. */
static acc_result obj_save(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, obj, sizeof(int64_t));
  return ACC_OK;
}
static acc_result obj_load(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return ACC_ERR_MISMATCH;
  memcpy(obj, data, len);
  return ACC_OK;
}

static void params_of(run *r, float *out) {
  size_t off = 0;
  for (int i = 0; i < NP; i++) {
    REQUIRE_OK(acc_accelerator_memcpy(r->acc, out + off, r->data[i], numels[i] * sizeof(float),
                                      ACC_COPY_DEVICE_TO_HOST));
    off += numels[i];
  }
}

/* On the fake device (whose memory host code cannot touch): the program's own buffers, in host
 * and in device memory, and a per-process object go through save_state / load_state; a
 * load_state that fails half-way leaves the device parameters, the optimizer and the program's
 * buffers exactly as they were; acc_save_model writes the device model and
 * acc_load_checkpoint_in_model reads a file into it. */
static void state_test(const cfg *c, const char *dir) {
  enum { K = 4, NB = 16 };
  run r;
  run_open(&r, c, 1);
  double hostbuf[NB];
  float *devbuf = NULL, back[NB], init[NB];
  for (int i = 0; i < NB; i++) hostbuf[i] = 0.25 * i, init[i] = (float)i - 3.0f;
  REQUIRE_OK(acc_accelerator_alloc(r.acc, sizeof init, (void **)&devbuf));
  REQUIRE_OK(acc_accelerator_memcpy(r.acc, devbuf, init, sizeof init, ACC_COPY_HOST_TO_DEVICE));
  void *hp = hostbuf, *dp = devbuf;
  acc_named_buffer bufs[2] = {{"host", ACC_F64, &hp, NB, NULL}, {"dev", ACC_F32, &dp, NB, NULL}};
  REQUIRE_OK(acc_accelerator_register_buffers(r.acc, "own", bufs, 2));
  int64_t counter = 100 + rank;
  REQUIRE_OK(acc_accelerator_register_for_checkpointing_per_process(r.acc, &counter, obj_save,
                                                                    obj_load));
  for (int s = 0; s < K * c->gas; s++) REQUIRE_OK(run_step(&r));
  char d[1024], bad[1100];
  snprintf(d, sizeof d, "%s/state_%s", dir, c->name);
  REQUIRE_OK(acc_accelerator_save_state(r.acc, d, NULL));
  static float saved[H * D + H + O * H + O], now[H * D + H + O * H + O], after[H * D + H + O * H + O];
  params_of(&r, saved);
  /* change everything, then load: everything comes back */
  for (int s = 0; s < K * c->gas; s++) REQUIRE_OK(run_step(&r));
  for (int i = 0; i < NB; i++) hostbuf[i] = -1.0, back[i] = 42.0f;
  REQUIRE_OK(acc_accelerator_memcpy(r.acc, devbuf, back, sizeof back, ACC_COPY_HOST_TO_DEVICE));
  counter = -5;
  REQUIRE_OK(acc_accelerator_load_state(r.acc, d, NULL));
  params_of(&r, now);
  CHECK(memcmp(saved, now, sizeof now) == 0, "%s: load_state put the device parameters back", c->name);
  REQUIRE_OK(acc_accelerator_memcpy(r.acc, back, devbuf, sizeof back, ACC_COPY_DEVICE_TO_HOST));
  CHECK(memcmp(back, init, sizeof back) == 0, "%s: the program's device buffer came back", c->name);
  CHECK(hostbuf[3] == 0.75 && counter == 100 + rank, "%s: host buffer %g, object %lld", c->name,
        hostbuf[3], (long long)counter);
  /* a load that fails half-way (the optimizer file is damaged, after the model was read) */
  for (int s = 0; s < c->gas; s++) REQUIRE_OK(run_step(&r));
  params_of(&r, now);
  const int64_t step_before = acc_optimizer_step_count(r.opt);
  for (int i = 0; i < NB; i++) back[i] = 7.0f;
  REQUIRE_OK(acc_accelerator_memcpy(r.acc, devbuf, back, sizeof back, ACC_COPY_HOST_TO_DEVICE));
  counter = 9;
  snprintf(bad, sizeof bad, "%s/state_%s_bad", dir, c->name);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && printf 'not a safetensors file' > '%s'/optimizer.safetensors", bad,
           d, bad, bad);
  REQUIRE_OK(acc_accelerator_wait_for_everyone(r.acc));
  if (rank == 0) REQUIRE_OK(system(cmd) == 0 ? ACC_OK : ACC_ERR_IO);
  REQUIRE_OK(acc_accelerator_wait_for_everyone(r.acc));
  CHECK(acc_accelerator_load_state(r.acc, bad, NULL) != ACC_OK, "%s: a damaged checkpoint loads",
        c->name);
  params_of(&r, after);
  CHECK(memcmp(now, after, sizeof now) == 0, "%s: a failed load left the device parameters", c->name);
  CHECK(acc_optimizer_step_count(r.opt) == step_before,
        "%s: a failed load left the optimizer step (%lld vs %lld)", c->name,
        (long long)acc_optimizer_step_count(r.opt), (long long)step_before);
  REQUIRE_OK(acc_accelerator_memcpy(r.acc, back, devbuf, sizeof back, ACC_COPY_DEVICE_TO_HOST));
  CHECK(back[0] == 7.0f && back[NB - 1] == 7.0f && counter == 9,
        "%s: a failed load left the program's buffer and object", c->name);
  REQUIRE_OK(run_step(&r)); /* and training goes on */
  /* save_model of the device model, read back into it after a change */
  char md[1100];
  snprintf(md, sizeof md, "%s/model_%s", dir, c->name);
  params_of(&r, now);
  REQUIRE_OK(acc_save_model(acc_accelerator_state(r.acc), r.model, md, 0, ACC_F32));
  for (int s = 0; s < c->gas; s++) REQUIRE_OK(run_step(&r));
  REQUIRE_OK(acc_load_checkpoint_in_model(r.model, md, NULL, NULL));
  params_of(&r, after);
  CHECK(memcmp(now, after, sizeof now) == 0, "%s: save_model / load_checkpoint_in_model of the device "
        "model", c->name);
  run_close(&r);
}

/* bigbatch: 2 processes write their parameters; 1 process with both processes' data in one
 * batch compares with them (within the tolerance: the sums are in another order). */
static void bigbatch(const cfg *c, const char *dir) {
  char path[1100];
  snprintf(path, sizeof path, "%s/bigbatch_%s.bin", dir, c->name);
  run r;
  snap a, b;
  if (nprocs == 1) vranks = 2;
  run_open(&r, c, 1);
  for (int s = 0; s < STEPS * c->gas; s++) REQUIRE_OK(run_step(&r));
  take(&r, &a);
  run_close(&r);
  if (nprocs == 2) {
    if (rank == 0) {
      FILE *f = fopen(path, "wb");
      CHECK(f && fwrite(a.params, sizeof a.params, 1, f) == 1, "writing %s", path);
      if (f) fclose(f);
    }
    return;
  }
  REQUIRE_OK(nprocs == 1 ? ACC_OK : ACC_ERR_INVALID_USAGE);
  memcpy(&b, &a, sizeof b);
  FILE *f = fopen(path, "rb");
  CHECK(f && fread(b.params, sizeof b.params, 1, f) == 1,
        "reading %s (written by the same mode at 2 processes)", path);
  if (f) fclose(f);
  double keep = tol_rel;
  tol_rel = 1e-4;
  compare("2 processes vs 1 process with twice the batch", &b, &a);
  tol_rel = keep;
  vranks = 1;
}

static double mult(void) {
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  double v = m ? atof(m) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* kill: process 1 dies before its all-reduce of micro-step 3; process 0 fails within seconds,
 * naming rank 1, and the group is broken afterwards. */
static void kill_test(const cfg *c, const char *dir) {
  (void)dir;
  REQUIRE_OK(nprocs == 2 ? ACC_OK : ACC_ERR_INVALID_USAGE);
  /* the launcher stops the survivors of a dead rank (SIGTERM, then SIGKILL after its grace
   * period): process 0 must notice by itself, as under a launcher that does not */
  signal(SIGTERM, SIG_IGN);
  kill_mode = 1;
  run r;
  run_open(&r, c, 1);
  acc_result rc = ACC_OK;
  double t0 = now_s();
  char first[2048] = "", second[2048] = "";
  for (int s = 0; s < 50 && rc == ACC_OK; s++) {
    if (r.micro == 3) t0 = now_s(); /* the step in which process 1 dies */
    rc = run_step(&r);
  }
  double dt = now_s() - t0;
  CHECK(rc != ACC_OK, "process 0 failed after process 1 died");
  snprintf(first, sizeof first, "%s", acc_last_error());
  /* the next call: the group is broken (or the watchdog's failure, naming the rank) */
  acc_result rc2 = acc_accelerator_backward(r.acc);
  snprintf(second, sizeof second, "%s", acc_last_error());
  printf("kill: failed after %.2f s: %s\nkill: then: %s\n", dt, first, second);
  CHECK(dt < 15.0 * mult(), "process 0 noticed the dead process 1 within seconds (%.2f s)", dt);
  CHECK(strstr(first, "rank 1") || strstr(second, "rank 1"), "the message names rank 1");
  CHECK(rc2 != ACC_OK, "the next call fails too");
  /* the group: broken by the failure (its reason names rank 1). Through NCCL the first failing
   * call may be a synchronization released by the watchdog's abort; the watchdog's failure,
   * which marks the group, comes with the next call of the gradient path */
  CHECK_ERR(acc_barrier(acc_accelerator_state(r.acc)), ACC_ERR_REMOTE, "rank 1");
  const char *nccl = getenv("ACCELERATE_DEVICE_NCCL");
  if (!(nccl && !strcmp(nccl, "always")))
    CHECK(strstr(acc_last_error(), "broken") != NULL, "the group is broken: %s", acc_last_error());
  int fails = acc_test_failures;
  if (!fails) printf("kill: PASS\n");
  fflush(stdout);
  _exit(fails ? 1 : 0); /* no clean-up: the group is gone */
}

/* probe [ngpus]: whether the GPU tests can run here (exit 77 and the reason if not). */
static int probe(int want) {
  acc__device_probe_info info;
  memset(&info, 0, sizeof info);
  acc_result rc = acc__device_cuda_probe(&info);
  if (rc != ACC_OK) {
    printf("SKIP: no usable CUDA GPU here: %s\n", acc_last_error());
    return 77;
  }
  if (info.device_count < want) {
    printf("SKIP: %d CUDA GPU(s) here, this test needs %d\n", info.device_count, want);
    return 77;
  }
  printf("%d CUDA GPU(s), NCCL %d\n", info.device_count, info.nccl_version);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_devtrain equiv|ckpt|bigbatch|kill <config> <dir> [cuda] | "
                    "refuse | probe [ngpus]\n");
    return 2;
  }
  if (!strcmp(argv[1], "probe")) return probe(argc > 2 ? atoi(argv[2]) : 1);
  cuda_mode = argc >= 5 && !strcmp(argv[4], "cuda");
  acc_state *st = NULL; /* one process group for every accelerator of the program */
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = nprocs > 1 ? rank : -1;
  const cfg *c = argc >= 3 ? find_cfg(argv[2]) : NULL;
  /* norm-2 clipping on a real GPU: the tolerance (on the fake device: bit for bit) */
  const char *td = getenv("ACCELERATE_TEST_DEVICE");
  int real_gpu = cuda_mode && !(td && !strcmp(td, "fake"));
  if (c && real_gpu && (c->clip == 1 || c->clip == 4)) tol_rel = 1e-4;
  if (!strcmp(argv[1], "refuse")) {
    refuse();
  } else if (argc >= 4 && c) {
    mkdir(argv[3], 0755); /* may exist: the files inside are replaced */
    if (!strcmp(argv[1], "equiv")) equiv(c, argv[3]);
    else if (!strcmp(argv[1], "ckpt")) ckpt(c, argv[3]);
    else if (!strcmp(argv[1], "bigbatch")) bigbatch(c, argv[3]);
    else if (!strcmp(argv[1], "kill")) kill_test(c, argv[3]);
    else if (!strcmp(argv[1], "state")) state_test(c, argv[3]);
    else return 2;
  } else {
    fprintf(stderr, "unknown mode or config\n");
    return 2;
  }
  /* ACC_TEST_DEVICE_NCCL=yes: the gradient averaging went through the fake device's NCCL */
  const char *want = getenv("ACC_TEST_DEVICE_NCCL");
  if (want && !strcmp(want, "yes"))
    CHECK(acc__dcomm_fake_calls() > 0, "the gradients were averaged through the fake NCCL (%llu calls)",
          acc__dcomm_fake_calls());
  acc_state_destroy(st);
  return acc_test_finish("devtrain");
}
