/* bf16 matrix products with float32 accumulation (gemm_bf16.h).
 *
 * The operands are packed into bfloat16 pairs: two consecutive elements along the summed
 * dimension k share one 32-bit word (even k in the low half). AVX-512 BF16's vdpbf16ps then does,
 * in each of 16 float lanes, acc += a[2p] b[2p] + a[2p+1] b[2p+1]: a broadcast word of A (row i,
 * pair p) against 16 words of B (pair p, columns j..j+15).
 *
 * Blocking, as in any packed GEMM: op(B) is packed KC rows at a time into panels of NR = 32
 * columns ([panel][pair][32 columns]); op(A) MC rows at a time into groups of MR = 12 rows
 * ([group][pair][12 rows]). The micro-kernel keeps a 12 x 32 tile of C in 24 registers while it
 * walks one A group against one B panel (KC / 2 pairs: 16 KiB of B, which stays in the level-1
 * cache across the groups). Edges are padded with zeros in the packed copies; partial tiles are
 * written through a small buffer.
 *
 * The portable kernel does the same arithmetic in plain C on the same packed data (the bf16
 * halves widened to float, exact), so every CPU gets bf16 products; the AVX-512 BF16 one is
 * chosen at the first call when the CPU has it (__builtin_cpu_supports, no ifunc), unless the
 * library is built with GPT_NO_CLONES.
 *
 * model.c does not call these: on the Xeon this example was measured on, vdpbf16ps does half the
 * floating-point work per second of float32 vfmadd231ps (80 vs 150 GFLOP/s on one core), so these
 * products run at about 0.5x of OpenBLAS sgemm (bench/gpt/gemm_bench prints both) and bf16 mode
 * keeps rounding the operands and calling sgemm. On a CPU whose bf16 dot product has the FMA's
 * instruction rate they would be up to twice as fast as sgemm; gemm_bench says which. */
#include "gemm_bf16.h"

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(GPT_NO_CLONES)
#define HAVE_AVX512_BF16_KERNEL 1
#include <immintrin.h>
#endif

#define MR 12
#define NR 32
#define KC 256
#define MC (MR * 12)

/* Nearest bfloat16 (ties to even), as the 16 high bits of a float; a NaN stays a NaN. */
static inline uint32_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t special = (u >> 16) | ((u & 0xffffu) ? 0x40u : 0u);
  return (u & 0x7f800000u) == 0x7f800000u ? special : r;
}

static inline uint32_t bf16_pair(float lo, float hi) { return bf16_bits(lo) | bf16_bits(hi) << 16; }

size_t gemm_bf16_scratch_bytes(int max_n) {
  const size_t panels = ((size_t)(max_n > 0 ? max_n : 1) + NR - 1) / NR;
  return (panels * NR + MC) * (KC / 2) * sizeof(uint32_t);
}

/* Pairs p of rows k0 + 2p, k0 + 2p + 1 (< k0 + kc) of op(B), all N columns, into panels. */
static void pack_b(uint32_t *restrict bp, const float *B, int ldb, int tb, int k0, int kc, int N) {
  const int kp = (kc + 1) / 2;
  for (int j0 = 0; j0 < N; j0 += NR) {
    uint32_t *restrict dst = bp + (size_t)(j0 / NR) * kp * NR;
    const int nj = N - j0 < NR ? N - j0 : NR;
    if (!tb) {
      for (int p = 0; p < kp; p++) {
        const float *r0 = B + (size_t)(k0 + 2 * p) * ldb + j0;
        const float *r1 = 2 * p + 1 < kc ? r0 + ldb : NULL;
        uint32_t *restrict d = dst + (size_t)p * NR;
        if (r1 && nj == NR)
          for (int j = 0; j < NR; j++) d[j] = bf16_pair(r0[j], r1[j]);
        else
          for (int j = 0; j < NR; j++) d[j] = j < nj ? bf16_pair(r0[j], r1 ? r1[j] : 0.0f) : 0;
      }
    } else {
      for (int j = 0; j < NR; j++) {
        const float *src = B + (size_t)(j0 + j) * ldb + k0;
        if (j >= nj) {
          for (int p = 0; p < kp; p++) dst[(size_t)p * NR + j] = 0;
          continue;
        }
        for (int p = 0; p < kc / 2; p++)
          dst[(size_t)p * NR + j] = bf16_pair(src[2 * p], src[2 * p + 1]);
        if (kc & 1) dst[(size_t)(kp - 1) * NR + j] = bf16_pair(src[kc - 1], 0.0f);
      }
    }
  }
}

/* Rows i0..i0 + mc of op(A), pairs of columns k0.., into groups of MR rows. */
static void pack_a(uint32_t *restrict ap, const float *A, int lda, int ta, int i0, int mc, int k0,
                   int kc) {
  const int kp = (kc + 1) / 2;
  for (int g = 0; g < mc; g += MR) {
    uint32_t *restrict dst = ap + (size_t)(g / MR) * kp * MR;
    const int nr = mc - g < MR ? mc - g : MR;
    if (!ta) {
      for (int r = 0; r < MR; r++) {
        if (r >= nr) {
          for (int p = 0; p < kp; p++) dst[(size_t)p * MR + r] = 0;
          continue;
        }
        const float *src = A + (size_t)(i0 + g + r) * lda + k0;
        for (int p = 0; p < kc / 2; p++)
          dst[(size_t)p * MR + r] = bf16_pair(src[2 * p], src[2 * p + 1]);
        if (kc & 1) dst[(size_t)(kp - 1) * MR + r] = bf16_pair(src[kc - 1], 0.0f);
      }
    } else {
      for (int p = 0; p < kp; p++) {
        const float *r0 = A + (size_t)(k0 + 2 * p) * lda + i0 + g;
        const float *r1 = 2 * p + 1 < kc ? r0 + lda : NULL;
        uint32_t *restrict d = dst + (size_t)p * MR;
        for (int r = 0; r < MR; r++) d[r] = r < nr ? bf16_pair(r0[r], r1 ? r1[r] : 0.0f) : 0;
      }
    }
  }
}

/* Writes an MR x NR tile: C = alpha acc + beta C (first block of k, beta 0: C not read) or
 * C += alpha acc (later blocks). */
static void store_tile(float *C, int ldc, int mr, int nr, const float *acc, float alpha,
                       float beta, int first) {
  for (int r = 0; r < mr; r++) {
    float *restrict c = C + (size_t)r * ldc;
    const float *restrict a = acc + (size_t)r * NR;
    if (!first || beta == 1.0f)
      for (int j = 0; j < nr; j++) c[j] += alpha * a[j];
    else if (beta == 0.0f)
      for (int j = 0; j < nr; j++) c[j] = alpha * a[j];
    else
      for (int j = 0; j < nr; j++) c[j] = alpha * a[j] + beta * c[j];
  }
}

/* acc[MR][NR] = sum over kp pairs of the A group against the B panel: plain C. */
static void kernel_portable(int kp, const uint32_t *restrict a, const uint32_t *restrict b,
                            float *restrict acc) {
  for (int i = 0; i < MR * NR; i++) acc[i] = 0.0f;
  for (int p = 0; p < kp; p++) {
    float blo[NR], bhi[NR];
    for (int j = 0; j < NR; j++) {
      uint32_t w = b[(size_t)p * NR + j], lo = w << 16, hi = w & 0xffff0000u;
      memcpy(&blo[j], &lo, sizeof lo);
      memcpy(&bhi[j], &hi, sizeof hi);
    }
    for (int r = 0; r < MR; r++) {
      uint32_t w = a[(size_t)p * MR + r], lo = w << 16, hi = w & 0xffff0000u;
      float alo, ahi;
      memcpy(&alo, &lo, sizeof lo);
      memcpy(&ahi, &hi, sizeof hi);
      float *restrict c = acc + (size_t)r * NR;
      for (int j = 0; j < NR; j++) c[j] += alo * blo[j] + ahi * bhi[j];
    }
  }
}

#ifdef HAVE_AVX512_BF16_KERNEL
/* The same with vdpbf16ps: 24 accumulators (12 rows x 2 vectors of 16 columns). */
__attribute__((target("avx512f,avx512bf16"))) static void kernel_avx512(
    int kp, const uint32_t *restrict a, const uint32_t *restrict b, float *restrict acc) {
#define ACC_ROW(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
  ROWS(ACC_ROW)
  for (int p = 0; p < kp; p++) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + (size_t)p * NR + 16);
    const uint32_t *ar = a + (size_t)p * MR;
#define DOT_ROW(r)                                                \
  {                                                               \
    const __m512bh x = (__m512bh)_mm512_set1_epi32((int)ar[r]);   \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, x, b0);                   \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, x, b1);                   \
  }
    ROWS(DOT_ROW)
  }
#define STORE_ROW(r)                                     \
  _mm512_storeu_ps(acc + (r) * NR, c##r##0);             \
  _mm512_storeu_ps(acc + (r) * NR + 16, c##r##1);
  ROWS(STORE_ROW)
#undef ACC_ROW
#undef ROWS
#undef DOT_ROW
#undef STORE_ROW
}
#endif

typedef void (*kernel_fn)(int, const uint32_t *, const uint32_t *, float *);
static int force_portable;

static kernel_fn pick_kernel(void) {
#ifdef HAVE_AVX512_BF16_KERNEL
  if (!force_portable && __builtin_cpu_supports("avx512bf16")) return kernel_avx512;
#endif
  return kernel_portable;
}

const char *gemm_bf16_kernel(void) {
  return pick_kernel() == kernel_portable ? "portable" : "avx512_bf16";
}

void gemm_bf16_force_portable(int on) { force_portable = on != 0; }

void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc, void *scratch) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* no products: C = beta C */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float *c = C + (size_t)i * ldc + j;
        *c = beta == 0.0f ? 0.0f : beta * *c;
      }
    return;
  }
  const kernel_fn kernel = pick_kernel();
  const size_t panels = ((size_t)N + NR - 1) / NR;
  uint32_t *bp = scratch, *ap = bp + panels * NR * (KC / 2);
  float acc[MR * NR] __attribute__((aligned(64)));
  for (int k0 = 0; k0 < K; k0 += KC) {
    const int kc = K - k0 < KC ? K - k0 : KC, kp = (kc + 1) / 2, first = k0 == 0;
    pack_b(bp, B, ldb, tb, k0, kc, N);
    for (int i0 = 0; i0 < M; i0 += MC) {
      const int mc = M - i0 < MC ? M - i0 : MC;
      pack_a(ap, A, lda, ta, i0, mc, k0, kc);
      for (int j0 = 0; j0 < N; j0 += NR) {
        const uint32_t *b = bp + (size_t)(j0 / NR) * kp * NR;
        const int nr = N - j0 < NR ? N - j0 : NR;
        for (int g = 0; g < mc; g += MR) {
          kernel(kp, ap + (size_t)(g / MR) * kp * MR, b, acc);
          store_tile(C + (size_t)(i0 + g) * ldc + j0, ldc, mc - g < MR ? mc - g : MR, nr, acc,
                     alpha, beta, first);
        }
      }
    }
  }
}
