/* Shared test datasets: sample i has field 0 = {i, i + 0.5} (f32) and field 1 = {10 * i} (i32). */
#ifndef ACC_DATA_FIXTURE_H
#define ACC_DATA_FIXTURE_H

#include <string.h>

#include "acc_test.h"
#include "accelerate/data.h"

static const acc_field_desc fx_fields[2] = {{ACC_F32, 2}, {ACC_I32, 1}};

static int fx_fetch(int64_t index, void *const *fields, void *payload) {
  int64_t *fail_at = payload;
  if (fail_at && *fail_at == index) return 7;
  float *x = fields[0];
  int32_t *y = fields[1];
  x[0] = (float)index;
  x[1] = (float)index + 0.5f;
  y[0] = (int32_t)(10 * index);
  return 0;
}

/* Iterable stream 0..n-1; reset records the epoch. */
typedef struct fx_stream {
  int64_t n, pos, last_reset_epoch, resets;
} fx_stream;

static int fx_next(void *const *fields, void *payload) {
  fx_stream *s = payload;
  if (s->pos >= s->n) return 0;
  return fx_fetch(s->pos++, fields, NULL) == 0 ? 1 : -1;
}

static int fx_reset(int64_t epoch, void *payload) {
  fx_stream *s = payload;
  s->pos = 0;
  s->last_reset_epoch = epoch;
  s->resets++;
  return 0;
}

/* Checks that a batch's field buffers hold exactly the samples named by batch->indices. */
static int fx_batch_consistent(const acc_batch *b) {
  const float *x = b->fields[0];
  const int32_t *y = b->fields[1];
  if (b->field_bytes[0] != (size_t)b->size * 2 * sizeof(float)) return 0;
  if (b->field_bytes[1] != (size_t)b->size * sizeof(int32_t)) return 0;
  for (int64_t i = 0; i < b->size; i++) {
    int64_t ix = b->indices[i];
    if (x[2 * i] != (float)ix || x[2 * i + 1] != (float)ix + 0.5f || y[i] != (int32_t)(10 * ix)) return 0;
  }
  return 1;
}

/* Renders the indices of a batch as "a,b,c". */
static void fx_render(const acc_batch *b, char *buf, size_t cap) {
  size_t pos = 0;
  buf[0] = '\0';
  for (int64_t i = 0; i < b->size && pos < cap; i++)
    pos += (size_t)snprintf(buf + pos, cap - pos, "%s%lld", i ? "," : "", (long long)b->indices[i]);
}

#endif
