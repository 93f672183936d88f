/* accelerate-c: starting processes from inside a program (notebook_launcher / debug_launcher). */
#ifndef ACCELERATE_LAUNCH_H
#define ACCELERATE_LAUNCH_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The function run by each process; returns 0 on success. */
typedef int (*acc_launch_fn)(void *payload);

/**
 * Runs fn(payload) in num_processes new processes (fork) that form one process group, as if
 * started by `accelerate launch --num_processes N`: inside fn, acc_state_create sees ranks
 * 0..N-1. Waits for all; when one fails (non-zero return, signal) the others are stopped.
 * num_processes == 1 runs fn in this process. Must be called before this process created its
 * own acc_state. Returns ACC_OK when every process returned 0, else ACC_ERR_REMOTE whose
 * message names the first failed rank and how it failed.
 */
ACC_EXTERN acc_result acc_launch_function(int num_processes, acc_launch_fn fn, void *payload);

#ifdef __cplusplus
}
#endif
#endif
