/* `accelerate launch` through the real binary: the environment each rank sees, options, output
 * prefixing and log files, restarts, usage errors. argv[1] = accelerate, argv[2] = launch_helper. */
#include "acc_test.h"
#include "launch_util.h"
#include "backend/store.h"

static char *acc, *helper;
static run_out r;

static void getv(const char *text, const char *key, char *out, size_t cap) {
  out[0] = '\0';
  char pat[128];
  snprintf(pat, sizeof pat, "%s=", key);
  const char *p = text;
  while ((p = strstr(p, pat))) {
    if (p == text || p[-1] == '\n') {
      p += strlen(pat);
      size_t n = strcspn(p, "\n");
      snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
      return;
    }
    p++;
  }
}

static int expect_var(const char *text, const char *key, const char *want, int rank) {
  char v[256];
  getv(text, key, v, sizeof v);
  CHECK(strcmp(v, want) == 0, "rank %d: %s is '%s', expected '%s'", rank, key, v, want);
  return strcmp(v, want) == 0;
}

/* Launches the env mode with extra launcher options; checks what every rank saw. */
static void check_env(int n, const char *const *opts, const char *const *envmod, int machines,
                      int machine_rank, const char *addr, const char *mp, const char *cpu,
                      const char *debug, const char *omp, char *run_id_out) {
  char dir[64];
  lu_make_dir(dir, sizeof dir);
  char nbuf[16];
  snprintf(nbuf, sizeof nbuf, "%d", n);
  char *argv[32];
  int c = 0;
  argv[c++] = acc;
  argv[c++] = "launch";
  argv[c++] = "--num_processes";
  argv[c++] = nbuf;
  for (const char *const *o = opts; o && *o; o++) argv[c++] = (char *)*o;
  argv[c++] = helper;
  argv[c++] = "env";
  argv[c++] = dir;
  argv[c] = NULL;
  lu_run(&r, argv, envmod);
  CHECK(r.status == 0, "n=%d: launcher exited %d: %s", n, r.status, r.err);
  int local = n / machines;
  CHECK(lu_count_entries(dir) == local, "n=%d: %d env files, expected %d", n, lu_count_entries(dir), local);
  char first_id[128] = "";
  for (int i = 0; i < local; i++) {
    int rank = machine_rank * local + i;
    char path[128], text[4096], want[128];
    snprintf(path, sizeof path, "%s/env.%d", dir, rank);
    lu_read_file(path, text, sizeof text);
    CHECK(text[0] != '\0', "n=%d: rank %d wrote no file", n, rank);
    snprintf(want, sizeof want, "%d", rank);
    expect_var(text, "RANK", want, rank);
    snprintf(want, sizeof want, "%d", i);
    expect_var(text, "LOCAL_RANK", want, rank);
    snprintf(want, sizeof want, "%d", n);
    expect_var(text, "WORLD_SIZE", want, rank);
    snprintf(want, sizeof want, "%d", local);
    expect_var(text, "LOCAL_WORLD_SIZE", want, rank);
    expect_var(text, "MASTER_ADDR", addr, rank);
    expect_var(text, "ACCELERATE_MIXED_PRECISION", mp, rank);
    expect_var(text, "ACCELERATE_USE_CPU", cpu, rank);
    expect_var(text, "ACCELERATE_DEBUG_MODE", debug, rank);
    snprintf(want, sizeof want, "%d", machines);
    expect_var(text, "ACCELERATE_NUM_MACHINES", want, rank);
    snprintf(want, sizeof want, "%d", machine_rank);
    expect_var(text, "ACCELERATE_MACHINE_RANK", want, rank);
    expect_var(text, "ACCELERATE_RESTART_COUNT", "0", rank);
    expect_var(text, "OMP_NUM_THREADS", omp, rank);
    expect_var(text, "USER_VAR", "kept", rank);
    char id[128];
    getv(text, "ACCELERATE_RUN_ID", id, sizeof id);
    CHECK(strlen(id) >= 8 && strcmp(id, "<unset>") != 0, "rank %d: run id '%s'", rank, id);
    if (i == 0) snprintf(first_id, sizeof first_id, "%s", id);
    CHECK(strcmp(id, first_id) == 0, "rank %d: run id %s differs from %s", rank, id, first_id);
    /* what the library itself detects from this environment */
    char det[128];
    snprintf(det, sizeof det, "accelerate %d/%d local %d/%d machines %d", rank, n, i, local, machines);
    expect_var(text, "detected", det, rank);
  }
  if (run_id_out) snprintf(run_id_out, 128, "%s", first_id);
  lu_remove_dir(dir);
}

static void test_env(void) {
  static const char *const base_env[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "USER_VAR=kept", NULL};
  char id1[128] = "", id2[128] = "";
  const int counts[] = {1, 2, 3, 4, 8};
  for (int k = 0; k < 5; k++) {
    int n = counts[k];
    check_env(n, NULL, base_env, 1, 0, "127.0.0.1", "no", "False", "<unset>", n > 1 ? "1" : "<unset>",
              k == 0 ? id1 : id2);
  }
  CHECK(strcmp(id1, id2) != 0, "two launches share the run id %s", id1);
  /* every option that changes the environment */
  static const char *const opts[] = {"--cpu", "--debug", "--mixed_precision", "bf16", NULL};
  check_env(2, opts, base_env, 1, 0, "127.0.0.1", "bf16", "True", "true", "1", NULL);
  static const char *const opts_eq[] = {"--mixed-precision=fp16", NULL};
  check_env(3, opts_eq, base_env, 1, 0, "127.0.0.1", "fp16", "False", "<unset>", "1", NULL);
  /* the user's OMP_NUM_THREADS wins */
  static const char *const omp_env[] = {"OMP_NUM_THREADS=7", "USER_VAR=kept", NULL};
  check_env(4, NULL, omp_env, 1, 0, "127.0.0.1", "no", "False", "<unset>", "7", NULL);
  static const char *const threads[] = {"--num_cpu_threads_per_process", "3", NULL};
  check_env(2, threads, omp_env, 1, 0, "127.0.0.1", "no", "False", "<unset>", "3", NULL);
  /* second of two machines: global ranks 2, 3. Its launcher joins the rendezvous store of
   * machine 0 (docs/multi-machine.md), which this test hosts. */
  acc__store_server *srv = NULL;
  acc__store_hello expect = {"default", "", 0, 0, 2, 4, -1, 0, 0};
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &expect));
  char port[16];
  snprintf(port, sizeof port, "%d", acc__store_server_port(srv));
  const char *const mm[] = {"--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                            "127.0.0.1", "--main_process_port", port, NULL};
  check_env(4, mm, base_env, 2, 1, "127.0.0.1", "no", "False", "<unset>", "1", NULL);
  acc__store_server_stop(srv, 5);
}

static void env_of_rank0(const char *const *opts, char *text, size_t cap) {
  char dir[64];
  lu_make_dir(dir, sizeof dir);
  char *argv[16];
  int c = 0;
  argv[c++] = acc;
  argv[c++] = "launch";
  for (const char *const *o = opts; *o; o++) argv[c++] = (char *)*o;
  argv[c++] = helper;
  argv[c++] = "env";
  argv[c++] = dir;
  argv[c] = NULL;
  lu_run(&r, argv, NULL);
  CHECK(r.status == 0, "launcher exited %d: %s", r.status, r.err);
  char path[128];
  snprintf(path, sizeof path, "%s/env.0", dir);
  lu_read_file(path, text, cap);
  lu_remove_dir(dir);
}

static void test_ports_and_gpus(void) {
  char text[4096], v[64];
  static const char *const p0[] = {"--num_processes", "2", "--main_process_port", "0", NULL};
  env_of_rank0(p0, text, sizeof text);
  getv(text, "MASTER_PORT", v, sizeof v);
  long port = atol(v);
  CHECK(port > 0 && port <= 65535, "port 0 should pick a free port, got '%s'", v);
  static const char *const pdef[] = {"--num_processes", "2", NULL};
  env_of_rank0(pdef, text, sizeof text);
  expect_var(text, "MASTER_PORT", "29500", 0);
  expect_var(text, "CUDA_VISIBLE_DEVICES", "<unset>", 0);
  static const char *const gpus[] = {"--gpu_ids", "0,2", NULL};
  env_of_rank0(gpus, text, sizeof text);
  expect_var(text, "CUDA_VISIBLE_DEVICES", "0,2", 0);
  static const char *const all[] = {"--gpu-ids=all", NULL};
  env_of_rank0(all, text, sizeof text);
  expect_var(text, "CUDA_VISIBLE_DEVICES", "<unset>", 0);
  /* accepted-for-compatibility options do not change anything */
  static const char *const compat[] = {"--rdzv_backend", "c10d", "--rdzv_conf", "a=1", "--no_python",
                                       "--monitor_interval", "0.05", "-q", "--", NULL};
  env_of_rank0(compat, text, sizeof text);
  expect_var(text, "RANK", "0", 0);
}

static void test_output(void) {
  char *argv[] = {acc, "launch", "--num_processes", "2", "--tee", helper, "print", NULL};
  lu_run(&r, argv, NULL);
  CHECK(r.status == 0, "tee run exited %d", r.status);
  CHECK(strstr(r.out, "[rank 0] hello from 0\n") != NULL, "stdout: %s", r.out);
  CHECK(strstr(r.out, "[rank 1] hello from 1\n") != NULL, "stdout: %s", r.out);
  CHECK(strstr(r.out, "[rank 1] tail 1\n") != NULL, "unterminated last line: %s", r.out);
  CHECK(strstr(r.err, "[rank 0] warn 0\n") != NULL, "stderr: %s", r.err);
  CHECK(strstr(r.out, "warn") == NULL, "stderr leaked into stdout: %s", r.out);
  /* --tee 1: only stdout prefixed */
  char *argv1[] = {acc, "launch", "--num_processes", "2", "--tee", "1", helper, "print", NULL};
  lu_run(&r, argv1, NULL);
  CHECK(strstr(r.out, "[rank 1] hello from 1\n") != NULL, "stdout: %s", r.out);
  CHECK(strstr(r.err, "warn 1\n") != NULL && strstr(r.err, "[rank") == NULL, "stderr: %s", r.err);
  /* default: no prefix, output passes through */
  char *argv2[] = {acc, "launch", "--num_processes", "2", helper, "print", NULL};
  lu_run(&r, argv2, NULL);
  CHECK(strstr(r.out, "hello from 0\n") != NULL && strstr(r.out, "[rank") == NULL, "stdout: %s", r.out);
  /* --log_dir: per-rank files with the raw output, nothing on the console */
  char dir[64], text[4096], path[128];
  lu_make_dir(dir, sizeof dir);
  char *argv3[] = {acc, "launch", "--num_processes", "2", "--log_dir", dir, helper, "print", NULL};
  lu_run(&r, argv3, NULL);
  CHECK(r.status == 0, "log_dir run exited %d: %s", r.status, r.err);
  snprintf(path, sizeof path, "%s/rank1.stdout.log", dir);
  lu_read_file(path, text, sizeof text);
  CHECK(strcmp(text, "hello from 1\ntail 1") == 0, "rank1.stdout.log: '%s'", text);
  snprintf(path, sizeof path, "%s/rank0.stderr.log", dir);
  lu_read_file(path, text, sizeof text);
  CHECK(strcmp(text, "warn 0\n") == 0, "rank0.stderr.log: '%s'", text);
  CHECK(strstr(r.out, "hello") == NULL, "console got: %s", r.out);
  /* --log_dir + --tee: files and prefixed console */
  char *argv4[] = {acc, "launch", "--num_processes", "2", "--log_dir", dir, "--tee", "3", helper, "print", NULL};
  lu_run(&r, argv4, NULL);
  snprintf(path, sizeof path, "%s/rank0.stdout.log", dir);
  lu_read_file(path, text, sizeof text);
  CHECK(strcmp(text, "hello from 0\ntail 0") == 0, "rank0.stdout.log with tee: '%s'", text);
  CHECK(strstr(r.out, "[rank 0] hello from 0\n") != NULL, "stdout: %s", r.out);
  lu_remove_dir(dir);
}

/* --local_ranks_filter (torchrun's --local-ranks-filter) and acc_state_silence_non_main_stdout */
static void test_rank_filter(void) {
  char *a0[] = {acc, "launch", "--num_processes", "3", "--local_ranks_filter", "0", helper, "print", NULL};
  lu_run(&r, a0, NULL);
  CHECK(r.status == 0, "filtered run exited %d: %s", r.status, r.err);
  CHECK(strstr(r.out, "hello from 0\n") && !strstr(r.out, "hello from 1") && !strstr(r.out, "hello from 2"),
        "only rank 0's stdout: %s", r.out);
  CHECK(strstr(r.err, "warn 0\n") && !strstr(r.err, "warn 1") && !strstr(r.err, "warn 2"),
        "only rank 0's stderr: %s", r.err);
  char *a1[] = {acc, "launch", "--num_processes", "3", "--tee", "3", "--local-ranks-filter", "0,2", helper,
                "print", NULL};
  lu_run(&r, a1, NULL);
  CHECK(strstr(r.out, "[rank 0] hello from 0\n") && strstr(r.out, "[rank 2] hello from 2\n") &&
        !strstr(r.out, "[rank 1]"), "tee and filter 0,2: %s", r.out);
  CHECK(!strstr(r.err, "[rank 1]"), "tee and filter 0,2, stderr: %s", r.err);
  /* the log files still get every rank */
  char dir[64], text[4096], path[128];
  lu_make_dir(dir, sizeof dir);
  char *a2[] = {acc, "launch", "--num_processes", "2", "--log_dir", dir, "--tee", "1", "--local_ranks_filter", "0",
                helper, "print", NULL};
  lu_run(&r, a2, NULL);
  snprintf(path, sizeof path, "%s/rank1.stdout.log", dir);
  lu_read_file(path, text, sizeof text);
  CHECK(strcmp(text, "hello from 1\ntail 1") == 0, "rank1.stdout.log under the filter: '%s'", text);
  CHECK(strstr(r.out, "[rank 0] hello from 0") && !strstr(r.out, "hello from 1"), "console: %s", r.out);
  lu_remove_dir(dir);
  /* the library call: stdout of rank 1 is quiet after it, stderr is not */
  char *a3[] = {acc, "launch", "--num_processes", "2", helper, "quiet", NULL};
  lu_run(&r, a3, NULL);
  CHECK(r.status == 0, "quiet run exited %d: %s", r.status, r.err);
  CHECK(strstr(r.out, "before 0\n") && strstr(r.out, "before 1\n") && strstr(r.out, "after 0\n") &&
        !strstr(r.out, "after 1"), "silenced after the call on rank 1 only: %s", r.out);
  CHECK(strstr(r.err, "err 1\n") != NULL, "stderr of rank 1 still shows: %s", r.err);
}

static void test_restarts(void) {
  char dir[64], text[1024], path[128];
  lu_make_dir(dir, sizeof dir);
  char *argv[] = {acc, "launch", "--num_processes", "2", "--max_restarts", "2", helper, "restart", dir, NULL};
  lu_run(&r, argv, NULL);
  CHECK(r.status == 0, "restarted group exited %d: %s", r.status, r.err);
  CHECK(strstr(r.err, "restarting the group (restart 1 of 2) because rank 1") != NULL, "stderr: %s", r.err);
  CHECK(strstr(r.err, "exited with status 7") != NULL, "stderr: %s", r.err);
  CHECK(strstr(r.err, "restart 2 of 2") == NULL, "restarted twice: %s", r.err);
  snprintf(path, sizeof path, "%s/attempts.1", dir);
  lu_read_file(path, text, sizeof text);
  char id0[64] = "", id1[64] = "";
  int a0 = -1, a1 = -1;
  CHECK(sscanf(text, "%d %63s\n%d %63s", &a0, id0, &a1, id1) == 4, "attempts: '%s'", text);
  CHECK(a0 == 0 && a1 == 1, "attempt numbers %d %d", a0, a1);
  CHECK(strcmp(id0, id1) != 0, "a restart must get a new run id (%s)", id0);
  lu_remove_dir(dir);
  /* always failing: K restarts, then the failure status */
  char *argv2[] = {acc, "launch", "--num_processes", "2", "--max-restarts=1", helper, "fail", "0", "6", NULL};
  lu_run(&r, argv2, NULL);
  CHECK(r.status == 6, "status %d", r.status);
  CHECK(strstr(r.err, "restart 1 of 1") != NULL, "stderr: %s", r.err);
  /* no restart by default */
  char *argv3[] = {acc, "launch", "--num_processes", "2", helper, "fail", "1", "6", NULL};
  lu_run(&r, argv3, NULL);
  CHECK(r.status == 6 && strstr(r.err, "restart") == NULL, "status %d: %s", r.status, r.err);
}

static void expect_usage(char *const *argv, int status, const char *a, const char *b) {
  lu_run(&r, argv, NULL);
  CHECK(r.status == status, "%s: status %d, expected %d", a, r.status, status);
  CHECK(strstr(r.err, a) != NULL, "stderr lacks '%s': %s", a, r.err);
  CHECK(!b || strstr(r.err, b) != NULL, "stderr lacks '%s': %s", b, r.err);
}

static void test_usage(void) {
  char *a1[] = {acc, "launch", "--bogus_flag", helper, NULL};
  expect_usage(a1, 2, "unrecognized option '--bogus_flag'", "accelerate launch -h");
  char *a2[] = {acc, "launch", "--num_processes", "2", NULL};
  expect_usage(a2, 2, "required: program", "accelerate launch -h");
  char *a3[] = {acc, "launch", "--num_processes", "abc", helper, NULL};
  expect_usage(a3, 2, "--num_processes: invalid int value: 'abc'", NULL);
  char *a4[] = {acc, "launch", "/nonexistent/prog", NULL};
  expect_usage(a4, 127, "cannot run '/nonexistent/prog'", NULL);
  char *a5[] = {acc, "launch", "--num_processes", "3", "--num_machines", "2", "--main_process_ip", "h", helper, NULL};
  expect_usage(a5, 2, "divide", NULL);
  char *a6[] = {acc, "launch", "--mixed_precision", "fp8", helper, NULL};
  expect_usage(a6, 2, "invalid choice: 'fp8'", NULL);
  char *a7[] = {acc, "launch", "--num_processes", "2", "--num_machines", "2", helper, NULL};
  expect_usage(a7, 2, "main process IP", NULL);
  char *a8[] = {acc, "launch", "--num_processes", NULL};
  expect_usage(a8, 2, "--num_processes: expected a value", NULL);
  char *a9[] = {acc, "launch", "--cpu", "--multi_gpu", "--num_processes", "2", helper, NULL};
  expect_usage(a9, 2, "only use one of", NULL);
  char *a10[] = {acc, "launch", "-m", "--no_python", helper, NULL};
  expect_usage(a10, 2, "cannot be used together", NULL);
  char *a11[] = {acc, "launch", "--num_processes", "-1", helper, NULL};
  expect_usage(a11, 2, "--num_processes must be at least 1, got -1", NULL);
  char *a12[] = {acc, "launch", "--max_restarts=-2", helper, NULL};
  expect_usage(a12, 2, "--max_restarts -2 is out of range (0..2147483647", NULL);
  char *a13[] = {acc, "launch", "--tee", "7", helper, NULL};
  /* a number after --tee is its value: 7 is an invalid level, not the program (red-team D13) */
  expect_usage(a13, 2, "argument --tee: invalid value '7' (expected 0, 1, 2 or 3", NULL);
  char *a14[] = {acc, "launch", "--num_processes", "2", "--local_ranks_filter", "0,5", helper, NULL};
  expect_usage(a14, 2, "argument --local_ranks_filter: '0,5' is not a comma list of local ranks 0..1", NULL);
  char *a15[] = {acc, "launch", "--local_ranks_filter", "x", helper, NULL};
  expect_usage(a15, 2, "argument --local_ranks_filter: 'x'", NULL);
  /* -h lists every option with its default */
  char *h[] = {acc, "launch", "-h", NULL};
  lu_run(&r, h, NULL);
  CHECK(r.status == 0, "-h status %d", r.status);
  static const char *const names[] = {
      "--config_file", "--quiet", "--debug", "--cpu", "--mixed_precision", "--num_processes",
      "--num_machines", "--machine_rank", "--main_process_ip", "--main_process_port", "--gpu_ids",
      "--tee", "--log_dir", "--rdzv_backend", "--rdzv_conf", "--max_restarts", "--monitor_interval",
      "--use_mpi", "--mpirun_hostfile", "--no_python", "--module"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s", names[i]);
    const char *p = strstr(r.out, "options:");
    p = p ? strstr(p, pat) : NULL;
    CHECK(p != NULL, "-h lacks %s", names[i]);
    if (p) {
      const char *eol = strchr(p, '\n');
      const char *d = strstr(p, "(default: ");
      CHECK(d && eol && d < eol, "-h line of %s has no default", names[i]);
    }
  }
  CHECK(strstr(r.out, "--max_restarts N") && strstr(r.out, "(default: 0)"), "-h: %s", r.out);
}

static void test_mpirun(void) {
  if (access("/usr/bin/mpirun", X_OK) != 0) {
    fprintf(stderr, "note: mpirun not installed, --use_mpi not tested\n");
    return;
  }
  static const char *const env[] = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                    "ACCELERATE_RUN_ID=outer", "RANK=5", NULL};
  char dir[64], hostfile[128], text[4096], path[128];
  lu_make_dir(dir, sizeof dir);
  snprintf(hostfile, sizeof hostfile, "%s/hostfile", dir);
  FILE *f = fopen(hostfile, "w");
  fputs("localhost slots=2\n", f);
  fclose(f);
  char *argv[] = {acc, "launch", "--mpirun_hostfile", hostfile, "--num_processes", "2",
                  "--mixed_precision", "fp16", helper, "env", dir, NULL};
  lu_run(&r, argv, env);
  CHECK(r.status == 0, "mpirun launch exited %d: %s", r.status, r.err);
  char want[256];
  snprintf(want, sizeof want, "running mpirun --hostfile %s --npernode 2 -n 2 --bind-to socket -x ",
           hostfile);
  CHECK(strstr(r.err, want) != NULL, "command: %s", r.err);
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/env.%d", dir, i);
    lu_read_file(path, text, sizeof text);
    char det[64];
    snprintf(det, sizeof det, "openmpi %d/2 local %d/2 machines 1", i, i);
    expect_var(text, "detected", det, i);
    expect_var(text, "ACCELERATE_MIXED_PRECISION", "fp16", i);
    expect_var(text, "ACCELERATE_RUN_ID", "<unset>", i);
  }
  lu_remove_dir(dir);
  char *argv2[] = {acc, "launch", "--use_mpi", "--num_processes", "2", helper, "fail", "1", "3", NULL};
  lu_run(&r, argv2, env);
  CHECK(r.status == 3, "mpirun failure status %d", r.status);
  CHECK(strstr(r.err, "running mpirun -n 2 -x ") != NULL, "command: %s", r.err);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_launch_cli ACCELERATE HELPER\n");
    return 2;
  }
  acc = argv[1];
  helper = argv[2];
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  test_env();
  test_ports_and_gpus();
  test_output();
  test_rank_filter();
  test_restarts();
  test_usage();
  CHECK(lu_no_leftovers(), "a process was left behind");
  test_mpirun();
  (void)lu_no_leftovers(); /* reap what mpirun's own teardown orphaned: not the launcher's */
  lu_remove_dir(lu_capdir);
  return acc_test_finish("test_launch_cli");
}
