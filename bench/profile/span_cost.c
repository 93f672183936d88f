/* Cost of one profiler span, off and on: N spans in a loop (each the one-line macro the library
 * uses), nanoseconds per span. Usage: bench_span_cost [N] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "accelerate.h"
#include "core/profile.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile int sink;

static double loop(long n) {
  double t0 = now();
  for (long i = 0; i < n; i++) {
    ACC_PROF_SCOPE(ACC_PROF_OTHER, "bench");
    sink = (int)i;
  }
  return (now() - t0) / (double)n * 1e9;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 2000000;
  acc_logger *lib;
  if (acc_get_logger("accelerate", ACC_LOG_WARNING, &lib) != ACC_OK) return 1; /* no summaries */
  double base = loop(n); /* warm-up, profiler off */
  double off = 1e30, on = 1e30;
  char dir[] = "/tmp/acc_span_cost_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  for (int r = 0; r < 5; r++) { /* best of 5 each, interleaved */
    double x = loop(n);
    off = x < off ? x : off;
    if (acc_profile_start(dir) != ACC_OK) {
      fprintf(stderr, "%s\n", acc_last_error());
      return 1;
    }
    x = loop(n / 10);
    on = x < on ? x : on;
    acc_profile_stop();
  }
  (void)base;
  printf("span cost: off %.2f ns, on %.1f ns (best of 5, %ld spans off, %ld on per run)\n", off, on,
         n, n / 10);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) != 0;
}
