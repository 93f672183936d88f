/* The collective API: argument checks, debug-mode call matching, MEAN, broken-group handling,
 * then one call into the backend table. */
#include <stdio.h>
#include <string.h>

#include "state.h"
#include "obs/profile.h"

enum { OP_BARRIER = 1, OP_BROADCAST, OP_ALL_REDUCE, OP_REDUCE, OP_ALL_GATHER, OP_GATHER, OP_ALL_GATHER_BYTES };

static const char *op_names[] = {"?", "barrier", "broadcast", "all_reduce", "reduce",
                                 "all_gather", "gather", "all_gather_bytes"};

/* What a rank called, exchanged in debug mode. */
typedef struct call_desc {
  int64_t op, dtype, count, root, red;
} call_desc;

static void describe_call(char *buf, size_t cap, const call_desc *d) {
  int op = (d->op >= 1 && d->op <= OP_ALL_GATHER_BYTES) ? (int)d->op : 0;
  int n = snprintf(buf, cap, "%s(", op_names[op]);
  if (op == OP_BARRIER) {
    snprintf(buf + n, cap - (size_t)n, ")");
    return;
  }
  if (op == OP_ALL_GATHER_BYTES) {
    snprintf(buf + n, cap - (size_t)n, "bytes)");
    return;
  }
  n += snprintf(buf + n, cap - (size_t)n, "count=%lld, dtype=%s", (long long)d->count,
                acc_dtype_name((acc_dtype)d->dtype));
  if (op == OP_ALL_REDUCE || op == OP_REDUCE)
    n += snprintf(buf + n, cap - (size_t)n, ", op=%s", acc_op_name((acc_op)d->red));
  if (op == OP_BROADCAST || op == OP_REDUCE || op == OP_GATHER)
    n += snprintf(buf + n, cap - (size_t)n, ", root=%lld", (long long)d->root);
  snprintf(buf + n, cap - (size_t)n, ")");
}

static acc_result fail_remote(acc_state *st, acc_result rc) {
  if (rc == ACC_ERR_REMOTE || rc == ACC_ERR_TIMEOUT || rc == ACC_ERR_BACKEND) {
    st->broken = 1;
    snprintf(st->broken_msg, sizeof st->broken_msg, "%s", acc_last_error());
  }
  return rc;
}

static acc_result debug_check(acc_state *st, const call_desc *mine) {
  int n = st->size;
  call_desc all[n];
  st->be->op_name = "debug-mode check";
  acc_result rc = st->be->ops->all_gather(st->be, mine, all, sizeof *mine);
  if (rc != ACC_OK) return fail_remote(st, rc);
  int same = 1;
  for (int r = 0; r < n; r++) {
    const call_desc *o = &all[r];
    if (o->op != mine->op || (mine->op != OP_ALL_GATHER_BYTES &&
                              (o->dtype != mine->dtype || o->count != mine->count ||
                               o->root != mine->root || o->red != mine->red)))
      same = 0;
  }
  if (same) return ACC_OK;
  char msg[1800];
  int len = snprintf(msg, sizeof msg,
                     "debug mode: the processes called different collectives as call #%llu; every "
                     "process must make the same collective calls in the same order:",
                     (unsigned long long)st->be->op_seq);
  for (int r = 0; r < n && len < (int)sizeof msg - 80; r++) {
    char one[160];
    describe_call(one, sizeof one, &all[r]);
    len += snprintf(msg + len, sizeof msg - (size_t)len, "\n  - process %d: %s", r, one);
  }
  return acc__error(ACC_ERR_MISMATCH, "%s", msg);
}

/* Common entry: validates the state, refuses broken groups, numbers the call, runs the debug
 * check. Returns 1 in *skip when nothing has to be communicated. */
static acc_result enter(acc_state *st, const char *fn, const call_desc *d) {
  ACC_CHECK(acc__state_check(st, fn));
  if (st->broken)
    return acc__error(ACC_ERR_REMOTE,
                      "%s: the process group is broken by an earlier failure and cannot be used: %s",
                      fn, st->broken_msg);
  if (d->op != OP_BARRIER && d->op != OP_ALL_GATHER_BYTES && acc_dtype_size((acc_dtype)d->dtype) == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: dtype %lld is not an acc_dtype", fn,
                      (long long)d->dtype);
  if ((d->op == OP_ALL_REDUCE || d->op == OP_REDUCE) && (d->red < 0 || d->red >= ACC_OP_COUNT_))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: op %lld is not an acc_op", fn, (long long)d->red);
  if ((d->op == OP_BROADCAST || d->op == OP_REDUCE || d->op == OP_GATHER) &&
      (d->root < 0 || d->root >= st->size))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: root %lld is not a process index (0..%d)", fn,
                      (long long)d->root, st->size - 1);
  size_t es = d->op == OP_BARRIER || d->op == OP_ALL_GATHER_BYTES ? 1 : acc_dtype_size((acc_dtype)d->dtype);
  if (d->count < 0 || (uint64_t)d->count > SIZE_MAX / es / (size_t)st->size)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: count %lld is too large", fn, (long long)d->count);
  st->be->op_seq++;
  if (st->debug && st->size > 1) ACC_CHECK(debug_check(st, d));
  st->be->op_name = fn;
  return ACC_OK;
}

static acc_result need_buf(const void *p, const char *fn, const char *what) {
  if (!p) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s is NULL but count > 0", fn, what);
  return ACC_OK;
}

acc_result acc_barrier(acc_state *st) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "barrier");
  call_desc d = {OP_BARRIER, 0, 0, 0, 0};
  ACC_CHECK(enter(st, "barrier", &d));
  if (st->size == 1) return ACC_OK;
  return fail_remote(st, st->be->ops->barrier(st->be));
}

acc_result acc_broadcast(acc_state *st, void *buf, size_t count, acc_dtype dtype, int root) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "broadcast");
  call_desc d = {OP_BROADCAST, dtype, (int64_t)count, root, 0};
  ACC_CHECK(enter(st, "broadcast", &d));
  if (count == 0 || st->size == 1) return ACC_OK;
  ACC_CHECK(need_buf(buf, "broadcast", "buf"));
  return fail_remote(st, st->be->ops->broadcast(st->be, buf, count * acc_dtype_size(dtype), root));
}

acc_result acc_all_reduce(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                          acc_op op) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "all_reduce");
  call_desc d = {OP_ALL_REDUCE, dtype, (int64_t)count, 0, op};
  ACC_CHECK(enter(st, "all_reduce", &d));
  if (count == 0) return ACC_OK;
  ACC_CHECK(need_buf(send, "all_reduce", "send"));
  ACC_CHECK(need_buf(recv, "all_reduce", "recv"));
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, count * acc_dtype_size(dtype));
    return ACC_OK;
  }
  acc_op bop = op == ACC_MEAN ? ACC_SUM : op;
  ACC_CHECK(fail_remote(st, st->be->ops->all_reduce(st->be, send, recv, count, dtype, bop)));
  if (op == ACC_MEAN) acc__divide(recv, count, dtype, st->size);
  return ACC_OK;
}

acc_result acc_reduce(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                      acc_op op, int root) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "reduce");
  call_desc d = {OP_REDUCE, dtype, (int64_t)count, root, op};
  ACC_CHECK(enter(st, "reduce", &d));
  if (count == 0) return ACC_OK;
  ACC_CHECK(need_buf(send, "reduce", "send"));
  if (st->rank == root) ACC_CHECK(need_buf(recv, "reduce", "recv (on the root)"));
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, count * acc_dtype_size(dtype));
    return ACC_OK;
  }
  acc_op bop = op == ACC_MEAN ? ACC_SUM : op;
  ACC_CHECK(fail_remote(st, st->be->ops->reduce(st->be, send, st->rank == root ? recv : NULL, count,
                                                dtype, bop, root)));
  if (op == ACC_MEAN && st->rank == root) acc__divide(recv, count, dtype, st->size);
  return ACC_OK;
}

acc_result acc_all_gather(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "all_gather");
  call_desc d = {OP_ALL_GATHER, dtype, (int64_t)count, 0, 0};
  ACC_CHECK(enter(st, "all_gather", &d));
  if (count == 0) return ACC_OK;
  ACC_CHECK(need_buf(send, "all_gather", "send"));
  ACC_CHECK(need_buf(recv, "all_gather", "recv"));
  size_t nbytes = count * acc_dtype_size(dtype);
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, nbytes);
    return ACC_OK;
  }
  return fail_remote(st, st->be->ops->all_gather(st->be, send, recv, nbytes));
}

acc_result acc_gather(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                      int root) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "gather");
  call_desc d = {OP_GATHER, dtype, (int64_t)count, root, 0};
  ACC_CHECK(enter(st, "gather", &d));
  if (count == 0) return ACC_OK;
  ACC_CHECK(need_buf(send, "gather", "send"));
  if (st->rank == root) ACC_CHECK(need_buf(recv, "gather", "recv (on the root)"));
  size_t nbytes = count * acc_dtype_size(dtype);
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, nbytes);
    return ACC_OK;
  }
  return fail_remote(st, st->be->ops->gather(st->be, send, st->rank == root ? recv : NULL, nbytes, root));
}

acc_result acc_all_gather_bytes(acc_state *st, const void *send, size_t nbytes, void **out,
                                size_t **out_sizes) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "all_gather_bytes");
  if (!out || !out_sizes)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "all_gather_bytes: out and out_sizes must not be NULL");
  *out = NULL;
  *out_sizes = NULL;
  call_desc d = {OP_ALL_GATHER_BYTES, 0, (int64_t)nbytes, 0, 0};
  ACC_CHECK(enter(st, "all_gather_bytes", &d));
  if (nbytes) ACC_CHECK(need_buf(send, "all_gather_bytes", "send"));
  int n = st->size;
  size_t *sizes = acc__calloc((size_t)n, sizeof *sizes);
  if (!sizes) return ACC_ERR_NOMEM;
  uint64_t mine = nbytes;
  uint64_t all[n];
  acc_result rc = ACC_OK;
  if (n > 1) {
    st->be->op_name = "all_gather_bytes (sizes)";
    rc = fail_remote(st, st->be->ops->all_gather(st->be, &mine, all, sizeof mine));
  } else {
    all[0] = mine;
  }
  if (rc != ACC_OK) {
    acc__free(sizes);
    return rc;
  }
  size_t total = 0;
  for (int r = 0; r < n; r++) {
    sizes[r] = (size_t)all[r];
    total += sizes[r];
  }
  void *buf = acc__malloc(total);
  if (!buf) {
    acc__free(sizes);
    return ACC_ERR_NOMEM;
  }
  if (n == 1) {
    if (nbytes) memcpy(buf, send, nbytes);
  } else if (total > 0) {
    st->be->op_name = "all_gather_bytes";
    rc = fail_remote(st, st->be->ops->all_gather_v(st->be, send, buf, sizes));
  }
  if (rc != ACC_OK) {
    acc__free(buf);
    acc__free(sizes);
    return rc;
  }
  *out = buf;
  *out_sizes = sizes;
  return ACC_OK;
}
