/* The prepared data loader, the ring between producer and consumer: batches are built into a ring
 * of preallocated slots, optionally by a loader thread (prefetch > 0) that keeps up to prefetch
 * batches ready, else on demand in acc_dataloader_next; the consumer takes them in order and
 * gives them back when the program is done with them. What the producer builds depends on the
 * mode: a slice of a dispatched global batch (loader_dispatch.c), or a batch of this process
 * (loader_batch.c); batches to be skipped at the start of an epoch are produced, not yielded. */
#include <pthread.h>

#include "data/loader_impl.h"

/* ---- producer ------------------------------------------------------------------------------ */

/* Produces the next yielded batch of the epoch into s: 1 got one, 0 end, -1 error (perr). */
static int produce(acc_dataloader *dl, dl_slot *s) {
  if (dl->dispatch) { /* skipped batches are still read and broadcast (as Accelerate) */
    for (;;) {
      int r = acc__loader_produce_dispatch(dl, s);
      if (r != 1 || s->index >= dl->p_skip) return r;
    }
  }
  if (!dl->iterable) return acc__loader_produce_map(dl, s);
  for (;;) { /* iterable: skipped batches are produced but not yielded (as Accelerate) */
    int r = acc__loader_produce_iter_once(dl, s);
    if (r != 1 || s->index >= dl->p_skip) return r;
  }
}

static void *producer_main(void *arg) {
  acc_dataloader *dl = arg;
  pthread_mutex_lock(&dl->mu);
  for (;;) {
    while (!dl->quit && !(dl->active && !dl->done && !dl->failed && dl->nfree > 0))
      pthread_cond_wait(&dl->cv_prod, &dl->mu);
    if (dl->quit) break;
    int si = dl->free_stack[--dl->nfree];
    uint64_t gen = dl->gen;
    dl->busy = 1;
    pthread_mutex_unlock(&dl->mu);
    int r = produce(dl, &dl->slots[si]);
    pthread_mutex_lock(&dl->mu);
    dl->busy = 0;
    if (gen != dl->gen || r != 1) {
      dl->free_stack[dl->nfree++] = si;
      if (gen == dl->gen) {
        if (r == 0) dl->done = 1;
        else dl->failed = 1;
      }
    } else {
      dl->ready_q[(dl->rq_head + dl->rq_count++) % dl->nslots] = si;
    }
    pthread_cond_broadcast(&dl->cv_cons);
  }
  pthread_mutex_unlock(&dl->mu);
  return NULL;
}

acc_result acc__loader_thread_start(acc_dataloader *dl, const char *fn) {
  pthread_mutex_init(&dl->mu, NULL);
  pthread_cond_init(&dl->cv_prod, NULL);
  pthread_cond_init(&dl->cv_cons, NULL);
  int e = pthread_create(&dl->thread, NULL, producer_main, dl);
  if (e != 0) {
    pthread_mutex_destroy(&dl->mu);
    pthread_cond_destroy(&dl->cv_prod);
    pthread_cond_destroy(&dl->cv_cons);
    return acc__error(ACC_ERR_SYSTEM,
                      "%s: could not start the loader thread (error %d); use prefetch 0", fn, e);
  }
  dl->threaded = 1;
  return ACC_OK;
}

void acc__loader_thread_stop(acc_dataloader *dl) {
  if (!dl->threaded) return;
  pthread_mutex_lock(&dl->mu);
  dl->quit = 1;
  dl->active = 0;
  dl->gen++;
  pthread_cond_broadcast(&dl->cv_prod);
  pthread_mutex_unlock(&dl->mu);
  pthread_join(dl->thread, NULL);
  pthread_mutex_destroy(&dl->mu);
  pthread_cond_destroy(&dl->cv_prod);
  pthread_cond_destroy(&dl->cv_cons);
}

void acc__loader_producer_start(acc_dataloader *dl) {
  if (dl->threaded) {
    pthread_mutex_lock(&dl->mu);
    dl->active = 1;
    pthread_cond_signal(&dl->cv_prod);
    pthread_mutex_unlock(&dl->mu);
  }
}

/* ---- consumer ------------------------------------------------------------------------------ */

/* Gives slot si back to the producer (after its device copy has read the host buffers). */
void acc__loader_release_slot(acc_dataloader *dl, int si) {
  if (si < 0) return;
  /* device placement: an error here resurfaces on the next device call */
  if (dl->dev) (void)acc__loader_unplace_slot(dl, si);
  if (dl->threaded) pthread_mutex_lock(&dl->mu);
  dl->free_stack[dl->nfree++] = si;
  if (dl->threaded) {
    pthread_cond_signal(&dl->cv_prod);
    pthread_mutex_unlock(&dl->mu);
  }
}

/* Takes the next produced slot: 1 (in *si), 0 end of epoch, -1 error (perr). */
int acc__loader_take(acc_dataloader *dl, int *si) {
  if (!dl->threaded) {
    if (dl->done) return 0;
    int s = dl->free_stack[--dl->nfree];
    int r = produce(dl, &dl->slots[s]);
    if (r == 1) {
      *si = s;
      return 1;
    }
    dl->free_stack[dl->nfree++] = s;
    if (r == 0) dl->done = 1;
    return r;
  }
  pthread_mutex_lock(&dl->mu);
  while (dl->rq_count == 0 && !dl->done && !dl->failed) pthread_cond_wait(&dl->cv_cons, &dl->mu);
  int r;
  if (dl->rq_count > 0) {
    *si = dl->ready_q[dl->rq_head];
    dl->rq_head = (dl->rq_head + 1) % dl->nslots;
    dl->rq_count--;
    r = 1;
  } else {
    r = dl->failed ? -1 : 0;
  }
  pthread_mutex_unlock(&dl->mu);
  return r;
}

/* Stops the producer (mid-epoch too) and returns every slot to the free list. */
void acc__loader_stop_epoch(acc_dataloader *dl) {
  if (dl->dev) { /* the batch in use and the one copied ahead */
    if (dl->cur_slot >= 0) (void)acc__loader_unplace_slot(dl, dl->cur_slot);
    if (dl->ahead_slot >= 0) (void)acc__loader_unplace_slot(dl, dl->ahead_slot);
  }
  if (dl->threaded) {
    pthread_mutex_lock(&dl->mu);
    dl->active = 0;
    dl->gen++;
    while (dl->busy) pthread_cond_wait(&dl->cv_cons, &dl->mu);
  }
  dl->nfree = 0;
  for (int i = 0; i < dl->nslots; i++) dl->free_stack[dl->nfree++] = i;
  dl->rq_head = dl->rq_count = 0;
  dl->done = dl->failed = 0;
  if (dl->threaded) pthread_mutex_unlock(&dl->mu);
  dl->cur_slot = dl->ahead_slot = -1;
  dl->in_epoch = 0;
  dl->end_of_dataloader = 0;
  dl->cur_skip = 0;
}
