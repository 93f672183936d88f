/* A launcher's part of a job on several machines (docs/multi-machine.md): machine 0's launcher
 * hosts the rendezvous store (src/backend/store.h) on main_process_port; every launcher joins it
 * (refused: another version, run id, secret, counts, a machine rank already taken), keeps the
 * connection as its liveness channel, posts its group's first failure, and stops its ranks when
 * another machine posts one or the store goes away. With --max_restarts, the launchers agree on
 * K at the join (the store refuses another K), and restart together: one failure key per attempt, and a barrier in the store
 * before each new attempt. Internal, not API. */
#ifndef ACC_MACHINES_H
#define ACC_MACHINES_H

#include "launch/spawn.h"

typedef struct acc__machines acc__machines;

typedef struct acc__machines_opts {
  const char *host; /* main_process_ip */
  int port;         /* main_process_port */
  int machine_rank, num_machines, world_size;
  const char *run_id; /* --rdzv_id */
  int max_restarts;   /* --max_restarts: every machine's launcher must give the same */
  double timeout_s;   /* to reach the store */
  int quiet;
  const char *who;
} acc__machines_opts;

/* Hosts (machine 0) and joins the store. machine_rank -1 (no --machine_rank, --rdzv_backend
 * c10d): the launcher on the host that owns `host` hosts the store and is machine 0, the others
 * get 1, 2, ... in join order (acc__machines_rank). */
acc_result acc__machines_join(acc__machines **out, const acc__machines_opts *o);
/* This launcher's machine rank (given, or from the join). */
int acc__machines_rank(const acc__machines *m);
/* Fills the spawn hooks (on_failure, stop_fd, on_stop) of one run of the group. */
void acc__machines_hook(acc__machines *m, acc__spawn_opts *so);
/* The job's first failure as the store knows it ("" when none), waiting at most timeout_s. */
void acc__machines_first_failure(acc__machines *m, char *buf, size_t cap, double timeout_s);
/* After a failed attempt, before attempt `next` (1, 2, ...): reads the attempt's first failure
 * (into why: every machine names the same cause), waits until every machine's launcher stopped
 * its group and is ready (bounded by the rendezvous timeout), then watches the new attempt.
 * An error (the store lost, a launcher that does not come back) ends the job. */
acc_result acc__machines_restart(acc__machines *m, int next, char *why, size_t cap);
/* Leaves: BYE, close; machine 0 keeps the store until every other launcher left (at most
 * linger_s), then stops it. */
void acc__machines_leave(acc__machines *m, double linger_s);

#endif
