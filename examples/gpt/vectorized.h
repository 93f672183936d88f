/* VECTORIZED: the elementwise loops of the example (norms, softmax, GELU, the loss, the bf16
 * conversions) are compiled for AVX-512, AVX2 and the baseline instruction set, and the loader
 * picks the best the CPU has (GCC's target_clones). GPT_NO_CLONES builds the baseline only
 * (gptcore_plain does, so that the tests cover both). */
#ifndef GPT_VECTORIZED_H
#define GPT_VECTORIZED_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(GPT_NO_CLONES) && defined(GPT_CLONES_AVX2)
/* -DGPT_CLONES=avx2 at configure time: no AVX-512 clone, so that a CPU with AVX-512 runs what an
 * AVX2-only CPU runs (bench/gpt: measuring the AVX2 case on an AVX-512 machine) */
#define VECTORIZED __attribute__((target_clones("avx2", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(GPT_NO_CLONES)
#define VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTORIZED
#endif

#endif
