/* The allocation-failure torture loop shared by the tests that run it (tests/alloc,
 * tests/devio): allocation n of op is made to fail, for n = 0, 1, ... until op runs through
 * without reaching n. Every failure must come back as an error with a message; check (may be
 * NULL) looks at what each run left behind. Include after acc_test.h and internal.h. */
#ifndef ACC_ALLOC_TORTURE_H
#define ACC_ALLOC_TORTURE_H

#include <stdio.h>
#include <string.h>

#ifndef ACC_TORTURE_MAX_N
#define ACC_TORTURE_MAX_N 5000
#endif

typedef acc_result (*acc_torture_op)(void);
typedef void (*acc_torture_check)(acc_result rc, long n);

static inline void acc_test_torture(const char *what, acc_torture_op op, acc_torture_check check) {
  long n = 0, failures = 0;
  for (; n < ACC_TORTURE_MAX_N; n++) {
    acc_clear_error();
    acc__alloc_fail_nth(n);
    acc_result rc = op();
    long seen = acc__alloc_count();
    acc__alloc_fail_nth(-1);
    if (rc != ACC_OK) {
      failures++;
      CHECK(strcmp(acc_last_error(), "no error") != 0 && acc_last_error()[0],
            "%s: allocation %ld failed: %s without a message", what, n, acc_result_string(rc));
    }
    if (check) check(rc, n);
    if (seen <= n) {
      CHECK(rc == ACC_OK, "%s: failed without an injected failure (n=%ld): %s", what, n,
            acc_last_error());
      break;
    }
  }
  CHECK(n < ACC_TORTURE_MAX_N, "%s: more than %d allocations", what, ACC_TORTURE_MAX_N);
  fprintf(stderr, "%s: %ld allocations, %ld runs failed cleanly\n", what, n, failures);
}

#endif
