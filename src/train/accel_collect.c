/* The Accelerator's collectives for metrics (gather_for_metrics, pad_across_processes), process
 * control through the accelerator, and the scheduler's step count for a prepared loader. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/collcheck.h"
#include "core/log.h"
#include "core/profile.h"
#include "state/state.h"
#include "train/accel.h"
#include "data/data_internal.h"
#include "device/devio.h"

/* ---- metrics ---------------------------------------------------------------------------------------- */

acc_result acc_accelerator_all_gather(acc_accelerator *acc, const void *send, void *recv, size_t count,
                                  acc_dtype dtype) {
  ACC_CHECK(acc__accel_check(acc, "gather"));
  return acc_all_gather(acc->st, send, recv, count, dtype);
}

acc_result acc_accelerator_all_reduce(acc_accelerator *acc, const void *send, void *recv, size_t count,
                                  acc_dtype dtype, acc_op op) {
  ACC_CHECK(acc__accel_check(acc, "reduce"));
  return acc_all_reduce(acc->st, send, recv, count, dtype, op);
}

static acc_result gather_for_metrics_host(acc_accelerator *acc, const void *send, int64_t n_samples,
                                              size_t sample_elems, acc_dtype dtype, void *recv,
                                              int64_t capacity, int64_t *n_out) {
  ACC_CHECK(acc__accel_check(acc, "gather_for_metrics"));
  size_t es = acc_dtype_size(dtype);
  if (!es) return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: unknown dtype %d", (int)dtype);
  if (n_samples < 0 || !n_out || (n_samples > 0 && !send) || capacity < 0 || (capacity > 0 && !recv))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: bad arguments (n_samples %lld, capacity %lld)",
                      (long long)n_samples, (long long)capacity);
  /* A prepared loader on the last batch of its epoch, whose batches did not come through
   * acc_accelerator_next_batch: its padding duplicates cannot be dropped, the metric would
   * silently count them. Every process sees the same loader state, so all fail alike. */
  for (int i = 0; i < acc->nloaders; i++) {
    acc_dataloader *dl = acc->loaders[i];
    if (dl == acc->active || !acc_dataloader_end_of_dataloader(dl) || acc_dataloader_remainder(dl) <= 0) continue;
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "gather_for_metrics: prepared data loader %d is on the last batch of its epoch, which holds "
                      "padding samples, but its batches were not taken with acc_accelerator_next_batch, so the "
                      "padding cannot be dropped; iterate it with acc_accelerator_next_batch", i);
  }
  size_t sample_bytes = es * sample_elems;
  int n = acc_state_num_processes(acc->st);
  /* the per-process counts first, so the samples land in the reused buffer without a copy */
  int64_t counts_small[16], *counts = n <= 16 ? counts_small : acc__calloc((size_t)n, sizeof *counts);
  if (!counts) return ACC_ERR_NOMEM;
  int64_t mine = n_samples, total = 0, mx = 0;
  acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 0);
  acc_result rc = acc_all_gather(acc->st, &mine, counts, 1, ACC_I64);
  for (int r = 0; rc == ACC_OK && r < n; r++) {
    if (counts[r] < 0 || (sample_bytes && counts[r] > (int64_t)(SIZE_MAX / 2 / sample_bytes) / n))
      rc = acc__error(ACC_ERR_MISMATCH, "gather_for_metrics: process %d reports %lld samples", r,
                      (long long)counts[r]);
    else {
      total += counts[r];
      if (counts[r] > mx) mx = counts[r];
    }
  }
  int64_t keep = total;
  if (rc == ACC_OK && acc->active && acc->end_of_dataloader) keep = acc_dataloader_gather_keep(acc->active, total);
  if (rc == ACC_OK && keep > capacity)
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "gather_for_metrics: recv holds %lld samples but %lld were gathered",
                    (long long)capacity, (long long)keep);
  /* every process contributes mx samples (padded), gathered into one buffer owned by the
   * accelerator and grown only when needed */
  size_t need = (size_t)mx * sample_bytes * (size_t)(n + 1);
  if (rc == ACC_OK && need > acc->metrics_cap) {
    void *nb = acc__realloc(acc->metrics_buf, need);
    if (!nb) rc = ACC_ERR_NOMEM;
    else {
      acc->metrics_buf = nb;
      acc->metrics_cap = need;
    }
  }
  /* a local failure (capacity, memory) on one process must not leave the others in the gather */
  int32_t bad = rc != ACC_OK;
  acc_result arc = ACC_OK;
  if (rc != ACC_ERR_MISMATCH && rc != ACC_ERR_REMOTE && rc != ACC_ERR_TIMEOUT && rc != ACC_ERR_BACKEND) {
    acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 1); /* the group is usable: tell the others */
    arc = acc_all_reduce(acc->st, &bad, &bad, 1, ACC_I32, ACC_MAX);
  }
  if (rc == ACC_OK && arc != ACC_OK) rc = arc;
  if (rc == ACC_OK && bad)
    rc = acc__error(ACC_ERR_REMOTE, "gather_for_metrics failed on another process (see its error)");
  if (rc == ACC_OK && mx > 0) {
    unsigned char *mine_buf = acc->metrics_buf, *all = mine_buf + (size_t)mx * sample_bytes;
    if (n_samples) memcpy(mine_buf, send, (size_t)n_samples * sample_bytes);
    acc__comm_origin(ACC__ORIGIN_GATHER_FOR_METRICS, 2);
    rc = acc_all_gather(acc->st, mine_buf, all, (size_t)mx * sample_bytes, ACC_U8);
    int64_t off = 0;
    for (int r = 0; rc == ACC_OK && r < n && off < keep; r++) {
      int64_t take = counts[r] < keep - off ? counts[r] : keep - off;
      memcpy((unsigned char *)recv + (size_t)off * sample_bytes, all + (size_t)r * (size_t)mx * sample_bytes,
             (size_t)take * sample_bytes);
      off += take;
    }
  }
  if (rc == ACC_OK) *n_out = keep;
  if (counts != counts_small) acc__free(counts);
  return rc;
}

static acc_result pad_across_processes_host(acc_accelerator *acc, void *buf, int64_t n_samples,
                                                size_t sample_elems, acc_dtype dtype, double pad_value,
                                                int pad_first, int64_t capacity, int64_t *n_out) {
  ACC_CHECK(acc__accel_check(acc, "pad_across_processes"));
  size_t es = acc_dtype_size(dtype);
  if (!es || !n_out || n_samples < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "pad_across_processes: bad arguments");
  int64_t mx = n_samples;
  acc__comm_origin(ACC__ORIGIN_PAD, 0);
  ACC_CHECK(acc_all_reduce(acc->st, &mx, &mx, 1, ACC_I64, ACC_MAX));
  if (mx > capacity)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "pad_across_processes: buf holds %lld samples but must hold %lld after padding",
                      (long long)capacity, (long long)mx);
  *n_out = mx;
  if (mx == n_samples) return ACC_OK;
  size_t sb = es * sample_elems, pad = (size_t)(mx - n_samples);
  unsigned char *b = buf;
  if (pad_first) memmove(b + pad * sb, b, (size_t)n_samples * sb);
  unsigned char *dst = pad_first ? b : b + (size_t)n_samples * sb;
  unsigned char one[16];
  switch (dtype) {
    case ACC_F32: { float v = (float)pad_value; memcpy(one, &v, 4); break; }
    case ACC_F64: { memcpy(one, &pad_value, 8); break; }
    case ACC_F16: { uint16_t v = acc__f32_to_f16((float)pad_value); memcpy(one, &v, 2); break; }
    case ACC_BF16: { uint16_t v = acc__f32_to_bf16((float)pad_value); memcpy(one, &v, 2); break; }
    case ACC_I32: { int32_t v = (int32_t)pad_value; memcpy(one, &v, 4); break; }
    case ACC_I64: { int64_t v = (int64_t)pad_value; memcpy(one, &v, 8); break; }
    case ACC_U64: { uint64_t v = (uint64_t)pad_value; memcpy(one, &v, 8); break; }
    default: { uint8_t v = (uint8_t)pad_value; one[0] = v; break; }
  }
  for (size_t i = 0; i < pad * sample_elems; i++) memcpy(dst + i * es, one, es);
  return ACC_OK;
}

/* Device buffers (src/device/devio.h): staged through host memory around the host versions. */
acc_result acc_accelerator_gather_for_metrics(acc_accelerator *acc, const void *send, int64_t n_samples,
                                              size_t sample_elems, acc_dtype dtype, void *recv,
                                              int64_t capacity, int64_t *n_out) {
  size_t sb = acc_dtype_size(dtype) * sample_elems;
  int dsend = n_samples > 0 && acc__devio_find(send), drecv = capacity > 0 && acc__devio_find(recv);
  if ((!dsend && !drecv) || !sb || !n_out)
    return gather_for_metrics_host(acc, send, n_samples, sample_elems, dtype, recv, capacity, n_out);
  void *hs = dsend ? acc__malloc((size_t)n_samples * sb) : NULL;
  void *hr = drecv ? acc__malloc((size_t)capacity * sb) : NULL;
  acc_result rc = (dsend && !hs) || (drecv && !hr) ? ACC_ERR_NOMEM : ACC_OK;
  if (rc == ACC_OK && dsend) rc = acc__devio_to_host(hs, send, (size_t)n_samples * sb);
  /* a local failure still joins the collectives, with no samples and no room: the gathered
   * samples then exceed the room, which fails every process (its "failed on another process") */
  acc_result grc =
      rc == ACC_OK ? gather_for_metrics_host(acc, dsend ? hs : send, n_samples, sample_elems, dtype,
                                             drecv ? hr : recv, capacity, n_out)
                   : gather_for_metrics_host(acc, NULL, 0, sample_elems, dtype, NULL, 0, n_out);
  if (rc == ACC_OK) rc = grc;
  if (rc == ACC_OK && drecv) rc = acc__devio_from_host(recv, hr, (size_t)*n_out * sb);
  acc__free(hs);
  acc__free(hr);
  return rc;
}

acc_result acc_accelerator_pad_across_processes(acc_accelerator *acc, void *buf, int64_t n_samples,
                                                size_t sample_elems, acc_dtype dtype, double pad_value,
                                                int pad_first, int64_t capacity, int64_t *n_out) {
  size_t sb = acc_dtype_size(dtype) * sample_elems;
  if (!sb || !n_out || capacity <= 0 || n_samples < 0 || !acc__devio_find(buf))
    return pad_across_processes_host(acc, buf, n_samples, sample_elems, dtype, pad_value, pad_first,
                                     capacity, n_out);
  void *h = acc__malloc((size_t)capacity * sb);
  acc_result rc = h ? ACC_OK : ACC_ERR_NOMEM;
  int64_t n_in = n_samples < capacity ? n_samples : capacity;
  if (rc == ACC_OK) rc = acc__devio_to_host(h, buf, (size_t)n_in * sb);
  acc_result prc = pad_across_processes_host(acc, rc == ACC_OK ? h : NULL, n_samples, sample_elems,
                                             dtype, pad_value, pad_first,
                                             rc == ACC_OK ? capacity : 0, n_out);
  if (rc == ACC_OK) rc = prc;
  if (rc == ACC_OK) rc = acc__devio_from_host(buf, h, (size_t)*n_out * sb);
  acc__free(h);
  return rc;
}

/* ---- process control through the accelerator ------------------------------------------------------ */

int acc_accelerator_process_index(const acc_accelerator *acc) {
  return acc ? acc_state_process_index(acc->st) : 0;
}
int acc_accelerator_local_process_index(const acc_accelerator *acc) {
  return acc ? acc_state_local_process_index(acc->st) : 0;
}
int acc_accelerator_num_processes(const acc_accelerator *acc) {
  return acc ? acc_state_num_processes(acc->st) : 1;
}
int acc_accelerator_is_main_process(const acc_accelerator *acc) {
  return acc ? acc_state_is_main_process(acc->st) : 1;
}
int acc_accelerator_is_local_main_process(const acc_accelerator *acc) {
  return acc ? acc_state_is_local_main_process(acc->st) : 1;
}
acc_result acc_accelerator_wait_for_everyone(acc_accelerator *acc) {
  ACC_CHECK(acc__accel_check(acc, "wait_for_everyone"));
  return acc_wait_for_everyone(acc->st);
}
acc_result acc_accelerator_main_process_first_begin(acc_accelerator *acc) {
  ACC_CHECK(acc__accel_check(acc, "main_process_first_begin"));
  return acc_main_process_first_begin(acc->st);
}
acc_result acc_accelerator_main_process_first_end(acc_accelerator *acc) {
  ACC_CHECK(acc__accel_check(acc, "main_process_first_end"));
  return acc_main_process_first_end(acc->st);
}
int acc_accelerator_print(const acc_accelerator *acc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = acc__vprint_if(!acc || acc_state_is_main_process(acc->st), fmt, ap);
  va_end(ap);
  return n;
}
acc_result acc_accelerator_split_between_processes(const acc_accelerator *acc, size_t n, int apply_padding,
                                                   acc_split *out) {
  ACC_CHECK(acc__accel_check(acc, "split_between_processes"));
  return acc_split_between_processes(acc->st, n, apply_padding, out);
}

acc_result acc_accelerator_scheduler_steps(const acc_accelerator *acc, const acc_dataloader *dl, int64_t num_epochs,
                                           double warmup_fraction, int64_t *num_training_steps,
                                           int64_t *num_warmup_steps) {
  ACC_CHECK(acc__accel_check(acc, "scheduler_steps"));
  if (!num_training_steps)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "scheduler_steps: num_training_steps is NULL");
  int64_t len = acc_dataloader_len(dl);
  if (len < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "scheduler_steps: the loader's length is unknown (NULL loader or iterable dataset); use "
                      "acc_scheduler_training_steps with your own count of batches per epoch");
  int nproc = acc_state_num_processes(acc->st);
  if (!acc->step_sched_with_opt) /* the scheduler steps once per call, i.e. per batch */
    return acc_scheduler_training_steps(len, num_epochs, 1, 1, 1, warmup_fraction, num_training_steps,
                                        num_warmup_steps);
  if (!acc->sync_with_dataloader) { /* windows run across epochs: one step per gas batches overall */
    if (num_epochs < 0 || (num_epochs && len > INT64_MAX / num_epochs))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "scheduler_steps: num_epochs %lld out of range",
                        (long long)num_epochs);
    int64_t t = 0;
    ACC_CHECK(acc_scheduler_training_steps(len * num_epochs / acc->gas, 1, 1, nproc, acc->split_batches,
                                           warmup_fraction, &t, num_warmup_steps));
    *num_training_steps = t;
    return ACC_OK;
  }
  return acc_scheduler_training_steps(len, num_epochs, acc->gas, nproc, acc->split_batches, warmup_fraction,
                                      num_training_steps, num_warmup_steps);
}
