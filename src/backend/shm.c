/* Shared-memory backend: the built-in default for several processes on one machine.
 *
 * Segment. One POSIX shared-memory object "/acc-<job id>-<token>" (layout in shm.h): a header, one
 * control block per rank (arrival counter `seq` alone on a cache line, pid, flags, a robust
 * process-shared liveness mutex), per-rank data slots [2][CHUNK], a result area [2][CHUNK].
 * The whole mapping is prefaulted once (MAP_POPULATE), never per call.
 *
 * Rendezvous. The job id is predictable under some launchers, so the name also carries a random
 * token that only the job's user can learn (exported by `accelerate launch`, or published by
 * rank 0 in a 0600 file of the user's private runtime directory: src/backend/rdzv.c). Rank 0 reclaims
 * segments whose creator died, creates the object with O_EXCL (a leftover of ours with the same
 * name is unlinked and recreated; another user's is refused), records itself as the creator,
 * reserves the memory (posix_fallocate: a full /dev/shm is an error, not a SIGBUS later),
 * initializes it, locks its liveness mutex and sets `ready`. The other ranks refuse an object
 * not owned by their euid with mode 0600 (before mapping it), and reopen the name until it is
 * ready and rank 0's mutex is held (otherwise it is a stale segment of a dead job: drop it,
 * retry). Each rank locks its own mutex and registers; after one step that every rank reaches,
 * rank 0 unlinks the name and the token file: the mappings stay valid and no /dev/shm entry can
 * outlive the job, even if everything crashes later. The whole rendezvous is bounded by
 * ACCELERATE_RENDEZVOUS_TIMEOUT, and under `accelerate launch` a sibling that exits before
 * attaching is learnt from the launcher's board at once.
 *
 * Steps. Every rank keeps a local counter; all ranks make the same calls, so the counters agree.
 * That rule is verified, not assumed: with the first step t of a collective, a rank stores the
 * collective's tag (collcheck.h: number, operation, dtype, count, root, origin) beside its seq,
 * in tag[t & 1], and its full description in call[t & 1] of its control block, before
 * publishing t; once every rank has reached t, each compares all tags (on the cache lines it
 * has just read for seq) and a difference fails the call with ACC_ERR_MISMATCH on every rank,
 * naming each rank's call. A rank rewrites slot t & 1 at step t + 2 at the earliest, which it
 * publishes only after every rank has published t + 1, i.e. finished comparing: the tags
 * compared are the right ones. (Slots follow steps, not collective numbers: a collective with
 * nothing to move, count 0, makes no step and publishes nothing.)
 * A step publishes seq = ++counter and waits until every rank's seq >= counter. Waiting spins
 * briefly, then sleeps on the shared futex word (publishers bump it and wake all when someone
 * sleeps); every 100 ms, in every phase (spin, yield, futex: the first two are bounded to 1 s),
 * the ranks not yet arrived are checked: a robust mutex that is free or returns EOWNERDEAD means
 * the rank is gone (died, or left via destroy), which fails the call with ACC_ERR_REMOTE; the
 * collective timeout gives ACC_ERR_TIMEOUT. Nothing waits forever.
 * A wait longer than the hang-report threshold (ACCELERATE_HANG_REPORT_S) prints one line naming
 * the ranks not arrived and what each is doing (from their control blocks).
 *
 * Buffer rule (why double buffering is safe). A step numbered s uses buffers of parity s & 1:
 *   - slots of parity p are written only before publishing a step s with s & 1 == p, and read
 *     only after step s and before publishing s + 1;
 *   - the result area of parity p is written only after step s (s & 1 == p) and before s + 1,
 *     and read only after s + 1 and before publishing s + 2.
 * A rank writes the same buffer again for step s + 2 only after it has passed step s + 1 (slots)
 * or s + 2 (result), i.e. after every rank has published the step that follows its reads. So a
 * large all_reduce needs ONE step per chunk (plus one): write chunk c into my slot; step; copy
 * out the result of chunk c-1; reduce my 1/N share of chunk c into the result area; repeat.
 *
 * Determinism. Reductions add slots in rank order (rank 0 + rank 1 + ...) elementwise, whether
 * small or chunked, so every rank gets the same bits, independent of the chunk size.
 */
#include "backend/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/rdzv.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define SHM_DEFAULT_CHUNK (512u * 1024u) /* measured best of 64 KiB..1 MiB: docs/PERFORMANCE.md */
#define SHM_SMALL_BYTES (16u * 1024u) /* one-step all_reduce/reduce up to this size */
#define SHM_CHECK_PERIOD_S 0.1        /* liveness check period while waiting */
#define SHM_FUTEX_WAIT_NS 50000000L   /* one futex sleep: 50 ms at most */
#define SHM_MAX_PHASE_US 1000000L     /* upper bound of ACCELERATE_SHM_SPIN_US / _YIELD_US */
#define SHM_RDZV_TIMEOUT_S 60.0       /* default ACCELERATE_RENDEZVOUS_TIMEOUT */

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
  /* call tags (see the header comment) */
  int check_pending;        /* in the first step of a collective: first_missing compares tags */
  uint64_t published_seq;   /* number of the last collective published (publish_call) */
  int tag_bad;              /* a rank's tag differed from my_tag (found by first_missing) */
  uint64_t my_tag;
  const char *site_file[2]; /* call site file whose text is in ctrl[me].call[p].site */
  double hang_s;           /* hang-report threshold; 0: off */
  char name[NAME_MAX + 2];
} shm_be;

/* ---- small helpers ------------------------------------------------------------------------ */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* memcpy for the data copies. glibc's memcpy uses `rep movsb` below ~L2 size, which on the AMD
 * EPYC of the build machine runs at ~2 GB/s instead of ~40 GB/s when the destination is 16 bytes
 * off the source's alignment, as with malloc'ed user buffers against page-aligned slots
 * (measured, docs/PERFORMANCE.md). A plain SSE2 loop has no such cliff. */
static void copy_bytes(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= 512) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
      __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
      _mm_storeu_si128((__m128i *)(d + i), a);
      _mm_storeu_si128((__m128i *)(d + i + 16), b);
      _mm_storeu_si128((__m128i *)(d + i + 32), c);
      _mm_storeu_si128((__m128i *)(d + i + 48), e);
    }
    if (i < n) memcpy(d + i, s + i, n - i);
    return;
  }
#endif
  memcpy(dst, src, n);
}

static inline uint8_t *slot(shm_be *s, int r, int p) {
  return s->slots + ((size_t)r * 2 + (size_t)p) * s->chunk;
}
static inline uint8_t *result_area(shm_be *s, int p) {
  return s->slots + ((size_t)s->n * 2 + (size_t)p) * s->chunk;
}
/* Parity of the next step. */
static inline int next_parity(shm_be *s) { return (int)((s->counter + 1) & 1); }

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
  struct timespec ts = {0, SHM_FUTEX_WAIT_NS};
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static void futex_wake_all(_Atomic uint32_t *addr) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void publish(shm_be *s, uint64_t value) {
  s->cpu = sched_getcpu();
  atomic_store_explicit(&s->ctrl[s->me].cpu, s->cpu, memory_order_relaxed);
  /* the call tag of a collective's first step, next to the seq store: one ownership transfer of
   * the line that the waiting ranks are reading */
  if (s->check_pending)
    atomic_store_explicit(&s->ctrl[s->me].tag[value & 1], s->my_tag, memory_order_relaxed);
  atomic_store(&s->ctrl[s->me].seq, value); /* seq_cst: ordered before the sleepers load */
  if (atomic_load(&s->hdr->sleepers) > 0) {
    atomic_fetch_add(&s->hdr->futex_word, 1);
    futex_wake_all(&s->hdr->futex_word);
  }
}

/* First rank whose seq < target, or -1 when all arrived (acquire: their writes are visible). */
/* On the first step of a collective it also compares the tag of every rank it finds arrived,
 * on the cache line it has just read (later, that line may already be the rank's next step). */
static inline int first_missing(shm_be *s, uint64_t target, int from) {
  for (int r = from; r < s->n; r++) {
    if (atomic_load_explicit(&s->ctrl[r].seq, memory_order_acquire) < target) return r;
    if (s->check_pending &&
        atomic_load_explicit(&s->ctrl[r].tag[target & 1], memory_order_relaxed) != s->my_tag)
      s->tag_bad = 1;
  }
  return -1;
}

/* Formats "[a b c]" of the ranks whose arrival matches `arrived`. */
static void rank_list(shm_be *s, uint64_t target, int arrived, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "[");
  int first = 1;
  for (int r = 0; r < s->n && len + 16 < cap; r++) {
    int a = s->joining ? atomic_load(&s->ctrl[r].registered) != 0
                       : atomic_load(&s->ctrl[r].seq) >= target;
    if (a != arrived) continue;
    len += (size_t)snprintf(buf + len, cap - len, first ? "%d" : " %d", r);
    first = 0;
  }
  snprintf(buf + len, cap - len, "]");
}

typedef enum { PEER_ALIVE, PEER_DEAD, PEER_LEFT } peer_state;

/* Liveness of rank r through its robust mutex (works for unreaped zombies too). */
static peer_state peer_check(shm_be *s, int r) {
  acc__shm_ctrl *c = &s->ctrl[r];
  if (atomic_load(&c->dead)) return PEER_DEAD;
  if (atomic_load(&c->departed)) return PEER_LEFT;
  if (!atomic_load(&c->registered)) return PEER_ALIVE; /* not attached yet: only the timeout */
  int rc = pthread_mutex_trylock(&c->lock);
  if (rc == EBUSY) return PEER_ALIVE;
  if (rc == EOWNERDEAD) {
    atomic_store(&c->dead, 1);
    pthread_mutex_consistent(&c->lock);
    pthread_mutex_unlock(&c->lock);
    return PEER_DEAD;
  }
  if (rc == 0) pthread_mutex_unlock(&c->lock);
  if (atomic_load(&c->dead)) return PEER_DEAD;
  if (atomic_load(&c->departed)) return PEER_LEFT;
  return PEER_DEAD; /* free without departing, or not recoverable: treat as dead */
}

int acc__shm_peer_gone(acc__backend *be, int *rank, int *pid, int *left) {
  shm_be *s = (shm_be *)be;
  if (!s->ctrl) return 0;
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    peer_state ps = peer_check(s, r);
    if (ps == PEER_ALIVE) continue;
    *rank = r;
    *pid = atomic_load(&s->ctrl[r].pid);
    *left = ps == PEER_LEFT;
    return 1;
  }
  return 0;
}

static const char *what(shm_be *s) { return s->base.op_name ? s->base.op_name : "collective"; }

/* Checks the ranks that have not reached target; returns an error for the first gone one. */
static acc_result check_peers(shm_be *s, uint64_t target) {
  for (int r = 0; r < s->n; r++) {
    if (r == s->me || atomic_load(&s->ctrl[r].seq) >= target) continue;
    peer_state ps = peer_check(s, r);
    if (ps == PEER_ALIVE) continue;
    char arrived[512], missing[512];
    rank_list(s, target, 1, arrived, sizeof arrived);
    rank_list(s, target, 0, missing, sizeof missing);
    int pid = atomic_load(&s->ctrl[r].pid);
    if (s->joining)
      return acc__error(ACC_ERR_REMOTE,
                        "joining the shared-memory process group on rank %d: rank %d (pid %d) %s "
                        "before every rank attached; attached: %s, not attached: %s",
                        s->me, r, pid,
                        ps == PEER_DEAD ? "died (killed or crashed)" : "left the process group",
                        arrived, missing);
    if (ps == PEER_DEAD)
      return acc__error(ACC_ERR_REMOTE,
                        "%s (collective #%llu) on rank %d: rank %d (pid %d) died before arriving "
                        "(killed, crashed, or exited without acc_state_destroy); arrived: %s, "
                        "missing: %s",
                        what(s), (unsigned long long)s->base.op_seq, s->me, r, pid, arrived, missing);
    return acc__error(ACC_ERR_REMOTE,
                      "%s (collective #%llu) on rank %d: rank %d (pid %d) left the process group "
                      "(acc_state_destroy or exit) while the others were waiting for it; every rank "
                      "must make the same collective calls; arrived: %s, missing: %s",
                      what(s), (unsigned long long)s->base.op_seq, s->me, r, pid, arrived, missing);
  }
  return ACC_OK;
}

static acc_result timeout_error(shm_be *s, uint64_t target) {
  char arrived[512], missing[512];
  rank_list(s, target, 1, arrived, sizeof arrived);
  rank_list(s, target, 0, missing, sizeof missing);
  if (s->joining)
    return acc__error(ACC_ERR_TIMEOUT,
                      "joining the shared-memory process group on rank %d: timed out after %g s "
                      "(%s): attached: %s, not attached: %s (a rank that is not attached has not "
                      "started, failed before acc_state_create, or is a different job)",
                      s->me, s->rdzv_timeout_s, s->rdzv_var, arrived, missing);
  return acc__error(ACC_ERR_TIMEOUT,
                    "%s (collective #%llu) on rank %d: timed out after %g s (ACCELERATE_TIMEOUT): "
                    "arrived: %s, not arrived: %s",
                    what(s), (unsigned long long)s->base.op_seq, s->me, s->timeout_s, arrived, missing);
}

/* ---- call tags and hang reports (slow paths, except the loop of check_tags) ------------------ */

/* Rank r's description of the collective it published with step t (slot t & 1), or of its
 * latest one when t is 0 or the slot holds another collective than `seq`. Returns 0 when the
 * rank has published no collective yet. A diagnostic: a record being rewritten is retried, then
 * taken as read. */
static int read_call(shm_be *s, int r, uint64_t t, uint64_t seq, acc__call_rec *out) {
  acc__shm_ctrl *c = &s->ctrl[r];
  if (t) {
    memcpy(out, &c->call[t & 1], sizeof *out);
    if (out->seq == seq) return 1;
  }
  for (int tries = 0; tries < 4; tries++) {
    uint64_t last = atomic_load(&c->last);
    if (last == 0) return 0;
    memcpy(out, &c->call[last & 1], sizeof *out);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load(&c->last) == last) break;
  }
  return 1;
}

static void my_call(shm_be *s, acc__call_rec *out) {
  memset(out, 0, sizeof *out);
  if (!s->base.call) return;
  acc__call_rec_fields(out, s->base.call);
  acc__call_rec_site(out, s->base.call->file);
}

/* Describes this rank's call for its first step t (publish() then stores the tag with the seq). */
static void publish_call(shm_be *s, uint64_t t) {
  const acc__call *c = s->base.call;
  int p = (int)(t & 1);
  acc__shm_ctrl *me = &s->ctrl[s->me];
  acc__call_rec_fields(&me->call[p], c);
  if (c->file != s->site_file[p]) { /* the text only when the call site changes */
    acc__call_rec_site(&me->call[p], c->file);
    s->site_file[p] = c->file;
  }
  atomic_store_explicit(&me->last, t, memory_order_release);
  atomic_store_explicit(&me->active, 1, memory_order_relaxed);
  s->published_seq = c->seq;
  s->my_tag = c->tag;
  s->tag_bad = 0;
}

/* The mismatch error of step t (first_missing found a tag that differs): every rank's call. */
static acc_result tag_mismatch(shm_be *s, uint64_t t) {
  int r;
  acc__call_rec mine, *all = acc__calloc((size_t)s->n, sizeof *all);
  if (!all) return ACC_ERR_NOMEM;
  my_call(s, &mine);
  for (r = 0; r < s->n; r++) {
    if (r == s->me)
      all[r] = mine;
    else
      read_call(s, r, t, mine.seq, &all[r]);
  }
  acc_result rc = acc__mismatch_error(what(s), s->me, &mine, all, s->n);
  acc__free(all);
  return rc;
}

/* One line on stderr: this rank's call, how long it waited, and for every rank not arrived what
 * it is doing now. */
static void hang_report(shm_be *s, uint64_t target, double waited) {
  char line[4000], one[400];
  acc__call_rec mine;
  my_call(s, &mine);
  acc__call_rec_describe(one, sizeof one, &mine);
  size_t len = (size_t)snprintf(line, sizeof line,
                                "accelerate: hang report: rank %d (pid %d): %s (collective #%llu) "
                                "%s has waited %.1f s (timeout %g s, ACCELERATE_TIMEOUT);",
                                s->me, (int)getpid(), what(s), (unsigned long long)s->base.op_seq,
                                one, waited, s->timeout_s);
  char missing[512];
  rank_list(s, target, 0, missing, sizeof missing);
  len += (size_t)snprintf(line + len, sizeof line - len, " not arrived: %s", missing);
  for (int r = 0; r < s->n && len + 450 < sizeof line; r++) {
    if (r == s->me || atomic_load(&s->ctrl[r].seq) >= target) continue;
    int pid = atomic_load(&s->ctrl[r].pid);
    peer_state ps = peer_check(s, r);
    acc__call_rec rec;
    int any = read_call(s, r, 0, 0, &rec);
    if (any) acc__call_rec_describe(one, sizeof one, &rec);
    if (ps != PEER_ALIVE)
      len += (size_t)snprintf(line + len, sizeof line - len, "; rank %d (pid %d) is %s", r, pid,
                              ps == PEER_DEAD ? "dead" : "gone (left the process group)");
    else if (!any)
      len += (size_t)snprintf(line + len, sizeof line - len,
                              "; rank %d (pid %d) is not in a collective (it has made none yet)",
                              r, pid);
    else if (atomic_load(&s->ctrl[r].active))
      len += (size_t)snprintf(line + len, sizeof line - len,
                              "; rank %d (pid %d) is in %s (collective #%llu)", r, pid, one,
                              (unsigned long long)rec.seq);
    else
      len += (size_t)snprintf(line + len, sizeof line - len,
                              "; rank %d (pid %d) is not in a collective, its last was %s "
                              "(collective #%llu)",
                              r, pid, one, (unsigned long long)rec.seq);
  }
  acc__report_line(line);
}

/* During the rendezvous: a rank that the launcher saw exit will never attach. */
static acc_result board_check(shm_be *s) {
  acc__board_entry e;
  int r = acc__board_find_dead(s->board_fd, s->me, -1, &e);
  if (r < 0) return ACC_OK;
  char how[96], arrived[512], missing[512];
  acc__board_describe(&e, how, sizeof how);
  if (!s->map)
    return acc__error(ACC_ERR_REMOTE,
                      "joining the shared-memory process group on rank %d: rank %d (pid %d) %s "
                      "before joining (reported by accelerate launch)",
                      s->me, r, (int)e.pid, how);
  rank_list(s, 0, 1, arrived, sizeof arrived);
  rank_list(s, 0, 0, missing, sizeof missing);
  return acc__error(ACC_ERR_REMOTE,
                    "joining the shared-memory process group on rank %d: rank %d (pid %d) %s "
                    "before every rank attached (reported by accelerate launch); attached: %s, "
                    "not attached: %s",
                    s->me, r, (int)e.pid, how, arrived, missing);
}

/* Low-frequency checks of every waiting phase: dead peers, the launcher's board during the
 * rendezvous, the deadline. */
static acc_result wait_check(shm_be *s, uint64_t target, double t0, double now, double *last,
                             int *reported) {
  if (now - *last < SHM_CHECK_PERIOD_S) return ACC_OK;
  *last = now;
  ACC_CHECK(check_peers(s, target));
  if (!*reported && s->hang_s > 0 && now - t0 >= s->hang_s && !s->joining) {
    *reported = 1;
    hang_report(s, target, now - t0);
  }
  if (s->joining) {
    ACC_CHECK(board_check(s));
    if (now - s->rdzv_t0 >= s->rdzv_timeout_s) return timeout_error(s, target);
  } else if (now - t0 >= s->timeout_s) {
    return timeout_error(s, target);
  }
  return ACC_OK;
}

/* Waits until every rank's seq >= target. */
static acc_result wait_all(shm_be *s, uint64_t target) {
  int miss = first_missing(s, target, 0);
  if (miss < 0) return ACC_OK;
  double t0 = acc__now(), last_check = t0, now;
  int reported = 0; /* the hang report is printed once per wait */
  /* 1. spin: the peer is usually running on another core and arrives within microseconds;
   * but not when it last ran on this very CPU (it cannot run while we spin) */
  for (unsigned i = 1; atomic_load_explicit(&s->ctrl[miss].cpu, memory_order_relaxed) != s->cpu; i++) {
    cpu_relax();
    if ((miss = first_missing(s, target, miss)) < 0) return ACC_OK;
    if ((i & 63) == 0) {
      if ((now = acc__now()) - t0 > s->spin_s) break;
      ACC_CHECK(wait_check(s, target, t0, now, &last_check, &reported));
    }
  }
  /* 2. yield: lets a peer that shares this core run, without the futex wake-up that makes the
   * scheduler pull both processes onto one core (measured: ~28 us per step instead of 0.2) */
  while ((now = acc__now()) - t0 < s->yield_s) {
    ACC_CHECK(wait_check(s, target, t0, now, &last_check, &reported));
    sched_yield();
    if ((miss = first_missing(s, target, miss)) < 0) return ACC_OK;
  }
  for (;;) {
    atomic_fetch_add(&s->hdr->sleepers, 1);
    uint32_t v = atomic_load(&s->hdr->futex_word);
    if ((miss = first_missing(s, target, miss)) >= 0) futex_wait(&s->hdr->futex_word, v);
    atomic_fetch_sub(&s->hdr->sleepers, 1);
    /* miss < 0: everyone had arrived before the sleep (first_missing must not start at -1) */
    if (miss < 0 || (miss = first_missing(s, target, miss)) < 0) return ACC_OK;
    ACC_CHECK(wait_check(s, target, t0, acc__now(), &last_check, &reported));
  }
}

static acc_result step(shm_be *s) {
  uint64_t t = ++s->counter;
  /* the first step of the collective comm.c described in base.call */
  int first = s->base.call && s->base.call->seq != s->published_seq;
  if (first) publish_call(s, t);
  s->check_pending = first;
  publish(s, t); /* with the tag when first */
  acc_result rc = wait_all(s, t);
  if (first) {
    s->check_pending = 0;
    if (rc == ACC_OK && s->tag_bad) rc = tag_mismatch(s, t);
  }
  return rc;
}

/* ---- reductions --------------------------------------------------------------------------- */

/* dst[0..n) = slot(0) op slot(1) op ... (rank order), elements starting at element `lo`. */
static void reduce_slots(shm_be *s, void *dst, int p, size_t lo, size_t n, acc_dtype dt, acc_op op) {
  size_t es = acc_dtype_size(dt);
  if (n == 0) return;
  if (dt == ACC_F32 && op == ACC_SUM) {
    float *restrict d = dst;
    const float *restrict a = (const float *)slot(s, 0, p) + lo;
    const float *restrict b = (const float *)slot(s, 1, p) + lo;
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    for (int r = 2; r < s->n; r++) {
      const float *restrict c = (const float *)slot(s, r, p) + lo;
      for (size_t i = 0; i < n; i++) d[i] += c[i];
    }
    return;
  }
  if (dt == ACC_F64 && op == ACC_SUM) {
    double *restrict d = dst;
    const double *restrict a = (const double *)slot(s, 0, p) + lo;
    const double *restrict b = (const double *)slot(s, 1, p) + lo;
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    for (int r = 2; r < s->n; r++) {
      const double *restrict c = (const double *)slot(s, r, p) + lo;
      for (size_t i = 0; i < n; i++) d[i] += c[i];
    }
    return;
  }
  copy_bytes(dst, slot(s, 0, p) + lo * es, n * es);
  for (int r = 1; r < s->n; r++) acc__reduce_inplace(dst, slot(s, r, p) + lo * es, n, dt, op);
}

/* All-reduce (root < 0) or reduce to root. recv is NULL on non-roots for reduce. */
static acc_result reduce_common(shm_be *s, const void *send, void *recv, size_t count, acc_dtype dt,
                                acc_op op, int root) {
  size_t es = acc_dtype_size(dt);
  size_t bytes = count * es;
  int out = root < 0 || root == s->me;
  if (bytes <= SHM_SMALL_BYTES && bytes <= s->chunk) {
    int p = next_parity(s);
    copy_bytes(slot(s, s->me, p), send, bytes);
    ACC_CHECK(step(s));
    if (out) reduce_slots(s, recv, p, 0, count, dt, op);
    return ACC_OK;
  }
  size_t ce = s->chunk / es;
  const uint8_t *in = send;
  uint8_t *o = recv;
  size_t prev_off = 0, prev_n = 0;
  int prev_p = 0, have_prev = 0;
  for (size_t off = 0; off < count; off += ce) {
    size_t nc = count - off < ce ? count - off : ce;
    int p = next_parity(s);
    copy_bytes(slot(s, s->me, p), in + off * es, nc * es);
    ACC_CHECK(step(s)); /* everyone wrote chunk c and finished reducing chunk c-1 */
    if (have_prev && out) copy_bytes(o + prev_off * es, result_area(s, prev_p), prev_n * es);
    size_t lo = (size_t)s->me * nc / (size_t)s->n, hi = ((size_t)s->me + 1) * nc / (size_t)s->n;
    reduce_slots(s, result_area(s, p) + lo * es, p, lo, hi - lo, dt, op);
    prev_off = off, prev_n = nc, prev_p = p, have_prev = 1;
  }
  ACC_CHECK(step(s));
  if (out) copy_bytes(o + prev_off * es, result_area(s, prev_p), prev_n * es);
  return ACC_OK;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static acc_result shm_barrier(acc__backend *be) { return step((shm_be *)be); }

static acc_result shm_broadcast(acc__backend *be, void *buf, size_t nbytes, int root) {
  shm_be *s = (shm_be *)be;
  uint8_t *b = buf;
  for (size_t off = 0; off < nbytes; off += s->chunk) {
    size_t len = nbytes - off < s->chunk ? nbytes - off : s->chunk;
    int p = next_parity(s);
    if (s->me == root) copy_bytes(slot(s, root, p), b + off, len);
    ACC_CHECK(step(s));
    if (s->me != root) copy_bytes(b + off, slot(s, root, p), len);
  }
  return ACC_OK;
}

static acc_result shm_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, acc_op op) {
  return reduce_common((shm_be *)be, send, recv, count, dtype, op, -1);
}

static acc_result shm_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                             acc_dtype dtype, acc_op op, int root) {
  return reduce_common((shm_be *)be, send, recv, count, dtype, op, root);
}

/* Reduce-scatter: step k carries piece k of every block. Each rank writes, into its slot, piece k
 * of block r at element r * pe (pe = chunk / es / n, the piece length), and after the step
 * reduces piece k of its own block from every slot straight into recv: every rank reduces at
 * once, one step per piece, no result area (the reads happen after step s and before s + 1,
 * as for any slot). In place (recv = send + me * count) is safe: piece k of the own block has
 * been copied to the slot before recv's piece k is written, and later steps read later pieces. */
static acc_result shm_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                                     acc_dtype dt, acc_op op) {
  shm_be *s = (shm_be *)be;
  size_t es = acc_dtype_size(dt), n = (size_t)s->n;
  size_t pe = s->chunk / es / n;
  if (pe >= 16) pe &= ~(size_t)15; /* pieces start on 64-byte boundaries for f32 */
  if (pe == 0) { /* more ranks than elements in a slot: all-reduce the lot, keep the block */
    uint8_t *tmp = acc__malloc(count * es * n);
    if (!tmp) return acc__error(ACC_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes",
                                count * es * n);
    acc_result rc = reduce_common(s, send, tmp, count * n, dt, op, -1);
    if (rc == ACC_OK) memmove(recv, tmp + (size_t)s->me * count * es, count * es);
    acc__free(tmp);
    return rc;
  }
  const uint8_t *in = send;
  uint8_t *o = recv;
  for (size_t off = 0; off < count; off += pe) {
    size_t len = count - off < pe ? count - off : pe;
    int p = next_parity(s);
    uint8_t *mine = slot(s, s->me, p);
    for (size_t r = 0; r < n; r++) copy_bytes(mine + r * pe * es, in + (r * count + off) * es, len * es);
    ACC_CHECK(step(s));
    reduce_slots(s, o + off * es, p, (size_t)s->me * pe, len, dt, op);
  }
  return ACC_OK;
}

/* Gathers sizes[r] bytes from every rank into recv at displacement disp[r]; only when `out`. */
static acc_result gather_common(shm_be *s, const void *send, uint8_t *recv, const size_t *sizes,
                                const size_t *disp, int out) {
  size_t maxlen = 0;
  for (int r = 0; r < s->n; r++)
    if (sizes[r] > maxlen) maxlen = sizes[r];
  const uint8_t *in = send;
  for (size_t off = 0; off < maxlen; off += s->chunk) {
    int p = next_parity(s);
    size_t mine = sizes[s->me] > off ? sizes[s->me] - off : 0;
    if (mine > s->chunk) mine = s->chunk;
    if (mine) copy_bytes(slot(s, s->me, p), in + off, mine);
    ACC_CHECK(step(s));
    if (!out) continue;
    for (int r = 0; r < s->n; r++) {
      size_t len = sizes[r] > off ? sizes[r] - off : 0;
      if (len > s->chunk) len = s->chunk;
      if (!len) continue;
      uint8_t *dst = recv + disp[r] + off;
      if (r == s->me) {
        if (dst != in + off) memmove(dst, in + off, len);
      } else {
        copy_bytes(dst, slot(s, r, p), len);
      }
    }
  }
  return ACC_OK;
}

static acc_result uniform_gather(shm_be *s, const void *send, void *recv, size_t nbytes, int out) {
  size_t *sizes = acc__malloc(2 * (size_t)s->n * sizeof *sizes);
  if (!sizes) return ACC_ERR_NOMEM;
  size_t *disp = sizes + s->n;
  for (int r = 0; r < s->n; r++) sizes[r] = nbytes, disp[r] = (size_t)r * nbytes;
  acc_result rc = gather_common(s, send, recv, sizes, disp, out);
  acc__free(sizes);
  return rc;
}

static acc_result shm_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes) {
  return uniform_gather((shm_be *)be, send, recv, nbytes, 1);
}

static acc_result shm_gather(acc__backend *be, const void *send, void *recv, size_t nbytes, int root) {
  return uniform_gather((shm_be *)be, send, recv, nbytes, be->rank == root);
}

static acc_result shm_all_gather_v(acc__backend *be, const void *send, void *recv, const size_t *sizes) {
  shm_be *s = (shm_be *)be;
  size_t *disp = acc__malloc((size_t)s->n * sizeof *disp);
  if (!disp) return ACC_ERR_NOMEM;
  size_t at = 0;
  for (int r = 0; r < s->n; r++) disp[r] = at, at += sizes[r];
  acc_result rc = gather_common(s, send, recv, sizes, disp, 1);
  acc__free(disp);
  return rc;
}

static void shm_destroy(acc__backend *be) {
  shm_be *s = (shm_be *)be;
  if (!s) return;
  if (s->registered) {
    atomic_store(&s->ctrl[s->me].departed, 1);
    pthread_mutex_unlock(&s->ctrl[s->me].lock);
    if (atomic_load(&s->hdr->sleepers) > 0) {
      atomic_fetch_add(&s->hdr->futex_word, 1);
      futex_wake_all(&s->hdr->futex_word);
    }
  }
  if (s->me == 0 && !s->unlinked && s->name[0]) shm_unlink(s->name);
  if (s->map) munmap(s->map, s->map_bytes);
  acc__free(s);
}

/* comm.c ends a collective: this rank is no longer in one (hang reports). */
static void shm_call_end(acc__backend *be) {
  shm_be *s = (shm_be *)be;
  atomic_store_explicit(&s->ctrl[s->me].active, 0, memory_order_relaxed);
}

static const acc__backend_ops shm_ops = {
    "shm",          shm_barrier, shm_broadcast,    shm_all_reduce, shm_reduce,
    shm_all_gather, shm_gather,  shm_all_gather_v, shm_destroy,    shm_call_end,
    1,              shm_reduce_scatter,
};

/* ---- rendezvous --------------------------------------------------------------------------- */

static void set_pointers(shm_be *s) {
  s->hdr = (acc__shm_header *)s->map;
  s->ctrl = (acc__shm_ctrl *)(s->map + acc__shm_ctrl_off());
  s->slots = s->map + acc__shm_slots_off(s->n);
}

static acc_result read_chunk_env(int rank, size_t *chunk) {
  long v = 0;
  int set = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_SHM_CHUNK_BYTES", &v, &set));
  if (!set) {
    *chunk = SHM_DEFAULT_CHUNK;
    return ACC_OK;
  }
  if (v < 4096 || v > (64L << 20) || v % 64 != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "rank %d: ACCELERATE_SHM_CHUNK_BYTES=%ld must be a multiple of 64 between "
                      "4096 and 67108864",
                      rank, v);
  *chunk = (size_t)v;
  return ACC_OK;
}

/* Rank 0's segment name "/acc-<job id>-<token>". */
static void make_name(shm_be *s, const char *job_id) {
  snprintf(s->name, sizeof s->name, "/acc-%s-%s", job_id, s->token);
  s->name[NAME_MAX] = '\0'; /* "/" + at most NAME_MAX - 1 characters */
}

/* The name exists already: a leftover of ours (an earlier job with the same id and token) is
 * removed; one of another user is refused. */
static acc_result remove_existing(shm_be *s) {
  char path[NAME_MAX + 16];
  struct stat st;
  snprintf(path, sizeof path, "/dev/shm%s", s->name);
  if (lstat(path, &st) == 0 && st.st_uid != geteuid())
    return acc__error(ACC_ERR_SYSTEM,
                      "rank 0: cannot create the shared-memory segment %s: it already exists and "
                      "belongs to uid %u (another local user created this name; see the threat "
                      "model in docs/backends.md)",
                      s->name, (unsigned)st.st_uid);
  shm_unlink(s->name); /* a leftover of an earlier job with the same id: never reuse it */
  return ACC_OK;
}

static acc_result create_segment(shm_be *s) {
  size_t chunk = SHM_DEFAULT_CHUNK;
  ACC_CHECK(read_chunk_env(s->me, &chunk));
  uint64_t total = acc__shm_total(s->n, chunk);
  int fd = -1;
  for (int tries = 0; fd < 0; tries++) {
    fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST || tries >= 100)
      return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot create the shared-memory segment %s: %s",
                        s->name, strerror(errno));
    ACC_CHECK(remove_existing(s));
  }
  /* creator first, so that a kill from here on leaves a segment the next job can reclaim */
  acc__shm_header early;
  memset(&early, 0, sizeof early);
  early.magic = ACC_SHM_MAGIC;
  early.version = ACC_SHM_VERSION;
  early.creator_pid = (int32_t)getpid();
  early.creator_start = acc__proc_start_time(getpid());
  int err = fchmod(fd, 0600) != 0 ? errno : 0; /* whatever the umask: the others check 0600 */
  if (!err) err = ftruncate(fd, (off_t)total) != 0 ? errno : 0;
  if (!err && pwrite(fd, &early, sizeof early, 0) != (ssize_t)sizeof early)
    err = errno ? errno : EIO;
  if (!err) err = posix_fallocate(fd, 0, (off_t)total);
  if (err) {
    close(fd);
    shm_unlink(s->name);
    return acc__error(ACC_ERR_SYSTEM,
                      "rank 0: cannot reserve %llu bytes of shared memory for %s: %s (is /dev/shm "
                      "full or too small? lower ACCELERATE_SHM_CHUNK_BYTES or enlarge /dev/shm)",
                      (unsigned long long)total, s->name, strerror(err));
  }
  void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  err = errno;
  close(fd);
  if (m == MAP_FAILED) {
    shm_unlink(s->name);
    return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot map the shared-memory segment %s (%llu bytes): %s",
                      s->name, (unsigned long long)total, strerror(err));
  }
  s->map = m;
  s->map_bytes = total;
  s->chunk = chunk;
  memset(s->map + sizeof early, 0, total - sizeof early); /* touch every page once, now */
  set_pointers(s);
  s->hdr->world = s->n;
  s->hdr->chunk = chunk;
  s->hdr->total_bytes = total;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int r = 0; r < s->n; r++) {
    if ((err = pthread_mutex_init(&s->ctrl[r].lock, &a)) != 0) {
      pthread_mutexattr_destroy(&a);
      return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot create the liveness lock of rank %d: %s", r,
                        strerror(err));
    }
  }
  pthread_mutexattr_destroy(&a);
  if ((err = pthread_mutex_lock(&s->ctrl[0].lock)) != 0)
    return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot take its liveness lock: %s", strerror(err));
  s->registered = 1;
  atomic_store(&s->hdr->ready, 1);
  return ACC_OK;
}

/* Opens the segment and validates it; returns 1 when usable, 0 to retry, -1 on error. */
static int try_attach(shm_be *s) {
  int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    acc__error(ACC_ERR_SYSTEM, "rank %d: cannot open the shared-memory segment %s: %s", s->me,
               s->name, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 0;
  }
  /* Trust nothing in a segment that another user could have written: rank 0 creates it as
   * the same user, mode 0600. Checked before mapping it. */
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600) {
    close(fd);
    acc__error(ACC_ERR_SYSTEM,
               "rank %d: refusing the shared-memory segment %s: it belongs to uid %u with mode "
               "%04o, but this job's segment must belong to uid %u with mode 0600 (another local "
               "user may be trying to intercept the rendezvous; see the threat model in "
               "docs/backends.md)",
               s->me, s->name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
               (unsigned)geteuid());
    return -1;
  }
  if ((uint64_t)st.st_size < acc__shm_slots_off(s->n)) {
    close(fd);
    return 0;
  }
  size_t size = (size_t)st.st_size;
  uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return 0;
  }
  s->map = m;
  s->map_bytes = size;
  set_pointers(s);
  acc__shm_header *h = s->hdr;
  int ok = atomic_load(&h->ready) && h->magic == ACC_SHM_MAGIC && h->version == ACC_SHM_VERSION &&
           h->world == s->n && h->chunk >= 4096 && h->total_bytes == size &&
           acc__shm_total(s->n, h->chunk) == size;
  if (ok) {
    /* rank 0 holds its lock while its job lives: otherwise this is a dead job's segment */
    int rc = pthread_mutex_trylock(&s->ctrl[0].lock);
    if (rc != EBUSY) {
      /* we may now own it: release it (made consistent, or glibc would keep it ours) */
      if (rc == EOWNERDEAD) pthread_mutex_consistent(&s->ctrl[0].lock);
      if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(&s->ctrl[0].lock);
      ok = 0;
    }
  }
  if (ok) {
    s->chunk = (size_t)h->chunk;
    /* prefault the whole mapping once */
    void *m2 = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m2 != MAP_FAILED) {
      munmap(m, size);
      s->map = m2;
      set_pointers(s);
    }
  } else {
    munmap(m, size);
    s->map = NULL;
  }
  close(fd);
  return ok;
}

/* Ranks other than 0: learn the name (token file, unless the launcher exported the token) and
 * attach once rank 0 of a living job has initialized the segment. */
static acc_result attach_segment(shm_be *s, const char *job_id) {
  double last_board = s->rdzv_t0, pause = 0.0005;
  int have_name = s->token_path[0] == '\0';
  if (have_name) make_name(s, job_id);
  for (;;) {
    if (s->token_path[0]) {
      /* re-read every time: a file left by a dead job with the same id is replaced by rank 0 */
      int t = acc__rdzv_read_token(s->token_path, s->me, s->token, sizeof s->token);
      if (t < 0) return ACC_ERR_SYSTEM;
      if (t > 0) {
        make_name(s, job_id);
        have_name = 1;
      }
    }
    if (have_name) {
      int r = try_attach(s);
      if (r < 0) return ACC_ERR_SYSTEM;
      if (r > 0) break;
    }
    double now = acc__now();
    if (now - last_board >= SHM_CHECK_PERIOD_S / 2) {
      last_board = now;
      ACC_CHECK(board_check(s));
    }
    if (now - s->rdzv_t0 > s->rdzv_timeout_s) {
      if (!have_name)
        return acc__error(ACC_ERR_TIMEOUT,
                          "rank %d: timed out after %g s (%s) waiting for rank 0 to create the "
                          "shared-memory segment: its rendezvous token file %s does not exist (is "
                          "rank 0 running, with the same job?)",
                          s->me, s->rdzv_timeout_s, s->rdzv_var, s->token_path);
      return acc__error(ACC_ERR_TIMEOUT,
                        "rank %d: timed out after %g s (%s) waiting for rank 0 to create the "
                        "shared-memory segment %s (is rank 0 running, with the same job?)",
                        s->me, s->rdzv_timeout_s, s->rdzv_var, s->name);
    }
    sleep_s(pause);
    if (pause < 0.004) pause *= 1.2; /* 0.5 ms at first, 4 ms after ~25 ms */
  }
  acc__shm_ctrl *c = &s->ctrl[s->me];
  int err = pthread_mutex_trylock(&c->lock);
  if (err != 0)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "rank %d: another process already joined the shared-memory group %s as rank "
                      "%d (%s): are two jobs sharing one ACCELERATE_RUN_ID?",
                      s->me, s->name, s->me, strerror(err));
  s->registered = 1;
  return ACC_OK;
}

/* Environment of the backend: wait phases (bounded: the checks of a phase run at most every
 * SHM_CHECK_PERIOD_S, and a phase must end for the futex sleep's own checks to run) and the
 * rendezvous timeout. */
static acc_result read_env(shm_be *s) {
  static const char *const names[2] = {"ACCELERATE_SHM_SPIN_US", "ACCELERATE_SHM_YIELD_US"};
  double *dst[2] = {&s->spin_s, &s->yield_s};
  for (int i = 0; i < 2; i++) {
    long us = 0;
    int set = 0;
    ACC_CHECK(acc__env_int(names[i], &us, &set));
    if (!set) continue;
    if (us > SHM_MAX_PHASE_US)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "rank %d: %s=%ld is out of range: expected 0..%ld microseconds (longer "
                        "waits sleep on a futex)",
                        s->me, names[i], us, SHM_MAX_PHASE_US);
    *dst[i] = (double)us * 1e-6;
  }
  double t = SHM_RDZV_TIMEOUT_S;
  int set = 0;
  ACC_CHECK(acc__env_double("ACCELERATE_RENDEZVOUS_TIMEOUT", &t, &set));
  s->rdzv_var = "ACCELERATE_RENDEZVOUS_TIMEOUT";
  if (!set && s->timeout_s < t) {
    t = s->timeout_s; /* never wait longer than the collective timeout either */
    s->rdzv_var = "ACCELERATE_TIMEOUT";
  }
  s->rdzv_timeout_s = t;
  return ACC_OK;
}

/* The unpredictable part of the name: exported by the launcher, or published by rank 0 in the
 * runtime directory. Rank 0 also reclaims what dead jobs left. */
static acc_result setup_token(shm_be *s, const char *job_id) {
  int set = 0;
  ACC_CHECK(acc__rdzv_env_token(s->token, sizeof s->token, &set));
  if (set) {
    if (s->me == 0) acc__rdzv_reclaim(NULL);
    return ACC_OK;
  }
  char dir[PATH_MAX];
  ACC_CHECK(acc__rdzv_runtime_dir(dir, sizeof dir));
  acc__rdzv_token_path(s->token_path, sizeof s->token_path, dir, job_id);
  if (s->me != 0) return ACC_OK;
  acc__rdzv_reclaim(dir);
  ACC_CHECK(acc__rdzv_publish_token(s->token_path, s->token, sizeof s->token));
  s->token_published = 1;
  return ACC_OK;
}

acc_result acc__backend_shm_create(acc__backend **out, const acc__proc_info *info) {
  if (!out || !info || !info->job_id)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__backend_shm_create: NULL argument");
  *out = NULL;
  if (info->size < 1 || info->rank < 0 || info->rank >= info->size)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "shm backend: rank %d is not in 0..%d", info->rank,
                      info->size - 1);
  shm_be *s = acc__calloc(1, sizeof *s);
  if (!s) return ACC_ERR_NOMEM;
  s->base.ops = &shm_ops;
  s->base.rank = info->rank;
  s->base.size = info->size;
  s->base.op_name = "joining the process group";
  s->n = info->size;
  s->me = info->rank;
  s->timeout_s = info->timeout_s > 0 ? info->timeout_s : 1800.0;
  s->board_fd = -1;
  s->rdzv_t0 = acc__now();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int enough_cores = ncpu > 0 && ncpu >= info->local_size;
  s->spin_s = enough_cores ? 20e-6 : 1e-6;
  s->yield_s = enough_cores ? 2e-3 : 200e-6;
  acc_result rc = read_env(s);
  if (rc == ACC_OK) rc = acc__hang_report_env(&s->hang_s);
  if (rc == ACC_OK) {
    s->board_fd = acc__board_open();
    rc = setup_token(s, info->job_id);
  }
  if (rc == ACC_OK) {
    if (s->me == 0) {
      make_name(s, info->job_id);
      rc = create_segment(s);
    } else {
      rc = attach_segment(s, info->job_id);
    }
  }
  if (rc == ACC_OK) {
    acc__shm_ctrl *c = &s->ctrl[s->me];
    atomic_store(&c->pid, (int32_t)getpid());
    atomic_store(&c->registered, 1);
    s->joining = 1;
    rc = step(s); /* everyone attached */
    s->joining = 0;
  }
  if (s->me == 0 && s->map) {
    shm_unlink(s->name); /* from now on no /dev/shm entry exists, whatever happens */
    s->unlinked = 1;
  }
  if (s->token_published) { /* the others have read it (or the rendezvous failed) */
    acc__rdzv_remove_token(s->token_path, s->token);
    s->token_published = 0;
  }
  if (rc != ACC_OK) {
    shm_destroy(&s->base);
    return rc;
  }
  s->base.op_name = NULL;
  *out = &s->base;
  return ACC_OK;
}
