/* The dataloader: epoch plans from the seedable sampler (or a given list of batches) +
 * BatchSamplerShard (map-style) or IterableDatasetShard (iterable), batches built into a ring of
 * preallocated slots, optionally by a loader thread, handed out one batch behind the producer so
 * end_of_dataloader is known. The dispatching mode (DataLoaderDispatcher) instead has process 0
 * read every global batch and broadcast it; each process keeps its slice.
 *
 * Device placement (a loader prepared by an accelerator that trains on a device): the slots' host
 * buffers are the staging buffers (page-locked on CUDA), every slot also owns device buffers.
 * When a batch is taken from the ring it is copied host to device on the loader's copy stream
 * (so batch k+1 is copied while the program works on batch k) and an event recorded after the
 * copy makes the compute stream wait for it. A slot goes back to the producer only after its
 * copy has run (the host buffer is the copy's source), and its device buffers are written again
 * only after the compute stream has passed the point where the program released the batch (an
 * event recorded on the compute stream at release, waited for by the copy stream). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"
#include "device/devctx.h"

typedef struct slot {
  void *fields[ACC_DATA_MAX_FIELDS];
  size_t bytes[ACC_DATA_MAX_FIELDS];
  int64_t *indices;
  int64_t size;
  int64_t index;
  int64_t observed; /* dispatching: samples in the global batch this slice came from */
  /* device placement */
  void *dfields[ACC_DATA_MAX_FIELDS];
  acc__devent *copied;  /* recorded on the copy stream after this slot's host-to-device copy */
  acc__devent *used;    /* recorded on the compute stream when the program released the batch */
  int copy_pending;     /* a copy from the host buffers is queued and not known to have run */
  int used_pending;     /* `used` was recorded: the next copy into dfields must wait for it */
} slot;

struct acc_dataloader {
  uint32_t magic;
  void (*owner_forget)(void *owner, acc_dataloader *dl); /* the accelerator that prepared it */
  void *owner;
  acc_dataset *ds;
  acc_dataloader_options o;
  size_t capacity[ACC_DATA_MAX_FIELDS];
  int np, split;
  int64_t per_bs;   /* samples in a full batch of this process */
  int64_t total_bs; /* samples in a full batch over all processes */
  int iterable;
  int batched;                             /* map-style over a given list of batches */
  int64_t nb, *bl_idx, *bl_counts;         /* the list as given */
  int64_t *bl_perm, *bl_pidx, *bl_pcounts; /* the epoch's (shuffled) list */
  int dispatch;                            /* DataLoaderDispatcher */
  int64_t cur_skip; /* batches skipped at the start of the epoch in progress */
  acc__devctx *dev;     /* device placement: the accelerator's device (NULL: host only) */
  acc__dstream *cstream;   /* its copy stream */
  acc__device *host_dev;   /* the device whose acc__device_host_alloc made the slots' buffers */
  int dead;                /* detaching from the device failed: every call fails */

  /* ring */
  int nslots;
  slot *slots;
  int *ready_q, rq_head, rq_count;
  int *free_stack, nfree;

  /* producer state: touched by the producer only while active, by the consumer when idle */
  int64_t p_epoch, p_skip;
  int64_t *order;
  acc_batch_shard *plan;
  int64_t p_cursor;             /* map-style: next plan batch */
  acc_iterable_shard *ishard;   /* iterable */
  uint8_t *rec_cur, *rec_first; /* staged records: current real batch, first real batch */
  int64_t real_bs, stream_pos, cur_start, p_batches;
  int p_need_reset, p_ended, p_finished;
  uint8_t *stage;               /* custom collate: per_bs staged records */
  const void **sample_ptrs;     /* per_bs * num_fields */
  char perr[512];
  acc_result perr_rc;
  /* dispatching: global batches (records + positions); process 0 reads one ahead into the
   * other buffer. first_*: the first num_processes samples of the epoch's first global batch. */
  uint8_t *g_rec[2];
  int64_t *g_idx[2];
  int64_t g_count[2];
  int g_cur, g_started;
  uint8_t *first_rec;
  int64_t *first_idx, first_count;
  int64_t src_pos; /* map-style: next position in the epoch's order */

  /* consumer state */
  int64_t epoch, skip_next, yielded;
  int in_epoch;
  int cur_slot, ahead_slot;
  int end_of_dataloader;
  int64_t remainder;
  acc_batch batch;
  acc_result sticky_rc;
  char sticky_msg[512];

  /* loader thread */
  int threaded;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_prod, cv_cons;
  int active, done, failed, busy, quit;
  uint64_t gen;
};

static acc_result check_dl(const acc_dataloader *dl, const char *fn) {
  ACC_CHECK(acc__check_handle(dl, ACC__HANDLE_DATALOADER, fn));
  return ACC_OK;
}

/* ---- producer ------------------------------------------------------------------------------ */

static int perror_set(acc_dataloader *dl, acc_result rc, const char *fmt, ...) ACC_PRINTF(3, 4);
static int perror_set(acc_dataloader *dl, acc_result rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dl->perr, sizeof dl->perr, fmt, ap);
  va_end(ap);
  dl->perr_rc = rc;
  return -1;
}

/* Collates n staged samples (sample_ptrs) into slot s. */
static int collate_into(acc_dataloader *dl, slot *s, int64_t n) {
  const acc_dataset *ds = dl->ds;
  if (dl->o.collate) {
    int rc = dl->o.collate(dl->sample_ptrs, n, ds->num_fields, s->fields, dl->capacity, s->bytes,
                           dl->o.collate_payload);
    if (rc != 0)
      return perror_set(dl, ACC_ERR_INVALID_ARGUMENT,
                        "dataloader: the collate callback returned %d for batch %lld of epoch %lld",
                        rc, (long long)s->index, (long long)dl->p_epoch);
    for (int f = 0; f < ds->num_fields; f++)
      if (s->bytes[f] > dl->capacity[f])
        return perror_set(dl, ACC_ERR_INVALID_ARGUMENT,
                          "dataloader: the collate callback wrote %zu bytes to field %d, over its "
                          "capacity of %zu (collate_capacity)", s->bytes[f], f, dl->capacity[f]);
    return 0;
  }
  for (int f = 0; f < ds->num_fields; f++) {
    size_t sb = ds->sample_bytes[f];
    for (int64_t i = 0; i < n; i++)
      memcpy((uint8_t *)s->fields[f] + (size_t)i * sb, dl->sample_ptrs[i * ds->num_fields + f], sb);
    s->bytes[f] = (size_t)n * sb;
  }
  return 0;
}

static int produce_map(acc_dataloader *dl, slot *s) {
  const acc_dataset *ds = dl->ds;
  if (dl->p_cursor >= acc_batch_shard_count(dl->plan)) return 0;
  const int64_t *ix;
  int64_t n;
  if (acc_batch_shard_get(dl->plan, dl->p_cursor, &ix, &n) != ACC_OK)
    return perror_set(dl, ACC_ERR_INTERNAL, "dataloader: plan batch %lld missing", (long long)dl->p_cursor);
  s->index = dl->p_cursor++;
  s->size = n;
  memcpy(s->indices, ix, (size_t)n * sizeof *ix);
  void *ptrs[ACC_DATA_MAX_FIELDS];
  for (int64_t i = 0; i < n; i++) {
    for (int f = 0; f < ds->num_fields; f++)
      ptrs[f] = dl->o.collate ? (void *)(dl->stage + (size_t)i * ds->record_bytes + ds->record_offset[f])
                              : (void *)((uint8_t *)s->fields[f] + (size_t)i * ds->sample_bytes[f]);
    int rc = ds->fetch(ix[i], ptrs, ds->payload);
    if (rc != 0)
      return perror_set(dl, ACC_ERR_INVALID_ARGUMENT,
                        "dataloader: the dataset fetch callback returned %d for sample index %lld "
                        "(batch %lld of epoch %lld)", rc, (long long)ix[i], (long long)s->index,
                        (long long)dl->p_epoch);
  }
  if (!dl->o.collate) {
    for (int f = 0; f < ds->num_fields; f++) s->bytes[f] = (size_t)n * ds->sample_bytes[f];
    return 1;
  }
  for (int64_t i = 0; i < n; i++)
    for (int f = 0; f < ds->num_fields; f++)
      dl->sample_ptrs[i * ds->num_fields + f] = dl->stage + (size_t)i * ds->record_bytes + ds->record_offset[f];
  return collate_into(dl, s, n) == 0 ? 1 : -1;
}

/* Builds slot s from stream positions (see the mapping in docs/data.md). */
static int build_iter_batch(acc_dataloader *dl, slot *s, const int64_t *pos, int64_t n) {
  const acc_dataset *ds = dl->ds;
  s->size = n;
  s->index = dl->p_batches++;
  memcpy(s->indices, pos, (size_t)n * sizeof *pos);
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *rec = pos[i] >= dl->cur_start
                             ? dl->rec_cur + (size_t)(pos[i] - dl->cur_start) * ds->record_bytes
                             : dl->rec_first + (size_t)pos[i] * ds->record_bytes;
    for (int f = 0; f < ds->num_fields; f++)
      dl->sample_ptrs[i * ds->num_fields + f] = rec + ds->record_offset[f];
  }
  return collate_into(dl, s, n);
}

static int produce_iter_once(acc_dataloader *dl, slot *s) {
  const acc_dataset *ds = dl->ds;
  if (dl->p_need_reset) {
    dl->p_need_reset = 0;
    if (ds->reset) {
      int rc = ds->reset(dl->p_epoch, ds->payload);
      if (rc != 0)
        return perror_set(dl, ACC_ERR_INVALID_ARGUMENT,
                          "dataloader: the dataset reset callback returned %d for epoch %lld", rc,
                          (long long)dl->p_epoch);
    }
  }
  const int64_t *pos;
  int64_t n;
  while (!dl->p_ended) {
    uint8_t *rec = dl->rec_cur + (size_t)(dl->stream_pos - dl->cur_start) * ds->record_bytes;
    void *ptrs[ACC_DATA_MAX_FIELDS];
    for (int f = 0; f < ds->num_fields; f++) ptrs[f] = rec + ds->record_offset[f];
    int rc = ds->next(ptrs, ds->payload);
    if (rc < 0)
      return perror_set(dl, ACC_ERR_INVALID_ARGUMENT,
                        "dataloader: the dataset next callback returned %d at sample %lld of epoch %lld",
                        rc, (long long)dl->stream_pos, (long long)dl->p_epoch);
    if (rc == 0) {
      dl->p_ended = 1;
      break;
    }
    int64_t p = dl->stream_pos++;
    if (acc_iterable_shard_push(dl->ishard, p, &pos, &n)) {
      int r = build_iter_batch(dl, s, pos, n);
      if (dl->cur_start == 0) memcpy(dl->rec_first, dl->rec_cur, (size_t)dl->real_bs * ds->record_bytes);
      dl->cur_start += dl->real_bs;
      return r == 0 ? 1 : -1;
    }
  }
  if (dl->p_finished) return 0;
  dl->p_finished = 1;
  int64_t pending = dl->stream_pos - dl->cur_start;
  int got = acc_iterable_shard_finish(dl->ishard, &pos, &n);
  if (dl->np == 1) { /* one process: no IterableDatasetShard, the last batch may be short */
    if (dl->o.drop_last || pending == 0) return 0;
    int64_t *tmp = dl->order; /* order is unused for iterables: room for per_bs positions */
    for (int64_t i = 0; i < pending; i++) tmp[i] = dl->cur_start + i;
    return build_iter_batch(dl, s, tmp, pending) == 0 ? 1 : -1;
  }
  if (!got) return 0;
  return build_iter_batch(dl, s, pos, n) == 0 ? 1 : -1;
}

/* ---- dispatching (process 0 reads, everyone gets a slice) --------------------------------------- */

/* Process 0: reads the next global batch (up to total_bs samples) into buffer b. Returns the
 * sample count (0 at the end; a short batch counts as the end with drop_last), -1 on error. */
static int64_t dispatch_read(acc_dataloader *dl, int b) {
  const acc_dataset *ds = dl->ds;
  int64_t n = 0;
  while (n < dl->total_bs) {
    uint8_t *rec = dl->g_rec[b] + (size_t)n * ds->record_bytes;
    void *ptrs[ACC_DATA_MAX_FIELDS];
    for (int f = 0; f < ds->num_fields; f++) ptrs[f] = rec + ds->record_offset[f];
    if (!dl->iterable) {
      if (dl->src_pos >= ds->length) break;
      int64_t ix = dl->order[dl->src_pos++];
      int rc = ds->fetch(ix, ptrs, ds->payload);
      if (rc != 0)
        return perror_set(
            dl, ACC_ERR_INVALID_ARGUMENT,
            "dataloader: the dataset fetch callback returned %d for sample index %lld "
            "(epoch %lld)",
            rc, (long long)ix, (long long)dl->p_epoch);
      dl->g_idx[b][n++] = ix;
    } else {
      if (dl->p_ended) break;
      int rc = ds->next(ptrs, ds->payload);
      if (rc < 0)
        return perror_set(
            dl, ACC_ERR_INVALID_ARGUMENT,
            "dataloader: the dataset next callback returned %d at sample %lld of epoch %lld", rc,
            (long long)dl->stream_pos, (long long)dl->p_epoch);
      if (rc == 0) {
        dl->p_ended = 1;
        break;
      }
      dl->g_idx[b][n++] = dl->stream_pos++;
    }
  }
  if (n < dl->total_bs && dl->o.drop_last) return 0;
  return n;
}

static int bcast(acc_dataloader *dl, void *buf, size_t bytes, const char *what) {
  if (dl->np == 1 || bytes == 0) return 0;
  acc_result rc = dl->o.broadcast(buf, bytes, dl->o.broadcast_payload);
  if (rc != ACC_OK)
    return perror_set(dl, rc,
                      "dataloader (dispatch_batches): broadcasting %s of batch %lld of "
                      "epoch %lld failed: %s",
                      what, (long long)dl->p_batches, (long long)dl->p_epoch, acc_last_error());
  return 0;
}

/* One global batch: process 0 reads (one ahead, so the last is known) and broadcasts it; every
 * process keeps [p*b, (p+1)*b) with b = count / num_processes. On the last batch, unless
 * drop_last, a count not divisible by num_processes is completed with the first num_processes
 * samples of the epoch's first global batch and b grows by one. */
static int produce_dispatch(acc_dataloader *dl, slot *s) {
  const acc_dataset *ds = dl->ds;
  const int p = dl->o.shard.process_index, np = dl->np;
  int64_t hdr[3] = {0, 0, 0}; /* count, is_last, process 0 failed */
  if (p == 0) {
    int64_t cur;
    if (!dl->g_started) {
      if (dl->iterable && ds->reset) {
        int rc = ds->reset(dl->p_epoch, ds->payload);
        if (rc != 0)
          perror_set(dl, ACC_ERR_INVALID_ARGUMENT,
                     "dataloader: the dataset reset callback returned %d for epoch %lld", rc,
                     (long long)dl->p_epoch);
        else
          dl->g_count[dl->g_cur] = dispatch_read(dl, dl->g_cur);
        if (rc != 0) dl->g_count[dl->g_cur] = -1;
      } else {
        dl->g_count[dl->g_cur] = dispatch_read(dl, dl->g_cur);
      }
      dl->g_started = 1;
    } else {
      dl->g_cur ^= 1; /* the batch read ahead last time */
    }
    cur = dl->g_count[dl->g_cur];
    if (cur > 0) {
      int64_t ahead = dispatch_read(dl, dl->g_cur ^ 1);
      dl->g_count[dl->g_cur ^ 1] = ahead;
      if (ahead < 0) cur = -1;
      hdr[1] = ahead == 0;
    }
    hdr[0] = cur < 0 ? 0 : cur;
    hdr[2] = cur < 0;
  }
  if (bcast(dl, hdr, sizeof hdr, "the header") != 0) return -1;
  if (hdr[2]) {
    if (p == 0) return -1; /* perr names the cause */
    return perror_set(dl, ACC_ERR_REMOTE,
                      "dataloader (dispatch_batches): process 0 could not "
                      "read batch %lld of epoch %lld (its error names the cause)",
                      (long long)dl->p_batches, (long long)dl->p_epoch);
  }
  const int64_t count = hdr[0];
  if (count == 0) return 0;
  if (count > dl->total_bs)
    return perror_set(dl, ACC_ERR_INTERNAL,
                      "dataloader (dispatch_batches): process 0 sent %lld "
                      "samples, more than the global batch of %lld",
                      (long long)count, (long long)dl->total_bs);
  const int g = dl->g_cur;
  if (bcast(dl, dl->g_rec[g], (size_t)count * ds->record_bytes, "the samples") != 0 ||
      bcast(dl, dl->g_idx[g], (size_t)count * sizeof(int64_t), "the sample positions") != 0)
    return -1;
  if (dl->p_batches == 0 && !dl->o.drop_last) {
    dl->first_count = count < np ? count : np;
    memcpy(dl->first_rec, dl->g_rec[g], (size_t)dl->first_count * ds->record_bytes);
    memcpy(dl->first_idx, dl->g_idx[g], (size_t)dl->first_count * sizeof(int64_t));
  }
  int64_t b = count / np;
  int64_t avail = count;
  if (hdr[1] && !dl->o.drop_last && count % np != 0) {
    b++;
    avail = count + dl->first_count;
  }
  int64_t lo = p * b, hi = (p + 1) * b;
  if (hi > avail) hi = avail;
  if (lo > hi) lo = hi;
  const int64_t n = hi - lo;
  s->size = n;
  s->index = dl->p_batches++;
  s->observed = count;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = lo + i;
    const uint8_t *rec = j < count ? dl->g_rec[g] + (size_t)j * ds->record_bytes
                                   : dl->first_rec + (size_t)(j - count) * ds->record_bytes;
    s->indices[i] = j < count ? dl->g_idx[g][j] : dl->first_idx[j - count];
    for (int f = 0; f < ds->num_fields; f++)
      dl->sample_ptrs[i * ds->num_fields + f] = rec + ds->record_offset[f];
  }
  return collate_into(dl, s, n) == 0 ? 1 : -1;
}

/* Produces the next yielded batch of the epoch into s: 1 got one, 0 end, -1 error (perr). */
static int produce(acc_dataloader *dl, slot *s) {
  if (dl->dispatch) { /* skipped batches are still read and broadcast (as Accelerate) */
    for (;;) {
      int r = produce_dispatch(dl, s);
      if (r != 1 || s->index >= dl->p_skip) return r;
    }
  }
  if (!dl->iterable) return produce_map(dl, s);
  for (;;) { /* iterable: skipped batches are produced but not yielded (as Accelerate) */
    int r = produce_iter_once(dl, s);
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

/* ---- consumer ------------------------------------------------------------------------------ */

/* Device placement: queues slot si's host-to-device copy on the copy stream, after the compute
 * stream has finished with the slot's previous batch. */
static acc_result place_slot(acc_dataloader *dl, int si) {
  slot *s = &dl->slots[si];
  acc__device *d = dl->dev->dev;
  if (s->used_pending) {
    ACC_CHECK(acc__dstream_wait(d, dl->cstream, s->used));
    s->used_pending = 0;
  }
  for (int f = 0; f < dl->ds->num_fields; f++)
    if (s->bytes[f])
      ACC_CHECK(acc__device_copy(d, s->dfields[f], s->fields[f], s->bytes[f], ACC__COPY_H2D,
                                 dl->cstream));
  ACC_CHECK(acc__devent_record(d, s->copied, dl->cstream));
  s->copy_pending = 1;
  return ACC_OK;
}

/* Device placement: the program is done with slot si (it called next again or the epoch
 * stopped): mark the point on the compute stream after its work, and wait (host) until the
 * slot's copy has read the host buffers, which the producer may now overwrite. */
static acc_result unplace_slot(acc_dataloader *dl, int si) {
  slot *s = &dl->slots[si];
  acc__device *d = dl->dev->dev;
  acc_result rc = acc__devent_record(d, s->used, dl->dev->stream);
  if (rc == ACC_OK) s->used_pending = 1;
  if (s->copy_pending) {
    acc_result r2 = acc__devent_sync(d, s->copied);
    if (r2 != ACC_OK) { /* the copy may still read the buffer: wait for the whole stream */
      (void)acc__dstream_sync(d, dl->cstream);
      if (rc == ACC_OK) rc = r2;
    }
    s->copy_pending = 0;
  }
  return rc;
}

static void release_slot(acc_dataloader *dl, int si) {
  if (si < 0) return;
  if (dl->dev) (void)unplace_slot(dl, si); /* an error here resurfaces on the next device call */
  if (dl->threaded) pthread_mutex_lock(&dl->mu);
  dl->free_stack[dl->nfree++] = si;
  if (dl->threaded) {
    pthread_cond_signal(&dl->cv_prod);
    pthread_mutex_unlock(&dl->mu);
  }
}

/* Takes the next produced slot: 1 (in *si), 0 end of epoch, -1 error (perr). */
static int take(acc_dataloader *dl, int *si) {
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
static void stop_epoch(acc_dataloader *dl) {
  if (dl->dev) { /* the batch in use and the one copied ahead */
    if (dl->cur_slot >= 0) (void)unplace_slot(dl, dl->cur_slot);
    if (dl->ahead_slot >= 0) (void)unplace_slot(dl, dl->ahead_slot);
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

static acc_result begin_epoch(acc_dataloader *dl) {
  const acc_dataset *ds = dl->ds;
  dl->end_of_dataloader = 0;
  dl->remainder = -1;
  if (!dl->o.drop_last && ds->length >= 0 && !dl->dispatch && !dl->batched)
    dl->remainder = ds->length % dl->total_bs;
  dl->p_epoch = dl->epoch;
  dl->p_skip = dl->skip_next;
  dl->cur_skip = dl->skip_next;
  dl->yielded = dl->skip_next;
  dl->skip_next = 0;
  if (dl->dispatch) {
    if (!dl->iterable)
      ACC_CHECK(acc_sampler_order(dl->order, ds->length, dl->o.shuffle, dl->o.seed, dl->epoch));
    dl->src_pos = dl->stream_pos = dl->p_batches = 0;
    dl->p_ended = 0;
    dl->g_started = 0;
    dl->g_cur = 0;
    dl->first_count = 0;
  } else if (dl->batched) {
    acc_batch_shard_destroy(dl->plan);
    dl->plan = NULL;
    const int64_t *pidx = dl->bl_idx, *pcounts = dl->bl_counts;
    if (dl->o.shuffle) { /* the batches in a seeded order; each batch stays whole */
      ACC_CHECK(acc_sampler_order(dl->bl_perm, dl->nb, 1, dl->o.seed, dl->epoch));
      int64_t *off = dl->bl_pcounts; /* reused below: first the start of every batch */
      off[0] = 0;
      for (int64_t k = 0; k + 1 < dl->nb; k++) off[k + 1] = off[k] + dl->bl_counts[k];
      int64_t fill = 0;
      for (int64_t k = 0; k < dl->nb; k++) {
        int64_t b = dl->bl_perm[k];
        memcpy(dl->bl_pidx + fill, dl->bl_idx + off[b], (size_t)dl->bl_counts[b] * sizeof(int64_t));
        fill += dl->bl_counts[b];
      }
      for (int64_t k = 0; k < dl->nb; k++) dl->bl_pcounts[k] = dl->bl_counts[dl->bl_perm[k]];
      pidx = dl->bl_pidx;
      pcounts = dl->bl_pcounts;
    }
    acc_shard_config cfg = dl->o.shard;
    cfg.split_batches = dl->split;
    ACC_CHECK(acc_batch_shard_create_from_batches(&dl->plan, pidx, pcounts, dl->nb,
                                                  dl->o.batch_size, dl->o.drop_last, &cfg));
    if (!dl->o.drop_last) dl->remainder = acc__batch_shard_last_round_real(dl->plan);
    dl->p_cursor = dl->p_skip;
  } else if (!dl->iterable) {
    acc_batch_shard_destroy(dl->plan);
    dl->plan = NULL;
    ACC_CHECK(acc_sampler_order(dl->order, ds->length, dl->o.shuffle, dl->o.seed, dl->epoch));
    acc_shard_config cfg = dl->o.shard;
    cfg.split_batches = dl->split;
    ACC_CHECK(acc_batch_shard_create(&dl->plan, dl->order, ds->length, dl->o.batch_size,
                                     dl->o.drop_last, &cfg));
    dl->p_cursor = dl->p_skip;
  } else {
    const int64_t *dummy;
    int64_t n;
    acc_iterable_shard_finish(dl->ishard, &dummy, &n); /* reset a shard abandoned mid-epoch */
    dl->stream_pos = dl->cur_start = dl->p_batches = 0;
    dl->p_need_reset = 1;
    dl->p_ended = dl->p_finished = 0;
  }
  dl->in_epoch = 1;
  if (dl->threaded) {
    pthread_mutex_lock(&dl->mu);
    dl->active = 1;
    pthread_cond_signal(&dl->cv_prod);
    pthread_mutex_unlock(&dl->mu);
  }
  return ACC_OK;
}

static acc_result producer_error(acc_dataloader *dl) {
  dl->sticky_rc = dl->perr_rc ? dl->perr_rc : ACC_ERR_INTERNAL;
  snprintf(dl->sticky_msg, sizeof dl->sticky_msg, "%s", dl->perr);
  return acc__error(dl->sticky_rc, "%s", dl->sticky_msg);
}

/* A copy or an event failed on the device: the batch is not handed out and the loader stops
 * like after a producer error (the message says how to restart). */
static acc_result device_error(acc_dataloader *dl, int si, acc_result rc) {
  dl->sticky_rc = rc;
  snprintf(dl->sticky_msg, sizeof dl->sticky_msg,
           "dataloader: placing batch %lld of epoch %lld on %s failed: %s",
           (long long)dl->slots[si].index, (long long)dl->epoch, acc__device_name(dl->dev->dev),
           acc_last_error());
  release_slot(dl, si);
  return acc__error(rc, "%s", dl->sticky_msg);
}

acc_result acc_dataloader_next(acc_dataloader *dl, const acc_batch **out) {
  ACC_CHECK(check_dl(dl, "acc_dataloader_next"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_next: out is NULL");
  *out = NULL;
  if (dl->dead)
    return acc__error(ACC_ERR_NOMEM, "acc_dataloader_next: the loader lost its buffers when its "
                      "accelerator was destroyed (out of memory); destroy it");
  if (dl->sticky_rc != ACC_OK)
    return acc__error(dl->sticky_rc, "%s (call acc_dataloader_set_epoch or _state_set to restart)",
                      dl->sticky_msg);
  if (!dl->in_epoch) ACC_CHECK(begin_epoch(dl));
  release_slot(dl, dl->cur_slot);
  dl->cur_slot = -1;
  int si = dl->ahead_slot;
  dl->ahead_slot = -1;
  if (si < 0) {
    int r = take(dl, &si);
    if (r < 0) return producer_error(dl);
    if (r == 0) { /* end of the epoch */
      stop_epoch(dl);
      dl->epoch++;
      dl->yielded = 0;
      return ACC_OK;
    }
    if (dl->dev) { /* the first batch of the epoch: nothing was copied ahead */
      acc_result prc = place_slot(dl, si);
      if (prc != ACC_OK) return device_error(dl, si, prc);
    }
  }
  int ahead;
  int r = take(dl, &ahead);
  if (r < 0) {
    release_slot(dl, si);
    return producer_error(dl);
  }
  if (r == 1) dl->ahead_slot = ahead;
  if (dl->dev) {
    /* batch k+1 is copied on the copy stream while the program uses batch k; the compute stream
     * waits for batch k's copy (an event, not the host) */
    acc_result prc = r == 1 ? place_slot(dl, ahead) : ACC_OK;
    if (prc == ACC_OK) prc = acc__dstream_wait(dl->dev->dev, dl->dev->stream, dl->slots[si].copied);
    if (prc != ACC_OK) return device_error(dl, si, prc);
  }
  dl->end_of_dataloader = (r == 0);
  dl->cur_slot = si;
  slot *s = &dl->slots[si];
  dl->batch.size = s->size;
  dl->batch.num_fields = dl->ds->num_fields;
  dl->batch.fields = s->fields;
  dl->batch.field_bytes = s->bytes;
  dl->batch.indices = s->indices;
  dl->batch.index = s->index;
  dl->batch.epoch = dl->epoch;
  dl->batch.end_of_dataloader = dl->end_of_dataloader;
  dl->batch.device_fields = dl->dev ? s->dfields : NULL;
  /* The dispatcher's remainder is the size of the last global batch, known at its end. */
  if (dl->dispatch && dl->end_of_dataloader) dl->remainder = s->observed;
  dl->yielded = s->index + 1;
  *out = &dl->batch;
  return ACC_OK;
}

/* ---- create / destroy / accessors ---------------------------------------------------------- */

int64_t acc_dataloader_total_batch_size(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? dl->total_bs : 0;
}

acc_result acc_dataloader_create(acc_dataloader **out, acc_dataset *ds,
                                 const acc_dataloader_options *opts) {
  return acc__dataloader_create_on(out, ds, opts, NULL);
}

/* Device placement: the copy stream, and per slot two events and device buffers. */
static acc_result place_create(acc_dataloader *dl) {
  acc__device *d = dl->dev->dev;
  ACC_CHECK(acc__dstream_create(d, &dl->cstream));
  for (int i = 0; i < dl->nslots; i++) {
    slot *s = &dl->slots[i];
    ACC_CHECK(acc__devent_create(d, &s->copied));
    ACC_CHECK(acc__devent_create(d, &s->used));
    for (int f = 0; f < dl->ds->num_fields; f++)
      ACC_CHECK(acc__device_alloc(d, dl->capacity[f] ? dl->capacity[f] : 1, &s->dfields[f]));
  }
  return ACC_OK;
}

/* Frees the device side (after both streams are done with it). */
static void place_destroy(acc_dataloader *dl) {
  acc__device *d = dl->dev->dev;
  if (dl->cstream) (void)acc__dstream_sync(d, dl->cstream);
  (void)acc__dstream_sync(d, dl->dev->stream);
  for (int i = 0; dl->slots && i < dl->nslots; i++) {
    slot *s = &dl->slots[i];
    for (int f = 0; f < ACC_DATA_MAX_FIELDS; f++) {
      (void)acc__device_free(d, s->dfields[f]);
      s->dfields[f] = NULL;
    }
    (void)acc__devent_destroy(d, s->copied);
    (void)acc__devent_destroy(d, s->used);
    s->copied = s->used = NULL;
    s->copy_pending = s->used_pending = 0;
  }
  if (dl->cstream) (void)acc__dstream_destroy(d, dl->cstream);
  dl->cstream = NULL;
}

/* The accelerator is going away before the loader: its device memory is freed now, the host
 * staging buffers (page-locked ones belong to the device) are replaced by ordinary ones, and the
 * loader goes on from the same position with host batches only. */
static void detach_device(acc_dataloader *dl) {
  const int was = dl->in_epoch;
  const int64_t pos = dl->yielded;
  stop_epoch(dl);
  if (was) {
    dl->skip_next = pos;
    dl->yielded = pos;
  }
  place_destroy(dl);
  for (int i = 0; dl->host_dev && dl->slots && i < dl->nslots; i++)
    for (int f = 0; f < dl->ds->num_fields; f++) {
      slot *s = &dl->slots[i];
      void *n = acc__malloc(dl->capacity[f] ? dl->capacity[f] : 1);
      if (n) memset(n, 0, dl->capacity[f]);
      else dl->dead = 1;
      acc__device_host_free(dl->host_dev, s->fields[f]);
      s->fields[f] = n;
    }
  dl->host_dev = NULL;
  dl->dev = NULL;
}

acc_result acc__dataloader_create_on(acc_dataloader **out, acc_dataset *ds,
                                     const acc_dataloader_options *opts, acc__devctx *dev) {
  static const char fn[] = "acc_dataloader_create";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  ACC_CHECK(acc__check_handle(ds, ACC__HANDLE_DATASET, fn));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_dataloader_options, ACC_DATALOADER_OPTIONS_VERSION, fn);
  o.size = sizeof o;
  const int batched = o.batch_counts != NULL || o.batch_indices != NULL || o.num_batches != 0;
  if (o.batch_size < (batched ? 0 : 1))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size is %lld, expected >= %d", fn,
                      (long long)o.batch_size, batched ? 0 : 1);
  const int np = o.shard.num_processes;
  if (np < 1 || o.shard.process_index < 0 || o.shard.process_index >= np)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: process_index %d / num_processes %d: expected 0 <= index < num_processes",
                      fn, o.shard.process_index, np);
  if (o.shard.split_batches && np > 1 && o.batch_size % np != 0 && !batched)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "To use a `DataLoader` in `split_batches` mode, the batch size (%lld) needs "
                      "to be a round multiple of the number of processes (%d).",
                      (long long)o.batch_size, np);
  if (o.batch_size > ACC_DATA_MAX_GLOBAL_BATCH / np)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size %lld x num_processes %d is too large",
                      fn, (long long)o.batch_size, np);
  if (o.prefetch < 0 || o.prefetch > 64)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: prefetch is %d, expected 0..64", fn, o.prefetch);
  if (o.collate && !o.collate_capacity)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: a custom collate needs collate_capacity (bytes per batch field)", fn);
  if (ds->fetch == NULL && o.shuffle)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: shuffle needs a map-style dataset; shuffle an iterable dataset in its "
                      "reset callback (it receives the epoch)", fn);
  int64_t max_count = 0;
  if (batched) {
    if (ds->fetch == NULL)
      return acc__error(
          ACC_ERR_INVALID_ARGUMENT,
          "%s: a list of batches (batch_indices/batch_counts) needs a map-style dataset", fn);
    if (o.dispatch_batches)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: a list of batches cannot be combined with dispatch_batches", fn);
    if (o.num_batches < 0 || (o.num_batches > 0 && (!o.batch_indices || !o.batch_counts)))
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: a list of batches needs batch_indices, batch_counts and num_batches "
                        ">= 0 (num_batches is %lld)",
                        fn, (long long)o.num_batches);
    /* Validates the list (counts, split mode) for every process of the configuration. */
    acc_batch_shard *probe = NULL;
    acc_shard_config cfg = o.shard;
    ACC_CHECK(acc_batch_shard_create_from_batches(&probe, o.batch_indices, o.batch_counts,
                                                  o.num_batches, o.batch_size, o.drop_last, &cfg));
    acc_batch_shard_destroy(probe);
    int64_t pos = 0;
    for (int64_t k = 0; k < o.num_batches; k++) {
      if (o.batch_counts[k] > max_count) max_count = o.batch_counts[k];
      for (int64_t i = 0; i < o.batch_counts[k]; i++, pos++)
        if (o.batch_indices[pos] < 0 || o.batch_indices[pos] >= ds->length)
          return acc__error(ACC_ERR_INVALID_ARGUMENT,
                            "%s: batch %lld holds sample index %lld, outside the dataset's 0..%lld",
                            fn, (long long)k, (long long)o.batch_indices[pos],
                            (long long)ds->length - 1);
    }
  }
  if (o.dispatch_batches && np > 1 && !o.broadcast)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: dispatch_batches needs a broadcast callback over the processes "
                      "(acc_accelerator_prepare_dataloader supplies it)",
                      fn);

  acc_dataloader *dl = acc__calloc(1, sizeof *dl);
  if (!dl) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  dl->magic = ACC__MAGIC_DATALOADER;
  dl->ds = ds;
  dl->o = o;
  dl->o.collate_capacity = NULL; /* borrowed pointer: copied into capacity[] */
  dl->np = np;
  dl->split = o.shard.split_batches && np > 1;
  dl->per_bs = dl->split ? o.batch_size / np : o.batch_size;
  dl->total_bs = dl->split ? o.batch_size : o.batch_size * np;
  dl->iterable = ds->fetch == NULL;
  dl->batched = batched;
  dl->dispatch = o.dispatch_batches != 0;
  dl->o.batch_indices = dl->o.batch_counts = NULL; /* borrowed pointers: copied below */
  dl->o.num_batches = 0;
  if (batched) {
    dl->nb = o.num_batches;
    if (!dl->split) dl->per_bs = max_count > 0 ? max_count : 1;
    if (dl->split && dl->per_bs < 1) dl->per_bs = 1;
    if (dl->total_bs < 1) dl->total_bs = 1;
  }
  dl->cur_slot = dl->ahead_slot = -1;
  dl->remainder = -1;
  if (dev && acc__devctx_offhost(dev) && o.device_placement) {
    dl->dev = dev;
    dl->host_dev = dev->dev;
  }
  const int nf = ds->num_fields;
  for (int f = 0; f < nf; f++) {
    size_t cap;
    if (o.collate) {
      cap = o.collate_capacity[f];
    } else if (__builtin_mul_overflow((size_t)dl->per_bs, ds->sample_bytes[f], &cap)) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size %lld x %zu bytes of field %d overflows",
                      fn, (long long)o.batch_size, ds->sample_bytes[f], f);
      goto fail;
    }
    dl->capacity[f] = cap;
  }

  dl->nslots = 2 + o.prefetch;
  dl->slots = acc__calloc((size_t)dl->nslots, sizeof *dl->slots);
  dl->ready_q = acc__calloc((size_t)dl->nslots, sizeof(int));
  dl->free_stack = acc__calloc((size_t)dl->nslots, sizeof(int));
  dl->sample_ptrs = acc__calloc((size_t)dl->per_bs * (size_t)nf, sizeof(void *));
  if (!dl->slots || !dl->ready_q || !dl->free_stack || !dl->sample_ptrs) {
    rc = ACC_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < dl->nslots; i++) {
    slot *s = &dl->slots[i];
    s->indices = acc__calloc((size_t)dl->per_bs, sizeof(int64_t));
    if (!s->indices) { rc = ACC_ERR_NOMEM; goto fail; }
    for (int f = 0; f < nf; f++) {
      size_t cap = dl->capacity[f] ? dl->capacity[f] : 1;
      if (dl->host_dev) {
        ACC_CHECK_GOTO(acc__device_host_alloc(dl->host_dev, cap, &s->fields[f]), rc, fail);
      } else {
        s->fields[f] = acc__malloc(cap);
      }
      if (!s->fields[f]) { rc = ACC_ERR_NOMEM; goto fail; }
      memset(s->fields[f], 0, dl->capacity[f]); /* touch every page once, here */
    }
    dl->free_stack[dl->nfree++] = i;
  }
  if (dl->dev) ACC_CHECK_GOTO(place_create(dl), rc, fail);
  if (batched) {
    int64_t total = 0;
    for (int64_t k = 0; k < dl->nb; k++) total += o.batch_counts[k];
    size_t nbs = (size_t)(dl->nb > 0 ? dl->nb : 1), tot = (size_t)(total > 0 ? total : 1);
    dl->bl_counts = acc__malloc(nbs * sizeof(int64_t));
    dl->bl_pcounts = acc__malloc(nbs * sizeof(int64_t));
    dl->bl_perm = acc__malloc(nbs * sizeof(int64_t));
    dl->bl_idx = acc__malloc(tot * sizeof(int64_t));
    dl->bl_pidx = acc__malloc(tot * sizeof(int64_t));
    if (!dl->bl_counts || !dl->bl_pcounts || !dl->bl_perm || !dl->bl_idx || !dl->bl_pidx) {
      rc = ACC_ERR_NOMEM;
      goto fail;
    }
    if (dl->nb) memcpy(dl->bl_counts, o.batch_counts, (size_t)dl->nb * sizeof(int64_t));
    if (total) memcpy(dl->bl_idx, o.batch_indices, (size_t)total * sizeof(int64_t));
    if (o.collate) {
      dl->stage = acc__calloc((size_t)dl->per_bs, ds->record_bytes);
      if (!dl->stage) {
        rc = ACC_ERR_NOMEM;
        goto fail;
      }
    }
  } else if (dl->dispatch) {
    if (!dl->iterable) {
      dl->order = acc__malloc((size_t)(ds->length > 0 ? ds->length : 1) * sizeof(int64_t));
      if (!dl->order) {
        rc = ACC_ERR_NOMEM;
        goto fail;
      }
    }
    for (int b = 0; b < 2; b++) {
      dl->g_rec[b] = acc__calloc((size_t)dl->total_bs, ds->record_bytes);
      dl->g_idx[b] = acc__calloc((size_t)dl->total_bs, sizeof(int64_t));
      if (!dl->g_rec[b] || !dl->g_idx[b]) {
        rc = ACC_ERR_NOMEM;
        goto fail;
      }
    }
    dl->first_rec = acc__calloc((size_t)np, ds->record_bytes);
    dl->first_idx = acc__calloc((size_t)np, sizeof(int64_t));
    if (!dl->first_rec || !dl->first_idx) {
      rc = ACC_ERR_NOMEM;
      goto fail;
    }
  } else if (!dl->iterable) {
    dl->order = acc__malloc((size_t)(ds->length > 0 ? ds->length : 1) * sizeof(int64_t));
    if (!dl->order) { rc = ACC_ERR_NOMEM; goto fail; }
    if (o.collate) {
      dl->stage = acc__calloc((size_t)dl->per_bs, ds->record_bytes);
      if (!dl->stage) { rc = ACC_ERR_NOMEM; goto fail; }
    }
  } else {
    acc_shard_config cfg = o.shard;
    cfg.split_batches = dl->split;
    ACC_CHECK_GOTO(acc_iterable_shard_create(&dl->ishard, o.batch_size, o.drop_last, &cfg), rc, fail);
    dl->real_bs = dl->total_bs;
    dl->rec_cur = acc__calloc((size_t)dl->real_bs, ds->record_bytes);
    dl->rec_first = acc__calloc((size_t)dl->real_bs, ds->record_bytes);
    dl->order = acc__calloc((size_t)dl->per_bs, sizeof(int64_t));
    if (!dl->rec_cur || !dl->rec_first || !dl->order) { rc = ACC_ERR_NOMEM; goto fail; }
  }
  if (o.prefetch > 0 && !dl->dispatch) { /* dispatching calls collectives: caller's thread only */
    pthread_mutex_init(&dl->mu, NULL);
    pthread_cond_init(&dl->cv_prod, NULL);
    pthread_cond_init(&dl->cv_cons, NULL);
    int e = pthread_create(&dl->thread, NULL, producer_main, dl);
    if (e != 0) {
      pthread_mutex_destroy(&dl->mu);
      pthread_cond_destroy(&dl->cv_prod);
      pthread_cond_destroy(&dl->cv_cons);
      rc = acc__error(ACC_ERR_SYSTEM, "%s: could not start the loader thread (error %d); use prefetch 0", fn, e);
      goto fail;
    }
    dl->threaded = 1;
  }
  *out = dl;
  return ACC_OK;
fail:
  acc_dataloader_destroy(dl);
  return rc;
}

void acc__dataloader_set_owner(acc_dataloader *dl, void (*forget)(void *owner, acc_dataloader *dl), void *owner) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return;
  dl->owner_forget = forget;
  dl->owner = owner;
  if (!forget && dl->dev) detach_device(dl);
}

void acc_dataloader_destroy(acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return;
  if (dl->owner_forget) dl->owner_forget(dl->owner, dl);
  if (dl->threaded) {
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
  if (dl->dev) place_destroy(dl);
  if (dl->slots)
    for (int i = 0; i < dl->nslots; i++) {
      acc__free(dl->slots[i].indices);
      for (int f = 0; f < ACC_DATA_MAX_FIELDS; f++) {
        if (dl->host_dev) acc__device_host_free(dl->host_dev, dl->slots[i].fields[f]);
        else acc__free(dl->slots[i].fields[f]);
      }
    }
  acc__free(dl->slots);
  acc__free(dl->ready_q);
  acc__free(dl->free_stack);
  acc__free((void *)dl->sample_ptrs);
  acc__free(dl->order);
  acc__free(dl->stage);
  acc__free(dl->rec_cur);
  acc__free(dl->rec_first);
  acc__free(dl->bl_idx);
  acc__free(dl->bl_counts);
  acc__free(dl->bl_perm);
  acc__free(dl->bl_pidx);
  acc__free(dl->bl_pcounts);
  for (int b = 0; b < 2; b++) {
    acc__free(dl->g_rec[b]);
    acc__free(dl->g_idx[b]);
  }
  acc__free(dl->first_rec);
  acc__free(dl->first_idx);
  acc_batch_shard_destroy(dl->plan);
  acc_iterable_shard_destroy(dl->ishard);
  dl->magic = ACC__MAGIC_DEAD;
  acc__free(dl);
}

/* Batches per epoch, before any skipping. */
static int64_t full_len(const acc_dataloader *dl) {
  const int64_t N = dl->ds->length;
  const int drop = dl->o.drop_last;
  const int np = dl->np, p = dl->o.shard.process_index;
  if (dl->batched) { /* BatchSamplerShard.__len__ over the list's batches */
    const int64_t L = dl->nb;
    if (np == 1 || dl->split) return L;
    if (L % np == 0 || drop) return L / np;
    return dl->o.shard.even_batches || p < L % np ? L / np + 1 : L / np;
  }
  if (N < 0) return -1;
  if (dl->dispatch) { /* DataLoaderDispatcher: the base loader's length (split), / processes */
    if (dl->split) return acc_batch_sampler_len(N, dl->o.batch_size, drop);
    const int64_t Lb = acc_batch_sampler_len(N, dl->o.batch_size, drop);
    return drop ? Lb / np : (Lb + np - 1) / np;
  }
  /* Iterable: one batch per real batch (all processes together), padded unless drop_last. */
  if (dl->iterable) return acc_batch_sampler_len(N, dl->total_bs, drop);
  /* Map-style: BatchSamplerShard.__len__ over the BatchSampler's L batches. */
  const int64_t L = acc_batch_sampler_len(N, dl->o.batch_size, drop);
  if (np == 1 || dl->split) return L;
  if (L % np == 0 || drop) return L / np;
  return dl->o.shard.even_batches || p < L % np ? L / np + 1 : L / np;
}

int64_t acc__dataloader_round_units(const acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return 1;
  return (dl->split ? 1 : dl->np) * (dl->batched ? 1 : dl->o.batch_size);
}

int64_t acc__dataloader_full_len(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? full_len(dl) : -1;
}

int64_t acc_dataloader_len(const acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return -1;
  int64_t len = full_len(dl);
  if (len < 0) return -1;
  /* The epoch in progress (or about to start) skips its first batches: its length is what is
   * left, as the loader skip_first_batches builds in Accelerate. */
  int64_t skip = dl->in_epoch ? dl->cur_skip : dl->skip_next;
  return len > skip ? len - skip : 0;
}

int acc_dataloader_end_of_dataloader(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? dl->end_of_dataloader : 0;
}

int64_t acc_dataloader_remainder(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? dl->remainder : -1;
}

int64_t acc_dataloader_epoch(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? dl->epoch : 0;
}

acc_result acc_dataloader_set_epoch(acc_dataloader *dl, int64_t epoch) {
  ACC_CHECK(check_dl(dl, "acc_dataloader_set_epoch"));
  if (epoch < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_set_epoch: epoch is %lld, expected >= 0",
                      (long long)epoch);
  stop_epoch(dl);
  dl->epoch = epoch;
  dl->yielded = dl->skip_next;
  dl->sticky_rc = ACC_OK;
  return ACC_OK;
}

acc_result acc_dataloader_skip_first_batches(acc_dataloader *dl, int64_t n) {
  ACC_CHECK(check_dl(dl, "acc_dataloader_skip_first_batches"));
  if (n < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_dataloader_skip_first_batches: n is %lld, expected >= 0", (long long)n);
  if (dl->in_epoch)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_dataloader_skip_first_batches: epoch %lld is in progress (%lld batches "
                      "handed out); call it before the first acc_dataloader_next of an epoch",
                      (long long)dl->epoch, (long long)dl->yielded);
  dl->skip_next = n;
  dl->yielded = n;
  return ACC_OK;
}

acc_result acc_dataloader_state_get(const acc_dataloader *dl, acc_dataloader_state *out) {
  ACC_CHECK(check_dl(dl, "acc_dataloader_state_get"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_state_get: out is NULL");
  out->seed = dl->o.seed;
  out->epoch = dl->epoch;
  out->batches = dl->yielded;
  return ACC_OK;
}

acc_result acc_dataloader_state_set(acc_dataloader *dl, const acc_dataloader_state *st) {
  ACC_CHECK(check_dl(dl, "acc_dataloader_state_set"));
  if (!st) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_state_set: state is NULL");
  if (st->epoch < 0 || st->batches < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_dataloader_state_set: epoch %lld and batches %lld must be >= 0",
                      (long long)st->epoch, (long long)st->batches);
  stop_epoch(dl);
  dl->o.seed = st->seed;
  dl->epoch = st->epoch;
  dl->skip_next = st->batches;
  dl->yielded = st->batches;
  dl->sticky_rc = ACC_OK;
  return ACC_OK;
}

int64_t acc_dataloader_gather_keep(const acc_dataloader *dl, int64_t gathered) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER) || !dl->in_epoch || !dl->end_of_dataloader) return gathered;
  if (dl->remainder <= 0) return gathered;
  return dl->remainder < gathered ? dl->remainder : gathered;
}
