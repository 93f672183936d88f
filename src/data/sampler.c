/* Samplers: sequential and seedable random order of one epoch; BatchSampler length. */
#include "accelerate/data.h"
#include "accelerate/rng.h"
#include "core/internal.h"

acc_result acc_sampler_order(int64_t *out, int64_t n, int shuffle, uint64_t seed, int64_t epoch) {
  if (n < 0) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_sampler_order: n is %lld, expected >= 0", (long long)n);
  if (!out && n > 0) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_sampler_order: out is NULL");
  for (int64_t i = 0; i < n; i++) out[i] = i;
  if (shuffle) {
    /* SeedableRandomSampler: the generator is reseeded with initial_seed + epoch every epoch, so
     * every process computes the same permutation without communicating. */
    acc_rng rng;
    acc_rng_seed(&rng, seed + (uint64_t)epoch);
    acc_rng_shuffle(&rng, out, (size_t)n);
  }
  return ACC_OK;
}

int64_t acc_batch_sampler_len(int64_t n, int64_t batch_size, int drop_last) {
  if (n <= 0 || batch_size <= 0) return 0;
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}
