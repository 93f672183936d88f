/* The bf16 products of examples/gpt/gemm_bf16.c against OpenBLAS cblas_sgemm, one thread, at the
 * shapes of one training step of the GPT example (4 x 256 tokens, width 256): for each product
 * the best of REPS timings of each (interleaved), in GFLOP/s (2 M N K per product), and the
 * largest difference between the two results relative to the largest |C| of the f32 one.
 *   usage: gemm_bench [reps]      (OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE as for the run) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gemm_bf16.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
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
      {"qkv forward      x W^T", 0, 1, 1024, 768, 256},
      {"mlp.fc forward   x W^T", 0, 1, 1024, 1024, 256},
      {"mlp.proj forward x W^T", 0, 1, 1024, 256, 1024},
      {"mlp.fc dW        dY^T x", 1, 0, 1024, 256, 1024},
      {"mlp.fc dx        dY W", 0, 0, 1024, 256, 1024},
      {"mlp.proj dx      dY W", 0, 0, 1024, 1024, 256},
      {"attention Q K^T  (64 rows)", 0, 1, 64, 256, 64},
  };
  size_t big = (size_t)1024 * 1024;
  float *A = malloc(big * sizeof *A), *B = malloc(big * sizeof *B);
  float *C0 = malloc(big * sizeof *C0), *C1 = malloc(big * sizeof *C1);
  void *scratch = aligned_alloc(64, (gemm_bf16_scratch_bytes(1024) + 63) / 64 * 64);
  if (!A || !B || !C0 || !C1 || !scratch) return 1;
  unsigned s = 1;
  for (size_t i = 0; i < big; i++) {
    s = s * 1103515245u + 12345u;
    A[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    s = s * 1103515245u + 12345u;
    B[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16")) peak();
#endif
  printf("# bf16 kernel: %s; %d repetitions, best time of each\n", gemm_bf16_kernel(), reps);
  printf("%-28s %5s %5s %5s %12s %12s %7s %10s\n", "product", "M", "N", "K", "sgemm GF/s",
         "bf16 GF/s", "ratio", "max diff");
  double tot_s = 0, tot_b = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *p = &shapes[i];
    const int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    double best_s = 1e9, best_b = 1e9;
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
    }
    double mx = 0, diff = 0;
    for (size_t k = 0; k < (size_t)p->M * p->N; k++) {
      mx = fmax(mx, fabs(C0[k]));
      diff = fmax(diff, fabs(C0[k] - C1[k]));
    }
    const double flop = 2.0 * p->M * p->N * p->K;
    tot_s += best_s;
    tot_b += best_b;
    printf("%-28s %5d %5d %5d %12.1f %12.1f %7.2f %10.2e\n", p->what, p->M, p->N, p->K,
           flop / best_s * 1e-9, flop / best_b * 1e-9, best_s / best_b, diff / mx);
  }
  printf("# all products: sgemm %.3f ms, bf16 %.3f ms, bf16 speed-up %.2fx\n", tot_s * 1e3,
         tot_b * 1e3, tot_s / tot_b);
  free(A);
  free(B);
  free(C0);
  free(C1);
  free(scratch);
  return 0;
}
