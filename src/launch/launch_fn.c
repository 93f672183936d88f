/* acc_launch_function: run a C function in N forked processes that form one process group
 * (the analog of Accelerate's notebook_launcher / debug_launcher). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "backend/rdzv.h"
#include "launch/spawn.h"

extern char **environ;

/* Builds environ + overrides (keys replaced, not duplicated) in *out. */
static acc_result build_env(char ***out, const char *const *keys, char *const *vals, int nk) {
  size_t n = 0;
  while (environ && environ[n]) n++;
  char **e = acc__calloc(n + (size_t)nk + 1, sizeof *e);
  if (!e) return ACC_ERR_NOMEM;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    int overridden = 0;
    for (int k = 0; k < nk; k++) {
      size_t kl = strlen(keys[k]);
      if (strncmp(environ[i], keys[k], kl) == 0 && environ[i][kl] == '=') overridden = 1;
    }
    if (!overridden) e[m++] = environ[i]; /* borrowed */
  }
  for (int k = 0; k < nk; k++) e[m++] = vals[k]; /* owned by the caller */
  e[m] = NULL;
  *out = e;
  return ACC_OK;
}

#define NKEYS 12

acc_result acc_launch_function(int num_processes, acc_launch_fn fn, void *payload) {
  if (!fn) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_launch_function: fn is NULL");
  if (num_processes < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_launch_function: num_processes is %d; it must be at least 1",
                      num_processes);
  if (num_processes == 1) {
    int rc = fn(payload);
    if (rc != 0)
      return acc__error(ACC_ERR_REMOTE, "acc_launch_function: rank 0 returned %d", rc);
    return ACC_OK;
  }
  if (acc_state_get() != NULL)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_launch_function: this process already created its acc_state; launch "
                      "the function before acc_state_create (or destroy the state first)");
  static const char *const keys[NKEYS] = {
      "ACCELERATE_RUN_ID", "RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
      "MASTER_ADDR",       "MASTER_PORT", "ACCELERATE_NUM_MACHINES", "ACCELERATE_MACHINE_RANK",
      "ACCELERATE_RESTART_COUNT", ACC_RDZV_TOKEN_ENV, ACC_RDZV_BOARD_ENV};
  int n = num_processes;
  char run_id[64], token[ACC_RDZV_TOKEN_LEN + 1];
  acc__spawn_run_id(run_id, sizeof run_id);
  ACC_CHECK(acc__random_hex(token, ACC_RDZV_TOKEN_LEN / 2));
  acc_result rc = ACC_OK;
  int board = -1;
  char ***envs = acc__calloc((size_t)n, sizeof *envs);
  char **strs = acc__calloc((size_t)n * NKEYS, sizeof *strs);
  int *ranks = acc__calloc((size_t)n, sizeof *ranks);
  if (!envs || !strs || !ranks) {
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < n; i++) ranks[i] = i;
  board = acc__board_create(n, ranks, run_id); /* -1: the rendezvous timeout still bounds it */
  for (int i = 0; i < n && rc == ACC_OK; i++) {
    ranks[i] = i;
    char vals[NKEYS][64];
    snprintf(vals[0], 64, "%s", run_id);
    snprintf(vals[1], 64, "%d", i);
    snprintf(vals[2], 64, "%d", n);
    snprintf(vals[3], 64, "%d", i);
    snprintf(vals[4], 64, "%d", n);
    snprintf(vals[5], 64, "127.0.0.1");
    snprintf(vals[6], 64, "29500");
    snprintf(vals[7], 64, "1");
    snprintf(vals[8], 64, "0");
    snprintf(vals[9], 64, "0");
    snprintf(vals[10], 64, "%s", token);
    if (board >= 0) snprintf(vals[11], 64, "%d", board);
    else vals[11][0] = '\0';
    for (int k = 0; k < NKEYS; k++) {
      size_t len = strlen(keys[k]) + strlen(vals[k]) + 2;
      char *kv = acc__malloc(len);
      if (!kv) {
        rc = ACC_ERR_NOMEM;
        break;
      }
      snprintf(kv, len, "%s=%s", keys[k], vals[k]);
      strs[(size_t)i * NKEYS + (size_t)k] = kv;
    }
    if (rc == ACC_OK) rc = build_env(&envs[i], keys, strs + (size_t)i * NKEYS, NKEYS);
  }
  if (rc != ACC_OK) goto done;
  fflush(NULL); /* nothing buffered may be written twice by the children */
  acc__spawn_opts o = {.nprocs = n,
                       .fn = fn,
                       .payload = payload,
                       .envs = envs,
                       .ranks = ranks,
                       .grace_s = 5.0,
                       .monitor_interval_s = 0.5,
                       .quiet = 1,
                       .who = "acc_launch_function",
                       .has_board = board >= 0,
                       .board_fd = board};
  acc__spawn_result res;
  rc = acc__spawn_run(&o, &res);
  acc__spawn_remove_segments(run_id);
  if (rc == ACC_OK && res.failed_rank >= 0)
    rc = acc__error(ACC_ERR_REMOTE, "acc_launch_function: %s; the other ranks were stopped",
                    res.message);
done:
  if (board >= 0) close(board);
  if (envs)
    for (int i = 0; i < n; i++) acc__free(envs[i]);
  if (strs)
    for (size_t i = 0; i < (size_t)n * NKEYS; i++) acc__free(strs[i]);
  acc__free(envs);
  acc__free(strs);
  acc__free(ranks);
  return rc;
}
