/* Slurm's launch environment: an srun task (its step's own counts and local ids, ahead of the
 * PMI variables Slurm's mpi plugins add) and the batch step (a job script running the program
 * itself, which is one process whatever SLURM_NTASKS says). See docs/slurm-and-mpi.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "state/mpi_pick.h"
#include "state/slurm.h"
#include "state/state.h"

/* SLURM_STEP_ID of a real srun step: a number below Slurm's reserved ids (0xfffffff0 and up:
 * the batch script, the extern and interactive steps, which newer Slurm versions may export). */
static int real_step(const char *v) {
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  unsigned long long id = strtoull(v, &end, 10);
  if (end == v || *end || errno) return 0; /* "batch", "extern", "interactive" */
  return id < 0xfffffff0ull;
}

int acc__slurm_is_task(void) {
  const char *procid = acc__env_str("SLURM_PROCID");
  if (!procid || !*procid || !real_step(acc__env_str("SLURM_STEP_ID"))) return 0;
  /* A launcher running inside the step started this process: Open MPI's (OMPI_COMM_WORLD_*, its
   * daemons are srun tasks), Hydra's (MPI_LOCALRANKID, same), MVAPICH's. Their ranks win. */
  static const char *const inner[] = {"OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID",
                                      "MV2_COMM_WORLD_RANK", NULL};
  for (int i = 0; inner[i]; i++) {
    const char *v = acc__env_str(inner[i]);
    if (v && *v) return 0;
  }
  return 1;
}

int acc__slurm_batch_step(void) {
  const char *procid = acc__env_str("SLURM_PROCID");
  return procid && *procid && !real_step(acc__env_str("SLURM_STEP_ID"));
}

/* The task count of node `node` in a Slurm list "2(x3),1": 0 with *out set, or an error naming
 * the variable. *nodes gets the number of nodes the list covers. */
static acc_result tasks_on_node(const char *name, const char *v, long node, long *out, long *nodes) {
  const char *p = v;
  long seen = 0;
  *out = 0;
  while (*p) {
    char *end;
    errno = 0;
    long n = strtol(p, &end, 10);
    if (end == p || n <= 0 || errno) goto bad;
    long rep = 1;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x') goto bad;
      errno = 0;
      rep = strtol(p + 2, &end, 10);
      if (end == p + 2 || rep <= 0 || errno || *end != ')') goto bad;
      p = end + 1;
    }
    if (node >= seen && node < seen + rep) *out = n;
    seen += rep;
    if (*p == ',') p++;
    else if (*p) goto bad;
  }
  if (seen == 0) goto bad;
  *nodes = seen;
  if (*out == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "environment variable %s=\"%s\" lists %ld node%s but SLURM_NODEID=%ld", name,
                      v, seen, seen == 1 ? "" : "s", node);
  return ACC_OK;
bad:
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "environment variable %s=\"%s\": cannot read the tasks per node "
                    "(expected counts like \"4(x2),3\")", name, v);
}

acc_result acc__slurm_detect(long *rank, long *size, long *lrank, long *lsize, long *machines) {
  int set = 0;
  ACC_CHECK(acc__env_int("SLURM_PROCID", rank, &set));
  /* The step's own task count: SLURM_NTASKS is the job's, which an srun -n 1 inside a larger
   * allocation does not use. */
  const char *size_name = "SLURM_STEP_NUM_TASKS";
  ACC_CHECK(acc__env_int(size_name, size, &set));
  if (!set) {
    size_name = "SLURM_NTASKS";
    ACC_CHECK(acc__env_int(size_name, size, &set));
  }
  if (!set)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "the slurm launch environment is incomplete: "
                      "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set");
  if (*rank >= *size)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "SLURM_PROCID=%ld is not a valid rank for %s=%ld (expected 0..%ld)", *rank,
                      size_name, *size, *size - 1);
  ACC_CHECK(acc__env_int("SLURM_LOCALID", lrank, &set));
  if (!set)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "the slurm launch environment is incomplete: SLURM_LOCALID is not set");
  long node = 0, nodes = 0;
  ACC_CHECK(acc__env_int("SLURM_NODEID", &node, &set));
  /* Tasks on this node: this node's entry of the step's list, then of the job's list. */
  static const char *const lists[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", NULL};
  *lsize = 0;
  for (int i = 0; lists[i] && *lsize == 0; i++) {
    const char *v = acc__env_str(lists[i]);
    if (v && *v) ACC_CHECK(tasks_on_node(lists[i], v, node, lsize, &nodes));
  }
  if (*lsize == 0) {
    ACC_CHECK(acc__env_int("SLURM_NTASKS_PER_NODE", lsize, &set));
    if (!set) {
      long nn = 1;
      ACC_CHECK(acc__env_int("SLURM_NNODES", &nn, &set));
      *lsize = (set && nn > 0) ? *size / nn : *size;
      if (*lsize < 1) *lsize = 1;
    }
  }
  if (*lsize > *size)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "Slurm says %ld tasks run on this node (SLURM_NODEID=%ld) but the step has "
                      "%ld (%s)", *lsize, node, *size, size_name);
  if (*lrank >= *lsize)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "SLURM_LOCALID=%ld is not a valid local rank for %ld tasks on this node "
                      "(expected 0..%ld)", *lrank, *lsize, *lsize - 1);
  long step_nodes = 0;
  ACC_CHECK(acc__env_int("SLURM_STEP_NUM_NODES", &step_nodes, &set));
  if (set) *machines = step_nodes;
  else if (nodes > 0) *machines = nodes;
  else *machines = (*size + *lsize - 1) / *lsize;
  return ACC_OK;
}

const char *acc__slurm_pmi(void) {
  const char *v = acc__env_str("PMIX_RANK");
  if (v && *v) return "pmix";
  v = acc__env_str("PMI_RANK");
  if (v && *v) return "pmi2";
  return "none";
}

int acc__slurm_store_bootstrap(const acc__env_info *e) {
  if (strcmp(e->launcher, "slurm") != 0 || e->num_machines < 2) return 0;
  const char *why = "";
  return acc__mpi_flavor(e, &why) == NULL; /* no PMI: srun --mpi=none */
}

int acc__slurm_uniform_tasks(void) {
  const char *v = acc__env_str("SLURM_STEP_TASKS_PER_NODE");
  if (!v || !*v) v = acc__env_str("SLURM_TASKS_PER_NODE");
  return v && *v && !strchr(v, ',');
}

void acc__slurm_store_host(char *buf, size_t cap) {
  const char *v = acc__env_str("MASTER_ADDR");
  if (v && *v) {
    snprintf(buf, cap, "%s", v);
    return;
  }
  v = acc__env_str("SLURM_STEP_NODELIST");
  if (!v || !*v) v = acc__env_str("SLURM_JOB_NODELIST");
  if (!v || !*v) v = acc__env_str("SLURM_NODELIST");
  if (!v || !*v) {
    snprintf(buf, cap, "127.0.0.1");
    return;
  }
  /* the first host of a Slurm host list: "n[01-04,07],m7" -> "n01" */
  size_t o = 0, i = 0;
  while (v[i] && v[i] != ',' && v[i] != '[' && o + 1 < cap) buf[o++] = v[i++];
  if (v[i] == '[') {
    i++;
    while (v[i] && v[i] != '-' && v[i] != ',' && v[i] != ']' && o + 1 < cap) buf[o++] = v[i++];
  }
  buf[o] = 0;
}
