/* Environment detection, the state singleton, and single-process behaviour of process control. */
#include <stdlib.h>

#include "acc_test.h"
#include "state/state.h"

static const char *all_vars[] = {
    "ACCELERATE_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NNODES",
    "ACCELERATE_NUM_MACHINES", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_DEBUG_MODE",
    "ACCELERATE_TIMEOUT", "ACCELERATE_BACKEND", "ACCELERATE_USE_CPU", NULL};

static void clear_env(void) {
  for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
}

static void expect(const char *launcher, int rank, int size, int lrank, int lsize, int machines) {
  acc__env_info e;
  acc_result rc = acc__detect_env(&e);
  CHECK(rc == ACC_OK, "%s: %s", launcher, acc_last_error());
  if (rc != ACC_OK) return;
  CHECK(strcmp(e.launcher, launcher) == 0, "launcher %s, expected %s", e.launcher, launcher);
  CHECK(e.rank == rank && e.size == size, "%s: rank %d/%d, expected %d/%d", launcher, e.rank, e.size, rank, size);
  CHECK(e.local_rank == lrank && e.local_size == lsize, "%s: local %d/%d, expected %d/%d", launcher,
        e.local_rank, e.local_size, lrank, lsize);
  CHECK(e.num_machines == machines, "%s: machines %d, expected %d", launcher, e.num_machines, machines);
  CHECK(e.job_id[0] != '\0', "%s: empty job id", launcher);
}

static void test_detection(void) {
  clear_env();
  expect("none", 0, 1, 0, 1, 1);

  setenv("ACCELERATE_RUN_ID", "abc", 1);
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  expect("accelerate", 3, 8, 1, 2, 4);
  clear_env();

  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("TORCHELASTIC_RUN_ID", "r1", 1);
  expect("torchrun", 1, 2, 1, 2, 1);
  clear_env();

  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  expect("openmpi", 5, 6, 2, 3, 2);
  clear_env();

  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "4", 1);
  setenv("MPI_LOCALRANKID", "0", 1);
  setenv("MPI_LOCALNRANKS", "4", 1);
  expect("mpich", 0, 4, 0, 4, 1);
  clear_env();

  setenv("MV2_COMM_WORLD_RANK", "2", 1);
  setenv("MV2_COMM_WORLD_SIZE", "3", 1);
  setenv("MV2_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("MV2_COMM_WORLD_LOCAL_SIZE", "3", 1);
  expect("mvapich", 2, 3, 2, 3, 1);
  clear_env();

  setenv("SLURM_PROCID", "7", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "3", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)", 1);
  expect("slurm", 7, 8, 3, 4, 2);
  clear_env();
}

static void expect_error(const char *var_in_message) {
  acc__env_info e;
  acc_result rc = acc__detect_env(&e);
  CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "expected an error naming %s, got %s", var_in_message,
        acc_result_string(rc));
  CHECK(strstr(acc_last_error(), var_in_message) != NULL, "message lacks %s: %s", var_in_message,
        acc_last_error());
  clear_env();
}

static void test_bad_env(void) {
  clear_env();
  setenv("ACCELERATE_RUN_ID", "x", 1);
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "2", 1);
  expect_error("RANK=2");

  setenv("OMPI_COMM_WORLD_RANK", "zero", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  expect_error("OMPI_COMM_WORLD_RANK");

  setenv("PMI_RANK", "0", 1);
  expect_error("PMI_SIZE");

  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "3", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  expect_error("LOCAL_RANK=3");

  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "-4", 1);
  expect_error("WORLD_SIZE");

  /* regression for red-team D3: values past INT_MAX are range errors, never truncated */
  setenv("ACCELERATE_RUN_ID", "x", 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4294967298", 1);
  expect_error("WORLD_SIZE=4294967298 is out of range: expected 1..1048576");
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_NTASKS_PER_NODE", "2147483650", 1);
  expect_error("SLURM_NTASKS_PER_NODE=2147483650 is out of range");
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_TASKS_PER_NODE", "x(2)", 1);
  expect_error("SLURM_TASKS_PER_NODE=\"x(2)\": cannot read the tasks per node");
  setenv("ACCELERATE_RUN_ID", "x", 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("ACCELERATE_NUM_MACHINES", "0", 1);
  expect_error("ACCELERATE_NUM_MACHINES=0 is out of range");
}

static int ran;
static void mark(void *p) { (void)p; ran++; }

static void test_single_state(void) {
  clear_env();
  setenv("ACCELERATE_MIXED_PRECISION", "bf16", 1);
  acc_state *st = NULL, *again = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  CHECK(acc_state_num_processes(st) == 1, "num_processes");
  CHECK(acc_state_is_main_process(st) && acc_state_is_local_main_process(st) && acc_state_is_last_process(st), "roles");
  CHECK(acc_state_distributed_type(st) == ACC_DISTRIBUTED_NO, "type");
  CHECK(acc_state_mixed_precision(st) == ACC_PRECISION_BF16, "mixed precision from env");
  CHECK(strstr(acc_state_describe(st), "Distributed environment: NO\nNum processes: 1\n") != NULL,
        "describe: %s", acc_state_describe(st));
  CHECK(strstr(acc_state_describe(st), "Mixed precision type: bf16") != NULL, "describe mp");

  /* Same options: same state. Conflicting options: clear error. */
  acc_state_options o = ACC_STATE_OPTIONS_INIT;
  o.mixed_precision = ACC_PRECISION_BF16;
  CHECK_OK(acc_state_create(&again, &o));
  CHECK(again == st, "singleton returns the same state");
  o.mixed_precision = ACC_PRECISION_FP16;
  acc_state *bad = NULL;
  CHECK_ERR(acc_state_create(&bad, &o), ACC_ERR_INVALID_USAGE, "cannot change mixed_precision from 'bf16' to 'fp16'");
  acc_state_options zero;
  memset(&zero, 0, sizeof zero);
  CHECK_ERR(acc_state_create(&bad, &zero), ACC_ERR_INVALID_USAGE, "ACC_STATE_OPTIONS_INIT");

  /* Process control is a no-op or runs locally with one process. */
  CHECK_OK(acc_wait_for_everyone(st));
  acc_result rc = ACC_OK;
  int body = 0;
  ACC_MAIN_PROCESS_FIRST(st, rc) { body++; }
  CHECK(rc == ACC_OK && body == 1, "main_process_first body ran %d times, rc %d", body, rc);
  ran = 0;
  CHECK(acc_on_main_process(st, mark, NULL) == 1, "on_main");
  CHECK(acc_on_last_process(st, mark, NULL) == 1, "on_last");
  CHECK(acc_on_process(st, 3, mark, NULL) == 1, "on_process runs everything when not distributed");
  CHECK(ran == 3, "ran %d", ran);

  acc_split s;
  CHECK_OK(acc_split_between_processes(st, 17, 1, &s));
  CHECK(s.start == 0 && s.count == 17 && s.padded_count == 17, "split single: %zu %zu %zu", s.start, s.count, s.padded_count);

  int trig = -1;
  CHECK_OK(acc_check_trigger(st, &trig));
  CHECK(trig == 0, "trigger starts clear");
  CHECK_OK(acc_set_trigger(st));
  CHECK_OK(acc_check_trigger(st, &trig));
  CHECK(trig == 1, "trigger seen");
  CHECK_OK(acc_check_trigger(st, &trig));
  CHECK(trig == 0, "trigger reset after check");

  float a[3] = {1, 2, 3}, b[3];
  CHECK_OK(acc_all_reduce(st, a, b, 3, ACC_F32, ACC_MEAN));
  CHECK(b[0] == 1 && b[2] == 3, "single all_reduce copies");
  CHECK_ERR(acc_broadcast(st, a, 3, ACC_F32, 1), ACC_ERR_INVALID_ARGUMENT, "root 1");
  CHECK_ERR(acc_all_reduce(st, a, b, 3, (acc_dtype)42, ACC_SUM), ACC_ERR_INVALID_ARGUMENT, "dtype 42");
  void *blob = NULL;
  size_t *sizes = NULL;
  CHECK_OK(acc_all_gather_bytes(st, "hello", 5, &blob, &sizes));
  CHECK(sizes && sizes[0] == 5 && blob && memcmp(blob, "hello", 5) == 0, "gather bytes single");
  acc_free(blob);
  acc_free(sizes);

  acc_state_destroy(again);
  CHECK(acc_state_get() == st, "state alive while referenced");
  acc_state_destroy(st);
  CHECK(acc_state_get() == NULL, "state gone after last destroy");
  CHECK_ERR(acc_barrier(st == NULL ? NULL : NULL), ACC_ERR_INVALID_ARGUMENT, "NULL");
  clear_env();
}

int main(void) {
  test_detection();
  test_bad_env();
  test_single_state();
  return acc_test_finish("unit_env");
}
