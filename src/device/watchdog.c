/* The device-collective watchdog (watchdog.h): one thread per watched communicator polls the
 * operations in flight, oldest first (they complete in order: one stream), and fails them on an
 * error, an asynchronous communicator error, a dead peer or the deadline. */
#define _POSIX_C_SOURCE 200809L
#include "device/watchdog.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/collcheck.h"
#include "state/state.h"

enum { WD_RING = 256 };

typedef struct wd_op {
  void *token;
  uint64_t seq;
  double t0;
  char op[32];
  char detail[64];
} wd_op;

struct acc__watchdog {
  acc__wd_config cfg;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* the thread: something pushed, or stop */
  pthread_cond_t cv_done; /* waiters: an operation completed, or the watchdog failed */
  wd_op ring[WD_RING];
  size_t head, count;
  uint64_t pushed, done; /* sequence numbers: last pushed, last completed */
  int stop;
  int failed;
  acc_result rc;
  char msg[1024];
};

/* Records the failure of op (called by the thread with the lock held), aborts the communicator
 * and wakes every waiter. */
static void fail(acc__watchdog *w, const wd_op *op, acc_result rc, const char *why) {
  if (w->failed) return;
  w->failed = 1;
  w->rc = rc;
  snprintf(w->msg, sizeof w->msg,
           "%s %s #%llu (%s) on rank %d of %d: %s; the communicator was aborted and the process "
           "group is broken",
           w->cfg.name, op->op, (unsigned long long)op->seq, op->detail, w->cfg.rank,
           w->cfg.nranks, why);
  w->cfg.ops->abort(w->cfg.ctx);
  char line[1100];
  snprintf(line, sizeof line, "accelerate: watchdog: %s", w->msg);
  acc__report_line(line);
  pthread_cond_broadcast(&w->cv_done);
}

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void *run(void *arg) {
  acc__watchdog *w = arg;
  const acc__wd_config *c = &w->cfg;
  double last_peer = 0, gone_since = 0;
  int gone_rank = -1, gone_pid = 0;
  char gone_how[96] = "", msg[512];
  if (c->ops->thread_start) c->ops->thread_start(c->ctx);
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    if (w->failed || w->count == 0) {
      gone_since = 0;
      pthread_cond_wait(&w->cv_work, &w->mu);
      continue;
    }
    wd_op op = w->ring[w->head];
    pthread_mutex_unlock(&w->mu);
    msg[0] = '\0';
    int q = c->ops->query(c->ctx, op.token, msg, sizeof msg);
    double now = acc__now();
    acc_result rc = ACC_OK;
    char why[800];
    why[0] = '\0';
    if (q < 0) {
      rc = ACC_ERR_BACKEND;
      snprintf(why, sizeof why, "it failed: %s", msg[0] ? msg : "unknown error");
    } else if (q == 0 && c->ops->async_error && c->ops->async_error(c->ctx, msg, sizeof msg)) {
      rc = ACC_ERR_BACKEND;
      snprintf(why, sizeof why, "the communicator reported an asynchronous error: %s", msg);
    } else if (q == 0 && c->peer && (last_peer == 0 || now - last_peer >= c->peer_period_s)) {
      last_peer = now;
      int r = -1, pid = 0;
      char how[96] = "";
      if (c->peer(c->pctx, &r, &pid, how, sizeof how)) {
        if (!gone_since) {
          gone_since = now;
          gone_rank = r;
          gone_pid = pid;
          snprintf(gone_how, sizeof gone_how, "%s", how);
        }
      } else {
        gone_since = 0;
      }
    }
    if (q == 0 && rc == ACC_OK && gone_since && now - gone_since >= c->grace_s) {
      rc = ACC_ERR_REMOTE;
      snprintf(why, sizeof why, "rank %d (pid %d) %s while it was in flight", gone_rank,
               gone_pid, gone_how);
    }
    if (q == 0 && rc == ACC_OK && now - op.t0 >= c->timeout_s) {
      rc = ACC_ERR_TIMEOUT;
      snprintf(why, sizeof why,
               "did not complete in %g s (ACCELERATE_TIMEOUT): a peer is stalled, or making a "
               "different call",
               c->timeout_s);
    }
    if (q == 0 && rc == ACC_OK) nap(c->poll_s);
    pthread_mutex_lock(&w->mu);
    if (rc != ACC_OK) {
      fail(w, &op, rc, why);
    } else if (q == 1 && w->count && w->ring[w->head].seq == op.seq) {
      w->head = (w->head + 1) % WD_RING;
      w->count--;
      w->done = op.seq;
      gone_since = 0;
      pthread_cond_broadcast(&w->cv_done);
    }
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

acc_result acc__watchdog_start(acc__watchdog **out, const acc__wd_config *cfg) {
  *out = NULL;
  if (!cfg || !cfg->ops || !cfg->ops->query || !cfg->ops->abort || !(cfg->timeout_s > 0))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "watchdog: incomplete configuration");
  acc__watchdog *w = acc__calloc(1, sizeof *w);
  if (!w) return ACC_ERR_NOMEM;
  w->cfg = *cfg;
  if (!w->cfg.name) w->cfg.name = "device";
  if (!(w->cfg.poll_s > 0)) w->cfg.poll_s = 0.001;
  if (!(w->cfg.peer_period_s > 0)) w->cfg.peer_period_s = 0.1;
  if (!(w->cfg.grace_s > 0)) w->cfg.grace_s = 1.0;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv_work, NULL);
  pthread_cond_init(&w->cv_done, NULL);
  if (pthread_create(&w->thread, NULL, run, w) != 0) {
    acc__watchdog_stop(w);
    return acc__error(ACC_ERR_SYSTEM, "watchdog: cannot start its thread");
  }
  w->started = 1;
  *out = w;
  return ACC_OK;
}

void acc__watchdog_stop(acc__watchdog *w) {
  if (!w) return;
  if (w->started) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv_work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
  }
  pthread_cond_destroy(&w->cv_done);
  pthread_cond_destroy(&w->cv_work);
  pthread_mutex_destroy(&w->mu);
  acc__free(w);
}

/* The failure as this thread's error; the group broken. Lock held. */
static acc_result failure(acc__watchdog *w) {
  acc_result rc = acc__error(w->rc, "%s", w->msg);
  if (w->cfg.st) acc__state_mark_broken(w->cfg.st, w->msg);
  return rc;
}

acc_result acc__watchdog_begin(acc__watchdog *w) {
  pthread_mutex_lock(&w->mu);
  while (!w->failed && w->count == WD_RING) pthread_cond_wait(&w->cv_done, &w->mu);
  if (!w->failed) return ACC_OK;
  acc_result rc = failure(w);
  pthread_mutex_unlock(&w->mu);
  return rc;
}

acc_result acc__watchdog_push(acc__watchdog *w, void *token, const char *op, const char *detail,
                              uint64_t *seq) {
  wd_op *o = &w->ring[(w->head + w->count) % WD_RING];
  memset(o, 0, sizeof *o);
  o->token = token;
  o->seq = ++w->pushed;
  o->t0 = acc__now();
  snprintf(o->op, sizeof o->op, "%s", op ? op : "operation");
  snprintf(o->detail, sizeof o->detail, "%s", detail ? detail : "");
  w->count++;
  if (seq) *seq = o->seq;
  pthread_cond_signal(&w->cv_work);
  pthread_mutex_unlock(&w->mu);
  return ACC_OK;
}

void acc__watchdog_cancel(acc__watchdog *w) { pthread_mutex_unlock(&w->mu); }

acc_result acc__watchdog_check(acc__watchdog *w) {
  pthread_mutex_lock(&w->mu);
  acc_result rc = w->failed ? failure(w) : ACC_OK;
  pthread_mutex_unlock(&w->mu);
  return rc;
}

acc_result acc__watchdog_wait(acc__watchdog *w, uint64_t seq) {
  pthread_mutex_lock(&w->mu);
  while (!w->failed && w->done < seq) pthread_cond_wait(&w->cv_done, &w->mu);
  acc_result rc = w->failed ? failure(w) : ACC_OK;
  pthread_mutex_unlock(&w->mu);
  return rc;
}

size_t acc__watchdog_in_flight(acc__watchdog *w) {
  pthread_mutex_lock(&w->mu);
  size_t n = w->count;
  pthread_mutex_unlock(&w->mu);
  return n;
}

acc_result acc__wd_poll(int (*query)(void *ctx), void *ctx, double timeout_s) {
  double t0 = acc__now();
  for (;;) {
    int q = query(ctx);
    if (q > 0) return ACC_OK;
    if (q < 0) return ACC_ERR_BACKEND;
    double dt = acc__now() - t0;
    if (dt >= timeout_s) return ACC_ERR_TIMEOUT;
    if (dt < 0.001) sched_yield();
    else nap(20e-6);
  }
}
