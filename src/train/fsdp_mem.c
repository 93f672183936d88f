/* FSDP's memory operations on the host or on the accelerator's device (fsdp_mem.h). On a device
 * every operation is a call of the device interface on the compute stream (copies, memset, the
 * axpy / scale / norm_partials kernels); what the host must see (the poison check, the partial
 * sums of a norm) comes back through host buffers of bounded size. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "device/kernels.h"
#include "train/fsdp_mem.h"
#include "train/train.h"

/* elements of host staging per copy (poison check, max norm): 256 KiB */
#define STAGE_ELEMS ((size_t)65536)

static acc__device *dev_of(const acc_fsdp *f) { return f->dev->dev; }
static acc__dstream *stream_of(const acc_fsdp *f) { return f->dev->stream; }

/* The host staging buffer (STAGE_ELEMS floats, page-locked where the device has it), taken once:
 * the poison check runs at every begin call. */
static acc_result stage(acc_fsdp *f, void **out) {
  if (!f->h_stage) ACC_CHECK(acc__device_host_alloc(dev_of(f), STAGE_ELEMS * sizeof(float), &f->h_stage));
  *out = f->h_stage;
  return ACC_OK;
}

void acc__fsdp_mem_release(acc_fsdp *f) {
  if (!f->dev) return;
  acc__dstream_sync(dev_of(f), stream_of(f));
  acc__device_free(dev_of(f), f->d_coef);
  acc__device_free(dev_of(f), f->d_partials);
  acc__device_free(dev_of(f), f->d_flag);
  acc__device_host_free(dev_of(f), f->h_stage);
  f->d_coef = NULL;
  f->d_flag = NULL;
  f->d_partials = NULL;
  f->d_partials_cap = 0;
  f->h_stage = NULL;
}

/* on: the buffer is memory of f's device (its side, fsdp_mem.h); host memory otherwise */
static int shard_on_dev(const acc_fsdp *f) { return f->dev && !f->offload; }

static acc_result alloc_on(acc_fsdp *f, int on, size_t n, float **out) {
  size_t bytes = (n ? n : 1) * sizeof(float);
  *out = NULL;
  if (!on) {
    *out = acc__calloc(n ? n : 1, sizeof(float));
    return *out ? ACC_OK : ACC_ERR_NOMEM;
  }
  void *p = NULL;
  ACC_CHECK(acc__device_alloc(dev_of(f), bytes, &p));
  acc_result rc = acc__device_memset(dev_of(f), p, 0, bytes, stream_of(f));
  if (rc != ACC_OK) {
    acc__device_free(dev_of(f), p);
    return rc;
  }
  *out = p;
  return ACC_OK;
}

static void free_on(acc_fsdp *f, int on, float *p) {
  if (!p) return;
  if (!on) {
    acc__free(p);
    return;
  }
  /* queued work may still use it (the fake device checks): wait first */
  acc__dstream_sync(dev_of(f), stream_of(f));
  acc__device_free(dev_of(f), p);
}

static acc_result zero_on(acc_fsdp *f, int on, float *p, size_t n) {
  if (!n) return ACC_OK;
  if (!on) {
    memset(p, 0, n * sizeof(float));
    return ACC_OK;
  }
  return acc__device_memset(dev_of(f), p, 0, n * sizeof(float), stream_of(f));
}

acc_result acc__fsdp_mem_copy(acc_fsdp *f, float *dst, const float *src, size_t n) {
  if (!n || dst == src) return ACC_OK;
  if (!f->dev) {
    memmove(dst, src, n * sizeof(float));
    return ACC_OK;
  }
  return acc__device_copy(dev_of(f), dst, src, n * sizeof(float), ACC__COPY_D2D, stream_of(f));
}

acc_result acc__fsdp_mem_in(acc_fsdp *f, float *dst, const float *src, size_t n) {
  if (!n) return ACC_OK;
  if (!f->dev) {
    memcpy(dst, src, n * sizeof(float));
    return ACC_OK;
  }
  int on_dev = 0;
  ACC_CHECK(acc__device_is_device_ptr(dev_of(f), src, &on_dev));
  ACC_CHECK(acc__device_copy(dev_of(f), dst, src, n * sizeof(float), on_dev ? ACC__COPY_D2D : ACC__COPY_H2D,
                             stream_of(f)));
  return acc__dstream_sync(dev_of(f), stream_of(f));
}

acc_result acc__fsdp_mem_out(acc_fsdp *f, float *h_dst, const float *src, size_t n) {
  if (!n) return ACC_OK;
  int on_dev = 0;
  if (f->dev) ACC_CHECK(acc__device_is_device_ptr(dev_of(f), src, &on_dev));
  if (!on_dev) {
    memmove(h_dst, src, n * sizeof(float)); /* may overlap: acc__fsdp_shard_in in place */
    return ACC_OK;
  }
  ACC_CHECK(acc__device_copy(dev_of(f), h_dst, src, n * sizeof(float), ACC__COPY_D2H, stream_of(f)));
  return acc__dstream_sync(dev_of(f), stream_of(f));
}

acc_result acc__fsdp_mem_axpy(acc_fsdp *f, float *dst, const float *src, size_t n, float a) {
  if (!n) return ACC_OK;
  if (!f->dev) {
    for (size_t i = 0; i < n; i++) dst[i] = acc__k_axpy(dst[i], src[i], a);
    return ACC_OK;
  }
  return acc__device_axpy(dev_of(f), dst, src, n, a, stream_of(f));
}

static acc_result scale_on(acc_fsdp *f, int on, float *p, size_t n, float coef) {
  if (!n || !(coef < 1.0f)) return ACC_OK;
  if (!on) {
    for (size_t i = 0; i < n; i++) p[i] *= coef;
    return ACC_OK;
  }
  /* the scale kernel reads its coefficient from device memory */
  if (!f->d_coef) ACC_CHECK(acc__device_alloc(dev_of(f), sizeof(float), (void **)&f->d_coef));
  ACC_CHECK(acc__device_copy(dev_of(f), f->d_coef, &coef, sizeof coef, ACC__COPY_H2D, stream_of(f)));
  ACC_CHECK(acc__device_scale(dev_of(f), p, n, f->d_coef, stream_of(f)));
  return acc__dstream_sync(dev_of(f), stream_of(f)); /* &coef is on this stack frame */
}

acc_result acc__fsdp_mem_narrow(acc_fsdp *f, void *dst, const float *src, size_t n, acc_dtype dtype) {
  if (!n) return ACC_OK;
  if (!f->dev) {
    acc__f32_to_half_n(dst, src, n, dtype);
    return ACC_OK;
  }
  return acc__device_cast(dev_of(f), dst, src, n, dtype, stream_of(f));
}

acc_result acc__fsdp_mem_widen(acc_fsdp *f, float *dst, const void *src, size_t n, acc_dtype dtype) {
  if (!n) return ACC_OK;
  if (!f->dev) {
    acc__half_to_f32_n(dst, src, n, dtype);
    return ACC_OK;
  }
  return acc__device_widen(dev_of(f), dst, src, n, dtype, stream_of(f));
}

static acc_result unscale_on(acc_fsdp *f, int on, float *p, size_t n, float inv, int *found) {
  if (!n) return ACC_OK;
  if (!on) {
    for (size_t i = 0; i < n; i++) {
      if (!acc__k_finite(p[i])) *found = 1;
      p[i] *= inv;
    }
    return ACC_OK;
  }
  if (!f->d_flag) ACC_CHECK(acc__device_alloc(dev_of(f), sizeof(int32_t), (void **)&f->d_flag));
  int32_t flag = 0;
  ACC_CHECK(acc__device_memset(dev_of(f), f->d_flag, 0, sizeof(int32_t), stream_of(f)));
  ACC_CHECK(acc__device_unscale(dev_of(f), p, n, inv, f->d_flag, stream_of(f)));
  ACC_CHECK(acc__device_copy(dev_of(f), &flag, f->d_flag, sizeof flag, ACC__COPY_D2H, stream_of(f)));
  ACC_CHECK(acc__dstream_sync(dev_of(f), stream_of(f))); /* &flag is on this stack frame */
  if (flag) *found = 1;
  return ACC_OK;
}

acc_result acc__fsdp_mem_poison(acc_fsdp *f, float *p, size_t n) {
  if (!n) return ACC_OK;
  if (!f->dev) {
    memset(p, 0xff, n * sizeof(float));
    return ACC_OK;
  }
  return acc__device_memset(dev_of(f), p, 0xff, n * sizeof(float), stream_of(f));
}

static size_t first_unpoisoned(const uint32_t *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (w[i] != 0xffffffffu) return i;
  return SIZE_MAX;
}

acc_result acc__fsdp_mem_poison_find(acc_fsdp *f, const float *p, size_t n, size_t *at) {
  *at = SIZE_MAX;
  if (!n) return ACC_OK;
  if (!f->dev) {
    *at = first_unpoisoned((const uint32_t *)(const void *)p, n);
    return ACC_OK;
  }
  size_t chunk = n < STAGE_ELEMS ? n : STAGE_ELEMS;
  uint32_t *h = NULL;
  ACC_CHECK(stage(f, (void **)&h));
  acc_result rc = ACC_OK;
  for (size_t off = 0; off < n && rc == ACC_OK && *at == SIZE_MAX; off += chunk) {
    size_t m = n - off < chunk ? n - off : chunk;
    rc = acc__device_copy(dev_of(f), h, p + off, m * sizeof *h, ACC__COPY_D2H, stream_of(f));
    if (rc == ACC_OK) rc = acc__dstream_sync(dev_of(f), stream_of(f));
    if (rc == ACC_OK) {
      size_t k = first_unpoisoned(h, m);
      if (k != SIZE_MAX) *at = off + k;
    }
  }
  return rc;
}

static void host_sumsq(const float *p, size_t n, double *sum) {
  for (size_t c = 0; c < n; c += ACC__NORM_CHUNK) {
    size_t end = c + ACC__NORM_CHUNK < n ? c + ACC__NORM_CHUNK : n;
    double s = 0.0;
    for (size_t k = c; k < end; k++) s += (double)p[k] * (double)p[k];
    *sum += s;
  }
}

static void host_max(const float *p, size_t n, double *max) {
  for (size_t i = 0; i < n; i++) {
    double v = fabs((double)p[i]);
    if (v > *max || isnan(v)) *max = v;
  }
}

static acc_result norm_on(acc_fsdp *f, int on, const float *p, size_t n, double *sum, double *max) {
  if (!n) return ACC_OK;
  if (!on) {
    if (max) host_max(p, n, max);
    else host_sumsq(p, n, sum);
    return ACC_OK;
  }
  if (max) { /* no max kernel: bounded host staging */
    size_t chunk = n < STAGE_ELEMS ? n : STAGE_ELEMS;
    float *h = NULL;
    ACC_CHECK(stage(f, (void **)&h));
    acc_result rc = ACC_OK;
    for (size_t off = 0; off < n && rc == ACC_OK; off += chunk) {
      size_t m = n - off < chunk ? n - off : chunk;
      rc = acc__device_copy(dev_of(f), h, p + off, m * sizeof *h, ACC__COPY_D2H, stream_of(f));
      if (rc == ACC_OK) rc = acc__dstream_sync(dev_of(f), stream_of(f));
      if (rc == ACC_OK) host_max(h, m, max);
    }
    return rc;
  }
  /* the partial sums on the device, read back (n / 4096 doubles) and added in order */
  size_t np = acc__norm_partials(n);
  if (np > f->d_partials_cap) {
    acc__device_free(dev_of(f), f->d_partials);
    f->d_partials = NULL;
    f->d_partials_cap = 0;
    ACC_CHECK(acc__device_alloc(dev_of(f), np * sizeof(double), (void **)&f->d_partials));
    f->d_partials_cap = np;
  }
  double *h = acc__malloc(np * sizeof *h);
  if (!h) return ACC_ERR_NOMEM;
  acc_result rc = acc__device_norm_partials(dev_of(f), p, n, f->d_partials, stream_of(f));
  if (rc == ACC_OK)
    rc = acc__device_copy(dev_of(f), h, f->d_partials, np * sizeof *h, ACC__COPY_D2H, stream_of(f));
  if (rc == ACC_OK) rc = acc__dstream_sync(dev_of(f), stream_of(f));
  for (size_t i = 0; i < np && rc == ACC_OK; i++) *sum += h[i];
  acc__free(h);
  return rc;
}

acc_result acc__fsdp_mem_enter(acc_fsdp *f) { return f->dev ? acc__dev_prog_enter(f->dev) : ACC_OK; }

acc_result acc__fsdp_mem_leave(acc_fsdp *f) { return f->dev ? acc__dev_prog_leave(f->dev) : ACC_OK; }

acc_result acc__fsdp_mem_sync(acc_fsdp *f) {
  return f->dev ? acc__dstream_sync(dev_of(f), stream_of(f)) : ACC_OK;
}

/* ---- the pool's side: memory of f's device when training on one -------------------------- */

acc_result acc__fsdp_mem_alloc(acc_fsdp *f, size_t n, float **out) { return alloc_on(f, f->dev != NULL, n, out); }
void acc__fsdp_mem_free(acc_fsdp *f, float *p) { free_on(f, f->dev != NULL, p); }
acc_result acc__fsdp_mem_zero(acc_fsdp *f, float *p, size_t n) { return zero_on(f, f->dev != NULL, p, n); }
acc_result acc__fsdp_mem_scale(acc_fsdp *f, float *p, size_t n, float coef) {
  return scale_on(f, f->dev != NULL, p, n, coef);
}
acc_result acc__fsdp_mem_unscale(acc_fsdp *f, float *p, size_t n, float inv, int *found) {
  return unscale_on(f, f->dev != NULL, p, n, inv, found);
}
acc_result acc__fsdp_mem_norm(acc_fsdp *f, const float *p, size_t n, double *sum, double *max) {
  return norm_on(f, f->dev != NULL, p, n, sum, max);
}

/* ---- the shards' side: host memory under offload_params, the pool's side otherwise -------- */

int acc__fsdp_shard_on_device(const acc_fsdp *f) { return shard_on_dev(f); }
acc_result acc__fsdp_shard_alloc(acc_fsdp *f, size_t n, float **out) { return alloc_on(f, shard_on_dev(f), n, out); }
void acc__fsdp_shard_free(acc_fsdp *f, float *p) { free_on(f, shard_on_dev(f), p); }
acc_result acc__fsdp_shard_zero(acc_fsdp *f, float *p, size_t n) { return zero_on(f, shard_on_dev(f), p, n); }
acc_result acc__fsdp_shard_scale(acc_fsdp *f, float *p, size_t n, float coef) {
  return scale_on(f, shard_on_dev(f), p, n, coef);
}
acc_result acc__fsdp_shard_unscale(acc_fsdp *f, float *p, size_t n, float inv, int *found) {
  return unscale_on(f, shard_on_dev(f), p, n, inv, found);
}
acc_result acc__fsdp_shard_norm(acc_fsdp *f, const float *p, size_t n, double *sum, double *max) {
  return norm_on(f, shard_on_dev(f), p, n, sum, max);
}

acc_result acc__fsdp_shard_in(acc_fsdp *f, float *dst, const float *src, size_t n) {
  if (shard_on_dev(f) || !f->dev) return acc__fsdp_mem_in(f, dst, src, n);
  /* a host shard: src may be memory of the device (the program's initial parameters) */
  return acc__fsdp_mem_out(f, dst, src, n);
}

acc_result acc__fsdp_shard_to_pool(acc_fsdp *f, void *dst, const float *src, size_t n, acc_dtype dtype) {
  if (shard_on_dev(f) || !f->dev) {
    if (dtype == ACC_F32) return acc__fsdp_mem_copy(f, dst, src, n);
    return acc__fsdp_mem_narrow(f, dst, src, n, dtype);
  }
  if (!n) return ACC_OK;
  if (dtype == ACC_F32) { /* the host shard read by the copy: done before the host may change it */
    ACC_CHECK(acc__device_copy(dev_of(f), dst, src, n * sizeof(float), ACC__COPY_H2D, stream_of(f)));
    return acc__dstream_sync(dev_of(f), stream_of(f));
  }
  /* 16-bit: rounded on the host (the bits of the device's cast kernel) into bounded staging, then
   * copied chunk by chunk */
  uint16_t *h = NULL;
  ACC_CHECK(stage(f, (void **)&h));
  const size_t chunk = 2 * STAGE_ELEMS; /* halves in the staging buffer */
  acc_result rc = ACC_OK;
  for (size_t off = 0; off < n && rc == ACC_OK; off += chunk) {
    size_t m = n - off < chunk ? n - off : chunk;
    acc__f32_to_half_n(h, src + off, m, dtype);
    rc = acc__device_copy(dev_of(f), (uint16_t *)dst + off, h, m * sizeof *h, ACC__COPY_H2D, stream_of(f));
    if (rc == ACC_OK) rc = acc__dstream_sync(dev_of(f), stream_of(f));
  }
  return rc;
}

acc_result acc__fsdp_shard_from_pool(acc_fsdp *f, float *dst, const float *src, size_t n) {
  if (shard_on_dev(f) || !f->dev) return acc__fsdp_mem_copy(f, dst, src, n);
  if (!n) return ACC_OK;
  ACC_CHECK(acc__device_copy(dev_of(f), dst, src, n * sizeof(float), ACC__COPY_D2H, stream_of(f)));
  return acc__dstream_sync(dev_of(f), stream_of(f));
}

acc_result acc__fsdp_shard_add(acc_fsdp *f, float *dst, const float *src, size_t n, float a) {
  if (shard_on_dev(f) || !f->dev) return acc__fsdp_mem_axpy(f, dst, src, n, a);
  if (!n) return ACC_OK;
  /* the pool's block read back through bounded staging, added on the host (the same two
   * roundings as the device's axpy kernel) */
  float *h = NULL;
  ACC_CHECK(stage(f, (void **)&h));
  acc_result rc = ACC_OK;
  for (size_t off = 0; off < n && rc == ACC_OK; off += STAGE_ELEMS) {
    size_t m = n - off < STAGE_ELEMS ? n - off : STAGE_ELEMS;
    rc = acc__device_copy(dev_of(f), h, src + off, m * sizeof *h, ACC__COPY_D2H, stream_of(f));
    if (rc == ACC_OK) rc = acc__dstream_sync(dev_of(f), stream_of(f));
    for (size_t i = 0; i < m && rc == ACC_OK; i++) dst[off + i] = acc__k_axpy(dst[off + i], h[i], a);
  }
  return rc;
}
