/* acc_log_ex: a line from every process, or from each in turn (ACC_LOG_IN_ORDER, collective).
 * The loggers, levels and the sink are the core's (src/core/log.c); the order needs collectives. */
#include <stdarg.h>
#include <stdint.h>

#include "core/log.h"
#include "state/state.h"

#define IN_ORDER_MARKER 0x4c4f47494e4f5244ll /* "LOGINORD" */

/* In debug mode: every process contributes a marker; anything else means a process is in a
 * different collective. */
static acc_result check_in_order(acc_state *st) {
  int n = acc_state_num_processes(st);
  int64_t mine = IN_ORDER_MARKER, all[n];
  acc_result rc = acc_all_gather(st, &mine, all, 1, ACC_I64);
  if (rc != ACC_OK)
    return acc__error_context(
        rc, "acc_log_ex(ACC_LOG_IN_ORDER) is collective (every process must call it)");
  for (int r = 0; r < n; r++)
    if (all[r] != IN_ORDER_MARKER)
      return acc__error(
          ACC_ERR_MISMATCH,
          "acc_log_ex(ACC_LOG_IN_ORDER) is collective: process %d made a different collective call "
          "instead (every process must call it, in the same order)",
          r);
  return ACC_OK;
}

acc_result acc_log_ex(acc_logger *lg, int level, int flags, const char *fmt, ...) {
  if (!acc__logger_ok(lg)) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_log_ex: not a logger");
  if (!fmt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_log_ex: fmt is NULL");
  if (flags & ~(ACC_LOG_ALL_PROCESSES | ACC_LOG_IN_ORDER))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_log_ex: unknown flags 0x%x", (unsigned)flags);
  int enabled = level >= acc__logger_effective_level(lg);
  int rank = acc__obs_rank();
  va_list ap;
  acc_state *st = acc_state_get();
  if ((flags & ACC_LOG_IN_ORDER) && !st) /* as Accelerate's logging adapter raises */
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_log_ex(ACC_LOG_IN_ORDER): you must initialize the accelerate state (acc_state_create or "
                      "acc_accelerator_create) before logging in process order");
  if (!(flags & ACC_LOG_IN_ORDER) || !st || acc_state_num_processes(st) == 1) {
    if (enabled && (rank == 0 || (flags & (ACC_LOG_ALL_PROCESSES | ACC_LOG_IN_ORDER)))) {
      va_start(ap, fmt);
      acc__log_emit(lg, level, rank, fmt, ap);
      va_end(ap);
    }
    return ACC_OK;
  }
  /* In order: process i writes, then everyone waits; n barriers. The level is the same
   * everywhere only if the environment is, so the barriers run whatever the level. */
  if (acc_state_debug(st)) ACC_CHECK(check_in_order(st));
  int n = acc_state_num_processes(st);
  for (int i = 0; i < n; i++) {
    if (i == rank && enabled) {
      va_start(ap, fmt);
      acc__log_emit(lg, level, rank, fmt, ap);
      va_end(ap);
    }
    acc_result rc = acc_wait_for_everyone(st);
    if (rc != ACC_OK)
      return acc__error_context(
          rc, "acc_log_ex(ACC_LOG_IN_ORDER) is collective (every process must call it)");
  }
  return ACC_OK;
}

