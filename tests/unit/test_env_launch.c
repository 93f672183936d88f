/* Out-of-range environment values in real processes (regression for red-team D3): through
 * accelerate launch, and with a launch environment set by hand. Each one is a clear error naming
 * the variable, the value and the range, at once: no SIGFPE, no truncation, no wait for peers.
 *   test_env_launch <accelerate> <env_probe> */
#include "acc_test.h"
#include "core/env.h"
#include "launch/launch_util.h"

static const char *cli, *probe;
static double guard;

static void launch(run_out *r, const char *const *env) {
  char *argv[] = {(char *)cli, "launch", "--num_processes", "2", (char *)probe, NULL};
  double t0 = lu_now();
  pid_t p = lu_start(argv, env);
  lu_finish(p, t0, guard, r);
}

static void by_hand(run_out *r, const char *const *env) {
  char *argv[] = {(char *)probe, NULL};
  double t0 = lu_now();
  pid_t p = lu_start(argv, env);
  lu_finish(p, t0, guard, r);
}

static void expect_clear_error(const char *what, const run_out *r, const char *message) {
  CHECK(r->status >= 1 && r->status < 128, "%s: status %d (128+n is a signal, -1 a hang)\n%s",
        what, r->status, r->err);
  CHECK(strstr(r->err, message) != NULL, "%s: stderr lacks '%s':\n%s", what, message, r->err);
  CHECK(r->secs < guard / 2, "%s: took %.1f s", what, r->secs);
}

static void test_gas(void) {
  static const char *values[] = {"4294967296", "2147483648", "4294967297", NULL};
  for (int i = 0; values[i]; i++) {
    char set[128], msg[256], what[64];
    snprintf(set, sizeof set, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=%s", values[i]);
    snprintf(msg, sizeof msg,
             "environment variable ACCELERATE_GRADIENT_ACCUMULATION_STEPS=%s is out of range: "
             "expected 1..1048576", values[i]);
    snprintf(what, sizeof what, "launch gas %s", values[i]);
    const char *env[] = {set, NULL};
    run_out r;
    launch(&r, env);
    expect_clear_error(what, &r, msg);
  }
  const char *env[] = {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS=3", NULL};
  run_out r;
  launch(&r, env);
  CHECK(r.status == 0, "gas 3: status %d\n%s", r.status, r.err);
  CHECK(strstr(r.out, "rank 0 of 2 gas 3") && strstr(r.out, "rank 1 of 2 gas 3"), "gas 3: %s", r.out);
  const char *env_inf[] = {"ACCELERATE_TIMEOUT=inf", NULL};
  launch(&r, env_inf);
  expect_clear_error("launch timeout inf", &r,
                     "ACCELERATE_TIMEOUT=inf is out of range: expected 0.001..31536000");
}

static void test_world_size(void) {
  static const char *const cases[][3] = {
      {"RANK=0", "WORLD_SIZE=2147483648", "WORLD_SIZE=2147483648 is out of range: expected 1..1048576"},
      {"RANK=1", "WORLD_SIZE=4294967298", "WORLD_SIZE=4294967298 is out of range"},
      {"RANK=0", "WORLD_SIZE=9223372036854775807", "WORLD_SIZE=9223372036854775807 is out of range"},
      {"RANK=2147483648", "WORLD_SIZE=2", "RANK=2147483648 is out of range: expected 0..1048575"},
      {"RANK=0", "WORLD_SIZE=99999999999999999999", "WORLD_SIZE=99999999999999999999 is out of range"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *env[] = {"ACCELERATE_RUN_ID=envtest", cases[i][0], cases[i][1], "LOCAL_RANK",
                         "LOCAL_WORLD_SIZE", "ACCELERATE_TIMEOUT=600", NULL};
    run_out r;
    by_hand(&r, env);
    char what[128];
    snprintf(what, sizeof what, "%s %s", cases[i][0], cases[i][1]);
    expect_clear_error(what, &r, cases[i][2]);
  }
}

/* Every variable accelerate launch exports (with the options that add some) has a row in the
 * table of src/core/env.c. */
static void test_exports_in_table(void) {
  char cfg[128];
  snprintf(cfg, sizeof cfg, "/tmp/acc-env-launch-%ld.yaml", (long)getpid());
  FILE *f = fopen(cfg, "w");
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_IO);
  fprintf(f, "distributed_type: MULTI_CPU\ndynamo_config:\n  dynamo_backend: INDUCTOR\n");
  fclose(f);
  char *argv[] = {(char *)cli, "launch", "--config_file", cfg, "--num_processes", "2", "--debug",
                  "--enable_cpu_affinity", "--num_cpu_threads_per_process", "2", "--gpu_ids", "0",
                  "--mixed_precision", "bf16", (char *)probe, "dump", NULL};
  const char *env[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_RUN_ID",
                       "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                       "CUDA_VISIBLE_DEVICES", NULL};
  run_out r;
  double t0 = lu_now();
  pid_t p = lu_start(argv, env);
  lu_finish(p, t0, guard, &r);
  unlink(cfg);
  CHECK(r.status == 0, "dump: status %d: %s", r.status, r.err);
  int exported = 0;
  for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = '\0';
    if (getenv(line)) continue; /* inherited from this process */
    exported++;
    CHECK(acc__env_find(line) != NULL, "accelerate launch exports %s, which has no row in src/core/env.c", line);
  }
  CHECK(exported >= 2 * 20, "only %d exported variables seen", exported);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_env_launch <accelerate> <env_probe>\n");
    return 2;
  }
  cli = argv[1];
  probe = argv[2];
  const char *m = getenv("ACC_TEST_TIMEOUT_MULTIPLIER");
  guard = 30.0 * (m && atof(m) > 0 ? atof(m) : 1.0);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  test_gas();
  test_world_size();
  test_exports_in_table();
  CHECK(lu_no_leftovers(), "processes left behind");
  return acc_test_finish("unit_env_launch");
}
