/* Between the files of the shared-memory backend: shm.c (the backend object: segment,
 * rendezvous, ops table, teardown), shm_step.c (one synchronizing step: publish, wait, liveness
 * and call-tag checks, hang reports) and shm_coll.c (the collectives built on steps). shm.c
 * calls the other two, shm_coll.c calls shm_step.c, shm_step.c calls neither. Not API; the
 * segment layout is in shm.h. */
#ifndef ACC_BACKEND_SHM_IMPL_H
#define ACC_BACKEND_SHM_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/shm.h"

#define SHM_CHECK_PERIOD_S 0.1 /* liveness check period while waiting */

typedef struct shm_be {
  acc__backend base;
  int n, me;
  uint8_t *map;
  size_t map_bytes;
  acc__shm_header *hdr;
  acc__shm_ctrl *ctrl;
  uint8_t *slots;
  size_t chunk;
  uint64_t counter;
  double timeout_s;
  double spin_s;  /* busy-wait this long before yielding */
  double yield_s; /* then sched_yield until this long, then sleep on the futex */
  int cpu;        /* CPU at the last publish */
  int can_nudge;  /* no more processes than CPUs: co-located ranks are moved apart (shm_step.c) */
  unsigned coloc; /* consecutive waits on a peer that last ran on this CPU */
  int registered; /* own mutex locked */
  int unlinked;
  int joining; /* during the rendezvous step: messages talk about attaching */
  double rdzv_t0;        /* start of the rendezvous */
  double rdzv_timeout_s; /* bound of the whole rendezvous (attach + first step) */
  const char *rdzv_var;  /* what set it, for messages */
  int board_fd;          /* launcher's board of exited ranks, or -1 */
  int token_published;   /* rank 0 wrote token_path */
  char token[80];        /* unpredictable part of the name */
  char token_path[PATH_MAX]; /* token file (empty when the launcher exported the token) */
  /* call tags (shm_step.c) */
  int check_pending;        /* in the first step of a collective: first_missing compares tags */
  uint64_t published_seq;   /* number of the last collective published (publish_call) */
  int tag_bad;              /* a rank's tag differed from my_tag (found by first_missing) */
  uint64_t my_tag;
  const char *site_file[2]; /* call site file whose text is in ctrl[me].call[p].site */
  double hang_s;           /* hang-report threshold; 0: off */
  char name[NAME_MAX + 2];
} shm_be;

/* ---- shm_step.c ---------------------------------------------------------------------------- */

/* One step: publishes ++counter (with the call tag on a collective's first step) and waits until
 * every rank has published it; fails on a gone peer, a tag mismatch or the timeout. */
acc_result acc__shm_step(shm_be *s);
/* Wakes the ranks sleeping on the futex word, if any. */
void acc__shm_wake_sleepers(shm_be *s);
/* During the rendezvous: a rank that the launcher saw exit will never attach. */
acc_result acc__shm_board_check(shm_be *s);
/* The call_end op: this rank is no longer in a collective (hang reports). */
void acc__shm_call_end(acc__backend *be);

/* ---- shm_coll.c: the collective ops of the table ------------------------------------------- */

acc_result acc__shm_barrier(acc__backend *be);
acc_result acc__shm_broadcast(acc__backend *be, void *buf, size_t nbytes, int root);
acc_result acc__shm_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                               acc_dtype dtype, acc_op op);
acc_result acc__shm_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                           acc_dtype dtype, acc_op op, int root);
acc_result acc__shm_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op);
acc_result acc__shm_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes);
acc_result acc__shm_gather(acc__backend *be, const void *send, void *recv, size_t nbytes, int root);
acc_result acc__shm_all_gather_v(acc__backend *be, const void *send, void *recv,
                                 const size_t *sizes);

#endif
