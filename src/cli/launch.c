/* `accelerate launch`: parse the arguments, build each rank's environment, start the ranks
 * through the shared spawner (src/launch/spawn.c) with fail-fast, restarts and signal forwarding, or
 * exec mpirun with --use_mpi / --mpirun_hostfile. */
#include <arpa/inet.h>
#include <stddef.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/config_file.h"
#include "cli/fsdp_flags.h"
#include "device/placement.h"
#include "core/env.h"
#include "backend/rdzv.h"
#include "cli/mpirun.h"
#include "launch/machines.h"
#include "launch/spawn.h"
#include "state/slurm.h"

extern char **environ;

#define WHO "accelerate launch"
#define UNSET LONG_MIN /* integer option not given */
#define JOIN_ORDER (-1L) /* no --machine_rank, --rdzv_backend c10d: the store gives one */

typedef struct launch_args {
  const char *config_file;
  int quiet, module, no_python, debug, cpu, multi_gpu, same_network, enable_cpu_affinity;
  int gpu_sharing;
  int gpu_ids_from_cfg; /* gpu_ids came from the config file */
  const char *mixed_precision;
  long num_processes, num_machines, machine_rank, main_process_port;
  long num_cpu_threads_per_process;
  const char *main_process_ip, *gpu_ids;
  int tee;
  const char *log_dir, *role, *rdzv_backend, *rdzv_conf, *rdzv_id;
  const char *local_ranks_filter;
  long max_restarts;
  double monitor_interval;
  int use_mpi;
  const char *mpirun_hostfile;
  long mpirun_ccl;
  long zero_stage;
  int use_fsdp;                          /* FSDP (docs/fsdp.md, src/cli/fsdp_flags.c) */
  const char *fsdp[ACC_CLI_FSDP_COUNT];   /* the --fsdp_* values as text */
  /* Hugging Face Accelerate's, accepted like their config keys: dynamo_backend is exported, the
   * others are not used */
  const char *dynamo_backend, *main_training_function;
  int downcast_bf16;
  long gradient_accumulation_steps;
  const char *comm_hook;
  const acc_cli_cfg *cfg; /* the config file used, or NULL */
  char **prog; /* program and its arguments, NULL-terminated */
} launch_args;

enum kind { FLAG, STR, INT, FLOAT, TEE };

typedef struct option_def {
  const char *name;  /* canonical --name (underscores) */
  const char *alias; /* short form or NULL */
  enum kind kind;
  size_t off;
  const char *def;   /* default, for -h */
  const char *help;
} option_def;

#define OFF(f) offsetof(launch_args, f)

static const option_def options[] = {
    {"--config_file", NULL, STR, OFF(config_file), "the default config file if it exists",
     "config file whose keys fill the options not given here (flags override the file; "
     "without --config_file, --cpu skips the default file)"},
    {"--quiet", "-q", FLAG, OFF(quiet), "off", "do not print the launcher's failure and restart reports"},
    {"--module", "-m", FLAG, OFF(module), "off", "accepted for compatibility; programs always run directly"},
    {"--no_python", NULL, FLAG, OFF(no_python), "off", "accepted for compatibility (always the case)"},
    {"--debug", NULL, FLAG, OFF(debug), "off", "export ACCELERATE_DEBUG_MODE=true (collective checks)"},
    {"--cpu", NULL, FLAG, OFF(cpu), "off", "force CPU: ACCELERATE_USE_CPU=True"},
    {"--multi_gpu", NULL, FLAG, OFF(multi_gpu), "off", "multi-GPU launch (needs --num_processes >= 2)"},
    {"--mixed_precision", NULL, STR, OFF(mixed_precision), "no",
     "no|fp16|bf16, exported as ACCELERATE_MIXED_PRECISION"},
    {"--num_processes", NULL, INT, OFF(num_processes), "1", "total processes across all machines"},
    {"--num_machines", NULL, INT, OFF(num_machines), "1", "number of machines"},
    {"--machine_rank", NULL, INT, OFF(machine_rank), "0", "rank of this machine (0..num_machines-1)"},
    {"--main_process_ip", NULL, STR, OFF(main_process_ip), "127.0.0.1 on one machine; required with --num_machines > 1",
     "address of rank 0's machine (MASTER_ADDR)"},
    {"--main_process_port", NULL, INT, OFF(main_process_port), "29500", "MASTER_PORT; 0 picks a free port"},
    {"--num_cpu_threads_per_process", NULL, INT, OFF(num_cpu_threads_per_process), "1 when >1 local process",
     "OMP_NUM_THREADS / OPENBLAS_NUM_THREADS for each process"},
    {"--enable_cpu_affinity", NULL, FLAG, OFF(enable_cpu_affinity), "off", "export ACCELERATE_CPU_AFFINITY=1"},
    {"--gpu_ids", NULL, STR, OFF(gpu_ids), "all",
     "comma list of distinct GPU ids exported as CUDA_VISIBLE_DEVICES unless \"all\" "
     "(cfg gpu_ids)"},
    {"--gpu_sharing", NULL, FLAG, OFF(gpu_sharing), "off",
     "let processes outnumber GPUs (GPU local_rank % count, collectives through host memory, no "
     "NCCL): ACCELERATE_GPU_SHARING=1; not in Hugging Face Accelerate"},
    {"--same_network", NULL, FLAG, OFF(same_network), "off", "accepted (machines always use MASTER_ADDR/PORT)"},
    {"--tee", "-t", TEE, OFF(tee), "0",
     "prefix \"[rank i] \" on output lines: 1 stdout, 2 stderr, 3 both (bare --tee = 3)"},
    {"--log_dir", NULL, STR, OFF(log_dir), "none",
     "write each rank's output to DIR/rank<i>.stdout.log and .stderr.log (also shown with --tee)"},
    {"--local_ranks_filter", NULL, STR, OFF(local_ranks_filter), "all",
     "comma list of local ranks whose stdout and stderr reach the console, e.g. 0 (as torchrun's "
     "option of the same name; --log_dir files still get every rank)"},
    {"--role", NULL, STR, OFF(role), "default", "accepted and ignored (torchrun worker role)"},
    {"--rdzv_backend", NULL, STR, OFF(rdzv_backend), "static", "static: every launcher gives --machine_rank; c10d (or any other): a launcher without --machine_rank gets one at the join (SLURM_NODEID under srun, else join order)"},
    {"--rdzv_conf", NULL, STR, OFF(rdzv_conf), "\"\"", "accepted and ignored"},
    {"--rdzv_id", NULL, STR, OFF(rdzv_id), "default",
     "several machines: the job's rendezvous id; every machine's launcher must give the same "
     "(ACCELERATE_RDZV_ID)"},
    {"--max_restarts", NULL, INT, OFF(max_restarts), "0",
     "restart the whole group up to K times when a rank fails (ACCELERATE_RESTART_COUNT)"},
    {"--monitor_interval", NULL, FLOAT, OFF(monitor_interval), "0.1", "seconds between checks of the ranks"},
    {"--use_mpi", NULL, FLAG, OFF(use_mpi), "off", "run the program under mpirun -n N instead of spawning"},
    {"--mpirun_hostfile", NULL, STR, OFF(mpirun_hostfile), "none",
     "run under mpirun --hostfile F --npernode K -n N (implies --use_mpi; cfg mpirun_config.mpirun_hostfile)"},
    {"--mpirun_ccl", NULL, INT, OFF(mpirun_ccl), "none",
     "oneCCL worker threads under mpirun, exported as CCL_WORKER_COUNT (cfg mpirun_config.mpirun_ccl)"},
    {"--zero_stage", NULL, INT, OFF(zero_stage), "none",
     "ZeRO stage: 0 off, 1 optimizer state sharded across processes, 2 also the averaged "
     "gradients; exported as ACCELERATE_ZERO_STAGE (cfg zero_stage)"},
    {"--use_fsdp", NULL, FLAG, OFF(use_fsdp), "off",
     "fully sharded training (acc_fsdp, docs/fsdp.md): exports ACCELERATE_USE_FSDP=true and the FSDP_* "
     "variables of the --fsdp_* flags (cfg distributed_type: FSDP, fsdp_config)"},
    {"--fsdp_sharding_strategy", NULL, STR, OFF(fsdp[0]), "FULL_SHARD",
     "FULL_SHARD, SHARD_GRAD_OP or NO_SHARD (or 1-3): FSDP_SHARDING_STRATEGY"},
    {"--fsdp_reshard_after_forward", NULL, STR, OFF(fsdp[1]), "from the strategy",
     "true (FULL_SHARD) or false (SHARD_GRAD_OP), FSDP2's spelling: FSDP_RESHARD_AFTER_FORWARD"},
    {"--fsdp_backward_prefetch", NULL, STR, OFF(fsdp[2]), "BACKWARD_PRE",
     "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH: FSDP_BACKWARD_PREFETCH"},
    {"--fsdp_forward_prefetch", NULL, STR, OFF(fsdp[3]), "false", "true|false: FSDP_FORWARD_PREFETCH"},
    {"--fsdp_state_dict_type", NULL, STR, OFF(fsdp[4]), "SHARDED_STATE_DICT",
     "SHARDED_STATE_DICT or FULL_STATE_DICT: FSDP_STATE_DICT_TYPE"},
    {"--fsdp_offload_params", NULL, STR, OFF(fsdp[5]), "false", "true|false: FSDP_OFFLOAD_PARAMS"},
    {"--fsdp_auto_wrap_policy", NULL, STR, OFF(fsdp[6]), "NO_WRAP",
     "NO_WRAP or SIZE_BASED_WRAP, for a program that declares no units: FSDP_AUTO_WRAP_POLICY"},
    {"--fsdp_min_num_params", NULL, STR, OFF(fsdp[7]), "100000000",
     "SIZE_BASED_WRAP's elements per unit: FSDP_MIN_NUM_PARAMS"},
    {"--fsdp_sync_module_states", NULL, STR, OFF(fsdp[8]), "true",
     "true|false: start from process 0's parameters (FSDP_SYNC_MODULE_STATES)"},
    {"--fsdp_use_orig_params", NULL, STR, OFF(fsdp[9]), "none", "accepted with a note (nothing to do in C)"},
    {"--fsdp_cpu_ram_efficient_loading", NULL, STR, OFF(fsdp[10]), "none",
     "accepted with a note (nothing to do in C)"},
    {"--fsdp_transformer_layer_cls_to_wrap", NULL, STR, OFF(fsdp[11]), "none",
     "accepted with a note: declare units with acc_fsdp_add_unit"},
    {"--fsdp_version", NULL, STR, OFF(fsdp[12]), "none", "1 or 2, accepted with a note"},
    {"--fsdp_activation_checkpointing", NULL, STR, OFF(fsdp[13]), "none",
     "accepted with a note (activations are the program's)"},
    {"--dynamo_backend", NULL, STR, OFF(dynamo_backend), "no",
     "exported as ACCELERATE_DYNAMO_BACKEND, upper-case (nothing is compiled; cfg dynamo_config.dynamo_backend)"},
    {"--downcast_bf16", NULL, FLAG, OFF(downcast_bf16), "off", "accepted, not used (TPU; cfg downcast_bf16)"},
    {"--main_training_function", NULL, STR, OFF(main_training_function), "main",
     "accepted, not used (TPU; cfg main_training_function)"},
    {"--gradient_accumulation_steps", NULL, INT, OFF(gradient_accumulation_steps), "none",
     "accepted, not used (DeepSpeed's; set acc_accelerator_options.gradient_accumulation_steps)"},
    {"--comm_hook", NULL, STR, OFF(comm_hook), "no",
     "gradient all-reduce compression (torch DDP comm hook): no, fp16, bf16 or power_sgd; exported as "
     "ACCELERATE_COMM_HOOK (cfg comm_hook)"},
};
#define NOPTS (sizeof options / sizeof options[0])

static void print_help(FILE *f) {
  fprintf(f,
          "usage: accelerate launch [options] program [program args...]\n\n"
          "Runs program on N processes with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
          "MASTER_ADDR, MASTER_PORT and the ACCELERATE_* variables set. Each option is also\n"
          "accepted with hyphens for underscores, and as --option=value; \"--\" ends the options.\n\n"
          "options:\n  -h, --help  show this help and exit\n");
  for (size_t i = 0; i < NOPTS; i++) {
    const option_def *o = &options[i];
    char left[80];
    const char *meta = o->kind == INT ? " N" : o->kind == FLOAT ? " S" : o->kind == STR ? " VALUE" : o->kind == TEE ? " [0-3]" : "";
    if (o->alias)
      snprintf(left, sizeof left, "%s, %s%s", o->alias, o->name, meta);
    else
      snprintf(left, sizeof left, "%s%s", o->name, meta);
    fprintf(f, "  %-38s %s (default: %s)\n", left, o->help, o->def);
  }
  fprintf(f,
          "\nenvironment: ACCELERATE_LAUNCH_GRACE_PERIOD (seconds between SIGTERM and SIGKILL\n"
          "when stopping the ranks, default 5).\n"
          "exit status: 0, the failing rank's exit status, 128+signal when it was killed by a\n"
          "signal (or the launcher was), 2 for usage errors, 127 when the program is not found.\n");
}

static int usage_error(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, WHO ": error: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, " (see accelerate launch -h)\n");
  return 2;
}

/* --local_ranks_filter "0,2": *muted gets one flag per local process, set for those not listed. */
static int ranks_filter(const char *list, long n, unsigned char **muted) {
  unsigned char *m = malloc((size_t)n);
  if (!m) return usage_error("out of memory%s%s", "", "");
  memset(m, 1, (size_t)n);
  const char *p = list;
  for (;;) {
    char *end;
    errno = 0;
    long r = strtol(p, &end, 10);
    if (end == p || errno || r < 0 || r >= n || (*end && *end != ',')) {
      free(m);
      char nb[32];
      snprintf(nb, sizeof nb, "%ld", n - 1);
      return usage_error("argument --local_ranks_filter: '%s' is not a comma list of local ranks 0..%s", list, nb);
    }
    m[r] = 0;
    if (!*end) break;
    p = end + 1;
  }
  *muted = m;
  return 0;
}

static int parse_long(const char *s, long *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*end || errno) return -1;
  *out = v;
  return 0;
}

/* Returns 0 and fills a, -1 with help printed (exit 0), or 2 after a usage error. */
static int parse_args(int argc, char **argv, launch_args *a) {
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (arg[0] != '-' || arg[1] == '\0') break;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      print_help(stdout);
      return -1;
    }
    /* Normalize: --num-processes=2 -> --num_processes, value "2". */
    char name[128];
    const char *eq = strchr(arg, '=');
    size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
    if (nlen >= sizeof name) return usage_error("unrecognized option '%s'%s", arg, "");
    memcpy(name, arg, nlen);
    name[nlen] = '\0';
    if (name[1] == '-')
      for (size_t k = 2; k < nlen; k++)
        if (name[k] == '-') name[k] = '_';
    const option_def *o = NULL;
    for (size_t k = 0; k < NOPTS && !o; k++)
      if (strcmp(name, options[k].name) == 0 || (options[k].alias && strcmp(name, options[k].alias) == 0))
        o = &options[k];
    if (!o) return usage_error("unrecognized option '%s'%s", arg, "");
    char *field = (char *)a + o->off;
    const char *val = eq ? eq + 1 : NULL;
    if (o->kind == FLAG) {
      if (val) return usage_error("option %s takes no value%s", o->name, "");
      *(int *)field = 1;
      continue;
    }
    if (o->kind == TEE) {
      /* The value is optional (bare --tee = 3). A next argument made of digits, ':' and ',' is
       * taken as the value (and must be 0..3), so "--tee 7" is an error, not a program named 7;
       * "--tee -- 7" runs such a program. */
      if (!val && i + 1 < argc && argv[i + 1][0] &&
          strspn(argv[i + 1], "0123456789:,") == strlen(argv[i + 1]))
        val = argv[++i];
      if (!val) val = "3";
      if (strlen(val) != 1 || val[0] < '0' || val[0] > '3')
        return usage_error("argument --tee: invalid value '%s' (expected 0, 1, 2 or 3; per-rank "
                           "mappings like 0:1,1:2 are not supported)%s", val, "");
      *(int *)field = val[0] - '0';
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) return usage_error("argument %s: expected a value%s", o->name, "");
      val = argv[++i];
    }
    if (o->kind == STR) {
      *(const char **)field = val;
    } else if (o->kind == INT) {
      if (parse_long(val, (long *)field) != 0)
        return usage_error("argument %s: invalid int value: '%s'", o->name, val);
    } else {
      char *end;
      double d = strtod(val, &end);
      if (!*val || *end || !isfinite(d))
        return usage_error("argument %s: invalid float value: '%s' (expected a finite number)",
                           o->name, val);
      *(double *)field = d;
    }
  }
  if (i >= argc) return usage_error("the following arguments are required: program%s%s", "", "");
  a->prog = argv + i;
  return 0;
}

/* ---- config file -------------------------------------------------------------------------- */

/* Accelerate's merge: a config file is used when
 * --config_file names one, or when the default file exists and --cpu was not passed. Scalar keys
 * fill only the options still unset (UNSET, NULL, or 0 for flags); mpirun_config's keys fill the
 * options not given on the command line (the same thing here, since a given option is never
 * unset); distributed_type sets the mode only when no mode flag (--cpu, --multi_gpu) was given.
 * The loaded file stays in this static for the lifetime of the launch (a holds pointers into
 * it). Returns 0, or 2 after printing an error that names the file (and line and key). */
static acc_cli_cfg loaded_cfg;
static char loaded_path[4096];

static int config_error(const char *msg) {
  fprintf(stderr, WHO ": error: %s\n", msg);
  return 2;
}

static int apply_config_file(launch_args *a) {
  char path[4096];
  int found = 0;
  if (!a->config_file && a->cpu) return 0; /* --cpu ignores the default file, not an explicit one */
  if (acc_cli_config_find(a->config_file, path, sizeof path, &found) != ACC_OK)
    return config_error(acc_last_error());
  if (!found) return 0;
  acc_cli_cfg *c = &loaded_cfg;
  if (acc_cli_config_load(c, path) != ACC_OK) return config_error(acc_last_error());
  a->cfg = c;
  snprintf(loaded_path, sizeof loaded_path, "%s", path);
  /* Mode: only when no mode flag was given. use_cpu: true makes it a CPU run (Accelerate keeps
   * args.use_cpu apart from --cpu, so a file cannot trigger the "only one of" error). */
  const int mode_flag = a->cpu || a->multi_gpu;
  if (!a->cpu && c->use_cpu.set && c->use_cpu.i && !a->multi_gpu) a->cpu = 1;
  if (!mode_flag && !a->cpu && c->distributed_type.set && strcmp(c->distributed_type.s, "MULTI_GPU") == 0)
    a->multi_gpu = 1;
  if (a->num_processes == UNSET && c->num_processes.set) {
    if (c->num_processes.i == -1) {
      char msg[4300];
      snprintf(msg, sizeof msg, "%s: You need to manually pass in `--num_processes` using this config "
               "yaml (its num_processes is -1).", path);
      return config_error(msg);
    }
    a->num_processes = c->num_processes.i;
  }
  if (a->num_machines == UNSET && c->num_machines.set) a->num_machines = c->num_machines.i;
  if (a->machine_rank == UNSET && c->machine_rank.set) a->machine_rank = c->machine_rank.i;
  if (a->main_process_port == UNSET && c->main_process_port.set) a->main_process_port = c->main_process_port.i;
  if (!a->main_process_ip && c->main_process_ip.set && c->main_process_ip.s[0]) a->main_process_ip = c->main_process_ip.s;
  if (!a->gpu_ids && c->gpu_ids.set && c->gpu_ids.s[0]) {
    a->gpu_ids = c->gpu_ids.s;
    a->gpu_ids_from_cfg = 1;
  }
  if (!a->mixed_precision && c->mixed_precision.set && c->mixed_precision.s[0]) a->mixed_precision = c->mixed_precision.s;
  if (!a->rdzv_backend && c->rdzv_backend.set && c->rdzv_backend.s[0]) a->rdzv_backend = c->rdzv_backend.s;
  if (!a->debug && c->debug.set) a->debug = c->debug.i != 0;
  if (!a->enable_cpu_affinity && c->enable_cpu_affinity.set) a->enable_cpu_affinity = c->enable_cpu_affinity.i != 0;
  if (!a->same_network && c->same_network.set) a->same_network = c->same_network.i != 0;
  if (!a->mpirun_hostfile && c->mpirun_hostfile.set && c->mpirun_hostfile.s[0]) a->mpirun_hostfile = c->mpirun_hostfile.s;
  if (a->mpirun_ccl == UNSET && c->mpirun_ccl.set) a->mpirun_ccl = c->mpirun_ccl.i;
  if (a->zero_stage == UNSET && c->zero_stage.set) a->zero_stage = c->zero_stage.i;
  if (!a->comm_hook && c->comm_hook.set && c->comm_hook.s[0]) a->comm_hook = c->comm_hook.s;
  if (!a->use_fsdp && c->distributed_type.set && !strcmp(c->distributed_type.s, "FSDP")) a->use_fsdp = 1;
  acc_cli_fsdp_from_cfg(a->fsdp, c);
  return 0;
}

/* ---- validation and environment ----------------------------------------------------------- */


/* --gpu_ids: distinct integers, each below this machine's GPU count when it can be known (the
 * launcher's own CUDA_VISIBLE_DEVICES unset: the ids are then the machine's); --multi_gpu
 * without --num_processes: one process per GPU (the listed ids, else every GPU), Accelerate's
 * rule. The GPUs are counted only when one of the two needs it. */
static int gpu_checks(launch_args *a) {
  const int ids_given = a->gpu_ids && strcmp(a->gpu_ids, "all") != 0;
  const int want_count = a->multi_gpu && a->num_processes == UNSET;
  int count = 0, known = 0;
  char why[512] = "";
  if (ids_given || want_count) {
    acc__device_probe_info info;
    int fake = 0;
    if (acc__placement_gpus(&info, &fake, 0) == ACC_OK) count = info.device_count;
    else snprintf(why, sizeof why, "%s", acc_last_error());
    acc_clear_error();
    known = count > 0 && !acc__env_str("CUDA_VISIBLE_DEVICES");
  }
  int nids = 0;
  if (a->gpu_ids && acc__placement_check_gpu_ids(a->gpu_ids, known ? count : 0, &nids) != ACC_OK) {
    fprintf(stderr, WHO ": error: %s%s%s (see accelerate launch -h)\n", acc_last_error(),
            a->gpu_ids_from_cfg ? "; the value is key gpu_ids of the config file " : "",
            a->gpu_ids_from_cfg ? loaded_path : "");
    return 2;
  }
  if (a->multi_gpu && nids == 1 && (a->num_machines == UNSET || a->num_machines == 1))
    return usage_error("Less than two GPU ids were configured and tried to run on multiple GPUs "
                       "(--gpu_ids %s). Please ensure at least two are specified for `--gpu_ids`, "
                       "or use `--gpu_ids='all'`.%s", a->gpu_ids, "");
  if (want_count) {
    long per_machine = nids ? nids : count;
    if (per_machine == 0)
      return usage_error("--multi_gpu without --num_processes: no GPU found on this machine (%s); "
                         "pass --num_processes N%s", why, "");
    a->num_processes = per_machine * (a->num_machines == UNSET ? 1 : a->num_machines);
    fprintf(stderr, WHO ": --num_processes not given: %ld, one per GPU%s\n", a->num_processes,
            nids ? " of --gpu_ids" : " of this machine");
  }
  return 0;
}

static int validate(launch_args *a) {
  char buf[64];
  if (a->module && a->no_python)
    return usage_error("--module and --no_python cannot be used together%s%s", "", "");
  if (a->cpu && a->multi_gpu)
    return usage_error("You can only use one of `--cpu`, `--multi_gpu` at a time.%s%s", "", "");
  int grc = gpu_checks(a);
  if (grc) return grc;
  if (a->num_processes == UNSET) a->num_processes = 1;
  if (a->num_machines == UNSET) a->num_machines = 1;
  if (a->machine_rank == UNSET && a->num_machines > 1 && !a->use_mpi) {
    /* no --machine_rank (Hugging Face's `srun accelerate launch ... --rdzv_backend c10d`):
     * under an srun task, the node's index; else, with a dynamic rendezvous backend, join
     * order (docs/multi-machine.md) */
    long node = 0;
    int set = 0;
    if (acc__slurm_is_task() && acc__env_int("SLURM_NODEID", &node, &set) == ACC_OK && set)
      a->machine_rank = node;
    else if (a->rdzv_backend && strcmp(a->rdzv_backend, "static") != 0)
      a->machine_rank = JOIN_ORDER;
    acc_clear_error();
  }
  if (a->machine_rank == UNSET) a->machine_rank = 0;
  if (a->main_process_port == UNSET) a->main_process_port = 29500;
  if (a->monitor_interval != a->monitor_interval) a->monitor_interval = 0.1; /* NaN = unset */
  if (a->max_restarts == UNSET) a->max_restarts = 0;
  if (a->num_processes > 65536) {
    snprintf(buf, sizeof buf, "%ld", a->num_processes);
    return usage_error("--num_processes %s is too large (at most 65536)%s", buf, "");
  }
  if (a->max_restarts < 0 || a->max_restarts > 2147483647L) {
    snprintf(buf, sizeof buf, "%ld", a->max_restarts);
    return usage_error("--max_restarts %s is out of range (0..2147483647, as ACCELERATE_RESTART_COUNT)%s", buf, "");
  }
  if (a->machine_rank < 0 && a->machine_rank != JOIN_ORDER)
    return usage_error("--machine_rank must be >= 0%s%s", "", "");
  if (a->main_process_port < 0) return usage_error("--main_process_port must be 0..65535%s%s", "", "");
  if (a->num_cpu_threads_per_process != UNSET &&
      (a->num_cpu_threads_per_process < 1 || a->num_cpu_threads_per_process > 65536)) {
    snprintf(buf, sizeof buf, "%ld", a->num_cpu_threads_per_process);
    return usage_error("--num_cpu_threads_per_process %s is out of range (1..65536, as OMP_NUM_THREADS)%s", buf, "");
  }
  if (a->mpirun_ccl != UNSET && a->mpirun_ccl < 1)
    return usage_error("--mpirun_ccl (mpirun_config.mpirun_ccl) must be at least 1%s%s", "", "");
  if (acc_cli_fsdp_check(a->use_fsdp, a->fsdp, a->quiet, a->cfg && a->cfg->distributed_type.set) != 0) return 2;
  if (a->zero_stage != UNSET && (a->zero_stage < 0 || a->zero_stage > 2)) {
    snprintf(buf, sizeof buf, "%ld", a->zero_stage);
    return usage_error("--zero_stage (config zero_stage) must be 0, 1 or 2, got %s%s", buf, "");
  }
  if (!a->mixed_precision) a->mixed_precision = "no";
  if (a->num_processes < 1) {
    snprintf(buf, sizeof buf, "%ld", a->num_processes);
    return usage_error("--num_processes must be at least 1, got %s%s", buf, "");
  }
  if (a->multi_gpu && a->num_processes < 2)
    return usage_error("You need to use at least 2 processes to use `--multi_gpu`.%s%s", "", "");
  if (a->num_machines < 1) return usage_error("--num_machines must be at least 1%s%s", "", "");
  if (a->machine_rank >= a->num_machines) {
    snprintf(buf, sizeof buf, "%ld and --num_machines %ld", a->machine_rank, a->num_machines);
    return usage_error("--machine_rank %s: expected 0..num_machines-1%s", buf, "");
  }
  if (a->num_processes % a->num_machines != 0) {
    snprintf(buf, sizeof buf, "%ld by --num_machines %ld", a->num_processes, a->num_machines);
    return usage_error("--num_processes is the total over all machines and must divide evenly: "
                       "cannot divide --num_processes %s%s", buf, "");
  }
  if (a->num_machines > 1 && !a->main_process_ip)
    return usage_error("When using multiple machines, you need to specify the main process IP "
                       "(--main_process_ip).%s%s", "", "");
  if (a->main_process_port > 65535) return usage_error("--main_process_port must be 0..65535%s%s", "", "");
  if (a->num_machines > 1 && !a->use_mpi && a->main_process_port == 0)
    return usage_error("--main_process_port 0 cannot be used with several machines: the other "
                       "machines must know the port of machine 0's rendezvous store%s%s", "", "");
  if (!(a->monitor_interval >= 0.001 && a->monitor_interval <= 3600)) {
    snprintf(buf, sizeof buf, "%g", a->monitor_interval);
    return usage_error("--monitor_interval must be 0.001..3600 seconds, got %s%s", buf, "");
  }
  if (strcmp(a->mixed_precision, "no") != 0 && strcmp(a->mixed_precision, "fp16") != 0 &&
      strcmp(a->mixed_precision, "bf16") != 0)
    return usage_error("argument --mixed_precision: invalid choice: '%s' (choose from 'no', 'fp16', "
                       "'bf16'; fp8 is not supported by accelerate-c)%s", a->mixed_precision, "");
  if (a->comm_hook && strcmp(a->comm_hook, "no") != 0 && strcmp(a->comm_hook, "fp16") != 0 &&
      strcmp(a->comm_hook, "bf16") != 0 && strcmp(a->comm_hook, "power_sgd") != 0)
    return usage_error("argument --comm_hook (config comm_hook): invalid choice: '%s' (choose from "
                       "'no', 'fp16', 'bf16', 'power_sgd')%s", a->comm_hook, "");
  if (a->mpirun_hostfile) a->use_mpi = 1;
  return 0;
}

/* Finds the program like execvp would; 0 if it can be run. */
static int find_program(const char *prog) {
  if (strchr(prog, '/')) return access(prog, X_OK);
  const char *path = acc__env_str("PATH");
  if (!path) path = "/bin:/usr/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    char full[4096];
    snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? path : ".", prog);
    struct stat st;
    if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0) return 0;
    if (!colon) break;
    path = colon + 1;
  }
  return -1;
}

/* 1 when port binds now (nothing listens on it), for free_port. */
static int port_binds(long port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return 0;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  int ok = bind(s, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(s);
  return ok;
}

/* A free port for --main_process_port 0. The port is only checked, not held, until the job's
 * store binds it, so it is chosen below the kernel's ephemeral range (ip_local_port_range): a
 * port in that range can be handed to any other process's connect or bind to port 0 in between
 * (another job's gloo pairs, say), one below it cannot. Between 10000 and the range's start, at
 * random; the kernel's own choice where the range starts too low to leave room. */
static long free_port(void) {
  long lo = 32768, hi = 60999;
  FILE *fp = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (fp) {
    if (fscanf(fp, "%ld %ld", &lo, &hi) != 2) lo = 32768;
    fclose(fp);
  }
  if (lo > 11024) {
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 64; tries++) {
      long port = 10000 + (long)(rand_r(&seed) % (unsigned)(lo - 10000));
      if (port_binds(port)) return port;
    }
  }
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof sa;
  long port = -1;
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(s, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  close(s);
  return port;
}

/* A growable "K=V" list built from the current environment. */
typedef struct envlist {
  char **v;
  size_t n, cap;
} envlist;

static int env_set(envlist *e, const char *k, const char *val) {
  size_t kl = strlen(k);
  char *kv = malloc(kl + strlen(val) + 2);
  if (!kv) return -1;
  sprintf(kv, "%s=%s", k, val);
  for (size_t i = 0; i < e->n; i++)
    if (strncmp(e->v[i], k, kl) == 0 && e->v[i][kl] == '=') {
      free(e->v[i]);
      e->v[i] = kv;
      return 0;
    }
  if (e->n + 2 > e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 64;
    char **nv = realloc(e->v, cap * sizeof *nv);
    if (!nv) {
      free(kv);
      return -1;
    }
    e->v = nv;
    e->cap = cap;
  }
  e->v[e->n++] = kv;
  e->v[e->n] = NULL;
  return 0;
}

static int env_copy(envlist *dst, const envlist *src) {
  for (size_t i = 0; i < src->n; i++) {
    char *eq = strchr(src->v[i], '=');
    if (!eq) continue;
    char key[256];
    size_t kl = (size_t)(eq - src->v[i]);
    if (kl >= sizeof key) continue;
    memcpy(key, src->v[i], kl);
    key[kl] = '\0';
    if (env_set(dst, key, eq + 1) != 0) return -1;
  }
  return 0;
}

static void env_unset(envlist *e, const char *k) {
  size_t kl = strlen(k);
  for (size_t i = 0; i < e->n; i++)
    if (strncmp(e->v[i], k, kl) == 0 && e->v[i][kl] == '=') {
      free(e->v[i]);
      e->v[i] = e->v[--e->n];
      e->v[e->n] = NULL;
      return;
    }
}

static void env_free(envlist *e) {
  for (size_t i = 0; i < e->n; i++) free(e->v[i]);
  free(e->v);
  memset(e, 0, sizeof *e);
}

/* The variables common to every rank (not RANK/LOCAL_RANK/run id). */
static int common_env(const launch_args *a, long local, long port, envlist *e, int for_mpi) {
  char b[64];
  for (char **p = environ; *p; p++) {
    char *eq = strchr(*p, '=');
    if (!eq) continue;
    char key[256];
    size_t kl = (size_t)(eq - *p);
    if (kl >= sizeof key) continue;
    memcpy(key, *p, kl);
    key[kl] = '\0';
    if (env_set(e, key, eq + 1) != 0) return -1;
  }
  int rc = 0;
  rc |= env_set(e, "ACCELERATE_USE_CPU", a->cpu ? "True" : "False");
  rc |= env_set(e, "ACCELERATE_MIXED_PRECISION", a->mixed_precision);
  if (a->debug) rc |= env_set(e, "ACCELERATE_DEBUG_MODE", "true");
  if (a->enable_cpu_affinity) rc |= env_set(e, "ACCELERATE_CPU_AFFINITY", "1");
  /* dynamo_config: exported as Accelerate does (accelerate-c compiles nothing; a program may
   * read them). Upper-case backend, "True"/"False" booleans. */
  {
    const acc_cli_cfg *c = a->cfg;
    char up[64] = "NO";
    const char *db = a->dynamo_backend ? a->dynamo_backend
                     : c && c->dynamo_backend.set && c->dynamo_backend.s[0] ? c->dynamo_backend.s : NULL;
    if (db && *db) { /* the flag wins over the file */
      size_t k = 0;
      for (; db[k] && k + 1 < sizeof up; k++) up[k] = (char)(db[k] >= 'a' && db[k] <= 'z' ? db[k] - 32 : db[k]);
      up[k] = '\0';
    }
    rc |= env_set(e, "ACCELERATE_DYNAMO_BACKEND", up);
    rc |= env_set(e, "ACCELERATE_DYNAMO_MODE", c && c->dynamo_mode.set && c->dynamo_mode.s[0] ? c->dynamo_mode.s : "default");
    rc |= env_set(e, "ACCELERATE_DYNAMO_USE_FULLGRAPH", c && c->dynamo_use_fullgraph.set && c->dynamo_use_fullgraph.i ? "True" : "False");
    rc |= env_set(e, "ACCELERATE_DYNAMO_USE_DYNAMIC", c && c->dynamo_use_dynamic.set && c->dynamo_use_dynamic.i ? "True" : "False");
    rc |= env_set(e, "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION",
                  c && c->dynamo_use_regional_compilation.set && c->dynamo_use_regional_compilation.i ? "True" : "False");
  }
  if (a->zero_stage != UNSET) {
    snprintf(b, sizeof b, "%ld", a->zero_stage);
    rc |= env_set(e, "ACCELERATE_ZERO_STAGE", b);
  }
  if (a->comm_hook) rc |= env_set(e, "ACCELERATE_COMM_HOOK", a->comm_hook);
  if (a->use_fsdp) {
    rc |= env_set(e, "ACCELERATE_USE_FSDP", "true");
    for (int k = 0; k < ACC_CLI_FSDP_COUNT; k++)
      if (a->fsdp[k] && acc_cli_fsdp_vars[k]) rc |= env_set(e, acc_cli_fsdp_vars[k], a->fsdp[k]);
  }
  if (a->use_mpi && a->mpirun_ccl != UNSET) {
    snprintf(b, sizeof b, "%ld", a->mpirun_ccl);
    rc |= env_set(e, "CCL_WORKER_COUNT", b);
  }
  if (a->gpu_ids && strcmp(a->gpu_ids, "all") != 0) rc |= env_set(e, "CUDA_VISIBLE_DEVICES", a->gpu_ids);
  if (a->gpu_sharing) rc |= env_set(e, "ACCELERATE_GPU_SHARING", "1");
  rc |= env_set(e, "MASTER_ADDR", a->main_process_ip ? a->main_process_ip : "127.0.0.1");
  snprintf(b, sizeof b, "%ld", port);
  rc |= env_set(e, "MASTER_PORT", b);
  snprintf(b, sizeof b, "%ld", a->num_machines);
  rc |= env_set(e, "ACCELERATE_NUM_MACHINES", b);
  snprintf(b, sizeof b, "%ld", a->machine_rank);
  rc |= env_set(e, "ACCELERATE_MACHINE_RANK", b);
  if (a->num_machines > 1) rc |= env_set(e, "ACCELERATE_RDZV_ID", a->rdzv_id ? a->rdzv_id : "default");
  if (a->num_cpu_threads_per_process != UNSET) {
    snprintf(b, sizeof b, "%ld", a->num_cpu_threads_per_process);
    rc |= env_set(e, "OMP_NUM_THREADS", b);
    rc |= env_set(e, "OPENBLAS_NUM_THREADS", b);
  } else if (local > 1) {
    /* N processes on one machine: one thread each unless the user chose otherwise. */
    if (!acc__env_str("OMP_NUM_THREADS")) rc |= env_set(e, "OMP_NUM_THREADS", "1");
    if (!acc__env_str("OPENBLAS_NUM_THREADS")) rc |= env_set(e, "OPENBLAS_NUM_THREADS", "1");
  }
  if (!for_mpi) {
    snprintf(b, sizeof b, "%ld", a->num_processes);
    rc |= env_set(e, "WORLD_SIZE", b);
    snprintf(b, sizeof b, "%ld", local);
    rc |= env_set(e, "LOCAL_WORLD_SIZE", b);
  }
  return rc ? -1 : 0;
}

/* ---- mpirun ------------------------------------------------------------------------------- */

static const char *const mpi_vars[] = {"ACCELERATE_USE_CPU", "ACCELERATE_MIXED_PRECISION",
                                       "ACCELERATE_DEBUG_MODE", "ACCELERATE_CPU_AFFINITY",
                                       "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT",
                                       "ACCELERATE_NUM_MACHINES", "ACCELERATE_MACHINE_RANK",
                                       "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                       "ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_DYNAMO_MODE",
                                       "ACCELERATE_DYNAMO_USE_FULLGRAPH", "ACCELERATE_DYNAMO_USE_DYNAMIC",
                                       "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "CCL_WORKER_COUNT",
                                       "ACCELERATE_ZERO_STAGE", "ACCELERATE_GPU_SHARING",
                                       "ACCELERATE_COMM_HOOK"};

static int run_mpi(const launch_args *a, long local, long port) {
  envlist e = {0};
  if (common_env(a, local, port, &e, 1) != 0) {
    fprintf(stderr, WHO ": out of memory\n");
    return 1;
  }
  /* mpirun gives the ranks (OMPI_COMM_WORLD_*): drop an outer launch's variables, which the
   * library would otherwise prefer. */
  static const char *const outer[] = {"ACCELERATE_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE", "ACCELERATE_RESTART_COUNT",
                                      ACC_RDZV_TOKEN_ENV, ACC_RDZV_BOARD_ENV};
  for (size_t i = 0; i < sizeof outer / sizeof outer[0]; i++) env_unset(&e, outer[i]);
  size_t nprog = 0;
  while (a->prog[nprog]) nprog++;
  size_t nv = sizeof mpi_vars / sizeof mpi_vars[0];
  char **cmd = calloc(16 + 2 * nv + nprog + 1, sizeof *cmd);
  char nper[32], ntot[32];
  snprintf(nper, sizeof nper, "%ld", local);
  snprintf(ntot, sizeof ntot, "%ld", a->num_processes);
  /* mpirun, else mpiexec; its --version output picks the command-line form. */
  const char *mpirun = find_program("mpirun") == 0 ? "mpirun" : "mpiexec";
  if (find_program(mpirun) != 0) {
    fprintf(stderr, WHO ": mpirun or mpiexec were not found on PATH. Install Intel MPI, Open MPI "
            "(apt-get install openmpi-bin) or MVAPICH, or launch without "
            "--use_mpi/--mpirun_hostfile.\n");
    free(cmd);
    return 127;
  }
  acc_mpi_flavor flavor = acc_mpi_flavor_probe(mpirun);
  size_t c = (size_t)acc_mpirun_prefix(flavor, mpirun, a->mpirun_hostfile, nper, ntot, cmd);
  if (!acc_mpi_flavor_exports_with_x(flavor)) nv = 0; /* Hydra passes the environment on */
  for (size_t i = 0; i < nv; i++) {
    int present = 0;
    for (size_t k = 0; k < e.n; k++)
      if (strncmp(e.v[k], mpi_vars[i], strlen(mpi_vars[i])) == 0 && e.v[k][strlen(mpi_vars[i])] == '=')
        present = 1;
    if (present) {
      cmd[c++] = "-x";
      cmd[c++] = (char *)mpi_vars[i];
    }
  }
  for (size_t i = 0; i < nprog; i++) cmd[c++] = a->prog[i];
  cmd[c] = NULL;
  if (!a->quiet) {
    fprintf(stderr, WHO ": running");
    for (size_t i = 0; i < c; i++) fprintf(stderr, " %s", cmd[i]);
    fprintf(stderr, "\n");
  }
  fflush(NULL);
  environ = e.v;
  execvp(mpirun, cmd);
  fprintf(stderr, WHO ": could not run %s (%s, detected as %s)\n", mpirun, strerror(errno),
          acc_mpi_flavor_name(flavor));
  return 127;
}

/* ---- the launch --------------------------------------------------------------------------- */

static double grace_period(void) {
  double d = 5.0;
  int set = 0;
  if (acc__env_double("ACCELERATE_LAUNCH_GRACE_PERIOD", &d, &set) != ACC_OK) {
    /* read before any process is started */
    fprintf(stderr, WHO ": error: %s\n", acc_last_error());
    exit(2);
  }
  return d;
}

int acc_cli_launch(int argc, char **argv) {
  launch_args a;
  memset(&a, 0, sizeof a);
  a.num_processes = a.num_machines = a.machine_rank = a.main_process_port = UNSET;
  a.num_cpu_threads_per_process = UNSET;
  a.max_restarts = UNSET;
  a.mpirun_ccl = UNSET;
  a.zero_stage = UNSET;
  a.gradient_accumulation_steps = UNSET;
  a.monitor_interval = NAN;
  int rc = parse_args(argc, argv, &a);
  if (rc < 0) return 0;
  if (rc) return rc;
  if ((rc = apply_config_file(&a)) != 0) return rc;
  if ((rc = validate(&a)) != 0) return rc;
  if (!a.use_mpi && find_program(a.prog[0]) != 0) {
    fprintf(stderr, WHO ": cannot run '%s': %s\n", a.prog[0],
            strchr(a.prog[0], '/') ? "no such executable file" : "not found in PATH");
    return 127;
  }
  long local = a.num_processes / a.num_machines;
  if (a.use_mpi && a.local_ranks_filter)
    return usage_error("--local_ranks_filter is not supported with --use_mpi (use mpirun's own output "
                       "options)%s%s", "", "");
  unsigned char *muted = NULL;
  if (a.local_ranks_filter && (rc = ranks_filter(a.local_ranks_filter, local, &muted)) != 0) return rc;
  long port = a.main_process_port;
  if (port == 0 && (port = free_port()) <= 0) {
    fprintf(stderr, WHO ": --main_process_port 0: could not find a free port: %s\n", strerror(errno));
    free(muted);
    return 1;
  }
  if (a.use_mpi) return run_mpi(&a, local, port);

  /* Several machines: machine 0 hosts the rendezvous store, every launcher joins it (before any
   * rank starts, so a wrong port or a duplicate machine rank fails here, at once). */
  acc__machines *mm = NULL;
  if (a.num_machines > 1) {
    double rt = 60.0;
    int set = 0;
    if (acc__env_rdzv_timeout(&rt, &set, NULL) != ACC_OK) {
      fprintf(stderr, WHO ": error: %s\n", acc_last_error());
      return 2;
    }
    if (!a.rdzv_id) a.rdzv_id = acc__env_str("ACCELERATE_RDZV_ID");
    if (!a.rdzv_id || !*a.rdzv_id) a.rdzv_id = "default";
    acc__machines_opts mo = {a.main_process_ip, (int)port, (int)a.machine_rank,
                             (int)a.num_machines, (int)a.num_processes, a.rdzv_id,
                             (int)a.max_restarts, rt, a.quiet, WHO};
    if (acc__machines_join(&mm, &mo) != ACC_OK) {
      if (a.machine_rank == JOIN_ORDER)
        fprintf(stderr, WHO ": this launcher (no --machine_rank) could not join the job: %s\n",
                acc_last_error());
      else
        fprintf(stderr, WHO ": machine %ld could not join the job: %s\n", a.machine_rank,
                acc_last_error());
      return 1;
    }
    if (a.machine_rank == JOIN_ORDER) {
      a.machine_rank = acc__machines_rank(mm);
      if (!a.quiet)
        fprintf(stderr, WHO ": no --machine_rank: this launcher is machine %ld (%s)\n",
                a.machine_rank, a.machine_rank == 0 ? "it hosts the rendezvous store"
                                                    : "in the order the launchers joined");
    }
  }

  envlist base = {0};
  if (common_env(&a, local, port, &base, 0) != 0) {
    fprintf(stderr, WHO ": out of memory\n");
    return 1;
  }
  int n = (int)local;
  envlist *envs = calloc((size_t)n, sizeof *envs);
  char ***envp = calloc((size_t)n, sizeof *envp);
  int *ranks = calloc((size_t)n, sizeof *ranks);
  if (!envs || !envp || !ranks) {
    fprintf(stderr, WHO ": out of memory\n");
    return 1;
  }
  for (int i = 0; i < n; i++) ranks[i] = (int)(a.machine_rank * local) + i;
  if (a.log_dir && *a.log_dir && acc_cli_mkdirs(a.log_dir) != ACC_OK) { /* created as torchrun does */
    fprintf(stderr, WHO ": cannot create the log directory %s: %s\n", a.log_dir, acc_last_error());
    return 1;
  }
  int status = 0;
  char run_id[64];
  for (long attempt = 0;; attempt++) {
    acc__spawn_run_id(run_id, sizeof run_id);
    /* the segment name's secret part (the run id alone is visible in /dev/shm listings), and
     * the board where the ranks learn at once of a sibling that exited (src/backend/rdzv.h) */
    char token[ACC_RDZV_TOKEN_LEN + 1];
    if (acc__random_hex(token, ACC_RDZV_TOKEN_LEN / 2) != ACC_OK) {
      fprintf(stderr, WHO ": %s\n", acc_last_error());
      status = 1;
      break;
    }
    int board = acc__board_create(n, ranks, run_id);
    char b[32], board_s[16];
    snprintf(board_s, sizeof board_s, "%d", board);
    int err = 0;
    for (int i = 0; i < n; i++) {
      env_free(&envs[i]);
      err |= env_copy(&envs[i], &base);
      err |= env_set(&envs[i], "ACCELERATE_RUN_ID", run_id);
      err |= env_set(&envs[i], ACC_RDZV_TOKEN_ENV, token);
      if (board >= 0) err |= env_set(&envs[i], ACC_RDZV_BOARD_ENV, board_s);
      else env_unset(&envs[i], ACC_RDZV_BOARD_ENV);
      snprintf(b, sizeof b, "%ld", attempt);
      err |= env_set(&envs[i], "ACCELERATE_RESTART_COUNT", b);
      snprintf(b, sizeof b, "%d", ranks[i]);
      err |= env_set(&envs[i], "RANK", b);
      snprintf(b, sizeof b, "%d", i);
      err |= env_set(&envs[i], "LOCAL_RANK", b);
      envp[i] = envs[i].v;
    }
    if (err) {
      if (board >= 0) close(board);
      fprintf(stderr, WHO ": out of memory\n");
      status = 1;
      break;
    }
    acc__spawn_opts o = {.nprocs = n,
                         .argv = a.prog,
                         .envs = envp,
                         .ranks = ranks,
                         .tee = a.tee,
                         .log_dir = a.log_dir,
                         .muted = muted,
                         .log_append = attempt > 0,
                         .grace_s = grace_period(),
                         .monitor_interval_s = a.monitor_interval,
                         .forward_signals = 1,
                         .new_pgroup = 1,
                         .subreaper = 1,
                         /* the ranks are not in the terminal's foreground group: reading the
                          * terminal would stop them (SIGTTIN) */
                         .null_stdin = isatty(0),
                         .bind_cpus = a.enable_cpu_affinity,
                         .quiet = a.quiet,
                         .who = WHO,
                         .has_board = board >= 0,
                         .board_fd = board};
    if (mm) acc__machines_hook(mm, &o);
    acc__spawn_result res;
    acc_result arc = acc__spawn_run(&o, &res);
    if (board >= 0) close(board);
    acc__spawn_remove_segments(run_id);
    if (arc != ACC_OK) {
      fprintf(stderr, WHO ": %s\n", acc_last_error());
      status = 1;
      break;
    }
    status = res.status;
    if (status == 0 || res.interrupted || attempt >= a.max_restarts) break;
    char why[1024];
    snprintf(why, sizeof why, "%s", res.message);
    if (mm && acc__machines_restart(mm, (int)attempt + 1, why, sizeof why) != ACC_OK) {
      fprintf(stderr, WHO ": machine %ld: %s\n", a.machine_rank, acc_last_error());
      break; /* every machine restarts together or not at all */
    }
    if (!a.quiet)
      fprintf(stderr, WHO ": restarting the group (restart %ld of %ld) because %s\n", attempt + 1,
              a.max_restarts, why[0] ? why : res.message);
  }
  if (mm) {
    if (status != 0) {
      char first[1024];
      acc__machines_first_failure(mm, first, sizeof first, 2.0);
      if (first[0] && !a.quiet) fprintf(stderr, WHO ": the job's first failure: %s\n", first);
    }
    acc__machines_leave(mm, status == 0 ? 600.0 : 5.0);
  }
  for (int i = 0; i < n; i++) env_free(&envs[i]);
  env_free(&base);
  free(envs);
  free(envp);
  free(ranks);
  free(muted);
  return status;
}
