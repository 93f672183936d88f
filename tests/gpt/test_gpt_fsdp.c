/* The GPT example under FSDP (docs/fsdp.md), through the real launcher, on the text the example
 * trains on by default (the Jargon File of scripts/deps.sh), 2 processes:
 *  - `accelerate launch --use_fsdp --fsdp_sharding_strategy FULL_SHARD` (and SHARD_GRAD_OP,
 *    NO_SHARD) trains with validation losses within 2e-4 of the unsharded run's at every
 *    evaluation (same seed, same data, 30 steps with accumulation, clipping, weight decay on the
 *    matrices and the cosine schedule); a width of 21 pads every block's shards;
 *  - the parameters after 30 steps match the unsharded run's to 1e-5 of the largest one: the
 *    FULL_SHARD run's sharded checkpoint merged by `accelerate merge-weights`, SHARD_GRAD_OP's
 *    FULL_STATE_DICT checkpoint and NO_SHARD's, against the unsharded run's model.safetensors;
 *  - the units are the example's (embedding, each block, ln_f) and each process holds half the
 *    parameters; the library's accounting is printed (GPT_MEMORY_REPORT);
 *  - a FULL_SHARD run resumed from its sharded checkpoint of step 20 ends as the uninterrupted run:
 *    the same validation loss and bit-identical shards (weights and AdamW state) at step 30;
 *  - --mixed-precision bf16 with --use_fsdp is refused with a sentence.
 * Usage: test_gpt_fsdp <accelerate> <gpt> */
#include <math.h>

#include "acc_test.h"
#include "launch/launch_util.h"

static const char *launcher, *gpt_bin;
static double timeout_s = 120;
static const char *const run_env[] = {"ACCELERATE_USE_FSDP", "FSDP_SHARDING_STRATEGY", "GPT_MEMORY_REPORT=1", NULL};

/* strategy NULL: the unsharded run. */
static void run_gpt(run_out *r, const char *strategy, const char *sdt, const char *out_dir, const char *extra1,
                    const char *extra2) {
  const char *argv[64] = {launcher, "launch", "--num_processes", "2"};
  int n = 4;
  if (strategy) {
    argv[n++] = "--use_fsdp";
    argv[n++] = "--fsdp_sharding_strategy";
    argv[n++] = strategy;
  }
  if (sdt) {
    argv[n++] = "--fsdp_state_dict_type";
    argv[n++] = sdt;
  }
  const char *rest[] = {gpt_bin, "--layers", "2", "--heads", "3", "--width", "21", "--context", "32", "--batch", "4",
                        "--grad-accum", "2", "--max-steps", "30", "--warmup", "5", "--lr", "3e-3", "--val-windows",
                        "32", "--eval-every", "10", "--sample-bytes", "20", "--log-every", "10", "--prefetch", "0",
                        "--seed", "7", NULL};
  for (int i = 0; rest[i]; i++) argv[n++] = rest[i];
  if (out_dir) {
    argv[n++] = "--output-dir";
    argv[n++] = out_dir;
    argv[n++] = "--save-every";
    argv[n++] = "10";
  }
  if (extra1) argv[n++] = extra1;
  if (extra2) argv[n++] = extra2;
  argv[n] = NULL;
  double t0 = lu_now();
  pid_t p = lu_start((char *const *)argv, run_env);
  lu_finish(p, t0, timeout_s, r);
  if (r->status != 0)
    fprintf(stderr, "gpt (%s) exited %d:\n%s\n%s\n", strategy ? strategy : "unsharded", r->status, r->out, r->err);
}

static double val_loss(const char *out, int step) {
  char key[64];
  snprintf(key, sizeof key, "step %d: validation loss ", step);
  const char *p = strstr(out, key);
  return p ? atof(p + strlen(key)) : NAN;
}

/* Largest absolute difference between the tensors of two safetensors files (-1: they differ in
 * their tensors); *largest (optional) gets the largest absolute value in the first. */
static double file_diff(const char *pa, const char *pb, double *largest) {
  acc_safetensors *a, *b;
  REQUIRE_OK(acc_safetensors_open(&a, pa));
  REQUIRE_OK(acc_safetensors_open(&b, pb));
  double worst = acc_safetensors_count(a) == acc_safetensors_count(b) && acc_safetensors_count(a) > 0 ? 0 : -1;
  for (size_t i = 0; i < acc_safetensors_count(a) && worst >= 0; i++) {
    acc_tensor_view ta, tb;
    REQUIRE_OK(acc_safetensors_tensor(a, i, &ta));
    if (acc_safetensors_find(b, ta.name, &tb) != ACC_OK || ta.nbytes != tb.nbytes || ta.dtype != ACC_F32) {
      worst = -1;
      break;
    }
    const float *x = ta.data, *y = tb.data;
    for (size_t k = 0; k < ta.nbytes / sizeof(float); k++) {
      worst = fmax(worst, fabs((double)x[k] - (double)y[k]));
      if (largest) *largest = fmax(*largest, fabs((double)x[k]));
    }
  }
  acc_safetensors_close(a);
  acc_safetensors_close(b);
  return worst;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_gpt_fsdp <accelerate> <gpt>\n");
    return 2;
  }
  launcher = argv[1];
  gpt_bin = argv[2];
  const char *mult = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  if (mult && atof(mult) > 1) timeout_s *= atof(mult);
  char root[256];
  lu_make_dir(root, sizeof root);
  REQUIRE_OK(root[0] ? ACC_OK : ACC_ERR_IO);

  run_out *base = malloc(sizeof *base), *r = malloc(sizeof *r);
  char bdir[512], sdir[3][512], path[1200], want[1200];
  snprintf(bdir, sizeof bdir, "%s/unsharded", root);
  run_gpt(base, NULL, NULL, bdir, NULL, NULL);
  REQUIRE_OK(base->status == 0 ? ACC_OK : ACC_ERR_INTERNAL);
  const int steps[] = {0, 10, 20, 30};
  CHECK(val_loss(base->out, 30) < val_loss(base->out, 0) - 0.3, "the unsharded run learns: %s", base->out);
  CHECK(!strstr(base->out, "fsdp:"), "the unsharded run does not shard: %s", base->out);

  static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
  snprintf(want, sizeof want, "%s/checkpoints/checkpoint_2/model.safetensors", bdir);
  double v30 = NAN; /* FULL_SHARD's last validation loss */
  for (int s = 0; s < 3; s++) {
    snprintf(sdir[s], sizeof sdir[s], "%s/%s", root, strategies[s]);
    run_gpt(r, strategies[s], s == 1 ? "FULL_STATE_DICT" : NULL, sdir[s], NULL, NULL);
    CHECK(r->status == 0, "%s run", strategies[s]);
    if (r->status != 0) continue;
    if (s == 0) v30 = val_loss(r->out, 30);
    char line[128];
    snprintf(line, sizeof line, "fsdp: %s, 4 units (embed, 2 blocks, ln_f)", strategies[s]);
    CHECK(strstr(r->out, line), "%s: the units are the example's: %s", strategies[s], r->out);
    /* 17220 parameters: each process holds half when sharded (blocks of 5565 pad to 5566) */
    snprintf(line, sizeof line, "this process holds %d of 17220 parameters", s < 2 ? 8611 : 17220);
    CHECK(strstr(r->out, line), "%s: %s", strategies[s], r->out);
    CHECK(strstr(r->out, "memory: per process: parameter shard") && strstr(r->out, "unit buffers:"),
          "%s: the library's accounting is printed", strategies[s]);
    CHECK(acc_test_count(r->out, "sample:") == 1, "%s: only the main process prints the sample", strategies[s]);
    for (int k = 0; k < 4; k++) {
      double ref = val_loss(base->out, steps[k]), got = val_loss(r->out, steps[k]);
      printf("%-13s step %2d: validation loss %.4f (unsharded %.4f)\n", strategies[s], steps[k], got, ref);
      CHECK(fabs(got - ref) <= 2e-4, "%s: validation loss at step %d is %.4f, unsharded %.4f", strategies[s],
            steps[k], got, ref);
    }
    /* the parameters at step 30 (checkpoint_2): sharded files merged, or the full state dict */
    if (s == 1) {
      snprintf(path, sizeof path, "%s/checkpoints/checkpoint_2/fsdp/model.safetensors", sdir[s]);
    } else {
      char ck[1024], merged[1024];
      snprintf(ck, sizeof ck, "%s/checkpoints/checkpoint_2/fsdp", sdir[s]);
      snprintf(merged, sizeof merged, "%s/merged", sdir[s]);
      const char *margv[] = {launcher, "merge-weights", ck, merged, NULL};
      run_out *mr = malloc(sizeof *mr);
      lu_run(mr, (char *const *)margv, NULL);
      CHECK(mr->status == 0, "%s: merge-weights: %s %s", strategies[s], mr->out, mr->err);
      free(mr);
      snprintf(path, sizeof path, "%s/model.safetensors", merged);
    }
    double largest = 0, d = file_diff(want, path, &largest);
    printf("%-13s parameters at step 30: largest difference %.3g (largest parameter %.3g)\n", strategies[s], d, largest);
    CHECK(d >= 0 && d <= 1e-5 * largest, "%s: parameters differ from the unsharded run's by %.3g (largest %.3g)",
          strategies[s], d, largest);
  }

  /* save (sharded state dict, every 10 steps) and resume from step 20 */
  char c[512], cmd[2048];
  const char *a = sdir[0];
  snprintf(c, sizeof c, "%s/resumed", root);
  snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && rm -rf '%s/checkpoints/checkpoint_2'", a, c, c);
  CHECK(system(cmd) == 0, "%s", cmd);
  run_gpt(r, "FULL_SHARD", NULL, c, "--resume", NULL);
  CHECK(r->status == 0 && strstr(r->out, "at step 20"), "resume: %s %s", r->out, r->err);
  CHECK(val_loss(r->out, 30) == v30, "resumed validation loss %.4f, uninterrupted %.4f", val_loss(r->out, 30), v30);
  for (int rank = 0; rank < 2; rank++) {
    char pa[1024], pc[1024];
    snprintf(pa, sizeof pa, "%s/checkpoints/checkpoint_2/fsdp/fsdp_shard_rank%d.safetensors", a, rank);
    snprintf(pc, sizeof pc, "%s/checkpoints/checkpoint_2/fsdp/fsdp_shard_rank%d.safetensors", c, rank);
    double d = file_diff(pa, pc, NULL);
    CHECK(d == 0.0, "process %d's shards at step 30: resumed and uninterrupted differ by %.3g", rank, d);
  }

  /* bf16 is not done under FSDP: refused, not silently run in float32 */
  run_gpt(r, "FULL_SHARD", NULL, NULL, "--mixed-precision", "bf16");
  CHECK(r->status != 0 && strstr(r->err, "--use_fsdp trains in float32"), "bf16 under FSDP: %s", r->err);

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK(system(cmd) == 0, "%s", cmd);
  free(base);
  free(r);
  return acc_test_finish("gpt_fsdp");
}
