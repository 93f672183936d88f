/* Training on a device (train.h): the checks of prepare_model, the initial broadcast of process
 * 0's parameters, and the gradient averaging of the buckets of src/train/grad_sync.c.
 *
 * Two paths average a bucket:
 *   - host-staged (every device; the one that runs in CI on the fake device): the bucket's
 *     gradients are copied to a host staging buffer on the compute stream, the host waits for
 *     that copy (an event per bucket), the CPU backend all-reduces, the host multiplies by 1/N
 *     (the CPU path's arithmetic, so the bits are the same), and the result goes back on the
 *     compute stream. With grad_ready overlap this runs on grad_sync.c's reducer thread.
 *   - NCCL (CUDA with the module built with NCCL, more than one process, each process its own
 *     GPU): a communication stream waits for the compute stream (an event), all-reduces the
 *     bucket in place (a contiguous bucket) or through a device staging buffer, scales by 1/N
 *     with the scale kernel; at the end of the step the compute stream waits for an event
 *     recorded on the communication stream. No host synchronization. Compiled, never run.
 *     ACCELERATE_DEVICE_NCCL=always forces it (an error when it cannot be used), also at one
 *     process (a one-rank communicator: the GPU tests); never forces the host-staged path. On
 *     the strict fake device `always` takes the fake device's NCCL (device/fake_nccl.c: each
 *     all-reduce staged through host memory and the CPU backend, synchronously), so this path
 *     runs in CI; auto never picks it there.
 *
 * Nothing waits unbounded: the NCCL all-reduces are watched by the watchdog thread (watchdog.h:
 * completion, asynchronous error, dead peers, the collective timeout; on failure the
 * communicator is aborted and the next call here returns the error with the group broken), and
 * the host-staged path's waits for its device-to-host copies are bounded polls. */
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "core/env.h"
#include "state/state.h"
#include "train/accel.h"
#include "train/train.h"
#include "device/dcomm.h"
#include "device/watchdog.h"

struct acc__dev_gsync {
  acc__devctx *d;
  acc_state *st;
  acc_model *m;
  const size_t *order; /* borrowed from grad_sync.c */
  size_t n;
  size_t *prefix;      /* prefix[k]: elements of order[0..k) (n + 1 entries) */
  float *host;         /* host-staged: prefix[n] floats, each bucket its own range */
  acc__devent **ev;    /* host-staged: one per bucket (its device-to-host copy is done) */
  size_t nbuckets;
  float inv_world;
  /* NCCL */
  void *comm;
  acc__dstream *cstream;
  acc__devent *ev_compute, *ev_comm;
  float *d_staging; /* prefix[n] floats for buckets that are not contiguous */
  float *d_inv;     /* 1/N on the device, for the scale kernel */
  int used;         /* a bucket went through NCCL since the last finish */
  acc__watchdog *wd;
  acc__devent *wd_ev[64]; /* one per all-reduce in flight, reused round robin */
  uint64_t wd_seq[64];    /* the watchdog's number of the all-reduce each last marked */
  uint64_t wd_n;          /* all-reduces issued */
  /* a comm hook on host memory (PowerSGD): every bucket host-staged, then fn instead of the mean */
  acc__host_reduce_fn host_fn;
  void *host_ctx;
  float **hptr; /* n entries: where each gradient of the bucket lies in host */
};

enum { WD_EVENTS = 64 };

/* ---- prepare_model ------------------------------------------------------------------------ */

static acc_result check_ptr(acc__devctx *d, const acc_param *p, const void *ptr,
                            const char *what) {
  int yes = 0;
  ACC_CHECK(acc__device_is_device_ptr(d->dev, ptr, &yes));
  if (yes) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "prepare_model: parameter '%s': its %s (%p) is not memory of the device %s "
                    "this accelerator trains on; allocate parameters and gradients with "
                    "acc_accelerator_alloc (or cudaMalloc on a GPU) and copy initial values in "
                    "with acc_accelerator_memcpy",
                    p->name, what, ptr, acc__device_name(d->dev));
}

/* Process 0's parameters to every process: device -> host staging -> CPU backend -> device. */
static acc_result broadcast_parameters(acc__devctx *d, acc_state *st, acc_model *m) {
  size_t np = acc_model_num_parameters(m), total = acc_model_numel(m);
  if (acc_state_num_processes(st) == 1 || total == 0) return ACC_OK;
  float *h = acc__malloc(total * sizeof(float));
  if (!h) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  size_t off = 0;
  for (size_t i = 0; i < np && rc == ACC_OK; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    rc = acc__device_copy(d->dev, h + off, p->data, p->numel * sizeof(float), ACC__COPY_D2H,
                          d->stream);
    off += p->numel;
  }
  if (rc == ACC_OK) rc = acc__dstream_sync(d->dev, d->stream);
  /* in pieces of at most 16 Mi floats: one broadcast per piece */
  const size_t piece = (size_t)1 << 24;
  for (size_t at = 0; at < total && rc == ACC_OK; at += piece) {
    size_t n = total - at < piece ? total - at : piece;
    acc__comm_origin(ACC__ORIGIN_PREPARE, (int64_t)(at / piece));
    rc = acc_broadcast(st, h + at, n, ACC_F32, 0);
    if (rc != ACC_OK) rc = acc__error_context(rc, "prepare_model: broadcasting the parameters");
  }
  off = 0;
  for (size_t i = 0; i < np && rc == ACC_OK; i++) {
    const acc_param *p = acc_model_parameter(m, i);
    rc = acc__device_copy(d->dev, p->data, h + off, p->numel * sizeof(float), ACC__COPY_H2D,
                          d->stream);
    off += p->numel;
  }
  if (rc == ACC_OK) rc = acc__dstream_sync(d->dev, d->stream); /* h is freed next */
  acc__free(h);
  return rc;
}

acc_result acc__dev_prepare_model(acc_accelerator *acc, acc_model *m) {
  acc__devctx *d = acc->dev;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (!p->numel) continue;
    ACC_CHECK(check_ptr(d, p, p->data, "data"));
    if (p->grad) ACC_CHECK(check_ptr(d, p, p->grad, "gradient"));
  }
  return broadcast_parameters(d, acc->st, m);
}

/* ---- gradient averaging ------------------------------------------------------------------- */

/* The watchdog's view of the communicator (watchdog.h). */
static int wd_query(void *ctx, void *token, char *msg, size_t cap) {
  acc__dev_gsync *g = ctx;
  int done = 0;
  if (acc__devent_query(g->d->dev, token, &done) != ACC_OK) {
    snprintf(msg, cap, "%s", acc_last_error());
    return -1;
  }
  return done ? 1 : 0;
}

/* The communicator's asynchronous error, in the implementation's words (a module's last_error(),
 * else acc_last_error(): the built-in devices, the fake NCCL among them, set it themselves). */
static int wd_async_error(void *ctx, char *msg, size_t cap) {
  acc__dev_gsync *g = ctx;
  void *mctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(g->d->dev, &mctx);
  if (!ops->nccl_check || ops->nccl_check(mctx, g->comm) == ACC_OK) return 0;
  acc__device_module_error(ops, "unknown error", msg, cap);
  return 1;
}

static void wd_abort(void *ctx) {
  acc__dev_gsync *g = ctx;
  void *mctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(g->d->dev, &mctx);
  if (ops->nccl_abort) ops->nccl_abort(mctx, g->comm);
}

static int wd_peer(void *pctx, int *rank, int *pid, char *how, size_t cap) {
  return acc__state_peer_gone(pctx, rank, pid, how, cap);
}

/* nccl_check makes the communicator's GPU current in the calling thread */
static void wd_thread_start(void *ctx) {
  char msg[16];
  (void)wd_async_error(ctx, msg, sizeof msg);
}

static const acc__wd_ops wd_ops = {wd_query, wd_async_error, wd_abort, wd_thread_start};

/* ACCELERATE_DEVICE_NCCL: 0 auto, 1 always, 2 never. */
static acc_result nccl_mode(int *mode) {
  int set = 0;
  *mode = 0;
  return acc__env_enum("ACCELERATE_DEVICE_NCCL", mode, &set);
}

/* NCCL: CUDA, more than one process (or ACCELERATE_DEVICE_NCCL=always), the module built with
 * NCCL, and no two processes on one GPU (NCCL needs a GPU per rank). Every process of the group
 * is on CUDA here (the placement is the same everywhere), so the collectives below are
 * matched. */
static acc_result nccl_setup(acc__dev_gsync *g) {
  acc__devctx *d = g->d;
  int np = acc_state_num_processes(g->st), mode = 0;
  ACC_CHECK(nccl_mode(&mode));
  if (mode == 2) return ACC_OK;
  /* the fake device's NCCL stand-in (device/fake_nccl.c) only when asked for: always */
  if (d->type != ACC_DEVICE_CUDA && !(d->type == ACC_DEVICE_FAKE && mode == 1)) {
    if (mode == 1)
      return acc__error(ACC_ERR_NOT_SUPPORTED,
                        "ACCELERATE_DEVICE_NCCL=always: NCCL needs a CUDA device, this "
                        "accelerator trains on %s",
                        acc__device_name(d->dev));
    return ACC_OK;
  }
  if (np < 2 && mode != 1) return ACC_OK;
  void *ctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(d->dev, &ctx);
  int32_t usable = ops->nccl_init && ops->nccl_all_reduce && ops->nccl_abort ? 1 : 0;
  acc__comm_origin(ACC__ORIGIN_PREPARE, -2);
  ACC_CHECK(acc_all_reduce(g->st, &usable, &usable, 1, ACC_I32, ACC_MIN));
  if (!usable && mode == 1)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "ACCELERATE_DEVICE_NCCL=always: the CUDA module of a "
                      "process was built without NCCL");
  if (!usable) return ACC_OK; /* the host-staged path */
  uint8_t id[ACC__NCCL_ID_BYTES];
  /* two processes on one GPU (the bootstrap compares every process's PCI bus id and fails on
   * every process alike): auto falls back to host staging, always keeps the error */
  acc_result brc = acc__device_nccl_bootstrap_id(g->st, id);
  if (brc == ACC_ERR_INVALID_USAGE && mode != 1) {
    acc_clear_error();
    return ACC_OK;
  }
  ACC_CHECK(brc);
  double timeout = acc_state_timeout(g->st);
  acc__dcomm_bind(g->st, d->dev); /* the fake device's communicator spans this job */
  int r = ops->nccl_init(ctx, &g->comm, np, acc_state_process_index(g->st), id,
                         timeout > 0 ? timeout : 600.0);
  acc__dcomm_bind(NULL, NULL);
  if (r != ACC_OK) {
    g->comm = NULL;
    char m[512];
    return acc__error((acc_result)r, "%s: NCCL communicator: %s", acc__device_name(d->dev),
                      acc__device_module_error(ops, "init failed", m, sizeof m));
  }
  size_t total = g->prefix[g->n];
  ACC_CHECK(acc__dstream_create(d->dev, &g->cstream));
  ACC_CHECK(acc__devent_create(d->dev, &g->ev_compute));
  ACC_CHECK(acc__devent_create(d->dev, &g->ev_comm));
  for (int k = 0; k < WD_EVENTS; k++) ACC_CHECK(acc__devent_create(d->dev, &g->wd_ev[k]));
  ACC_CHECK(acc__device_alloc(d->dev, sizeof(float), (void **)&g->d_inv));
  if (total) ACC_CHECK(acc__device_alloc(d->dev, total * sizeof(float), (void **)&g->d_staging));
  ACC_CHECK(acc__device_copy(d->dev, g->d_inv, &g->inv_world, sizeof(float), ACC__COPY_H2D,
                             d->stream));
  ACC_CHECK(acc__dstream_sync(d->dev, d->stream));
  acc__wd_config wc = {&wd_ops, g, wd_peer, g->st, g->st, "NCCL",
                       acc_state_process_index(g->st), np, timeout > 0 ? timeout : 1800.0,
                       0, 0, 0};
  return acc__watchdog_start(&g->wd, &wc);
}

acc_result acc__dev_gsync_create(acc__dev_gsync **out, acc__devctx *d, acc_state *st,
                                 acc_model *m, const size_t *order, size_t n, size_t nbuckets) {
  *out = NULL;
  acc__dev_gsync *g = acc__calloc(1, sizeof *g);
  if (!g) return ACC_ERR_NOMEM;
  g->d = d;
  g->st = st;
  g->m = m;
  g->order = order;
  g->n = n;
  g->nbuckets = nbuckets;
  g->inv_world = 1.0f / (float)acc_state_num_processes(st);
  g->prefix = acc__calloc(n + 1, sizeof *g->prefix);
  g->ev = acc__calloc(nbuckets ? nbuckets : 1, sizeof *g->ev);
  acc_result rc = g->prefix && g->ev ? ACC_OK : ACC_ERR_NOMEM;
  for (size_t k = 0; rc == ACC_OK && k < n; k++)
    g->prefix[k + 1] = g->prefix[k] + acc_model_parameter(m, order[k])->numel;
  int mode = 0;
  if (rc == ACC_OK) rc = nccl_mode(&mode);
  if (rc == ACC_OK && (acc_state_num_processes(st) > 1 || mode == 1)) {
    rc = nccl_setup(g);
    if (rc == ACC_OK && !g->comm) {
      /* page-locked on CUDA, so the bucket copies are asynchronous DMA */
      if (g->prefix[n])
        rc = acc__device_host_alloc(d->dev, g->prefix[n] * sizeof(float), (void **)&g->host);
      for (size_t b = 0; rc == ACC_OK && b < nbuckets; b++)
        rc = acc__devent_create(d->dev, &g->ev[b]);
    }
  }
  if (rc != ACC_OK) {
    acc__dev_gsync_free(g);
    return rc;
  }
  *out = g;
  return ACC_OK;
}

void acc__dev_gsync_free(acc__dev_gsync *g) {
  if (!g) return;
  acc__device *dev = g->d->dev;
  /* the watchdog still runs here: a dead peer aborts what these waits would wait for */
  acc__dstream_sync(dev, g->d->stream);
  if (g->cstream) acc__dstream_sync(dev, g->cstream);
  acc__watchdog_stop(g->wd);
  for (int k = 0; k < WD_EVENTS; k++) acc__devent_destroy(dev, g->wd_ev[k]);
  if (g->comm) {
    void *ctx = NULL;
    const acc__device_ops *ops = acc__device_ops_of(dev, &ctx);
    ops->nccl_destroy(ctx, g->comm, 0);
  }
  for (size_t b = 0; g->ev && b < g->nbuckets; b++) acc__devent_destroy(dev, g->ev[b]);
  acc__devent_destroy(dev, g->ev_compute);
  acc__devent_destroy(dev, g->ev_comm);
  acc__device_free(dev, g->d_staging);
  acc__device_free(dev, g->d_inv);
  if (g->cstream) acc__dstream_destroy(dev, g->cstream);
  acc__free(g->ev);
  acc__free(g->prefix);
  acc__free(g->hptr);
  acc__device_host_free(dev, g->host);
  acc__free(g);
}

int acc__dev_gsync_uses_nccl(const acc__dev_gsync *g) { return g && g->comm; }

static acc_result nccl_bucket(acc__dev_gsync *g, size_t bucket, size_t first, size_t count,
                              size_t numel, float *inplace) {
  acc__devctx *d = g->d;
  void *ctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(d->dev, &ctx);
  /* the communication stream starts after the backward work queued so far */
  ACC_CHECK(acc__devent_record(d->dev, g->ev_compute, d->stream));
  ACC_CHECK(acc__dstream_wait(d->dev, g->cstream, g->ev_compute));
  float *buf = inplace;
  if (!buf) {
    buf = g->d_staging + g->prefix[first];
    for (size_t k = first, off = 0; k < first + count; k++) {
      const acc_param *p = acc_model_parameter(g->m, g->order[k]);
      ACC_CHECK(acc__device_copy(d->dev, buf + off, p->grad, p->numel * sizeof(float),
                                 ACC__COPY_D2D, g->cstream));
      off += p->numel;
    }
  }
  /* the event that marks this all-reduce for the watchdog: its previous use must be over */
  size_t slot = (size_t)(g->wd_n % WD_EVENTS);
  if (g->wd_seq[slot]) ACC_CHECK(acc__watchdog_wait(g->wd, g->wd_seq[slot]));
  ACC_CHECK(acc__watchdog_begin(g->wd)); /* the recorded failure, else holds the lock */
  int r = ops->nccl_all_reduce(ctx, g->comm, buf, buf, numel, (int)ACC_F32, (int)ACC_SUM,
                               g->cstream);
  if (r != ACC_OK) {
    acc__watchdog_cancel(g->wd);
    char m[512];
    acc_result rc = acc__error((acc_result)r, "gradient bucket %zu: NCCL all-reduce on rank %d: %s",
                               bucket, acc_state_process_index(g->st),
                               acc__device_module_error(ops, "failed", m, sizeof m));
    acc__state_mark_broken(g->st, acc_last_error());
    return rc;
  }
  acc_result rc = acc__devent_record(d->dev, g->wd_ev[slot], g->cstream);
  if (rc != ACC_OK) {
    acc__watchdog_cancel(g->wd);
    return rc;
  }
  char detail[64];
  snprintf(detail, sizeof detail, "gradient bucket %zu", bucket);
  ACC_CHECK(acc__watchdog_push(g->wd, g->wd_ev[slot], "all_reduce", detail, &g->wd_seq[slot]));
  g->wd_n++;
  ACC_CHECK(acc__device_scale(d->dev, buf, numel, g->d_inv, g->cstream));
  if (!inplace)
    for (size_t k = first, off = 0; k < first + count; k++) {
      const acc_param *p = acc_model_parameter(g->m, g->order[k]);
      ACC_CHECK(acc__device_copy(d->dev, p->grad, buf + off, p->numel * sizeof(float),
                                 ACC__COPY_D2D, g->cstream));
      off += p->numel;
    }
  g->used = 1;
  return ACC_OK;
}

typedef struct staged_q {
  acc__dev_gsync *g;
  acc__devent *ev;
  acc_result rc;
} staged_q;

static int staged_query(void *ctx) {
  staged_q *q = ctx;
  int done = 0;
  q->rc = acc__devent_query(q->g->d->dev, q->ev, &done);
  return q->rc != ACC_OK ? -1 : done;
}

/* The host-staged path's wait for a bucket's device-to-host copy: bounded by the collective
 * timeout (a device that never finishes the backward work queued before the copy would
 * otherwise hang this process while its peers wait in the all-reduce). */
static acc_result staged_wait(acc__dev_gsync *g, size_t bucket) {
  staged_q q = {g, g->ev[bucket], ACC_OK};
  double timeout = acc_state_timeout(g->st);
  if (!(timeout > 0)) timeout = 1800.0;
  acc_result rc = acc__wd_poll(staged_query, &q, timeout);
  if (rc == ACC_OK) return ACC_OK;
  if (q.rc != ACC_OK) return q.rc;
  rc = acc__error(ACC_ERR_TIMEOUT,
                  "gradient bucket %zu on rank %d: the device %s did not finish the work queued "
                  "before the bucket's device-to-host copy in %g s (ACCELERATE_TIMEOUT): the "
                  "device is stuck or a kernel does not end",
                  bucket, acc_state_process_index(g->st), acc__device_name(g->d->dev), timeout);
  acc__state_mark_broken(g->st, acc_last_error());
  return rc;
}

acc_result acc__dev_gsync_set_host_reducer(acc__dev_gsync *g, acc__host_reduce_fn fn, void *ctx) {
  if (!g || g->inv_world == 1.0f) return ACC_OK; /* one process: the buckets are left alone */
  acc__devctx *d = g->d;
  if (!g->hptr) g->hptr = acc__calloc(g->n ? g->n : 1, sizeof *g->hptr);
  if (!g->hptr) return ACC_ERR_NOMEM;
  /* the NCCL path has no host staging of its own: the hook's buckets need one */
  if (!g->host && g->prefix[g->n])
    ACC_CHECK(acc__device_host_alloc(d->dev, g->prefix[g->n] * sizeof(float), (void **)&g->host));
  for (size_t b = 0; b < g->nbuckets; b++)
    if (!g->ev[b]) ACC_CHECK(acc__devent_create(d->dev, &g->ev[b]));
  g->host_fn = fn;
  g->host_ctx = ctx;
  return ACC_OK;
}

acc_result acc__dev_gsync_bucket(acc__dev_gsync *g, size_t bucket, size_t first, size_t count,
                                 size_t numel, float *inplace) {
  if (g->wd) ACC_CHECK(acc__watchdog_check(g->wd));
  if (numel == 0 || (g->inv_world == 1.0f && (!g->comm || g->host_fn))) return ACC_OK;
  if (g->comm && !g->host_fn) return nccl_bucket(g, bucket, first, count, numel, inplace);
  acc__devctx *d = g->d;
  float *h = g->host + g->prefix[first];
  if (inplace) {
    ACC_CHECK(acc__device_copy(d->dev, h, inplace, numel * sizeof(float), ACC__COPY_D2H,
                               d->stream));
  } else {
    for (size_t k = first, off = 0; k < first + count; k++) {
      const acc_param *p = acc_model_parameter(g->m, g->order[k]);
      ACC_CHECK(acc__device_copy(d->dev, h + off, p->grad, p->numel * sizeof(float),
                                 ACC__COPY_D2H, d->stream));
      off += p->numel;
    }
  }
  ACC_CHECK(acc__devent_record(d->dev, g->ev[bucket], d->stream));
  ACC_CHECK(staged_wait(g, bucket));
  if (g->host_fn) { /* the hook on the staged gradients, laid out as in device memory */
    for (size_t k = first, off = 0; k < first + count; k++) {
      const acc_param *p = acc_model_parameter(g->m, g->order[k]);
      g->hptr[k - first] = inplace ? h + ((const float *)p->grad - inplace) : h + off;
      off += p->numel;
    }
    ACC_CHECK(g->host_fn(g->host_ctx, g->order + first, count, g->hptr));
  } else {
    acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, (int64_t)bucket);
    ACC_CHECK(acc_all_reduce(g->st, h, h, numel, ACC_F32, ACC_SUM));
    for (size_t i = 0; i < numel; i++) h[i] = h[i] * g->inv_world; /* as the CPU path */
  }
  if (inplace)
    return acc__device_copy(d->dev, inplace, h, numel * sizeof(float), ACC__COPY_H2D, d->stream);
  for (size_t k = first, off = 0; k < first + count; k++) {
    const acc_param *p = acc_model_parameter(g->m, g->order[k]);
    ACC_CHECK(acc__device_copy(d->dev, p->grad, h + off, p->numel * sizeof(float), ACC__COPY_H2D,
                               d->stream));
    off += p->numel;
  }
  return ACC_OK;
}

acc_result acc__dev_gsync_finish(acc__dev_gsync *g) {
  if (!g || !g->comm) return ACC_OK;
  ACC_CHECK(acc__watchdog_check(g->wd));
  if (!g->used) return ACC_OK;
  g->used = 0;
  ACC_CHECK(acc__devent_record(g->d->dev, g->ev_comm, g->cstream));
  return acc__dstream_wait(g->d->dev, g->d->stream, g->ev_comm);
}
