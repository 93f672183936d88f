/* The prepared data loader, building one batch of this process into a slot: from the epoch's
 * BatchSamplerShard plan (map-style: fetch every sample), from the stream of an iterable dataset
 * through IterableDatasetShard, and the collate step (copy, or the custom collate callback);
 * the producer's error record. Called by the producer (loader_prefetch.c, loader_dispatch.c). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "data/loader_impl.h"

int acc__loader_perror(acc_dataloader *dl, acc_result rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dl->perr, sizeof dl->perr, fmt, ap);
  va_end(ap);
  dl->perr_rc = rc;
  return -1;
}

int acc__loader_stream_next(acc_dataloader *dl, uint8_t *rec, int64_t *pos) {
  const acc_dataset *ds = dl->ds;
  if (dl->p_ended) return 0;
  void *ptrs[ACC_DATA_MAX_FIELDS];
  for (int f = 0; f < ds->num_fields; f++) ptrs[f] = rec + ds->record_offset[f];
  int rc = ds->next(ptrs, ds->payload);
  if (rc < 0)
    return acc__loader_perror(
        dl, ACC_ERR_INVALID_ARGUMENT,
        "dataloader: the dataset next callback returned %d at sample %lld of epoch %lld", rc,
        (long long)dl->stream_pos, (long long)dl->p_epoch);
  if (rc == 0) {
    dl->p_ended = 1;
    return 0;
  }
  *pos = dl->stream_pos++;
  return 1;
}

/* Collates n staged samples (sample_ptrs) into slot s. */
int acc__loader_collate(acc_dataloader *dl, dl_slot *s, int64_t n) {
  const acc_dataset *ds = dl->ds;
  if (dl->o.collate) {
    int rc = dl->o.collate(dl->sample_ptrs, n, ds->num_fields, s->fields, dl->capacity, s->bytes,
                           dl->o.collate_payload);
    if (rc != 0)
      return acc__loader_perror(
          dl, ACC_ERR_INVALID_ARGUMENT,
          "dataloader: the collate callback returned %d for batch %lld of epoch %lld", rc,
          (long long)s->index, (long long)dl->p_epoch);
    for (int f = 0; f < ds->num_fields; f++)
      if (s->bytes[f] > dl->capacity[f])
        return acc__loader_perror(
            dl, ACC_ERR_INVALID_ARGUMENT,
            "dataloader: the collate callback wrote %zu bytes to field %d, over its "
            "capacity of %zu (collate_capacity)",
            s->bytes[f], f, dl->capacity[f]);
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

int acc__loader_produce_map(acc_dataloader *dl, dl_slot *s) {
  const acc_dataset *ds = dl->ds;
  if (dl->p_cursor >= acc_batch_shard_count(dl->plan)) return 0;
  const int64_t *ix;
  int64_t n;
  if (acc_batch_shard_get(dl->plan, dl->p_cursor, &ix, &n) != ACC_OK)
    return acc__loader_perror(dl, ACC_ERR_INTERNAL, "dataloader: plan batch %lld missing", (long long)dl->p_cursor);
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
      return acc__loader_perror(
          dl, ACC_ERR_INVALID_ARGUMENT,
          "dataloader: the dataset fetch callback returned %d for sample index %lld "
          "(batch %lld of epoch %lld)%s",
          rc, (long long)ix[i], (long long)s->index, (long long)dl->p_epoch, acc__dataset_fetch_error(ds));
  }
  if (!dl->o.collate) {
    for (int f = 0; f < ds->num_fields; f++) s->bytes[f] = (size_t)n * ds->sample_bytes[f];
    return 1;
  }
  for (int64_t i = 0; i < n; i++)
    for (int f = 0; f < ds->num_fields; f++)
      dl->sample_ptrs[i * ds->num_fields + f] = dl->stage + (size_t)i * ds->record_bytes + ds->record_offset[f];
  return acc__loader_collate(dl, s, n) == 0 ? 1 : -1;
}

/* Builds slot s from stream positions (see the mapping in docs/data.md). */
static int build_iter_batch(acc_dataloader *dl, dl_slot *s, const int64_t *pos, int64_t n) {
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
  return acc__loader_collate(dl, s, n);
}

int acc__loader_produce_iter_once(acc_dataloader *dl, dl_slot *s) {
  const acc_dataset *ds = dl->ds;
  if (dl->p_need_reset) {
    dl->p_need_reset = 0;
    if (ds->reset) {
      int rc = ds->reset(dl->p_epoch, ds->payload);
      if (rc != 0)
        return acc__loader_perror(
            dl, ACC_ERR_INVALID_ARGUMENT,
            "dataloader: the dataset reset callback returned %d for epoch %lld", rc,
            (long long)dl->p_epoch);
    }
  }
  const int64_t *pos;
  int64_t n;
  for (;;) {
    uint8_t *rec = dl->rec_cur + (size_t)(dl->stream_pos - dl->cur_start) * ds->record_bytes;
    int64_t p = 0;
    int got = acc__loader_stream_next(dl, rec, &p);
    if (got < 0) return -1;
    if (got == 0) break;
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
