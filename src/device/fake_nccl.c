/* The fake device's NCCL (device_impl.h): the nccl_* entries of the fake ops table, so that code
 * written against the device layer's communicator (src/device/dcomm.c) runs in CPU-only CI. A
 * fake communicator belongs to the job bound on the creating thread (acc__fake_nccl_bind, with
 * the fake device's ops table: this file does not name host.c's, which names these); each
 * collective copies the device buffer to host memory with the fake device's own copy (the only
 * way to its bytes: host code never loads or stores fake device memory), runs the library's CPU
 * collective over the job, and copies the result back, all before it returns (a blocking NCCL:
 * nccl_wait then only synchronizes the stream). A failed CPU collective (a dead or mismatched
 * peer: the backend's own detection) marks the communicator aborted, as NCCL's abort would. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "accelerate/comm.h"
#include "device/device_impl.h"

typedef struct fcomm {
  acc_state *st;
  const acc__device_ops *ops; /* the fake device's (its copy and stream_sync) */
  int rank, nranks;
  atomic_int aborted; /* read by a watchdog thread (nccl_check) */
} fcomm;

static _Thread_local acc_state *g_bound;
static _Thread_local const acc__device_ops *g_bound_ops;
static atomic_ullong g_calls;

void acc__fake_nccl_bind(acc_state *st, const acc__device_ops *ops) {
  g_bound = st;
  g_bound_ops = ops;
}

unsigned long long acc__fake_nccl_calls(void) { return atomic_load(&g_calls); }

int acc__fnccl_unique_id(uint8_t id[ACC__NCCL_ID_BYTES]) {
  size_t got = 0;
  while (got < ACC__NCCL_ID_BYTES) {
    ssize_t k = getrandom(id + got, ACC__NCCL_ID_BYTES - got, 0);
    if (k <= 0) return acc__error(ACC_ERR_SYSTEM, "fake NCCL: getrandom failed making the unique id");
    got += (size_t)k;
  }
  return ACC_OK;
}

int acc__fnccl_init(void *ctx, void **out, int nranks, int rank, const uint8_t id[ACC__NCCL_ID_BYTES],
                  double timeout_s) {
  (void)ctx;
  (void)timeout_s; /* the CPU backend's own timeout bounds the check below */
  acc_state *st = g_bound;
  if (!st || !g_bound_ops)
    return acc__error(ACC_ERR_INVALID_USAGE, "fake NCCL: no job bound on this thread (a communicator of the fake "
                                             "device is made by acc__dcomm_create)");
  if (nranks != acc_state_num_processes(st) || rank != acc_state_process_index(st))
    return acc__error(ACC_ERR_NOT_SUPPORTED, "fake NCCL: rank %d of %d is not the job's process %d of %d (the fake "
                                             "communicator spans the whole job)",
                      rank, nranks, acc_state_process_index(st), acc_state_num_processes(st));
  /* every rank must hold process 0's id (a communicator of another bootstrap would pair wrongly) */
  uint64_t mine = 0, *all = calloc((size_t)nranks, sizeof *all);
  if (!all) return acc__error(ACC_ERR_NOMEM, "fake NCCL: out of memory");
  memcpy(&mine, id, sizeof mine);
  acc_result rc = acc_all_gather(st, &mine, all, 1, ACC_U64);
  for (int r = 0; rc == ACC_OK && r < nranks; r++)
    if (all[r] != all[0])
      rc = acc__error(ACC_ERR_MISMATCH, "fake NCCL: rank %d holds another unique id than rank 0", r);
  free(all);
  if (rc != ACC_OK) return rc;
  fcomm *c = calloc(1, sizeof *c);
  if (!c) return acc__error(ACC_ERR_NOMEM, "fake NCCL: out of memory");
  c->st = st;
  c->ops = g_bound_ops;
  c->rank = rank;
  c->nranks = nranks;
  *out = c;
  return ACC_OK;
}

static int live(const fcomm *c) {
  if (!atomic_load(&c->aborted)) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_USAGE, "fake NCCL: the communicator of rank %d was aborted by an earlier error",
                    c->rank);
}

/* bytes device -> host (h), the stream synchronized: the fake's own copy */
static int down(const fcomm *c, void *ctx, void *h, const void *d, size_t bytes, void *s) {
  int rc = c->ops->copy(ctx, h, d, bytes, ACC__COPY_D2H, s);
  return rc == ACC_OK ? c->ops->stream_sync(ctx, s) : rc;
}

static int up(const fcomm *c, void *ctx, void *d, const void *h, size_t bytes, void *s) {
  int rc = c->ops->copy(ctx, d, h, bytes, ACC__COPY_H2D, s);
  return rc == ACC_OK ? c->ops->stream_sync(ctx, s) : rc; /* h is freed next */
}

static int finish(fcomm *c, int rc, char *h) {
  free(h);
  if (rc != ACC_OK) atomic_store(&c->aborted, 1);
  else atomic_fetch_add(&g_calls, 1);
  return rc;
}

int acc__fnccl_all_reduce(void *ctx, void *comm, const void *send, void *recv, size_t count, int dtype, int op,
                        void *s) {
  fcomm *c = comm;
  ACC_CHECK(live(c));
  size_t bytes = count * acc_dtype_size((acc_dtype)dtype);
  char *h = malloc(2 * bytes + 1);
  if (!h) return acc__error(ACC_ERR_NOMEM, "fake NCCL: out of memory staging %zu bytes", 2 * bytes);
  int rc = down(c, ctx, h, send, bytes, s);
  if (rc == ACC_OK) rc = acc_all_reduce(c->st, h, h + bytes, count, (acc_dtype)dtype, (acc_op)op);
  if (rc == ACC_OK) rc = up(c, ctx, recv, h + bytes, bytes, s);
  return finish(c, rc, h);
}

int acc__fnccl_all_gather(void *ctx, void *comm, const void *send, void *recv, size_t count, int dtype, void *s) {
  fcomm *c = comm;
  ACC_CHECK(live(c));
  size_t blk = count * acc_dtype_size((acc_dtype)dtype), all = blk * (size_t)c->nranks;
  char *h = malloc(all + blk + 1);
  if (!h) return acc__error(ACC_ERR_NOMEM, "fake NCCL: out of memory staging %zu bytes", all + blk);
  int rc = down(c, ctx, h + all, send, blk, s);
  if (rc == ACC_OK) rc = acc_all_gather(c->st, h + all, h, count, (acc_dtype)dtype);
  if (rc == ACC_OK) rc = up(c, ctx, recv, h, all, s);
  return finish(c, rc, h);
}

int acc__fnccl_reduce_scatter(void *ctx, void *comm, const void *send, void *recv, size_t count, int dtype, int op,
                            void *s) {
  fcomm *c = comm;
  ACC_CHECK(live(c));
  size_t blk = count * acc_dtype_size((acc_dtype)dtype), all = blk * (size_t)c->nranks;
  char *h = malloc(all + blk + 1);
  if (!h) return acc__error(ACC_ERR_NOMEM, "fake NCCL: out of memory staging %zu bytes", all + blk);
  int rc = down(c, ctx, h, send, all, s);
  if (rc == ACC_OK) rc = acc_reduce_scatter(c->st, h, h + all, count, (acc_dtype)dtype, (acc_op)op);
  if (rc == ACC_OK) rc = up(c, ctx, recv, h + all, blk, s);
  return finish(c, rc, h);
}

int acc__fnccl_wait(void *ctx, void *comm, void *s, double timeout_s) {
  const fcomm *c = comm;
  (void)timeout_s; /* the collectives completed before they returned */
  ACC_CHECK(live(c));
  return c->ops->stream_sync(ctx, s);
}

int acc__fnccl_check(void *ctx, void *comm) {
  (void)ctx;
  return live(comm);
}

int acc__fnccl_abort(void *ctx, void *comm) {
  (void)ctx;
  atomic_store(&((fcomm *)comm)->aborted, 1);
  return ACC_OK;
}

int acc__fnccl_destroy(void *ctx, void *comm, int abort) {
  (void)ctx;
  (void)abort;
  free(comm);
  return ACC_OK;
}
