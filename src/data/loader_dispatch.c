/* The prepared data loader, dispatching mode (DataLoaderDispatcher, dispatch_batches): process 0
 * reads every global batch (one ahead, so the last one is known) and broadcasts it through the
 * broadcast callback; each process keeps its slice. Its buffers, its start of an epoch and its
 * production of one slice. It calls collectives, so it runs on the caller's thread only (no
 * loader thread). */
#include <string.h>

#include "data/loader_impl.h"

acc_result acc__loader_dispatch_alloc(acc_dataloader *dl) {
  const acc_dataset *ds = dl->ds;
  const int np = dl->np;
  if (!dl->iterable) {
    dl->order = acc__malloc((size_t)(ds->length > 0 ? ds->length : 1) * sizeof(int64_t));
    if (!dl->order) return ACC_ERR_NOMEM;
  }
  for (int b = 0; b < 2; b++) {
    dl->g_rec[b] = acc__calloc((size_t)dl->total_bs, ds->record_bytes);
    dl->g_idx[b] = acc__calloc((size_t)dl->total_bs, sizeof(int64_t));
    if (!dl->g_rec[b] || !dl->g_idx[b]) return ACC_ERR_NOMEM;
  }
  dl->first_rec = acc__calloc((size_t)np, ds->record_bytes);
  dl->first_idx = acc__calloc((size_t)np, sizeof(int64_t));
  if (!dl->first_rec || !dl->first_idx) return ACC_ERR_NOMEM;
  return ACC_OK;
}

acc_result acc__loader_dispatch_begin(acc_dataloader *dl) {
  const acc_dataset *ds = dl->ds;
  if (!dl->iterable)
    ACC_CHECK(acc_sampler_order(dl->order, ds->length, dl->o.shuffle, dl->o.seed, dl->epoch));
  dl->src_pos = dl->stream_pos = dl->p_batches = 0;
  dl->p_ended = 0;
  dl->g_started = 0;
  dl->g_cur = 0;
  dl->first_count = 0;
  return ACC_OK;
}

/* Process 0: reads the next global batch (up to total_bs samples) into buffer b. Returns the
 * sample count (0 at the end; a short batch counts as the end with drop_last), -1 on error. */
static int64_t dispatch_read(acc_dataloader *dl, int b) {
  const acc_dataset *ds = dl->ds;
  int64_t n = 0;
  while (n < dl->total_bs) {
    uint8_t *rec = dl->g_rec[b] + (size_t)n * ds->record_bytes;
    if (!dl->iterable) {
      if (dl->src_pos >= ds->length) break;
      void *ptrs[ACC_DATA_MAX_FIELDS];
      for (int f = 0; f < ds->num_fields; f++) ptrs[f] = rec + ds->record_offset[f];
      int64_t ix = dl->order[dl->src_pos++];
      int rc = ds->fetch(ix, ptrs, ds->payload);
      if (rc != 0)
        return acc__loader_perror(
            dl, ACC_ERR_INVALID_ARGUMENT,
            "dataloader: the dataset fetch callback returned %d for sample index %lld "
            "(epoch %lld)%s",
            rc, (long long)ix, (long long)dl->p_epoch, acc__dataset_fetch_error(ds));
      dl->g_idx[b][n++] = ix;
    } else {
      int got = acc__loader_stream_next(dl, rec, &dl->g_idx[b][n]);
      if (got < 0) return -1;
      if (got == 0) break;
      n++;
    }
  }
  if (n < dl->total_bs && dl->o.drop_last) return 0;
  return n;
}

static int bcast(acc_dataloader *dl, void *buf, size_t bytes, const char *what) {
  if (dl->np == 1 || bytes == 0) return 0;
  acc_result rc = dl->o.broadcast(buf, bytes, dl->o.broadcast_payload);
  if (rc != ACC_OK)
    return acc__loader_perror(dl, rc,
                              "dataloader (dispatch_batches): broadcasting %s of batch %lld of "
                              "epoch %lld failed: %s",
                              what, (long long)dl->p_batches, (long long)dl->p_epoch,
                              acc_last_error());
  return 0;
}

/* One global batch: process 0 reads (one ahead, so the last is known) and broadcasts it; every
 * process keeps [p*b, (p+1)*b) with b = count / num_processes. On the last batch, unless
 * drop_last, a count not divisible by num_processes is completed with the first num_processes
 * samples of the epoch's first global batch and b grows by one. */
int acc__loader_produce_dispatch(acc_dataloader *dl, dl_slot *s) {
  const acc_dataset *ds = dl->ds;
  const int p = dl->o.shard.process_index, np = dl->np;
  int64_t hdr[3] = {0, 0, 0}; /* count, is_last, process 0 failed */
  if (p == 0) {
    int64_t cur;
    if (!dl->g_started) {
      if (dl->iterable && ds->reset) {
        int rc = ds->reset(dl->p_epoch, ds->payload);
        if (rc != 0)
          acc__loader_perror(dl, ACC_ERR_INVALID_ARGUMENT,
                             "dataloader: the dataset reset callback returned %d for epoch %lld",
                             rc, (long long)dl->p_epoch);
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
    return acc__loader_perror(dl, ACC_ERR_REMOTE,
                              "dataloader (dispatch_batches): process 0 could not "
                              "read batch %lld of epoch %lld (its error names the cause)",
                              (long long)dl->p_batches, (long long)dl->p_epoch);
  }
  const int64_t count = hdr[0];
  if (count == 0) return 0;
  if (count > dl->total_bs)
    return acc__loader_perror(dl, ACC_ERR_INTERNAL,
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
  return acc__loader_collate(dl, s, n) == 0 ? 1 : -1;
}
