/* accelerate launch's --fsdp_* flags and the config file's fsdp_config keys (docs/fsdp.md). Not API. */
#ifndef ACC_CLI_FSDP_FLAGS_H
#define ACC_CLI_FSDP_FLAGS_H

#include "cli/config_file.h"

/* In the order of the flags (--<key>) and of acc_cli_fsdp_keys / _vars. */
enum {
  ACC_CLI_FSDP_STRATEGY, ACC_CLI_FSDP_RESHARD, ACC_CLI_FSDP_BWD_PREFETCH, ACC_CLI_FSDP_FWD_PREFETCH,
  ACC_CLI_FSDP_STATE_DICT, ACC_CLI_FSDP_OFFLOAD, ACC_CLI_FSDP_WRAP, ACC_CLI_FSDP_MIN_PARAMS, ACC_CLI_FSDP_SYNC,
  ACC_CLI_FSDP_ORIG_PARAMS, ACC_CLI_FSDP_RAM_LOADING, ACC_CLI_FSDP_CLS_TO_WRAP, ACC_CLI_FSDP_VERSION,
  ACC_CLI_FSDP_ACT_CKPT, ACC_CLI_FSDP_COUNT
};
/* the fsdp_config key of each value, and the variable it is exported as (NULL: noted, not exported) */
extern const char *const acc_cli_fsdp_keys[ACC_CLI_FSDP_COUNT];
extern const char *const acc_cli_fsdp_vars[ACC_CLI_FSDP_COUNT];

/* Fills the values not given as flags from the config file's fsdp_config. */
void acc_cli_fsdp_from_cfg(const char **v, const acc_cli_cfg *c);
/* Checks (and normalizes) the values: 0, or 2 after printing a usage error naming the flag and the
 * values accepted. Keys that mean nothing for a C program get a one-line note (unless quiet). */
int acc_cli_fsdp_check(int use_fsdp, const char **v, int quiet, int cfg_sets_type);

#endif
