/* The rendezvous store across machines: a small key/value service over TCP (like torch's
 * TCPStore) that machine 0's `accelerate launch` hosts on main_process_port (or rank 0 when the
 * job was started without our launcher, from torchrun's environment). Bootstrap data only:
 * who is in the group, the addresses the gloo module exchanges, failures posted by launchers.
 * Never a data path. Internal, not API.
 *
 * Wire format (both directions): u32 length (little-endian, of what follows), then the body.
 * Request body: u8 op, u16 key length, key, value (the rest). Reply body: u8 status (0 ok,
 * 1 error: the value is the message, 2 not found), value.
 *
 * Every connection starts with HELLO: the library version, the run id, the shared secret (or
 * empty), the kind of client and its place in the job. The server refuses (status 1, with a
 * sentence naming what differs) a different version, run id, secret, num_machines, world
 * size or (launchers) --max_restarts, a second launcher with the same machine rank and a second process with the same rank
 * in the same launch attempt (a restarted group's processes say their attempt, and their keys
 * live under "r<attempt>/", acc__store_set_prefix).
 *
 * The server runs in a thread of its own (poll, one thread, bounded memory). A launcher
 * connection that drops without BYE posts "acc/failed" (the liveness channel, docs/multi-machine.md). */
#ifndef ACC_STORE_H
#define ACC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

typedef struct acc__store acc__store;
typedef struct acc__store_server acc__store_server;

enum { ACC_STORE_LAUNCHER = 1, ACC_STORE_PROCESS = 2, ACC_STORE_TOOL = 3 };

#define ACC_STORE_FAILED_KEY "acc/failed"
#define ACC_STORE_MAX_KEY 256
#define ACC_STORE_MAX_VALUE (1u << 20)
#define ACC_STORE_SECRET_ENV "ACCELERATE_STORE_SECRET"
#define ACC_STORE_SECRET_FILE_ENV "ACCELERATE_STORE_SECRET_FILE"

/* Who connects, and what the server expects (server: run_id, secret, num_machines,
 * world_size, max_restarts; kind and ranks unused). */
typedef struct acc__store_hello {
  const char *run_id; /* the job's rendezvous id (--rdzv_id, default "default") */
  const char *secret; /* NULL or "" : none */
  int kind;           /* ACC_STORE_* */
  int machine_rank;   /* launcher: its machine; process: its machine */
  int num_machines;
  int world_size;
  int rank; /* process: its global rank; else -1 */
  int generation; /* process: the launch attempt (ACCELERATE_RESTART_COUNT); else 0 */
  int max_restarts; /* launcher: its --max_restarts (every launcher must say the same); else 0 */
} acc__store_hello;

/* The key where the job's first failure of launch attempt `generation` is posted ("acc/failed",
 * then "acc/failed/1", ...). The server posts a lost launcher to the newest attempt a launcher
 * watches. */
void acc__store_failed_key(int generation, char *buf, size_t cap);

/* Reads the shared secret: ACCELERATE_STORE_SECRET, else the first line of the file named by
 * ACCELERATE_STORE_SECRET_FILE (must be a regular file not readable by group/others). *out is
 * "" when none is configured. */
acc_result acc__store_secret(char *out, size_t cap);

/* Starts the server on host:port (host NULL: every address). port 0 picks one (see
 * acc__store_server_port). Fails naming host:port when it cannot listen (a second job on the
 * same port: "address in use"). */
acc_result acc__store_server_start(acc__store_server **out, const char *host, int port,
                                   const acc__store_hello *expect);
int acc__store_server_port(const acc__store_server *s);
/* Waits (at most timeout_s) until every launcher other than machine 0's said BYE or dropped,
 * then stops the thread, closes every connection and frees the server. */
void acc__store_server_stop(acc__store_server *s, double timeout_s);

/* Connects to host:port, retrying refused/unreachable connections until timeout_s, and says
 * HELLO. Errors name host:port, the time tried and the last reason, or the server's refusal. */
acc_result acc__store_connect(acc__store **out, const char *host, int port,
                              const acc__store_hello *hello, double timeout_s);
/* A launcher that said machine_rank -1 (no --machine_rank, --rdzv_backend c10d) gets the next
 * free machine rank from the store, in join order: that rank, else -1. */
int acc__store_machine(const acc__store *s);
acc_result acc__store_set(acc__store *s, const char *key, const void *val, size_t n);
/* Waits until key exists (at most timeout_s; < 0: no limit) and returns a copy of its value
 * (acc__free it; NUL-terminated past n). A timeout leaves the connection unusable. */
acc_result acc__store_get(acc__store *s, const char *key, void **val, size_t *n, double timeout_s);
/* Adds delta to the integer in key (absent: 0) and returns the new value. */
acc_result acc__store_add(acc__store *s, const char *key, int64_t delta, int64_t *out);
/* *exists = 1 when key is set. */
acc_result acc__store_check(acc__store *s, const char *key, int *exists);
/* A watch: sends a GET of key without waiting; the socket (acc__store_fd) becomes readable
 * when the key is set or the server went away. Then acc__store_get_finish reads the value into
 * msg: 1 when it was set, -1 when the connection was lost. No other request may be made
 * between the two, except acc__store_bye. */
acc_result acc__store_get_start(acc__store *s, const char *key);
int acc__store_get_finish(acc__store *s, char *msg, size_t cap);
/* A launcher leaving on purpose (no failure is posted for it). */
acc_result acc__store_bye(acc__store *s);
/* Every key this connection names from now on is prefix + key (NULL or "": none). Used by the
 * processes of a restarted group (attempt N > 0: "r<N>/"), so that what they exchange (joins,
 * gloo's addresses, the NCCL id) never meets the keys of an earlier attempt. */
acc_result acc__store_set_prefix(acc__store *s, const char *prefix);
/* The local address of the connection (the interface that reaches the store's machine):
 * numeric, 0 on success. */
int acc__store_local_addr(acc__store *s, char *buf, size_t cap);
/* The one sentence for a connection to the store that was lost ("lost the rendezvous store at
 * host:port (...why...)"), for the client's errors and the launchers' reports. */
void acc__store_lost_message(char *buf, size_t cap, const char *where);
/* Copies n bytes of text that came through the store (a failure posted by another machine, a
 * refusal) into buf, NUL-terminated, with control bytes and invalid UTF-8 escaped as \xNN, so
 * that no client can send escape sequences to an operator's terminal. */
void acc__store_printable(char *buf, size_t cap, const char *src, size_t n);
/* The socket (readable when the server closed the connection). */
int acc__store_fd(const acc__store *s);
void acc__store_close(acc__store *s);

#endif
