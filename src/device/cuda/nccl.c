/* NCCL inside the CUDA module: communicator creation with a deadline, all-reduce on a stream, and
 * a wait that polls the communicator's asynchronous error and aborts on error or timeout, so a
 * dead or stalled peer never hangs the caller.
 *
 * All-gather and reduce-scatter (device ABI 8) are FSDP's (src/device/dcomm.c).
 *
 * COMPILED ONLY: apart from acc__nccl_unique_id and ncclGetVersion (which need no driver), none of
 * this has run; it has never run on a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/cuda/cuda_module.h"

#ifndef ACC_CUDA_HAVE_NCCL

int acc__cuda_nccl_version(void) { return 0; }

#else

#include <nccl.h>

typedef struct nccl_comm {
  ncclComm_t comm;
  int rank, nranks;
  double timeout_s; /* init's: bounds the wait for an enqueue that returned ncclInProgress */
} nccl_comm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int acc__cuda_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

static int nccl_fail(ncclResult_t r, ncclComm_t comm, const char *what) {
  const char *detail = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
  int rc = r == ncclInvalidArgument || r == ncclInvalidUsage ? ACC_ERR_INVALID_ARGUMENT
           : r == ncclSystemError                            ? ACC_ERR_SYSTEM
                                                             : ACC_ERR_BACKEND;
  return acc__cuda_fail(rc, "%s: %s%s%s (set NCCL_DEBUG=WARN for NCCL's own report)", what,
                        ncclGetErrorString(r), detail && *detail ? ": " : "",
                        detail ? detail : "");
}

int acc__nccl_unique_id(uint8_t id[ACC__NCCL_ID_BYTES]) {
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) return nccl_fail(r, NULL, "ncclGetUniqueId");
  memcpy(id, u.internal, ACC__NCCL_ID_BYTES);
  return ACC_OK;
}

/* Polls a non-blocking communicator until its state leaves ncclInProgress or the deadline. */
static ncclResult_t poll_state(ncclComm_t c, double deadline, int *timed_out) {
  ncclResult_t st = ncclInProgress;
  *timed_out = 0;
  for (;;) {
    ncclResult_t r = ncclCommGetAsyncError(c, &st);
    if (r != ncclSuccess) return r;
    if (st != ncclInProgress) return st;
    if (now_s() > deadline) {
      *timed_out = 1;
      return ncclInProgress;
    }
    sched_yield();
  }
}

int acc__nccl_init(void *ctx, void **out, int nranks, int rank,
                   const uint8_t id[ACC__NCCL_ID_BYTES], double timeout_s) {
  acc__cuda_ctx *c = ctx;
  int v = acc__cuda_nccl_version();
  if (v < 21403)
    return acc__cuda_fail(ACC_ERR_NOT_SUPPORTED,
                          "NCCL %d is too old: non-blocking communicators need NCCL 2.14.3 or "
                          "newer",
                          v);
  ACC_CHECK((acc_result)acc__cuda_check(cudaSetDevice(c->dev), "cudaSetDevice"));
  nccl_comm *nc = calloc(1, sizeof *nc);
  if (!nc) return acc__cuda_fail(ACC_ERR_NOMEM, "out of host memory");
  ncclUniqueId u;
  memcpy(u.internal, id, ACC__NCCL_ID_BYTES);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  double deadline = now_s() + timeout_s;
  ncclResult_t r = ncclCommInitRankConfig(&nc->comm, nranks, u, rank, &cfg);
  int timed_out = 0;
  if (r == ncclInProgress || (r == ncclSuccess && nc->comm))
    r = poll_state(nc->comm, deadline, &timed_out);
  if (r != ncclSuccess || timed_out) {
    int rc = timed_out ? acc__cuda_fail(ACC_ERR_TIMEOUT,
                                        "NCCL communicator of rank %d of %d not ready after %g s "
                                        "(a peer did not join); aborted",
                                        rank, nranks, timeout_s)
                       : nccl_fail(r, nc->comm, "ncclCommInitRankConfig");
    if (nc->comm) ncclCommAbort(nc->comm);
    free(nc);
    return rc;
  }
  nc->rank = rank;
  nc->nranks = nranks;
  nc->timeout_s = timeout_s;
  *out = nc;
  return ACC_OK;
}

static int map_dtype(int dtype, ncclDataType_t *t) {
  switch (dtype) {
    case ACC_F32: *t = ncclFloat32; return 1;
    case ACC_F64: *t = ncclFloat64; return 1;
    case ACC_F16: *t = ncclFloat16; return 1;
    case ACC_BF16: *t = ncclBfloat16; return 1;
    case ACC_I32: *t = ncclInt32; return 1;
    case ACC_I64: *t = ncclInt64; return 1;
    case ACC_U8: *t = ncclUint8; return 1;
    case ACC_U64: *t = ncclUint64; return 1;
    default: return 0;
  }
}

/* What every collective checks first: a live communicator and a dtype NCCL has (*t). */
static int prelude(const nccl_comm *nc, int dtype, const char *what, ncclDataType_t *t) {
  if (!nc->comm)
    return acc__cuda_fail(ACC_ERR_INVALID_USAGE,
                          "the NCCL communicator was aborted by an earlier error");
  if (!map_dtype(dtype, t))
    return acc__cuda_fail(ACC_ERR_INVALID_ARGUMENT, "NCCL %s: unknown dtype %d", what, dtype);
  return ACC_OK;
}

/* MEAN is ncclAvg: for floating types NCCL multiplies by 1/nranks in the element type, which
 * differs in rounding from the CPU backends' sum-then-divide. */
static ncclRedOp_t map_op(int op) {
  return op == ACC_SUM ? ncclSum : op == ACC_MEAN ? ncclAvg : op == ACC_MIN ? ncclMin : ncclMax;
}

/* The end of an enqueue. A failed one aborts the communicator (its later calls fail). On a
 * non-blocking communicator a collective may return ncclInProgress before its work is on the
 * stream (NCCL finishes the launch in the background, e.g. while it connects peers for the first
 * time); nothing else may be queued on that stream until the communicator's state leaves
 * ncclInProgress. So this polls it (bounded by the communicator's timeout): when a collective
 * returns ACC_OK its work is on the stream, and what the caller queues next (an event for the
 * watchdog, the scale kernel) comes after it. */
static int enqueued(nccl_comm *nc, ncclResult_t r, const char *what) {
  int timed_out = 0;
  if (r == ncclInProgress) r = poll_state(nc->comm, now_s() + nc->timeout_s, &timed_out);
  if (r == ncclSuccess && !timed_out) return ACC_OK;
  int rc = timed_out ? acc__cuda_fail(ACC_ERR_TIMEOUT,
                                      "%s on rank %d of %d: not launched after %g s (NCCL was still "
                                      "connecting to a peer that is dead or stalled); communicator "
                                      "aborted",
                                      what, nc->rank, nc->nranks, nc->timeout_s)
                     : nccl_fail(r, nc->comm, what);
  ncclCommAbort(nc->comm);
  nc->comm = NULL;
  return rc;
}

int acc__nccl_all_reduce(void *ctx, void *comm, const void *send, void *recv, size_t count,
                         int dtype, int op, void *s) {
  nccl_comm *nc = comm;
  ncclDataType_t t = ncclFloat32;
  (void)ctx;
  int rc = prelude(nc, dtype, "all_reduce", &t);
  if (rc != ACC_OK) return rc;
  return enqueued(nc, ncclAllReduce(send, recv, count, t, map_op(op), nc->comm, (cudaStream_t)s),
                  "ncclAllReduce");
}

/* In place when send is this rank's block of recv (NCCL's in-place rule). */
int acc__nccl_all_gather(void *ctx, void *comm, const void *send, void *recv, size_t count,
                         int dtype, void *s) {
  nccl_comm *nc = comm;
  ncclDataType_t t = ncclFloat32;
  (void)ctx;
  int rc = prelude(nc, dtype, "all_gather", &t);
  if (rc != ACC_OK) return rc;
  return enqueued(nc, ncclAllGather(send, recv, count, t, nc->comm, (cudaStream_t)s),
                  "ncclAllGather");
}

int acc__nccl_reduce_scatter(void *ctx, void *comm, const void *send, void *recv, size_t count,
                             int dtype, int op, void *s) {
  nccl_comm *nc = comm;
  ncclDataType_t t = ncclFloat32;
  (void)ctx;
  int rc = prelude(nc, dtype, "reduce_scatter", &t);
  if (rc != ACC_OK) return rc;
  return enqueued(nc,
                  ncclReduceScatter(send, recv, count, t, map_op(op), nc->comm, (cudaStream_t)s),
                  "ncclReduceScatter");
}

int acc__nccl_wait(void *ctx, void *comm, void *s, double timeout_s) {
  nccl_comm *nc = comm;
  if (!nc->comm)
    return acc__cuda_fail(ACC_ERR_INVALID_USAGE,
                          "the NCCL communicator was aborted by an earlier error");
  double deadline = now_s() + timeout_s;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(nc->comm, &st);
    if (r == ncclSuccess && st != ncclSuccess && st != ncclInProgress) r = st;
    if (r != ncclSuccess) {
      int rc = nccl_fail(r, nc->comm, "NCCL operation");
      ncclCommAbort(nc->comm);
      nc->comm = NULL;
      return rc;
    }
    cudaError_t q = cudaStreamQuery((cudaStream_t)s);
    if (q == cudaSuccess && st != ncclInProgress) return ACC_OK;
    if (q != cudaSuccess && q != cudaErrorNotReady) return acc__cuda_check(q, "cudaStreamQuery");
    if (now_s() > deadline) {
      ncclCommAbort(nc->comm);
      nc->comm = NULL;
      return acc__cuda_fail(ACC_ERR_TIMEOUT,
                            "NCCL operation on rank %d of %d did not complete in %g s (a peer is "
                            "dead, stalled, or making a different call); communicator aborted",
                            nc->rank, nc->nranks, timeout_s);
    }
    sched_yield();
  }
}

/* The watchdog's poll (another thread than the one issuing operations). */
int acc__nccl_check(void *ctx, void *comm) {
  nccl_comm *nc = comm;
  acc__cuda_ctx *c = ctx;
  (void)cudaSetDevice(c->dev); /* this thread: the communicator's GPU (cheap when current) */
  if (!nc->comm)
    return acc__cuda_fail(ACC_ERR_INVALID_USAGE, "the NCCL communicator was aborted");
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(nc->comm, &st);
  if (r == ncclSuccess && st != ncclSuccess && st != ncclInProgress) r = st;
  return r == ncclSuccess ? ACC_OK : nccl_fail(r, nc->comm, "NCCL");
}

int acc__nccl_abort(void *ctx, void *comm) {
  nccl_comm *nc = comm;
  (void)ctx;
  if (nc->comm) ncclCommAbort(nc->comm);
  nc->comm = NULL;
  return ACC_OK;
}

int acc__nccl_destroy(void *ctx, void *comm, int abort) {
  nccl_comm *nc = comm;
  if (!nc) return ACC_OK;
  int rc = ACC_OK;
  if (nc->comm) {
    if (abort) {
      ncclCommAbort(nc->comm);
    } else {
      ncclResult_t r = ncclCommFinalize(nc->comm);
      int timed_out = 0;
      if (r == ncclInProgress || r == ncclSuccess)
        r = poll_state(nc->comm, now_s() + 60.0, &timed_out);
      if (r != ncclSuccess || timed_out) {
        rc = timed_out
                 ? acc__cuda_fail(ACC_ERR_TIMEOUT, "ncclCommFinalize did not finish in 60 s")
                       : nccl_fail(r, nc->comm, "ncclCommFinalize");
        ncclCommAbort(nc->comm);
      } else {
        ncclCommDestroy(nc->comm);
      }
    }
  }
  free(nc);
  return rc;
}

#endif
