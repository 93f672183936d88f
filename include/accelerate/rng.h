/* accelerate-c: a fast, reproducible random number generator (xoshiro256**) with a
 * checkpointable state, and the process-global generator that acc_set_seed seeds.
 * Threads: a generator is used from one thread at a time; the global one from the main thread. */
#ifndef ACCELERATE_RNG_H
#define ACCELERATE_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * A random number generator: xoshiro256** (period 2^256 - 1) seeded through splitmix64, plus a
 * cached second normal deviate. A value type: declare it on the stack or inside your struct and
 * seed it with acc_rng_seed before use. Treat the fields as private. Not thread-safe: one
 * generator per thread.
 */
typedef struct acc_rng {
  uint64_t s[4];
  double spare_normal;
  int has_spare;
} acc_rng;

/** Size in bytes of the serialized state (acc_rng_state_get / acc_rng_state_set). */
#define ACC_RNG_STATE_SIZE 48

/** Seeds the generator; the same seed always gives the same sequence on every platform. @since 0.1 */
ACC_EXTERN void acc_rng_seed(acc_rng *rng, uint64_t seed);
/** Next uniform 64-bit integer. @since 0.1 */
ACC_EXTERN uint64_t acc_rng_u64(acc_rng *rng);
/** Uniform float in [0, 1) with 24 random bits. @since 0.1 */
ACC_EXTERN float acc_rng_float(acc_rng *rng);
/** Uniform double in [0, 1) with 53 random bits. @since 0.1 */
ACC_EXTERN double acc_rng_double(acc_rng *rng);
/** Standard normal deviate (mean 0, standard deviation 1), Box-Muller (pairs are cached). @since 0.1 */
ACC_EXTERN double acc_rng_normal(acc_rng *rng);
/** Uniform integer in [0, bound) without modulo bias (Lemire's method); 0 when bound is 0. @since 0.1 */
ACC_EXTERN uint64_t acc_rng_bounded(acc_rng *rng, uint64_t bound);
/** Fisher-Yates shuffle of n int64 values in place. @since 0.1 */
ACC_EXTERN void acc_rng_shuffle(acc_rng *rng, int64_t *values, size_t n);
/**
 * Writes a uniformly random permutation of 0..n-1 into out (Fisher-Yates over the identity).
 * Ownership: out is the caller's array of n elements.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_rng_permutation(acc_rng *rng, int64_t *out, size_t n);

/**
 * Serializes the full generator state (little-endian, versioned) into out, for checkpoints:
 * acc_rng_state_set on it resumes the exact same sequence.
 * @since 0.1
 */
ACC_EXTERN void acc_rng_state_get(const acc_rng *rng, uint8_t out[ACC_RNG_STATE_SIZE]);
/** Restores a state written by acc_rng_state_get. ACC_ERR_FORMAT if len or the header is wrong. @since 0.1 */
ACC_EXTERN acc_result acc_rng_state_set(acc_rng *rng, const uint8_t *state, size_t len);

/**
 * Seeds the process-global generator (acc_rng_global). Accelerate's set_seed: the accelerator
 * adds process_index to seed when device_specific is requested. Not thread-safe.
 * @since 0.1
 */
ACC_EXTERN void acc_set_seed(uint64_t seed);
/** The process-global generator (seeded with 0 until acc_set_seed). Ownership: borrowed. @since 0.1 */
ACC_EXTERN acc_rng *acc_rng_global(void);

#ifdef __cplusplus
}
#endif
#endif
