/* The dataloader: epoch plans from the seedable sampler + BatchSamplerShard (map-style) or
 * IterableDatasetShard (iterable), batches built into a ring of preallocated slots, optionally by
 * a loader thread, handed out one batch behind the producer so end_of_dataloader is known. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "data_internal.h"

typedef struct slot {
  void *fields[ACC_DATA_MAX_FIELDS];
  size_t bytes[ACC_DATA_MAX_FIELDS];
  int64_t *indices;
  int64_t size;
  int64_t index;
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

/* Produces the next yielded batch of the epoch into s: 1 got one, 0 end, -1 error (perr). */
static int produce(acc_dataloader *dl, slot *s) {
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

static void release_slot(acc_dataloader *dl, int si) {
  if (si < 0) return;
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
}

static acc_result begin_epoch(acc_dataloader *dl) {
  const acc_dataset *ds = dl->ds;
  dl->end_of_dataloader = 0;
  dl->remainder = -1;
  if (!dl->o.drop_last && ds->length >= 0) dl->remainder = ds->length % dl->total_bs;
  dl->p_epoch = dl->epoch;
  dl->p_skip = dl->skip_next;
  dl->yielded = dl->skip_next;
  dl->skip_next = 0;
  if (!dl->iterable) {
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

acc_result acc_dataloader_next(acc_dataloader *dl, const acc_batch **out) {
  ACC_CHECK(check_dl(dl, "acc_dataloader_next"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_next: out is NULL");
  *out = NULL;
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
  }
  int ahead;
  int r = take(dl, &ahead);
  if (r < 0) {
    release_slot(dl, si);
    return producer_error(dl);
  }
  if (r == 1) dl->ahead_slot = ahead;
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
  static const char fn[] = "acc_dataloader_create";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  ACC_CHECK(acc__check_handle(ds, ACC__HANDLE_DATASET, fn));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_dataloader_options, ACC_DATALOADER_OPTIONS_VERSION, fn);
  if (o.batch_size < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size is %lld, expected >= 1", fn,
                      (long long)o.batch_size);
  const int np = o.shard.num_processes;
  if (np < 1 || o.shard.process_index < 0 || o.shard.process_index >= np)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: process_index %d / num_processes %d: expected 0 <= index < num_processes",
                      fn, o.shard.process_index, np);
  if (o.shard.split_batches && np > 1 && o.batch_size % np != 0)
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
  dl->cur_slot = dl->ahead_slot = -1;
  dl->remainder = -1;
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
      s->fields[f] = acc__malloc(dl->capacity[f] ? dl->capacity[f] : 1);
      if (!s->fields[f]) { rc = ACC_ERR_NOMEM; goto fail; }
      memset(s->fields[f], 0, dl->capacity[f]); /* touch every page once, here */
    }
    dl->free_stack[dl->nfree++] = i;
  }
  if (!dl->iterable) {
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
  if (o.prefetch > 0) {
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
  if (dl->slots)
    for (int i = 0; i < dl->nslots; i++) {
      acc__free(dl->slots[i].indices);
      for (int f = 0; f < ACC_DATA_MAX_FIELDS; f++) acc__free(dl->slots[i].fields[f]);
    }
  acc__free(dl->slots);
  acc__free(dl->ready_q);
  acc__free(dl->free_stack);
  acc__free((void *)dl->sample_ptrs);
  acc__free(dl->order);
  acc__free(dl->stage);
  acc__free(dl->rec_cur);
  acc__free(dl->rec_first);
  acc_batch_shard_destroy(dl->plan);
  acc_iterable_shard_destroy(dl->ishard);
  dl->magic = ACC__MAGIC_DEAD;
  acc__free(dl);
}

int64_t acc_dataloader_len(const acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return -1;
  const int64_t N = dl->ds->length;
  const int drop = dl->o.drop_last;
  if (N < 0) return -1;
  /* Iterable: one batch per real batch (all processes together), padded unless drop_last. */
  if (dl->iterable) return acc_batch_sampler_len(N, dl->total_bs, drop);
  /* Map-style: BatchSamplerShard.__len__ over the BatchSampler's L batches. */
  const int64_t L = acc_batch_sampler_len(N, dl->o.batch_size, drop);
  const int np = dl->np, p = dl->o.shard.process_index;
  if (np == 1 || dl->split) return L;
  if (L % np == 0 || drop) return L / np;
  return dl->o.shard.even_batches || p < L % np ? L / np + 1 : L / np;
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
