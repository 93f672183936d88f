/* The Accelerate config file (default_config.yaml): locate, load, write.
 *
 * For `accelerate launch`: fill a flag that was not given on the command line from the file:
 *
 *   acc_cli_cfg cfg;
 *   char path[4096];
 *   int found = 0;
 *   if (acc_cli_config_find(explicit_path_or_NULL, path, sizeof path, &found) != ACC_OK) fail;
 *   if (found && acc_cli_config_load(&cfg, path) != ACC_OK) fail; // acc_last_error() says why
 *   if (found && num_processes_unset && cfg.num_processes.set) num_processes = cfg.num_processes.i;
 *
 * Every key is an acc_cli_value: .set says the file had the key (or Accelerate's load-time
 * rules filled it: compute_environment, num_processes=1 for NO, use_cpu/debug/
 * enable_cpu_affinity=false, mixed_precision from legacy `fp16: true`); the value is in .i
 * (int and bool keys) or .s (string keys). */
#ifndef ACC_CLI_CONFIG_FILE_H
#define ACC_CLI_CONFIG_FILE_H

#include <stdio.h>

#include "accelerate.h"

typedef enum acc_cli_kind {
  ACC_CLI_STR = 1,  /* any scalar, kept as text (gpu_ids: 0 gives "0") */
  ACC_CLI_INT = 2,
  ACC_CLI_BOOL = 3,
  ACC_CLI_LIST = 4, /* a list of strings: .s holds the items joined by '\n', .i their count */
  ACC_CLI_STR_OR_BOOL = 5 /* downcast_bf16: 'no' from `config`, false from `config default` */
} acc_cli_kind;

typedef struct acc_cli_value {
  int set;     /* 1 when the file had the key (or a load-time default filled it) */
  int is_bool; /* for ACC_CLI_STR_OR_BOOL: the value was a YAML boolean (in .i) */
  long i;      /* int and bool values */
  char s[1024];
} acc_cli_value;

typedef struct acc_cli_config {
  acc_cli_value compute_environment; /* LOCAL_MACHINE */
  acc_cli_value debug;
  acc_cli_value distributed_type; /* NO, MULTI_CPU or MULTI_GPU */
  acc_cli_value downcast_bf16;
  acc_cli_value dynamo_backend; /* inside dynamo_config */
  acc_cli_value dynamo_mode;
  acc_cli_value dynamo_use_dynamic;
  acc_cli_value dynamo_use_fullgraph;
  acc_cli_value dynamo_use_regional_compilation;
  acc_cli_value enable_cpu_affinity;
  acc_cli_value gpu_ids;
  acc_cli_value machine_rank;
  acc_cli_value main_process_ip;
  acc_cli_value main_process_port;
  acc_cli_value main_training_function;
  acc_cli_value mixed_precision; /* no, fp16, bf16 (fp8 is rejected) */
  acc_cli_value mpirun_ccl;      /* inside mpirun_config: oneCCL workers (CCL_WORKER_COUNT) */
  acc_cli_value mpirun_hostfile; /* inside mpirun_config */
  acc_cli_value num_machines;
  acc_cli_value num_processes; /* -1 or unset: pass --num_processes */
  acc_cli_value rdzv_backend;
  acc_cli_value same_network;
  acc_cli_value tpu_env;
  acc_cli_value tpu_name;
  acc_cli_value tpu_use_cluster;
  acc_cli_value tpu_use_sudo;
  acc_cli_value tpu_zone;
  acc_cli_value use_cpu;
  acc_cli_value zero_stage; /* accelerate-c: ZeRO stage 0|1 (ACCELERATE_ZERO_STAGE) */
  acc_cli_value comm_hook;  /* accelerate-c: no|fp16|bf16 (ACCELERATE_COMM_HOOK) */
  /* inside fsdp_config (docs/fsdp.md): every value as text; the launcher checks and exports them */
  acc_cli_value fsdp_activation_checkpointing;
  acc_cli_value fsdp_auto_wrap_policy;
  acc_cli_value fsdp_backward_prefetch;
  acc_cli_value fsdp_cpu_ram_efficient_loading;
  acc_cli_value fsdp_forward_prefetch;
  acc_cli_value fsdp_min_num_params;
  acc_cli_value fsdp_offload_params;
  acc_cli_value fsdp_reshard_after_forward;
  acc_cli_value fsdp_sharding_strategy;
  acc_cli_value fsdp_state_dict_type;
  acc_cli_value fsdp_sync_module_states;
  acc_cli_value fsdp_transformer_layer_cls_to_wrap;
  acc_cli_value fsdp_use_orig_params;
  acc_cli_value fsdp_version;
  /* keys Accelerate knows that accelerate-c accepts and ignores, and unknown keys, for the
   * one warning printed by load (comma-separated) */
  char ignored[1024];
  char unknown[1024];
} acc_cli_cfg;

/** Clears every key (nothing set). */
void acc_cli_config_init(acc_cli_cfg *cfg);

/** The Accelerate config directory: $HF_HOME/accelerate, else
 * $XDG_CACHE_HOME/huggingface/accelerate, else ~/.cache/huggingface/accelerate. */
acc_result acc_cli_config_dir(char *buf, size_t len);
/** <config dir>/default_config.yaml. */
acc_result acc_cli_config_default_path(char *buf, size_t len);

/** Which file to use: explicit (must exist: ACC_ERR_IO otherwise) or the default path when it
 * exists. *found = 0 when no explicit path was given and there is no default file. */
acc_result acc_cli_config_find(const char *explicit_path, char *buf, size_t len, int *found);

/** Loads a YAML (or JSON, which is YAML) config file into cfg (initialized first). Unknown keys
 * are listed once on stderr ("accelerate: ignoring unknown keys ... in <path>") and skipped.
 * Errors: ACC_ERR_IO (cannot read), ACC_ERR_FORMAT (malformed YAML, wrong value type,
 * unsupported value; the message names the file, the line and the key). */
acc_result acc_cli_config_load(acc_cli_cfg *cfg, const char *path);
/** Same, from a string (name is used in messages). warn: where to report unknown keys (NULL:
 * nowhere). */
acc_result acc_cli_config_parse(acc_cli_cfg *cfg, const char *text, size_t len,
                                const char *name, FILE *warn);

/** Writes the set keys, sorted, as YAML in Accelerate's formatting (json = 0) or as JSON with a
 * 2-space indent (json = 1). Creates missing parent directories. */
acc_result acc_cli_config_write(const acc_cli_cfg *cfg, const char *path, int json);
/** The same text into out (YAML or JSON). */
void acc_cli_config_dump(const acc_cli_cfg *cfg, FILE *out, int json);
/** `accelerate env` lines: "\t- key: value" per set key. */
void acc_cli_config_print_env(const acc_cli_cfg *cfg, FILE *out);

/** Command-line option matching for the config/env/test subcommands: argv[*i] is --name,
 * --name=value, or the same with '-' for '_'; *value gets the value (the next argument, *i
 * advanced). Returns 1 on a match, 0 if not this option, -1 when the value is missing. */
int acc_cli_match_opt(int argc, char **argv, int *i, const char *name, const char **value);

/** Creates a directory and its parents (mkdir -p). */
acc_result acc_cli_mkdirs(const char *dir);

#endif
