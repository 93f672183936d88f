/* The state's comm worker thread and its queue of submitted collectives (async.h; the submit
 * calls are in comm_submit.c).
 *
 * One worker per state, started by the first submit that can overlap, stopped and joined by
 * acc_state_destroy (through st->async_stop) after it ran every queued job. Jobs form one FIFO
 * queue; a job stays at its head while it runs and leaves it when it ended, so "the queue is
 * empty" means "nothing queued and nothing running": the condition every synchronous collective
 * waits for (acc__comm_async_drain). Only the worker calls the backend while the queue is not
 * empty, only the program's threads call it while it is empty.
 *
 * What a job runs is the synchronous collective of comm_group.c, on the worker, with the
 * submitting thread's origin and call site put back into the worker's thread-locals first, and
 * with device staging switched off on the worker (the submitting thread staged the buffers). Its
 * result and error sentence (thread-local, acc_last_error) are carried back to the waiter. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/collcheck.h"
#include "comm/async_job.h"
#include "state/state.h"

typedef struct acc__comm_async {
  pthread_mutex_t mu;
  pthread_cond_t work; /* a job was queued, or stop */
  pthread_cond_t idle; /* a job ended */
  pthread_t thread;
  int started, stop;
  acc__comm_job *head, *tail;
  acc__comm_job *outstanding; /* every job submitted here and not waited yet */
} acc__comm_async;

static _Thread_local int on_worker; /* this thread is a comm worker */

static void run_job(acc__comm_job *j) {
  acc__comm_origin((acc__origin)j->origin, j->origin_index);
  acc__tls_site_depth = j->site_depth;
  acc__tls_site_entry = j->site_entry;
  acc__tls_site_line = j->site_line;
  acc__tls_site_file = j->site_file;
  acc_result rc = j->run(j, j->send, j->recv);
  acc__tls_site_depth = 0;
  acc__tls_site_file = NULL;
  j->rc = rc;
  if (rc != ACC_OK) snprintf(j->msg, sizeof j->msg, "%s", acc_last_error());
}

static void *worker_main(void *arg) {
  acc__comm_async *a = arg;
  on_worker = 1;
  acc__comm_stage_host_only(1); /* the submitting thread staged every device buffer */
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while (!a->head && !a->stop) pthread_cond_wait(&a->work, &a->mu);
    if (!a->head) break; /* stop, and nothing left to run */
    acc__comm_job *j = a->head;
    pthread_mutex_unlock(&a->mu);
    run_job(j);
    pthread_mutex_lock(&a->mu);
    a->head = j->next;
    if (!a->head) a->tail = NULL;
    j->done = 1;
    pthread_cond_broadcast(&a->idle);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* acc_state_destroy: every queued job runs, then the worker is joined (before the backend goes). */
static void async_stop(acc_state *st) {
  acc__comm_async *a = st->async;
  if (!a) return;
  if (a->started) {
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
  }
  /* handles not waited yet (an FSDP destroyed after its state): their jobs ran; their waits
   * no longer touch the queue */
  for (acc__comm_job *j = a->outstanding; j; j = j->out_next) j->q = NULL;
  pthread_cond_destroy(&a->work);
  pthread_cond_destroy(&a->idle);
  pthread_mutex_destroy(&a->mu);
  acc__free(a);
  st->async = NULL;
  st->async_stop = NULL;
}

static acc_result get_async(acc_state *st, acc__comm_async **out) {
  acc__comm_async *a = st->async;
  if (!a) {
    a = acc__calloc(1, sizeof *a);
    if (!a) return acc__error(ACC_ERR_NOMEM, "cannot allocate the comm worker's queue");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->idle, NULL);
    st->async = a;
    st->async_stop = async_stop;
  }
  if (!a->started) {
    /* the worker takes no signals: the program's handlers run where they always did */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&a->thread, NULL, worker_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0)
      return acc__error(ACC_ERR_SYSTEM, "cannot start the comm worker thread (pthread_create: %s)", strerror(e));
    a->started = 1;
  }
  *out = a;
  return ACC_OK;
}

int acc__comm_async_overlaps(acc_state *st) {
  return st && st->be && st->size > 1 && !st->be->caller_thread_only;
}

void acc__comm_async_drain(acc_state *st) {
  if (on_worker || !st || !st->async) return;
  acc__comm_async *a = st->async;
  pthread_mutex_lock(&a->mu);
  while (a->head) pthread_cond_wait(&a->idle, &a->mu);
  pthread_mutex_unlock(&a->mu);
}

int acc__comm_async_on_worker(void) { return on_worker; }

acc_result acc__comm_async_enqueue(acc_state *st, acc__comm_job *job) {
  acc__comm_async *a;
  ACC_CHECK(get_async(st, &a));
  job->q = a;
  pthread_mutex_lock(&a->mu);
  job->out_next = a->outstanding;
  if (a->outstanding) a->outstanding->out_prev = job;
  a->outstanding = job;
  if (a->tail) a->tail->next = job;
  else a->head = job;
  a->tail = job;
  pthread_cond_signal(&a->work);
  pthread_mutex_unlock(&a->mu);
  return ACC_OK;
}

static void wait_done(acc__comm_job *h) {
  acc__comm_async *a = h->q;
  if (!a) return; /* ran at submit time, or the worker ran it and ended with its state */
  pthread_mutex_lock(&a->mu);
  while (!h->done) pthread_cond_wait(&a->idle, &a->mu);
  if (h->out_prev) h->out_prev->out_next = h->out_next;
  else a->outstanding = h->out_next;
  if (h->out_next) h->out_next->out_prev = h->out_prev;
  pthread_mutex_unlock(&a->mu);
}

acc_result acc__comm_async_wait(acc__comm_job *h) {
  if (!h) return ACC_OK;
  wait_done(h);
  acc_result rc = h->rc;
  if (h->staged) {
    acc_result se = acc__comm_stage_end(&h->io, rc, rc == ACC_OK);
    if (rc == ACC_OK) rc = se; /* a staging failure's sentence is this thread's already */
  }
  if (h->rc != ACC_OK) acc__error(h->rc, "%s", h->msg);
  acc__free(h);
  return rc;
}

int acc__comm_async_finished(acc__comm_job *h, double timeout_s) {
  if (!h) return 1;
  acc__comm_async *a = h->q;
  if (!a) return h->done;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  double whole = (double)(time_t)timeout_s;
  until.tv_sec += (time_t)timeout_s;
  until.tv_nsec += (long)((timeout_s - whole) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&a->mu);
  int e = 0;
  while (!h->done && e == 0) e = pthread_cond_timedwait(&a->idle, &a->mu, &until);
  int done = h->done;
  pthread_mutex_unlock(&a->mu);
  return done;
}
