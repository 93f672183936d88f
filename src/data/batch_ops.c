/* Accelerate's pad_input_tensors and concatenate for the library's batches (acc_batch): owned
 * batches in one allocation (acc_free), fields stacked sample by sample. */
#include <string.h>

#include "core/internal.h"
#include "data/data_internal.h"

int64_t acc_pad_input_size(int64_t batch_size, int num_processes) {
  if (batch_size < 0 || num_processes < 1) return -1;
  /* Accelerate's _pad_input_tensors, quirks included (docs/data.md): its test
   * `last_inputs > to_pad & to_pad < 1` is Python's chained comparison
   * last_inputs > to_pad and to_pad < 1 (& binds tighter than the comparisons). */
  const int64_t n = num_processes, per = batch_size / n, last = batch_size - per * n;
  int64_t to_pad = per == 0 ? n - batch_size : n - per;
  if (last > to_pad && to_pad < 1) to_pad = last - to_pad;
  int64_t out;
  if (__builtin_add_overflow(batch_size, to_pad, &out)) return -1;
  return out;
}

/* An owned batch of `size` samples whose field f holds size * sample_bytes[f] bytes (zeroed),
 * indices set to -1, in one allocation. */
static acc_result batch_alloc(int num_fields, const size_t *sample_bytes, int64_t size,
                              const char *fn, acc_batch **out) {
  const size_t align = 64;
  size_t off = sizeof(acc_batch), total;
  size_t fields_at = off = (off + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *);
  off += (size_t)num_fields * sizeof(void *);
  size_t bytes_at = off;
  off += (size_t)num_fields * sizeof(size_t);
  size_t idx_at = off = (off + 7) / 8 * 8;
  size_t data_at[ACC_DATA_MAX_FIELDS], fb[ACC_DATA_MAX_FIELDS];
  if (__builtin_mul_overflow((size_t)size, sizeof(int64_t), &total) ||
      __builtin_add_overflow(off, total, &off))
    goto too_big;
  for (int f = 0; f < num_fields; f++) {
    off = (off + align - 1) / align * align;
    data_at[f] = off;
    if (__builtin_mul_overflow((size_t)size, sample_bytes[f], &fb[f]) ||
        __builtin_add_overflow(off, fb[f], &off))
      goto too_big;
  }
  uint8_t *mem = acc__calloc(1, off); /* fields at 64-byte offsets of it */
  if (!mem)
    return acc__error(ACC_ERR_NOMEM, "%s: cannot allocate %zu bytes for a batch of %lld samples",
                      fn, off, (long long)size);
  acc_batch *b = (acc_batch *)mem;
  void **fields = (void **)(mem + fields_at);
  size_t *bytes = (size_t *)(mem + bytes_at);
  int64_t *idx = (int64_t *)(mem + idx_at);
  for (int f = 0; f < num_fields; f++) {
    fields[f] = mem + data_at[f];
    bytes[f] = fb[f];
  }
  for (int64_t i = 0; i < size; i++) idx[i] = -1;
  b->size = size;
  b->num_fields = num_fields;
  b->fields = fields;
  b->field_bytes = bytes;
  b->indices = idx;
  b->index = -1;
  b->epoch = -1;
  b->end_of_dataloader = 0;
  b->device_fields = NULL;
  *out = b;
  return ACC_OK;
too_big:
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: a batch of %lld samples is too large", fn,
                    (long long)size);
}

/* Validates batch k and gives its bytes per sample of every field. */
static acc_result sample_sizes(const acc_batch *b, const char *fn, size_t k, size_t *sb) {
  if (!b) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch %zu is NULL", fn, k);
  if (b->num_fields < 1 || b->num_fields > ACC_DATA_MAX_FIELDS)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch %zu has %d fields (expected 1..%d)", fn,
                      k, b->num_fields, ACC_DATA_MAX_FIELDS);
  if (b->size < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch %zu has size %lld", fn, k,
                      (long long)b->size);
  if (!b->fields || !b->field_bytes)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch %zu has no fields or field_bytes", fn,
                      k);
  for (int f = 0; f < b->num_fields; f++) {
    if (b->size == 0) {
      if (b->field_bytes[f] != 0)
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "%s: batch %zu has no samples but %zu bytes in field %d", fn, k,
                          b->field_bytes[f], f);
      sb[f] = 0;
      continue;
    }
    if (b->field_bytes[f] % (size_t)b->size != 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: field %d of batch %zu holds %zu bytes, not a multiple of its %lld "
                        "samples (a custom collate with variable-size samples cannot be padded "
                        "or concatenated sample by sample)",
                        fn, f, k, b->field_bytes[f], (long long)b->size);
    if (b->field_bytes[f] && !b->fields[f])
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: field %d of batch %zu is NULL", fn, f, k);
    sb[f] = b->field_bytes[f] / (size_t)b->size;
  }
  return ACC_OK;
}

acc_result acc_batch_pad_input(const acc_batch *in, int num_processes, acc_batch **out) {
  const char *fn = "acc_batch_pad_input";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  if (num_processes < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: num_processes is %d (expected >= 1)", fn,
                      num_processes);
  size_t sb[ACC_DATA_MAX_FIELDS];
  ACC_CHECK(sample_sizes(in, fn, 0, sb));
  if (in->size == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the batch has no samples, so the size of a padding sample is unknown",
                      fn);
  int64_t size = acc_pad_input_size(in->size, num_processes);
  if (size < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: a batch of %lld samples is too large", fn,
                      (long long)in->size);
  acc_batch *b;
  ACC_CHECK(batch_alloc(in->num_fields, sb, size, fn, &b));
  for (int f = 0; f < in->num_fields; f++)
    if (in->field_bytes[f]) memcpy(b->fields[f], in->fields[f], in->field_bytes[f]);
  if (in->indices) memcpy((int64_t *)b->indices, in->indices, (size_t)in->size * sizeof(int64_t));
  b->index = in->index;
  b->epoch = in->epoch;
  b->end_of_dataloader = in->end_of_dataloader;
  *out = b;
  return ACC_OK;
}

acc_result acc_batch_concatenate(const acc_batch *const *batches, size_t n, acc_batch **out) {
  const char *fn = "acc_batch_concatenate";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  if (!batches || n == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: no batches to concatenate", fn);
  size_t sb[ACC_DATA_MAX_FIELDS], kb[ACC_DATA_MAX_FIELDS];
  int have = 0; /* sb holds the sample sizes of a batch with samples */
  int64_t size = 0;
  ACC_CHECK(sample_sizes(batches[0], fn, 0, sb));
  have = batches[0]->size > 0;
  const int nf = batches[0]->num_fields;
  for (size_t k = 0; k < n; k++) {
    ACC_CHECK(sample_sizes(batches[k], fn, k, kb));
    const acc_batch *b = batches[k];
    if (b->num_fields != nf)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: batch %zu has %d fields but batch 0 has %d", fn, k, b->num_fields, nf);
    if (b->size == 0) continue;
    if (!have) {
      memcpy(sb, kb, sizeof sb);
      have = 1;
    }
    for (int f = 0; f < nf; f++)
      if (kb[f] != sb[f])
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "%s: field %d has %zu bytes per sample in batch %zu but %zu in the "
                          "batches before",
                          fn, f, kb[f], k, sb[f]);
    if (__builtin_add_overflow(size, b->size, &size))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: too many samples", fn);
  }
  if (!have)
    for (int f = 0; f < nf; f++) sb[f] = 0;
  acc_batch *r;
  ACC_CHECK(batch_alloc(nf, sb, size, fn, &r));
  int64_t at = 0;
  for (size_t k = 0; k < n; k++) {
    const acc_batch *b = batches[k];
    for (int f = 0; f < nf; f++)
      if (b->field_bytes[f])
        memcpy((uint8_t *)r->fields[f] + (size_t)at * sb[f], b->fields[f], b->field_bytes[f]);
    if (b->indices && b->size)
      memcpy((int64_t *)r->indices + at, b->indices, (size_t)b->size * sizeof(int64_t));
    at += b->size;
  }
  r->index = batches[0]->index;
  r->epoch = batches[0]->epoch;
  r->end_of_dataloader = batches[n - 1]->end_of_dataloader;
  *out = r;
  return ACC_OK;
}
