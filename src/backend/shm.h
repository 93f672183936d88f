/* Layout of the shared-memory segment of the shm backend. Internal: shared by the backend's files
 * (shm.c, shm_step.c, shm_coll.c) and the tests that forge stale segments. Bump SHM_VERSION on
 * any change. */
#ifndef ACC_BACKEND_SHM_H
#define ACC_BACKEND_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/collcheck.h"

#define ACC_SHM_MAGIC 0x3130485343434341ull /* "ACCSHM01" little-endian */
#define ACC_SHM_VERSION 9u
#define ACC_SHM_LINE 64
/* One-sided broadcasts (shm_ring.c): slots per rank and the largest message that uses them. */
#define ACC_SHM_RING 16
#define ACC_SHM_RING_BYTES 4096

/* Segment header (first bytes of the mapping). */
/* The first page of a registered buffer's file (shm_reg.c: "<segment>-a<k>-r<rank>"), before its
 * data: who created it, written right after the create, so that a file left by a process killed
 * before it unlinked it is reclaimed like a segment (rdzv.c, same ownership and PID-namespace
 * rules). */
#define ACC_SHM_REG_MAGIC 0x6765722d63636121ull /* "!acc-reg" */
typedef struct acc__shm_reg_owner {
  uint64_t magic;
  int32_t pid;
  uint32_t reserved;
  uint64_t start; /* /proc/<pid>/stat start time, against pid reuse */
  uint64_t pidns; /* inode of /proc/self/ns/pid */
} acc__shm_reg_owner;

typedef struct acc__shm_header {
  uint64_t magic;
  uint32_t version;
  int32_t world;
  uint64_t chunk;       /* bytes per data slot */
  uint64_t total_bytes; /* size of the whole mapping */
  int32_t creator_pid;    /* rank 0, written first: a segment whose creator is dead is stale */
  uint32_t reserved;
  uint64_t creator_start; /* its start time (/proc/<pid>/stat), against pid reuse */
  _Atomic uint32_t ready; /* set by rank 0 when everything below is initialized */
  uint64_t creator_pidns; /* the creator's PID namespace (inode of /proc/self/ns/pid; 0: unknown):
                             its pid means something only to processes of the same namespace */
  /* Rank 0's choices, so that every rank takes the same path (shm_cma.c): single-copy mode
   * (ACCELERATE_SHM_SINGLE_COPY: 0 off, 1 auto, 2 on) and the smallest message that uses it */
  uint32_t cma_mode;
  uint32_t algo; /* forced algorithms (shm_algo.c): all_reduce in bits 0-7, all_gather in 8-15 */
  uint64_t cma_min[3]; /* broadcast, all_gather/gather, all_reduce/reduce */
  /* Futex word + sleeper count, on their own cache line. */
  _Alignas(ACC_SHM_LINE) _Atomic uint32_t futex_word;
  _Atomic uint32_t sleepers;
} acc__shm_header;

/* Per-rank control block: the arrival counter with the call tags on one cache line, then the
 * rest. */
typedef struct acc__shm_ctrl {
  _Alignas(ACC_SHM_LINE) _Atomic uint64_t seq;
  _Atomic int32_t cpu; /* CPU the rank last published from (same line: one miss per step) */
  /* Tag of the rank's collective whose first step is t in tag[t & 1], stored before seq = t; a
   * waiter compares it on the line it has just read for seq (mismatch detection). */
  _Atomic uint64_t tag[2];
  /* Single-copy collectives (shm_cma.c): the addresses of the rank's buffers for the step it
   * publishes next, stored before seq (read by the others after they see seq) */
  uint64_t xsend, xrecv;
  /* Digest of the one-sided broadcasts the rank made before its collective whose first step is
   * t, in bdig[t & 1], stored with tag[t & 1] and compared with it (shm_ring.c) */
  _Atomic uint64_t bdig[2];
  _Alignas(ACC_SHM_LINE) _Atomic int32_t pid;
  /* Single-copy probe at set-up: the address of a word holding `cma_nonce` in the rank's own
   * memory, its PID namespace, and whether it could read every peer's word (1) or not (0). */
  uint64_t cma_addr, cma_nonce, pidns;
  _Atomic int32_t cma_ok;
  /* A single-copy read of this rank failed in the collective that began after step cma_fail - 1
   * (stored before the rank's next step): the peers then fail that collective too, instead of
   * returning a result with this rank's share missing. */
  _Atomic uint64_t cma_fail;
  _Atomic int32_t registered; /* locked its liveness mutex */
  _Atomic int32_t departed;   /* left cleanly (destroy) */
  _Atomic int32_t dead;       /* found dead by a peer (robust mutex EOWNERDEAD) */
  pthread_mutex_t lock;       /* robust, process-shared; held by the rank while it lives */
  /* What the rank is doing, read by the others only for mismatch messages and hang reports:
   * its collective whose first step is t is described in call[t & 1] (the site text rewritten
   * only when the call site changes), `last` is the first step of the latest one described,
   * `active` is 1 while the rank is inside a collective. */
  _Alignas(ACC_SHM_LINE) _Atomic uint64_t last;
  _Atomic uint32_t active;
  acc__call_rec call[2];
  /* One-sided broadcasts (shm_ring.c): how many the rank has completed (stored after its
   * digest entry), b + 1 while it is in broadcast b (0 otherwise), 1 once it is leaving (its
   * count is final), its count at the collective whose first step is t in bcnt[t & 1], the
   * digest after broadcast j in bdigs[j % RING] and its description in bcall[j % RING]. */
  _Alignas(ACC_SHM_LINE) _Atomic uint64_t bseq;
  _Atomic uint64_t bcur;
  _Atomic uint32_t bfinal;
  _Atomic uint64_t bcnt[2];
  _Atomic uint64_t bdigs[ACC_SHM_RING];
  acc__call_rec bcall[ACC_SHM_RING];
  /* A rank that exits without acc_state_destroy after a library error writes that error here
   * at exit (exit_msg, then exit_rc, release): the others then name the error it ended on
   * instead of calling it dead ("a peer closed the connection" is not "killed"). */
  _Alignas(ACC_SHM_LINE) _Atomic int32_t exit_rc;
  char exit_msg[256];
} acc__shm_ctrl;

/* A one-sided broadcast slot: the root of broadcast b writes data (or inl), len and its call tag into its
 * slot b % RING, then stamp = b + 1 (release); the receivers read after seeing that stamp. */
typedef struct acc__shm_ring_slot {
  _Alignas(ACC_SHM_LINE) _Atomic uint64_t stamp;
  uint64_t tag, len;
  uint8_t inl[40]; /* messages up to 40 bytes: on the stamp's cache line */
  _Alignas(ACC_SHM_LINE) uint8_t data[ACC_SHM_RING_BYTES];
} acc__shm_ring_slot;

static inline uint64_t acc__shm_round(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Offsets of the parts of a segment for world ranks and a chunk size. */
static inline uint64_t acc__shm_ctrl_off(void) { return acc__shm_round(sizeof(acc__shm_header), ACC_SHM_LINE); }
static inline uint64_t acc__shm_slots_off(int world) {
  return acc__shm_round(acc__shm_ctrl_off() + (uint64_t)world * sizeof(acc__shm_ctrl), 4096);
}
static inline uint64_t acc__shm_ring_off(int world, uint64_t chunk) {
  /* world slots x 2 buffers, plus the result area x 2 */
  return acc__shm_slots_off(world) + (2 * (uint64_t)world + 2) * chunk;
}
static inline uint64_t acc__shm_total(int world, uint64_t chunk) {
  /* then RING one-sided broadcast slots per rank */
  return acc__shm_ring_off(world, chunk) + (uint64_t)world * ACC_SHM_RING * sizeof(acc__shm_ring_slot);
}

#endif
