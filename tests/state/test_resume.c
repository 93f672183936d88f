/* Resume exactness: K+M batches trained straight must equal, bit for bit, K batches +
 * save_state + a fresh process group (a new `accelerate launch`) + load_state + M batches.
 * A linear model with shuffled data (the save falls mid-epoch and the run crosses epochs),
 * AdamW + a warmup scheduler, noise from the global RNG (per process), a registered custom
 * object, and optionally fp16 (a GradScaler that overflows and grows) and gradient accumulation.
 * Configurations: fp32, fp16; bf16lp / fp16lp (low_precision_params, the forward pass computes
 * with the low-precision copy: regression for new-user review R1, load_state left it stale);
 * groups (AdamW with two parameter groups, different lr and weight decay).
 * Usage (through the launcher; CMakeLists.txt chains the modes with FIXTURES):
 *   test_state_resume straight|save|resume|compare <fp32|fp16|bf16lp|fp16lp|groups> <grad_accum> <dir> <K> <M>
 * Each process dumps its parameters, optimizer state, lr, scaler, step, loader position, custom
 * object and next random numbers to <dir>/<mode>_r<rank>.bin; compare checks the files. */
#include <math.h>

#include "acc_test.h"

#define NSAMPLES 100
#define DIM 8
#define B 4

static float xs[NSAMPLES][DIM], ys[NSAMPLES];
static int rank, nprocs;
static int low_precision; /* the forward pass reads the accelerator's low-precision copy */

static int fetch(int64_t i, void *const *fields, void *payload) {
  (void)payload;
  memcpy(fields[0], xs[i], sizeof xs[i]);
  memcpy(fields[1], &ys[i], sizeof(float));
  return 0;
}

/* A registered object: counts the samples this process has seen. */
typedef struct counter {
  int64_t samples;
} counter;

static acc_result counter_save(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, &((counter *)obj)->samples, sizeof(int64_t));
  return ACC_OK;
}

static acc_result counter_load(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return ACC_ERR_FORMAT;
  memcpy(&((counter *)obj)->samples, data, sizeof(int64_t));
  return ACC_OK;
}

typedef struct run {
  acc_accelerator *acc;
  acc_dataset *ds;
  acc_dataloader *dl;
  acc_model *m;
  acc_optimizer *opt;
  acc_scheduler *sched;
  float w[DIM], b[1], gw[DIM], gb[1];
  counter cnt;
} run;

static void setup(run *r, const char *cfg, int gas) {
  int fp16 = strcmp(cfg, "fp16") == 0 || strcmp(cfg, "fp16lp") == 0;
  int bf16 = strcmp(cfg, "bf16lp") == 0, groups = strcmp(cfg, "groups") == 0;
  low_precision = strcmp(cfg, "bf16lp") == 0 || strcmp(cfg, "fp16lp") == 0;
  memset(r, 0, sizeof *r);
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = gas;
  acc_grad_scaler_options so = ACC_GRAD_SCALER_OPTIONS_INIT;
  so.init_scale = 262144.0f; /* large enough to overflow f16 gradients: steps get skipped */
  so.growth_interval = 3;    /* and the scale grows back: the scaler state matters */
  if (fp16) {
    ao.mixed_precision = ACC_PRECISION_FP16;
    ao.scaler = &so;
  } else {
    ao.mixed_precision = bf16 ? ACC_PRECISION_BF16 : ACC_PRECISION_NO;
  }
  ao.low_precision_params = low_precision;
  REQUIRE_OK(acc_accelerator_create(&r->acc, &ao));
  acc_state *st = acc_accelerator_state(r->acc);
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  REQUIRE_OK(acc_accelerator_set_seed(r->acc, 1234, 1));
  acc_field_desc f[2] = {{ACC_F32, DIM}, {ACC_F32, 1}};
  REQUIRE_OK(acc_dataset_create_map(&r->ds, NSAMPLES, f, 2, fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = B;
  lo.shuffle = 1;
  lo.seed = 77;
  lo.prefetch = 1;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(r->acc, r->ds, &lo, &r->dl));
  for (int d = 0; d < DIM; d++) r->w[d] = 0.05f * (float)(d - 3);
  r->b[0] = 0.1f;
  REQUIRE_OK(acc_model_create(&r->m));
  int64_t sw[1] = {DIM}, sb[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(r->m, "linear.weight", r->w, r->gw, 1, sw));
  REQUIRE_OK(acc_model_add_parameter(r->m, "linear.bias", r->b, r->gb, 1, sb));
  REQUIRE_OK(acc_accelerator_prepare_model(r->acc, r->m));
  acc_adamw_options a = ACC_ADAMW_OPTIONS_INIT;
  a.lr = 0.05;
  if (groups) {
    const char *wn[] = {"linear.weight"}, *bn[] = {"linear.bias"};
    acc_param_group g[2] = {{wn, 1, -1.0, 0.02}, {bn, 1, 0.11, 0.0}};
    REQUIRE_OK(acc_optimizer_create_adamw_groups(&r->opt, r->m, g, 2, &a));
  } else {
    REQUIRE_OK(acc_optimizer_create_adamw(&r->opt, r->m, &a));
  }
  REQUIRE_OK(acc_accelerator_prepare_optimizer(r->acc, r->opt));
  acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
  sc.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  sc.num_warmup_steps = 6;
  sc.num_training_steps = 400;
  REQUIRE_OK(acc_scheduler_create(&r->sched, r->opt, &sc));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(r->acc, r->sched));
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(r->acc, &r->cnt, counter_save, counter_load));
}

static void teardown(run *r) {
  acc_dataloader_destroy(r->dl);
  acc_dataset_destroy(r->ds);
  acc_scheduler_destroy(r->sched);
  acc_optimizer_destroy(r->opt);
  acc_model_destroy(r->m);
  acc_accelerator_destroy(r->acc);
}

/* One batch: squared error with targets perturbed by the global RNG (per process). */
static void train_batch(run *r) {
  const acc_batch *bt = NULL;
  REQUIRE_OK(acc_accelerator_next_batch(r->acc, r->dl, &bt));
  if (!bt) REQUIRE_OK(acc_accelerator_next_batch(r->acc, r->dl, &bt)); /* next epoch */
  if (!bt) {
    fprintf(stderr, "empty epoch\n");
    exit(1);
  }
  REQUIRE_OK(acc_accelerator_accumulate(r->acc));
  const float *x = bt->fields[0], *y = bt->fields[1];
  float scale = acc_accelerator_backward_scale(r->acc);
  float w[DIM], b = r->b[0];
  memcpy(w, r->w, sizeof w);
  if (low_precision) { /* compute with the low-precision copy: weight then bias, registration order */
    const uint16_t *lp = acc_accelerator_low_precision_params(r->acc);
    if (!lp) {
      fprintf(stderr, "no low-precision copy\n");
      exit(1);
    }
    if (acc_accelerator_mixed_precision(r->acc) == ACC_PRECISION_BF16) {
      REQUIRE_OK(acc_bf16_to_f32(w, lp, DIM));
      REQUIRE_OK(acc_bf16_to_f32(&b, lp + DIM, 1));
    } else {
      REQUIRE_OK(acc_f16_to_f32(w, lp, DIM));
      REQUIRE_OK(acc_f16_to_f32(&b, lp + DIM, 1));
    }
  }
  for (int64_t i = 0; i < bt->size; i++) {
    float pred = b;
    for (int d = 0; d < DIM; d++) pred += w[d] * x[i * DIM + d];
    float target = y[i] + 0.05f * (float)acc_rng_normal(acc_rng_global());
    float g = (pred - target) * scale / (float)bt->size;
    for (int d = 0; d < DIM; d++) r->gw[d] += g * x[i * DIM + d];
    r->gb[0] += g;
  }
  r->cnt.samples += bt->size;
  REQUIRE_OK(acc_accelerator_backward(r->acc));
  REQUIRE_OK(acc_accelerator_clip_grad_norm(r->acc, 5.0f, 2.0, NULL));
  REQUIRE_OK(acc_accelerator_optimizer_step(r->acc, r->opt));
  REQUIRE_OK(acc_accelerator_scheduler_step(r->acc, r->sched));
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(r->acc, r->opt));
}

/* K batches, then on until an accumulation window closes (state is saved at sync points). */
static void train_to_sync(run *r, int k) {
  int n = 0;
  while (n < k || !acc_accelerator_sync_gradients(r->acc)) {
    train_batch(r);
    n++;
  }
}

static void dump(run *r, const char *dir, const char *mode) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s_r%d.bin", dir, mode, rank);
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fwrite(r->w, sizeof r->w, 1, f);
  fwrite(r->b, sizeof r->b, 1, f);
  for (size_t i = 0; i < acc_optimizer_state_count(r->opt); i++) {
    const float *data;
    size_t numel;
    REQUIRE_OK(acc_optimizer_state_get(r->opt, i, NULL, &data, &numel, NULL, NULL));
    fwrite(data, sizeof(float), numel, f);
  }
  for (size_t i = 0; i < acc_optimizer_scalar_count(r->opt); i++) {
    double v;
    REQUIRE_OK(acc_optimizer_scalar_get(r->opt, i, NULL, &v));
    fwrite(&v, sizeof v, 1, f);
  }
  for (size_t g = 0; g < acc_optimizer_group_count(r->opt); g++) {
    double glr = acc_optimizer_group_lr(r->opt, g), base = acc_scheduler_group_base_lr(r->sched, g);
    fwrite(&glr, sizeof glr, 1, f);
    fwrite(&base, sizeof base, 1, f);
  }
  double lr = acc_scheduler_get_last_lr(r->sched);
  int64_t sstep;
  double base;
  REQUIRE_OK(acc_scheduler_get_state(r->sched, &sstep, &base));
  fwrite(&lr, sizeof lr, 1, f);
  fwrite(&sstep, sizeof sstep, 1, f);
  acc_grad_scaler *gs = acc_accelerator_grad_scaler(r->acc);
  if (gs) {
    float scale;
    int64_t tracker;
    REQUIRE_OK(acc_grad_scaler_get_state(gs, &scale, &tracker));
    fwrite(&scale, sizeof scale, 1, f);
    fwrite(&tracker, sizeof tracker, 1, f);
  }
  int64_t step = acc_accelerator_step(r->acc);
  fwrite(&step, sizeof step, 1, f);
  acc_dataloader_state ls;
  REQUIRE_OK(acc_dataloader_state_get(r->dl, &ls));
  fwrite(&ls.epoch, sizeof ls.epoch, 1, f);
  fwrite(&ls.batches, sizeof ls.batches, 1, f);
  fwrite(&r->cnt.samples, sizeof r->cnt.samples, 1, f);
  for (int i = 0; i < 4; i++) {
    uint64_t u = acc_rng_u64(acc_rng_global());
    fwrite(&u, sizeof u, 1, f);
  }
  fclose(f);
}

static long read_file(const char *path, unsigned char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  long n = (long)fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s straight|save|resume|compare fp32|fp16|bf16lp|fp16lp|groups GAS DIR K M\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1], *dir = argv[4];
  int fp16 = strcmp(argv[2], "fp16") == 0 || strcmp(argv[2], "fp16lp") == 0, gas = atoi(argv[3]), k = atoi(argv[5]), m = atoi(argv[6]);
  acc_rng g;
  acc_rng_seed(&g, 5);
  for (int i = 0; i < NSAMPLES; i++) {
    float t = 0.3f;
    for (int d = 0; d < DIM; d++) {
      xs[i][d] = 2.0f * acc_rng_float(&g) - 1.0f;
      t += (float)(d + 1) * 0.25f * xs[i][d];
    }
    ys[i] = t;
  }
  char ckpt[1024];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  run r;
  setup(&r, argv[2], gas);
  if (strcmp(mode, "straight") == 0) {
    train_to_sync(&r, k);
    for (int i = 0; i < m; i++) train_batch(&r);
    dump(&r, dir, "straight");
  } else if (strcmp(mode, "save") == 0) {
    train_to_sync(&r, k);
    char *saved = NULL;
    CHECK_OK(acc_accelerator_save_state(r.acc, ckpt, &saved));
    CHECK(saved && strcmp(saved, ckpt) == 0, "saved into %s", saved ? saved : "(null)");
    acc_free(saved);
    CHECK(acc_checkpoint_is_complete(ckpt), "checkpoint is complete");
    if (fp16) {
      float scale;
      int64_t tracker;
      REQUIRE_OK(acc_grad_scaler_get_state(acc_accelerator_grad_scaler(r.acc), &scale, &tracker));
      CHECK(scale != 262144.0f, "the scaler moved before the save (scale %g)", (double)scale);
    }
    acc_dataloader_state ls;
    REQUIRE_OK(acc_dataloader_state_get(r.dl, &ls));
    CHECK(ls.batches > 0, "the save falls mid-epoch (epoch %lld, batch %lld)", (long long)ls.epoch,
          (long long)ls.batches);
  } else if (strcmp(mode, "resume") == 0) {
    char *loaded = NULL;
    REQUIRE_OK(acc_accelerator_load_state(r.acc, ckpt, &loaded));
    CHECK(loaded && strcmp(loaded, ckpt) == 0, "loaded %s", loaded ? loaded : "(null)");
    acc_free(loaded);
    /* the accumulation counter restarts at every epoch end, so it equals the batches of this epoch */
    acc_dataloader_state ls;
    REQUIRE_OK(acc_dataloader_state_get(r.dl, &ls));
    CHECK(ls.batches > 0 && acc_accelerator_step(r.acc) == ls.batches, "step %lld restored (batch %lld)",
          (long long)acc_accelerator_step(r.acc), (long long)ls.batches);
    for (int i = 0; i < m; i++) train_batch(&r);
    dump(&r, dir, "resume");
  } else if (strcmp(mode, "compare") == 0) {
    static unsigned char a[1 << 16], b[1 << 16];
    char pa[1100], pb[1100];
    snprintf(pa, sizeof pa, "%s/straight_r%d.bin", dir, rank);
    snprintf(pb, sizeof pb, "%s/resume_r%d.bin", dir, rank);
    long na = read_file(pa, a, sizeof a), nb = read_file(pb, b, sizeof b);
    CHECK(na > 0 && na == nb, "dump sizes %ld and %ld", na, nb);
    long first = -1;
    for (long i = 0; na > 0 && i < na && i < nb; i++)
      if (a[i] != b[i]) {
        first = i;
        break;
      }
    CHECK(first < 0, "straight and resumed runs differ from byte %ld on", first);
    /* and the run really trained: the weights moved away from their start */
    float w0;
    memcpy(&w0, a, sizeof w0);
    CHECK(na > 0 && w0 != -0.15f, "weights trained (w[0] = %g)", (double)w0);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  teardown(&r);
  return acc_test_finish(mode);
}
