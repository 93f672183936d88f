/* Elastic resume: a checkpoint saved by 4 processes mid-epoch, resumed on 2 or 3 processes
 * (and one saved by 2, resumed on 3)
 * (each stage a separate `accelerate launch`), continues at the same global sample of the same
 * shuffled epoch order: every sample of the epoch is seen exactly once over the save and the
 * resumed run (or, when the position is not on a batch boundary of the new layout, exactly the
 * documented number of samples twice), the model and the scheduler continue where they were,
 * and process 0 logs one line of what changed.
 * A linear model, SGD, a linear-decay scheduler, a 96-sample map dataset with shuffle on; each
 * sample carries its index as a field, so the samples a process trains on are recorded exactly.
 * Usage: test_state_elastic straight|save|resume <dir> <split 0|1> <batch_size> [K | expect_twice]
 *   straight: a full epoch, writes <dir>/straight.txt ("position lr loss" before every step)
 *   save:     K steps, records the samples seen, save_state into <dir>/ckpt
 *   resume:   load_state, the rest of the epoch; process 0 checks coverage (expect_twice samples
 *             seen twice, the others once), the loss and lr against straight.txt, and the log.
 * Regression for the Accelerate-parity item "elastic resume" (load_state refused another number
 * of processes). */
#include <math.h>
#include <unistd.h>

#include "acc_test.h"

#define NSAMPLES 96
#define DIM 6

static float xs[NSAMPLES][DIM], ys[NSAMPLES];
static int rank, nprocs;

static int fetch(int64_t i, void *const *fields, void *payload) {
  (void)payload;
  memcpy(fields[0], xs[i], sizeof xs[i]);
  memcpy(fields[1], &ys[i], sizeof(float));
  float idx = (float)i;
  memcpy(fields[2], &idx, sizeof idx);
  return 0;
}

typedef struct run {
  acc_accelerator *acc;
  acc_dataset *ds;
  acc_dataloader *dl;
  acc_model *m;
  acc_optimizer *opt;
  acc_scheduler *sched;
  float w[DIM], b[1], gw[DIM], gb[1];
  int split;
  int64_t bs;
} run;

static void setup(run *r, int split, int64_t bs) {
  memset(r, 0, sizeof *r);
  r->split = split;
  r->bs = bs;
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.split_batches = split;
  REQUIRE_OK(acc_accelerator_create(&r->acc, &ao));
  acc_state *st = acc_accelerator_state(r->acc);
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  REQUIRE_OK(acc_accelerator_set_seed(r->acc, 99, 1));
  acc_field_desc f[3] = {{ACC_F32, DIM}, {ACC_F32, 1}, {ACC_F32, 1}};
  REQUIRE_OK(acc_dataset_create_map(&r->ds, NSAMPLES, f, 3, fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = bs;
  lo.shuffle = 1;
  lo.seed = 31;
  lo.prefetch = 1;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(r->acc, r->ds, &lo, &r->dl));
  for (int d = 0; d < DIM; d++) r->w[d] = 0.1f * (float)(d - 2);
  r->b[0] = -0.2f;
  REQUIRE_OK(acc_model_create(&r->m));
  int64_t sw[1] = {DIM}, sb[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(r->m, "linear.weight", r->w, r->gw, 1, sw));
  REQUIRE_OK(acc_model_add_parameter(r->m, "linear.bias", r->b, r->gb, 1, sb));
  REQUIRE_OK(acc_accelerator_prepare_model(r->acc, r->m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.05;
  REQUIRE_OK(acc_optimizer_create_sgd(&r->opt, r->m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(r->acc, r->opt));
  acc_scheduler_options sc = ACC_SCHEDULER_OPTIONS_INIT;
  sc.kind = ACC_SCHEDULER_LINEAR_WITH_WARMUP;
  sc.num_warmup_steps = 0;
  /* the accelerator steps it num_processes times per optimizer step (once with split_batches):
   * 48 (12) steps per epoch; decaying over 60 (15) keeps the lr above 0 */
  sc.num_training_steps = split ? 15 : 60;
  REQUIRE_OK(acc_scheduler_create(&r->sched, r->opt, &sc));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(r->acc, r->sched));
}

static void teardown(run *r) {
  acc_dataloader_destroy(r->dl);
  acc_dataset_destroy(r->ds);
  acc_scheduler_destroy(r->sched);
  acc_optimizer_destroy(r->opt);
  acc_model_destroy(r->m);
  acc_accelerator_destroy(r->acc);
}

/* Mean squared error over the whole data set (the model is replicated: the same everywhere). */
static double eval_loss(const run *r) {
  double s = 0;
  for (int i = 0; i < NSAMPLES; i++) {
    double p = r->b[0];
    for (int d = 0; d < DIM; d++) p += (double)r->w[d] * xs[i][d];
    s += (p - ys[i]) * (p - ys[i]);
  }
  return s / NSAMPLES;
}

/* One step; appends the sample indices trained on to seen. 0 at the end of the epoch. */
static int train_step(run *r, FILE *seen) {
  const acc_batch *bt = NULL;
  REQUIRE_OK(acc_accelerator_next_batch(r->acc, r->dl, &bt));
  if (!bt) return 0;
  const float *x = bt->fields[0], *y = bt->fields[1], *ix = bt->fields[2];
  for (int64_t i = 0; i < bt->size; i++) {
    float pred = r->b[0];
    for (int d = 0; d < DIM; d++) pred += r->w[d] * x[i * DIM + d];
    float g = 2.0f * (pred - y[i]) / (float)bt->size;
    for (int d = 0; d < DIM; d++) r->gw[d] += g * x[i * DIM + d];
    r->gb[0] += g;
    if (seen) fprintf(seen, "%d\n", (int)ix[i]);
  }
  REQUIRE_OK(acc_accelerator_backward(r->acc));
  REQUIRE_OK(acc_accelerator_optimizer_step(r->acc, r->opt));
  REQUIRE_OK(acc_accelerator_scheduler_step(r->acc, r->sched));
  REQUIRE_OK(acc_accelerator_optimizer_zero_grad(r->acc, r->opt));
  return 1;
}

static FILE *open_file(const char *dir, const char *name, int r, const char *how) {
  char path[1024];
  if (r >= 0)
    snprintf(path, sizeof path, "%s/%s_r%d.txt", dir, name, r);
  else
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
  FILE *f = fopen(path, how);
  if (!f && how[0] == 'w') {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  return f;
}

/* Samples one optimizer step consumes over all processes. */
static int64_t global_batch(const run *r) {
  return r->split ? r->bs : r->bs * nprocs;
}

/* Counts the samples listed in <dir>/<name>_r<p>.txt for p < n into count. */
static void count_seen(const char *dir, const char *name, int n, int *count) {
  for (int p = 0; p < n; p++) {
    FILE *f = open_file(dir, name, p, "r");
    CHECK(f != NULL, "%s/%s_r%d.txt exists", dir, name, p);
    if (!f) continue;
    int i;
    while (fscanf(f, "%d", &i) == 1) {
      CHECK(i >= 0 && i < NSAMPLES, "sample index %d in range", i);
      if (i >= 0 && i < NSAMPLES) count[i]++;
    }
    fclose(f);
  }
}

typedef struct point {
  long long pos;
  double lr, loss;
} point;

static int read_points(const char *dir, const char *name, point *v, int cap) {
  FILE *f = open_file(dir, name, -1, "r");
  CHECK(f != NULL, "%s/%s.txt exists", dir, name);
  if (!f) return 0;
  int n = 0;
  while (n < cap && fscanf(f, "%lld %lf %lf", &v[n].pos, &v[n].lr, &v[n].loss) == 3) n++;
  fclose(f);
  return n;
}

static int rel_close(double a, double b, double tol) {
  return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)) + 1e-12;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s straight|save|resume DIR SPLIT BATCH_SIZE K|EXPECT_TWICE\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1], *dir = argv[2];
  int split = atoi(argv[3]), arg = atoi(argv[5]);
  int64_t bs = atoll(argv[4]);
  acc_rng g;
  acc_rng_seed(&g, 11);
  for (int i = 0; i < NSAMPLES; i++) {
    float t = 0.5f;
    for (int d = 0; d < DIM; d++) {
      xs[i][d] = 2.0f * acc_rng_float(&g) - 1.0f;
      t += (float)(d + 1) * 0.3f * xs[i][d];
    }
    ys[i] = t;
  }
  char ckpt[1024];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  run r;
  setup(&r, split, bs);
  if (strcmp(mode, "straight") == 0) {
    FILE *out = rank == 0 ? open_file(dir, "straight", -1, "w") : NULL;
    long long pos = 0;
    for (;;) {
      if (out) fprintf(out, "%lld %.17g %.17g\n", pos, acc_optimizer_get_lr(r.opt), eval_loss(&r));
      if (!train_step(&r, NULL)) break;
      pos += global_batch(&r);
    }
    CHECK(pos == NSAMPLES, "the epoch has %d samples (trained on %lld)", NSAMPLES, pos);
    if (out) fclose(out);
  } else if (strcmp(mode, "save") == 0) {
    FILE *seen = open_file(dir, "seen_save", rank, "w");
    for (int k = 0; k < arg; k++) CHECK(train_step(&r, seen), "step %d is in the first epoch", k);
    fclose(seen);
    CHECK_OK(acc_accelerator_save_state(r.acc, ckpt, NULL));
    /* the next number of this process's generator, which a resume must reproduce on process
     * rank when it has the saved state */
    FILE *f = open_file(dir, "rng_save", rank, "w");
    fprintf(f, "%llu\n", (unsigned long long)acc_rng_u64(acc_rng_global()));
    fclose(f);
    if (rank == 0) {
      f = open_file(dir, "saved_np", -1, "w");
      fprintf(f, "%d\n", nprocs);
      fclose(f);
    }
  } else if (strcmp(mode, "resume") == 0) {
    /* process 0's log goes to a file: the line of what changed is checked below */
    char logpath[1100];
    snprintf(logpath, sizeof logpath, "%s/resume_log_np%d.txt", dir, nprocs);
    int saved_err = -1;
    if (rank == 0) {
      fflush(stderr);
      saved_err = dup(2);
      FILE *lf = fopen(logpath, "w");
      REQUIRE_OK(lf ? ACC_OK : ACC_ERR_IO);
      dup2(fileno(lf), 2);
      fclose(lf);
    }
    acc_result lrc = acc_accelerator_load_state(r.acc, ckpt, NULL);
    if (rank == 0) {
      fflush(stderr);
      dup2(saved_err, 2);
      close(saved_err);
    }
    REQUIRE_OK(lrc);
    char name[64];
    snprintf(name, sizeof name, "rng_resume_np%d", nprocs);
    FILE *rf = open_file(dir, name, rank, "w");
    acc_rng keep = *acc_rng_global(); /* the training below does not use it; keep it as loaded */
    fprintf(rf, "%llu\n", (unsigned long long)acc_rng_u64(&keep));
    fclose(rf);
    int saved_np = 0;
    FILE *nf = open_file(dir, "saved_np", -1, "r");
    CHECK(nf && fscanf(nf, "%d", &saved_np) == 1 && saved_np > 0, "saved_np.txt holds the saving processes");
    if (nf) fclose(nf);
    acc_dataloader_state ls;
    REQUIRE_OK(acc_dataloader_state_get(r.dl, &ls));
    long long pos = (long long)ls.batches * global_batch(&r);
    snprintf(name, sizeof name, "seen_resume_np%d", nprocs);
    FILE *seen = open_file(dir, name, rank, "w");
    snprintf(name, sizeof name, "resume_np%d", nprocs);
    FILE *out = rank == 0 ? open_file(dir, name, -1, "w") : NULL;
    for (;;) {
      if (out) fprintf(out, "%lld %.17g %.17g\n", pos, acc_optimizer_get_lr(r.opt), eval_loss(&r));
      if (!train_step(&r, seen)) break;
      pos += global_batch(&r);
    }
    fclose(seen);
    if (out) fclose(out);
    REQUIRE_OK(acc_barrier(acc_accelerator_state(r.acc))); /* every process's list is written */
    if (rank == 0) {
      /* 1. coverage: save + resume see every sample once, expect_twice of them twice */
      int count[NSAMPLES] = {0}, twice = 0, bad = 0;
      count_seen(dir, "seen_save", saved_np, count);
      snprintf(name, sizeof name, "seen_resume_np%d", nprocs);
      count_seen(dir, name, nprocs, count);
      for (int i = 0; i < NSAMPLES; i++) {
        if (count[i] == 2) twice++;
        if (count[i] < 1 || count[i] > 2) {
          if (bad++ < 5) CHECK(0, "sample %d seen %d times over the save and the resume", i, count[i]);
        }
      }
      CHECK(bad == 0 && twice == arg, "every sample seen once, %d of them twice (expected %d twice)", twice, arg);
      /* 2. the model and the schedule continue: the straight 4-process run at the same global
       * sample has the same lr; the same loss right after the load; with the same global
       * batch (split_batches) the same loss at every later step too, up to float rounding */
      point st[200], rs[200];
      int ns = read_points(dir, "straight", st, 200);
      snprintf(name, sizeof name, "resume_np%d", nprocs);
      int nr = read_points(dir, name, rs, 200);
      CHECK(ns > 0 && nr > 1 && rs[nr - 1].pos == NSAMPLES, "the resumed run ends the epoch (%d points)", nr);
      int matched = 0;
      for (int j = 0; j < nr; j++) {
        for (int i = 0; i < ns; i++) {
          if (st[i].pos != rs[j].pos) continue;
          matched++;
          /* (samples trained a second time count as scheduler steps: then the schedule is ahead) */
          if (arg == 0)
            CHECK(rel_close(st[i].lr, rs[j].lr, 1e-9), "lr at sample %lld: straight %.10g, resumed %.10g",
                  rs[j].pos, st[i].lr, rs[j].lr);
          if (j == 0 || split)
            CHECK(rel_close(st[i].loss, rs[j].loss, j == 0 ? 1e-9 : 1e-4),
                  "loss at sample %lld: straight %.10g, resumed %.10g", rs[j].pos, st[i].loss, rs[j].loss);
        }
      }
      CHECK(matched >= 2, "%d positions in common with the straight run", matched);
      CHECK(nr > 1 && rs[nr - 1].loss < 0.8 * rs[0].loss, "the loss keeps falling after the resume (%g -> %g)",
            nr ? rs[0].loss : 0.0, nr ? rs[nr - 1].loss : 0.0);
      /* 3. one line says what changed */
      FILE *lf = fopen(logpath, "r");
      char text[8192] = "";
      size_t n = lf ? fread(text, 1, sizeof text - 1, lf) : 0;
      if (lf) fclose(lf);
      text[n] = 0;
      char want[1200];
      snprintf(want, sizeof want, "resumed a %d-process checkpoint '%s' on %d processes", saved_np, ckpt, nprocs);
      CHECK(strstr(text, want) != NULL, "the log says \"%s\": %s", want, text);
      CHECK(strstr(text, nprocs < saved_np ? "dropped" : "derived from process 0") != NULL,
            "the log says what became of the RNG states: %s", text);
      /* 4. RNG: process p < saved continues its own saved generator; the others get their own
       * generators, different from every other process's */
      unsigned long long saved_v[64] = {0}, now_v[64] = {0};
      for (int p = 0; p < saved_np && p < 64; p++) {
        FILE *f = open_file(dir, "rng_save", p, "r");
        CHECK(f && fscanf(f, "%llu", &saved_v[p]) == 1, "rng_save_r%d.txt", p);
        if (f) fclose(f);
      }
      for (int p = 0; p < nprocs && p < 64; p++) {
        snprintf(name, sizeof name, "rng_resume_np%d", nprocs);
        FILE *f = open_file(dir, name, p, "r");
        CHECK(f && fscanf(f, "%llu", &now_v[p]) == 1, "%s_r%d.txt", name, p);
        if (f) fclose(f);
      }
      for (int p = 0; p < nprocs && p < 64; p++) {
        if (p < saved_np)
          CHECK(now_v[p] == saved_v[p], "process %d continues its saved generator (%llu vs %llu)", p, now_v[p],
                saved_v[p]);
        for (int q = 0; q < p; q++) CHECK(now_v[p] != now_v[q], "processes %d and %d have different generators", q, p);
      }
      CHECK((strstr(text, "are read again") != NULL) == (arg > 0),
            "the log %s the samples seen twice: %s", arg > 0 ? "names" : "does not mention", text);
      /* batches are named per process once, in plain words (issue 32) */
      CHECK(acc_test_count(text, "per process") == 1, "\"per process\" once in the log line: %s", text);
    }
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  teardown(&r);
  return acc_test_finish(mode);
}
