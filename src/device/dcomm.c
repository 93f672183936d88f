/* The device communicator (dcomm.h). One NCCL communicator over the job, bootstrapped by
 * nccl_boot.c; every collective: the descriptor check over the CPU backend, the NCCL call on the
 * caller's stream, nccl_wait bounded by the job's collective timeout. */
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "device/dcomm.h"
#include "device/device_impl.h"
#include "device/nccl_boot.h"
#include "state/state.h"

struct acc__dcomm {
  acc_state *st;
  acc__device *dev;
  void *comm;
  int rank, nranks;
  double timeout;
  int broken;
};

enum { D_ALL_GATHER = 1, D_REDUCE_SCATTER = 2, D_ALL_REDUCE = 3 };
static const char *const d_names[] = {"", "all_gather", "reduce_scatter", "all_reduce"};

unsigned long long acc__dcomm_fake_calls(void) { return acc__fake_nccl_calls(); }

void acc__dcomm_bind(acc_state *st, acc__device *dev) {
  void *ctx = NULL;
  acc__fake_nccl_bind(st, dev ? acc__device_ops_of(dev, &ctx) : NULL);
}

static int usable_ops(const acc__device_ops *o) {
  return o->nccl_init && o->nccl_all_gather && o->nccl_reduce_scatter && o->nccl_all_reduce && o->nccl_wait &&
         o->nccl_destroy && o->nccl_abort;
}

/* The implementation's message (a module's, or acc_last_error() for the built-in ones), copied:
 * the caller formats it into acc_last_error() itself. */
const char *acc__device_module_error(const acc__device_ops *o, const char *dflt, char *buf, size_t cap) {
  const char *m = o->last_error ? o->last_error() : acc_last_error();
  snprintf(buf, cap, "%s", m && *m ? m : dflt);
  return buf;
}

acc_result acc__dcomm_create(acc_state *st, acc__device *dev, int mode, acc__dcomm **out) {
  *out = NULL;
  const int np = acc_state_num_processes(st), me = acc_state_process_index(st);
  if (mode == 2 || (np < 2 && mode != 1)) return ACC_OK;
  void *ctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(dev, &ctx);
  int32_t usable = usable_ops(ops);
  acc__comm_origin(ACC__ORIGIN_PREPARE, -20);
  ACC_CHECK(acc_all_reduce(st, &usable, &usable, 1, ACC_I32, ACC_MIN));
  if (!usable) {
    if (mode != 1) return ACC_OK;
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "ACCELERATE_FSDP_NCCL=always: the device of a process has no NCCL (%s here: %s); unset it "
                      "for the host-staged collectives",
                      acc__device_name(dev), usable_ops(ops) ? "NCCL available" : "no NCCL");
  }
  uint8_t id[ACC__NCCL_ID_BYTES];
  acc_result rc = acc__device_nccl_bootstrap(st, id, NULL, NULL);
  /* two processes on one GPU: every process fails alike; auto falls back to host staging */
  if (rc == ACC_ERR_INVALID_USAGE && mode != 1) {
    acc_clear_error();
    return ACC_OK;
  }
  ACC_CHECK(rc);
  double t = acc_state_timeout(st);
  if (t <= 0) t = 1800.0;
  acc__dcomm *c = acc__calloc(1, sizeof *c);
  if (!c) return ACC_ERR_NOMEM;
  c->st = st;
  c->dev = dev;
  c->rank = me;
  c->nranks = np;
  c->timeout = t;
  acc__fake_nccl_bind(st, ops);
  int r = ops->nccl_init(ctx, &c->comm, np, me, id, t);
  acc__fake_nccl_bind(NULL, NULL);
  if (r != ACC_OK) {
    char m[512];
    rc = acc__error((acc_result)r, "%s: FSDP's NCCL communicator (rank %d of %d): %s", acc__device_name(dev), me,
                    np, acc__device_module_error(ops, "init failed", m, sizeof m));
    c->comm = NULL;
  }
  /* all or none: a process whose init failed makes every process fail */
  int32_t ok = rc == ACC_OK, all_ok = ok;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", ok ? "" : acc_last_error());
  acc__comm_origin(ACC__ORIGIN_PREPARE, -21);
  acc_result arc = acc_all_reduce(st, &ok, &all_ok, 1, ACC_I32, ACC_MIN);
  if (arc != ACC_OK || !all_ok) {
    if (c->comm) ops->nccl_destroy(ctx, c->comm, 1);
    acc__free(c);
    if (arc != ACC_OK) return arc;
    if (!ok) return acc__error(rc, "%s", msg);
    return acc__error(ACC_ERR_BACKEND, "FSDP's NCCL communicator: another process failed to create its own "
                                       "(its error names it)");
  }
  *out = c;
  return ACC_OK;
}

void acc__dcomm_destroy(acc__dcomm *c) {
  if (!c) return;
  void *ctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(c->dev, &ctx);
  if (c->comm) ops->nccl_destroy(ctx, c->comm, c->broken);
  acc__free(c);
}

/* Every process's (operation, dtype, count) against this one's, over the CPU backend (the
 * caller's origin goes with it): a mismatch, a dead peer or a broken job is reported here. */
static acc_result check_call(acc__dcomm *c, int op, acc_dtype dtype, size_t count, int redop) {
  int64_t mine[4] = {op, (int64_t)dtype, (int64_t)count, redop};
  int64_t *all = acc__calloc((size_t)c->nranks * 4, sizeof *all);
  if (!all) return ACC_ERR_NOMEM;
  acc_result rc = acc_all_gather(c->st, mine, all, 4, ACC_I64);
  for (int r = 0; rc == ACC_OK && r < c->nranks; r++) {
    const int64_t *o = all + 4 * r;
    if (memcmp(o, mine, sizeof mine) != 0)
      rc = acc__error(ACC_ERR_MISMATCH,
                      "NCCL collective mismatch: process %d calls %s of %lld %s elements (op %lld), process %d "
                      "calls %s of %lld %s elements (op %lld)",
                      c->rank, d_names[op], (long long)count, acc_dtype_name(dtype), (long long)redop, r,
                      o[0] >= 1 && o[0] <= 3 ? d_names[o[0]] : "?", (long long)o[2],
                      acc_dtype_name((acc_dtype)o[1]), (long long)o[3]);
  }
  acc__free(all);
  return rc;
}

static acc_result run(acc__dcomm *c, int op, const void *send, void *recv, size_t count, acc_dtype dtype,
                      acc_op redop, acc__dstream *s) {
  if (c->broken)
    return acc__error(ACC_ERR_BACKEND, "FSDP's NCCL communicator was aborted by an earlier error (process %d)",
                      c->rank);
  ACC_CHECK(check_call(c, op, dtype, count, op == D_ALL_GATHER ? -1 : (int)redop));
  void *ctx = NULL;
  const acc__device_ops *ops = acc__device_ops_of(c->dev, &ctx);
  int r = op == D_ALL_GATHER      ? ops->nccl_all_gather(ctx, c->comm, send, recv, count, (int)dtype, s)
          : op == D_REDUCE_SCATTER ? ops->nccl_reduce_scatter(ctx, c->comm, send, recv, count, (int)dtype,
                                                              (int)redop, s)
                                   : ops->nccl_all_reduce(ctx, c->comm, send, recv, count, (int)dtype, (int)redop, s);
  if (r == ACC_OK) r = ops->nccl_wait(ctx, c->comm, s, c->timeout);
  if (r == ACC_OK) return ACC_OK;
  c->broken = 1;
  ops->nccl_abort(ctx, c->comm);
  char m[512];
  acc__device_module_error(ops, "failed", m, sizeof m);
  acc_result rc = acc__error((acc_result)r, "NCCL %s of %zu %s elements on process %d of %d: %s", d_names[op], count,
                             acc_dtype_name(dtype), c->rank, c->nranks, m);
  acc__state_mark_broken(c->st, acc_last_error());
  return rc;
}

acc_result acc__dcomm_all_gather(acc__dcomm *c, const void *send, void *recv, size_t count, acc_dtype dtype,
                                 acc__dstream *s) {
  return run(c, D_ALL_GATHER, send, recv, count, dtype, ACC_SUM, s);
}

acc_result acc__dcomm_reduce_scatter(acc__dcomm *c, const void *send, void *recv, size_t count, acc_dtype dtype,
                                     acc_op op, acc__dstream *s) {
  return run(c, D_REDUCE_SCATTER, send, recv, count, dtype, op, s);
}

acc_result acc__dcomm_all_reduce(acc__dcomm *c, const void *send, void *recv, size_t count, acc_dtype dtype,
                                 acc_op op, acc__dstream *s) {
  return run(c, D_ALL_REDUCE, send, recv, count, dtype, op, s);
}
