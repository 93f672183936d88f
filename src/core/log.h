/* Shared between the observability modules (src/obs/). Not API. */
#ifndef ACC_OBS_INTERNAL_H
#define ACC_OBS_INTERNAL_H

#include <stdio.h>

#include "core/internal.h"

/* The library's own diagnostics: logger "accelerate", main process only. */
void acc__log(int level, const char *fmt, ...) ACC_PRINTF(2, 3);

/* Terminal output lock shared by the logger and the progress bars, so that a log line never
 * lands in the middle of a bar. While a bar is drawn in place (no newline yet) the logger calls
 * acc__progress_hide() before its line and acc__progress_show() after it, both under the lock. */
void acc__term_lock(void);
void acc__term_unlock(void);
void acc__progress_hide(void);
void acc__progress_show(void);

/* This process's rank for file names and prefixes: the state's when there is one, else the
 * launcher's RANK (or MPI's) from the environment, else 0. */
int acc__obs_rank(void);

#endif
