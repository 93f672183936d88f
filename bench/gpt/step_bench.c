/* One training step of the GPT example's model (forward, loss, backward of 4 x 256 tokens at the
 * default sizes), timed in-process in three modes, interleaved: float32 (OpenBLAS sgemm), bf16
 * with rounded operands on sgemm (GPT_BF16_DNNL=0, the path without oneDNN), and bf16 through
 * oneDNN (the default when the build found it). One thread, thread CPU time (the machine is
 * shared: wall time would count the waits for a core). Prints the median and the best of
 * REPS steps of each (the best is the least disturbed by other jobs) and the ratios.
 *   usage: step_bench [reps]   (OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE as for the run) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm_dnnl.h"
#include "model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: the machine is shared */
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 10;
  if (reps < 1) return 2;
  const gpt_config cfg = {256, 256, 4, 4, 256, 4};
  const int B = cfg.max_batch, T = cfg.block_size;
  gpt *m;
  if (gpt_create(&m, &cfg)) {
    fprintf(stderr, "step_bench: %s\n", gpt_last_error());
    return 1;
  }
  gpt_init(m, 1);
  const size_t n = gpt_num_params(m);
  float *rounded = malloc(n * sizeof *rounded);
  uint16_t *half = malloc(n * sizeof *half);
  int32_t *tok = malloc((size_t)B * (T + 1) * sizeof *tok);
  double *t[3];
  for (int k = 0; k < 3; k++) t[k] = malloc((size_t)reps * sizeof **t);
  if (!rounded || !half || !tok || !t[0] || !t[1] || !t[2]) return 1;
  gemm_to_bf16(half, gpt_params(m), n);
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)half[i] << 16;
    memcpy(&rounded[i], &u, sizeof u);
  }
  uint64_t s = 7;
  for (int i = 0; i < B * (T + 1); i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((s >> 33) % 256);
  }
  static const char *names[3] = {"float32 (sgemm)", "bf16, rounded operands on sgemm", "bf16 through oneDNN"};
  const char *desc[3] = {"", "", ""};
  static char keep[3][400];
  for (int r = -1; r < reps; r++) /* r = -1: warm-up (oneDNN makes its primitives) */
    for (int k = 0; k < 3; k++) {
      if (k == 2 && !gemm_dnnl_available()) continue;
      setenv("GPT_BF16_DNNL", k == 2 ? "1" : "0", 1);
      gpt_set_bf16(m, k > 0, k > 0 ? rounded : NULL);
      gpt_set_bf16_half(m, k == 2 ? half : NULL);
      float loss;
      double t0 = now();
      if (gpt_forward(m, tok, B, T, (size_t)T + 1) || gpt_loss(m, tok + 1, (size_t)T + 1, &loss, NULL) ||
          gpt_backward(m, 1.0f)) {
        fprintf(stderr, "step_bench: %s\n", gpt_last_error());
        return 1;
      }
      if (r >= 0) t[k][r] = now() - t0;
      snprintf(keep[k], sizeof keep[k], "%s", gpt_bf16_backend(m));
      desc[k] = keep[k];
    }
  printf("# one step of the model (4 x 256 tokens, 4 layers, width 256), %d interleaved repetitions\n", reps);
  double med[3] = {0}, best[3] = {0};
  for (int k = 0; k < 3; k++) {
    if (k == 2 && !gemm_dnnl_available()) {
      printf("%-34s not built (%s)\n", names[k], gemm_dnnl_describe());
      continue;
    }
    qsort(t[k], (size_t)reps, sizeof **t, cmp);
    med[k] = reps % 2 ? t[k][reps / 2] : 0.5 * (t[k][reps / 2 - 1] + t[k][reps / 2]);
    best[k] = t[k][0];
    printf("%-34s median %7.1f ms  best %7.1f ms  %6.0f tokens/s (best)   [%s]\n", names[k], med[k] * 1e3,
           best[k] * 1e3, B * T / best[k], desc[k]);
  }
  printf("# bf16 rounded-on-sgemm / f32 speed: %.2fx (median) %.2fx (best)\n", med[0] / med[1], best[0] / best[1]);
  if (gemm_dnnl_available())
    printf("# bf16 oneDNN / f32 speed: %.2fx (median) %.2fx (best)\n", med[0] / med[2], best[0] / best[2]);
  gpt_destroy(m);
  return 0;
}
