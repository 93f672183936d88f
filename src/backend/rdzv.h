/* Rendezvous helpers of the shared-memory backend, shared with the launcher. Internal, not API.
 *
 *  - Token: the unpredictable part of the segment name. A launcher that knows its ranks exports
 *    ACCELERATE_RENDEZVOUS_TOKEN; otherwise rank 0 draws one (getrandom) and publishes it in a
 *    0600 file of a private runtime directory, named after the (predictable) job id, which the
 *    other ranks read. Only the same user can read the directory, so only the same user can
 *    learn the segment's name before it exists.
 *  - Reclaim: segments and token files left by a creator that is dead (SIGKILL during the
 *    rendezvous) are removed at the next start.
 *  - Launch board: a small memfd the launcher shares with its ranks (inherited descriptor
 *    ACCELERATE_LAUNCHER_STATUS_FD) where it records the ranks that exited; ranks read it while
 *    they rendezvous, so a sibling that died before attaching is reported at once. */
#ifndef ACC_RDZV_H
#define ACC_RDZV_H

#include <stdint.h>
#include <sys/types.h>

#include "core/internal.h"

#define ACC_RDZV_TOKEN_LEN 32 /* hex characters (128 random bits) */
#define ACC_RDZV_TOKEN_ENV "ACCELERATE_RENDEZVOUS_TOKEN"
#define ACC_RDZV_BOARD_ENV "ACCELERATE_LAUNCHER_STATUS_FD"

/* Start time of a process (clock ticks after boot, /proc/<pid>/stat); 0 if it does not exist or
 * is a zombie. Compared with a recorded value, it tells a living creator from a reused pid. */
uint64_t acc__proc_start_time(pid_t pid);

/* 1 when the process (pid, start time) still runs, 0 when it is gone. */
int acc__proc_alive(pid_t pid, uint64_t start);
/* This process's PID namespace (the inode of /proc/self/ns/pid), 0 when it cannot be read. A
 * recorded pid is judged (alive or dead) only by processes of the same namespace: containers
 * sharing /dev/shm see each other's segments but not each other's pids. */
uint64_t acc__pid_namespace(void);

/* Fills buf with 2 * nbytes random hex characters (+ NUL); nbytes <= 64. */
acc_result acc__random_hex(char *buf, size_t nbytes);

/* Reads ACCELERATE_RENDEZVOUS_TOKEN: *set = 0 when unset; an error when it is not 16..64
 * characters of [0-9A-Za-z_-]. */
acc_result acc__rdzv_env_token(char *out, size_t cap, int *set);

/* Private runtime directory of the effective user: $XDG_RUNTIME_DIR when it is a directory owned
 * by the euid with mode 0700, else /tmp/accelerate-<euid> (created 0700; must be a real
 * directory owned by the euid with no group/other permission), else $HOME/.cache/accelerate-run
 * (same checks). An error names each rejected directory and why. */
acc_result acc__rdzv_runtime_dir(char *out, size_t cap);

/* Path of the token file of a job in dir. */
void acc__rdzv_token_path(char *out, size_t cap, const char *dir, const char *job_id);

/* Rank 0: draws a token and publishes it atomically (0600 temporary file, then rename over path;
 * a stale file of a dead job with the same id is replaced). */
acc_result acc__rdzv_publish_token(const char *path, char *token, size_t cap);

/* Other ranks: 1 with the token read, 0 when the file does not exist (yet), or an error (file
 * not owned by the euid, mode other than 0600, not a regular file, malformed). */
int acc__rdzv_read_token(const char *path, int rank, char *token, size_t cap);

/* Removes the token file when it still holds this token. */
void acc__rdzv_remove_token(const char *path, const char *token);

/* Removes /dev/shm/acc-* segments and token files of the euid whose creator is dead.
 * runtime_dir may be NULL (segments only). Returns how many entries were removed. */
int acc__rdzv_reclaim(const char *runtime_dir);

/* ---- launch board ------------------------------------------------------------------------- */

#define ACC_BOARD_MAGIC 0x44524f4243434141ull /* "AACCBORD" little-endian */

typedef struct acc__board_header {
  uint64_t magic;
  int32_t nprocs;
  int32_t reserved;
  char run_id[64]; /* ACCELERATE_RUN_ID of the job: a board inherited by another job is ignored */
} acc__board_header;

typedef struct acc__board_entry {
  int32_t rank;   /* global rank */
  int32_t pid;
  int32_t state;  /* ACC_BOARD_RUNNING, _EXITED, _SIGNALED */
  int32_t detail; /* exit status or signal number */
} acc__board_entry;

enum { ACC_BOARD_RUNNING = 0, ACC_BOARD_EXITED = 1, ACC_BOARD_SIGNALED = 2 };

/* After the entries, one note per local process: the last library error it exited with (written
 * by the rank at exit, src/state/last_words.c), so that the launcher's report names the rank
 * that failed first with its own message, not one that only failed because of it. */
#define ACC_BOARD_NOTE_MSG 500
typedef struct acc__board_note {
  int32_t rc; /* acc_result; 0: no note */
  int32_t reserved;
  char msg[ACC_BOARD_NOTE_MSG];
} acc__board_note;

/* Launcher: creates the board (memfd, close-on-exec) for nprocs ranks; -1 on failure (then the
 * ranks rely on their rendezvous timeout). */
int acc__board_create(int nprocs, const int *ranks, const char *run_id);
/* Launcher: records the exit of local process i (wait status st). */
void acc__board_record(int fd, int i, pid_t pid, int st);

/* Rank: writes its note (the entry whose rank is `rank`). */
void acc__board_write_note(int fd, int rank, int rc, const char *msg);
/* Launcher: local process i's note; 0 when there is none (*rc = 0). */
int acc__board_read_note(int fd, int i, int *rc, char *msg, size_t cap);

/* Rank: the board of this job, or -1 (variable unset, descriptor not a board of this run). */
int acc__board_open(void);
/* Rank: looks for a rank in [0, world) other than me that exited; returns it (and its entry), or
 * -1 when none. When rank >= 0, looks at that rank only. */
int acc__board_find_dead(int fd, int me, int rank, acc__board_entry *out);
/* "exited with status 3" / "was killed by SIGKILL" for an entry. */
void acc__board_describe(const acc__board_entry *e, char *buf, size_t cap);

#endif
