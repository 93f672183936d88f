/* The public device functions of accelerator.h (the accelerator's device context: device/devctx.h). */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/log.h"
#include "train/accel.h"
#include "device/devio.h"

/* The device of a valid accelerator handle; an invalid one is an error naming fn. */
static acc_result dev_or_error(const acc_accelerator *acc, const char *fn, acc__devctx **d) {
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  *d = acc->dev;
  return ACC_OK;
}

/* The same for the functions that return a value: NULL for an invalid handle. */
static acc__devctx *dev_of(const acc_accelerator *acc, const char *fn) {
  acc__devctx *d = NULL;
  return dev_or_error(acc, fn, &d) == ACC_OK ? d : NULL;
}

acc_device_type acc_accelerator_device_type(const acc_accelerator *acc) {
  acc__devctx *d = dev_of(acc, "acc_accelerator_device_type");
  return d ? d->type : ACC_DEVICE_CPU;
}

const char *acc_accelerator_device_name(const acc_accelerator *acc) {
  acc__devctx *d = dev_of(acc, "acc_accelerator_device_name");
  if (!d || d->type == ACC_DEVICE_CPU) return "cpu";
  return acc__device_name(d->dev);
}

int acc_accelerator_device_index(const acc_accelerator *acc) {
  acc__devctx *d = dev_of(acc, "acc_accelerator_device_index");
  return d && d->type != ACC_DEVICE_CPU ? d->where.ordinal : -1;
}

void *acc_accelerator_stream(const acc_accelerator *acc) {
  acc__devctx *d = dev_of(acc, "acc_accelerator_stream");
  return d ? (void *)d->stream : NULL;
}

acc_result acc_accelerator_synchronize(acc_accelerator *acc) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_synchronize", &d));
  return acc__dstream_sync(d->dev, d->stream);
}

acc_result acc_accelerator_alloc(acc_accelerator *acc, size_t bytes, void **out) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_alloc", &d));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_alloc: out is NULL");
  *out = NULL;
  if (bytes == 0) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_alloc: 0 bytes");
  void *p = NULL;
  ACC_CHECK(acc__device_alloc(d->dev, bytes, &p));
  acc_result rc = acc__device_memset(d->dev, p, 0, bytes, d->stream);
  if (rc == ACC_OK) rc = acc__dstream_sync(d->dev, d->stream);
  if (rc != ACC_OK) {
    acc__device_free(d->dev, p);
    return rc;
  }
  *out = p;
  return ACC_OK;
}

acc_result acc_accelerator_alloc_shared(acc_accelerator *acc, size_t bytes, void **out) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_alloc_shared", &d));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_alloc_shared: out is NULL");
  *out = NULL;
  if (bytes == 0) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_alloc_shared: 0 bytes");
  if (acc__devctx_offhost(d)) return acc_accelerator_alloc(acc, bytes, out); /* NCCL reads it */
  void *p = NULL;
  acc_result rc = acc__comm_alloc_shared(acc->st, bytes, &p); /* zeroed; NULL: nothing to share */
  if (rc == ACC_ERR_NOMEM || rc == ACC_ERR_SYSTEM) {
    /* failed on every process alike (the group is intact): ordinary memory, only slower */
    acc__log(ACC_LOG_WARNING, "acc_accelerator_alloc_shared: %s; using ordinary memory instead (the "
             "all-reduce then copies through the backend)", acc_last_error());
    rc = ACC_OK;
  }
  ACC_CHECK(rc);
  if (!p) return acc_accelerator_alloc(acc, bytes, out);
  *out = p;
  return ACC_OK;
}

acc_result acc_accelerator_free(acc_accelerator *acc, void *p) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_free", &d));
  if (!p) return ACC_OK;
  if (!acc__devctx_offhost(d) && acc__comm_free_shared(acc->st, p)) return ACC_OK;
  ACC_CHECK(acc__dstream_sync(d->dev, d->stream)); /* no queued work may still use it */
  return acc__device_free(d->dev, p);
}

acc_result acc_accelerator_memcpy(acc_accelerator *acc, void *dst, const void *src, size_t bytes,
                                  acc_copy_kind kind) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_memcpy", &d));
  if (kind < ACC_COPY_HOST_TO_DEVICE || kind > ACC_COPY_DEVICE_TO_DEVICE)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_memcpy: unknown copy kind %d",
                      (int)kind);
  if (bytes == 0) return ACC_OK;
  if (!dst || !src)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_memcpy: %s is NULL",
                      dst ? "src" : "dst");
  ACC_CHECK(acc__device_copy(d->dev, dst, src, bytes, (acc__copy_kind)kind, d->stream));
  return acc__dstream_sync(d->dev, d->stream);
}

acc_result acc_accelerator_host_kernel(acc_accelerator *acc, void (*fn)(void *), void *arg) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_host_kernel", &d));
  if (!fn) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_host_kernel: fn is NULL");
  return acc__device_host_kernel(d->dev, fn, arg);
}

int acc_accelerator_is_device_pointer(acc_accelerator *acc, const void *p) {
  acc__devctx *d = dev_of(acc, "acc_accelerator_is_device_pointer");
  if (!d || !p) return 0;
  int yes = 0;
  if (acc__device_is_device_ptr(d->dev, p, &yes) != ACC_OK) return 0;
  return yes;
}

acc_result acc_accelerator_cast(acc_accelerator *acc, uint16_t *dst, const float *src, size_t n,
                                acc_dtype dtype) {
  acc__devctx *d = NULL;
  ACC_CHECK(dev_or_error(acc, "acc_accelerator_cast", &d));
  if (dtype != ACC_BF16 && dtype != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_accelerator_cast: dtype %s is not supported (expected bf16 or f16)",
                      acc_dtype_name(dtype));
  if (n == 0) return ACC_OK;
  if (!dst || !src)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_cast: %s is NULL",
                      dst ? "src" : "dst");
  const char *lo = (const char *)src, *hi = lo + n * sizeof(float);
  const char *dlo = (const char *)dst, *dhi = dlo + n * sizeof(uint16_t);
  if (dlo < hi && lo < dhi)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_accelerator_cast: dst and src overlap");
  if (d->type == ACC_DEVICE_CPU)
    return dtype == ACC_BF16 ? acc_f32_to_bf16(dst, src, n) : acc_f32_to_f16(dst, src, n);
  return acc__device_cast(d->dev, dst, src, n, dtype, d->stream);
}
