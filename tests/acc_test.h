/* A tiny test harness for accelerate-c tests: CHECK macros that count failures and print where
 * they happened (with the rank, for multi-process tests), and a summary line. */
#ifndef ACC_TEST_H
#define ACC_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelerate.h"

static int acc_test_failures;
static int acc_test_checks;
static int acc_test_rank = -1;

#define ACC_TEST_RANK_PREFIX() \
  (acc_test_rank >= 0 ? fprintf(stderr, "[rank %d] ", acc_test_rank) : 0)

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    acc_test_checks++;                                                      \
    if (!(cond)) {                                                          \
      acc_test_failures++;                                                  \
      ACC_TEST_RANK_PREFIX();                                               \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
    }                                                                       \
  } while (0)

/* Checks that an acc_* call succeeded; prints acc_last_error() otherwise. */
#define CHECK_OK(call)                                                              \
  do {                                                                              \
    acc_result check_rc_ = (call);                                                  \
    CHECK(check_rc_ == ACC_OK, "%s -> %s: %s", #call, acc_result_string(check_rc_), \
          acc_last_error());                                                        \
  } while (0)

/* Checks that an acc_* call failed with rc and that the message contains substr. */
#define CHECK_ERR(call, rc, substr)                                                         \
  do {                                                                                      \
    acc_result check_rc_ = (call);                                                          \
    CHECK(check_rc_ == (rc), "%s -> %s (expected %s): %s", #call,                           \
          acc_result_string(check_rc_), acc_result_string(rc), acc_last_error());           \
    CHECK(strstr(acc_last_error(), (substr)) != NULL, "message of %s lacks \"%s\": %s",     \
          #call, (substr), acc_last_error());                                               \
  } while (0)

/* Fatal precondition: stop the test program (the launcher then stops the other ranks). */
#define REQUIRE_OK(call)                                                                   \
  do {                                                                                     \
    acc_result req_rc_ = (call);                                                           \
    if (req_rc_ != ACC_OK) {                                                               \
      ACC_TEST_RANK_PREFIX();                                                              \
      fprintf(stderr, "FATAL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,            \
              acc_result_string(req_rc_), acc_last_error());                               \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* Prints the summary and returns the process exit status. */
/* The first MiB of a text file, NUL-terminated, in a buffer of the test's own (overwritten by
 * the next call); NULL when it cannot be opened. */
static inline char *acc_test_slurp(const char *path) {
  static char buf[1 << 20];
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Occurrences of needle in s (overlapping ones counted). */
static inline int acc_test_count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* Device-vs-CPU equality (docs/gpu.md, "NaN"): the same bits, except that any NaN equals any NaN
 * (a GPU writes its canonical NaN 0x7fffffff where x86 writes 0xffc00000 for an invalid
 * operation; which NaN comes out is not part of any result). */
static inline int acc_test_same_f32(float a, float b) {
  if (memcmp(&a, &b, sizeof a) == 0) return 1;
  return a != a && b != b;
}

/* The rule over n floats; *at: the first element that differs. */
static inline int acc_test_same_f32_n(const float *a, const float *b, size_t n, size_t *at) {
  for (size_t i = 0; i < n; i++)
    if (!acc_test_same_f32(a[i], b[i])) {
      if (at) *at = i;
      return 0;
    }
  return 1;
}

/* The rule for bf16 (bf16 != 0) or fp16 bit patterns. */
static inline int acc_test_same_half(const unsigned short *a, const unsigned short *b, size_t n,
                                     int bf16) {
  const unsigned inf = bf16 ? 0x7f80u : 0x7c00u;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && !((a[i] & 0x7fffu) > inf && (b[i] & 0x7fffu) > inf)) return 0;
  return 1;
}

static inline int acc_test_finish(const char *name) {
  ACC_TEST_RANK_PREFIX();
  fprintf(stderr, "%s: %d checks, %d failed\n", name, acc_test_checks, acc_test_failures);
  return acc_test_failures ? 1 : 0;
}

#endif
