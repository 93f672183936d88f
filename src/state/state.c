/* Process state: environment detection, the singleton, accessors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/env.h"
#include "core/fs.h"
#include "core/log.h"
#include "backend/hier.h"
#include "backend/module.h"
#include "state/mpi_pick.h"
#include "state/slurm.h"
#include "state/threads.h"
#include "state/join.h"
#include "state/last_words.h"
#include "state/state.h"

static acc_state *g_state;

/* The rank in the library's log lines (core/log.c asks; -1 before a state exists). */
static int state_rank(void) {
  acc_state *st = acc_state_get();
  return st ? acc_state_process_index(st) : -1;
}

acc_result acc__state_check(const acc_state *st, const char *fn) {
  ACC_CHECK(acc__check_handle(st, ACC__HANDLE_STATE, fn));
  return ACC_OK;
}

/* ---- environment detection ---------------------------------------------------------------- */

typedef struct source {
  const char *name;     /* launcher name */
  const char *probe;    /* variable whose presence selects this source */
  const char *rank, *size, *local_rank, *local_size;
} source;

static const source sources[] = {
    {"accelerate", "ACCELERATE_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpich", "PMI_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
     "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"},
    /* the last row: read by state/slurm.c */
    {"slurm", "SLURM_PROCID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

static acc_result env_int_required(const char *launcher, const char *name, long *out) {
  int set = 0;
  ACC_CHECK(acc__env_int(name, out, &set));
  if (!set)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "the %s launch environment is incomplete: %s is not set", launcher, name);
  return ACC_OK;
}

static void sanitize_id(char *dst, size_t cap, const char *src) {
  size_t j = 0;
  for (size_t i = 0; src[i] && j + 1 < cap; i++) {
    char c = src[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    dst[j++] = ok ? c : '_';
  }
  dst[j] = '\0';
}

static void make_job_id(acc__env_info *e) {
  const char *parts[3] = {NULL, NULL, NULL};
  if (strcmp(e->launcher, "accelerate") == 0) {
    parts[0] = acc__env_str("ACCELERATE_RUN_ID");
  } else if (strcmp(e->launcher, "torchrun") == 0) {
    parts[0] = acc__env_str("TORCHELASTIC_RUN_ID");
    parts[1] = acc__env_str("MASTER_PORT");
  } else if (strcmp(e->launcher, "openmpi") == 0) {
    parts[0] = acc__env_str("OMPI_MCA_ess_base_jobid");
    parts[1] = acc__env_str("PMIX_NAMESPACE");
  } else if (strcmp(e->launcher, "slurm") == 0) {
    parts[0] = acc__env_str("SLURM_JOB_ID");
    parts[1] = acc__env_str("SLURM_STEP_ID");
  } else if (strcmp(e->launcher, "mpich") == 0) {
    parts[0] = acc__env_str("PMI_KVSNAME");
  }
  char raw[256];
  /* Processes started together on one machine share their parent (launcher, mpirun's daemon,
   * slurmstepd, torchrun's agent): the parent pid separates concurrent jobs. */
  snprintf(raw, sizeof raw, "%s-%s-%s-%ld", e->launcher, parts[0] ? parts[0] : "x",
           parts[1] ? parts[1] : "x", (long)getppid());
  sanitize_id(e->job_id, sizeof e->job_id, raw);
}

/* The local rank and size when the launcher gives them; otherwise unknown (local_known = 0):
 * never guessed as "every task on this machine". */
static acc_result local_ids(const source *src, long rank, long size, long *lrank, long *lsize,
                            int *known) {
  int rset = 0, sset = 0;
  ACC_CHECK(acc__env_int(src->local_rank, lrank, &rset));
  ACC_CHECK(acc__env_int(src->local_size, lsize, &sset));
  *known = size == 1 || (rset && sset) || strcmp(src->name, "torchrun") == 0 ||
           strcmp(src->name, "accelerate") == 0;
  if (!rset) *lrank = (size == 1) ? 0 : rank;
  if (!sset) *lsize = size;
  return ACC_OK;
}

acc_result acc__detect_env(acc__env_info *e) {
  memset(e, 0, sizeof *e);
  e->size = 1;
  e->local_size = 1;
  e->num_machines = 1;
  e->local_known = 1;
  snprintf(e->launcher, sizeof e->launcher, "none");
  snprintf(e->pmi, sizeof e->pmi, "none");
  const source *src = NULL;
  for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
    const char *v = acc__env_str(sources[i].probe);
    /* An srun task: Slurm's own variables win over the PMI_* of its pmi2 plugin (state/slurm.c). */
    if (strcmp(sources[i].name, "mpich") == 0 && acc__slurm_is_task()) {
      src = &sources[sizeof sources / sizeof sources[0] - 1];
      break;
    }
    if (v && *v) {
      src = &sources[i];
      break;
    }
  }
  if (src && strcmp(src->name, "slurm") == 0 && acc__slurm_batch_step()) {
    /* The job script itself (no srun): one process, whatever SLURM_NTASKS says. */
    long ntasks = 1;
    int set = 0;
    ACC_CHECK(acc__env_int("SLURM_NTASKS", &ntasks, &set));
    snprintf(e->launcher, sizeof e->launcher, "slurm-batch");
    if (set && ntasks > 1) {
      const char *job = acc__env_str("SLURM_JOB_ID"), *step = acc__env_str("SLURM_STEP_ID");
      char stepv[48];
      if (step && *step) snprintf(stepv, sizeof stepv, "SLURM_STEP_ID=%.24s", step);
      else snprintf(stepv, sizeof stepv, "no SLURM_STEP_ID");
      snprintf(e->warning, sizeof e->warning,
               "running as 1 process: this is the batch script of Slurm job %.32s, not an srun "
               "task (SLURM_NTASKS=%ld, %s); start the program with `srun` to run it as %ld tasks",
               job && *job ? job : "?", ntasks, stepv, ntasks);
    }
    make_job_id(e);
    return ACC_OK;
  }
  if (!src) {
    make_job_id(e);
    return ACC_OK;
  }
  snprintf(e->launcher, sizeof e->launcher, "%s", src->name);
  long rank = 0, size = 1, lrank = 0, lsize = 1, machines = 0;
  int set = 0;
  if (strcmp(src->name, "slurm") == 0) {
    ACC_CHECK(acc__slurm_detect(&rank, &size, &lrank, &lsize, &machines));
    snprintf(e->pmi, sizeof e->pmi, "%s", acc__slurm_pmi());
  } else {
    ACC_CHECK(env_int_required(src->name, src->rank, &rank));
    ACC_CHECK(env_int_required(src->name, src->size, &size));
    if (size < 1)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s=%ld: the world size must be at least 1",
                        src->size, size);
    if (rank >= size)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s=%ld is not a valid rank for %s=%ld (expected 0..%ld)", src->rank, rank,
                        src->size, size, size - 1);
    ACC_CHECK(local_ids(src, rank, size, &lrank, &lsize, &e->local_known));
    if (lsize < 1 || lsize > size)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s=%ld is not a valid local world size for world size %ld (expected 1..%ld)",
                        src->local_size, lsize, size, size);
    if (lrank >= lsize)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s=%ld is not a valid local rank for local world size %ld (expected 0..%ld)",
                        src->local_rank, lrank, lsize, lsize - 1);
  }
  long acc_machines = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_NUM_MACHINES", &acc_machines, &set));
  if (set && acc_machines >= 1) machines = acc_machines;
  if (machines < 1) machines = (size + lsize - 1) / lsize;
  e->rank = (int)rank;
  e->size = (int)size;
  e->local_rank = (int)lrank;
  e->local_size = (int)lsize;
  e->num_machines = (int)machines;
  make_job_id(e);
  return ACC_OK;
}

/* ---- options ----------------------------------------------------------------------------- */

acc_result acc_mixed_precision_parse(const char *s, acc_mixed_precision *out) {
  if (!s || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_mixed_precision_parse: NULL argument");
  if (strcasecmp(s, "no") == 0) *out = ACC_PRECISION_NO;
  else if (strcasecmp(s, "fp16") == 0) *out = ACC_PRECISION_FP16;
  else if (strcasecmp(s, "bf16") == 0) *out = ACC_PRECISION_BF16;
  else
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "unknown mixed precision mode \"%s\": choose between no, fp16, bf16", s);
  return ACC_OK;
}

typedef struct resolved {
  int cpu, mixed_precision, debug, backend;
  double timeout_s;
} resolved;

static acc_result resolve_options(const acc_state_options *in, resolved *r) {
  acc_state_options o = ACC_STATE_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, in, acc_state_options, ACC_STATE_OPTIONS_VERSION, "acc_state_create");
  r->cpu = o.cpu;
  if (r->cpu == ACC_UNSET) {
    r->cpu = 0; /* a program that asks for a GPU gets one unless --cpu (placement.c) */
    ACC_CHECK(acc__env_bool("ACCELERATE_USE_CPU", &r->cpu, NULL));
  }
  r->mixed_precision = o.mixed_precision;
  if (r->mixed_precision == ACC_UNSET) {
    const char *v = acc__env_str("ACCELERATE_MIXED_PRECISION");
    acc_mixed_precision mp = ACC_PRECISION_NO;
    if (v && *v && acc_mixed_precision_parse(v, &mp) != ACC_OK)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "ACCELERATE_MIXED_PRECISION=\"%s\" is not one of no, fp16, bf16", v);
    r->mixed_precision = (int)mp;
  } else if (r->mixed_precision < 0 || r->mixed_precision > ACC_PRECISION_BF16) {
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "mixed_precision=%d is not an acc_mixed_precision",
                      r->mixed_precision);
  }
  r->debug = o.debug;
  if (r->debug == ACC_UNSET) {
    r->debug = 0;
    ACC_CHECK(acc__env_bool("ACCELERATE_DEBUG_MODE", &r->debug, NULL));
  }
  r->backend = o.backend;
  if (r->backend == ACC_UNSET) {
    r->backend = ACC_BACKEND_AUTO;
    const char *v = acc__env_str("ACCELERATE_BACKEND");
    if (v && *v) {
      if (strcasecmp(v, "auto") == 0) r->backend = ACC_BACKEND_AUTO;
      else if (strcasecmp(v, "single") == 0) r->backend = ACC_BACKEND_SINGLE;
      else if (strcasecmp(v, "shm") == 0) r->backend = ACC_BACKEND_SHM;
      else if (strcasecmp(v, "mpi") == 0) r->backend = ACC_BACKEND_MPI;
      else if (strcasecmp(v, "gloo") == 0) r->backend = ACC_BACKEND_GLOO;
      else if (strcasecmp(v, "hierarchical") == 0) r->backend = ACC_BACKEND_HIERARCHICAL;
      else
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "ACCELERATE_BACKEND=\"%s\" is not one of auto, single, shm, mpi, gloo, "
                          "hierarchical", v);
    }
  }
  r->timeout_s = o.timeout_s;
  if (!(r->timeout_s > 0)) {
    r->timeout_s = 1800.0;
    int set = 0;
    ACC_CHECK(acc__env_double("ACCELERATE_TIMEOUT", &r->timeout_s, &set));
  }
  return ACC_OK;
}

static acc_result check_same(const acc_state *st, const acc_state_options *in, const resolved *r) {
  static const char *hint = "the state already exists; destroy it first (acc_state_destroy) to change it";
  if (in && in->cpu != ACC_UNSET && r->cpu != st->cpu)
    return acc__error(ACC_ERR_INVALID_USAGE, "cannot change cpu from %d to %d: %s", st->cpu, r->cpu, hint);
  if (in && in->mixed_precision != ACC_UNSET && r->mixed_precision != (int)st->mixed_precision)
    return acc__error(ACC_ERR_INVALID_USAGE, "cannot change mixed_precision from '%s' to '%s': %s",
                      acc_mixed_precision_name(st->mixed_precision),
                      acc_mixed_precision_name((acc_mixed_precision)r->mixed_precision), hint);
  if (in && in->debug != ACC_UNSET && r->debug != st->debug)
    return acc__error(ACC_ERR_INVALID_USAGE, "cannot change debug from %d to %d: %s", st->debug,
                      r->debug, hint);
  if (in && in->backend != ACC_UNSET && in->backend != ACC_BACKEND_AUTO && r->backend != st->backend_kind)
    return acc__error(ACC_ERR_INVALID_USAGE, "cannot change the backend from '%s': %s",
                      st->be->ops->name, hint);
  if (in && in->timeout_s > 0 && r->timeout_s != st->timeout_s)
    return acc__error(ACC_ERR_INVALID_USAGE, "cannot change timeout_s from %g to %g: %s",
                      st->timeout_s, r->timeout_s, hint);
  return ACC_OK;
}

static acc_result create_mpi(acc_state *st, const acc__env_info *e, const acc__proc_info *info) {
  const acc__module_ops *mod = NULL;
  acc_result rc = acc__mpi_module_for(e, &mod);
  if (rc != ACC_OK) return acc__error_context(rc, "the MPI backend is needed");
  if (!mod->backend_create)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "the MPI module provides no backend");
  return mod->backend_create(&st->be, info);
}

#define ACC_GLOO_MODULE_HINT                                                                     \
  "install the gloo module libaccelerate-gloo.so in <libdir>/accelerate/ (it is built when "      \
  "libgloo-dev is installed), or set ACCELERATE_MODULE_DIR to the directory that holds it"

/* Several machines without an MPI launcher: join the rendezvous store, then gloo over it. */
static acc_result create_gloo(acc_state *st, const acc__env_info *e, acc__proc_info *info,
                              int hier) {
  const acc__module_ops *mod = NULL;
  acc_result rc = acc__module_load("gloo", ACC_GLOO_MODULE_HINT, &mod);
  if (rc != ACC_OK)
    return acc__error_context(rc, "this job spans %d machines and needs the gloo backend",
                              e->num_machines);
  ACC_CHECK(acc__state_join(e, info));
  rc = hier ? acc__backend_hier_create(&st->be, info, mod->backend_create_group)
            : mod->backend_create(&st->be, info);
  if (rc != ACC_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", acc_last_error());
    acc__state_leave(); /* clears the error */
    return acc__error(rc, "%s", msg);
  }
  return rc;
}

static acc_result create_backend(acc_state *st, const acc__env_info *e) {
  int kind = st->backend_kind;
  int mpi_launcher = strcmp(e->launcher, "openmpi") == 0 || strcmp(e->launcher, "mpich") == 0 ||
                     strcmp(e->launcher, "mvapich") == 0;
  if (e->size == 1) kind = ACC_BACKEND_SINGLE;
  acc__proc_info info = {e->rank, e->size, e->local_rank, e->local_size, e->job_id, st->timeout_s, NULL, 0, 1, 0};
  if (kind == ACC_BACKEND_AUTO) {
    /* Several machines: under an MPI launcher or srun (or a launcher that does not say which
     * tasks share one machine), MPI; otherwise (accelerate launch per machine, torchrun's
     * environment) shm inside each machine and gloo between them. Under an MPI launcher on one
     * machine, MPI is used when the module of its flavor is installed and shared memory
     * otherwise; under srun on one node, shared memory (state/mpi_pick.c). */
    if (e->local_size != e->size || !e->local_known) {
      if (e->local_known && !mpi_launcher && strcmp(e->launcher, "slurm") != 0) {
        /* one process on every machine (as many processes as machines, the same answer on
         * every one): gloo alone; the hierarchical backend would add nothing but its own tag
         * exchange (it does not fold the tags into its data as gloo does) */
        kind = e->num_machines > 1 && e->size == e->num_machines ? ACC_BACKEND_GLOO
                                                                 : ACC_BACKEND_HIERARCHICAL;
      } else if (e->local_known && acc__slurm_store_bootstrap(e)) {
        /* srun --mpi=none across nodes (ecosystem 4, D10): the store and gloo, from Slurm's
         * variables; hierarchical when every node runs as many tasks */
        kind = acc__slurm_uniform_tasks() ? ACC_BACKEND_HIERARCHICAL : ACC_BACKEND_GLOO;
      } else {
        kind = ACC_BACKEND_MPI;
        if (!e->local_known) {
          const acc__module_ops *mod = NULL;
          if (acc__mpi_module_for(e, &mod) != ACC_OK)
            return acc__error_context(
                ACC_ERR_NOT_SUPPORTED,
                "the %s launch environment does not say which of the %d tasks share this machine "
                "(MPI_LOCALRANKID, MPI_LOCALNRANKS are not set), so the shared-memory backend "
                "cannot be chosen and the MPI backend is needed; set ACCELERATE_BACKEND=shm if "
                "every task runs on this machine",
                e->launcher, e->size);
        }
      }
    } else if (mpi_launcher) {
      const acc__module_ops *mod = NULL;
      kind = acc__mpi_module_for(e, &mod) == ACC_OK ? ACC_BACKEND_MPI : ACC_BACKEND_SHM;
      acc_clear_error();
    } else kind = ACC_BACKEND_SHM;
  }
  switch (kind) {
    case ACC_BACKEND_SINGLE:
      if (e->size != 1)
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "the single-process backend was requested but the job has %d processes",
                          e->size);
      return acc__backend_single_create(&st->be);
    case ACC_BACKEND_SHM:
      if (e->local_size != e->size)
        return acc__error(ACC_ERR_NOT_SUPPORTED,
                          "the shared-memory backend works on one machine, but this job has %d "
                          "processes with %d on this machine (%d machines): use the MPI backend "
                          "(install the MPI module and launch under mpirun)",
                          e->size, e->local_size, e->num_machines);
      return acc__backend_shm_create(&st->be, &info);
    case ACC_BACKEND_MPI:
      return create_mpi(st, e, &info);
    case ACC_BACKEND_GLOO:
    case ACC_BACKEND_HIERARCHICAL:
      if (mpi_launcher || (strcmp(e->launcher, "slurm") == 0 && !acc__slurm_store_bootstrap(e)))
        return acc__error(ACC_ERR_NOT_SUPPORTED,
                          "the gloo backend joins through MASTER_ADDR/MASTER_PORT (accelerate "
                          "launch per machine, torchrun's environment, srun --mpi=none), not "
                          "under %s%s",
                          e->launcher, strcmp(e->launcher, "slurm") == 0 ? " with a PMI" : "");
      if (kind == ACC_BACKEND_HIERARCHICAL && e->num_machines < 2)
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "the hierarchical backend needs several machines; this job runs on one "
                          "(use shm or gloo)");
      return create_gloo(st, e, &info, kind == ACC_BACKEND_HIERARCHICAL);
  }
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "unknown backend kind %d", kind);
}

static void build_describe(acc_state *st) {
  char backend[64] = "";
  if (st->type != ACC_DISTRIBUTED_NO) snprintf(backend, sizeof backend, "  Backend: %s", st->be->ops->name);
  snprintf(st->describe, sizeof st->describe,
           "Distributed environment: %s%s\nNum processes: %d\nProcess index: %d\n"
           "Local process index: %d\nDevice: %s%s%s%s\nMixed precision type: %s\n",
           acc_distributed_type_name(st->type), backend, st->size, st->rank, st->local_rank,
           st->device, st->device_detail[0] ? " (" : "", st->device_detail,
           st->device_detail[0] ? ")" : "", acc_mixed_precision_name(st->mixed_precision));
}

acc_result acc__state_adopt_mixed_precision(acc_state *st, acc_mixed_precision mp) {
  ACC_CHECK(acc__check_handle(st, ACC__HANDLE_STATE, "acc_accelerator_create"));
  if (st->mixed_precision == mp) return ACC_OK;
  if (st->mp_explicit)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_accelerator_create: mixed_precision '%s' contradicts the process state, created with "
                      "mixed_precision '%s' (acc_state_create): use one setting, or destroy the state first",
                      acc_mixed_precision_name(mp), acc_mixed_precision_name(st->mixed_precision));
  st->mixed_precision = mp; /* still not explicit: a later accelerator may set another one */
  build_describe(st);
  return ACC_OK;
}

void acc__state_set_device(acc_state *st, const char *kind, int ordinal, const char *detail,
                           int gpu) {
  if (!acc__handle_ok(st, ACC__HANDLE_STATE)) return;
  if (ordinal >= 0) snprintf(st->device, sizeof st->device, "%s:%d", kind, ordinal);
  else snprintf(st->device, sizeof st->device, "%s", kind);
  snprintf(st->device_detail, sizeof st->device_detail, "%s", detail ? detail : "");
  if (st->size > 1) st->type = gpu ? ACC_DISTRIBUTED_MULTI_GPU : ACC_DISTRIBUTED_MULTI_CPU;
  build_describe(st);
}

acc_result acc_state_create(acc_state **out, const acc_state_options *opts) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_state_create: out is NULL");
  *out = NULL;
  acc__reserve_std_fds(); /* before any segment or file: none may become stdout */
  resolved r;
  ACC_CHECK(resolve_options(opts, &r));
  if (g_state) {
    ACC_CHECK(check_same(g_state, opts, &r));
    g_state->refs++;
    *out = g_state;
    return ACC_OK;
  }
  acc__env_info e;
  ACC_CHECK(acc__detect_env(&e));
  if (e.warning[0]) acc__log(ACC_LOG_WARNING, "%s", e.warning);
  acc__limit_threads(&e); /* as accelerate launch does, for the other launchers */
  acc__state_arm_last_words(e.rank); /* the launcher's report names the first failure */
  acc_state *st = acc__calloc(1, sizeof *st);
  if (!st) return ACC_ERR_NOMEM;
  st->magic = ACC__MAGIC_STATE;
  st->refs = 1;
  st->rank = e.rank;
  st->size = e.size;
  st->local_rank = e.local_rank;
  st->local_size = e.local_size;
  st->num_machines = e.num_machines;
  st->cpu = r.cpu;
  st->mixed_precision = (acc_mixed_precision)r.mixed_precision;
  st->mp_explicit = opts && opts->mixed_precision != ACC_UNSET;
  st->debug = r.debug;
  st->backend_kind = r.backend;
  st->timeout_s = r.timeout_s;
  st->type = e.size > 1 ? ACC_DISTRIBUTED_MULTI_CPU : ACC_DISTRIBUTED_NO;
  snprintf(st->launcher, sizeof st->launcher, "%s", e.launcher);
  snprintf(st->job_id, sizeof st->job_id, "%s", e.job_id);
  snprintf(st->device, sizeof st->device, "cpu");
  acc_result rc = create_backend(st, &e);
  if (rc != ACC_OK) {
    st->magic = ACC__MAGIC_DEAD;
    acc__free(st);
    return acc__error_context(rc, "rank %d of %d could not join the process group", e.rank, e.size);
  }
  build_describe(st);
  g_state = st;
  acc__log_set_rank_source(state_rank); /* log prefixes name this process */
  *out = st;
  return ACC_OK;
}

acc_state *acc_state_get(void) { return g_state; }

void acc_state_destroy(acc_state *st) {
  if (!acc__handle_ok(st, ACC__HANDLE_STATE)) return;
  if (--st->refs > 0) return;
  if (st->async_stop) st->async_stop(st); /* the comm worker ends before the backend */
  if (st->be) st->be->ops->destroy(st->be);
  acc__state_leave(); /* several machines: leave the rendezvous store */
  st->magic = ACC__MAGIC_DEAD;
  if (g_state == st) g_state = NULL;
  acc__free(st);
}

#define GETTER(type, name, expr, dflt) \
  type acc_state_##name(const acc_state *st) { return acc__handle_ok(st, ACC__HANDLE_STATE) ? (expr) : (dflt); }

GETTER(int, num_processes, st->size, 1)
GETTER(int, process_index, st->rank, 0)
GETTER(int, local_process_index, st->local_rank, 0)
GETTER(int, local_num_processes, st->local_size, 1)
GETTER(int, num_machines, st->num_machines, 1)
GETTER(int, is_main_process, st->rank == 0, 1)
GETTER(int, is_local_main_process, st->local_rank == 0, 1)
GETTER(int, is_last_process, st->rank == st->size - 1, 1)
GETTER(int, use_distributed, st->type != ACC_DISTRIBUTED_NO && st->size > 1, 0)
GETTER(acc_distributed_type, distributed_type, st->type, ACC_DISTRIBUTED_NO)
GETTER(acc_mixed_precision, mixed_precision, st->mixed_precision, ACC_PRECISION_NO)
GETTER(int, debug, st->debug, 0)
GETTER(double, timeout, st->timeout_s, 0.0)
GETTER(const char *, device, st->device, "cpu")
GETTER(const char *, backend_name, st->be->ops->name, "none")
GETTER(const char *, launcher, st->launcher, "none")
GETTER(const char *, describe, st->describe, "no state")

const char *acc_distributed_type_name(acc_distributed_type t) {
  switch (t) {
    case ACC_DISTRIBUTED_NO: return "NO";
    case ACC_DISTRIBUTED_MULTI_CPU: return "MULTI_CPU";
    case ACC_DISTRIBUTED_MULTI_GPU: return "MULTI_GPU";
  }
  return "UNKNOWN";
}

const char *acc_mixed_precision_name(acc_mixed_precision p) {
  switch (p) {
    case ACC_PRECISION_NO: return "no";
    case ACC_PRECISION_FP16: return "fp16";
    case ACC_PRECISION_BF16: return "bf16";
    case ACC_PRECISION_UNSET: return "unset";
  }
  return "unknown";
}
