/* The device-collective watchdog (src/device/watchdog.h) with a stub communicator: completion,
 * the deadline, a dead peer (stub and, through accelerate launch, a rank really killed, seen by
 * the shm backend's liveness check), an asynchronous error, a failed query, the abort called
 * once, the message (communicator, operation, sequence number, rank), the group marked broken,
 * and the bounded poll of the host-staged path.
 * Usage: test_watchdog stub | test_watchdog peer (2 processes, accelerate launch) */
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "acc_test.h"
#include "device/watchdog.h"
#include "core/internal.h"
#include "state/state.h"

static double mult(void) {
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  double v = m ? atof(m) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

typedef struct stub {
  atomic_int polls;     /* queries so far */
  int done_after;       /* the operation completes at this query (0: never) */
  int fail_query;       /* the query fails */
  atomic_int async_err; /* the communicator reports an error */
  atomic_int aborts;
  atomic_int peer_gone; /* the peer stub reports rank 1 dead */
  acc_state *st;        /* peer: the real liveness check */
} stub;

static int q_stub(void *ctx, void *token, char *msg, size_t cap) {
  stub *s = ctx;
  (void)token;
  int n = atomic_fetch_add(&s->polls, 1) + 1;
  if (s->fail_query) {
    snprintf(msg, cap, "stub event query failed");
    return -1;
  }
  if (atomic_load(&s->aborts)) return 1; /* an aborted operation ends */
  return s->done_after && n >= s->done_after ? 1 : 0;
}

static int a_stub(void *ctx, char *msg, size_t cap) {
  stub *s = ctx;
  if (!atomic_load(&s->async_err)) return 0;
  snprintf(msg, cap, "unhandled cuda error (stub)");
  return 1;
}

static void abort_stub(void *ctx) { atomic_fetch_add(&((stub *)ctx)->aborts, 1); }

static int peer_stub(void *pctx, int *rank, int *pid, char *how, size_t cap) {
  stub *s = pctx;
  if (!atomic_load(&s->peer_gone)) return 0;
  *rank = 1;
  *pid = 4242;
  snprintf(how, cap, "died (killed or crashed)");
  return 1;
}

static int peer_state(void *pctx, int *rank, int *pid, char *how, size_t cap) {
  return acc__state_peer_gone(((stub *)pctx)->st, rank, pid, how, cap);
}

static atomic_int thread_starts;
static void start_stub(void *ctx) {
  (void)ctx;
  atomic_fetch_add(&thread_starts, 1);
}

static const acc__wd_ops ops = {q_stub, a_stub, abort_stub, start_stub};

static acc__watchdog *start(stub *s, acc_state *st, double timeout, double grace) {
  acc__wd_config c = {&ops, s, peer_stub, s, st, "NCCL", 0, 2, timeout, 0.001, 0.01, grace};
  acc__watchdog *w = NULL;
  REQUIRE_OK(acc__watchdog_start(&w, &c));
  return w;
}

static uint64_t issue(acc__watchdog *w, size_t bucket) {
  char d[64];
  snprintf(d, sizeof d, "gradient bucket %zu", bucket);
  uint64_t seq = 0;
  REQUIRE_OK(acc__watchdog_begin(w));
  REQUIRE_OK(acc__watchdog_push(w, NULL, "all_reduce", d, &seq));
  return seq;
}

static int never(void *ctx) {
  (void)ctx;
  return 0;
}
static int soon(void *ctx) { return ++*(int *)ctx >= 5 ? 1 : 0; }
static int broken_q(void *ctx) {
  (void)ctx;
  acc__error(ACC_ERR_BACKEND, "stub device error");
  return -1;
}

static void stub_tests(void) {
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  /* 1. operations complete: waits return, nothing aborted, the group is usable */
  {
    stub s = {0};
    s.done_after = 3;
    acc__watchdog *w = start(&s, st, 30.0 * mult(), 1.0);
    uint64_t a = issue(w, 0);
    REQUIRE_OK(acc__watchdog_wait(w, a));
    s.polls = 0;
    uint64_t b = issue(w, 1);
    CHECK(b == a + 1, "sequence numbers %llu then %llu", (unsigned long long)a,
          (unsigned long long)b);
    REQUIRE_OK(acc__watchdog_wait(w, b));
    CHECK(acc__watchdog_in_flight(w) == 0, "nothing in flight");
    REQUIRE_OK(acc__watchdog_check(w));
    CHECK(atomic_load(&s.aborts) == 0, "no abort");
    acc__watchdog_stop(w);
    CHECK(atomic_load(&thread_starts) == 1, "thread_start once (%d)", atomic_load(&thread_starts));
    REQUIRE_OK(acc_barrier(st));
  }
  /* 2. the deadline: the operation fails, the communicator is aborted once, the message names
   * the communicator, the operation, its number, the rank and the timeout; later calls fail */
  {
    stub s = {0};
    acc__watchdog *w = start(&s, st, 0.2, 1.0);
    issue(w, 4);
    double t0 = acc__now();
    uint64_t b = 0;
    REQUIRE_OK(acc__watchdog_begin(w));
    REQUIRE_OK(acc__watchdog_push(w, NULL, "all_reduce", "gradient bucket 5", &b));
    CHECK_ERR(acc__watchdog_wait(w, b), ACC_ERR_TIMEOUT,
              "NCCL all_reduce #1 (gradient bucket 4) on rank 0 of 2: did not complete in 0.2 s");
    double dt = acc__now() - t0;
    CHECK(dt < 5.0 * mult(), "the deadline fired after %.2f s", dt);
    CHECK(strstr(acc_last_error(), "ACCELERATE_TIMEOUT") && strstr(acc_last_error(), "aborted"),
          "message: %s", acc_last_error());
    CHECK(atomic_load(&s.aborts) == 1, "aborted once (%d)", atomic_load(&s.aborts));
    CHECK_ERR(acc__watchdog_begin(w), ACC_ERR_TIMEOUT, "gradient bucket 4");
    CHECK_ERR(acc__watchdog_check(w), ACC_ERR_TIMEOUT, "rank 0 of 2");
    acc__watchdog_stop(w);
    /* the group is broken: a CPU collective fails at once with the reason */
    CHECK_ERR(acc_barrier(st), ACC_ERR_REMOTE, "broken by an earlier failure");
    CHECK(strstr(acc_last_error(), "NCCL all_reduce #1") != NULL, "reason kept: %s",
          acc_last_error());
  }
  acc_state_destroy(st);
  REQUIRE_OK(acc_state_create(&st, NULL));
  /* 3. a dead peer fails the operation after the grace period, long before the deadline */
  {
    stub s = {0};
    acc__watchdog *w = start(&s, st, 600.0, 0.2);
    uint64_t a = issue(w, 2);
    atomic_store(&s.peer_gone, 1);
    double t0 = acc__now();
    CHECK_ERR(acc__watchdog_wait(w, a), ACC_ERR_REMOTE,
              "NCCL all_reduce #1 (gradient bucket 2) on rank 0 of 2: rank 1 (pid 4242) died "
              "(killed or crashed) while it was in flight");
    CHECK(acc__now() - t0 < 10.0 * mult(), "dead peer noticed after %.2f s", acc__now() - t0);
    CHECK(atomic_load(&s.aborts) == 1, "aborted once");
    acc__watchdog_stop(w);
  }
  acc_state_destroy(st);
  REQUIRE_OK(acc_state_create(&st, NULL));
  /* 4. a peer gone after finishing its part: the operation completes within the grace */
  {
    stub s = {0};
    s.done_after = 20;
    atomic_store(&s.peer_gone, 1);
    acc__watchdog *w = start(&s, st, 600.0, 30.0 * mult());
    REQUIRE_OK(acc__watchdog_wait(w, issue(w, 0)));
    CHECK(atomic_load(&s.aborts) == 0, "no abort when the operation completes");
    acc__watchdog_stop(w);
  }
  /* 5. an asynchronous communicator error; 6. a failed completion query */
  {
    stub s = {0};
    atomic_store(&s.async_err, 1);
    acc__watchdog *w = start(&s, st, 600.0, 1.0);
    CHECK_ERR(acc__watchdog_wait(w, issue(w, 3)), ACC_ERR_BACKEND,
              "asynchronous error: unhandled cuda error (stub)");
    acc__watchdog_stop(w);
    acc_state_destroy(st);
    REQUIRE_OK(acc_state_create(&st, NULL));
    stub t = {0};
    t.fail_query = 1;
    w = start(&t, st, 600.0, 1.0);
    CHECK_ERR(acc__watchdog_wait(w, issue(w, 0)), ACC_ERR_BACKEND,
              "it failed: stub event query failed");
    acc__watchdog_stop(w);
  }
  /* a canceled issue leaves nothing in flight */
  {
    stub s = {0};
    acc__watchdog *w = start(&s, st, 600.0, 1.0);
    REQUIRE_OK(acc__watchdog_begin(w));
    acc__watchdog_cancel(w);
    CHECK(acc__watchdog_in_flight(w) == 0, "cancel: nothing in flight");
    acc__watchdog_stop(w); /* stops with nothing to watch, and with an operation in flight: */
    w = start(&s, st, 600.0, 1.0);
    issue(w, 0);
    acc__watchdog_stop(w);
  }
  acc_state_destroy(st);
  /* the bounded poll of the host-staged path */
  int n = 0;
  double t0 = acc__now();
  CHECK(acc__wd_poll(never, NULL, 0.05) == ACC_ERR_TIMEOUT, "poll: deadline");
  CHECK(acc__now() - t0 >= 0.05 && acc__now() - t0 < 5.0 * mult(), "poll: %.3f s",
        acc__now() - t0);
  REQUIRE_OK(acc__wd_poll(soon, &n, 10.0));
  CHECK(n == 5, "poll: done at the 5th query (%d)", n);
  CHECK(acc__wd_poll(broken_q, NULL, 10.0) == ACC_ERR_BACKEND, "poll: the query's error");
  /* a bad configuration */
  acc__watchdog *w = NULL;
  acc__wd_config bad = {&ops, NULL, NULL, NULL, NULL, "NCCL", 0, 1, 0.0, 0, 0, 0};
  CHECK_ERR(acc__watchdog_start(&w, &bad), ACC_ERR_INVALID_ARGUMENT, "watchdog");
}

/* Two processes: rank 1 is killed while rank 0's (stub) operation is in flight; rank 0's
 * watchdog learns it from the shm backend's liveness check within seconds. */
static void peer_test(void) {
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  int rank = acc_state_process_index(st);
  acc_test_rank = rank;
  REQUIRE_OK(acc_state_num_processes(st) == 2 ? ACC_OK : ACC_ERR_INVALID_USAGE);
  /* the launcher stops the survivors of a dead rank (SIGTERM, then SIGKILL after its grace
   * period): rank 0 must notice by itself, as under a launcher that does not */
  if (rank == 0) signal(SIGTERM, SIG_IGN);
  REQUIRE_OK(acc_barrier(st));
  if (rank == 1) raise(SIGKILL);
  stub s = {0};
  s.st = st;
  acc__wd_config c = {&ops, &s, peer_state, &s, st, "NCCL", 0, 2, 600.0, 0.001, 0.05, 0.5};
  acc__watchdog *w = NULL;
  REQUIRE_OK(acc__watchdog_start(&w, &c));
  double t0 = acc__now();
  uint64_t seq = 0;
  REQUIRE_OK(acc__watchdog_begin(w));
  REQUIRE_OK(acc__watchdog_push(w, NULL, "all_reduce", "gradient bucket 0", &seq));
  CHECK_ERR(acc__watchdog_wait(w, seq), ACC_ERR_REMOTE,
            "NCCL all_reduce #1 (gradient bucket 0) on rank 0 of 2: rank 1 (pid");
  CHECK(strstr(acc_last_error(), "died (killed or crashed)") != NULL, "how: %s",
        acc_last_error());
  double dt = acc__now() - t0;
  CHECK(dt < 10.0 * mult(), "the dead rank was noticed after %.2f s", dt);
  acc__watchdog_stop(w);
  CHECK_ERR(acc_barrier(st), ACC_ERR_REMOTE, "broken");
  printf("watchdog_peer: failed after %.2f s\n", dt);
  int fails = acc_test_failures;
  acc_state_destroy(st);
  if (!fails) printf("watchdog_peer: PASS\n");
  fflush(stdout);
  _exit(fails ? 1 : 0);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "peer")) peer_test();
  stub_tests();
  return acc_test_finish("watchdog");
}
