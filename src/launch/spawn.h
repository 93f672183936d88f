/* Process-group spawning and monitoring, shared by `accelerate launch` (exec mode) and
 * acc_launch_function (fork mode). Internal, not API.
 *
 * One call starts nprocs local processes, watches them and returns when all are gone:
 *  - fail fast: the first process that exits non-zero or dies by a signal is reported, with its
 *    last library error when it left one on the board (src/state/last_words.c); every other
 *    process gets SIGTERM, then SIGKILL after grace_s. A process whose last error is
 *    ACC_ERR_REMOTE (it failed because another did) is reported only if its cause does not exit
 *    with an error of its own within grace_s (the others are not signalled meanwhile);
 *  - with forward_signals, SIGINT/SIGTERM/SIGHUP/SIGQUIT received by the caller are forwarded
 *    once to the group (a second one escalates to SIGKILL);
 *  - every child is reaped (no zombie is left) before returning. */
#ifndef ACC_SPAWN_H
#define ACC_SPAWN_H

#include "core/internal.h"

/* tee bits: prefix "[rank i] " on each line of the selected streams (pipes + reader loop). */
#define ACC__TEE_STDOUT 1
#define ACC__TEE_STDERR 2

typedef struct acc__spawn_opts {
  int nprocs;                /* local processes, >= 1 */
  char *const *argv;         /* exec mode: program and arguments (PATH is searched) */
  int (*fn)(void *payload);  /* fork mode, used when argv is NULL: the child runs fn(payload) */
  void *payload;
  char **const *envs;        /* envs[i]: NULL-terminated "K=V" environment of local process i */
  const int *ranks;          /* global rank of local process i (messages, prefixes, log names) */
  int tee;                   /* ACC__TEE_* bits; 0 = children inherit stdout/stderr (zero-copy) */
  const char *log_dir;       /* NULL or a directory: rank<r>.stdout.log / rank<r>.stderr.log */
  const unsigned char *muted; /* NULL, or muted[i] != 0: local process i's stdout and stderr do not
                                reach the console (log_dir files still get them); torchrun's
                                --local-ranks-filter */
  int log_append;            /* append to the log files (restarts) instead of truncating */
  double grace_s;            /* SIGTERM -> SIGKILL delay */
  double monitor_interval_s; /* upper bound of one wait in the monitor loop */
  int forward_signals;       /* catch and forward SIGINT/SIGTERM/SIGHUP/SIGQUIT (CLI only) */
  int new_pgroup;            /* put the children in one new process group (killpg reaches
                                their descendants too) */
  int subreaper;             /* become a child subreaper: orphaned descendants of the ranks are
                                reparented to us and reaped (waitpid(-1): CLI only) */
  int null_stdin;            /* children read /dev/null instead of the caller's stdin */
  int bind_cpus;             /* pin local process i to one CPU: the (i mod n)-th of the n CPUs the
                                caller may run on (--enable_cpu_affinity, as mpirun's core
                                binding); a failed pin is reported on stderr, the rank still runs */
  int quiet;                 /* do not print the failure report */
  const char *who;           /* prefix of printed messages, e.g. "accelerate launch" */
  int has_board;             /* board_fd is a launch board (acc__board_create, src/backend/rdzv.h): */
  int board_fd;              /* each exit is recorded there at once, and the children inherit it */
  /* Several machines (src/launch/machines.c): on_failure (optional) is called once, at the
   * group's first failure, with its message (signaled: killed by a signal), before the others
   * are stopped; when stop_fd > 0
   * becomes readable, on_stop fills msg and returns 1 to stop the group as failed (status 1,
   * failed_rank -1, message msg), 0 to keep running (stop_fd is no longer watched). */
  void (*on_failure)(void *ctx, int rank, int signaled, const char *message);
  /* on_interrupt (optional) is called once, when the launcher itself receives a signal, before
   * it forwards it: the other machines learn that this launcher was told to stop, not that a
   * rank failed. */
  void (*on_interrupt)(void *ctx, int sig);
  int stop_fd;
  int (*on_stop)(void *ctx, char *msg, size_t cap);
  void *hook_ctx;
} acc__spawn_opts;

typedef struct acc__spawn_result {
  int failed_rank;   /* global rank of the first failure, -1 if none */
  int exit_code;     /* its exit status (0 if it died by a signal) */
  int term_signal;   /* the signal that killed it, 0 if it exited */
  int interrupted;   /* signal received by the caller and forwarded, 0 if none */
  int status;        /* suggested process exit status: 0, the rank's status, or 128 + signal */
  char message[768]; /* "rank 1 (pid 42) exited with status 3[: its last error]", or "" */
  int remote;        /* stopped because of another machine (on_stop returned 1) */
} acc__spawn_result;

/* Runs the group described by o and fills *out. Returns ACC_OK when the group ran (whatever
 * its outcome, see out->status), or an error when it could not be started (fork, pipe, log
 * files); in that case every process already started has been stopped and reaped. */
acc_result acc__spawn_run(const acc__spawn_opts *o, acc__spawn_result *out);

/* Writes a new unique run id (digits only) into buf. */
void acc__spawn_run_id(char *buf, size_t cap);

/* Removes every /dev/shm/acc-* entry whose name contains run_id. Returns how many. */
int acc__spawn_remove_segments(const char *run_id);


#endif
