/* Matrix products with bfloat16 operands and float32 accumulation, for the GPT example's bf16
 * mode (see gemm_bf16.c for how they are computed).
 *
 *   C[M, N] = alpha op(A) op(B) + beta C      row-major, op transposes when ta / tb
 *
 * A and B are float32 in memory; each element is rounded to the nearest bfloat16 (ties to even)
 * as it is packed, every product of two bf16 values is exact in float32, and the sums are float32.
 * The result therefore equals a float32 product of the rounded operands up to the order of the
 * additions. Independent of libaccelerate and of any BLAS. */
#ifndef GPT_GEMM_BF16_H
#define GPT_GEMM_BF16_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes of scratch gemm_bf16 needs for products with at most max_n columns (N). */
size_t gemm_bf16_scratch_bytes(int max_n);

/** C = alpha op(A) op(B) + beta C with bf16 operands (beta 0: C is not read). scratch holds
 *  gemm_bf16_scratch_bytes(N) bytes, 64-byte aligned. */
void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc, void *scratch);

/** Which inner kernel gemm_bf16 uses on this CPU: "avx512_bf16" (the vdpbf16ps dot products)
 *  or "portable" (plain C, the same arithmetic). Chosen once at the first call. */
const char *gemm_bf16_kernel(void);

/** Testing: 1 forces the portable kernel, 0 lets the CPU decide. */
void gemm_bf16_force_portable(int on);

#ifdef __cplusplus
}
#endif
#endif
