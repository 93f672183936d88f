/* xoshiro256** generator (Blackman & Vigna), seeded by splitmix64; Lemire's bounded integers;
 * Box-Muller normals; Fisher-Yates permutations; serialized state for checkpoints. */
#include <math.h>
#include <string.h>

#include "accelerate/rng.h"
#include "core/internal.h"

#define RNG_STATE_MAGIC 0x31474e52u /* "RNG1" little-endian */

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void acc_rng_seed(acc_rng *rng, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
  rng->spare_normal = 0.0;
  rng->has_spare = 0;
}

uint64_t acc_rng_u64(acc_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float acc_rng_float(acc_rng *rng) { return (float)(acc_rng_u64(rng) >> 40) * 0x1.0p-24f; }

double acc_rng_double(acc_rng *rng) { return (double)(acc_rng_u64(rng) >> 11) * 0x1.0p-53; }

double acc_rng_normal(acc_rng *rng) {
  if (rng->has_spare) {
    rng->has_spare = 0;
    return rng->spare_normal;
  }
  double u1;
  do {
    u1 = acc_rng_double(rng);
  } while (u1 <= 0.0);
  double u2 = acc_rng_double(rng);
  double r = sqrt(-2.0 * log(u1));
  double a = 6.283185307179586476925 * u2;
  rng->spare_normal = r * sin(a);
  rng->has_spare = 1;
  return r * cos(a);
}

uint64_t acc_rng_bounded(acc_rng *rng, uint64_t bound) {
  if (bound == 0) return 0;
  unsigned __int128 m = (unsigned __int128)acc_rng_u64(rng) * bound;
  uint64_t low = (uint64_t)m;
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = (unsigned __int128)acc_rng_u64(rng) * bound;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

void acc_rng_shuffle(acc_rng *rng, int64_t *values, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)acc_rng_bounded(rng, (uint64_t)i);
    int64_t t = values[i - 1];
    values[i - 1] = values[j];
    values[j] = t;
  }
}

acc_result acc_rng_permutation(acc_rng *rng, int64_t *out, size_t n) {
  if (!rng || (!out && n > 0))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_rng_permutation: rng and out must not be NULL");
  for (size_t i = 0; i < n; i++) out[i] = (int64_t)i;
  acc_rng_shuffle(rng, out, n);
  return ACC_OK;
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void acc_rng_state_get(const acc_rng *rng, uint8_t out[ACC_RNG_STATE_SIZE]) {
  uint64_t spare;
  memcpy(&spare, &rng->spare_normal, sizeof spare);
  put64(out, (uint64_t)RNG_STATE_MAGIC | ((uint64_t)(rng->has_spare ? 1 : 0) << 32));
  for (int i = 0; i < 4; i++) put64(out + 8 + 8 * i, rng->s[i]);
  put64(out + 40, spare);
}

acc_result acc_rng_state_set(acc_rng *rng, const uint8_t *state, size_t len) {
  if (!rng || !state)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_rng_state_set: rng and state must not be NULL");
  if (len != ACC_RNG_STATE_SIZE)
    return acc__error(ACC_ERR_FORMAT, "acc_rng_state_set: state is %zu bytes, expected %d", len,
                      ACC_RNG_STATE_SIZE);
  uint64_t head = get64(state);
  if ((uint32_t)head != RNG_STATE_MAGIC || (head >> 33) != 0)
    return acc__error(ACC_ERR_FORMAT,
                      "acc_rng_state_set: not an accelerate-c RNG state (bad header 0x%016llx)",
                      (unsigned long long)head);
  uint64_t s[4];
  for (int i = 0; i < 4; i++) s[i] = get64(state + 8 + 8 * i);
  if ((s[0] | s[1] | s[2] | s[3]) == 0)
    return acc__error(ACC_ERR_FORMAT, "acc_rng_state_set: all-zero generator state is invalid");
  memcpy(rng->s, s, sizeof s);
  uint64_t spare = get64(state + 40);
  memcpy(&rng->spare_normal, &spare, sizeof spare);
  rng->has_spare = (int)((head >> 32) & 1);
  return ACC_OK;
}

static acc_rng global_rng = {{0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 1},
                             0.0, 0};
static int global_seeded;

void acc_set_seed(uint64_t seed) {
  acc_rng_seed(&global_rng, seed);
  global_seeded = 1;
}

acc_rng *acc_rng_global(void) {
  if (!global_seeded) acc_set_seed(0);
  return &global_rng;
}
