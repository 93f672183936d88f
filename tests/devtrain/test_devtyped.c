/* bf16/fp16 parameter tables (acc_model_add_flat_typed) in device memory: parameters and gradients
 * in the table's dtype on the device, float32 master weights, float32 gradients and the optimizer's
 * float32 moments owned by the library on the device, the conversions as device kernels.
 *
 * The model is a linear layer (fc.w [NO x NI], fc.b [NO]) trained on a mean squared error; its
 * forward and backward passes are host code that reads the program's half-precision parameters
 * and writes its half-precision gradients through acc_accelerator_memcpy (as a GPU program's
 * kernels would on the device), adding each micro-batch's gradient to what the buffer holds.
 * Each process takes its share of every global batch.
 *
 * Usage (through accelerate launch, ACCELERATE_TEST_DEVICE=fake):
 *   test_devtyped equiv <config> <dir>  the same training with the table in host memory on the
 *                                       CPU and in device memory on the fake device: master
 *                                       weights, the program's parameters and gradients, the
 *                                       optimizer state, clip norms, skipped steps, loss scale
 *                                       and the model file end bit for bit equal (the same
 *                                       operations run: widen, float32 average, float32 step,
 *                                       round to nearest even)
 *   test_devtyped ckpt <config> <dir>   on the device: save_state after SAVE_AT steps, train on,
 *                                       load_state and train the rest again: bit for bit the
 *                                       uninterrupted run; the same checkpoint resumed by the CPU
 *                                       path: bit for bit too
 *   test_devtyped overlap <config> <dir> on the CPU and on the device: the same training with the
 *                                       program marking each row's gradient ready
 *                                       (acc_accelerator_grad_ready, last row first, one row
 *                                       per bucket) and without: bit for bit equal, and with
 *                                       grad_ready the buckets started before backward (bf16)
 *   test_devtyped zero <config> <dir>   on the CPU: the same training (without clipping: its norm
 *                                       is summed over shards in another order) at zero_stage 1
 *                                       and 2 and at 0: master weights, the program's parameters,
 *                                       the model file and the checkpoint's weights bit for bit
 *                                       equal; the checkpoint of stage 1 resumed at stage 2 too
 * Configs: bf16 (AdamW, weight decay, gradient accumulation over 2 micro-batches, clip_grad_norm
 * returning the norm), fp16 (mixed precision fp16 with the loss scaler: SGD with momentum, an
 * fp16 gradient overflow on process 0 only at one step, which every process skips).
 * With a last argument `cuda` the device run is on a GPU (ACC_DEVICE_CUDA; the fake device under
 * ACCELERATE_TEST_DEVICE=fake) and bf16 does not clip: a GPU sums the squares for the norm in
 * another order, every other operation has the same bits (src/device/kernels.h). */
#include <math.h>
#include <sys/stat.h>

#include "acc_test.h"
#include "core/internal.h"
#include "train/accel.h"

#define NI 8
#define NO 4
#define NW (NO * NI + NO)
#define GB 8
#define STEPS 12
#define SAVE_AT 5

typedef struct cfg {
  const char *name;
  acc_dtype dtype;
  int adamw, gas, fp16, clip, inf_step;
} cfg;

static const cfg cfgs[] = {
    {"bf16", ACC_BF16, 1, 2, 0, 1, -1},
    {"fp16", ACC_F16, 0, 1, 1, 0, 3},
};

static int rank, nprocs;
static int zero_stage; /* the accelerator's zero_stage for the runs opened next */
static int cuda_mode; /* the device run asks for CUDA */
static acc_device_type dev_type = ACC_DEVICE_FAKE;
static const acc_param_spec table[2] = {{"fc.w", 2, {NO, NI}}, {"fc.b", 1, {NO}}};

typedef struct run {
  const cfg *c;
  int dev; /* the table is device memory of the fake device (else host memory, CPU accelerator) */
  int ready; /* the program marks each row's gradient ready as it writes it (grad_ready) */
  acc_accelerator *acc;
  acc_model *m;
  acc_optimizer *opt;
  uint16_t *w, *g;     /* the program's parameters and gradients (device or host) */
  uint16_t hw[NW], hg[NW]; /* host copies of a device run's */
  int64_t micro, opt_steps;
  float norms[STEPS];
  int skipped[STEPS];
} run;

typedef struct snap {
  float master[NW];
  uint16_t w[NW], g[NW]; /* the program's parameters, and its gradients after the last backward */
  float state[2 * NW];
  size_t nstate;
  int64_t opt_step;
  float scale;
  acc_dtype dtype;
} snap;

static float to_f32(uint16_t v, acc_dtype dt) { return dt == ACC_BF16 ? acc__bf16_to_f32(v) : acc__f16_to_f32(v); }
static uint16_t from_f32(float v, acc_dtype dt) { return dt == ACC_BF16 ? acc__f32_to_bf16(v) : acc__f32_to_f16(v); }

/* input i of sample s of micro-batch t, and target o */
static float xval(int64_t t, int s, int i) { return sinf(0.37f * (float)(t * GB + s) + 0.91f * (float)i); }
static float yval(int64_t t, int s, int o) { return cosf(0.23f * (float)(t * GB + s) + 0.5f * (float)o); }

static void copy_in(run *r, void *dst, const void *src, size_t bytes) {
  if (r->dev) REQUIRE_OK(acc_accelerator_memcpy(r->acc, dst, src, bytes, ACC_COPY_HOST_TO_DEVICE));
  else memcpy(dst, src, bytes);
}

static void copy_out(run *r, void *dst, const void *src, size_t bytes) {
  if (r->dev) REQUIRE_OK(acc_accelerator_memcpy(r->acc, dst, src, bytes, ACC_COPY_DEVICE_TO_HOST));
  else memcpy(dst, src, bytes);
}

static void run_open_ready(run *r, const cfg *c, int dev, int ready) {
  memset(r, 0, sizeof *r);
  r->c = c;
  r->dev = dev;
  r->ready = ready;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  if (ready >= 0) { /* the overlap test: one row per bucket, reduced on the background thread */
    o.bucket_cap_bytes = 4;
    o.overlap_grad_sync = 1;
  }
  o.device = !dev ? ACC_DEVICE_CPU : cuda_mode && dev_type == ACC_DEVICE_CUDA ? ACC_DEVICE_CUDA : ACC_DEVICE_AUTO;
  o.gradient_accumulation_steps = c->gas;
  o.zero_stage = zero_stage;
  o.mixed_precision = c->fp16 ? ACC_PRECISION_FP16 : ACC_PRECISION_NO;
  REQUIRE_OK(acc_accelerator_create(&r->acc, &o));
  REQUIRE_OK(acc_accelerator_device_type(r->acc) == (dev ? dev_type : ACC_DEVICE_CPU) ? ACC_OK : ACC_ERR_INTERNAL);
  if (dev) {
    REQUIRE_OK(acc_accelerator_alloc(r->acc, NW * sizeof(uint16_t), (void **)&r->w));
    REQUIRE_OK(acc_accelerator_alloc(r->acc, NW * sizeof(uint16_t), (void **)&r->g));
  } else {
    r->w = calloc(NW, sizeof(uint16_t));
    r->g = calloc(NW, sizeof(uint16_t));
    REQUIRE_OK(r->w && r->g ? ACC_OK : ACC_ERR_NOMEM);
  }
  /* initial values differ by process: the broadcast of process 0's matters */
  uint16_t init[NW];
  for (int k = 0; k < NW; k++) init[k] = from_f32(0.3f * cosf(1.3f * (float)k + (float)rank), c->dtype);
  REQUIRE_OK(acc_model_create(&r->m));
  size_t first = 0;
  REQUIRE_OK(acc_model_add_flat_typed(r->m, table, 2, c->dtype, r->w, r->g, &first));
  copy_in(r, r->w, init, sizeof init); /* after registration: prepare_model takes these values */
  if (c->adamw) {
    acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
    ao.lr = 0.02;
    ao.weight_decay = 0.01;
    REQUIRE_OK(acc_optimizer_create_adamw(&r->opt, r->m, &ao));
  } else {
    acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
    so.lr = 0.05;
    so.momentum = 0.9;
    so.weight_decay = 0.01;
    REQUIRE_OK(acc_optimizer_create_sgd(&r->opt, r->m, &so));
  }
  REQUIRE_OK(acc_accelerator_prepare_model(r->acc, r->m));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(r->acc, r->opt));
  if (dev) {
    CHECK(acc_accelerator_is_device_pointer(r->acc, acc_model_parameter(r->m, 0)->data) == 1,
          "%s: the master weights are device memory", c->name);
    CHECK(acc_accelerator_is_device_pointer(r->acc, acc_model_parameter(r->m, 1)->grad) == 1,
          "%s: the float32 gradients are device memory", c->name);
  }
  /* every process now holds process 0's values, rounded from the float32 master */
  uint16_t w0[NW];
  copy_out(r, w0, r->w, sizeof w0);
  int bad = 0;
  for (int k = 0; k < NW; k++) bad += w0[k] != from_f32(0.3f * cosf(1.3f * (float)k), c->dtype);
  CHECK(bad == 0, "%s (%s): %d parameters are not process 0's after prepare_model", c->name, dev ? "device" : "cpu",
        bad);
}

static void run_open(run *r, const cfg *c, int dev) { run_open_ready(r, c, dev, -1); }

static void run_close(run *r) {
  REQUIRE_OK(acc_accelerator_synchronize(r->acc));
  acc_optimizer_destroy(r->opt);
  acc_model_destroy(r->m); /* before the accelerator: the master weights are its device's memory */
  if (r->dev) {
    acc_accelerator_free(r->acc, r->w);
    acc_accelerator_free(r->acc, r->g);
  } else {
    free(r->w);
    free(r->g);
  }
  acc_accelerator_destroy(r->acc);
}

/* One micro-step: the program's gradient of its share of the batch added to its gradient buffer
 * in the table's dtype, backward, clipping, the optimizer step at a sync point. */
static void run_step(run *r) {
  const cfg *c = r->c;
  const int per = GB / nprocs, lo = rank * per;
  REQUIRE_OK(acc_accelerator_accumulate(r->acc));
  copy_out(r, r->hw, r->w, sizeof r->hw);
  copy_out(r, r->hg, r->g, sizeof r->hg);
  const float scale = acc_accelerator_backward_scale(r->acc) / (float)(per * c->gas);
  float w[NW], g[NW] = {0};
  for (int k = 0; k < NW; k++) w[k] = to_f32(r->hw[k], c->dtype);
  for (int s = lo; s < lo + per; s++)
    for (int o = 0; o < NO; o++) {
      float p = w[NO * NI + o];
      for (int i = 0; i < NI; i++) p += w[o * NI + i] * xval(r->micro, s, i);
      float d = 2.0f * (p - yval(r->micro, s, o)) * scale;
      for (int i = 0; i < NI; i++) g[o * NI + i] += d * xval(r->micro, s, i);
      g[NO * NI + o] += d;
    }
  for (int k = 0; k < NW; k++) r->hg[k] = from_f32(to_f32(r->hg[k], c->dtype) + g[k], c->dtype);
  int sync = acc_accelerator_sync_gradients(r->acc);
  if (sync && c->inf_step == (int)r->opt_steps && rank == 0) r->hg[5] = 0x7c00; /* fp16 +inf */
  if (r->ready > 0) { /* as a backward pass: the last row's gradient first, each marked when written */
    copy_in(r, r->g + NO * NI, r->hg + NO * NI, NO * sizeof(uint16_t));
    REQUIRE_OK(acc_accelerator_grad_ready(r->acc, 1));
    copy_in(r, r->g, r->hg, NO * NI * sizeof(uint16_t));
    REQUIRE_OK(acc_accelerator_grad_ready(r->acc, 0));
    if (sync && !c->fp16 && r->opt_steps == 0) {
      acc_result rc = acc_accelerator_grad_ready(r->acc, 0);
      CHECK(rc == ACC_ERR_INVALID_USAGE && strstr(acc_last_error(), "'fc.w' was already marked ready"),
            "%s: a row marked twice is refused naming it (rc %d: %s)", c->name, (int)rc, acc_last_error());
    }
  } else {
    copy_in(r, r->g, r->hg, sizeof r->hg);
  }
  REQUIRE_OK(acc_accelerator_backward(r->acc));
  float norm = -1.0f;
  if (c->clip && !cuda_mode && sync) REQUIRE_OK(acc_accelerator_clip_grad_norm(r->acc, 0.05f, 2.0, &norm));
  if (sync) copy_out(r, r->hg, r->g, sizeof r->hg); /* the average, rounded: kept for the snapshot */
  REQUIRE_OK(acc_accelerator_optimizer_step(r->acc, r->opt));
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(r->acc, r->opt));
  if (sync) {
    uint16_t z[NW];
    copy_out(r, z, r->g, sizeof z);
    int nz = 0;
    for (int k = 0; k < NW; k++) nz += z[k] != 0;
    CHECK(nz == 0, "%s: %d program gradients are not zero after zero_grad", c->name, nz);
    if (r->opt_steps < STEPS) {
      r->norms[r->opt_steps] = norm;
      r->skipped[r->opt_steps] = acc_accelerator_optimizer_step_was_skipped(r->acc);
    }
    r->opt_steps++;
  }
  r->micro++;
}

static void train_to(run *r, int steps) {
  while (r->opt_steps < steps) run_step(r);
}

/* The run as it stands; save_state into dir moves the device optimizer state to its host buffers. */
static void take(run *r, snap *s, const char *dir) {
  memset(s, 0, sizeof *s);
  REQUIRE_OK(acc_accelerator_synchronize(r->acc));
  copy_out(r, s->master, acc_model_parameter(r->m, 0)->data, sizeof s->master);
  copy_out(r, s->w, r->w, sizeof s->w);
  memcpy(s->g, r->hg, sizeof s->g);
  int not_rounded = 0;
  for (int k = 0; k < NW; k++) not_rounded += s->w[k] != from_f32(s->master[k], r->c->dtype);
  CHECK(not_rounded == 0, "%s: %d program parameters are not the master weights rounded", r->c->name, not_rounded);
  REQUIRE_OK(acc_accelerator_save_state(r->acc, dir, NULL));
  /* under ZeRO each process holds its shard of the state: the checkpoint holds it whole */
  for (size_t k = 0; !acc_accelerator_zero_stage(r->acc) && k < acc_optimizer_state_count(r->opt); k++) {
    const float *d;
    size_t n;
    REQUIRE_OK(acc_optimizer_state_get(r->opt, k, NULL, &d, &n, NULL, NULL));
    REQUIRE_OK(s->nstate + n <= 2 * NW ? ACC_OK : ACC_ERR_INTERNAL);
    memcpy(s->state + s->nstate, d, n * sizeof(float));
    s->nstate += n;
  }
  s->opt_step = acc_optimizer_step_count(r->opt);
  s->scale = acc_grad_scaler_scale(acc_accelerator_grad_scaler(r->acc));
  s->dtype = r->c->dtype;
}

static void compare(const char *what, const snap *a, const snap *b) {
  /* the same bits, any NaN equal to any NaN (docs/gpu.md) */
  CHECK(acc_test_same_f32_n(a->master, b->master, sizeof a->master / sizeof(float), NULL),
        "%s: the float32 master weights differ", what);
  const int bf = a->dtype == ACC_BF16;
  CHECK(acc_test_same_half(a->w, b->w, NW, bf), "%s: the program's parameters differ", what);
  CHECK(acc_test_same_half(a->g, b->g, NW, bf), "%s: the program's averaged gradients differ", what);
  CHECK(a->nstate == b->nstate && a->nstate > 0 && acc_test_same_f32_n(a->state, b->state, a->nstate, NULL),
        "%s: the optimizer state differs (%zu vs %zu floats)", what, a->nstate, b->nstate);
  CHECK(a->opt_step == b->opt_step, "%s: step count %lld vs %lld", what, (long long)a->opt_step,
        (long long)b->opt_step);
  CHECK(a->scale == b->scale, "%s: loss scale %g vs %g", what, (double)a->scale, (double)b->scale);
}

static void same_file(const char *what, const char *p1, const char *p2) {
  if (rank != 0) return;
  static char x1[1 << 16], x2[1 << 16];
  FILE *f1 = fopen(p1, "rb"), *f2 = fopen(p2, "rb");
  CHECK(f1 && f2, "%s: files %s and %s", what, p1, p2);
  if (f1 && f2) {
    size_t n1 = fread(x1, 1, sizeof x1, f1), n2 = fread(x2, 1, sizeof x2, f2);
    CHECK(n1 == n2 && n1 > 0 && memcmp(x1, x2, n1) == 0, "%s: %s and %s differ", what, p1, p2);
  }
  if (f1) fclose(f1);
  if (f2) fclose(f2);
}

static void equiv(const cfg *c, const char *dir) {
  run cpu, dev;
  static snap a, b;
  char d1[1024], d2[1024], p1[1100], p2[1100];
  snprintf(d1, sizeof d1, "%s/equiv_%s_cpu", dir, c->name);
  snprintf(d2, sizeof d2, "%s/equiv_%s_dev", dir, c->name);
  run_open(&cpu, c, 0);
  train_to(&cpu, STEPS);
  take(&cpu, &a, d1);
  run_open(&dev, c, 1);
  train_to(&dev, STEPS);
  take(&dev, &b, d2);
  compare(c->name, &a, &b);
  CHECK(memcmp(cpu.norms, dev.norms, sizeof cpu.norms) == 0, "%s: the clip norms differ", c->name);
  CHECK(memcmp(cpu.skipped, dev.skipped, sizeof cpu.skipped) == 0, "%s: the skipped steps differ", c->name);
  if (c->inf_step >= 0) CHECK(dev.skipped[c->inf_step] == 1, "%s: the overflow step was skipped", c->name);
  if (c->clip && !cuda_mode) CHECK(dev.norms[0] > 0.0f, "%s: clip_grad_norm returned the norm", c->name);
  /* training moved the weights (the comparison is not of untouched values) */
  int moved = 0;
  for (int k = 0; k < NW; k++) moved += b.w[k] != from_f32(0.3f * cosf(1.3f * (float)k), c->dtype);
  CHECK(moved > NW / 2, "%s: only %d parameters moved", c->name, moved);
  snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
  snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
  same_file(c->name, p1, p2);
  if (rank == 0) {
    acc_safetensors *f = NULL;
    acc_tensor_view tv;
    REQUIRE_OK(acc_safetensors_open(&f, p2));
    REQUIRE_OK(acc_safetensors_find(f, "fc.w", &tv));
    CHECK(tv.dtype == ACC_F32 && tv.nbytes == NO * NI * sizeof(float) && memcmp(tv.data, b.master, tv.nbytes) == 0,
          "%s: the device run's model file holds fc.w as the float32 master weights", c->name);
    acc_safetensors_close(f);
  }
  run_close(&cpu);
  run_close(&dev);
  if (rank == 0)
    printf("equiv %s at %d process(es): CPU and device typed paths bit for bit equal after %d steps\n", c->name,
           nprocs, STEPS);
}

/* The same training with and without grad_ready, on the CPU and on the device. */
static void overlap(const cfg *c, const char *dir) {
  for (int dev = 0; dev < 2; dev++) {
    run plain, ready;
    static snap a, b;
    char d1[1024], d2[1024];
    snprintf(d1, sizeof d1, "%s/overlap_%s_%d_plain", dir, c->name, dev);
    snprintf(d2, sizeof d2, "%s/overlap_%s_%d_ready", dir, c->name, dev);
    const char *where = dev ? "device" : "cpu";
    run_open_ready(&plain, c, dev, 0);
    train_to(&plain, STEPS);
    take(&plain, &a, d1);
    size_t early0 = acc__accelerator_early_buckets(plain.acc);
    run_open_ready(&ready, c, dev, 1);
    train_to(&ready, STEPS);
    take(&ready, &b, d2);
    size_t early1 = acc__accelerator_early_buckets(ready.acc);
    char what[128];
    snprintf(what, sizeof what, "%s overlap on the %s", c->name, where);
    compare(what, &a, &b);
    CHECK(memcmp(plain.norms, ready.norms, sizeof plain.norms) == 0, "%s: the clip norms differ", what);
    CHECK(early0 == 0, "%s: %zu buckets started early without grad_ready", what, early0);
    /* fp16 mixed precision rounds the gradients in backward: grad_ready waits for it there */
    if (!c->fp16)
      CHECK(early1 >= (size_t)(2 * STEPS), "%s: only %zu buckets started before backward (expected 2 per step)",
            what, early1);
    else
      CHECK(early1 == 0, "%s: %zu buckets started early under fp16 mixed precision", what, early1);
    run_close(&plain);
    run_close(&ready);
    if (rank == 0)
      printf("overlap %s on the %s at %d process(es): with and without grad_ready bit for bit equal, %zu "
             "buckets started before backward\n", c->name, where, nprocs, early1);
  }
}

/* ZeRO stage 1 and 2 on the CPU against stage 0 (at 2 processes the sums have one order). */
static void zero(const cfg *c0, const char *dir) {
  cfg c = *c0;
  c.clip = 0;
  run plain;
  static snap a, b, r;
  char d0[1024], d[1024], p0[1100], p[1100];
  snprintf(d0, sizeof d0, "%s/zero_%s_0", dir, c.name);
  zero_stage = 0;
  run_open(&plain, &c, 0);
  train_to(&plain, STEPS);
  take(&plain, &a, d0);
  run_close(&plain);
  snprintf(p0, sizeof p0, "%s/model.safetensors", d0);
  for (int stage = 1; stage <= 2; stage++) {
    run z;
    char what[64], dsave[1100];
    snprintf(what, sizeof what, "%s at zero_stage %d", c.name, stage);
    snprintf(d, sizeof d, "%s/zero_%s_%d", dir, c.name, stage);
    snprintf(dsave, sizeof dsave, "%s/zero_%s_%d_at%d", dir, c.name, stage, SAVE_AT);
    zero_stage = stage;
    run_open(&z, &c, 0);
    CHECK(acc_accelerator_zero_stage(z.acc) == stage, "%s: the accelerator runs at stage %d", what,
          acc_accelerator_zero_stage(z.acc));
    train_to(&z, SAVE_AT);
    REQUIRE_OK(acc_accelerator_save_state(z.acc, dsave, NULL));
    const int64_t micro_at = z.micro;
    train_to(&z, STEPS);
    take(&z, &b, d);
    CHECK(acc_test_same_f32_n(a.master, b.master, NW, NULL), "%s: the master weights differ from stage 0", what);
    CHECK(acc_test_same_half(a.w, b.w, NW, c.dtype == ACC_BF16), "%s: the program's parameters differ", what);
    CHECK(a.opt_step == b.opt_step, "%s: step count %lld vs %lld", what, (long long)a.opt_step,
          (long long)b.opt_step);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    same_file(what, p0, p);
    /* resumed from its checkpoint half way, at the other stage */
    run_close(&z);
    zero_stage = 3 - stage;
    run_open(&z, &c, 0);
    REQUIRE_OK(acc_accelerator_load_state(z.acc, dsave, NULL));
    z.micro = micro_at;
    z.opt_steps = SAVE_AT;
    snprintf(d, sizeof d, "%s/zero_%s_%d_resumed", dir, c.name, stage);
    train_to(&z, STEPS);
    take(&z, &r, d);
    CHECK(acc_test_same_f32_n(a.master, r.master, NW, NULL),
          "%s: saved at step %d and resumed at stage %d, the master weights differ", what, SAVE_AT, 3 - stage);
    CHECK(acc_test_same_half(a.w, r.w, NW, c.dtype == ACC_BF16), "%s resumed: the program's parameters differ",
          what);
    run_close(&z);
  }
  zero_stage = 0;
  if (rank == 0)
    printf("zero %s at %d process(es): stages 1 and 2 bit for bit stage 0, resumed across stages too\n", c.name,
           nprocs);
}

static void ckpt(const cfg *c, const char *dir) {
  run dev, cpu;
  static snap straight, resumed, on_cpu;
  char dsave[1024], d1[1024], d2[1024], d3[1024];
  snprintf(dsave, sizeof dsave, "%s/ckpt_%s_at%d", dir, c->name, SAVE_AT);
  snprintf(d1, sizeof d1, "%s/ckpt_%s_straight", dir, c->name);
  snprintf(d2, sizeof d2, "%s/ckpt_%s_resumed", dir, c->name);
  snprintf(d3, sizeof d3, "%s/ckpt_%s_cpu", dir, c->name);
  run_open(&dev, c, 1);
  train_to(&dev, SAVE_AT);
  REQUIRE_OK(acc_accelerator_save_state(dev.acc, dsave, NULL));
  const int64_t micro_at = dev.micro;
  train_to(&dev, STEPS);
  take(&dev, &straight, d1);
  /* the program's parameters are garbage: load_state must rewrite them from the master weights */
  uint16_t junk[NW];
  memset(junk, 0xff, sizeof junk);
  copy_in(&dev, dev.w, junk, sizeof junk);
  REQUIRE_OK(acc_accelerator_load_state(dev.acc, dsave, NULL));
  uint16_t w[NW];
  copy_out(&dev, w, dev.w, sizeof w);
  int stale = 0;
  for (int k = 0; k < NW; k++) stale += w[k] == 0xffff;
  CHECK(stale == 0, "%s: after load_state %d program parameters are still garbage", c->name, stale);
  dev.micro = micro_at;
  dev.opt_steps = SAVE_AT;
  train_to(&dev, STEPS);
  take(&dev, &resumed, d2);
  compare("resumed on the device", &straight, &resumed);
  run_close(&dev);
  /* the device checkpoint resumed by the CPU path */
  run_open(&cpu, c, 0);
  REQUIRE_OK(acc_accelerator_load_state(cpu.acc, dsave, NULL));
  cpu.micro = micro_at;
  cpu.opt_steps = SAVE_AT;
  train_to(&cpu, STEPS);
  take(&cpu, &on_cpu, d3);
  compare("the device checkpoint resumed on the CPU", &straight, &on_cpu);
  run_close(&cpu);
  if (rank == 0)
    printf("ckpt %s at %d process(es): resumed at step %d, bit for bit on the device and on the CPU\n", c->name,
           nprocs, SAVE_AT);
}

int main(int argc, char **argv) {
  if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "cuda"))) {
    fprintf(stderr, "usage: test_devtyped equiv|ckpt|overlap|zero bf16|fp16 DIR [cuda]\n");
    return 2;
  }
  cuda_mode = argc == 5;
  const char *td = getenv("ACCELERATE_TEST_DEVICE");
  if (cuda_mode && !(td && !strcmp(td, "fake"))) dev_type = ACC_DEVICE_CUDA;
  const cfg *c = NULL;
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    if (!strcmp(cfgs[i].name, argv[2])) c = &cfgs[i];
  if (!c) {
    fprintf(stderr, "unknown config %s\n", argv[2]);
    return 2;
  }
  acc_state *st = NULL; /* one process group for every accelerator of the program */
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = nprocs > 1 ? rank : -1;
  if (GB % nprocs) {
    fprintf(stderr, "the global batch %d must divide by %d processes\n", GB, nprocs);
    return 2;
  }
  mkdir(argv[3], 0755); /* may exist */
  if (!strcmp(argv[1], "equiv")) equiv(c, argv[3]);
  else if (!strcmp(argv[1], "ckpt")) ckpt(c, argv[3]);
  else if (!strcmp(argv[1], "overlap")) overlap(c, argv[3]);
  else if (!strcmp(argv[1], "zero")) zero(c, argv[3]);
  else return 2;
  acc_state_destroy(st);
  return acc_test_finish("devtyped");
}
