/* The GPT example end to end, through the real launcher, on a small generated text read through
 * the library's token dataset (windows of T + 1 tokens, shuffled by the library's sampler):
 *  - 2 processes x batch 2 give the same parameters after 3 optimizer steps (with gradient
 *    accumulation, parameter groups, clipping and the cosine schedule) as 1 process x batch 4,
 *    with shuffling on, and the same validation loss (every validation window counted once);
 *  - --resume with no checkpoint yet starts from the beginning, says so, and ends as the plain run;
 *  - a run resumed from the checkpoint of step 2 ends bit-identical to the uninterrupted run, and
 *    one resumed at the other process count (1 x 4 from 2 x 2's checkpoint) ends equal to it;
 *  - the text's llm.c shards written by --write-tokens and given back with --train-tokens /
 *    --val-tokens train bit-identically to the text; a file that is not a shard is refused with
 *    an error naming it;
 *  - reducing gradient buckets during the backward pass (--overlap) changes nothing, nor does
 *    keeping the gradients in the model's memory (--private-grads) rather than shared memory;
 *  - only the main process prints the sampled text; a bf16 run trains too.
 * Usage: test_gpt_train <accelerate> <gpt> */
#include <math.h>

#include "acc_test.h"
#include "launch/launch_util.h"

static const char *launcher, *gpt_bin;
static const char *data_opt = "--data"; /* or "--train-tokens" */
static double timeout_s = 120;

static void run_gpt(run_out *r, int nprocs, int batch, const char *out_dir, const char *data,
                    const char *extra1, const char *extra2, const char *extra3) {
  char np[16], b[16];
  snprintf(np, sizeof np, "%d", nprocs);
  snprintf(b, sizeof b, "%d", batch);
  const char *argv[64] = {launcher, "launch", "--num_processes", np, gpt_bin, data_opt, data,
                          "--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                          "--batch", b, "--grad-accum", "2", "--max-steps", "3", "--warmup", "1",
                          "--lr", "3e-3", "--val-windows", "7", "--eval-every", "0",
                          "--sample-bytes", "20", "--log-every", "1", "--prefetch", "0",
                          "--save-every", "1", "--seed", "5", "--output-dir", out_dir};
  int n = 0;
  while (argv[n]) n++;
  if (extra1) argv[n++] = extra1;
  if (extra2) argv[n++] = extra2;
  if (extra3) argv[n++] = extra3;
  argv[n] = NULL;
  double t0 = lu_now();
  pid_t p = lu_start((char *const *)argv, NULL);
  lu_finish(p, t0, timeout_s, r);
  if (r->status != 0) fprintf(stderr, "gpt (%d processes) exited %d:\n%s\n%s\n", nprocs, r->status, r->out, r->err);
}

static void run_cmd(const char *a0, const char *a1, const char *a2, const char *a3) {
  const char *argv[] = {a0, a1, a2, a3, NULL};
  run_out *r = malloc(sizeof *r);
  lu_run(r, (char *const *)argv, NULL);
  CHECK(r->status == 0, "%s %s %s %s: %s", a0, a1, a2, a3 ? a3 : "", r->err);
  free(r);
}

static double val_loss(const char *out, int step) {
  char key[64];
  snprintf(key, sizeof key, "step %d: validation loss ", step);
  const char *p = strstr(out, key);
  return p ? atof(p + strlen(key)) : NAN;
}

/* Largest absolute difference between the float32 tensors of two model files. */
static double model_diff(const char *dir_a, const char *dir_b, int *ntensors) {
  char pa[1024], pb[1024];
  snprintf(pa, sizeof pa, "%s/model.safetensors", dir_a);
  snprintf(pb, sizeof pb, "%s/model.safetensors", dir_b);
  acc_safetensors *a, *b;
  REQUIRE_OK(acc_safetensors_open(&a, pa));
  REQUIRE_OK(acc_safetensors_open(&b, pb));
  double worst = 0;
  *ntensors = (int)acc_safetensors_count(a);
  CHECK(acc_safetensors_count(a) == acc_safetensors_count(b), "%s and %s hold different tensors", pa, pb);
  for (size_t i = 0; i < acc_safetensors_count(a); i++) {
    acc_tensor_view ta, tb;
    REQUIRE_OK(acc_safetensors_tensor(a, i, &ta));
    REQUIRE_OK(acc_safetensors_find(b, ta.name, &tb));
    CHECK(ta.dtype == ACC_F32 && ta.nbytes == tb.nbytes, "%s: dtype or size differs", ta.name);
    if (ta.nbytes != tb.nbytes) continue;
    const float *x = ta.data, *y = tb.data;
    for (size_t k = 0; k < ta.nbytes / sizeof(float); k++) worst = fmax(worst, fabs((double)x[k] - (double)y[k]));
  }
  acc_safetensors_close(a);
  acc_safetensors_close(b);
  return worst;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_gpt_train <accelerate> <gpt>\n");
    return 2;
  }
  launcher = argv[1];
  gpt_bin = argv[2];
  const char *mult = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  if (mult && atof(mult) > 1) timeout_s *= atof(mult);

  char root[256];
  lu_make_dir(root, sizeof root);
  REQUIRE_OK(root[0] ? ACC_OK : ACC_ERR_IO);
  /* 40 KB of text made of a few words, so a tiny model has something to learn */
  char data[512], a[512], b[512], c[512], d[512], ck[1024], ck2[1024];
  snprintf(data, sizeof data, "%s/text.txt", root);
  FILE *f = fopen(data, "w");
  static const char *words[] = {"the ", "hacker ", "jargon ", "file ", "of ", "and ", "kludge ", "cruft\n"};
  uint64_t s = 9;
  for (int i = 0; i < 6000; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    fputs(words[(s >> 33) % 8], f);
  }
  fclose(f);
  snprintf(a, sizeof a, "%s/np2", root);
  snprintf(b, sizeof b, "%s/np1", root);
  snprintf(c, sizeof c, "%s/resumed", root);
  snprintf(d, sizeof d, "%s/bf16", root);

  run_out *r2 = malloc(sizeof *r2), *r1 = malloc(sizeof *r1), *rr = malloc(sizeof *rr);
  run_gpt(r2, 2, 2, a, data, NULL, NULL, NULL);
  run_gpt(r1, 1, 4, b, data, NULL, NULL, NULL);
  CHECK(r2->status == 0 && r1->status == 0, "both runs succeed");
  CHECK(strstr(r2->out, "(token dataset)") && strstr(r2->out, "windows of 16 + 1 tokens"), "the token dataset serves the windows: %s", r2->out);
  CHECK(strstr(r2->out, "2 processes x 2 sequences x 16 bytes x 2 accumulation = 128 tokens per step") &&
            strstr(r1->out, "1 processes x 4 sequences x 16 bytes x 2 accumulation = 128 tokens per step"),
        "same global batch: %s", r2->out);
  CHECK(acc_test_count(r2->out, "sample:") == 1, "only the main process samples text (%d)", acc_test_count(r2->out, "sample:"));

  /* same parameters after 3 steps, and they did move */
  int nt = 0;
  snprintf(ck, sizeof ck, "%s/checkpoints/checkpoint_2", a);
  snprintf(ck2, sizeof ck2, "%s/checkpoints/checkpoint_2", b);
  double diff = model_diff(ck, ck2, &nt);
  char first[1024];
  snprintf(first, sizeof first, "%s/checkpoints/checkpoint_0", a);
  double moved = model_diff(ck, first, &nt);
  printf("2 processes vs 1: largest parameter difference %.3g (steps 1 -> 3 moved them by %.3g), %d tensors\n",
         diff, moved, nt);
  CHECK(nt == 2 + 12 + 2, "every tensor saved (%d)", nt);
  CHECK(diff <= 2e-6, "2 processes x batch 2 differ from 1 process x batch 4 by %.3g", diff);
  CHECK(moved > 1e-3, "training changed the parameters (%.3g)", moved);
  double v2 = val_loss(r2->out, 3), v1 = val_loss(r1->out, 3), v0 = val_loss(r2->out, 0);
  CHECK(fabs(v2 - v1) <= 1e-4 && v2 < v0, "validation loss: 2 processes %.5f, 1 process %.5f (start %.5f)", v2, v1, v0);

  /* resume from the checkpoint of step 2: bit-identical end */
  run_cmd("/bin/cp", "-r", a, c);
  char drop[1024];
  snprintf(drop, sizeof drop, "%s/checkpoints/checkpoint_2", c);
  run_cmd("/bin/rm", "-rf", drop, NULL);
  run_gpt(rr, 2, 2, c, data, "--resume", NULL, NULL);
  CHECK(rr->status == 0 && strstr(rr->out, "resumed from") && strstr(rr->out, "at step 2"), "resume: %s", rr->out);
  double rdiff = model_diff(ck, drop, &nt);
  CHECK(rdiff == 0.0, "resumed run differs from the uninterrupted one by %.3g", rdiff);
  CHECK(val_loss(rr->out, 3) == v2, "resumed validation loss %.6f vs %.6f", val_loss(rr->out, 3), v2);

  /* --resume with no checkpoint yet (the first attempt under --max_restarts): starts from the
   * beginning, says so, and ends as the run without --resume */
  char fr[512];
  snprintf(fr, sizeof fr, "%s/fresh_resume", root);
  run_gpt(rr, 2, 2, fr, data, "--resume", NULL, NULL);
  CHECK(rr->status == 0 && strstr(rr->out, "--resume: no checkpoint in ") &&
            strstr(rr->out, "/checkpoints yet; starting from the beginning"),
        "--resume without a checkpoint: %s %s", rr->out, rr->err);
  if (rr->status == 0) {
    snprintf(drop, sizeof drop, "%s/checkpoints/checkpoint_2", fr);
    CHECK(model_diff(ck, drop, &nt) == 0.0, "a fresh --resume run differs from the uninterrupted one");
    CHECK(val_loss(rr->out, 0) == v0, "a fresh --resume run skips the step-0 validation");
  }

  /* resumed at the other process count: 1 process x batch 4 from the checkpoint of 2 x 2 (the
   * loader position and the schedule map to the new count; the sums differ in order only) */
  char f2[512];
  snprintf(f2, sizeof f2, "%s/resumed_np1", root);
  run_cmd("/bin/cp", "-r", a, f2);
  snprintf(drop, sizeof drop, "%s/checkpoints/checkpoint_2", f2);
  run_cmd("/bin/rm", "-rf", drop, NULL);
  run_gpt(rr, 1, 4, f2, data, "--resume", NULL, NULL);
  CHECK(rr->status == 0 && strstr(rr->out, "at step 2"), "resume at 1 process: %s %s", rr->out, rr->err);
  if (rr->status == 0) {
    double xdiff = model_diff(ck, drop, &nt);
    printf("resumed at 1 process from 2 processes' checkpoint: largest parameter difference %.3g\n", xdiff);
    CHECK(xdiff <= 2e-6, "resumed at 1 process differs from the 2-process run by %.3g", xdiff);
  }

  /* the text's shards written once and given back as token files: the same training, bit for bit */
  char shards[512], trainbin[600], valbin[600];
  snprintf(shards, sizeof shards, "%s/shards", root);
  run_cmd("/bin/mkdir", "-p", shards, NULL);
  {
    const char *wargv[] = {gpt_bin, "--data", data, "--context", "16", "--val-windows", "7", "--write-tokens", shards, NULL};
    lu_run(rr, (char *const *)wargv, NULL);
    CHECK(rr->status == 0 && strstr(rr->out, "train.bin"), "--write-tokens: %s %s", rr->out, rr->err);
  }
  snprintf(trainbin, sizeof trainbin, "%s/train.bin", shards);
  snprintf(valbin, sizeof valbin, "%s/val.bin", shards);
  FILE *tf = fopen(trainbin, "rb");
  unsigned char hdr[12] = {0};
  CHECK(tf && fread(hdr, 1, 12, tf) == 12 && hdr[0] == 0x88 && hdr[1] == 0xd8 && hdr[2] == 0x34 && hdr[3] == 1 && hdr[4] == 1,
        "train.bin starts with the llm.c header (magic 20240520, version 1)");
  if (tf) fclose(tf);
  char g[512];
  snprintf(g, sizeof g, "%s/from_shards", root);
  data_opt = "--train-tokens";
  run_gpt(rr, 2, 2, g, trainbin, "--val-tokens", valbin, NULL);
  CHECK(rr->status == 0 && strstr(rr->out, "token file(s)"), "training from the shards: %s %s", rr->out, rr->err);
  if (rr->status == 0) {
    snprintf(drop, sizeof drop, "%s/checkpoints/checkpoint_2", g);
    double sdiff = model_diff(ck, drop, &nt);
    CHECK(sdiff == 0.0, "training from the written shards differs from the text by %.3g", sdiff);
    CHECK(val_loss(rr->out, 3) == v2, "validation loss from the shards %.6f vs %.6f", val_loss(rr->out, 3), v2);
  }
  /* a text file given as an llm.c shard: refused, naming the file and the header field */
  snprintf(g, sizeof g, "%s/bad_shard", root);
  run_gpt(rr, 1, 4, g, data, "--val-tokens", valbin, NULL);
  CHECK(rr->status != 0 && strstr(rr->err, data) && strstr(rr->err, "magic"), "a text as a shard: %s", rr->err);
  data_opt = "--data";

  /* --overlap: buckets reduced by the library's thread as the model marks gradients ready
   * during its backward pass; the sums are the same, so the parameters are identical */
  char e[512];
  snprintf(e, sizeof e, "%s/overlap", root);
  run_gpt(rr, 2, 2, e, data, "--overlap", "--bucket-kb", "1");
  snprintf(drop, sizeof drop, "%s/checkpoints/checkpoint_2", e);
  CHECK(rr->status == 0, "overlap run: %s", rr->err);
  if (rr->status == 0) {
    double odiff = model_diff(ck, drop, &nt);
    CHECK(odiff == 0.0, "--overlap changes the parameters by %.3g", odiff);
  }
  /* --private-grads: the gradients in the model's own memory instead of memory the processes
   * share (reduced in place by the shm backend): the same sums in the same order */
  snprintf(e, sizeof e, "%s/private", root);
  run_gpt(rr, 2, 2, e, data, "--private-grads", NULL, NULL);
  snprintf(drop, sizeof drop, "%s/checkpoints/checkpoint_2", e);
  CHECK(rr->status == 0, "private-grads run: %s", rr->err);
  if (rr->status == 0) {
    double pdiff = model_diff(ck, drop, &nt);
    CHECK(pdiff == 0.0, "--private-grads changes the parameters by %.3g", pdiff);
  }

  /* bf16 trains as well */
  run_gpt(rr, 2, 2, d, data, "--mixed-precision", "bf16", NULL);
  double vb = val_loss(rr->out, 3);
  CHECK(rr->status == 0 && strstr(rr->out, "bf16") && vb < val_loss(rr->out, 0) && fabs(vb - v2) < 0.05,
        "bf16: validation loss %.4f (f32 %.4f)", vb, v2);

  run_cmd("/bin/rm", "-rf", root, NULL);
  free(r1);
  free(r2);
  free(rr);
  return acc_test_finish("gpt_train");
}
