/* Always-on collective mismatch detection, the all_gather_bytes size checks and hang reports,
 * through the real launcher.
 *
 * One binary, two roles:
 *   test_calltag drive <accelerate CLI> <scenario>  runs `accelerate launch` on itself (rank
 *       role) with the scenario's process count and environment, captures stderr, and asserts on
 *       every rank's report (result, message, call sites) and on the run time;
 *   test_calltag drive-mpi <mpiexec> <scenario>      the same under mpirun (MPI backend);
 *   test_calltag drive-gloo <accelerate CLI> <scenario> the same with the gloo backend (the
 *       environment sets ACCELERATE_BACKEND=gloo; the launch hosts the store on a free port):
 *       gloo compares the call tags in the header exchange that starts every collective
 *       (src/backend/gloo.cc), the mismatches must be found as on the other backends;
 *   test_calltag rank <scenario>                      one rank of a scenario: makes the calls and
 *       writes "[rank R] rc=NAME" + the message + "[rank R] end" in one write, and the call sites
 *       it used as "[rank R] site NAME FILE:LINE".
 * Each rank exits 0 after reporting (a failing rank would make the launcher stop the others
 * before they report). Regressions for the new-user review items R3 (loopfail probe, silent
 * pairing of same-shaped calls) and R4 (agree() on an unchecked root), and red-team D2
 * (mismatch.c: all_gather_bytes sizes overflow).
 * One-sided broadcasts (shm, up to ACC_SHM_RING_BYTES): root, root_last, bcount, bkind and ring
 * (src/backend/shm_ring.c: a root that returns at once must still have its mismatches found,
 * at the next synchronizing collective or at teardown, and matching ones must not be). */
#include <signal.h>
#include <unistd.h>

#include "acc_test.h"
#include "backend/collcheck.h"
#include "comm/comm.h" /* acc__comm_alloc_shared */
#include "launch/launch_util.h"

/* ---- rank role ---------------------------------------------------------------------------- */

static int g_rank;

static void report(acc_result rc) {
  char buf[8192];
  snprintf(buf, sizeof buf, "[rank %d] rc=%s\n%s\n[rank %d] end\n", g_rank,
           rc == ACC_OK ? "OK" : rc == ACC_ERR_MISMATCH ? "MISMATCH" : acc_result_string(rc),
           rc == ACC_OK ? "" : acc_last_error(), g_rank);
  ssize_t w = write(2, buf, strlen(buf));
  (void)w;
}

static void site(const char *name, int line) {
  char buf[512];
  snprintf(buf, sizeof buf, "[rank %d] site %s %s:%d\n", g_rank, name, __FILE__, line);
  ssize_t w = write(2, buf, strlen(buf));
  (void)w;
}

/* The new-user review's probe: the README loop `while (next_batch(...) == ACC_OK && b)`, and a
 * fetch that fails on rank 1. Rank 1 leaves the loop early and all-reduces its batch count
 * while rank 0 all-reduces its gradient (both 1 x f32 sum): they must not pair. */
static int loopfail_fetch(int64_t i, void *const *f, void *payload) {
  (void)payload;
  if (g_rank == 1 && i == 37) return -1; /* a bad record on rank 1 */
  *(float *)f[0] = (float)i;
  return 0;
}

static void sc_loopfail(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  acc_state *st = acc_accelerator_state(acc);
  float w = 0, g = 0;
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", &w, &g, 1, (int64_t[]){1}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  acc_optimizer *o;
  REQUIRE_OK(acc_optimizer_create_sgd(&o, m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, o));
  acc_field_desc fd[1] = {{ACC_F32, 1}};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_map(&ds, 200, fd, 1, loopfail_fetch, NULL));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 10;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));
  acc_result rc = ACC_OK;
  for (int epoch = 0; epoch < 2 && rc == ACC_OK; epoch++) {
    const acc_batch *b;
    int n = 0;
    while (acc_accelerator_next_batch(acc, dl, &b) == ACC_OK && b) { /* as in the README */
      acc_accelerator_accumulate(acc);
      g += 0.001f * acc_accelerator_backward_scale(acc);
      if (n == 0 && epoch == 0) site("backward", __LINE__ + 1);
      rc = acc_accelerator_backward(acc);
      if (rc) break;
      acc_accelerator_optimizer_step(acc, o);
      acc_accelerator_optimizer_zero_grad(acc, o);
      n++;
    }
    if (rc) break;
    float sum = (float)n;
    site("count", __LINE__ + 1);
    rc = acc_all_reduce(st, &sum, &sum, 1, ACC_F32, ACC_SUM);
  }
  report(rc);
  acc_accelerator_destroy(acc);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
}

/* New user 4: rank 0 calls acc_accelerator_backward (the gradient all-reduce inside), rank 1
 * acc_accelerator_wait_for_everyone (a barrier inside). Both ranks' reports must name these
 * lines of this program with the entry points, not the library's sources. */
static void sc_entry(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  float w = 0, g = 0.5f;
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", &w, &g, 1, (int64_t[]){1}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_result rc;
  if (g_rank == 0) {
    site("entry", __LINE__ + 1);
    rc = acc_accelerator_backward(acc);
  } else {
    site("entry", __LINE__ + 1);
    rc = acc_accelerator_wait_for_everyone(acc);
  }
  report(rc);
  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
}

/* Two-rank mismatches of one property each (the last rank makes the different call). */
static void sc_shape(const char *what) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  int last = acc_state_num_processes(st) - 1;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int32_t ix[8] = {0};
  acc_result rc = acc_barrier(st);
  if (rc == ACC_OK) {
    int odd = g_rank == last;
    if (strcmp(what, "count") == 0) {
      site("call", __LINE__ + 1);
      rc = acc_all_reduce(st, x, x, odd ? 5 : 4, ACC_F32, ACC_SUM);
    } else if (strcmp(what, "op") == 0) {
      site("call", __LINE__ + 1);
      rc = acc_all_reduce(st, x, x, 4, ACC_F32, odd ? ACC_MAX : ACC_SUM);
    } else if (strcmp(what, "dtype") == 0) {
      site("call", __LINE__ + 1);
      rc = odd ? acc_all_reduce(st, ix, ix, 4, ACC_I32, ACC_SUM) : acc_all_reduce(st, x, x, 4, ACC_F32, ACC_SUM);
    } else if (strcmp(what, "root") == 0 || strcmp(what, "root_last") == 0) {
      /* both believe they are the root: shm's one-sided broadcast returns at once on both, the
       * barrier after it (root) or the teardown (root_last: the program's last call) finds it */
      site("call", __LINE__ + 1);
      rc = acc_broadcast(st, x, 4, ACC_F32, odd ? 1 : 0);
      if (rc == ACC_OK && what[4] == '\0') rc = acc_barrier(st);
    } else if (strcmp(what, "bcount") == 0) { /* a receiver's count differs from the root's */
      site("call", __LINE__ + 1);
      rc = acc_broadcast(st, x, odd ? 5 : 4, ACC_F32, 0);
    } else if (strcmp(what, "bkind") == 0) { /* a receiver's root is in a barrier */
      site("call", __LINE__ + 1);
      rc = odd ? acc_broadcast(st, x, 1, ACC_F32, 0) : acc_barrier(st);
    } else if (strcmp(what, "ring") == 0) {
      /* matching one-sided broadcasts (rotating roots, every size up to a slot and past it,
       * more in a row than the ring holds), checked element by element; the last call is one */
      static uint8_t buf[8192];
      int n = last + 1;
      for (int i = 0; i < 400 && rc == ACC_OK; i++) {
        int root = (i / 7) % n;
        size_t len = (size_t)(i * 37) % 4100 + 1;
        if (i % 50 == 49) len = 8192; /* a full-step broadcast between one-sided ones */
        for (size_t k = 0; k < len; k++) buf[k] = g_rank == root ? (uint8_t)(i * 31 + k) : 0xEE;
        rc = acc_broadcast(st, buf, len, ACC_U8, root);
        for (size_t k = 0; k < len && rc == ACC_OK; k++)
          if (buf[k] != (uint8_t)(i * 31 + k))
            rc = acc__error(ACC_ERR_INTERNAL, "broadcast %d (root %d, %zu B): byte %zu is %u, expected %u",
                            i, root, len, k, buf[k], (uint8_t)(i * 31 + k));
        if (rc == ACC_OK && i % 97 == 96) rc = acc_all_reduce(st, x, x, 4, ACC_F32, ACC_SUM);
      }
    } else if (strcmp(what, "shared_size") == 0) { /* collective allocations of different sizes */
      void *p = NULL;
      site("call", __LINE__ + 1);
      rc = acc__comm_alloc_shared(st, odd ? 8192 : 4096, &p);
      if (p) rc = acc__error(ACC_ERR_INTERNAL, "alloc_shared gave memory despite the mismatch");
    } else if (strcmp(what, "bigkind") == 0) {
      /* 1 MiB each: between 2 gloo processes both move their data outside the header exchange
       * (direct transfers), which must not start before the tags were compared */
      static float big[2 * 262144], mine[262144];
      site("call", __LINE__ + 1);
      rc = odd ? acc_all_gather(st, mine, big, 262144, ACC_F32) : acc_broadcast(st, big, 262144, ACC_F32, 0);
      for (size_t i = 0; i < 2 * 262144 && rc != ACC_OK; i++)
        if (big[i] != 0.0f) {
          rc = acc__error(ACC_ERR_INTERNAL, "the mismatched call wrote element %zu of the output", i);
          break;
        }
    } else if (strcmp(what, "kind") == 0) { /* 3 processes: only the last one differs */
      site("call", __LINE__ + 1);
      rc = odd ? acc_all_gather(st, x, x, 1, ACC_F32) : acc_barrier(st);
    } else if (strcmp(what, "skip") == 0) {
      /* the last rank's all_reduce has nothing to move (count 0), so its barrier meets the
       * others' all_reduce: one collective apart */
      rc = acc_all_reduce(st, x, x, odd ? 0 : 4, ACC_F32, ACC_SUM);
      site("call", __LINE__ + 1);
      if (rc == ACC_OK) rc = acc_barrier(st);
    } else if (strcmp(what, "sites") == 0) {
      /* the same calls from different lines of the program are NOT a mismatch */
      for (int i = 0; i < 200 && rc == ACC_OK; i++) {
        if (odd)
          rc = acc_all_reduce(st, x, x, 2, ACC_F32, ACC_SUM);
        else
          rc = acc_all_reduce(st, x, x, 2, ACC_F32, ACC_SUM);
        if (rc == ACC_OK) rc = odd ? acc_barrier(st) : acc_barrier(st);
        if (rc == ACC_OK)
          rc = (acc_all_reduce)(st, x, x, 2, ACC_F32, ACC_SUM); /* no call site: also fine */
      }
    }
  }
  report(rc);
  acc_state_destroy(st);
}

/* Same shape, different origin: gather_for_metrics on rank 0, a user all_gather_bytes of the same
 * bytes on rank 1. */
static void sc_origin(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  float v[4] = {1, 2, 3, 4}, out[16];
  int64_t n = 0;
  acc_result rc;
  if (g_rank == 0) {
    rc = acc_accelerator_gather_for_metrics(acc, v, 4, 1, ACC_F32, out, 16, &n);
  } else {
    /* the same shape as gather_for_metrics' first collective (its per-process sample counts) */
    int64_t mine = 4, counts[2];
    site("call", __LINE__ + 1);
    rc = acc_all_gather(acc_accelerator_state(acc), &mine, counts, 1, ACC_I64);
  }
  report(rc);
  acc_accelerator_destroy(acc);
}

/* Agreement of save_state paired with a user all_reduce that names the same origin (so that the
 * tags agree) and carries float bits: rank 0 must say the processes are out of step instead of
 * broadcasting from process 1011658530. */
static void sc_agree(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  acc_result rc;
  char dir[128];
  snprintf(dir, sizeof dir, "/tmp/acc-calltag-agree-%d", (int)getppid());
  if (g_rank == 0) {
    rc = acc_accelerator_save_state(acc, dir, NULL);
  } else {
    /* save_state starts with two path broadcasts (temporary and final directory), then the
     * status exchange: forge all three */
    static char path[4096];
    rc = ACC_OK;
    for (int k = 0; k < 2 && rc == ACC_OK; k++) {
      acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 2);
      rc = acc_broadcast(acc_accelerator_state(acc), path, sizeof path, ACC_U8, 0);
    }
    float f = 1.23f;
    int32_t bits;
    memcpy(&bits, &f, sizeof bits);
    acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 0);
    if (rc == ACC_OK) rc = acc_all_reduce(acc_accelerator_state(acc), &bits, &bits, 1, ACC_I32, ACC_MAX);
  }
  report(rc);
  acc_accelerator_destroy(acc);
}

/* The red-team's mismatch.c: rank 0 gathers 32 bytes, rank 1 all-gathers UINT64_MAX - 15 as its
 * "size". It must fail cleanly on both (ASan finds any overflow under the asan preset). */
static void sc_gather_sizes(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  acc_result rc;
  if (acc_state_process_index(st) == 0) {
    char send[32];
    memset(send, 'A', 32);
    void *out = NULL;
    size_t *sizes = NULL;
    site("call", __LINE__ + 1);
    rc = acc_all_gather_bytes(st, send, 32, &out, &sizes);
    acc_free(out);
    acc_free(sizes);
  } else {
    uint64_t v = UINT64_MAX - 15, all[2];
    site("call", __LINE__ + 1);
    rc = acc_all_gather(st, &v, all, 1, ACC_I64);
    acc_result rc2 = acc_barrier(st);
    if (rc == ACC_OK) rc = rc2;
  }
  report(rc);
  acc_state_destroy(st);
}

/* Rank 1 makes one barrier, then sleeps outside any collective (the scenario, not a
 * synchronisation); rank 0 waits in an all_reduce until its timeout. */
static void sc_hang(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  site("barrier", __LINE__ + 1);
  acc_result rc = acc_barrier(st);
  if (rc == ACC_OK && g_rank == 1) {
    report(rc);
    for (;;) pause(); /* ended by the launcher when rank 0 gives up */
  }
  float x = 1;
  site("wait", __LINE__ + 1);
  if (rc == ACC_OK) rc = acc_all_reduce(st, &x, &x, 1, ACC_F32, ACC_SUM);
  report(rc);
  acc_state_destroy(st);
  exit(3); /* a failing rank: the launcher stops the sleeping one */
}

static int rank_main(const char *sc) {
  const char *r = getenv("RANK");
  if (!r) r = getenv("OMPI_COMM_WORLD_RANK"); /* under mpirun */
  g_rank = r ? atoi(r) : 0;
  if (strcmp(sc, "loopfail") == 0) sc_loopfail();
  else if (strcmp(sc, "origin") == 0) sc_origin();
  else if (strcmp(sc, "agree") == 0) sc_agree();
  else if (strcmp(sc, "gather_sizes") == 0) sc_gather_sizes();
  else if (strcmp(sc, "hang") == 0) sc_hang();
  else if (strcmp(sc, "entry") == 0) sc_entry();
  else {
    /* gloo: rank 1 alone picks another all_reduce algorithm; the first collective must fail */
    if (strcmp(sc, "pairenv") == 0 && g_rank == 1) setenv("ACCELERATE_GLOO_PAIR_BYTES", "0", 1);
    sc_shape(sc);
  }
  return 0;
}

/* ---- driver role -------------------------------------------------------------------------- */

static double mult(void) {
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  double v = m ? atof(m) : 1.0;
  return v >= 1.0 ? v : 1.0;
}

static run_out g_out;

/* The report block of rank r ("rc=..." up to "[rank r] end"), copied into buf. */
static int rank_block(int r, char *buf, size_t cap) {
  char head[32], tail[32];
  snprintf(head, sizeof head, "[rank %d] rc=", r);
  snprintf(tail, sizeof tail, "[rank %d] end", r);
  const char *a = strstr(g_out.err, head), *b = a ? strstr(a, tail) : NULL;
  if (!a || !b) return 0;
  a += strlen(head);
  snprintf(buf, cap, "%.*s", (int)(b - a), a);
  return 1;
}

/* "FILE:LINE" the rank printed for a call site name. */
static int rank_site(int r, const char *name, char *buf, size_t cap) {
  char head[64];
  snprintf(head, sizeof head, "[rank %d] site %s ", r, name);
  const char *a = strstr(g_out.err, head);
  if (!a) return 0;
  a += strlen(head);
  const char *e = strchr(a, '\n');
  snprintf(buf, cap, "%.*s", (int)(e ? e - a : (long)strlen(a)), a);
  return 1;
}

static void expect_rank(int r, const char *rc, const char *const *subs) {
  char blk[8192];
  CHECK(rank_block(r, blk, sizeof blk), "rank %d sent no report; stderr:\n%s", r, g_out.err);
  if (!rank_block(r, blk, sizeof blk)) return;
  CHECK(strncmp(blk, rc, strlen(rc)) == 0, "rank %d: rc=%.40s, expected %s:\n%s", r, blk, rc, blk);
  for (int i = 0; subs && subs[i]; i++)
    CHECK(strstr(blk, subs[i]) != NULL, "rank %d: the message lacks \"%s\":\n%s", r, subs[i], blk);
}

static int g_mpi;  /* drive-mpi: the launcher is mpiexec and the backend MPI */
static int g_gloo; /* drive-gloo: accelerate launch with --main_process_port 0 */

static void launch(const char *cli, const char *self, int np, const char *sc,
                   const char *const *env, double guard_s) {
  char n[16];
  snprintf(n, sizeof n, "%d", np);
  char *argv[] = {(char *)cli, "launch", "--num_processes", n, (char *)self, "rank", (char *)sc, NULL};
  char *margv[] = {(char *)cli, "-np", n, "--oversubscribe", (char *)self, "rank", (char *)sc, NULL};
  char *gargv[] = {(char *)cli, "launch", "--num_processes", n, "--main_process_port", "0",
                   (char *)self, "rank", (char *)sc, NULL};
  double t0 = lu_now();
  pid_t p = lu_start(g_mpi ? margv : g_gloo ? gargv : argv, env);
  lu_finish(p, t0, guard_s, &g_out);
  CHECK(g_out.status != -1, "%s: the run did not end within %g s (hang guard)", sc, guard_s);
}

static void drive(const char *cli, const char *self, const char *sc) {
  const char *quiet[] = {"ACCELERATE_DEBUG_MODE", "ACCELERATE_HANG_REPORT_S", "ACCELERATE_TIMEOUT", NULL};
  double guard = 60 * mult();
  char site0[256], site1[256], mine[256];
  if (strcmp(sc, "loopfail") == 0) {
    launch(cli, self, 2, sc, quiet, guard);
    CHECK(rank_site(1, "count", site1, sizeof site1) && rank_site(0, "backward", site0, sizeof site0),
          "no call sites:\n%s", g_out.err);
    /* rank 0's gradient sync is named by the program's line of acc_accelerator_backward */
    const char *s0[] = {"different collective calls", "gradient sync bucket 0] in acc_accelerator_backward at",
                        site0, "[user call] at", site1, NULL};
    expect_rank(0, "MISMATCH", s0);
    expect_rank(1, "MISMATCH", s0);
  } else if (strcmp(sc, "entry") == 0) {
    launch(cli, self, 2, sc, quiet, guard);
    CHECK(rank_site(0, "entry", site0, sizeof site0) && rank_site(1, "entry", site1, sizeof site1),
          "no call sites:\n%s", g_out.err);
    char want0[512], want1[512];
    snprintf(want0, sizeof want0, "process 0: all_reduce(count=1, dtype=f32, op=sum) [gradient sync "
             "bucket 0] in acc_accelerator_backward at %s\n", site0);
    snprintf(want1, sizeof want1, "process 1: barrier() [user call] in "
             "acc_accelerator_wait_for_everyone at %s", site1);
    const char *s[] = {"different collective calls", want0, want1, NULL};
    expect_rank(0, "MISMATCH", s);
    expect_rank(1, "MISMATCH", s);
    /* no site inside the library's sources */
    const char *lib[] = {"grad_sync.c", "accelerator.c", "control.c", "comm.c", NULL};
    for (int i = 0; lib[i]; i++)
      CHECK(strstr(g_out.err, lib[i]) == NULL, "a library source (%s) is named:\n%s", lib[i], g_out.err);
  } else if (strcmp(sc, "origin") == 0) {
    launch(cli, self, 2, sc, quiet, guard);
    CHECK(rank_site(1, "call", site1, sizeof site1), "no call site:\n%s", g_out.err);
    const char *s[] = {"different collective calls", "process 0: all_gather(count=1, dtype=i64) [gather_for_metrics]",
                       "process 1: all_gather(count=1, dtype=i64) [user call] at", site1, NULL};
    expect_rank(0, "MISMATCH", s);
    expect_rank(1, "MISMATCH", s);
  } else if (strcmp(sc, "agree") == 0) {
    launch(cli, self, 2, sc, quiet, guard);
    const char *s0[] = {"out of step (run with --debug)", "1067282596", NULL};
    expect_rank(0, "MISMATCH", s0);
    expect_rank(1, "OK", NULL);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/acc-calltag-agree-*");
    CHECK(system(cmd) == 0, "cleanup");
  } else if (strcmp(sc, "gather_sizes") == 0) {
    launch(cli, self, 2, sc, quiet, guard);
    CHECK(rank_site(0, "call", site0, sizeof site0) && rank_site(1, "call", site1, sizeof site1),
          "no call sites:\n%s", g_out.err);
    const char *s[] = {"process 0: all_gather_bytes(bytes=32) [user call] at", site0,
                       "process 1: all_gather(count=1, dtype=i64) [user call] at", site1, NULL};
    expect_rank(0, "MISMATCH", s);
    expect_rank(1, "MISMATCH", s);
    CHECK(!strstr(g_out.err, "AddressSanitizer") && !strstr(g_out.err, "runtime error"),
          "sanitizer report:\n%s", g_out.err);
  } else if (strcmp(sc, "hang") == 0) {
    const double hang_s = 2, timeout_s = 6 * mult();
    char tmo[64];
    snprintf(tmo, sizeof tmo, "ACCELERATE_TIMEOUT=%g", timeout_s);
    const char *env[] = {"ACCELERATE_DEBUG_MODE", "ACCELERATE_HANG_REPORT_S=2", tmo, NULL};
    double t0 = lu_now();
    launch(cli, self, 2, sc, env, guard);
    double took = lu_now() - t0;
    CHECK(took < timeout_s + 10 * mult(), "the run took %.1f s (timeout %g s)", took, timeout_s);
    CHECK(rank_site(1, "barrier", site1, sizeof site1) && rank_site(0, "wait", mine, sizeof mine),
          "no call sites:\n%s", g_out.err);
    const char *line = strstr(g_out.err, "accelerate: hang report: rank 0");
    CHECK(line != NULL, "no hang report from rank 0:\n%s", g_out.err);
    if (!line) return;
    CHECK(strstr(line + 1, "accelerate: hang report") == NULL, "more than one hang report:\n%s", g_out.err);
    const char *eol = strchr(line, '\n');
    char l[4096];
    snprintf(l, sizeof l, "%.*s", (int)(eol ? eol - line : (long)strlen(line)), line);
    const char *subs_shm[] = {"all_reduce (collective #", "all_reduce(count=1, dtype=f32, op=sum) [user call] at",
                              mine, "not arrived: [1]", "rank 1 (pid",
                              "is not in a collective, its last was barrier() [user call] at", site1, NULL};
    /* MPI cannot see the other ranks: the report names this rank's call and says so */
    const char *subs_mpi[] = {"rank 0 of 2", "all_reduce (collective #",
                              "all_reduce(count=1, dtype=f32, op=sum) [user call] at", mine,
                              "cannot see which ranks have not arrived", NULL};
    const char *const *subs = g_mpi ? subs_mpi : subs_shm;
    for (int i = 0; subs[i]; i++) CHECK(strstr(l, subs[i]) != NULL, "hang report lacks \"%s\": %s", subs[i], l);
    const char *w = strstr(l, "has waited ");
    double waited = w ? atof(w + strlen("has waited ")) : -1;
    CHECK(waited >= hang_s && waited < hang_s + 3 * mult(), "reported after %.2f s (threshold %g s): %s",
          waited, hang_s, l);
    const char *s0[] = {"timed out", g_mpi ? "did not take part in time" : "not arrived: [1]", NULL};
    expect_rank(0, acc_result_string(ACC_ERR_TIMEOUT), s0);
  } else {
    int np = strcmp(sc, "kind") == 0 ? 3 : strcmp(sc, "ring") == 0 ? 4 : 2;
    launch(cli, self, np, sc, quiet, guard);
    if (strcmp(sc, "sites") == 0 || strcmp(sc, "ring") == 0) {
      for (int r = 0; r < np; r++) expect_rank(r, "OK", NULL);
      CHECK(g_out.status == 0, "%s: exit status %d, expected 0", sc, g_out.status);
      return;
    }
    if (strcmp(sc, "pairenv") == 0) {
      const char *s0[] = {"ACCELERATE_GLOO_PAIR_BYTES=1048576", "process 1 with 0",
                          "set it alike on every machine", NULL};
      const char *s1[] = {"ACCELERATE_GLOO_PAIR_BYTES=0", "process 0 with 1048576", NULL};
      expect_rank(0, acc_result_string(ACC_ERR_INVALID_ARGUMENT), s0);
      expect_rank(1, acc_result_string(ACC_ERR_INVALID_ARGUMENT), s1);
      return;
    }
    if (strcmp(sc, "root_last") == 0 || strcmp(sc, "bcount") == 0) {
      /* the root's call returns before anyone compared it: its teardown must report the
       * mismatch and end the job with a failure */
      CHECK(rank_site(1, "call", site1, sizeof site1), "no call site:\n%s", g_out.err);
      const char *fin[] = {"leaving the process group (acc_state_destroy): the last one-sided broadcasts",
                           "different collective calls",
                           strcmp(sc, "bcount") == 0 ? "process 1: broadcast(count=5, dtype=f32, root=0) [user call] at"
                                                     : "process 1: broadcast(count=4, dtype=f32, root=1) [user call] at",
                           site1, NULL};
      const char *at = strstr(g_out.err, "accelerate: error: rank 0");
      if (!at) at = strstr(g_out.err, "accelerate: error: rank 1");
      CHECK(at != NULL, "%s: no teardown error on stderr:\n%s", sc, g_out.err);
      for (int i = 0; at && fin[i]; i++)
        CHECK(strstr(at, fin[i]) != NULL, "%s: the teardown error lacks \"%s\"", sc, fin[i]);
      CHECK(g_out.status != 0 && g_out.status != -1, "%s: exit status %d, expected a failure", sc, g_out.status);
      expect_rank(0, "OK", NULL);
      if (strcmp(sc, "root_last") == 0) {
        expect_rank(1, "OK", NULL);
      } else { /* the receiver compares the root's tag when it reads */
        const char *s1[] = {"different collective calls", "process 0: broadcast(count=4, dtype=f32, root=0) [user call] at",
                            "process 1: broadcast(count=5, dtype=f32, root=0) [user call] at", site1, NULL};
        expect_rank(1, "MISMATCH", s1);
      }
      return;
    }
    const char *want = NULL;
    if (strcmp(sc, "count") == 0) want = "process 1: all_reduce(count=5, dtype=f32, op=sum) [user call] at";
    if (strcmp(sc, "op") == 0) want = "process 1: all_reduce(count=4, dtype=f32, op=max) [user call] at";
    if (strcmp(sc, "dtype") == 0) want = "process 1: all_reduce(count=4, dtype=i32, op=sum) [user call] at";
    if (strcmp(sc, "root") == 0) want = "process 1: broadcast(count=4, dtype=f32, root=1) [user call] at";
    if (strcmp(sc, "kind") == 0) want = "process 2: all_gather(count=1, dtype=f32) [user call] at";
    if (strcmp(sc, "shared_size") == 0) want = "process 1: alloc_shared(count=8192, dtype=u8) [user call] at";
    if (strcmp(sc, "bkind") == 0) want = "process 1: broadcast(count=1, dtype=f32, root=0) [user call] at";
    if (strcmp(sc, "bigkind") == 0) want = "process 1: all_gather(count=262144, dtype=f32) [user call] at";
    if (strcmp(sc, "skip") == 0) want = "barrier() [user call] at";
    CHECK(want != NULL, "unknown scenario %s", sc);
    CHECK(rank_site(np - 1, "call", site1, sizeof site1), "no call site:\n%s", g_out.err);
    const char *s[] = {"different collective calls", want ? want : "?", site1, NULL};
    for (int r = 0; r < np; r++) expect_rank(r, "MISMATCH", s);
    if (strcmp(sc, "skip") == 0) { /* one collective apart: each names the other's number */
      const char *s0[] = {"process 1 (at its collective #3): barrier()", NULL};
      const char *s1[] = {"process 0 (at its collective #2): all_reduce(count=4, dtype=f32, op=sum)", NULL};
      expect_rank(0, "MISMATCH", s0);
      expect_rank(1, "MISMATCH", s1);
    }
  }
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "rank") == 0) return rank_main(argv[2]);
  g_mpi = argc == 4 && strcmp(argv[1], "drive-mpi") == 0;
  g_gloo = argc == 4 && strcmp(argv[1], "drive-gloo") == 0;
  if (argc != 4 || (strcmp(argv[1], "drive") != 0 && !g_mpi && !g_gloo)) {
    fprintf(stderr, "usage: %s drive <accelerate CLI> <scenario> | drive-mpi <mpiexec> <scenario> | "
            "drive-gloo <accelerate CLI> <scenario> | rank <scenario>\n", argv[0]);
    return 2;
  }
  drive(argv[2], argv[0], argv[3]);
  fprintf(stderr, "--- captured stderr of the run ---\n%s\n", g_out.err);
  return acc_test_finish(argv[3]);
}
