/* Between the files of the shared-memory backend: shm.c (the backend object: segment,
 * rendezvous, ops table, teardown), shm_step.c (one synchronizing step: publish, wait, liveness
 * and call-tag checks, hang reports) and shm_coll.c (the collectives built on steps). shm.c
 * calls the other two, shm_coll.c calls shm_step.c, shm_step.c calls neither. Not API; the
 * segment layout is in shm.h. shm_cma.c holds the single-copy collectives and the copy routine;
 * shm_coll.c and shm.c call it, it calls shm_step.c. shm_ring.c holds the one-sided broadcasts of
 * small messages and the checks of their call tags (at the next step, when the ring wraps, at
 * teardown); shm_coll.c and shm.c call it, it calls shm_step.c (which holds the mismatch
 * messages of one-sided broadcasts and the checks that steps make) and shm_cma.c. shm_reg.c
 * holds the registered buffers (memory every rank maps) and the in-place all_reduce over them;
 * shm.c and shm_coll.c call it, it calls shm_step.c and shm_cma.c (the copies and the block
 * reduction both paths of all_reduce share). */
#ifndef ACC_BACKEND_SHM_IMPL_H
#define ACC_BACKEND_SHM_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "backend/shm.h"

#define SHM_CHECK_PERIOD_S 0.1 /* liveness check period while waiting */
#define ACC__SHM_REDUCE_TILE 8192u /* bytes all_reduce reduces at once (fits L1 with its sources) */

typedef struct shm_be {
  acc__backend base;
  int n, me;
  /* Inside the hierarchical backend (one machine's group of a job over several machines): the
   * job's rank of local rank 0 and " on machine M", so reports name the job's ranks; 0 and "". */
  int rank_base;
  char where[32];
  uint8_t *map;
  size_t map_bytes;
  acc__shm_header *hdr;
  acc__shm_ctrl *ctrl;
  uint8_t *slots;
  size_t chunk;
  size_t stream_min; /* messages from this size are written into the segment with non-temporal
                        stores (ACCELERATE_SHM_STREAM_MIN_BYTES) */
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
  int tag_bad; /* found by first_missing: 1 a rank's tag differed from my_tag, 2 only its digest of
                  one-sided broadcasts differed from bdig */
  uint64_t my_tag;
  const char *site_file[2]; /* call site file whose text is in ctrl[me].call[p].site */
  double hang_s;           /* hang-report threshold; 0: off */
  char name[NAME_MAX + 2];
  /* one-sided broadcasts (shm_ring.c) */
  acc__shm_ring_slot *ring; /* n x ACC_SHM_RING slots */
  uint64_t bcount;          /* one-sided broadcasts made */
  uint64_t bdig;            /* digest of their call tags, in order */
  uint64_t bfree;     /* every rank had completed this many at the last look: broadcast b needs
                         no wait while b < bfree + ACC_SHM_RING */
  uint64_t bverified; /* the first this many were compared with every rank's */
  const char *bsite_file[ACC_SHM_RING]; /* call site file whose text is in bcall[i].site */
  int failed;         /* a collective of this backend failed: no check at teardown */
  /* single copy (shm_cma.c) */
  int cma;                /* every rank can read every peer's memory, and the mode allows it */
  size_t cma_min[3];      /* smallest message that moves by single copy, per ACC__SHM_CMA_* */
  uint64_t cma_word;      /* the probe word the peers read */
  uint8_t *scratch;       /* all_reduce: n pieces */
  const uint8_t **cma_src; /* all_reduce: n source pointers */
  /* the copy path's all_reduce (shm_coll.c): the tile a rank reduces its block in, the n sources */
  uint8_t *tile;
  const void **rsrc;
  /* registered buffers (shm_reg.c): the allocations this rank holds, how many the machine's
   * ranks made (the same on every rank), the n - 1 peers' destinations of a reduced block */
  struct acc__shm_reg *regs;
  int nregs;
  uint64_t reg_made;
  uint8_t **rdst;
  /* the algorithms forced through the environment, per ACC__SHM_OP_* (shm_algo.c; 0: the table) */
  int algo_forced[2];
} shm_be;

enum { ACC__SHM_CMA_BCAST, ACC__SHM_CMA_GATHER, ACC__SHM_CMA_REDUCE };

/* ---- shm_algo.c: the choice of algorithm (the one table) ------------------------------------ */

enum { ACC__SHM_OP_ALL_REDUCE, ACC__SHM_OP_ALL_GATHER };
enum {
  ACC__SHM_ALGO_AUTO,    /* the table */
  ACC__SHM_ALGO_ONESTEP, /* all_reduce: one step, every rank reduces every slot */
  ACC__SHM_ALGO_BLOCKS,  /* all_reduce: reduce-scatter + all-gather through the segment */
  ACC__SHM_ALGO_SLOTS,   /* all_gather: through the slots, ordinary stores out */
  ACC__SHM_ALGO_STREAM,  /* all_gather: through the slots, non-temporal stores out */
  ACC__SHM_ALGO_COUNT
};
typedef struct acc__shm_rule {
  int32_t op;         /* ACC__SHM_OP_* */
  int32_t max_procs;  /* the rule applies to at most this many processes */
  uint64_t max_bytes; /* and messages (all_gather: per-process blocks) of at most this size */
  int32_t algo;       /* ACC__SHM_ALGO_* */
} acc__shm_rule;
/* The table (first matching row wins) and its length. */
const acc__shm_rule *acc__shm_algo_rules(size_t *count);
const char *acc__shm_algo_name(int algo);
/* The algorithm of op for n processes and that size: forced (not AUTO) wins, else the table.
 * The same answer on every rank. */
int acc__shm_algo_pick(int forced, int op, int n, uint64_t bytes);
/* The table as text, one rule a line (bench/comm). */
void acc__shm_algo_print(FILE *out);
/* Rank 0 creating the segment: the forced algorithms from the environment into the header;
 * every rank once the header is ready: them into s->algo_forced. */
acc_result acc__shm_algo_choose(shm_be *s);
void acc__shm_algo_load(shm_be *s);

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

/* Liveness of rank r: 0 alive, 1 dead, 2 left the group (destroy). */
int acc__shm_peer_state(shm_be *s, int r);
/* Rank r's description of its latest collective with a step; 0 when it has made none. */
int acc__shm_last_call(shm_be *s, int r, acc__call_rec *out);
/* This rank's description of the collective in progress (zeroes without one). */
void acc__shm_my_call(shm_be *s, acc__call_rec *out);

/* ---- shm_ring.c: one-sided broadcasts (the checks that steps make are in shm_step.c) -------- */

/* Whether a broadcast of that size is one-sided (the same answer on every rank). */
static inline int acc__shm_ring_use(const shm_be *s, size_t nbytes) {
  return s->ring && nbytes <= ACC_SHM_RING_BYTES;
}
/* The root writes its next slot and returns (waiting only when the ring is full); the receivers
 * wait for the root's slot only and compare the root's call tag with theirs. */
acc_result acc__shm_ring_broadcast(shm_be *s, void *buf, size_t nbytes, int root);
/* (in shm_step.c) Rank r's description of its broadcast j when still in its ring, else of its
 * current or latest collective; the mismatch error at broadcast j naming every rank's call; the
 * first broadcast in [lo, hi) whose digest differs between this rank and r (hi: none). */
void acc__shm_ring_rec(shm_be *s, int r, uint64_t j, acc__call_rec *out);
acc_result acc__shm_ring_mismatch(shm_be *s, uint64_t j, const char *what);
uint64_t acc__shm_ring_first_diff(shm_be *s, int r, uint64_t lo, uint64_t hi);
/* A step found every call tag equal but a digest of one-sided broadcasts different (tag_bad 2):
 * the mismatch error naming each rank's first broadcast that differs. t: the step. */
acc_result acc__shm_ring_step_mismatch(shm_be *s, uint64_t t);
/* While a step waits: a rank that is in a one-sided broadcast this rank never made before the
 * step is out of step (ACC_ERR_MISMATCH). */
acc_result acc__shm_ring_check_missing(shm_be *s, int r);
/* Teardown (shm.c, before leaving): compares the broadcasts not yet compared with every rank's;
 * a difference is reported on stderr (and is the last error) and returns 1: shm.c then leaves
 * the group and ends the process with exit status 1. */
int acc__shm_ring_final(shm_be *s);

/* ---- shm_cma.c: single-copy transfers ------------------------------------------------------ */

/* memcpy without glibc's slow cases, for the data copies of both paths. */
void acc__shm_copy(void *dst, const void *src, size_t n);
/* The same with non-temporal stores (and a store fence), for the copies into the segment. */
void acc__shm_copy_nt(void *dst, const void *src, size_t n);
/* Rank 0, creating the segment: the mode and thresholds from the environment into the header. */
acc_result acc__shm_cma_choose(shm_be *s);
/* Every rank, before the rendezvous step: its probe word, namespace, ptracer permission. */
void acc__shm_cma_publish(shm_be *s);
/* Every rank, after the rendezvous step: probes every peer, one step, sets s->cma (the same on
 * every rank); fails only when ACCELERATE_SHM_SINGLE_COPY=on and it is not available. */
acc_result acc__shm_cma_agree(shm_be *s);
/* Whether a call of that kind and size moves by single copy (the same answer on every rank). */
int acc__shm_cma_use(const shm_be *s, int kind, size_t bytes);
acc_result acc__shm_cma_broadcast(shm_be *s, void *buf, size_t nbytes, int root);
acc_result acc__shm_cma_gather(shm_be *s, const void *send, uint8_t *recv, const size_t *sizes,
                               const size_t *disp, int out);
acc_result acc__shm_cma_all_reduce(shm_be *s, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op);
/* One block of an all_reduce: the n sources reduced in rank order (times *scale when scale is
 * not NULL), into out (ordinary stores; may be NULL or src[me]) and each of res[0..nres)
 * (non-temporal stores when nt), a tile of ACC__SHM_REDUCE_TILE bytes at a time. */
void acc__shm_reduce_block(uint8_t *tile, void *out, uint8_t *const *res, int nres,
                           const void *const *src, int n, size_t len, acc_dtype dt, acc_op op,
                           int nt, const float *scale);

/* Rank r's slot of parity p (shm.h). Written before a step of that parity, read by the others
 * after it and before the next step, rewritten two steps later (shm_coll.c's buffer rule). */
static inline uint8_t *acc__shm_slot(shm_be *s, int r, int p) {
  return s->slots + ((size_t)r * 2 + (size_t)p) * s->chunk;
}

/* ---- shm_reg.c: registered buffers --------------------------------------------------------- */

/* The alloc_shared / free_shared ops (backend.h). */
acc_result acc__shm_alloc_shared(acc__backend *be, size_t bytes, void **out);
int acc__shm_free_shared(acc__backend *be, void *p);
/* Teardown: unmaps every allocation and peer mapping. */
void acc__shm_reg_destroy(shm_be *s);
/* An all_reduce of more than the one-step size while s->reg_made > 0 (every rank calls it):
 * one step exchanging where each rank's buffer lies; when every rank's buffer is in place in
 * the same allocation, the reduction in place and one more step (*done 1); otherwise nothing
 * more (*done 0: the caller runs the copy path). scale as reduce_common's. */
acc_result acc__shm_reg_all_reduce(shm_be *s, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op, const float *scale, int *done);

/* ---- shm_coll.c: the collective ops of the table ------------------------------------------- */

acc_result acc__shm_barrier(acc__backend *be);
acc_result acc__shm_broadcast(acc__backend *be, void *buf, size_t nbytes, int root);
acc_result acc__shm_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                               acc_dtype dtype, acc_op op);
acc_result acc__shm_all_reduce_scaled_f32(acc__backend *be, const float *send, float *recv,
                                          size_t count, float scale);
acc_result acc__shm_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                           acc_dtype dtype, acc_op op, int root);
acc_result acc__shm_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op);
acc_result acc__shm_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes);
acc_result acc__shm_gather(acc__backend *be, const void *send, void *recv, size_t nbytes, int root);
acc_result acc__shm_all_gather_v(acc__backend *be, const void *send, void *recv,
                                 const size_t *sizes);

/* The pause of a spin-wait (shm_step.c, shm_ring.c). */
static inline void acc__shm_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
