/* accelerate launch --use_fsdp: the --fsdp_* values (flags, else the config file's fsdp_config),
 * checked before anything is started: a value the library cannot honour is a usage error naming the
 * flag and the choices; Hugging Face keys that mean nothing for a C program get a note. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/fsdp_flags.h"

#define WHO "accelerate launch"

const char *const acc_cli_fsdp_keys[ACC_CLI_FSDP_COUNT] = {
    "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_backward_prefetch", "fsdp_forward_prefetch",
    "fsdp_state_dict_type", "fsdp_offload_params", "fsdp_auto_wrap_policy", "fsdp_min_num_params",
    "fsdp_sync_module_states", "fsdp_use_orig_params", "fsdp_cpu_ram_efficient_loading",
    "fsdp_transformer_layer_cls_to_wrap", "fsdp_version", "fsdp_activation_checkpointing"};
const char *const acc_cli_fsdp_vars[ACC_CLI_FSDP_COUNT] = {
    "FSDP_SHARDING_STRATEGY", "FSDP_RESHARD_AFTER_FORWARD", "FSDP_BACKWARD_PREFETCH", "FSDP_FORWARD_PREFETCH",
    "FSDP_STATE_DICT_TYPE", "FSDP_OFFLOAD_PARAMS", "FSDP_AUTO_WRAP_POLICY", "FSDP_MIN_NUM_PARAMS",
    "FSDP_SYNC_MODULE_STATES", NULL, NULL, NULL, NULL, NULL};

void acc_cli_fsdp_from_cfg(const char **v, const acc_cli_cfg *c) {
  const acc_cli_value *cv[ACC_CLI_FSDP_COUNT] = {
      &c->fsdp_sharding_strategy, &c->fsdp_reshard_after_forward, &c->fsdp_backward_prefetch,
      &c->fsdp_forward_prefetch,  &c->fsdp_state_dict_type,       &c->fsdp_offload_params,
      &c->fsdp_auto_wrap_policy,  &c->fsdp_min_num_params,        &c->fsdp_sync_module_states,
      &c->fsdp_use_orig_params,   &c->fsdp_cpu_ram_efficient_loading, &c->fsdp_transformer_layer_cls_to_wrap,
      &c->fsdp_version,           &c->fsdp_activation_checkpointing};
  for (int k = 0; k < ACC_CLI_FSDP_COUNT; k++)
    if (!v[k] && cv[k]->set && cv[k]->s[0]) v[k] = cv[k]->s;
}

static int bad(const char *key, const char *value, const char *why) {
  fprintf(stderr, WHO ": error: --%s '%s' %s (see accelerate launch -h)\n", key, value, why);
  return 2;
}

static int choice(const char **v, int k, const char *const *choices, const char *list) {
  if (!v[k]) return 0;
  for (int i = 0; choices[i]; i++)
    if (!strcasecmp(v[k], choices[i])) {
      v[k] = choices[i];
      return 0;
    }
  char why[160];
  snprintf(why, sizeof why, "is not a value accelerate-c can honour: use %s", list);
  return bad(acc_cli_fsdp_keys[k], v[k], why);
}

static int boolean(const char **v, int k) {
  if (!v[k]) return 0;
  if (!strcasecmp(v[k], "true") || !strcmp(v[k], "1") || !strcasecmp(v[k], "yes")) v[k] = "true";
  else if (!strcasecmp(v[k], "false") || !strcmp(v[k], "0") || !strcasecmp(v[k], "no")) v[k] = "false";
  else return bad(acc_cli_fsdp_keys[k], v[k], "is not true or false");
  return 0;
}

int acc_cli_fsdp_check(int use_fsdp, const char **v, int quiet, int cfg_sets_type) {
  if (!use_fsdp) {
    int any = 0;
    for (int k = 0; k <= ACC_CLI_FSDP_SYNC; k++) any |= v[k] != NULL;
    if (any && !cfg_sets_type && !quiet)
      fprintf(stderr, WHO ": note: --fsdp_* options take effect with --use_fsdp; they are not exported\n");
    return 0;
  }
  static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                           "HYBRID_SHARD_ZERO2", "1", "2", "3", "4", "5", NULL};
  static const char *const prefetch[] = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH", NULL};
  static const char *const sdt[] = {"SHARDED_STATE_DICT", "FULL_STATE_DICT", NULL};
  static const char *const wrap[] = {"NO_WRAP", "SIZE_BASED_WRAP", NULL};
  static const char *const reshard[] = {"true",     "false",        "FULL_SHARD",         "SHARD_GRAD_OP",
                                        "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2", NULL};
  if (v[ACC_CLI_FSDP_STATE_DICT] && !strcasecmp(v[ACC_CLI_FSDP_STATE_DICT], "LOCAL_STATE_DICT"))
    return bad(acc_cli_fsdp_keys[ACC_CLI_FSDP_STATE_DICT], v[ACC_CLI_FSDP_STATE_DICT],
               "is not supported: SHARDED_STATE_DICT writes the same per-process files and resumes on any number "
               "of processes");
  if (v[ACC_CLI_FSDP_WRAP] && !strcasecmp(v[ACC_CLI_FSDP_WRAP], "TRANSFORMER_BASED_WRAP"))
    return bad(acc_cli_fsdp_keys[ACC_CLI_FSDP_WRAP], v[ACC_CLI_FSDP_WRAP],
               "needs layer classes a C program does not have: declare the units with acc_fsdp_add_unit");
  if (v[ACC_CLI_FSDP_RESHARD] && (!strcmp(v[ACC_CLI_FSDP_RESHARD], "1") || !strcmp(v[ACC_CLI_FSDP_RESHARD], "0")))
    v[ACC_CLI_FSDP_RESHARD] = v[ACC_CLI_FSDP_RESHARD][0] == '1' ? "true" : "false";
  if (choice(v, ACC_CLI_FSDP_STRATEGY, strategies,
             "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2") ||
      choice(v, ACC_CLI_FSDP_RESHARD, reshard, "true or false (or a strategy name)") ||
      choice(v, ACC_CLI_FSDP_BWD_PREFETCH, prefetch, "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH") ||
      choice(v, ACC_CLI_FSDP_STATE_DICT, sdt, "SHARDED_STATE_DICT or FULL_STATE_DICT") ||
      choice(v, ACC_CLI_FSDP_WRAP, wrap, "NO_WRAP or SIZE_BASED_WRAP") || boolean(v, ACC_CLI_FSDP_FWD_PREFETCH) ||
      boolean(v, ACC_CLI_FSDP_OFFLOAD) || boolean(v, ACC_CLI_FSDP_SYNC))
    return 2;
  const char *mn = v[ACC_CLI_FSDP_MIN_PARAMS];
  if (mn) {
    char *end;
    long long x = strtoll(mn, &end, 10);
    if (end == mn || *end || x < 1) return bad(acc_cli_fsdp_keys[ACC_CLI_FSDP_MIN_PARAMS], mn, "is not a positive integer");
  }
  const char *ver = v[ACC_CLI_FSDP_VERSION];
  if (ver && strcmp(ver, "1") && strcmp(ver, "2")) return bad(acc_cli_fsdp_keys[ACC_CLI_FSDP_VERSION], ver, "is not 1 or 2");
  for (int k = ACC_CLI_FSDP_ORIG_PARAMS; k < ACC_CLI_FSDP_COUNT && !quiet; k++)
    if (v[k])
      fprintf(stderr, WHO ": note: %s=%s is accepted and means nothing for a C program (docs/fsdp.md)\n",
              acc_cli_fsdp_keys[k], v[k]);
  return 0;
}
