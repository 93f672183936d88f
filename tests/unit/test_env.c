/* Environment detection, the state singleton, and single-process behaviour of process control. */
#include <stdlib.h>

#include "acc_test.h"
#include "state/mpi_pick.h"
#include "state/state.h"

static const char *all_vars[] = {
    "ACCELERATE_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NNODES",
    "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_NODEID", "SLURM_STEP_NUM_NODES", "SLURM_JOB_ID",
    "PMI_FD", "PMI_JOBID", "PMIX_RANK", "PMIX_NAMESPACE", "ACCELERATE_MPI_FLAVOR",
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
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "3", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)", 1);
  expect("slurm", 7, 8, 3, 4, 2);
  clear_env();
}

/* One row: the environment a launcher gives a process, and what detection must make of it. */
typedef struct env_case {
  const char *what;
  const char *vars[24]; /* "NAME=value", NULL-terminated */
  const char *launcher, *pmi;
  int rank, size, lrank, lsize, machines, local_known;
  const char *warning; /* substring of e.warning, or NULL for none */
} env_case;

/* The environments srun, sbatch, Hydra and Open MPI really set (seen on Slurm 22.05 from Debian,
 * MPICH 4.0 and Open MPI 4.1), trimmed to the variables detection reads. */
static const env_case cases[] = {
    {"srun -n 2 --mpi=none",
     {"SLURM_JOB_ID=3", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NODEID=0",
      "SLURM_NTASKS=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_NUM_NODES=1",
      "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_TASKS_PER_NODE=2", NULL},
     "slurm", "none", 1, 2, 1, 2, 1, 1, NULL},
    {"srun -n 2 --mpi=pmi2: Slurm wins over PMI_RANK",
     {"SLURM_JOB_ID=3", "SLURM_STEP_ID=1", "SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NODEID=0",
      "SLURM_NTASKS=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_TASKS_PER_NODE=2", "PMI_RANK=1",
      "PMI_SIZE=2", "PMI_FD=11", "PMI_JOBID=3.1", NULL},
     "slurm", "pmi2", 1, 2, 1, 2, 1, 1, NULL},
    {"srun -N 2 -n 3 --mpi=pmi2 on the second node: its own local size, not everyone",
     {"SLURM_JOB_ID=3", "SLURM_STEP_ID=2", "SLURM_PROCID=2", "SLURM_LOCALID=0", "SLURM_NODEID=1",
      "SLURM_NTASKS=3", "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_NUM_NODES=2",
      "SLURM_STEP_TASKS_PER_NODE=2,1", "PMI_RANK=2", "PMI_SIZE=3", "PMI_FD=11", NULL},
     "slurm", "pmi2", 2, 3, 0, 1, 2, 1, NULL},
    {"srun -n 2 --mpi=pmix",
     {"SLURM_JOB_ID=3", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
      "SLURM_NTASKS=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_STEP_TASKS_PER_NODE=2", "PMIX_RANK=0",
      "PMIX_NAMESPACE=slurm.pmix.3.0", NULL},
     "slurm", "pmix", 0, 2, 0, 2, 1, 1, NULL},
    {"srun -n 1 inside a 4-task allocation: the step's count, not the job's",
     {"SLURM_JOB_ID=3", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
      "SLURM_NTASKS=4", "SLURM_STEP_NUM_TASKS=1", "SLURM_STEP_TASKS_PER_NODE=1",
      "SLURM_TASKS_PER_NODE=4", NULL},
     "slurm", "none", 0, 1, 0, 1, 1, 1, NULL},
    {"sbatch -n 2, the program run by the script itself: one process, a warning naming srun",
     {"SLURM_JOB_ID=4", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=2",
      "SLURM_NNODES=1", "SLURM_TASKS_PER_NODE=2", NULL},
     "slurm-batch", "none", 0, 1, 0, 1, 1, 1,
     "(SLURM_NTASKS=2, no SLURM_STEP_ID); start the program with `srun` to run it as 2 tasks"},
    {"a batch step that names itself (SLURM_STEP_ID=batch)",
     {"SLURM_JOB_ID=4", "SLURM_STEP_ID=batch", "SLURM_PROCID=0", "SLURM_LOCALID=0",
      "SLURM_NTASKS=2", NULL},
     "slurm-batch", "none", 0, 1, 0, 1, 1, 1, "Slurm job 4, not an srun task (SLURM_NTASKS=2, SLURM_STEP_ID=batch)"},
    {"the extern step by number (0xfffffffc)",
     {"SLURM_JOB_ID=4", "SLURM_STEP_ID=4294967292", "SLURM_PROCID=0", "SLURM_LOCALID=0",
      "SLURM_NTASKS=2", NULL},
     "slurm-batch", "none", 0, 1, 0, 1, 1, 1, "SLURM_NTASKS=2"},
    {"sbatch -n 1: one process, nothing to warn about",
     {"SLURM_JOB_ID=4", "SLURM_PROCID=0", "SLURM_NTASKS=1", NULL},
     "slurm-batch", "none", 0, 1, 0, 1, 1, 1, NULL},
    {"Hydra (mpirun.mpich) inside an allocation: Hydra's ranks, not its proxy's srun step",
     {"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NTASKS=1",
      "SLURM_STEP_NUM_TASKS=1", "PMI_RANK=3", "PMI_SIZE=4", "MPI_LOCALRANKID=1",
      "MPI_LOCALNRANKS=2", "PMI_KVSNAME=kvs_1", NULL},
     "mpich", "none", 3, 4, 1, 2, 2, 1, NULL},
    {"Open MPI's mpirun inside an allocation (its daemons are srun tasks)",
     {"SLURM_JOB_ID=5", "SLURM_STEP_ID=1", "SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NTASKS=2",
      "SLURM_STEP_NUM_TASKS=2", "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
      "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL},
     "openmpi", "none", 3, 4, 1, 2, 2, 1, NULL},
    {"accelerate launch under srun --ntasks-per-node=1 (the per-node recipe)",
     {"SLURM_JOB_ID=6", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NTASKS=1",
      "SLURM_STEP_NUM_TASKS=1", "PMI_RANK=0", "PMI_SIZE=1", "ACCELERATE_RUN_ID=r", "RANK=1",
      "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", NULL},
     "accelerate", "none", 1, 2, 1, 2, 1, 1, NULL},
    {"a PMI without local ids (no MPI_LOCALRANKID): locality unknown, never 'all here'",
     {"PMI_RANK=1", "PMI_SIZE=4", "PMI_FD=9", NULL}, "mpich", "none", 1, 4, 1, 4, 1, 0, NULL},
};

/* The MPI module each row's launcher can start (NULL: none), in the order of cases[]. */
static const char *const flavors[] = {NULL,      "mpich",   "mpich",   "openmpi", NULL,
                                      NULL,      NULL,      NULL,      NULL,      "mpich",
                                      "openmpi", NULL,      "mpich"};

static void test_detection_table(void) {
  CHECK(sizeof flavors / sizeof flavors[0] == sizeof cases / sizeof cases[0], "one flavor per case");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const env_case *c = &cases[i];
    clear_env();
    for (int v = 0; c->vars[v]; v++) CHECK(putenv((char *)c->vars[v]) == 0, "putenv");
    acc__env_info e;
    acc_result rc = acc__detect_env(&e);
    CHECK(rc == ACC_OK, "%s: %s", c->what, acc_last_error());
    if (rc != ACC_OK) continue;
    CHECK(strcmp(e.launcher, c->launcher) == 0, "%s: launcher %s, expected %s", c->what, e.launcher,
          c->launcher);
    CHECK(strcmp(e.pmi, c->pmi) == 0, "%s: pmi %s, expected %s", c->what, e.pmi, c->pmi);
    CHECK(e.rank == c->rank && e.size == c->size, "%s: rank %d of %d, expected %d of %d", c->what,
          e.rank, e.size, c->rank, c->size);
    CHECK(e.local_rank == c->lrank && e.local_size == c->lsize,
          "%s: local %d of %d, expected %d of %d", c->what, e.local_rank, e.local_size, c->lrank,
          c->lsize);
    CHECK(e.num_machines == c->machines, "%s: %d machines, expected %d", c->what, e.num_machines,
          c->machines);
    CHECK(e.local_known == c->local_known, "%s: local_known %d", c->what, e.local_known);
    if (c->warning)
      CHECK(strstr(e.warning, c->warning) != NULL, "%s: warning '%s' lacks '%s'", c->what,
            e.warning, c->warning);
    else
      CHECK(e.warning[0] == '\0', "%s: unexpected warning '%s'", c->what, e.warning);
    const char *why = NULL, *fl = acc__mpi_flavor(&e, &why);
    CHECK((fl == NULL) == (flavors[i] == NULL) && (!fl || strcmp(fl, flavors[i]) == 0),
          "%s: MPI flavor %s, expected %s (%s)", c->what, fl ? fl : "none",
          flavors[i] ? flavors[i] : "none", why);
    /* The override wins; a bad value is an error naming it (no module is loaded either way). */
    setenv("ACCELERATE_MPI_FLAVOR", "openmpi", 1);
    fl = acc__mpi_flavor(&e, &why);
    CHECK(fl && strcmp(fl, "openmpi") == 0, "%s: ACCELERATE_MPI_FLAVOR ignored", c->what);
    unsetenv("ACCELERATE_MPI_FLAVOR");
  }
  clear_env();
  /* srun --mpi=none has no MPI to start: the backend says which --mpi to use, loads nothing */
  for (int v = 0; cases[0].vars[v]; v++) putenv((char *)cases[0].vars[v]);
  acc__env_info e;
  REQUIRE_OK(acc__detect_env(&e));
  const acc__module_ops *mod = NULL;
  CHECK_ERR(acc__mpi_module_for(&e, &mod), ACC_ERR_NOT_SUPPORTED, "--mpi=pmix");
  setenv("ACCELERATE_MPI_FLAVOR", "lam", 1);
  CHECK_ERR(acc__mpi_module_for(&e, &mod), ACC_ERR_INVALID_ARGUMENT, "ACCELERATE_MPI_FLAVOR=\"lam\"");
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
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_NTASKS_PER_NODE", "2147483650", 1);
  expect_error("SLURM_NTASKS_PER_NODE=2147483650 is out of range");
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_TASKS_PER_NODE", "x(2)", 1);
  expect_error("SLURM_TASKS_PER_NODE=\"x(2)\": cannot read the tasks per node");
  /* the step's own list, malformed or too short for this node */
  static const char *const bad_lists[][3] = {
      {"2(x2", "0", "SLURM_STEP_TASKS_PER_NODE=\"2(x2\": cannot read"},
      {"2(y2)", "0", "SLURM_STEP_TASKS_PER_NODE=\"2(y2)\": cannot read"},
      {"2,,1", "0", "SLURM_STEP_TASKS_PER_NODE=\"2,,1\": cannot read"},
      {"2(x2)", "2", "SLURM_STEP_TASKS_PER_NODE=\"2(x2)\" lists 2 nodes but SLURM_NODEID=2"},
  };
  for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_NODEID", bad_lists[i][1], 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", bad_lists[i][0], 1);
    expect_error(bad_lists[i][2]);
  }
  /* an srun task without SLURM_LOCALID; a rank past the step's size */
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  expect_error("SLURM_LOCALID is not set");
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  expect_error("SLURM_PROCID=2 is not a valid rank for SLURM_STEP_NUM_TASKS=2");
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
  test_detection_table();
  test_bad_env();
  test_single_state();
  return acc_test_finish("unit_env");
}
