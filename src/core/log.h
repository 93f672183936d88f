/* The library's log sink and the loggers behind acc_get_logger / acc_log (src/core/log.c), for every
 * layer; acc_log_ex's in-order mode is built on collectives in src/core/log.c. Not API. */
#ifndef ACC_OBS_INTERNAL_H
#define ACC_OBS_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"

/* The library's own diagnostics: logger "accelerate", main process only. */
void acc__log(int level, const char *fmt, ...) ACC_PRINTF(2, 3);

/* Terminal output lock shared by the logger and the progress bars, so that a log line never
 * lands in the middle of a bar. While a bar is drawn in place (no newline yet) the logger calls
 * the overlay's hide() before its line and show() after it, both under the lock; the progress
 * bars (src/obs/progress.c) set the overlay when they draw. */
void acc__term_lock(void);
void acc__term_unlock(void);
void acc__term_set_overlay(void (*hide)(void), void (*show)(void)); /* under the lock */

/* This process's rank for file names and prefixes: the state's when there is one, else the
 * launcher's RANK (or MPI's) from the environment, else 0. */
int acc__obs_rank(void);
/* The process state registers where the rank comes from (a negative answer: not known yet). */
void acc__log_set_rank_source(int (*fn)(void));

/* One formatted line to the sink ("[RANK r] time LEVEL name: ..."), and the logger checks that
 * acc_log_ex (src/core/log.c) needs. */
void acc__log_emit(const acc_logger *lg, int level, int rank, const char *fmt, va_list ap);
int acc__logger_ok(const acc_logger *lg);
int acc__logger_effective_level(const acc_logger *lg);

/* acc_print and its relatives: when `cond`, vprintf to stdout and flush; returns the count (0 when
 * not printed). */
int acc__vprint_if(int cond, const char *fmt, va_list ap);

#endif
