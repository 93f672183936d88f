/* Where one training step of the GPT example's model (float32, 4 x 256 tokens, 4 layers, width
 * 256) spends its time, per operation, forward and backward apart (gpt_profile: thread CPU time),
 * to set against PyTorch's (bench/gpt/ops_torch.py, the same model, the same categories).
 * Prints the median over REPS steps of each operation in ms, and of the whole step.
 *   usage: ops_bench [reps]   (OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE as for the run) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 10;
  if (reps < 1) return 2;
  const gpt_config cfg = {256, 256, 4, 4, 256, 4};
  const int B = cfg.max_batch, T = cfg.block_size;
  gpt *m;
  if (gpt_create(&m, &cfg)) {
    fprintf(stderr, "ops_bench: %s\n", gpt_last_error());
    return 1;
  }
  gpt_init(m, 1);
  int32_t *tok = malloc((size_t)B * (T + 1) * sizeof *tok);
  double *per = calloc((size_t)reps * (2 * GPT_OP_COUNT + 1), sizeof *per);
  if (!tok || !per) return 1;
  uint64_t s = 7;
  for (int i = 0; i < B * (T + 1); i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((s >> 33) % 256);
  }
  double sec[2 * GPT_OP_COUNT];
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
    memset(sec, 0, sizeof sec);
    gpt_profile(m, sec);
    float loss;
    double t0 = now();
    if (gpt_forward(m, tok, B, T, (size_t)T + 1) || gpt_loss(m, tok + 1, (size_t)T + 1, &loss, NULL) ||
        gpt_backward(m, 1.0f)) {
      fprintf(stderr, "ops_bench: %s\n", gpt_last_error());
      return 1;
    }
    double total = now() - t0;
    if (r < 0) continue;
    for (int k = 0; k < 2 * GPT_OP_COUNT; k++) per[(size_t)k * reps + r] = sec[k];
    per[(size_t)2 * GPT_OP_COUNT * reps + r] = total;
  }
  printf("# C: one float32 step of the model (4 x 256 tokens), per operation, median of %d steps (ms, thread CPU)\n",
         reps);
  printf("%-14s %9s %9s %9s\n", "operation", "forward", "backward", "both");
  double fsum = 0, bsum = 0;
  for (int op = 0; op < GPT_OP_COUNT; op++) {
    double f = median(per + (size_t)op * reps, reps) * 1e3;
    double b = median(per + (size_t)(GPT_OP_COUNT + op) * reps, reps) * 1e3;
    fsum += f, bsum += b;
    printf("%-14s %9.2f %9.2f %9.2f\n", gpt_op_name(op), f, b, f + b);
  }
  double total = median(per + (size_t)2 * GPT_OP_COUNT * reps, reps) * 1e3;
  printf("%-14s %9.2f %9.2f %9.2f   (whole step %.2f ms; the rest is outside the operations)\n", "sum", fsum, bsum,
         fsum + bsum, total);
  gpt_destroy(m);
  return 0;
}
