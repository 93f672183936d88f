/* The GPT example's matrix products in float32 (OpenBLAS cblas_sgemm) and in bf16 (the
 * hand-written kernels of examples/gpt/gemm_bf16.c, and oneDNN when the build found it:
 * examples/gpt/gemm_dnnl.c, with the conversion of float32 operands to bf16 included, and with
 * operands already in bf16), one thread, at the shapes of one training step of the example
 * (4 x 256 tokens, width 256): the forward product and both backward products of every linear
 * layer, the tied output projection and one attention block. For each product the best of REPS
 * timings of each (interleaved, thread CPU time), in GFLOP/s (2 M N K per product), and the largest difference of
 * each bf16 result from the f32 one relative to the largest |C| of the f32 one.
 *   usage: gemm_bench [reps]      (OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE as for the run) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include <stdint.h>
#include <string.h>

/* CPU time of this thread: on a machine shared with other jobs, wall time counts the time the
 * thread waits for a core, which penalizes long products more than short ones (a product longer
 * than a scheduler time slice is almost never timed undisturbed). */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Peak rate of the two instructions, one core: 24 independent accumulators (enough to hide the
 * latency), each vfmadd231ps doing 16 multiply-adds (32 flops), each vdpbf16ps 32 (64 flops). */
#if defined(__GNUC__) && defined(__x86_64__)
#define ONE(OP, r) OP " %%zmm30, %%zmm31, %%zmm" #r "\n"
#define R24(OP)                                                                                 \
  ONE(OP, 0) ONE(OP, 1) ONE(OP, 2) ONE(OP, 3) ONE(OP, 4) ONE(OP, 5) ONE(OP, 6) ONE(OP, 7)         \
  ONE(OP, 8) ONE(OP, 9) ONE(OP, 10) ONE(OP, 11) ONE(OP, 12) ONE(OP, 13) ONE(OP, 14) ONE(OP, 15)   \
  ONE(OP, 16) ONE(OP, 17) ONE(OP, 18) ONE(OP, 19) ONE(OP, 20) ONE(OP, 21) ONE(OP, 22) ONE(OP, 23)
#define CLOBBER24                                                                         \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",      \
      "xmm20", "xmm21", "xmm22", "xmm23"
__attribute__((target("avx512f,avx512bf16"))) static void peak(void) {
  const long n = 4000000;
  double fma = 1e9, dp = 1e9; /* best of 5: other jobs on the machine only ever slow a run */
  for (int r = 0; r < 5; r++) {
    double t = now();
    for (long i = 0; i < n; i++) __asm__ volatile(R24("vfmadd231ps") ::: CLOBBER24);
    t = now() - t;
    fma = t < fma ? t : fma;
    t = now();
    for (long i = 0; i < n; i++) __asm__ volatile(R24("vdpbf16ps") ::: CLOBBER24);
    t = now() - t;
    dp = t < dp ? t : dp;
  }
  printf("# peak, one core: vfmadd231ps %.0f GFLOP/s (%.2f G instructions/s), vdpbf16ps %.0f "
         "GFLOP/s (%.2f G/s)\n", 24.0 * n * 32 / fma * 1e-9, 24.0 * n / fma * 1e-9,
         24.0 * n * 64 / dp * 1e-9, 24.0 * n / dp * 1e-9);
}
#endif

typedef struct shape {
  const char *what;
  int ta, tb, M, N, K;
} shape;

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  static const shape shapes[] = {
      {"qkv       fwd  x W^T", 0, 1, 1024, 768, 256},
      {"qkv       dW   dY^T x", 1, 0, 768, 256, 1024},
      {"qkv       dx   dY W", 0, 0, 1024, 256, 768},
      {"attn.proj fwd  x W^T", 0, 1, 1024, 256, 256},
      {"attn.proj dW   dY^T x", 1, 0, 256, 256, 1024},
      {"attn.proj dx   dY W", 0, 0, 1024, 256, 256},
      {"mlp.fc    fwd  x W^T", 0, 1, 1024, 1024, 256},
      {"mlp.fc    dW   dY^T x", 1, 0, 1024, 256, 1024},
      {"mlp.fc    dx   dY W", 0, 0, 1024, 256, 1024},
      {"mlp.proj  fwd  x W^T", 0, 1, 1024, 256, 1024},
      {"mlp.proj  dW   dY^T x", 1, 0, 256, 1024, 1024},
      {"mlp.proj  dx   dY W", 0, 0, 1024, 1024, 256},
      {"logits    fwd  x E^T", 0, 1, 1024, 256, 256},
      {"logits    dE   dZ^T x", 1, 0, 256, 256, 1024},
      {"logits    dx   dZ E", 0, 0, 1024, 256, 256},
      {"attn Q K^T (64 rows)", 0, 1, 64, 256, 64},
  };
  size_t big = (size_t)1024 * 1024;
  float *A = malloc(big * sizeof *A), *B = malloc(big * sizeof *B);
  float *C0 = malloc(big * sizeof *C0), *C1 = malloc(big * sizeof *C1);
  uint16_t *Ah = malloc(big * sizeof *Ah), *Bh = malloc(big * sizeof *Bh);
  void *scratch = aligned_alloc(64, (gemm_bf16_scratch_bytes(1024) + 63) / 64 * 64);
  if (!A || !B || !C0 || !C1 || !Ah || !Bh || !scratch) return 1;
  unsigned s = 1;
  for (size_t i = 0; i < big; i++) {
    s = s * 1103515245u + 12345u;
    A[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    s = s * 1103515245u + 12345u;
    B[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  gemm_to_bf16(Ah, A, big);
  gemm_to_bf16(Bh, B, big);
  char model[256] = "unknown";
  FILE *ci = fopen("/proc/cpuinfo", "r");
  char line[4096];
  int has_bf16 = 0, has_amx = 0;
  while (ci && fgets(line, sizeof line, ci)) {
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
      model[strcspn(model, "\n")] = 0;
    }
    if (!strncmp(line, "flags", 5)) {
      has_bf16 = strstr(line, " avx512_bf16") != NULL;
      has_amx = strstr(line, " amx_bf16") != NULL;
      break;
    }
  }
  if (ci) fclose(ci);
  printf("# CPU: %s; avx512_bf16 %s, amx_bf16 %s\n", model, has_bf16 ? "yes" : "no", has_amx ? "yes" : "no");
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16")) peak();
#endif
  const int dnnl = gemm_dnnl_available();
  printf("# hand-written bf16 kernel: %s; oneDNN: %s; %d repetitions, best time of each\n", gemm_bf16_kernel(),
         dnnl ? "yes" : gemm_dnnl_describe(), reps);
  printf("%-22s %5s %5s %5s %9s %9s %9s %9s %8s %8s %9s %9s\n", "product", "M", "N", "K", "sgemm", "own bf16",
         "dnnl+cvt", "dnnl bf16", "own/f32", "dnnl/f32", "diff own", "diff dnnl");
  printf("%-22s %5s %5s %5s %9s %9s %9s %9s %8s %8s\n", "", "", "", "", "GF/s", "GF/s", "GF/s", "GF/s", "speed", "(+cvt)");
  double tot_s = 0, tot_b = 0, tot_dc = 0, tot_d = 0;
  char impl[128] = "";
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *p = &shapes[i];
    const int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    double best_s = 1e9, best_b = 1e9, best_dc = 1e9, best_d = 1e9;
    int dnnl_ok = dnnl; /* a shape oneDNN refuses: the other columns still get every repetition (a
                           `break` here used to leave sgemm at one cold run on CPUs without bf16) */
    for (int r = 0; r < reps; r++) {
      double t = now();
      cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans,
                  p->tb ? CblasTrans : CblasNoTrans, p->M, p->N, p->K, 1.0f, A, lda, B, ldb,
                  0.0f, C0, p->N);
      t = now() - t;
      best_s = t < best_s ? t : best_s;
      t = now();
      gemm_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C1, p->N, scratch);
      t = now() - t;
      best_b = t < best_b ? t : best_b;
      if (dnnl_ok) {
        t = now();
        if (gemm_dnnl_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C1, p->N)) {
          dnnl_ok = 0;
          continue;
        }
        t = now() - t;
        best_dc = t < best_dc ? t : best_dc;
        t = now();
        if (gemm_dnnl_bf16_pre(p->ta, p->tb, p->M, p->N, p->K, 1.0f, Ah, lda, Bh, ldb, 0.0f, C1, p->N)) {
          dnnl_ok = 0;
          continue;
        }
        t = now() - t;
        best_d = t < best_d ? t : best_d;
      }
    }
    double mx = 0, diff_own = 0, diff_dnnl = 0;
    gemm_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C1, p->N, scratch);
    for (size_t k = 0; k < (size_t)p->M * p->N; k++) {
      mx = fmax(mx, fabs(C0[k]));
      diff_own = fmax(diff_own, fabs(C0[k] - C1[k]));
    }
    if (dnnl && gemm_dnnl_bf16(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, 0.0f, C1, p->N) == 0) {
      snprintf(impl, sizeof impl, "%s", gemm_dnnl_describe());
      for (size_t k = 0; k < (size_t)p->M * p->N; k++) diff_dnnl = fmax(diff_dnnl, fabs(C0[k] - C1[k]));
    } else if (dnnl) {
      printf("# oneDNN failed: %s\n", gemm_dnnl_describe());
      best_d = best_dc = NAN;
    }
    const double flop = 2.0 * p->M * p->N * p->K;
    tot_s += best_s;
    tot_b += best_b;
    tot_dc += dnnl ? best_dc : 0;
    tot_d += dnnl ? best_d : 0;
    printf("%-22s %5d %5d %5d %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f %9.2e %9.2e\n", p->what, p->M, p->N, p->K,
           flop / best_s * 1e-9, flop / best_b * 1e-9, dnnl ? flop / best_dc * 1e-9 : 0.0,
           dnnl ? flop / best_d * 1e-9 : 0.0, best_s / best_b, dnnl ? best_s / best_dc : 0.0, diff_own / mx,
           dnnl ? diff_dnnl / mx : 0.0);
  }
  printf("# all products: sgemm %.3f ms, own bf16 %.3f ms (%.2fx of sgemm's speed)", tot_s * 1e3, tot_b * 1e3,
         tot_s / tot_b);
  if (dnnl)
    printf(", oneDNN bf16 %.3f ms with the conversion (%.2fx), %.3f ms without (%.2fx); last: %s", tot_dc * 1e3,
           tot_s / tot_dc, tot_d * 1e3, tot_s / tot_d, impl);
  printf("\n");
  free(Ah);
  free(Bh);
  free(A);
  free(B);
  free(C0);
  free(C1);
  free(scratch);
  return 0;
}
