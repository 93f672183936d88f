/* The collective API: argument checks, the call descriptor and its tag (mismatch detection,
 * always on), debug-mode call matching, MEAN, broken-group handling, then the backend table.
 *
 * Every collective is numbered and described (operation, dtype, count, root, reduction, origin,
 * call site; collcheck.h). Its 64-bit tag is compared across processes before any data is
 * used: by the backend itself on the collective's first step when it can do so for free (shm:
 * the tag sits beside the arrival counter; gloo: the tag leads the header message that starts
 * every collective, gloo.cc), otherwise by a 16-byte all_reduce here, the first
 * operation of every collective (so that mismatched calls always pair as the same operation in
 * the backend; a barrier is that exchange alone). A mismatch fails on every process with
 * ACC_ERR_MISMATCH listing every process's call and call site. */
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "comm/async.h"
#include "comm/comm.h"
#include "comm/stage.h"
#include "state/state.h"
#include "core/profile.h"

static acc_result fail_remote(acc_state *st, acc_result rc) {
  if (rc == ACC_ERR_REMOTE || rc == ACC_ERR_TIMEOUT || rc == ACC_ERR_BACKEND ||
      rc == ACC_ERR_MISMATCH) {
    st->broken = 1;
    snprintf(st->broken_msg, sizeof st->broken_msg, "%s", acc_last_error());
  }
  return rc;
}

void acc__state_mark_broken(acc_state *st, const char *msg) {
  if (!st || st->broken) return;
  st->broken = 1;
  snprintf(st->broken_msg, sizeof st->broken_msg, "%s", msg);
}

int acc__state_peer_gone(acc_state *st, int *rank, int *pid, char *how, size_t cap) {
  if (!st || !st->be || st->size < 2 || strcmp(st->be->ops->name, "shm") != 0) return 0;
  int left = 0;
  if (!acc__shm_peer_gone(st->be, rank, pid, &left)) return 0;
  snprintf(how, cap, "%s", left ? "left the process group" : "died (killed or crashed)");
  return 1;
}

static void to_rec(acc__call_rec *r, const acc__call *c) {
  memset(r, 0, sizeof *r);
  acc__call_rec_fields(r, c);
  acc__call_rec_site(r, c->file);
}

/* Every process's full call record, to name them all in the mismatch error (every process
 * reaches this together: they all saw the same tags). */
#define ACC_COLD __attribute__((noinline, cold)) /* off the path of a matching call */

static ACC_COLD acc_result exchange_records(acc_state *st, const acc__call *c, const char *fn) {
  int n = st->size;
  acc__call_rec mine, *all = acc__calloc((size_t)n, sizeof *all);
  if (!all) return ACC_ERR_NOMEM;
  to_rec(&mine, c);
  acc_result rc = st->be->ops->all_gather(st->be, &mine, all, sizeof mine);
  if (rc == ACC_OK) rc = acc__mismatch_error(fn, st->rank, &mine, all, n, 0);
  acc__free(all);
  return fail_remote(st, rc);
}

/* Tag check for backends that do not compare tags themselves: min over processes of (tag, ~tag)
 * equals (tag, ~tag) on a process exactly when every tag equals its own. Also a barrier. */
static ACC_COLD acc_result tag_exchange(acc_state *st, const acc__call *c, const char *fn) {
  int64_t v[2] = {(int64_t)c->tag, (int64_t)~c->tag};
  acc_result rc = st->be->ops->all_reduce(st->be, v, v, 2, ACC_I64, ACC_MIN);
  if (rc != ACC_OK) return fail_remote(st, rc);
  if (v[0] == (int64_t)c->tag && v[1] == (int64_t)~c->tag) return ACC_OK;
  return exchange_records(st, c, fn);
}

/* Debug mode: every process's descriptor is gathered and compared field by field. */
static ACC_COLD acc_result debug_check(acc_state *st, const acc__call *c) {
  int n = st->size;
  acc__call_rec mine, *all = acc__calloc((size_t)n, sizeof *all);
  if (!all) return ACC_ERR_NOMEM;
  to_rec(&mine, c);
  const char *fn = st->be->op_name;
  st->be->op_name = "debug-mode check";
  acc_result rc = st->be->ops->all_gather(st->be, &mine, all, sizeof mine);
  st->be->op_name = fn;
  if (rc != ACC_OK) {
    acc__free(all);
    return fail_remote(st, rc);
  }
  int same = 1;
  for (int r = 0; r < n; r++) {
    const acc__call_rec *o = &all[r];
    if (o->seq != mine.seq || o->op != mine.op || o->origin != mine.origin ||
        o->origin_index != mine.origin_index ||
        (mine.op != ACC__OP_ALL_GATHER_BYTES &&
         (o->dtype != mine.dtype || o->count != mine.count || o->root != mine.root ||
          o->red != mine.red)))
      same = 0;
  }
  if (!same) rc = fail_remote(st, acc__mismatch_error(fn, st->rank, &mine, all, n, 0));
  acc__free(all);
  return rc;
}

/* Common entry: takes this thread's pending origin, validates the state and the arguments,
 * refuses broken groups, numbers and describes the call, publishes it to the backend (*began:
 * leave() must follow), checks the tags where the backend does not, runs the debug check. */
static acc_result enter(acc_state *st, const char *fn, acc__call *c, const char *file, int line,
                        int *began) {
  acc__comm_take_origin(&c->origin, &c->origin_index);
  *began = 0;
  ACC_CHECK(acc__state_check(st, fn));
  acc__comm_async_drain(st); /* submitted collectives first, in order (comm/async.h) */
  if (st->broken)
    return acc__error(ACC_ERR_REMOTE,
                      "%s: the process group is broken by an earlier failure and cannot be used: %s",
                      fn, st->broken_msg);
  int op = c->op;
  int shapeless = op == ACC__OP_BARRIER || op == ACC__OP_ALL_GATHER_BYTES;
  if (!shapeless && acc_dtype_size((acc_dtype)c->dtype) == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: dtype %d is not an acc_dtype", fn,
                      (int)c->dtype);
  if ((op == ACC__OP_ALL_REDUCE || op == ACC__OP_REDUCE || op == ACC__OP_REDUCE_SCATTER) &&
      (c->red < 0 || c->red >= ACC_OP_COUNT_))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: op %d is not an acc_op", fn, (int)c->red);
  if ((op == ACC__OP_BROADCAST || op == ACC__OP_REDUCE || op == ACC__OP_GATHER) &&
      (c->root < 0 || c->root >= st->size))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: root %d is not a process index (0..%d)", fn,
                      (int)c->root, st->size - 1);
  size_t es = shapeless ? 1 : acc_dtype_size((acc_dtype)c->dtype);
  size_t all_bytes; /* count * es * size must fit (checked multiplies: no divisions per call) */
  if (c->count < 0 || __builtin_mul_overflow((size_t)c->count, es, &all_bytes) ||
      __builtin_mul_overflow(all_bytes, (size_t)st->size, &all_bytes))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: count %lld is too large", fn,
                      (long long)c->count);
  acc__backend *be = st->be;
  c->seq = ++be->op_seq;
  if (acc__tls_site_depth > 0) { /* inside a marked public call: the program's line */
    c->file = acc__tls_site_file;
    c->line = acc__tls_site_line;
    c->entry = acc__tls_site_entry;
  } else {
    c->file = file;
    c->line = line;
  }
  be->op_name = fn;
  if (st->size == 1) return ACC_OK;
  c->tag = acc__call_tag(c);
  be->call = c; /* the backend publishes it with the collective's first step */
  *began = 1;
  if (!be->ops->checks_tags && op != ACC__OP_BARRIER) /* a barrier IS the tag exchange */
    ACC_CHECK(tag_exchange(st, c, fn));
  if (st->debug) ACC_CHECK(debug_check(st, c));
  return ACC_OK;
}

static acc_result leave(acc_state *st, int began, acc_result rc) {
  if (began) {
    if (st->be->ops->call_end) st->be->ops->call_end(st->be);
    st->be->call = NULL;
  }
  return rc;
}

acc_result acc__comm_need_buf(const void *p, const char *fn, const char *what) {
  if (!p) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s is NULL but count > 0", fn, what);
  return ACC_OK;
}

/* ---- the collectives ---------------------------------------------------------------------- */

acc_result acc_barrier_at(acc_state *st, const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "barrier");
  acc__call c = {.op = ACC__OP_BARRIER};
  int began;
  acc_result rc = enter(st, "barrier", &c, file, line, &began);
  if (rc == ACC_OK && st->size > 1)
    rc = fail_remote(st, st->be->ops->checks_tags ? st->be->ops->barrier(st->be)
                                                  : tag_exchange(st, &c, "barrier"));
  return leave(st, began, rc);
}

acc_result acc_broadcast_at(acc_state *st, void *buf, size_t count, acc_dtype dtype, int root,
                            const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "broadcast");
  acc__call c = {.op = ACC__OP_BROADCAST, .dtype = dtype, .count = (int64_t)count, .root = root};
  int began;
  acc_result rc = enter(st, "broadcast", &c, file, line, &began);
  if (rc != ACC_OK || count == 0 || st->size == 1) return leave(st, began, rc);
  rc = acc__comm_need_buf(buf, "broadcast", "buf");
  size_t nb = count * acc_dtype_size(dtype);
  acc__devio io = {0}; /* device memory: staged through the host (comm/stage.h) */
  if (rc == ACC_OK) rc = acc__comm_stage_begin(&io, NULL, 0, 0, buf, nb, st->rank == root);
  if (rc == ACC_OK)
    rc = fail_remote(st, st->be->ops->broadcast(st->be, io.b, nb, root));
  if (buf) rc = acc__comm_stage_end(&io, rc, st->rank != root);
  return leave(st, began, rc);
}

/* scale (f32 SUM only, else NULL): every element of the result then multiplied by *scale, by
 * the backend inside its reduction where it can (acc__all_reduce_scaled, comm.h). */
static acc_result all_reduce_body(acc_state *st, const void *send, void *recv, size_t count,
                                  acc_dtype dtype, acc_op op, const float *scale) {
  if (count == 0) return ACC_OK;
  ACC_CHECK(acc__comm_need_buf(send, "all_reduce", "send"));
  ACC_CHECK(acc__comm_need_buf(recv, "all_reduce", "recv"));
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, count * acc_dtype_size(dtype));
  } else if (scale && st->be->ops->all_reduce_scaled_f32) {
    return fail_remote(st, st->be->ops->all_reduce_scaled_f32(st->be, send, recv, count, *scale));
  } else {
    acc_op bop = op == ACC_MEAN ? ACC_SUM : op;
    ACC_CHECK(fail_remote(st, st->be->ops->all_reduce(st->be, send, recv, count, dtype, bop)));
    if (op == ACC_MEAN) acc__divide(recv, count, dtype, st->size);
  }
  if (scale)
    for (size_t i = 0; i < count; i++) ((float *)recv)[i] *= *scale;
  return ACC_OK;
}

static acc_result all_reduce_at(acc_state *st, const void *send, void *recv, size_t count,
                                acc_dtype dtype, acc_op op, const float *scale, const char *file,
                                int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "all_reduce");
  acc__call c = {.op = ACC__OP_ALL_REDUCE, .dtype = dtype, .count = (int64_t)count, .red = op};
  int began;
  acc_result rc = enter(st, "all_reduce", &c, file, line, &began);
  if (rc == ACC_OK) {
    size_t nb = count * acc_dtype_size(dtype);
    acc__devio io;
    rc = acc__comm_stage_begin(&io, send, nb, 1, recv, nb, 0);
    if (rc == ACC_OK) rc = all_reduce_body(st, io.a, io.b, count, dtype, op, scale);
    rc = acc__comm_stage_end(&io, rc, 1);
  }
  return leave(st, began, rc);
}

acc_result acc_all_reduce_at(acc_state *st, const void *send, void *recv, size_t count,
                             acc_dtype dtype, acc_op op, const char *file, int line) {
  return all_reduce_at(st, send, recv, count, dtype, op, NULL, file, line);
}

acc_result acc__all_reduce_scaled_at(acc_state *st, float *buf, size_t count, float scale,
                                     const char *file, int line) {
  return all_reduce_at(st, buf, buf, count, ACC_F32, ACC_SUM, &scale, file, line);
}

static acc_result reduce_body(acc_state *st, const void *send, void *recv, size_t count,
                              acc_dtype dtype, acc_op op, int root) {
  if (count == 0) return ACC_OK;
  ACC_CHECK(acc__comm_need_buf(send, "reduce", "send"));
  if (st->rank == root) ACC_CHECK(acc__comm_need_buf(recv, "reduce", "recv (on the root)"));
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

acc_result acc_reduce_at(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                         acc_op op, int root, const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "reduce");
  acc__call c = {
      .op = ACC__OP_REDUCE, .dtype = dtype, .count = (int64_t)count, .red = op, .root = root};
  int began;
  acc_result rc = enter(st, "reduce", &c, file, line, &began);
  if (rc == ACC_OK) {
    size_t nb = count * acc_dtype_size(dtype), rb = st->rank == root ? nb : 0;
    acc__devio io;
    rc = acc__comm_stage_begin(&io, send, nb, 1, recv, rb, 0);
    if (rc == ACC_OK) rc = reduce_body(st, io.a, io.b, count, dtype, op, root);
    rc = acc__comm_stage_end(&io, rc, st->rank == root);
  }
  return leave(st, began, rc);
}

/* Backends without a reduce_scatter of their own: the whole buffer is all-reduced into a
 * temporary and this process keeps its block. */
static acc_result reduce_scatter_fallback(acc_state *st, const void *send, void *recv, size_t count,
                                          acc_dtype dtype, acc_op op) {
  size_t es = acc_dtype_size(dtype), n = (size_t)st->size;
  uint8_t *tmp = acc__malloc(count * es * n);
  if (!tmp) return acc__error(ACC_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes",
                              count * es * n);
  acc_result rc = st->be->ops->all_reduce(st->be, send, tmp, count * n, dtype, op);
  if (rc == ACC_OK) memmove(recv, tmp + (size_t)st->rank * count * es, count * es);
  acc__free(tmp);
  return rc;
}

static acc_result reduce_scatter_body(acc_state *st, const void *send, void *recv, size_t count,
                                      acc_dtype dtype, acc_op op) {
  if (count == 0) return ACC_OK;
  ACC_CHECK(acc__comm_need_buf(send, "reduce_scatter", "send"));
  ACC_CHECK(acc__comm_need_buf(recv, "reduce_scatter", "recv"));
  size_t es = acc_dtype_size(dtype), n = (size_t)st->size;
  const uint8_t *s0 = send, *own = s0 + (size_t)st->rank * count * es;
  const uint8_t *r0 = recv;
  if (r0 != own && r0 < s0 + count * es * n && s0 < r0 + count * es)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "reduce_scatter: recv overlaps send but is not this process's block of it "
                      "(send + rank * count elements, the in-place form)");
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, count * es);
    return ACC_OK;
  }
  acc_op bop = op == ACC_MEAN ? ACC_SUM : op;
  acc_result rc = st->be->ops->reduce_scatter
                      ? st->be->ops->reduce_scatter(st->be, send, recv, count, dtype, bop)
                      : reduce_scatter_fallback(st, send, recv, count, dtype, bop);
  ACC_CHECK(fail_remote(st, rc));
  if (op == ACC_MEAN) acc__divide(recv, count, dtype, st->size);
  return ACC_OK;
}

acc_result acc_reduce_scatter_at(acc_state *st, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, acc_op op, const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "reduce_scatter");
  acc__call c = {.op = ACC__OP_REDUCE_SCATTER, .dtype = dtype, .count = (int64_t)count, .red = op};
  int began;
  acc_result rc = enter(st, "reduce_scatter", &c, file, line, &began);
  if (rc == ACC_OK) {
    size_t nb = count * acc_dtype_size(dtype);
    acc__devio io;
    rc = acc__comm_stage_begin(&io, send, nb * (size_t)st->size, 1, recv, nb, 0);
    if (rc == ACC_OK) rc = reduce_scatter_body(st, io.a, io.b, count, dtype, op);
    rc = acc__comm_stage_end(&io, rc, 1);
  }
  return leave(st, began, rc);
}

static acc_result all_gather_body(acc_state *st, const void *send, void *recv, size_t count,
                                  acc_dtype dtype) {
  if (count == 0) return ACC_OK;
  ACC_CHECK(acc__comm_need_buf(send, "all_gather", "send"));
  ACC_CHECK(acc__comm_need_buf(recv, "all_gather", "recv"));
  size_t nbytes = count * acc_dtype_size(dtype);
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, nbytes);
    return ACC_OK;
  }
  return fail_remote(st, st->be->ops->all_gather(st->be, send, recv, nbytes));
}

acc_result acc_all_gather_at(acc_state *st, const void *send, void *recv, size_t count,
                             acc_dtype dtype, const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "all_gather");
  acc__call c = {.op = ACC__OP_ALL_GATHER, .dtype = dtype, .count = (int64_t)count};
  int began;
  acc_result rc = enter(st, "all_gather", &c, file, line, &began);
  if (rc == ACC_OK) {
    size_t nb = count * acc_dtype_size(dtype);
    acc__devio io;
    rc = acc__comm_stage_begin(&io, send, nb, 1, recv, nb * (size_t)st->size, 0);
    if (rc == ACC_OK) rc = all_gather_body(st, io.a, io.b, count, dtype);
    rc = acc__comm_stage_end(&io, rc, 1);
  }
  return leave(st, began, rc);
}

static acc_result gather_body(acc_state *st, const void *send, void *recv, size_t count,
                              acc_dtype dtype, int root) {
  if (count == 0) return ACC_OK;
  ACC_CHECK(acc__comm_need_buf(send, "gather", "send"));
  if (st->rank == root) ACC_CHECK(acc__comm_need_buf(recv, "gather", "recv (on the root)"));
  size_t nbytes = count * acc_dtype_size(dtype);
  if (st->size == 1) {
    if (send != recv) memmove(recv, send, nbytes);
    return ACC_OK;
  }
  return fail_remote(st, st->be->ops->gather(st->be, send, st->rank == root ? recv : NULL, nbytes, root));
}

acc_result acc_gather_at(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                         int root, const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "gather");
  acc__call c = {.op = ACC__OP_GATHER, .dtype = dtype, .count = (int64_t)count, .root = root};
  int began;
  acc_result rc = enter(st, "gather", &c, file, line, &began);
  if (rc == ACC_OK) {
    size_t nb = count * acc_dtype_size(dtype), rb = st->rank == root ? nb * (size_t)st->size : 0;
    acc__devio io;
    rc = acc__comm_stage_begin(&io, send, nb, 1, recv, rb, 0);
    if (rc == ACC_OK) rc = gather_body(st, io.a, io.b, count, dtype, root);
    rc = acc__comm_stage_end(&io, rc, st->rank == root);
  }
  return leave(st, began, rc);
}

/* Sizes, then data. The size exchange carries every process's call tag, so a process that made a
 * different call is caught here even where the backend does not compare tags, and the sizes are
 * validated (no overflowing sum, nothing beyond what this process can hold) before anything is
 * allocated or copied. */
static acc_result all_gather_bytes_body(acc_state *st, const acc__call *c, const void *send,
                                        size_t nbytes, void **out, size_t **out_sizes) {
  if (nbytes) ACC_CHECK(acc__comm_need_buf(send, "all_gather_bytes", "send"));
  int n = st->size;
  size_t *sizes = acc__calloc((size_t)n, sizeof *sizes);
  if (!sizes) return ACC_ERR_NOMEM;
  size_t total = 0;
  void *buf = NULL;
  acc_result rc = ACC_OK;
  if (n == 1) {
    sizes[0] = nbytes;
    total = nbytes;
  } else {
    uint64_t(*pairs)[2] = acc__calloc((size_t)n, sizeof *pairs);
    uint64_t *reported = acc__calloc((size_t)n, sizeof *reported);
    if (!pairs || !reported) rc = ACC_ERR_NOMEM;
    if (rc == ACC_OK) {
      uint64_t mine[2] = {nbytes, c->tag};
      st->be->op_name = "all_gather_bytes (sizes)";
      rc = fail_remote(st, st->be->ops->all_gather(st->be, mine, pairs, sizeof mine));
      st->be->op_name = "all_gather_bytes";
    }
    int same = 1;
    for (int r = 0; rc == ACC_OK && r < n; r++) {
      reported[r] = pairs[r][0];
      if (pairs[r][1] != c->tag) same = 0;
    }
    if (rc == ACC_OK && !same) rc = exchange_records(st, c, "all_gather_bytes");
    if (rc == ACC_OK)
      rc = fail_remote(st, acc__gather_layout(reported, n, st->rank, nbytes, acc__gather_limit(),
                                              sizes, NULL, &total));
    acc__free(pairs);
    acc__free(reported);
  }
  if (rc == ACC_OK) {
    buf = acc__malloc(total ? total : 1);
    if (!buf) rc = ACC_ERR_NOMEM;
  }
  if (rc == ACC_OK) {
    if (n == 1) {
      if (nbytes) memcpy(buf, send, nbytes);
    } else if (total > 0) {
      rc = fail_remote(st, st->be->ops->all_gather_v(st->be, send, buf, sizes));
    }
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

acc_result acc_all_gather_bytes_at(acc_state *st, const void *send, size_t nbytes, void **out,
                                   size_t **out_sizes, const char *file, int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "all_gather_bytes");
  if (!out || !out_sizes) {
    int32_t k;
    int64_t i;
    acc__comm_take_origin(&k, &i);
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "all_gather_bytes: out and out_sizes must not be NULL");
  }
  *out = NULL;
  *out_sizes = NULL;
  acc__call c = {.op = ACC__OP_ALL_GATHER_BYTES, .count = (int64_t)nbytes};
  int began;
  acc_result rc = enter(st, "all_gather_bytes", &c, file, line, &began);
  if (rc == ACC_OK) {
    acc__devio io; /* a device send buffer is staged; the result is host memory */
    rc = acc__comm_stage_begin(&io, send, nbytes, 1, NULL, 0, 0);
    if (rc == ACC_OK) rc = all_gather_bytes_body(st, &c, io.a, nbytes, out, out_sizes);
    rc = acc__comm_stage_end(&io, rc, 0);
  }
  return leave(st, began, rc);
}

/* ---- shared allocations (registered buffers) ---------------------------------------------- */

acc_result acc__comm_alloc_shared_at(acc_state *st, size_t bytes, void **out, const char *file,
                                     int line) {
  ACC_PROF_SCOPE(ACC_PROF_COMM, "alloc_shared");
  if (out) *out = NULL;
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "alloc_shared: out is NULL");
  if (bytes == 0 || bytes > (size_t)INT64_MAX)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "alloc_shared: %zu bytes (expected 1..2^63)", bytes);
  acc__call c = {.op = ACC__OP_ALLOC_SHARED, .dtype = ACC_U8, .count = (int64_t)bytes};
  int began;
  acc_result rc = enter(st, "alloc_shared", &c, file, line, &began);
  if (rc == ACC_OK && st->size > 1 && st->be->ops->alloc_shared)
    rc = fail_remote(st, st->be->ops->alloc_shared(st->be, bytes, out));
  return leave(st, began, rc);
}

int acc__comm_free_shared(acc_state *st, void *p) {
  if (!p || !st || !st->be || !st->be->ops->free_shared) return 0;
  return st->be->ops->free_shared(st->be, p);
}

/* The plain entry points (no call site): for programs that take their address or cannot use the
 * macros of comm.h. The parentheses keep the macros from expanding. */
acc_result (acc_barrier)(acc_state *st) { return acc_barrier_at(st, NULL, 0); }

acc_result (acc_broadcast)(acc_state *st, void *buf, size_t count, acc_dtype dtype, int root) {
  return acc_broadcast_at(st, buf, count, dtype, root, NULL, 0);
}

acc_result (acc_all_reduce)(acc_state *st, const void *send, void *recv, size_t count,
                           acc_dtype dtype, acc_op op) {
  return acc_all_reduce_at(st, send, recv, count, dtype, op, NULL, 0);
}

acc_result (acc_reduce)(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                       acc_op op, int root) {
  return acc_reduce_at(st, send, recv, count, dtype, op, root, NULL, 0);
}

acc_result (acc_reduce_scatter)(acc_state *st, const void *send, void *recv, size_t count,
                               acc_dtype dtype, acc_op op) {
  return acc_reduce_scatter_at(st, send, recv, count, dtype, op, NULL, 0);
}

acc_result (acc_all_gather)(acc_state *st, const void *send, void *recv, size_t count,
                           acc_dtype dtype) {
  return acc_all_gather_at(st, send, recv, count, dtype, NULL, 0);
}

acc_result (acc_gather)(acc_state *st, const void *send, void *recv, size_t count, acc_dtype dtype,
                       int root) {
  return acc_gather_at(st, send, recv, count, dtype, root, NULL, 0);
}

acc_result (acc_all_gather_bytes)(acc_state *st, const void *send, size_t nbytes, void **out,
                                 size_t **out_sizes) {
  return acc_all_gather_bytes_at(st, send, nbytes, out, out_sizes, NULL, 0);
}
