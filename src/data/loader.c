/* The dataloader: epoch plans from the seedable sampler (or a given list of batches) +
 * BatchSamplerShard (map-style) or IterableDatasetShard (iterable), batches built into a ring of
 * preallocated slots, optionally by a loader thread, handed out one batch behind the producer so
 * end_of_dataloader is known. The dispatching mode (DataLoaderDispatcher) instead has process 0
 * read every global batch and broadcast it; each process keeps its slice.
 *
 * This file: create, destroy, acc_dataloader_next (the consumer: epoch plans, one batch behind
 * the producer), the length. The other loader files (loader_impl.h lists them): loader_state.c
 * (the position), loader_prefetch.c (the ring, the loader thread), loader_dispatch.c (the
 * dispatching mode), loader_batch.c (one batch of this process), loader_place.c (device
 * placement: batches copied to the accelerator's device one batch ahead). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "data/loader_impl.h"
#include "device/devctx.h"

/* ---- consumer ------------------------------------------------------------------------------ */

/* Plans the epoch (order, BatchSamplerShard, skipping) and lets the producer start. */
static acc_result begin_epoch(acc_dataloader *dl) {
  const acc_dataset *ds = dl->ds;
  dl->end_of_dataloader = 0;
  dl->remainder = -1;
  if (!dl->o.drop_last && ds->length >= 0 && !dl->dispatch && !dl->batched)
    dl->remainder = ds->length % dl->total_bs;
  dl->p_epoch = dl->epoch;
  dl->epoch_even = dl->o.shard.even_batches != 0; /* a join may change it for later epochs */
  dl->p_skip = dl->skip_next;
  dl->cur_skip = dl->skip_next;
  dl->yielded = dl->skip_next;
  dl->skip_next = 0;
  if (dl->dispatch) {
    ACC_CHECK(acc__loader_dispatch_begin(dl));
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
  acc__loader_producer_start(dl);
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
  acc__loader_release_slot(dl, si);
  return acc__error(rc, "%s", dl->sticky_msg);
}

acc_result acc_dataloader_next(acc_dataloader *dl, const acc_batch **out) {
  ACC_CHECK(acc__loader_check(dl, "acc_dataloader_next"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_dataloader_next: out is NULL");
  *out = NULL;
  if (dl->dead)
    return acc__error(ACC_ERR_NOMEM, "acc_dataloader_next: the loader lost its buffers when its "
                      "accelerator was destroyed (out of memory); destroy it");
  if (dl->sticky_rc != ACC_OK)
    return acc__error(dl->sticky_rc, "%s (call acc_dataloader_set_epoch or _state_set to restart)",
                      dl->sticky_msg);
  if (!dl->in_epoch) ACC_CHECK(begin_epoch(dl));
  acc__loader_release_slot(dl, dl->cur_slot);
  dl->cur_slot = -1;
  int si = dl->ahead_slot;
  dl->ahead_slot = -1;
  if (si < 0) {
    int r = acc__loader_take(dl, &si);
    if (r < 0) return producer_error(dl);
    if (r == 0) { /* end of the epoch */
      acc__loader_stop_epoch(dl);
      dl->epoch++;
      dl->yielded = 0;
      return ACC_OK;
    }
    if (dl->dev) { /* the first batch of the epoch: nothing was copied ahead */
      acc_result prc = acc__loader_place_slot(dl, si);
      if (prc != ACC_OK) return device_error(dl, si, prc);
    }
  }
  int ahead;
  int r = acc__loader_take(dl, &ahead);
  if (r < 0) {
    acc__loader_release_slot(dl, si);
    return producer_error(dl);
  }
  if (r == 1) dl->ahead_slot = ahead;
  if (dl->dev) {
    /* batch k+1 is copied on the copy stream while the program uses batch k; the compute stream
     * waits for batch k's copy (an event, not the host) */
    acc_result prc = r == 1 ? acc__loader_place_slot(dl, ahead) : ACC_OK;
    if (prc == ACC_OK) prc = acc__dstream_wait(dl->dev->dev, dl->dev->stream, dl->slots[si].copied);
    if (prc != ACC_OK) return device_error(dl, si, prc);
  }
  dl->end_of_dataloader = (r == 0);
  dl->cur_slot = si;
  dl_slot *s = &dl->slots[si];
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

int acc__dataloader_opts_take(const acc_dataloader_options *user) {
  size_t need = offsetof(acc_dataloader_options, take_dataset) + sizeof user->take_dataset;
  return user && user->size >= need && user->version >= 4 && user->take_dataset;
}

acc_result acc_dataloader_create(acc_dataloader **out, acc_dataset *ds,
                                 const acc_dataloader_options *opts) {
  acc_result rc = acc__dataloader_create_on(out, ds, opts, NULL);
  if (rc != ACC_OK && acc__dataloader_opts_take(opts)) acc_dataset_destroy(ds); /* taken over */
  return rc;
}

/* The accelerator is going away before the loader: its device memory is freed now, the host
 * staging buffers (page-locked ones belong to the device) are replaced by ordinary ones, and the
 * loader goes on from the same position with host batches only. */
static void detach_device(acc_dataloader *dl) {
  const int was = dl->in_epoch;
  const int64_t pos = dl->yielded;
  acc__loader_stop_epoch(dl);
  if (was) {
    dl->skip_next = pos;
    dl->yielded = pos;
  }
  acc__loader_place_destroy(dl);
  for (int i = 0; dl->host_dev && dl->slots && i < dl->nslots; i++)
    for (int f = 0; f < dl->ds->num_fields; f++) {
      dl_slot *s = &dl->slots[i];
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
  dl->join_saved = -1;
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
    dl_slot *s = &dl->slots[i];
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
  if (dl->dev) ACC_CHECK_GOTO(acc__loader_place_create(dl), rc, fail);
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
    ACC_CHECK_GOTO(acc__loader_dispatch_alloc(dl), rc, fail);
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
  if (o.prefetch > 0 && !dl->dispatch) /* dispatching calls collectives: caller's thread only */
    ACC_CHECK_GOTO(acc__loader_thread_start(dl, fn), rc, fail);
  if (o.take_dataset) dl->owns_ds = 1; /* destroyed with the loader */
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

void acc__dataloader_own_dataset(acc_dataloader *dl) { dl->owns_ds = 1; }

int acc__dataloader_num_processes(const acc_dataloader *dl) {
  return acc__handle_ok(dl, ACC__HANDLE_DATALOADER) ? dl->np : 1;
}

void acc_dataloader_destroy(acc_dataloader *dl) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER)) return;
  if (dl->owns_ds) {
    acc_dataset *ds = dl->ds;
    dl->owns_ds = 0;
    acc_dataloader_destroy(dl);
    acc_dataset_destroy(ds);
    return;
  }
  if (dl->owner_forget) dl->owner_forget(dl->owner, dl);
  acc__loader_thread_stop(dl);
  if (dl->dev) acc__loader_place_destroy(dl);
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
  const int even = dl->in_epoch ? dl->epoch_even : dl->o.shard.even_batches != 0;
  if (dl->batched) { /* BatchSamplerShard.__len__ over the list's batches */
    const int64_t L = dl->nb;
    if (np == 1 || dl->split) return L;
    if (L % np == 0 || drop) return L / np;
    return even || p < L % np ? L / np + 1 : L / np;
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
  return even || p < L % np ? L / np + 1 : L / np;
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

int64_t acc_dataloader_gather_keep(const acc_dataloader *dl, int64_t gathered) {
  if (!acc__handle_ok(dl, ACC__HANDLE_DATALOADER) || !dl->in_epoch || !dl->end_of_dataloader) return gathered;
  if (dl->remainder <= 0) return gathered;
  return dl->remainder < gathered ? dl->remainder : gathered;
}
