/* Bucketed gradient all-reduce, optionally overlapped with the backward pass.
 *
 * Buckets are formed once, at creation, from the parameters in reverse registration order.
 * A step: the program marks parameters ready (optional); finish() reduces what is left.
 * Exactly one thread issues collectives at any time: with overlap, the background thread owns
 * the process group between the first hand-off of a step and the end of finish(). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "comm/comm.h"
#include "train/train.h"
#include "train/grad_sync.h"
#include "core/profile.h"

typedef struct bucket {
  size_t first, count; /* parameter indices [first, first+count) in reverse order: see params */
  size_t numel;
  float *inplace;      /* non-NULL: the gradients are one contiguous range starting here */
  size_t pending;      /* parameters not yet ready this step */
  int queued;          /* handed to the reducer this step */
} bucket;

struct acc__grad_sync {
  acc_state *st;
  acc_model *model;
  size_t nparams;
  size_t *order;       /* order[k] = parameter index of the k-th parameter in bucket order */
  size_t *bucket_of;   /* bucket index of each parameter (by parameter index) */
  int *ready;          /* per parameter, this step */
  bucket *buckets;
  size_t nbuckets, ninplace;
  float *staging;      /* max bucket numel, for buckets that are not contiguous */
  size_t staging_numel;
  float inv_world;
  acc__bucket_reduce_fn reduce_fn; /* NULL: all-reduce to the mean */
  acc_dtype compress;  /* ACC_F32: none; ACC_F16 / ACC_BF16: the comm hook */
  uint16_t *half;      /* largest bucket, in `compress` */
  void *reduce_ctx;
  /* overlap */
  int overlap;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t *queue;       /* bucket indices, FIFO */
  size_t q_head, q_tail, done;
  int stop, thread_started;
  acc_result thread_rc;
  char thread_err[1024];
  acc__dev_gsync *dev; /* gradients in device memory (src/train/train_sync.c) */
  size_t early;        /* buckets started by mark_ready (before finish), since creation */
};

/* h[0..m) = the 16-bit type of (the 16-bit type of g) / world, a tile at a time through float. */
static void compress(uint16_t *h, const float *g, size_t m, float world, acc_dtype dt) {
  enum { TILE = 1024 };
  float t[TILE];
  for (size_t i = 0; i < m; i += TILE) {
    size_t k = m - i < TILE ? m - i : TILE;
    acc__f32_to_half_n(h + i, g + i, k, dt);
    acc__half_to_f32_n(t, h + i, k, dt);
    for (size_t j = 0; j < k; j++) t[j] /= world;
    acc__f32_to_half_n(h + i, t, k, dt);
  }
}

/* The comm hook: cast to the 16-bit type, divide by the world size in that type, sum across the
 * processes in that type, cast back (torch's fp16/bf16_compress_hook: buffer.to(dtype).div_(world),
 * all_reduce, copy back). Gradients in memory order `src[0..n)` or, for a staged bucket, the
 * parameters of the bucket one after another. */
static acc_result reduce_compressed(acc__grad_sync *gs, bucket *b) {
  size_t n = b->numel;
  uint16_t *h = gs->half;
  float world = 1.0f / gs->inv_world;
  acc_dtype dt = gs->compress;
  size_t off = 0;
  for (size_t k = b->first; k < b->first + b->count; k++) {
    const acc_param *p = acc_model_parameter(gs->model, gs->order[k]);
    size_t m = b->inplace ? n : p->numel;
    compress(h + off, b->inplace ? b->inplace + off : p->grad, m, world, dt);
    off += m;
    if (b->inplace) break;
  }
  acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, b - gs->buckets);
  ACC_CHECK(acc_all_reduce(gs->st, h, h, n, dt, ACC_SUM));
  off = 0;
  for (size_t k = b->first; k < b->first + b->count; k++) {
    const acc_param *p = acc_model_parameter(gs->model, gs->order[k]);
    size_t m = b->inplace ? n : p->numel;
    acc__half_to_f32_n(b->inplace ? b->inplace + off : p->grad, h + off, m, dt);
    off += m;
    if (b->inplace) break;
  }
  return ACC_OK;
}

static acc_result reduce_bucket(acc__grad_sync *gs, bucket *b) {
  ACC_PROF_SCOPE_ARG(ACC_PROF_COMM, "grad_sync.bucket", b - gs->buckets);
  size_t n = b->numel;
  if (n == 0 || gs->inv_world == 1.0f) return ACC_OK; /* one process: the mean is the gradient */
  if (gs->dev) return acc__dev_gsync_bucket(gs->dev, b - gs->buckets, b->first, b->count, n, b->inplace);
  if (gs->reduce_fn) return gs->reduce_fn(gs->reduce_ctx, gs->order + b->first, b->count, n);
  if (gs->half) return reduce_compressed(gs, b);
  if (b->inplace) {
    acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, b - gs->buckets);
    return acc__all_reduce_scaled(gs->st, b->inplace, n, gs->inv_world); /* sum, then x 1/world */
  }
  float *s = gs->staging;
  size_t off = 0;
  for (size_t k = b->first; k < b->first + b->count; k++) {
    const acc_param *p = acc_model_parameter(gs->model, gs->order[k]);
    memcpy(s + off, p->grad, p->numel * sizeof(float));
    off += p->numel;
  }
  acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, b - gs->buckets);
  ACC_CHECK(acc_all_reduce(gs->st, s, s, n, ACC_F32, ACC_SUM));
  off = 0;
  for (size_t k = b->first; k < b->first + b->count; k++) {
    const acc_param *p = acc_model_parameter(gs->model, gs->order[k]);
    for (size_t i = 0; i < p->numel; i++) p->grad[i] = s[off + i] * gs->inv_world;
    off += p->numel;
  }
  return ACC_OK;
}

static void *reducer_main(void *arg) {
  acc__grad_sync *gs = arg;
  pthread_mutex_lock(&gs->mu);
  for (;;) {
    while (!gs->stop && gs->q_head == gs->q_tail) pthread_cond_wait(&gs->cv, &gs->mu);
    if (gs->stop) break;
    size_t bi = gs->queue[gs->q_head++];
    pthread_mutex_unlock(&gs->mu);
    acc_result rc = gs->thread_rc == ACC_OK ? reduce_bucket(gs, &gs->buckets[bi]) : ACC_OK;
    pthread_mutex_lock(&gs->mu);
    if (rc != ACC_OK && gs->thread_rc == ACC_OK) {
      gs->thread_rc = rc;
      snprintf(gs->thread_err, sizeof gs->thread_err, "%s", acc_last_error());
    }
    gs->done++;
    pthread_cond_broadcast(&gs->cv);
  }
  pthread_mutex_unlock(&gs->mu);
  return NULL;
}

acc_result acc__grad_sync_create(acc__grad_sync **out, acc_state *st, acc_model *m,
                                 size_t bucket_cap_bytes, int overlap) {
  if (!out || !st || !m) return acc__error(ACC_ERR_INVALID_ARGUMENT, "grad_sync: NULL argument");
  size_t np = acc_model_num_parameters(m);
  acc__grad_sync *gs = acc__calloc(1, sizeof *gs);
  if (!gs) return ACC_ERR_NOMEM;
  gs->st = st;
  gs->model = m;
  gs->nparams = np;
  gs->inv_world = 1.0f / (float)acc_state_num_processes(st);
  gs->order = acc__calloc(np, sizeof *gs->order);
  gs->bucket_of = acc__calloc(np, sizeof *gs->bucket_of);
  gs->ready = acc__calloc(np, sizeof *gs->ready);
  gs->buckets = acc__calloc(np ? np : 1, sizeof *gs->buckets);
  gs->queue = acc__calloc(np ? np : 1, sizeof *gs->queue);
  if (!gs->order || !gs->bucket_of || !gs->ready || !gs->buckets || !gs->queue) {
    acc__grad_sync_destroy(gs);
    return ACC_ERR_NOMEM;
  }
  size_t cap = bucket_cap_bytes / sizeof(float);
  if (cap == 0) cap = 1;
  size_t k = 0;
  for (size_t i = np; i-- > 0;) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->grad) continue; /* frozen parameter */
    gs->order[k] = i;
    bucket *b = gs->nbuckets ? &gs->buckets[gs->nbuckets - 1] : NULL;
    if (!b || b->numel + p->numel > cap) {
      if (b && b->numel == 0) {
        /* reuse an empty bucket */
      } else {
        b = &gs->buckets[gs->nbuckets++];
        b->first = k;
      }
    }
    b->count++;
    b->numel += p->numel;
    gs->bucket_of[i] = (size_t)(b - gs->buckets);
    k++;
  }
  /* contiguity: parameters of a bucket in bucket order are either ascending or descending
   * neighbours in memory */
  for (size_t bi = 0; bi < gs->nbuckets; bi++) {
    bucket *b = &gs->buckets[bi];
    const acc_param *first = acc_model_parameter(m, gs->order[b->first]);
    float *lo = first->grad, *hi = first->grad + first->numel;
    int contiguous = 1;
    for (size_t j = b->first + 1; j < b->first + b->count && contiguous; j++) {
      const acc_param *p = acc_model_parameter(m, gs->order[j]);
      if (p->grad == hi) hi += p->numel;
      else if (p->grad + p->numel == lo) lo = p->grad;
      else contiguous = 0;
    }
    if (contiguous) {
      b->inplace = lo;
      gs->ninplace++;
    } else if (b->numel > gs->staging_numel) {
      gs->staging_numel = b->numel;
    }
  }
  if (gs->staging_numel) {
    gs->staging = acc__calloc(gs->staging_numel, sizeof(float)); /* touched once, here */
    if (!gs->staging) {
      acc__grad_sync_destroy(gs);
      return ACC_ERR_NOMEM;
    }
  }
  gs->overlap = overlap && acc_state_num_processes(st) > 1;
  if (gs->overlap) {
    pthread_mutex_init(&gs->mu, NULL);
    pthread_cond_init(&gs->cv, NULL);
    if (pthread_create(&gs->thread, NULL, reducer_main, gs) != 0) {
      gs->overlap = 0;
      pthread_mutex_destroy(&gs->mu);
      pthread_cond_destroy(&gs->cv);
    } else {
      gs->thread_started = 1;
    }
  }
  for (size_t bi = 0; bi < gs->nbuckets; bi++) gs->buckets[bi].pending = gs->buckets[bi].count;
  *out = gs;
  return ACC_OK;
}

void acc__grad_sync_destroy(acc__grad_sync *gs) {
  if (!gs) return;
  if (gs->thread_started) {
    pthread_mutex_lock(&gs->mu);
    gs->stop = 1;
    pthread_cond_broadcast(&gs->cv);
    pthread_mutex_unlock(&gs->mu);
    pthread_join(gs->thread, NULL);
    pthread_mutex_destroy(&gs->mu);
    pthread_cond_destroy(&gs->cv);
  }
  acc__dev_gsync_free(gs->dev);
  acc__free(gs->order);
  acc__free(gs->bucket_of);
  acc__free(gs->ready);
  acc__free(gs->buckets);
  acc__free(gs->queue);
  acc__free(gs->staging);
  acc__free(gs->half);
  acc__free(gs);
}

acc_result acc__grad_sync_set_compression(acc__grad_sync *gs, acc_dtype dtype) {
  if (!gs) return acc__error(ACC_ERR_INVALID_ARGUMENT, "grad_sync_set_compression: NULL");
  if (dtype != ACC_F32 && dtype != ACC_F16 && dtype != ACC_BF16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "gradient compression to %s: only f16 and bf16",
                      acc_dtype_name(dtype));
  if (dtype != ACC_F32 && (gs->reduce_fn || gs->dev))
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "gradient compression (comm_hook) does not combine with ZeRO stage 2 or "
                      "gradients in device memory");
  acc__free(gs->half);
  gs->half = NULL;
  gs->compress = dtype;
  if (dtype == ACC_F32) return ACC_OK;
  size_t most = 1;
  for (size_t bi = 0; bi < gs->nbuckets; bi++)
    if (gs->buckets[bi].numel > most) most = gs->buckets[bi].numel;
  gs->half = acc__calloc(most, sizeof *gs->half); /* touched once, here */
  if (!gs->half) return ACC_ERR_NOMEM;
  return ACC_OK;
}

acc_result acc__grad_sync_use_device(acc__grad_sync *gs, acc__devctx *d) {
  size_t n = 0;
  for (size_t bi = 0; bi < gs->nbuckets; bi++) n += gs->buckets[bi].count;
  return acc__dev_gsync_create(&gs->dev, d, gs->st, gs->model, gs->order, n, gs->nbuckets);
}

acc_result acc__grad_sync_set_device_hook(acc__grad_sync *gs, acc__host_reduce_fn fn, void *ctx) {
  return acc__dev_gsync_set_host_reducer(gs->dev, fn, ctx);
}

void acc__grad_sync_set_reducer(acc__grad_sync *gs, acc__bucket_reduce_fn fn, void *ctx) {
  if (!gs) return;
  gs->reduce_fn = fn;
  gs->reduce_ctx = ctx;
  if (fn) { /* the reducer packs the buckets itself: no staging buffer */
    acc__free(gs->staging);
    gs->staging = NULL;
    gs->staging_numel = 0;
  }
}

size_t acc__grad_sync_staging_floats(const acc__grad_sync *gs) { return gs ? gs->staging_numel : 0; }

size_t acc__grad_sync_num_buckets(const acc__grad_sync *gs) { return gs ? gs->nbuckets : 0; }
size_t acc__grad_sync_num_inplace(const acc__grad_sync *gs) { return gs ? gs->ninplace : 0; }

int acc__grad_sync_in_flight(const acc__grad_sync *gs) {
  if (!gs) return 0;
  for (size_t i = 0; i < gs->nparams; i++)
    if (gs->ready[i]) return 1;
  return 0;
}

acc_result acc__grad_sync_mark_ready(acc__grad_sync *gs, size_t index) {
  if (!gs || index >= gs->nparams)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "grad_ready: parameter index %zu is out of range (model has %zu)",
                      index, gs ? gs->nparams : 0);
  const acc_param *p = acc_model_parameter(gs->model, index);
  if (!p->grad) return ACC_OK;
  if (gs->ready[index])
    return acc__error(ACC_ERR_INVALID_USAGE, "grad_ready: parameter '%s' was already marked ready in this step",
                      p->name);
  gs->ready[index] = 1;
  bucket *b = &gs->buckets[gs->bucket_of[index]];
  if (--b->pending > 0 || b->queued) return ACC_OK;
  b->queued = 1;
  gs->early++;
  if (!gs->overlap) return reduce_bucket(gs, b);
  pthread_mutex_lock(&gs->mu);
  gs->queue[gs->q_tail++] = gs->bucket_of[index];
  pthread_cond_broadcast(&gs->cv);
  pthread_mutex_unlock(&gs->mu);
  return ACC_OK;
}

size_t acc__grad_sync_early(const acc__grad_sync *gs) { return gs ? gs->early : 0; }

acc_result acc__grad_sync_finish(acc__grad_sync *gs) {
  if (!gs) return acc__error(ACC_ERR_INVALID_ARGUMENT, "grad_sync_finish: NULL");
  acc_result rc = ACC_OK;
  if (gs->overlap) {
    pthread_mutex_lock(&gs->mu);
    while (gs->done < gs->q_tail) pthread_cond_wait(&gs->cv, &gs->mu);
    rc = gs->thread_rc;
    if (rc != ACC_OK) acc__error(rc, "%s", gs->thread_err);
    gs->thread_rc = ACC_OK;
    gs->q_head = gs->q_tail = gs->done = 0;
    pthread_mutex_unlock(&gs->mu);
  }
  /* the rest, in bucket order so every rank reduces in the same order */
  for (size_t bi = 0; bi < gs->nbuckets && rc == ACC_OK; bi++) {
    bucket *b = &gs->buckets[bi];
    if (!b->queued) rc = reduce_bucket(gs, b);
  }
  if (rc == ACC_OK && gs->dev) rc = acc__dev_gsync_finish(gs->dev);
  for (size_t bi = 0; bi < gs->nbuckets; bi++) {
    gs->buckets[bi].queued = 0;
    gs->buckets[bi].pending = gs->buckets[bi].count;
  }
  memset(gs->ready, 0, gs->nparams * sizeof *gs->ready);
  return rc;
}
