/* Shared-memory backend, one-sided broadcasts of small messages (up to ACC_SHM_RING_BYTES).
 *
 * A full step (shm_step.c) makes the root of a broadcast wait until every rank has arrived: on
 * 2 bound cores that is 4x Open MPI's time at 4-256 B, and with more processes than cores the
 * root waits for every rank to be scheduled (docs/PERFORMANCE.md). Here the root writes, returns
 * and waits only when its ring is full; the receivers wait for the root's slot only.
 *
 * Ring. Every rank owns ACC_SHM_RING slots (shm.h). Broadcasts of this size are numbered on
 * every rank (s->bcount, the same on every rank while the calls agree) apart from the steps:
 * they touch neither the step counter nor the double-buffered slots, so the buffer rule of
 * shm_coll.c is unchanged. For broadcast b the root copies the message into its slot b % RING,
 * stores its call tag and length, then stamp = b + 1 and returns; a receiver waits for that
 * stamp, compares the tag with its own and copies the message out. Each rank then publishes
 * bseq = b + 1 (broadcasts completed). The root reuses slot b % RING only once every rank's bseq
 * > b - RING (it rescans the bseq words only when that is not already known: s->bfree), so a
 * root makes RING broadcasts in a row without waiting for anyone.
 *
 * Waiting. As for steps: spin while the awaited rank last ran on another CPU, then
 * sched_yield, then the futex (publishers wake sleepers; unlike steps, their stores are not
 * fenced before they look for sleepers, so a sleep is bounded by half the time already waited:
 * futex_wait); every SHM_CHECK_PERIOD_S the awaited ranks' liveness, the collective timeout and
 * the hang-report threshold are checked.
 *
 * Mismatch detection stays always-on. Every rank records each broadcast's call (bcall) and a
 * digest of the call tags of all its broadcasts so far (bdigs; s->bdig), and:
 *   - a receiver compares the root's tag in the slot with its own: a different call fails at
 *     once; a root that completes broadcast b as a receiver, goes on into a step or leaves the
 *     group without publishing b fails the receiver at once too;
 *   - every step that starts a collective publishes the digest and the count beside its tag
 *     (shm_step.c): equal tags with different digests fail that collective on every rank,
 *     naming each rank's first broadcast that differs (acc__shm_ring_step_mismatch);
 *   - a step waiting for a rank that is in a broadcast this rank never made fails
 *     (acc__shm_ring_check_missing);
 *   - a root whose ring wraps compares every rank's digest of broadcast b - RING;
 *   - at teardown (acc__shm_ring_final, from shm.c's destroy, i.e. acc_state_destroy and
 *     acc_accelerator_destroy) a rank with broadcasts not yet compared waits until every rank
 *     has completed as many, or left, and compares the digests; a difference is printed on
 *     stderr and ends the process with exit status 1, so a program whose last collective is a
 *     mismatched broadcast does not end with diverged data and status 0.
 */
#include "backend/shm_impl.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING ACC_SHM_RING
#define RING_FUTEX_WAIT_NS 50000000L /* one futex sleep: 50 ms at most */

static inline acc__shm_ring_slot *ring_slot(shm_be *s, int r, uint64_t b) {
  return &s->ring[(size_t)r * RING + (size_t)(b % RING)];
}

/* Digest of a sequence of tags: bijective in each step, so it depends on every tag and order. */
static inline uint64_t mix(uint64_t d, uint64_t tag) {
  uint64_t x = (d ^ tag) * 0x9e3779b97f4a7c15ull;
  return x ^ (x >> 31);
}

/* ---- records and mismatch messages ---------------------------------------------------------- */

/* Records broadcast b (call, digest, "in it") in this rank's control block; returns its tag. */
static uint64_t record(shm_be *s, uint64_t b) {
  const acc__call *c = s->base.call;
  acc__shm_ctrl *me = &s->ctrl[s->me];
  int i = (int)(b % RING);
  uint64_t tag = c ? c->tag : 0;
  if (c) {
    acc__call_rec_fields(&me->bcall[i], c);
    if (c->file != s->bsite_file[i]) { /* the text only when the call site changes */
      acc__call_rec_site(&me->bcall[i], c->file);
      s->bsite_file[i] = c->file;
    }
  } else {
    memset(&me->bcall[i], 0, sizeof me->bcall[i]);
    s->bsite_file[i] = NULL;
  }
  s->bdig = mix(s->bdig, tag); /* published with the count by complete() */
  atomic_store_explicit(&me->bcur, b + 1, memory_order_relaxed);
  atomic_store_explicit(&me->active, 1, memory_order_relaxed);
  return tag;
}

/* Broadcast b done on this rank: its digest entry (not earlier: a root at its wrap may still be
 * reading entry b - RING), the count (release: after the root's stamp and the digest), then
 * clear "in it" (readers load bcur before bseq); no fence before the sleepers load (futex_wait). */
static void complete(shm_be *s, uint64_t b) {
  acc__shm_ctrl *me = &s->ctrl[s->me];
  atomic_store_explicit(&me->bdigs[b % RING], s->bdig, memory_order_relaxed);
  s->bcount = b + 1;
  atomic_store_explicit(&me->bseq, b + 1, memory_order_release);
  atomic_store_explicit(&me->bcur, 0, memory_order_relaxed);
  acc__shm_wake_sleepers(s);
}

/* ---- waiting -------------------------------------------------------------------------------- */

typedef struct waiter waiter;
struct waiter {
  /* 1 done, 0 not yet, -1 failed (rc set); full: also the slower checks (other ranks' lines) */
  int (*ready)(shm_be *s, waiter *w, int full);
  /* whether rank r is still awaited (liveness checks, hang report) */
  int (*awaited)(shm_be *s, waiter *w, int r);
  int peer;       /* the rank to spin on (its CPU), or -1 */
  uint64_t b;     /* the broadcast */
  uint64_t need;  /* wrap and teardown: the count every rank must reach */
  int final;      /* teardown: gone ranks are not errors */
  const char *doing;
  acc_result rc;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, double waited) {
  /* half the time waited so far (0.5-50 ms): publishers do not fence their stores before
   * looking for sleepers (a fence per broadcast costs 30 % at 4 B), so a wake-up can be missed
   * when a rank goes to sleep at that very moment; it then costs at most half of what the
   * sleeper had already waited, and nothing waits forever */
  long ns = (long)(waited * 0.5e9);
  if (ns < 500000L) ns = 500000L;
  if (ns > RING_FUTEX_WAIT_NS) ns = RING_FUTEX_WAIT_NS;
  struct timespec ts = {0, ns};
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void ring_hang_report(shm_be *s, waiter *w, double waited) {
  char line[4000], one[400];
  acc__call_rec mine;
  acc__shm_ring_rec(s, s->me, w->b, &mine);
  acc__call_rec_describe(one, sizeof one, &mine);
  size_t len = (size_t)snprintf(line, sizeof line,
                                "accelerate: hang report: rank %d%s (pid %d): %s %s has waited %.1f s "
                                "(timeout %g s, ACCELERATE_TIMEOUT); waiting for:",
                                s->me + s->rank_base, s->where, (int)getpid(), w->doing, one, waited,
                                s->timeout_s);
  for (int r = 0; r < s->n && len + 450 < sizeof line; r++) {
    if (r == s->me || !w->awaited(s, w, r)) continue;
    acc__call_rec rec;
    int pid = atomic_load(&s->ctrl[r].pid);
    uint64_t cur = atomic_load(&s->ctrl[r].bcur);
    if (cur) {
      acc__shm_ring_rec(s, r, cur - 1, &rec);
      acc__call_rec_describe(one, sizeof one, &rec);
      len += (size_t)snprintf(line + len, sizeof line - len, " rank %d (pid %d) is in %s (collective #%llu);",
                              r + s->rank_base, pid, one, (unsigned long long)rec.seq);
    } else if (acc__shm_last_call(s, r, &rec)) {
      acc__call_rec_describe(one, sizeof one, &rec);
      len += (size_t)snprintf(line + len, sizeof line - len, " rank %d (pid %d) is %s %s (collective #%llu);",
                              r + s->rank_base, pid,
                              atomic_load(&s->ctrl[r].active) ? "in" : "not in a collective, its last was",
                              one, (unsigned long long)rec.seq);
    } else {
      len += (size_t)snprintf(line + len, sizeof line - len, " rank %d (pid %d) has made no collective yet;",
                              r + s->rank_base, pid);
    }
  }
  acc__report_line(line);
}

/* Liveness of the awaited ranks, hang report, timeout. */
static acc_result ring_check(shm_be *s, waiter *w, double t0, double now, int *reported) {
  for (int r = 0; r < s->n && !w->final; r++) {
    if (r == s->me || !w->awaited(s, w, r)) continue;
    int ps = acc__shm_peer_state(s, r);
    if (ps == 0) continue;
    int pid = atomic_load(&s->ctrl[r].pid);
    s->failed = 1;
    return acc__error(ACC_ERR_REMOTE,
                      "%s on rank %d%s: rank %d (pid %d) %s while this rank was waiting for it; "
                      "every rank must make the same collective calls",
                      w->doing, s->me + s->rank_base, s->where, r + s->rank_base, pid,
                      ps == 1 ? "died (killed, crashed, or exited without acc_state_destroy)"
                              : "left the process group (acc_state_destroy or exit)");
  }
  if (!*reported && s->hang_s > 0 && now - t0 >= s->hang_s) {
    *reported = 1;
    ring_hang_report(s, w, now - t0);
  }
  if (now - t0 >= s->timeout_s) {
    char missing[512];
    size_t len = (size_t)snprintf(missing, sizeof missing, "[");
    for (int r = 0; r < s->n && len + 16 < sizeof missing; r++)
      if (r != s->me && w->awaited(s, w, r))
        len += (size_t)snprintf(missing + len, sizeof missing - len, len > 1 ? " %d" : "%d", r + s->rank_base);
    snprintf(missing + len, sizeof missing - len, "]");
    s->failed = 1;
    return acc__error(ACC_ERR_TIMEOUT, "%s on rank %d%s: timed out after %g s (ACCELERATE_TIMEOUT): "
                      "not arrived: %s", w->doing, s->me + s->rank_base, s->where, s->timeout_s, missing);
  }
  return ACC_OK;
}

static acc_result ring_wait(shm_be *s, waiter *w) {
  int st = w->ready(s, w, 0); /* the slow checks read lines the others write at every call */
  if (st) return st > 0 ? ACC_OK : w->rc;
  int cpu = sched_getcpu(), reported = 0;
  double t0 = acc__now(), last = t0, now;
  /* 1. spin while the awaited rank last ran on another CPU */
  for (unsigned i = 1; w->peer < 0 || atomic_load_explicit(&s->ctrl[w->peer].cpu, memory_order_relaxed) != cpu; i++) {
    acc__shm_cpu_relax();
    if ((st = w->ready(s, w, (i & 63) == 0))) goto out;
    if ((i & 63) == 0) {
      if ((now = acc__now()) - t0 > s->spin_s) break;
      if (now - last >= SHM_CHECK_PERIOD_S) {
        last = now;
        ACC_CHECK(ring_check(s, w, t0, now, &reported));
      }
    }
  }
  /* 2. yield: lets a rank that shares this CPU run */
  while ((now = acc__now()) - t0 < s->yield_s) {
    if (now - last >= SHM_CHECK_PERIOD_S) {
      last = now;
      ACC_CHECK(ring_check(s, w, t0, now, &reported));
    }
    sched_yield();
    if ((st = w->ready(s, w, 1))) goto out;
  }
  /* 3. sleep on the futex word (publishers wake sleepers), 50 ms at most per sleep */
  for (;;) {
    atomic_fetch_add(&s->hdr->sleepers, 1);
    uint32_t v = atomic_load(&s->hdr->futex_word);
    st = w->ready(s, w, 1);
    if (!st) futex_wait(&s->hdr->futex_word, v, acc__now() - t0);
    atomic_fetch_sub(&s->hdr->sleepers, 1);
    if (st || (st = w->ready(s, w, 1))) goto out;
    if ((now = acc__now()) - last >= SHM_CHECK_PERIOD_S) {
      last = now;
      ACC_CHECK(ring_check(s, w, t0, now, &reported));
    }
  }
out:
  return st > 0 ? ACC_OK : w->rc;
}

/* A receiver: the root's stamp for b; or proof that the root will not publish it (it completed b
 * as a receiver, went on into a step this rank has not made, or is leaving). */
static int root_ready(shm_be *s, waiter *w, int full) {
  acc__shm_ring_slot *sl = ring_slot(s, w->peer, w->b);
  if (atomic_load_explicit(&sl->stamp, memory_order_acquire) == w->b + 1) return 1;
  if (!full) return 0;
  acc__shm_ctrl *c = &s->ctrl[w->peer];
  if (atomic_load(&c->bseq) <= w->b && atomic_load(&c->seq) <= s->counter && !atomic_load(&c->bfinal))
    return 0;
  if (atomic_load(&sl->stamp) == w->b + 1) return 1; /* it published, then went on */
  w->rc = acc__shm_ring_mismatch(s, w->b, "broadcast");
  return -1;
}
static int root_awaited(shm_be *s, waiter *w, int r) {
  (void)s;
  return r == w->peer;
}

/* The root at a full ring, and teardown: every rank has completed w->need broadcasts. At the
 * wrap, a rank in a step this rank has not made or leaving with fewer is out of step. */
static int count_ready(shm_be *s, waiter *w, int full) {
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    acc__shm_ctrl *c = &s->ctrl[r];
    if (atomic_load(&c->bseq) >= w->need) continue;
    if (!full) return 0;
    if (w->final) {
      if (atomic_load(&c->bfinal) || atomic_load(&c->seq) > s->counter || acc__shm_peer_state(s, r) != 0)
        continue; /* judged by acc__shm_ring_final */
      return 0;
    }
    if (atomic_load(&c->seq) > s->counter || atomic_load(&c->bfinal)) {
      w->rc = acc__shm_ring_mismatch(s, atomic_load(&c->bseq), "broadcast");
      return -1;
    }
    return 0;
  }
  return 1;
}
static int count_awaited(shm_be *s, waiter *w, int r) {
  acc__shm_ctrl *c = &s->ctrl[r];
  if (atomic_load(&c->bseq) >= w->need) return 0;
  return !w->final || (!atomic_load(&c->bfinal) && acc__shm_peer_state(s, r) == 0);
}

/* ---- the broadcast -------------------------------------------------------------------------- */

/* The root's ring is full at broadcast b: waits until every rank has completed b - RING / 2 + 1
 * broadcasts, notes how far all are (s->bfree) and compares their digests of broadcast b - RING. */
static acc_result wrap(shm_be *s, uint64_t b) {
  /* slot b % RING needs every rank past b - RING; waiting until half the ring is free instead
   * makes the next RING / 2 - 1 broadcasts free of any look at the others' lines (a root that
   * is faster than its receivers waits once per RING / 2 calls, not at every call) */
  waiter w = {count_ready, count_awaited, -1, b, b - RING / 2 + 1, 0, "broadcast (ring of one-sided slots full)", ACC_OK};
  ACC_CHECK(ring_wait(s, &w));
  uint64_t lo = b, j = b - RING;
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    uint64_t v = atomic_load(&s->ctrl[r].bseq);
    if (v < lo) lo = v;
    if (j >= s->bverified &&
        atomic_load(&s->ctrl[r].bdigs[j % RING]) != atomic_load(&s->ctrl[s->me].bdigs[j % RING]))
      return acc__shm_ring_mismatch(s, j, "broadcast");
  }
  s->bfree = lo;
  if (j >= s->bverified) s->bverified = j + 1;
  return ACC_OK;
}

acc_result acc__shm_ring_broadcast(shm_be *s, void *buf, size_t nbytes, int root) {
  uint64_t b = s->bcount;
  uint64_t tag = record(s, b);
  acc__shm_ring_slot *sl = ring_slot(s, root, b);
  if (s->me == root) {
    if (b >= s->bfree + RING) {
      acc_result rc = wrap(s, b);
      if (rc != ACC_OK) return s->failed = 1, rc;
    }
    acc__shm_copy(nbytes <= sizeof sl->inl ? sl->inl : sl->data, buf, nbytes);
    sl->tag = tag;
    sl->len = nbytes;
    atomic_store_explicit(&sl->stamp, b + 1, memory_order_release);
    complete(s, b);
    return ACC_OK;
  }
  char doing[64];
  snprintf(doing, sizeof doing, "broadcast (collective #%llu)", (unsigned long long)s->base.op_seq);
  waiter w = {root_ready, root_awaited, root, b, 0, 0, doing, ACC_OK};
  acc_result rc = ring_wait(s, &w);
  if (rc == ACC_OK && (sl->tag != tag || sl->len != nbytes)) rc = acc__shm_ring_mismatch(s, b, "broadcast");
  if (rc != ACC_OK) return s->failed = 1, rc;
  acc__shm_copy(buf, nbytes <= sizeof sl->inl ? sl->inl : sl->data, nbytes);
  complete(s, b);
  return ACC_OK;
}

/* ---- teardown ------------------------------------------------------------------------------- */

int acc__shm_ring_final(shm_be *s) {
  if (!s->registered || !s->ring) return 0;
  atomic_store(&s->ctrl[s->me].bfinal, 1);
  acc__shm_wake_sleepers(s);
  if (s->failed || s->bverified >= s->bcount) return 0;
  const char *saved = s->base.op_name;
  s->base.call = NULL;
  waiter w = {count_ready, count_awaited, -1, s->bcount - 1, s->bcount, 1,
              "leaving the process group (acc_state_destroy) after a one-sided broadcast", ACC_OK};
  acc_result rc = ring_wait(s, &w);
  if (rc == ACC_OK) {
    for (int r = 0; r < s->n && rc == ACC_OK; r++) {
      if (r == s->me || acc__shm_peer_state(s, r) == 1) continue; /* a dead rank reports itself */
      uint64_t theirs = atomic_load(&s->ctrl[r].bseq);
      if (theirs != s->bcount)
        rc = acc__shm_ring_mismatch(s, theirs < s->bcount ? theirs : s->bcount, "broadcast");
      else if (acc__shm_ring_first_diff(s, r, s->bverified, s->bcount) < s->bcount)
        rc = acc__shm_ring_mismatch(s, acc__shm_ring_first_diff(s, r, s->bverified, s->bcount), "broadcast");
    }
  }
  s->base.op_name = saved;
  if (rc == ACC_OK) return 0;
  if (rc != ACC_ERR_MISMATCH) { /* a peer that never caught up: say so, nothing is proven */
    char line[1200];
    snprintf(line, sizeof line, "accelerate: warning: %s", acc_last_error());
    acc__report_line(line);
    return 0;
  }
  acc__error_context(rc, "rank %d%s, leaving the process group (acc_state_destroy): the last "
                     "one-sided broadcasts were not the same on every process",
                     s->me + s->rank_base, s->where);
  char line[4096];
  snprintf(line, sizeof line, "accelerate: error: %s", acc_last_error());
  acc__report_line(line);
  return 1;
}
