/* accelerate-c: starting processes from inside a program (notebook_launcher / debug_launcher).
 * Threads: call from the program's main thread (it forks and waits for child processes). */
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
 * started by `accelerate launch --num_processes N` (the analog of Accelerate's
 * notebook_launcher / debug_launcher). Each child sees RANK = LOCAL_RANK = 0..N-1,
 * WORLD_SIZE = LOCAL_WORLD_SIZE = N, a fresh ACCELERATE_RUN_ID, MASTER_ADDR=127.0.0.1,
 * MASTER_PORT=29500, so acc_state_create inside fn joins the group. The child exits with
 * fn's return value (0 = success; values outside 1..255 become 1).
 * Fail fast: when one process fails (non-zero return, killed by a signal) the others get
 * SIGTERM, then SIGKILL after 5 s; every child is reaped before returning, and /dev/shm/acc-*
 * segments of the run are removed. num_processes == 1 runs fn in this process.
 * @param num_processes  >= 1
 * @param fn             the function; must not be NULL
 * @param payload        passed to fn (each child gets its own copy of the memory after fork)
 * @return ACC_OK when every process returned 0; ACC_ERR_REMOTE naming the first failed rank
 *         and how ("rank 2 (pid 123) exited with status 3", "... was killed by SIGSEGV");
 *         ACC_ERR_INVALID_USAGE when this process already has an acc_state;
 *         ACC_ERR_INVALID_ARGUMENT, ACC_ERR_SYSTEM (fork failed; started ranks are stopped).
 * Ownership: nothing is kept. Collective: no (call it from one process, before acc_state_create).
 * Thread safety: call from one thread; stdio buffers are flushed before forking. The children
 * must not use acc_* objects created by the parent.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_launch_function(int num_processes, acc_launch_fn fn, void *payload);

#ifdef __cplusplus
}
#endif
#endif
