/* The one ZeRO parameter all-gather (acc__zero_gather_pass, accel_models.h): after a step of the
 * shards, every process's updated range of the ZeRO layout handed to the others. The library's
 * step (accel_models.c: stage 1 through its full-layout buffer, stage 2 in chunks through its
 * exchange buffer) and a program's own (acc_accelerator_zero_gather, zero_shard.c) both call it.
 *
 * The layout is the one of the library's ZeRO (acc__model_zero_span, docs/zero.md): the
 * parameters that take a gradient laid end to end in registration order, T elements, cut into N
 * shards of ceil(T / N). Host rows with memcpy, device rows through the device's copies. */
#include <string.h>

#include "accelerate.h"
#include "backend/collcheck.h"
#include "device/device.h"
#include "train/accel_models.h"
#include "train/model_internal.h"
#include "train/train.h"

static void layout(const acc_model *m, int rank, int n, size_t *total, size_t *lo, size_t *hi) {
  size_t t;
  size_t shard = acc__model_zero_span(m, (size_t)n, &t);
  size_t a = (size_t)rank * shard;
  *total = t;
  *lo = a < t ? a : t;
  *hi = a + shard < t ? a + shard : t;
}

/* The buffer of row i that a gather pass moves: pass 0 the float32 values (the master weights of a
 * bf16/fp16 row), pass 1 the program's bf16/fp16 values of a row whose table has the program's
 * master (its own rounding, stochastic or not, kept as it computed it); NULL: not in this pass. */
static void *row_buffer(const acc_model *m, size_t i, int pass) {
  if (pass == 0) return acc_model_parameter(m, i)->data;
  return acc__typed_program_master(m, i) ? (void *)acc_model_parameter_storage(m, i) : NULL;
}

/* Copies the layout range [a, b) between host buf (element a first, es bytes per element) and the
 * rows' buffers of `pass`: out = 1 from the rows into buf. Device memory through d's copies. */
static acc_result move(acc__devctx *d, acc_model *m, int pass, size_t es, size_t a, size_t b, char *buf,
                       int out) {
  size_t off = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m) && off < b; i++) {
    if (!acc_model_requires_grad(m, i)) continue;
    size_t end = off + acc_model_parameter(m, i)->numel, s = off > a ? off : a, e = end < b ? end : b;
    char *row = row_buffer(m, i, pass);
    if (e > s && row) {
      char *at = row + (s - off) * es, *h = buf + (s - a) * es;
      size_t bytes = (e - s) * es;
      if (!d) memcpy(out ? h : at, out ? at : h, bytes);
      else
        ACC_CHECK(acc__device_copy(d->dev, out ? (void *)h : (void *)at, out ? (void *)at : (void *)h, bytes,
                                   out ? ACC__COPY_D2H : ACC__COPY_H2D, d->stream));
    }
    off = end;
  }
  return d && out ? acc__dstream_sync(d->dev, d->stream) : ACC_OK; /* buf is read next */
}

acc_result acc__zero_gather_pass(acc_state *st, acc__devctx *d, acc_model *m, int pass, void *buffer, size_t chunk,
                                 int origin_index) {
  const int rank = acc_state_process_index(st), n = acc_state_num_processes(st);
  const size_t es = pass == 0 ? sizeof(float) : sizeof(uint16_t);
  char *buf = buffer;
  size_t t, lo, hi;
  layout(m, rank, n, &t, &lo, &hi);
  size_t shard = t ? (t + (size_t)n - 1) / (size_t)n : 1;
  if (chunk == 0 || chunk > shard) chunk = shard;
  acc_result rc = ACC_OK;
  for (size_t c = 0; c < shard && rc == ACC_OK; c += chunk) {
    size_t len = shard - c < chunk ? shard - c : chunk;
    char *mine = buf + (size_t)rank * len * es;
    memset(mine, 0, len * es); /* the padding past the last element */
    size_t a = lo + c < hi ? lo + c : hi, b = lo + c + len < hi ? lo + c + len : hi;
    rc = move(d, m, pass, es, a, b, mine, 1);
    acc__comm_origin(ACC__ORIGIN_ZERO, origin_index);
    if (rc == ACC_OK) rc = acc_all_gather(st, mine, buf, len, pass == 0 ? ACC_F32 : ACC_BF16);
    for (int r = 0; r < n && rc == ACC_OK; r++) {
      size_t s = (size_t)r * shard + c, e = s + len;
      if (r == rank || s >= t) continue;
      rc = move(d, m, pass, es, s, e < t ? e : t, buf + (size_t)r * len * es, 0);
    }
    /* the host buffer is rewritten by the next chunk: its copies to the device must be done */
    if (rc == ACC_OK && d) rc = acc__dstream_sync(d->dev, d->stream);
  }
  return rc;
}
