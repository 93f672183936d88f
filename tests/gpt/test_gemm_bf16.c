/* The bf16 matrix products of examples/gpt/gemm_bf16.c: every transpose combination, sizes that
 * leave partial tiles, panels and k blocks (and odd K), alpha / beta, against
 *   - a double-precision product of the operands rounded to bf16: the same arithmetic, so the
 *     difference is float32 rounding only: |diff| <= (K + 4) 2^-23 (|alpha| sum_k |a_k b_k| +
 *     |beta c|) for the K additions and the final alpha, beta update;
 *   - the float32 product of the unrounded operands: each bf16 operand is within 2^-9 of its
 *     float, so |diff| <= 2^-7 times the same magnitude (bf16 rounding plus summation, with
 *     margin).
 * With the AVX-512 BF16 kernel when the CPU has it and always with the portable one; and the same
 * checks of the oneDNN products (examples/gpt/gemm_dnnl.c) when the library was built with it
 * (GPT_EXPECT_DNNL: then it must be available), which also get an unwritten C outside its
 * columns, and the float32 -> bf16 conversion (ties to even, infinities, NaN).
 * Where oneDNN has no bf16 matmul for a shape on this CPU (oneDNN 2.6 on an AVX2-only CPU; the
 * test gpt_gemm_bf16_avx2 caps oneDNN at AVX2 with ONEDNN_MAX_CPU_ISA to get that on any x86-64),
 * the product comes from the example's own kernel: it is checked like the others, and oneDNN's
 * description must count those shapes (issue 31). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemm_bf16.h"
#include "gemm_dnnl.h"

static int failures;
static int use_dnnl; /* 1: check gemm_dnnl_bf16 instead of gemm_bf16 */

static float to_bf16(float f) { /* nearest, ties to even (no NaN here) */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint64_t rng = 99;
static float urand(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) * 0x1.0p-52 - 1.0);
}

static void check(int ta, int tb, int M, int N, int K, float alpha, float beta) {
  const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2; /* leading dims > width */
  const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
  const size_t nc = (size_t)M * ldc;
  float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
  float *C0 = malloc(nc * sizeof *C0);
  void *scratch = aligned_alloc(64, (gemm_bf16_scratch_bytes(N) + 63) / 64 * 64);
  if (!A || !B || !C || !C0 || !scratch) exit(1);
  for (size_t i = 0; i < na; i++) A[i] = urand();
  for (size_t i = 0; i < nb; i++) B[i] = urand();
  for (size_t i = 0; i < nc; i++) C0[i] = C[i] = urand();
  if (!use_dnnl) gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch);
  else if (gemm_dnnl_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != 0) {
    fprintf(stderr, "FAIL oneDNN ta=%d tb=%d %dx%dx%d: %s\n", ta, tb, M, N, K, gemm_dnnl_describe());
    failures++;
  }
  double worst_same = 0, worst_f32 = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double same = 0, f32 = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        const float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
        const float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
        same += (double)to_bf16(a) * to_bf16(b);
        f32 += (double)a * b;
        mag += fabs((double)a * b);
      }
      const double c0 = beta == 0.0f ? 0.0 : beta * (double)C0[(size_t)i * ldc + j];
      const double got = C[(size_t)i * ldc + j], scale = fabs(alpha) * mag + fabs(c0) + 1e-30;
      const double e_same = fabs(got - (alpha * same + c0)) / scale;
      const double e_f32 = fabs(got - (alpha * f32 + c0)) / scale;
      worst_same = e_same > worst_same ? e_same : worst_same;
      worst_f32 = e_f32 > worst_f32 ? e_f32 : worst_f32;
    }
  /* the padding of C (columns N..ldc) must be untouched */
  for (int i = 0; i < M; i++)
    for (int j = N; j < ldc; j++)
      if (C[(size_t)i * ldc + j] != C0[(size_t)i * ldc + j]) {
        fprintf(stderr, "FAIL ta=%d tb=%d %dx%dx%d: wrote C outside its %d columns\n", ta, tb, M,
                N, K, N);
        failures++;
        i = M;
        break;
      }
  const double tol_same = (double)(K + 4) * 0x1.0p-23, tol_f32 = 0x1.0p-7;
  if (worst_same > tol_same || worst_f32 > tol_f32 || !(worst_same == worst_same)) {
    fprintf(stderr,
            "FAIL %s ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g: error vs bf16 reference %.3g "
            "(tolerance %.3g), vs f32 %.3g (tolerance %.3g)\n",
            use_dnnl ? gemm_dnnl_describe() : gemm_bf16_kernel(), ta, tb, M, N, K, alpha, beta, worst_same, tol_same, worst_f32,
            tol_f32);
    failures++;
  }
  free(A);
  free(B);
  free(C);
  free(C0);
  free(scratch);
}

static void all_shapes(void) {
  static const int dims[][3] = {{1, 1, 1},   {12, 32, 2},   {13, 33, 3},  {25, 70, 257},
                                {150, 40, 300}, {64, 256, 64}, {7, 5, 513}};
  static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}};
  for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
    for (int t = 0; t < 4; t++)
      for (size_t s = 0; s < sizeof ab / sizeof *ab; s++)
        check(t & 1, t >> 1, dims[d][0], dims[d][1], dims[d][2], ab[s][0], ab[s][1]);
}

static void check_conversion(void) {
  const float in[] = {1.0f, 1.00390625f /* 1 + 2^-8: tie, to even (1) */, 1.01171875f /* 1 + 3 2^-8: tie, up */,
                      -2.5f, INFINITY, -INFINITY, NAN, 3.4e38f /* past the largest bf16: infinity */};
  const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0xc020, 0x7f80, 0xff80, 0, 0x7f80};
  uint16_t out[8];
  gemm_to_bf16(out, in, 8);
  for (int i = 0; i < 8; i++) {
    int ok = i == 6 ? (out[i] & 0x7f80) == 0x7f80 && (out[i] & 0x7f) != 0 : out[i] == want[i];
    if (!ok) {
      fprintf(stderr, "FAIL gemm_to_bf16(%g) = 0x%04x, expected 0x%04x%s\n", in[i], out[i], want[i], i == 6 ? " (a NaN)" : "");
      failures++;
    }
  }
}

int main(void) {
  check_conversion();
#ifdef GPT_EXPECT_DNNL
  if (!gemm_dnnl_available()) {
    fprintf(stderr, "FAIL the build found oneDNN but it is not available: %s\n", gemm_dnnl_describe());
    failures++;
  }
#endif
  if (gemm_dnnl_available()) {
    use_dnnl = 1;
    /* stderr to a file meanwhile: the fallback's note must appear once */
    char note_path[] = "/tmp/acc_gemm_note_XXXXXX";
    int note_fd = mkstemp(note_path), saved = dup(2);
    fflush(stderr);
    if (note_fd >= 0 && saved >= 0) dup2(note_fd, 2);
    all_shapes();
    fflush(stderr);
    if (note_fd >= 0 && saved >= 0) dup2(saved, 2);
    char notes[1 << 16] = "";
    FILE *nf = note_fd >= 0 ? fopen(note_path, "r") : NULL;
    size_t nn = nf ? fread(notes, 1, sizeof notes - 1, nf) : 0;
    notes[nn] = '\0';
    if (nf) fclose(nf);
    if (note_fd >= 0) close(note_fd), unlink(note_path);
    if (saved >= 0) close(saved);
    fputs(notes, stderr); /* FAIL lines, if any, and the note */
    printf("oneDNN: %s\n", gemm_dnnl_describe());
    const int fb = gemm_dnnl_fallback_shapes();
    int said = 0;
    for (const char *p = notes; (p = strstr(p, "use the example's own bf16 kernel")); p++) said++;
    if (said != (fb > 0 && !getenv("RANK") ? 1 : 0)) {
      fprintf(stderr, "FAIL %d shape(s) fell back and the note was printed %d times (expected once when any did)\n", fb,
              said);
      failures++;
    }
    if (fb > 0 && !strstr(gemm_dnnl_describe(), "through the example's own bf16 kernel")) {
      fprintf(stderr, "FAIL %d shape(s) fell back, but the description does not say so: %s\n", fb, gemm_dnnl_describe());
      failures++;
    }
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    /* oneDNN 2.x (Debian's 2.6.3) has no bf16 matmul for A^T B^T 7 x 5 x 513 at AVX2 */
    if (cap && strcmp(cap, "AVX2") == 0 && getenv("GPT_EXPECT_FALLBACK") && strstr(gemm_dnnl_describe(), "oneDNN 2.") &&
        fb == 0) {
      fprintf(stderr, "FAIL oneDNN capped at AVX2 did every bf16 product itself: the fallback was not exercised\n");
      failures++;
    }
    printf("oneDNN fallback: %d product shape(s) through the example's own kernel\n", fb);
    use_dnnl = 0;
  } else {
    float a = 1, b = 1, c = 5;
    if (gemm_dnnl_bf16(0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1) != -1 || c != 5 || !*gemm_dnnl_describe()) {
      fprintf(stderr, "FAIL without oneDNN gemm_dnnl_bf16 must fail and leave C alone (C %g): %s\n", c, gemm_dnnl_describe());
      failures++;
    }
    printf("oneDNN: not used (%s)\n", gemm_dnnl_describe());
  }
  const char *native = gemm_bf16_kernel();
  printf("kernel: %s\n", native);
  all_shapes();
  gemm_bf16_force_portable(1);
  if (strcmp(gemm_bf16_kernel(), "portable") != 0) {
    fprintf(stderr, "FAIL gemm_bf16_force_portable(1) left the %s kernel\n", gemm_bf16_kernel());
    failures++;
  }
  if (strcmp(native, "portable") != 0) all_shapes();
  gemm_bf16_force_portable(0);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
