/* Shared-memory backend, steps: how the ranks meet. A collective (shm_coll.c) is a sequence of
 * steps; the rendezvous (shm.c) ends with one.
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
 */
#include "backend/shm_impl.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend/rdzv.h"

#define SHM_FUTEX_WAIT_NS 50000000L /* one futex sleep: 50 ms at most */

/* ---- small helpers ------------------------------------------------------------------------ */

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
  struct timespec ts = {0, SHM_FUTEX_WAIT_NS};
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static void futex_wake_all(_Atomic uint32_t *addr) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void acc__shm_wake_sleepers(shm_be *s) {
  if (atomic_load(&s->hdr->sleepers) > 0) {
    atomic_fetch_add(&s->hdr->futex_word, 1);
    futex_wake_all(&s->hdr->futex_word);
  }
}

static void publish(shm_be *s, uint64_t value) {
  s->cpu = sched_getcpu();
  atomic_store_explicit(&s->ctrl[s->me].cpu, s->cpu, memory_order_relaxed);
  /* the call tag of a collective's first step, next to the seq store: one ownership transfer of
   * the line that the waiting ranks are reading */
  if (s->check_pending) {
    acc__shm_ctrl *c = &s->ctrl[s->me];
    atomic_store_explicit(&c->tag[value & 1], s->my_tag, memory_order_relaxed);
    atomic_store_explicit(&c->bdig[value & 1], s->bdig, memory_order_relaxed);
    atomic_store_explicit(&c->bcnt[value & 1], s->bcount, memory_order_relaxed);
  }
  atomic_store(&s->ctrl[s->me].seq, value); /* seq_cst: ordered before the sleepers load */
  acc__shm_wake_sleepers(s);
}

/* First rank whose seq < target, or -1 when all arrived (acquire: their writes are visible). */
/* On the first step of a collective it also compares the tag of every rank it finds arrived,
 * on the cache line it has just read (later, that line may already be the rank's next step). */
static inline int first_missing(shm_be *s, uint64_t target, int from) {
  for (int r = from; r < s->n; r++) {
    if (atomic_load_explicit(&s->ctrl[r].seq, memory_order_acquire) < target) return r;
    if (s->check_pending) {
      if (atomic_load_explicit(&s->ctrl[r].tag[target & 1], memory_order_relaxed) != s->my_tag)
        s->tag_bad = 1;
      else if (atomic_load_explicit(&s->ctrl[r].bdig[target & 1], memory_order_relaxed) != s->bdig &&
               !s->tag_bad)
        s->tag_bad = 2; /* the same call, after different one-sided broadcasts */
    }
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
    len += (size_t)snprintf(buf + len, cap - len, first ? "%d" : " %d", r + s->rank_base);
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

int acc__shm_peer_state(shm_be *s, int r) {
  peer_state ps = peer_check(s, r);
  return ps == PEER_ALIVE ? 0 : ps == PEER_DEAD ? 1 : 2;
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
                        "joining the shared-memory process group on rank %d%s: rank %d (pid %d) %s "
                        "before every rank attached; attached: %s, not attached: %s",
                        s->me + s->rank_base, s->where, r + s->rank_base, pid,
                        ps == PEER_DEAD ? "died (killed or crashed)" : "left the process group",
                        arrived, missing);
    int exit_rc = atomic_load_explicit(&s->ctrl[r].exit_rc, memory_order_acquire);
    if (ps == PEER_DEAD && exit_rc != 0) {
      char why[sizeof s->ctrl[r].exit_msg];
      memcpy(why, s->ctrl[r].exit_msg, sizeof why);
      why[sizeof why - 1] = 0;
      return acc__error(ACC_ERR_REMOTE,
                        "%s (collective #%llu) on rank %d%s: rank %d (pid %d) exited before "
                        "arriving, after an error of its own: %s; arrived: %s, missing: %s",
                        what(s), (unsigned long long)s->base.op_seq, s->me + s->rank_base,
                        s->where, r + s->rank_base, pid, why, arrived, missing);
    }
    if (ps == PEER_DEAD)
      return acc__error(ACC_ERR_REMOTE,
                        "%s (collective #%llu) on rank %d%s: rank %d (pid %d) died before arriving "
                        "(killed, crashed, or exited without acc_state_destroy); arrived: %s, "
                        "missing: %s",
                        what(s), (unsigned long long)s->base.op_seq, s->me + s->rank_base, s->where, r + s->rank_base, pid,
                      arrived, missing);
    return acc__error(ACC_ERR_REMOTE,
                      "%s (collective #%llu) on rank %d%s: rank %d (pid %d) left the process group "
                      "(acc_state_destroy or exit) while the others were waiting for it; every rank "
                      "must make the same collective calls; arrived: %s, missing: %s",
                      what(s), (unsigned long long)s->base.op_seq, s->me + s->rank_base, s->where, r + s->rank_base, pid,
                      arrived, missing);
  }
  return ACC_OK;
}

static acc_result timeout_error(shm_be *s, uint64_t target) {
  char arrived[512], missing[512];
  rank_list(s, target, 1, arrived, sizeof arrived);
  rank_list(s, target, 0, missing, sizeof missing);
  if (s->joining)
    return acc__error(ACC_ERR_TIMEOUT,
                      "joining the shared-memory process group on rank %d%s: timed out after %g s "
                      "(%s): attached: %s, not attached: %s (a rank that is not attached has not "
                      "started, failed before acc_state_create, or is a different job)",
                      s->me + s->rank_base, s->where, s->rdzv_timeout_s, s->rdzv_var, arrived, missing);
  return acc__error(ACC_ERR_TIMEOUT,
                    "%s (collective #%llu) on rank %d%s: timed out after %g s (ACCELERATE_TIMEOUT): "
                    "arrived: %s, not arrived: %s",
                    what(s), (unsigned long long)s->base.op_seq, s->me + s->rank_base, s->where, s->timeout_s, arrived,
                    missing);
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

int acc__shm_last_call(shm_be *s, int r, acc__call_rec *out) { return read_call(s, r, 0, 0, out); }

static void my_call(shm_be *s, acc__call_rec *out) {
  memset(out, 0, sizeof *out);
  if (!s->base.call) return;
  acc__call_rec_fields(out, s->base.call);
  acc__call_rec_site(out, s->base.call->file);
}

void acc__shm_my_call(shm_be *s, acc__call_rec *out) { my_call(s, out); }

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
  acc_result rc = acc__mismatch_error(what(s), s->me, &mine, all, s->n, s->rank_base);
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
                                "accelerate: hang report: rank %d%s (pid %d): %s (collective #%llu) "
                                "%s has waited %.1f s (timeout %g s, ACCELERATE_TIMEOUT);",
                                s->me + s->rank_base, s->where, (int)getpid(), what(s), (unsigned long long)s->base.op_seq,
                                one, waited, s->timeout_s);
  char missing[512];
  rank_list(s, target, 0, missing, sizeof missing);
  len += (size_t)snprintf(line + len, sizeof line - len, " not arrived: %s", missing);
  for (int r = 0; r < s->n && len + 450 < sizeof line; r++) {
    if (r == s->me || atomic_load(&s->ctrl[r].seq) >= target) continue;
    int pid = atomic_load(&s->ctrl[r].pid), gr = r + s->rank_base;
    peer_state ps = peer_check(s, r);
    acc__call_rec rec;
    int any = read_call(s, r, 0, 0, &rec);
    if (any) acc__call_rec_describe(one, sizeof one, &rec);
    if (ps != PEER_ALIVE)
      len += (size_t)snprintf(line + len, sizeof line - len, "; rank %d (pid %d) is %s", gr, pid,
                              ps == PEER_DEAD ? "dead" : "gone (left the process group)");
    else if (!any)
      len += (size_t)snprintf(line + len, sizeof line - len,
                              "; rank %d (pid %d) is not in a collective (it has made none yet)",
                              gr, pid);
    else if (atomic_load(&s->ctrl[r].active))
      len += (size_t)snprintf(line + len, sizeof line - len,
                              "; rank %d (pid %d) is in %s (collective #%llu)", gr, pid, one,
                              (unsigned long long)rec.seq);
    else
      len += (size_t)snprintf(line + len, sizeof line - len,
                              "; rank %d (pid %d) is not in a collective, its last was %s "
                              "(collective #%llu)",
                              gr, pid, one, (unsigned long long)rec.seq);
  }
  acc__report_line(line);
}

/* During the rendezvous: a rank that the launcher saw exit will never attach. */
acc_result acc__shm_board_check(shm_be *s) {
  acc__board_entry e;
  int r = acc__board_find_dead(s->board_fd, s->me, -1, &e);
  if (r < 0) return ACC_OK;
  char how[96], arrived[512], missing[512];
  acc__board_describe(&e, how, sizeof how);
  if (!s->map)
    return acc__error(ACC_ERR_REMOTE,
                      "joining the shared-memory process group on rank %d%s: rank %d (pid %d) %s "
                      "before joining (reported by accelerate launch)",
                      s->me + s->rank_base, s->where, r + s->rank_base, (int)e.pid, how);
  rank_list(s, 0, 1, arrived, sizeof arrived);
  rank_list(s, 0, 0, missing, sizeof missing);
  return acc__error(ACC_ERR_REMOTE,
                    "joining the shared-memory process group on rank %d%s: rank %d (pid %d) %s "
                    "before every rank attached (reported by accelerate launch); attached: %s, "
                    "not attached: %s",
                    s->me + s->rank_base, s->where, r + s->rank_base, (int)e.pid, how, arrived, missing);
}

/* ---- one-sided broadcasts (shm_ring.c): mismatch messages, the checks of steps ------------- */

/* Rank r's description of its broadcast j when it made (or is making) it and the record is still
 * in its ring; otherwise of its current or latest collective. A diagnostic. */
void acc__shm_ring_rec(shm_be *s, int r, uint64_t j, acc__call_rec *out) {
  acc__shm_ctrl *c = &s->ctrl[r];
  uint64_t cur = atomic_load(&c->bcur), done = r == s->me ? s->bcount : atomic_load(&c->bseq);
  uint64_t top = cur ? cur : done; /* bcall[j % ACC_SHM_RING] is rewritten when the rank enters j + ACC_SHM_RING */
  if (cur == j + 1 || (j < done && top - j <= ACC_SHM_RING)) {
    memcpy(out, &c->bcall[j % ACC_SHM_RING], sizeof *out);
    return;
  }
  if (r == s->me && s->base.call) {
    my_call(s, out);
    return;
  }
  if (!read_call(s, r, 0, 0, out)) memset(out, 0, sizeof *out);
}

/* The mismatch error at broadcast j: every rank's call there. */
acc_result acc__shm_ring_mismatch(shm_be *s, uint64_t j, const char *what) {
  acc__call_rec mine, *all = acc__calloc((size_t)s->n, sizeof *all);
  s->failed = 1;
  if (!all) return ACC_ERR_NOMEM;
  acc__shm_ring_rec(s, s->me, j, &mine);
  for (int r = 0; r < s->n; r++) {
    if (r == s->me)
      all[r] = mine;
    else
      acc__shm_ring_rec(s, r, j, &all[r]);
  }
  acc_result rc = acc__mismatch_error(what, s->me, &mine, all, s->n, s->rank_base);
  acc__free(all);
  return rc;
}

/* The first broadcast in [lo, hi) whose digest differs between this rank and rank r (the records
 * still in both rings), or hi when none does. */
uint64_t acc__shm_ring_first_diff(shm_be *s, int r, uint64_t lo, uint64_t hi) {
  if (hi > ACC_SHM_RING && lo < hi - ACC_SHM_RING) lo = hi - ACC_SHM_RING;
  for (uint64_t j = lo; j < hi; j++)
    if (atomic_load(&s->ctrl[r].bdigs[j % ACC_SHM_RING]) != atomic_load(&s->ctrl[s->me].bdigs[j % ACC_SHM_RING])) return j;
  return hi;
}

acc_result acc__shm_ring_step_mismatch(shm_be *s, uint64_t t) {
  const char *what = s->base.op_name ? s->base.op_name : "collective";
  for (int r = 0; r < s->n; r++) {
    if (r == s->me || atomic_load(&s->ctrl[r].bdig[t & 1]) == s->bdig) continue;
    uint64_t theirs = atomic_load(&s->ctrl[r].bcnt[t & 1]);
    uint64_t common = theirs < s->bcount ? theirs : s->bcount;
    acc__shm_ring_mismatch(s, acc__shm_ring_first_diff(s, r, s->bverified, common), "broadcast");
    break;
  }
  if (acc__last_error_code() != ACC_ERR_MISMATCH) /* the digest changed meanwhile */
    acc__shm_ring_mismatch(s, s->bcount ? s->bcount - 1 : 0, "broadcast");
  return acc__error_context(ACC_ERR_MISMATCH, "%s (collective #%llu) on rank %d%s: an earlier one-sided "
                            "broadcast was not the same on every process", what,
                            (unsigned long long)s->base.op_seq, s->me + s->rank_base, s->where);
}

acc_result acc__shm_ring_check_missing(shm_be *s, int r) {
  uint64_t cur = atomic_load(&s->ctrl[r].bcur);
  if (cur && cur - 1 >= s->bcount)
    return acc__shm_ring_mismatch(s, cur - 1, s->base.op_name ? s->base.op_name : "collective");
  return ACC_OK;
}

/* Low-frequency checks of every waiting phase: dead peers, the launcher's board during the
 * rendezvous, the deadline. */
static acc_result wait_check(shm_be *s, uint64_t target, double t0, double now, double *last,
                             int *reported) {
  if (now - *last < SHM_CHECK_PERIOD_S) return ACC_OK;
  *last = now;
  /* first: a rank that failed in a one-sided broadcast and left is named for its call */
  if (!s->joining)
    for (int r = 0; r < s->n; r++)
      if (r != s->me && atomic_load(&s->ctrl[r].seq) < target) ACC_CHECK(acc__shm_ring_check_missing(s, r));
  ACC_CHECK(check_peers(s, target));
  if (!*reported && s->hang_s > 0 && now - t0 >= s->hang_s && !s->joining) {
    *reported = 1;
    hang_report(s, target, now - t0);
  }
  if (s->joining) {
    ACC_CHECK(acc__shm_board_check(s));
    if (now - s->rdzv_t0 >= s->rdzv_timeout_s) return timeout_error(s, target);
  } else if (now - t0 >= s->timeout_s) {
    return timeout_error(s, target);
  }
  return ACC_OK;
}

/* Co-location (opt-in: ACCELERATE_SHM_NUDGE). With no more processes than CPUs, the scheduler may still put two ranks on one
 * CPU (a futex wake-up pulls the woken process next to its waker) and keep them there: each then
 * finds its peer on its own CPU, yields instead of spinning, and every step costs two context
 * switches (measured on a loaded 2-core AMD EPYC: 10 us per step instead of 0.45,
 * docs/PERFORMANCE.md). After SHM_COLOC_NUDGE such waits in a row, the rank moves itself to
 * another CPU it is allowed on (affinity without the current CPU, then the original mask again,
 * so nothing stays pinned). Only scheduling changes: no data is touched. Off by default: on the
 * same machine under heavy load (load average 16) it made the 2-process training job slower,
 * where staying co-located and yielding to the peer is what the overloaded CPUs need. */
#define SHM_COLOC_NUDGE 16u

static void nudge_away(shm_be *s) {
  cpu_set_t orig, other;
  int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof orig, &orig) != 0) return;
  memcpy(&other, &orig, sizeof other);
  CPU_CLR(cpu, &other);
  if (CPU_COUNT(&other) == 0) return; /* confined to this CPU: nothing to do */
  if (sched_setaffinity(0, sizeof other, &other) != 0) return;
  sched_setaffinity(0, sizeof orig, &orig);
  s->cpu = sched_getcpu();
  atomic_store_explicit(&s->ctrl[s->me].cpu, s->cpu, memory_order_relaxed);
}

/* Waits until every rank's seq >= target. */
static acc_result wait_all(shm_be *s, uint64_t target) {
  int miss = first_missing(s, target, 0);
  if (miss < 0) return ACC_OK;
  if (s->can_nudge) {
    if (atomic_load_explicit(&s->ctrl[miss].cpu, memory_order_relaxed) != s->cpu) {
      s->coloc = 0;
    } else if (++s->coloc >= SHM_COLOC_NUDGE) {
      s->coloc = 0;
      nudge_away(s);
    }
  }
  double t0 = acc__now(), last_check = t0, now;
  int reported = 0; /* the hang report is printed once per wait */
  /* 1. spin: the peer is usually running on another core and arrives within microseconds;
   * but not when it last ran on this very CPU (it cannot run while we spin) */
  for (unsigned i = 1; atomic_load_explicit(&s->ctrl[miss].cpu, memory_order_relaxed) != s->cpu; i++) {
    acc__shm_cpu_relax();
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

acc_result acc__shm_step(shm_be *s) {
  uint64_t t = ++s->counter;
  /* the first step of the collective comm.c described in base.call */
  int first = s->base.call && s->base.call->seq != s->published_seq;
  if (first) publish_call(s, t);
  s->check_pending = first;
  publish(s, t); /* with the tag when first */
  acc_result rc = wait_all(s, t);
  if (first) {
    s->check_pending = 0;
    if (rc == ACC_OK && s->tag_bad) rc = s->tag_bad == 1 ? tag_mismatch(s, t) : acc__shm_ring_step_mismatch(s, t);
    if (rc == ACC_OK) s->bverified = s->bcount; /* every rank made the same broadcasts before */
  }
  if (rc != ACC_OK) s->failed = 1;
  return rc;
}

/* comm.c ends a collective: this rank is no longer in one (hang reports). */
void acc__shm_call_end(acc__backend *be) {
  shm_be *s = (shm_be *)be;
  atomic_store_explicit(&s->ctrl[s->me].active, 0, memory_order_relaxed);
}
