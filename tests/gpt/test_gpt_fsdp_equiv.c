/* The GPT example under FSDP against NO_SHARD (the equivalence list, docs/fsdp.md), through
 * the real launcher on the example's text, N processes, 50 optimizer steps (accumulation of 2,
 * clipping, weight decay on the matrices, the cosine schedule; width 21 pads every block's shards):
 *
 *   test_gpt_fsdp_equiv <accelerate> <gpt> <N> fp32|bf16|fp16
 *
 *  - fp32: FULL_SHARD and SHARD_GRAD_OP end with parameters within 1e-5 of the largest parameter of
 *    NO_SHARD's (each run's FULL_STATE_DICT `model.safetensors` at step 50), and validation losses
 *    within 2e-4 at every evaluation;
 *  - bf16: the same with the example's parameters as a bf16 table (--param-dtype bf16: the units
 *    gathered as bf16 over float32 master shards, gradients added in bf16 and reduced in float32)
 *    and bf16 autocast, against NO_SHARD of the same table; the bf16 table's parameters are far from
 *    those of a float32 table under bf16 autocast (so the table is really bf16: 1e-5 could not tell
 *    otherwise);
 *  - fp16: --mixed-precision fp16 under FSDP (an fp16 table, the accelerator's loss scaler over the
 *    shards: acc_fsdp_unscale_gradients / acc_fsdp_optimizer_step): FULL_SHARD and SHARD_GRAD_OP
 *    against NO_SHARD fp16: validation losses within 2e-4, parameters within 1e-5 of the largest,
 *    the same number of skipped (overflow) steps and the same final loss scale; the scaler did
 *    work (steps skipped: the runs start at a scale of 2^24 that overflows fp16 gradients, and grow
 *    it every 8 good steps);
 *  - bf16 and fp16: a FULL_SHARD run resumed from its checkpoint of step 25 (shards, AdamW state, the
 *    loss scaler's state) ends bit for bit as the uninterrupted run.
 *
 *   test_gpt_fsdp_equiv compare A.safetensors B.safetensors REL
 *
 * (for tests/gpt/gpt_hybrid_netns.sh): exit 0 when every tensor of B is within REL x the largest
 * parameter of A of A's, printing the difference. */
#include <math.h>

#include "acc_test.h"
#include "launch/launch_util.h"

static const char *launcher, *gpt_bin, *nprocs;
static double timeout_s = 150;
static const char *const run_env[] = {"ACCELERATE_USE_FSDP", "FSDP_SHARDING_STRATEGY", "FSDP_STATE_DICT_TYPE",
                                      "ACCELERATE_MIXED_PRECISION", NULL};
enum { STEPS = 50 };

static void run_gpt(run_out *r, const char *strategy, const char *out_dir, const char *const *extra) {
  const char *argv[64] = {launcher, "launch", "--num_processes", nprocs, "--use_fsdp", "--fsdp_sharding_strategy",
                          strategy, "--fsdp_state_dict_type", "FULL_STATE_DICT"};
  int n = 9;
  const char *rest[] = {gpt_bin, "--layers", "2", "--heads", "3", "--width", "21", "--context", "32", "--batch", "4",
                        "--grad-accum", "2", "--max-steps", "50", "--warmup", "5", "--lr", "3e-3", "--val-windows",
                        "32", "--eval-every", "10", "--sample-bytes", "0", "--log-every", "10", "--prefetch", "0",
                        "--seed", "7", "--save-every", "25", "--output-dir", out_dir, NULL};
  for (int i = 0; rest[i]; i++) argv[n++] = rest[i];
  for (int i = 0; extra && extra[i] && n < 63; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  double t0 = lu_now();
  pid_t p = lu_start((char *const *)argv, run_env);
  lu_finish(p, t0, timeout_s, r);
  if (r->status != 0) fprintf(stderr, "gpt (%s) exited %d:\n%s\n%s\n", strategy, r->status, r->out, r->err);
}

static double val_loss(const char *out, int step) {
  char key[64];
  snprintf(key, sizeof key, "step %d: validation loss ", step);
  const char *p = strstr(out, key);
  return p ? atof(p + strlen(key)) : NAN;
}

/* Largest absolute difference between the tensors of two safetensors files (-1: they differ in
 * their tensors, or a file cannot be read); *largest gets the largest absolute value in the first. */
static double file_diff(const char *pa, const char *pb, double *largest) {
  acc_safetensors *a = NULL, *b = NULL;
  double worst = -1;
  if (acc_safetensors_open(&a, pa) != ACC_OK || acc_safetensors_open(&b, pb) != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    goto out;
  }
  worst = acc_safetensors_count(a) == acc_safetensors_count(b) && acc_safetensors_count(a) > 0 ? 0 : -1;
  for (size_t i = 0; i < acc_safetensors_count(a) && worst >= 0; i++) {
    acc_tensor_view ta, tb;
    if (acc_safetensors_tensor(a, i, &ta) != ACC_OK || acc_safetensors_find(b, ta.name, &tb) != ACC_OK ||
        ta.nbytes != tb.nbytes || ta.dtype != ACC_F32 || tb.dtype != ACC_F32) {
      worst = -1;
      break;
    }
    const float *x = ta.data, *y = tb.data;
    for (size_t k = 0; k < ta.nbytes / sizeof(float); k++) {
      worst = fmax(worst, fabs((double)x[k] - (double)y[k]));
      if (isnan(x[k]) || isnan(y[k])) worst = INFINITY;
      *largest = fmax(*largest, fabs((double)x[k]));
    }
  }
out:
  acc_safetensors_close(a);
  acc_safetensors_close(b);
  return worst;
}

static void model_path(char *buf, size_t cap, const char *dir) {
  /* the FULL_STATE_DICT the save_state pre-hook wrote at step 50 (the second checkpoint) */
  snprintf(buf, cap, "%s/checkpoints/checkpoint_1/fsdp/model.safetensors", dir);
}

static const char *after(const char *out, const char *key) {
  const char *p = strstr(out, key);
  return p ? p + strlen(key) : "";
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "compare")) {
    double largest = 0, d = file_diff(argv[2], argv[3], &largest), rel = atof(argv[4]);
    printf("parameters: largest difference %.3g (largest parameter %.3g, bound %.3g)\n", d, largest, rel * largest);
    return d >= 0 && d <= rel * largest ? 0 : 1;
  }
  if (argc != 5) {
    fprintf(stderr, "usage: test_gpt_fsdp_equiv <accelerate> <gpt> <N> fp32|bf16|fp16\n"
                    "       test_gpt_fsdp_equiv compare A.safetensors B.safetensors REL\n");
    return 2;
  }
  launcher = argv[1];
  gpt_bin = argv[2];
  nprocs = argv[3];
  const char *mode = argv[4];
  const int bf16 = !strcmp(mode, "bf16"), fp16 = !strcmp(mode, "fp16");
  if (!bf16 && !fp16 && strcmp(mode, "fp32")) {
    fprintf(stderr, "test_gpt_fsdp_equiv: mode '%s': expected fp32, bf16 or fp16\n", mode);
    return 2;
  }
  const char *mult = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  if (mult && atof(mult) > 1) timeout_s *= atof(mult);
  char root[256];
  lu_make_dir(root, sizeof root);
  REQUIRE_OK(root[0] ? ACC_OK : ACC_ERR_IO);
  static const char *const x_fp32[] = {"--mixed-precision", "no", NULL};
  static const char *const x_bf16[] = {"--mixed-precision", "bf16", "--param-dtype", "bf16", NULL};
  /* fp16: an initial scale of 2^24 overflows the fp16 gradients (skipped steps, the scale backed
   * off), and a growth interval of 8 grows it back into overflow now and then */
  static const char *const x_fp16[] = {"--mixed-precision", "fp16", "--init-scale", "16777216", "--growth-interval",
                                       "8", NULL};
  const char *const *extra = bf16 ? x_bf16 : fp16 ? x_fp16 : x_fp32;

  run_out *base = malloc(sizeof *base), *r = malloc(sizeof *r), *full = malloc(sizeof *full);
  char bdir[512], want[1200], path[1200];
  snprintf(bdir, sizeof bdir, "%s/NO_SHARD", root);
  run_gpt(base, "NO_SHARD", bdir, extra);
  REQUIRE_OK(base->status == 0 ? ACC_OK : ACC_ERR_INTERNAL);
  model_path(want, sizeof want, bdir);
  CHECK(val_loss(base->out, STEPS) < val_loss(base->out, 0) - 0.3, "the NO_SHARD run learns: %s", base->out);
  if (bf16)
    CHECK(strstr(base->out, "fsdp: parameters gathered as bf16 over float32 master shards"), "bf16 table: %s",
          base->out);
  if (fp16) {
    CHECK(strstr(base->out, "fsdp: parameters gathered as fp16"), "fp16 table: %s", base->out);
    /* the scaler works: the first steps at 2^24 overflow the fp16 gradients and are skipped */
    CHECK(atol(after(base->out, "fp16: ")) >= 1, "fp16: no step was skipped at the initial scale: %s", base->out);
  }
  if (bf16) {
    /* the same NO_SHARD run over a float32 table with bf16 autocast only: the bf16 table changes the
     * result (its norms, biases and embeddings are bf16 values, its gradients added in bf16; else
     * 1e-5 would tell nothing about it; measured 3.4e-3 of the largest parameter) */
    static const char *const x_autocast[] = {"--mixed-precision", "bf16", NULL};
    char fdir[600], fpath[1200];
    snprintf(fdir, sizeof fdir, "%s/NO_SHARD_autocast", root);
    run_gpt(r, "NO_SHARD", fdir, x_autocast);
    model_path(fpath, sizeof fpath, fdir);
    double largest = 0, d = r->status == 0 ? file_diff(want, fpath, &largest) : -1;
    printf("NO_SHARD bf16 table against a float32 table with bf16 autocast: parameters at step %d differ by %.3g "
           "(largest %.3g)\n", STEPS, d, largest);
    CHECK(d > 1e-3 * largest, "the bf16 table's parameters are within %.3g of the float32 table's: the table is not "
          "bf16", d);
  }

  static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP"};
  for (int s = 0; s < 2; s++) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", root, strategies[s]);
    run_gpt(r, strategies[s], dir, extra);
    CHECK(r->status == 0, "%s %s on %s processes", strategies[s], mode, nprocs);
    if (s == 0) *full = *r; /* FULL_SHARD's output, for the resumed run below */
    if (r->status != 0) continue;
    char line[96];
    snprintf(line, sizeof line, "fsdp: %s, 4 units (embed, 2 blocks, ln_f)", strategies[s]);
    CHECK(strstr(r->out, line), "%s: %s", strategies[s], r->out);
    for (int step = 0; step <= STEPS; step += 10) {
      double ref = val_loss(base->out, step), got = val_loss(r->out, step);
      printf("%-13s %s np%s step %2d: validation loss %.4f (NO_SHARD %.4f)\n", strategies[s], mode, nprocs, step, got,
             ref);
      CHECK(fabs(got - ref) <= 2e-4, "%s %s: validation loss at step %d is %.4f, NO_SHARD %.4f", strategies[s], mode,
            step, got, ref);
    }
    if (fp16) {
      char a[128], b[128];
      snprintf(a, sizeof a, "%.100s", after(base->out, "fp16: "));
      snprintf(b, sizeof b, "%.100s", after(r->out, "fp16: "));
      printf("%-13s fp16: %s (NO_SHARD: %s)\n", strategies[s], strtok(b, "\n"), strtok(a, "\n"));
      CHECK(!strcmp(a, b), "%s fp16: skipped steps and loss scale '%s', NO_SHARD '%s'", strategies[s], b, a);
    }
    model_path(path, sizeof path, dir);
    double largest = 0, d = file_diff(want, path, &largest);
    printf("%-13s %s np%s parameters at step %d: largest difference %.3g (largest parameter %.3g)\n", strategies[s],
           mode, nprocs, STEPS, d, largest);
    CHECK(d >= 0 && d <= 1e-5 * largest, "%s %s: parameters differ from NO_SHARD's by %.3g (largest %.3g)",
          strategies[s], mode, d, largest);
  }

  /* bf16 / fp16: FULL_SHARD resumed from its checkpoint of step 25 (the shards, the AdamW state and,
   * for fp16, the loss scaler's state) ends bit for bit as the uninterrupted run */
  char cmd[2048];
  if (bf16 || fp16) {
    char a[600], c[600], pa[1200], pc[1200];
    snprintf(a, sizeof a, "%s/FULL_SHARD", root);
    snprintf(c, sizeof c, "%s/FULL_SHARD_resumed", root);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && rm -rf '%s/checkpoints/checkpoint_1'", a, c, c);
    CHECK(system(cmd) == 0, "%s", cmd);
    const char *const *x = extra;
    const char *xr[16];
    int n = 0;
    while (x[n] && n < 14) xr[n] = x[n], n++;
    xr[n++] = "--resume";
    xr[n] = NULL;
    const run_out *u = full;
    run_gpt(r, "FULL_SHARD", c, xr);
    CHECK(r->status == 0 && strstr(r->out, "at step 25"), "%s resume: %s %s", mode, r->out, r->err);
    model_path(pa, sizeof pa, a);
    model_path(pc, sizeof pc, c);
    double largest = 0, d = r->status == 0 ? file_diff(pa, pc, &largest) : -1;
    printf("FULL_SHARD    %s np%s resumed at step 25: parameters at step %d differ by %.3g from the uninterrupted "
           "run's\n", mode, nprocs, STEPS, d);
    CHECK(d == 0.0, "%s: FULL_SHARD resumed from step 25 ends %.3g from the uninterrupted run", mode, d);
    CHECK(val_loss(r->out, STEPS) == val_loss(u->out, STEPS), "%s resumed: validation loss %.4f, uninterrupted %.4f",
          mode, val_loss(r->out, STEPS), val_loss(u->out, STEPS));
    if (fp16) {
      const char *sa = strstr(u->out, "loss scale "), *sc = strstr(r->out, "loss scale ");
      CHECK(sa && sc && atof(sa + 11) == atof(sc + 11), "fp16 resumed: loss scale %s, uninterrupted %s",
            sc ? sc + 11 : "?", sa ? sa + 11 : "?");
    }
  }

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK(system(cmd) == 0, "%s", cmd);
  free(base);
  free(r);
  free(full);
  char name[64];
  snprintf(name, sizeof name, "gpt_fsdp_equiv_%s_np%s", mode, nprocs);
  return acc_test_finish(name);
}
