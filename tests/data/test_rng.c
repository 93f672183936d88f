/* RNG: determinism, state round-trip (bit-exact resume), ranges, bounded uniformity, normals,
 * permutations, the global generator, malformed states. */
#include <math.h>
#include <string.h>

#include "acc_test.h"
#include "accelerate/rng.h"

int main(void) {
  acc_rng a, b;
  acc_rng_seed(&a, 42);
  acc_rng_seed(&b, 42);
  int same = 1;
  for (int i = 0; i < 1000; i++) same &= acc_rng_u64(&a) == acc_rng_u64(&b);
  CHECK(same, "same seed, same stream");
  acc_rng_seed(&b, 43);
  CHECK(acc_rng_u64(&a) != acc_rng_u64(&b), "different seeds differ");

  /* State round-trip mid-stream, including a cached normal deviate. */
  acc_rng_seed(&a, 7);
  for (int i = 0; i < 10; i++) acc_rng_u64(&a);
  (void)acc_rng_normal(&a); /* leaves a spare normal cached */
  uint8_t st[ACC_RNG_STATE_SIZE];
  acc_rng_state_get(&a, st);
  double ref[20];
  for (int i = 0; i < 20; i++) ref[i] = i % 3 ? acc_rng_normal(&a) : acc_rng_double(&a);
  acc_rng_seed(&b, 12345);
  CHECK_OK(acc_rng_state_set(&b, st, sizeof st));
  int resumed = 1;
  for (int i = 0; i < 20; i++) resumed &= (i % 3 ? acc_rng_normal(&b) : acc_rng_double(&b)) == ref[i];
  CHECK(resumed, "restored state continues bit-exactly");
  CHECK_ERR(acc_rng_state_set(&b, st, 10), ACC_ERR_FORMAT, "expected 48");
  uint8_t bad[ACC_RNG_STATE_SIZE];
  memcpy(bad, st, sizeof bad);
  bad[0] ^= 0xff;
  CHECK_ERR(acc_rng_state_set(&b, bad, sizeof bad), ACC_ERR_FORMAT, "bad header");
  memset(bad + 8, 0, 32);
  memcpy(bad, st, 8);
  CHECK_ERR(acc_rng_state_set(&b, bad, sizeof bad), ACC_ERR_FORMAT, "all-zero");

  /* Ranges and moments over 200000 draws (fixed seed: the values below are deterministic). */
  acc_rng_seed(&a, 2024);
  const int N = 200000;
  int counts[10] = {0};
  double sum = 0, sumsq = 0, fsum = 0;
  int in_range = 1;
  for (int i = 0; i < N; i++) {
    float f = acc_rng_float(&a);
    double d = acc_rng_double(&a);
    in_range &= f >= 0.0f && f < 1.0f && d >= 0.0 && d < 1.0;
    fsum += f;
    uint64_t k = acc_rng_bounded(&a, 10);
    in_range &= k < 10;
    if (k < 10) counts[k]++;
    double z = acc_rng_normal(&a);
    sum += z;
    sumsq += z * z;
  }
  CHECK(in_range, "float/double in [0,1), bounded < 10");
  CHECK(fabs(fsum / N - 0.5) < 0.005, "uniform mean %f", fsum / N);
  double chi2 = 0;
  for (int k = 0; k < 10; k++) chi2 += (counts[k] - N / 10.0) * (counts[k] - N / 10.0) / (N / 10.0);
  CHECK(chi2 < 27.9, "bounded chi-square %f (9 dof, p=0.001)", chi2);
  CHECK(fabs(sum / N) < 0.01 && fabs(sumsq / N - 1.0) < 0.02, "normal mean %f var %f", sum / N, sumsq / N);
  CHECK(acc_rng_bounded(&a, 0) == 0 && acc_rng_bounded(&a, 1) == 0, "degenerate bounds");
  /* A bound that is not a power of two close to 2^64 stays in range (rejection path). */
  uint64_t big = 0xc000000000000001ull;
  int big_ok = 1;
  for (int i = 0; i < 1000; i++) big_ok &= acc_rng_bounded(&a, big) < big;
  CHECK(big_ok, "large bound");

  /* Permutations: valid, deterministic, and every position moves across seeds. */
  int64_t p[100], q[100];
  acc_rng_seed(&a, 5);
  acc_rng_seed(&b, 5);
  CHECK_OK(acc_rng_permutation(&a, p, 100));
  CHECK_OK(acc_rng_permutation(&b, q, 100));
  CHECK(memcmp(p, q, sizeof p) == 0, "same seed, same permutation");
  int seen[100] = {0}, perm = 1, fixed = 0;
  for (int i = 0; i < 100; i++) seen[p[i]]++;
  for (int i = 0; i < 100; i++) {
    perm &= seen[i] == 1;
    fixed += p[i] == i;
  }
  CHECK(perm && fixed < 10, "a permutation (%d fixed points)", fixed);
  /* Each of the 6 permutations of 3 elements appears about equally often. */
  int hist[6] = {0};
  for (int t = 0; t < 60000; t++) {
    int64_t r[3];
    acc_rng_permutation(&a, r, 3);
    hist[r[0] * 2 + (r[1] > r[2])]++;
  }
  int even = 1;
  for (int k = 0; k < 6; k++) even &= hist[k] > 9500 && hist[k] < 10500;
  CHECK(even, "uniform over S3: %d %d %d %d %d %d", hist[0], hist[1], hist[2], hist[3], hist[4], hist[5]);
  CHECK_ERR(acc_rng_permutation(&a, NULL, 3), ACC_ERR_INVALID_ARGUMENT, "NULL");

  /* Global generator. */
  acc_set_seed(77);
  uint64_t g1 = acc_rng_u64(acc_rng_global());
  acc_set_seed(77);
  CHECK(acc_rng_u64(acc_rng_global()) == g1, "acc_set_seed reseeds the global generator");
  acc_rng_seed(&a, 77);
  CHECK(acc_rng_u64(&a) == g1, "global generator == acc_rng seeded the same");
  return acc_test_finish("data_rng");
}
