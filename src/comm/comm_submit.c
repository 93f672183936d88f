/* The submit calls of async.h: what a submitted collective runs (the synchronous collective of
 * comm_group.c), its descriptor inputs captured from the submitting thread, the staging of device
 * buffers on that thread, and the decision to run it at once (one process, a backend that may
 * only be called from its own thread). The queue and the worker are comm_async.c's. */
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "comm/async_job.h"
#include "comm/group.h"
#include "state/state.h"

static acc_result run_sync(acc__comm_job *j, const void *send, void *recv) {
  switch (j->kind) {
    case JOB_ALL_GATHER:
      return acc__comm_group_all_gather_at(j->st, j->which, send, recv, j->count, j->dtype, j->file, j->line);
    case JOB_REDUCE_SCATTER:
      return acc__comm_group_reduce_scatter_at(j->st, j->which, send, recv, j->count, j->dtype, j->op, j->file,
                                               j->line);
    default:
      return acc__comm_group_all_reduce_at(j->st, j->which, send, recv, j->count, j->dtype, j->op, j->file,
                                           j->line);
  }
}

static acc_result submit(acc__comm_job *j, acc__comm_job **out) {
  acc_state *st = j->st;
  *out = NULL;
  acc__comm_take_origin(&j->origin, &j->origin_index); /* the caller's, whatever happens next */
  acc__comm_job *job = acc__calloc(1, sizeof *job);
  if (!job) return acc__error(ACC_ERR_NOMEM, "cannot allocate a submitted collective");
  *job = *j;
  job->site_depth = acc__tls_site_depth;
  job->site_entry = acc__tls_site_entry;
  job->site_line = acc__tls_site_line;
  job->site_file = acc__tls_site_file;
  int grank = 0, gsize = 1;
  int overlap = acc__state_check(st, "acc__comm_async") == ACC_OK && acc__comm_async_overlaps(st) &&
                !acc__comm_async_on_worker() && acc__comm_group_info(st, job->which, &grank, &gsize) == ACC_OK &&
                gsize > 1;
  if (!overlap) { /* at submit time, on this thread: the synchronous call, its result kept */
    acc__comm_origin((acc__origin)job->origin, job->origin_index);
    job->rc = run_sync(job, j->send, j->recv);
    if (job->rc != ACC_OK) snprintf(job->msg, sizeof job->msg, "%s", acc_last_error());
    job->done = 1;
    *out = job;
    return ACC_OK;
  }
  size_t nb = job->count * acc_dtype_size(job->dtype), n = (size_t)gsize;
  size_t a_bytes = job->kind == JOB_REDUCE_SCATTER ? nb * n : nb;
  size_t b_bytes = job->kind == JOB_ALL_GATHER ? nb * n : nb;
  acc_result rc = acc__comm_stage_begin(&job->io, j->send, a_bytes, 1, j->recv, b_bytes, 0);
  if (rc != ACC_OK) {
    acc__free(job);
    return rc;
  }
  job->staged = 1;
  job->send = job->io.a;
  job->recv = job->io.b;
  job->run = run_sync;
  rc = acc__comm_async_enqueue(st, job);
  if (rc != ACC_OK) {
    acc__comm_stage_end(&job->io, rc, 0);
    acc__free(job);
    return rc;
  }
  *out = job;
  return ACC_OK;
}

acc_result acc__comm_async_all_gather_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc__comm_job **out, const char *file, int line) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__comm_async_all_gather: out is NULL");
  acc__comm_job j = {.st = st, .kind = JOB_ALL_GATHER, .which = which, .count = count, .dtype = dtype,
                     .send = send, .recv = recv, .file = file, .line = line};
  return submit(&j, out);
}

acc_result acc__comm_async_reduce_scatter_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                             acc_dtype dtype, acc_op op, acc__comm_job **out, const char *file,
                                             int line) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__comm_async_reduce_scatter: out is NULL");
  acc__comm_job j = {.st = st, .kind = JOB_REDUCE_SCATTER, .which = which, .count = count, .dtype = dtype,
                     .op = op, .send = send, .recv = recv, .file = file, .line = line};
  return submit(&j, out);
}

acc_result acc__comm_async_all_reduce_at(acc_state *st, int which, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op, acc__comm_job **out, const char *file, int line) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__comm_async_all_reduce: out is NULL");
  acc__comm_job j = {.st = st, .kind = JOB_ALL_REDUCE, .which = which, .count = count, .dtype = dtype,
                     .op = op, .send = send, .recv = recv, .file = file, .line = line};
  return submit(&j, out);
}

