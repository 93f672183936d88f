/* A submitted collective and the queue's entry points, shared by comm_submit.c (what a job runs,
 * the submit calls) and comm_async.c (the queue, the worker, wait). Private to src/comm. */
#ifndef ACC_COMM_ASYNC_JOB_H
#define ACC_COMM_ASYNC_JOB_H

#include "comm/async.h"
#include "comm/stage.h"

enum { JOB_ALL_GATHER, JOB_REDUCE_SCATTER, JOB_ALL_REDUCE };

struct acc__comm_job {
  /* the collective, run on the worker (comm_submit.c's synchronous call) */
  acc_result (*run)(struct acc__comm_job *j, const void *send, void *recv);
  acc__comm_job *next;                  /* in the queue */
  acc__comm_job *out_prev, *out_next;   /* submitted to the worker and not waited yet */
  struct acc__comm_async *q;            /* the worker's queue; NULL: ran at submit, or the state ended */
  acc_state *st;
  int kind, which;
  size_t count;
  acc_dtype dtype;
  acc_op op;
  const void *send; /* host pointers the backend uses (staged when the program's were device memory) */
  void *recv;
  acc__devio io;    /* the staging, ended by the waiter */
  int staged;
  /* the submitting thread's descriptor inputs */
  int32_t origin;
  int64_t origin_index;
  int32_t site_depth, site_entry, site_line;
  const char *site_file;
  const char *file;
  int line;
  /* outcome (under the queue's lock) */
  int done;
  acc_result rc;
  char msg[2048];
};

/* 1 on the comm worker thread */
int acc__comm_async_on_worker(void);

/* Queues job (job->run set, buffers staged) on st's worker, started here on first use. */
acc_result acc__comm_async_enqueue(acc_state *st, acc__comm_job *job);

#endif
