/* bf16 matrix products through oneDNN (Debian's libdnnl-dev), for the GPT example's bf16 mode
 * when the library was found at configure time (GPT_HAVE_DNNL); see gemm_dnnl.c.
 *
 *   C[M, N] = alpha op(A) op(B) + beta C      row-major, op transposes when ta / tb
 *
 * The operands are rounded to the nearest bfloat16 (ties to even), the products of two bf16
 * values are exact in float32 and oneDNN sums them in float32, so the result is a float32
 * product of the rounded operands up to the order of the additions, as with gemm_bf16.h. oneDNN
 * picks its kernels for the CPU: AMX where present, else AVX-512 BF16 (vdpbf16ps), else it
 * converts to float32 and uses its AVX-512 / AVX2 kernels.
 *
 * Without oneDNN every function below fails (returns -1) and gemm_dnnl_available() is 0; the
 * callers then keep the OpenBLAS float32 products. A shape oneDNN cannot do on this CPU (oneDNN
 * 2.6 on AVX2-only CPUs lacks some) is computed by gemm_bf16 instead, said once on stderr.
 * Not thread-safe: one caller thread. */
#ifndef GPT_GEMM_DNNL_H
#define GPT_GEMM_DNNL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** 1 when built with oneDNN and its CPU engine could be created (checked once). */
int gemm_dnnl_available(void);

/** Product shapes oneDNN has no bf16 matmul for on this CPU, computed by the example's own bf16
 *  kernel (gemm_bf16.h) instead; the first one is said once on stderr. 0 without oneDNN. */
int gemm_dnnl_fallback_shapes(void);

/** "oneDNN <version>, <implementation of the last product>" (e.g. "brg:avx512_core_bf16"), or
 *  why it is not available. Never NULL. */
const char *gemm_dnnl_describe(void);

/** C = alpha op(A) op(B) + beta C with float32 operands rounded to bf16 on the way in (beta 0:
 *  C is not read). 0 on success, -1 (reason in gemm_dnnl_describe) otherwise. */
int gemm_dnnl_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/** The same with operands already in bf16 (uint16 bit patterns, laid out as for gemm_dnnl_bf16:
 *  op(A) of M x K from A with leading dimension lda, and so on): no conversion. */
int gemm_dnnl_bf16_pre(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                       int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc);

/** Rounds n floats to bf16 (ties to even; a NaN stays a NaN) into out. */
void gemm_to_bf16(uint16_t *out, const float *in, size_t n);

#ifdef __cplusplus
}
#endif
#endif
