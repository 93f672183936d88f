/* Several machines without MPI (docs/multi-machine.md): a process joins the job's rendezvous
 * store at MASTER_ADDR:MASTER_PORT, hosted by machine 0's `accelerate launch`, or by rank 0 itself
 * when the job was started from torchrun's environment without our launcher, and waits until
 * every process joined. The gloo module then bootstraps through the same store.
 * (ACCELERATE_BACKEND=gloo on one machine works the same way, rank 0 hosting the store.) */
#include <stdio.h>
#include <string.h>

#include "backend/store.h"
#include "core/env.h"
#include "core/log.h"
#include "state/join.h"
#include "state/slurm.h"

static acc__store *g_store;
static acc__store_server *g_server;
static int g_size;
static double g_timeout;
static char g_job_id[160];
static int g_machine = -1;

static acc_result rdzv_timeout(double *out) {
  int set = 0;
  *out = 60.0;
  return acc__env_rdzv_timeout(out, &set, NULL);
}

acc_result acc__state_join(const acc__env_info *e, acc__proc_info *info) {
  double timeout;
  ACC_CHECK(rdzv_timeout(&timeout));
  char secret[256];
  ACC_CHECK(acc__store_secret(secret, sizeof secret));
  const char *host = acc__env_str("MASTER_ADDR");
  if (!host || !*host) host = "127.0.0.1";
  long port = 29500, machine = -1;
  int set = 0, ours = strcmp(e->launcher, "accelerate") == 0;
  int slurm = acc__slurm_store_bootstrap(e); /* srun --mpi=none across nodes */
  static char slurm_host[256], slurm_run[96];
  if (slurm) {
    acc__slurm_store_host(slurm_host, sizeof slurm_host);
    host = slurm_host;
  }
  ACC_CHECK(acc__env_int("MASTER_PORT", &port, &set));
  /* torchrun's own agent listens on MASTER_PORT: its processes use the next port */
  const char *te = acc__env_str("TORCHELASTIC_RUN_ID");
  if (!ours && te && *te) port++;
  ACC_CHECK(acc__env_int(ours ? "ACCELERATE_MACHINE_RANK" : slurm ? "SLURM_NODEID" : "GROUP_RANK",
                         &machine, &set));
  if (!set) machine = e->rank / e->local_size;
  const char *run_id = acc__env_str("ACCELERATE_RDZV_ID");
  if ((!run_id || !*run_id) && te && *te) run_id = te;
  if ((!run_id || !*run_id) && slurm) { /* one store per job step */
    const char *j = acc__env_str("SLURM_JOB_ID"), *st = acc__env_str("SLURM_STEP_ID");
    snprintf(slurm_run, sizeof slurm_run, "slurm-%s.%s", j ? j : "x", st ? st : "x");
    run_id = slurm_run;
  }
  if (!run_id || !*run_id) run_id = "default";
  /* A restarted group (accelerate launch --max_restarts across machines): this attempt's keys
   * live under "r<attempt>/", apart from those of the attempts before it. */
  long attempt = 0;
  if (ours) ACC_CHECK(acc__env_int("ACCELERATE_RESTART_COUNT", &attempt, &set));
  acc__store_hello h = {run_id, secret, ACC_STORE_PROCESS, (int)machine, e->num_machines,
                        e->size, e->rank, (int)attempt, 0};
  if (!(ours && e->num_machines > 1) && e->rank == 0) {
    /* no launcher hosts it (torchrun's environment, or ACCELERATE_BACKEND=gloo on one machine):
     * rank 0 hosts the store for the job's lifetime */
    ACC_CHECK(acc__store_server_start(&g_server, NULL, (int)port, &h));
  }
  double t0 = acc__now();
  acc_result rc = acc__store_connect(&g_store, host, (int)port, &h, timeout);
  if (rc != ACC_OK) goto fail;
  if (attempt > 0) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "r%ld/", attempt);
    if ((rc = acc__store_set_prefix(g_store, prefix)) != ACC_OK) goto fail;
  }
  int64_t n = 0;
  if ((rc = acc__store_add(g_store, "acc/joined", 1, &n)) != ACC_OK) goto fail;
  if (n == e->size && (rc = acc__store_set(g_store, "acc/all-joined", "1", 1)) != ACC_OK) goto fail;
  double left = timeout - (acc__now() - t0);
  rc = acc__store_get(g_store, "acc/all-joined", NULL, NULL, left > 0.1 ? left : 0.1);
  if (rc == ACC_ERR_TIMEOUT) {
    rc = acc__error(ACC_ERR_TIMEOUT,
                    "not every process joined the rendezvous store at %s:%ld within %.0f s "
                    "(ACCELERATE_RDZV_TIMEOUT): %d processes on %d machines were expected; is "
                    "every machine's launcher running with the same --num_processes and "
                    "--num_machines?",
                    host, port, timeout, e->size, e->num_machines);
    goto fail;
  }
  if (rc != ACC_OK) goto fail;
  acc__log(ACC_LOG_DEBUG, "joined the group: rank %d of %d, machine %ld of %d, in %.1f ms",
           e->rank, e->size, machine, e->num_machines, (acc__now() - t0) * 1e3);
  g_size = e->size;
  g_timeout = timeout;
  if (!ours) {
    /* The processes of one machine were not started by one parent (the job id's usual
     * separator): name the machine's shared-memory group after the store's address, which one
     * job holds at a time, and the machine. */
    char raw[512];
    snprintf(raw, sizeof raw, "store-%s-%ld-%s-m%ld", host, port, run_id, machine);
    size_t j = 0;
    for (size_t i = 0; raw[i] && j + 1 < sizeof g_job_id; i++) {
      char c = raw[i];
      int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      g_job_id[j++] = ok ? c : '_';
    }
    g_job_id[j] = 0;
    info->job_id = g_job_id;
  }
  info->store = g_store;
  info->machine_rank = (int)machine;
  g_machine = (int)machine;
  info->num_machines = e->num_machines;
  return ACC_OK;
fail:
  acc__store_close(g_store);
  g_store = NULL;
  if (g_server) acc__store_server_stop(g_server, 0);
  g_server = NULL;
  return rc;
}

acc__store *acc__state_join_store(int *machine_rank) {
  if (machine_rank) *machine_rank = g_store ? g_machine : -1;
  return g_store;
}

void acc__state_leave(void) {
  if (!g_store) return;
  if (g_server) {
    /* rank 0 keeps the store until every process left (bounded) */
    int64_t n = 0;
    if (acc__store_add(g_store, "acc/left", 1, &n) == ACC_OK && n < g_size)
      acc__store_get(g_store, "acc/all-left", NULL, NULL, g_timeout);
  } else {
    int64_t n = 0;
    if (acc__store_add(g_store, "acc/left", 1, &n) == ACC_OK && n == g_size)
      acc__store_set(g_store, "acc/all-left", "1", 1);
  }
  acc_clear_error();
  acc__store_close(g_store);
  g_store = NULL;
  if (g_server) acc__store_server_stop(g_server, 0);
  g_server = NULL;
}
