/* Host staging of device buffers for the CPU collectives (devio.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "device/devio.h"

#define MAX_DEVS 16

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static acc__devctx *reg[MAX_DEVS];
static atomic_int reg_count;

static const acc__stage_ops stage_ops = {acc__devio_begin, acc__devio_end};

acc_result acc__devio_register(acc__devctx *d) {
  if (!acc__devctx_offhost(d)) return ACC_OK;
  acc__comm_set_stage_ops(&stage_ops); /* the collectives stage device buffers from now on */
  acc_result rc = ACC_OK;
  pthread_mutex_lock(&reg_mu);
  int n = atomic_load_explicit(&reg_count, memory_order_relaxed);
  if (n == MAX_DEVS)
    rc = acc__error(ACC_ERR_INVALID_USAGE,
                    "at most %d accelerators training on a device may live at once in a process",
                    MAX_DEVS);
  else {
    reg[n] = d;
    atomic_store_explicit(&reg_count, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&reg_mu);
  return rc;
}

void acc__devio_unregister(acc__devctx *d) {
  if (!d) return;
  pthread_mutex_lock(&reg_mu);
  int n = atomic_load_explicit(&reg_count, memory_order_relaxed);
  for (int i = 0; i < n; i++)
    if (reg[i] == d) {
      reg[i] = reg[n - 1];
      reg[n - 1] = NULL;
      atomic_store_explicit(&reg_count, n - 1, memory_order_release);
      break;
    }
  pthread_mutex_unlock(&reg_mu);
}

acc__devctx *acc__devio_find(const void *p) {
  if (!p || atomic_load_explicit(&reg_count, memory_order_acquire) == 0) return NULL;
  acc__devctx *found = NULL;
  pthread_mutex_lock(&reg_mu);
  int n = atomic_load_explicit(&reg_count, memory_order_relaxed);
  for (int i = 0; i < n && !found; i++) {
    int yes = 0;
    if (acc__device_is_device_ptr(reg[i]->dev, p, &yes) == ACC_OK && yes) found = reg[i];
  }
  pthread_mutex_unlock(&reg_mu);
  return found;
}

/* A copy on d's compute stream, waited for. */
static acc_result copy_sync(acc__devctx *d, void *dst, const void *src, size_t bytes,
                            acc__copy_kind kind) {
  ACC_CHECK(acc__device_copy(d->dev, dst, src, bytes, kind, d->stream));
  return acc__dstream_sync(d->dev, d->stream);
}

acc_result acc__devio_to_host(void *dst, const void *src, size_t bytes) {
  if (!bytes) return ACC_OK;
  acc__devctx *d = acc__devio_find(src);
  if (!d) {
    memcpy(dst, src, bytes);
    return ACC_OK;
  }
  return copy_sync(d, dst, src, bytes, ACC__COPY_D2H);
}

acc_result acc__devio_from_host(void *dst, const void *src, size_t bytes) {
  if (!bytes) return ACC_OK;
  acc__devctx *d = acc__devio_find(dst);
  if (!d) {
    memcpy(dst, src, bytes);
    return ACC_OK;
  }
  return copy_sync(d, dst, src, bytes, ACC__COPY_H2D);
}

static acc_result stage_in(acc__devctx *d, const void *dev, size_t bytes, int copy,
                           void **host) {
  ACC_CHECK(acc__device_host_alloc(d->dev, bytes, host));
  if (!copy) return ACC_OK;
  acc_result rc = copy_sync(d, *host, dev, bytes, ACC__COPY_D2H);
  if (rc != ACC_OK) {
    acc__device_host_free(d->dev, *host);
    *host = NULL;
  }
  return rc;
}

acc_result acc__devio_begin(acc__devio *io, const void *a, size_t a_bytes, int copy_a, void *b,
                            size_t b_bytes, int copy_b_in) {
  memset(io, 0, sizeof *io);
  io->a = a;
  io->b = b;
  if (atomic_load_explicit(&reg_count, memory_order_acquire) == 0) return ACC_OK;
  io->da = a_bytes ? acc__devio_find(a) : NULL;
  io->db = b_bytes ? acc__devio_find(b) : NULL;
  if (!io->da && !io->db) return ACC_OK;
  const uint8_t *pa = a, *pb = b;
  if (io->da && io->db == io->da && pb >= pa && pb + b_bytes <= pa + a_bytes) {
    /* b inside a (a reduce_scatter's in-place form, a == b): one host buffer */
    io->b_in_a = 1;
    copy_a = 1;
  } else if (io->da && io->db == io->da && pa >= pb && pa + a_bytes <= pb + b_bytes) {
    /* a inside b (an all_gather's in-place form): stage b whole, with its current contents */
    io->dev_b = b;
    io->b_bytes = b_bytes;
    ACC_CHECK(stage_in(io->db, b, b_bytes, 1, &io->host_b));
    io->b = io->host_b;
    io->a = (const uint8_t *)io->host_b + (pa - pb);
    io->da = NULL;
    return ACC_OK;
  }
  if (io->da) {
    io->dev_a = a;
    io->a_bytes = a_bytes;
    ACC_CHECK(stage_in(io->da, a, a_bytes, copy_a, &io->host_a));
    io->a = io->host_a;
  }
  if (io->b_in_a) {
    io->dev_b = b;
    io->b_bytes = b_bytes;
    io->b = (uint8_t *)io->host_a + (pb - pa);
    return ACC_OK;
  }
  if (io->db) {
    io->dev_b = b;
    io->b_bytes = b_bytes;
    acc_result rc = stage_in(io->db, b, b_bytes, copy_b_in, &io->host_b);
    if (rc != ACC_OK) return acc__devio_end(io, rc, 0);
    io->b = io->host_b;
  }
  return ACC_OK;
}

acc_result acc__devio_end(acc__devio *io, acc_result rc, int copy_b_out) {
  if (rc == ACC_OK && copy_b_out && io->dev_b) {
    acc__devctx *d = io->db;
    rc = copy_sync(d, io->dev_b, io->b, io->b_bytes, ACC__COPY_H2D);
  }
  if (io->host_a) acc__device_host_free(io->da->dev, io->host_a);
  if (io->host_b) acc__device_host_free(io->db->dev, io->host_b);
  io->host_a = io->host_b = NULL;
  io->dev_b = NULL;
  return rc;
}
