/* A launcher's part of a job on several machines (docs/multi-machine.md): machine 0's launcher
 * hosts the rendezvous store (src/backend/store.h) on main_process_port; every launcher joins it
 * (refused: another version, run id, secret, counts, a machine rank already taken), keeps the
 * connection as its liveness channel, posts its group's first failure, and stops its ranks when
 * another machine posts one or the store goes away. Internal, not API. */
#ifndef ACC_MACHINES_H
#define ACC_MACHINES_H

#include "launch/spawn.h"

typedef struct acc__machines acc__machines;

typedef struct acc__machines_opts {
  const char *host; /* main_process_ip */
  int port;         /* main_process_port */
  int machine_rank, num_machines, world_size;
  const char *run_id; /* --rdzv_id */
  double timeout_s;   /* to reach the store */
  int quiet;
  const char *who;
} acc__machines_opts;

/* Hosts (machine 0) and joins the store. */
acc_result acc__machines_join(acc__machines **out, const acc__machines_opts *o);
/* Fills the spawn hooks (on_failure, stop_fd, on_stop) of one run of the group. */
void acc__machines_hook(acc__machines *m, acc__spawn_opts *so);
/* The job's first failure as the store knows it ("" when none), waiting at most timeout_s. */
void acc__machines_first_failure(acc__machines *m, char *buf, size_t cap, double timeout_s);
/* Leaves: BYE, close; machine 0 keeps the store until every other launcher left (at most
 * linger_s), then stops it. */
void acc__machines_leave(acc__machines *m, double linger_s);

#endif
