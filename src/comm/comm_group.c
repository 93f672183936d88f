/* Collectives over a subgroup of the job (group.h): the machine's processes (LOCAL) or this
 * local rank's rail (RAIL). They run on the backend the job's backend hands out for the group
 * (backend.h's subgroup op) with everything comm.c gives the job's collectives: argument checks,
 * a call descriptor whose tag also holds the group (so a subgroup call never pairs with a job
 * call of the same shape), tag comparison by the group's backend (shm, gloo) or by an exchange
 * over the group (others), broken-group handling, device staging.
 *
 * Numbering: a subgroup call takes its number from the job's counter (st->be->op_seq). Every
 * process of the job makes the same subgroup calls in the same order (each process in its own
 * groups), so every process's counter stays in step, and a later job call compares equal
 * numbers. */
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "comm/async.h"
#include "comm/comm.h"
#include "comm/group.h"
#include "comm/stage.h"
#include "core/profile.h"
#include "state/state.h"

static const char *const group_names[] = {"the job", "this machine's processes", "this local rank's rail"};

/* The group's backend (NULL: this process alone), this process's rank in it and its size. */
typedef struct grp {
  acc__backend *be;
  int rank, size, which;
} grp;

static acc_result resolve(acc_state *st, int which, grp *g, const char *fn) {
  if (which < 0 || which >= ACC__GROUP_COUNT_)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: group %d is not a process group", fn, which);
  g->be = NULL;
  g->rank = 0;
  g->size = 1;
  g->which = which;
  int whole = which == ACC__GROUP_WORLD || (which == ACC__GROUP_LOCAL && st->num_machines <= 1) ||
              (which == ACC__GROUP_RAIL && st->local_size <= 1 && st->num_machines > 1);
  if (whole) {
    g->be = st->be;
    g->rank = st->rank;
    g->size = st->size;
    return ACC_OK;
  }
  if (which == ACC__GROUP_RAIL && st->num_machines <= 1) return ACC_OK; /* one machine: alone */
  if (which == ACC__GROUP_LOCAL && st->local_size <= 1) return ACC_OK;   /* one process per machine */
  if (!st->be->ops->subgroup)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "%s: the %s backend offers no collectives over %s (%d machines of %d processes): "
                      "use the hierarchical backend (ACCELERATE_BACKEND=hierarchical, the default across "
                      "machines; docs/backends.md)",
                      fn, st->be->ops->name, group_names[which], st->num_machines, st->local_size);
  acc__backend *b = NULL;
  ACC_CHECK(st->be->ops->subgroup(st->be, which, &b));
  if (b) {
    g->be = b;
    g->rank = b->rank;
    g->size = b->size;
  }
  return ACC_OK;
}

acc_result acc__comm_group_info(acc_state *st, int which, int *rank, int *size) {
  ACC_CHECK(acc__state_check(st, "acc__comm_group_info"));
  if (!rank || !size) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__comm_group_info: rank or size is NULL");
  grp g = {NULL, 0, 1, 0};
  ACC_CHECK(resolve(st, which, &g, "acc__comm_group_info"));
  *rank = g.rank;
  *size = g.size;
  return ACC_OK;
}

static acc_result fail_remote(acc_state *st, acc_result rc) {
  if (rc == ACC_ERR_REMOTE || rc == ACC_ERR_TIMEOUT || rc == ACC_ERR_BACKEND || rc == ACC_ERR_MISMATCH)
    acc__state_mark_broken(st, acc_last_error());
  return rc;
}

/* The tag comparison for a group backend that does not compare tags itself: min over the group
 * of (tag, ~tag) equals (tag, ~tag) exactly when every tag equals this one; on a difference
 * every member's record, gathered over the group. */
__attribute__((noinline, cold)) static acc_result tag_exchange(acc_state *st, const grp *g, const acc__call *c,
                                                                const char *fn) {
  int64_t v[2] = {(int64_t)c->tag, (int64_t)~c->tag};
  acc_result rc = g->be->ops->all_reduce(g->be, v, v, 2, ACC_I64, ACC_MIN);
  if (rc != ACC_OK) return fail_remote(st, rc);
  if (v[0] == (int64_t)c->tag && v[1] == (int64_t)~c->tag) return ACC_OK;
  acc__call_rec mine, *all = acc__calloc((size_t)g->size, sizeof *all);
  if (!all) return ACC_ERR_NOMEM;
  memset(&mine, 0, sizeof mine);
  acc__call_rec_fields(&mine, c);
  acc__call_rec_site(&mine, c->file);
  rc = g->be->ops->all_gather(g->be, &mine, all, sizeof mine);
  if (rc == ACC_OK) rc = acc__mismatch_error(fn, g->rank, &mine, all, g->size, 0);
  acc__free(all);
  return fail_remote(st, rc);
}

/* enter() of comm.c for a group call: origin, state, broken group, arguments, the number from
 * the job's counter, the descriptor published to the group's backend (*began: leave() must
 * follow), the tags compared where the backend does not. */
static acc_result genter(acc_state *st, int which, const char *fn, acc__call *c, grp *g, const char *file, int line,
                         int *began) {
  acc__comm_take_origin(&c->origin, &c->origin_index);
  *began = 0;
  ACC_CHECK(acc__state_check(st, fn));
  acc__comm_async_drain(st); /* submitted collectives first, in order (comm/async.h) */
  if (st->broken)
    return acc__error(ACC_ERR_REMOTE, "%s: the process group is broken by an earlier failure and cannot be used: %s",
                      fn, st->broken_msg);
  ACC_CHECK(resolve(st, which, g, fn));
  if (acc_dtype_size((acc_dtype)c->dtype) == 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: dtype %d is not an acc_dtype", fn, (int)c->dtype);
  if (c->red < 0 || c->red >= ACC_OP_COUNT_)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: op %d is not an acc_op", fn, (int)c->red);
  size_t all_bytes;
  if (c->count < 0 || __builtin_mul_overflow((size_t)c->count, acc_dtype_size((acc_dtype)c->dtype), &all_bytes) ||
      __builtin_mul_overflow(all_bytes, (size_t)g->size, &all_bytes))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: count %lld is too large", fn, (long long)c->count);
  c->group = which;
  c->seq = ++st->be->op_seq;
  if (acc__tls_site_depth > 0) {
    c->file = acc__tls_site_file;
    c->line = acc__tls_site_line;
    c->entry = acc__tls_site_entry;
  } else {
    c->file = file;
    c->line = line;
  }
  if (g->size == 1) return ACC_OK;
  acc__backend *be = g->be;
  be->op_name = fn;
  be->op_seq = c->seq;
  c->tag = acc__call_tag(c);
  be->call = c;
  *began = 1;
  if (!be->ops->checks_tags) ACC_CHECK(tag_exchange(st, g, c, fn));
  return ACC_OK;
}

static acc_result gleave(const grp *g, int began, acc_result rc) {
  if (began && rc != ACC_OK && rc != ACC_ERR_INVALID_ARGUMENT) /* the backend's ranks are the group's */
    rc = acc__error_context(rc, "over %s (member %d of %d)", group_names[g->which], g->rank, g->size);
  if (began) {
    if (g->be->ops->call_end) g->be->ops->call_end(g->be);
    g->be->call = NULL;
  }
  return rc;
}

/* The part of a group collective that differs by op: the backend call on the staged buffers a
 * and b (host memory), nb bytes a process, over g (size > 1). */
typedef acc_result (*grp_body)(acc_state *st, const grp *g, const acc__call *c, const void *a, void *b, size_t nb);

/* One group collective: enter, argument checks, device staging of send (send_all: a block from
 * every member, else one) and recv (recv_all likewise), the body, leave. */
static acc_result group_call(acc_state *st, int which, const char *fn, acc__call *c, const void *send,
                             int send_all, void *recv, int recv_all, grp_body body, const char *file, int line) {
  grp g = {NULL, 0, 1, 0};
  int began;
  acc_result rc = genter(st, which, fn, c, &g, file, line, &began);
  if (rc == ACC_OK && c->count > 0) {
    size_t nb = (size_t)c->count * acc_dtype_size((acc_dtype)c->dtype), n = (size_t)g.size;
    rc = acc__comm_need_buf(send, fn, "send");
    if (rc == ACC_OK) rc = acc__comm_need_buf(recv, fn, "recv");
    const uint8_t *s0 = send, *r0 = recv;
    if (rc == ACC_OK && send_all && !recv_all && r0 != s0 + (size_t)g.rank * nb && r0 < s0 + nb * n && s0 < r0 + nb)
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: recv overlaps send but is not this process's block of it (send + rank * count "
                      "elements, the in-place form)", fn);
    acc__devio io;
    if (rc == ACC_OK) {
      rc = acc__comm_stage_begin(&io, send, send_all ? nb * n : nb, 1, recv, recv_all ? nb * n : nb, 0);
      if (rc == ACC_OK) {
        if (g.size == 1) {
          if (io.a != io.b) memmove(io.b, io.a, nb);
        } else {
          rc = body(st, &g, c, io.a, io.b, nb);
        }
      }
      rc = acc__comm_stage_end(&io, rc, 1);
    }
  }
  return gleave(&g, began, rc);
}

static acc_result gather_body(acc_state *st, const grp *g, const acc__call *c, const void *a, void *b, size_t nb) {
  (void)c;
  return fail_remote(st, g->be->ops->all_gather(g->be, a, b, nb));
}

static acc_result reduce_scatter_body(acc_state *st, const grp *g, const acc__call *c, const void *a, void *b,
                                      size_t nb) {
  acc_dtype dtype = (acc_dtype)c->dtype;
  size_t count = (size_t)c->count, n = (size_t)g->size;
  acc_op bop = c->red == ACC_MEAN ? ACC_SUM : (acc_op)c->red;
  acc_result rc;
  if (g->be->ops->reduce_scatter) {
    rc = fail_remote(st, g->be->ops->reduce_scatter(g->be, a, b, count, dtype, bop));
  } else { /* the whole buffer all-reduced into a temporary, this process's block kept */
    uint8_t *tmp = acc__malloc(nb * n);
    rc = tmp ? fail_remote(st, g->be->ops->all_reduce(g->be, a, tmp, count * n, dtype, bop))
             : acc__error(ACC_ERR_NOMEM, "%s: cannot allocate %zu bytes", g->be->op_name, nb * n);
    if (rc == ACC_OK) memmove(b, tmp + (size_t)g->rank * nb, nb);
    acc__free(tmp);
  }
  if (rc == ACC_OK && c->red == ACC_MEAN) acc__divide(b, count, dtype, g->size);
  return rc;
}

static acc_result all_reduce_body(acc_state *st, const grp *g, const acc__call *c, const void *a, void *b,
                                  size_t nb) {
  (void)nb;
  acc_dtype dtype = (acc_dtype)c->dtype;
  size_t count = (size_t)c->count;
  acc_result rc = fail_remote(st, g->be->ops->all_reduce(g->be, a, b, count, dtype,
                                                         c->red == ACC_MEAN ? ACC_SUM : (acc_op)c->red));
  if (rc == ACC_OK && c->red == ACC_MEAN) acc__divide(b, count, dtype, g->size);
  return rc;
}

acc_result acc__comm_group_all_gather_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, const char *file, int line) {
  if (which == ACC__GROUP_WORLD) return acc_all_gather_at(st, send, recv, count, dtype, file, line);
  ACC_PROF_SCOPE(ACC_PROF_COMM, "group_all_gather");
  acc__call c = {.op = ACC__OP_ALL_GATHER, .dtype = dtype, .count = (int64_t)count};
  return group_call(st, which, "all_gather (subgroup)", &c, send, 0, recv, 1, gather_body, file, line);
}

acc_result acc__comm_group_reduce_scatter_at(acc_state *st, int which, const void *send, void *recv,
                                             size_t count, acc_dtype dtype, acc_op op, const char *file,
                                             int line) {
  if (which == ACC__GROUP_WORLD) return acc_reduce_scatter_at(st, send, recv, count, dtype, op, file, line);
  ACC_PROF_SCOPE(ACC_PROF_COMM, "group_reduce_scatter");
  acc__call c = {.op = ACC__OP_REDUCE_SCATTER, .dtype = dtype, .count = (int64_t)count, .red = op};
  return group_call(st, which, "reduce_scatter (subgroup)", &c, send, 1, recv, 0, reduce_scatter_body, file, line);
}

acc_result acc__comm_group_all_reduce_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op, const char *file, int line) {
  if (which == ACC__GROUP_WORLD) return acc_all_reduce_at(st, send, recv, count, dtype, op, file, line);
  ACC_PROF_SCOPE(ACC_PROF_COMM, "group_all_reduce");
  acc__call c = {.op = ACC__OP_ALL_REDUCE, .dtype = dtype, .count = (int64_t)count, .red = op};
  return group_call(st, which, "all_reduce (subgroup)", &c, send, 0, recv, 0, all_reduce_body, file, line);
}
