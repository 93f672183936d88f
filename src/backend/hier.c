/* The hierarchical backend: shared memory inside a machine, gloo only between one leader per
 * machine (local rank 0). An all_reduce over M machines x K processes reduces inside each
 * machine over shm, all-reduces between the M leaders with gloo, and broadcasts back over shm,
 * so each machine sends one copy of the buffer over the network instead of K. Every other
 * collective is composed the same way (local step, leaders' step, local step).
 *
 * From 256 KiB on, all_reduce spreads the step between machines over every process (one gloo
 * "rail" per local rank, see h_all_reduce); from 8 MiB on it is pipelined in 4 MiB pieces, the
 * rail's transfer of one piece running on a thread of its own while the shm steps of the
 * neighbouring pieces run on the caller's (rails_pipelined). all_gather is pipelined the same
 * way from an output of 8 MiB on (gather_pipelined): the leaders exchange piece p on that
 * thread while the machine broadcasts piece p - 1 over shm.
 *
 * Requires the usual placement: every machine runs K processes with global ranks
 * machine*K .. machine*K+K-1 (accelerate launch and torchrun place ranks so).
 * Mismatch detection: checks_tags 0, so comm.c compares every rank's call tag (with an
 * all_reduce through this backend) before each collective; timeouts are the inner backends'.
 * Its gloo groups have no call of their own (call NULL): their header exchanges carry tag 0
 * (gloo.cc). With one process per machine the default is gloo alone (state.c), not this. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/collcheck.h"
#include "backend/hier.h"
#include "backend/shm.h"

/* The arguments of the worker's jobs (see job_start). */
typedef struct rail_args { /* job_rail_all_reduce: rails_pipelined's piece, in place */
  void *buf;
  size_t count;
  acc_dtype dt;
  acc_op op;
} rail_args;

typedef struct piece_args { /* job_gather_piece: gather_pipelined's piece */
  char *r;
  size_t off, len, block;
} piece_args;

typedef struct hier_be {
  acc__backend base;
  acc__backend *local;   /* shm over this machine's K processes */
  acc__backend *rail;    /* gloo over the M processes of this local rank, one per machine */
  acc__backend *leaders; /* the rail of local rank 0 (the leaders); NULL on the others */
  int k, m, lrank, mach;
  size_t piece; /* pipeline piece of all_reduce and all_gather, bytes (0: off); the same on every process */
  void *scratch;
  size_t scratch_cap;
  /* The rail worker (the pipelines of all_reduce and all_gather): runs one job at a time on
   * its own thread (a rail all_reduce, or the leaders' all_gather of a piece) while this thread
   * does the machine's shm steps of the neighbouring pieces. */
  pthread_t worker;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int worker_up, job, quit;  /* job: 1 while a job is posted or running */
  acc_result (*job_fn)(struct hier_be *h);
  union {
    rail_args rail;
    piece_args piece;
  } job_args; /* the posted job's, copied in by job_start */
  acc_result job_rc;
  char job_err[512];
} hier_be;

static void *scratch(hier_be *h, size_t n) {
  if (n > h->scratch_cap) {
    void *p = acc__realloc(h->scratch, n);
    if (!p) return NULL;
    h->scratch = p;
    h->scratch_cap = n;
  }
  return h->scratch;
}

/* The inner backends' error messages name the outer collective. */
static void tag_inner(hier_be *h) {
  h->local->op_name = h->base.op_name;
  h->local->op_seq = h->base.op_seq;
  h->local->call = h->base.call; /* the machine's group checks tags and reports the program's call */
  if (h->rail) {
    h->rail->op_name = h->base.op_name;
    h->rail->op_seq = h->base.op_seq;
  }
}

static void end_local(hier_be *h) {
  if (h->local->ops->call_end) h->local->ops->call_end(h->local);
  h->local->call = NULL;
}

static acc_result h_barrier(acc__backend *be) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  if (h->k > 1) ACC_CHECK(h->local->ops->barrier(h->local));
  if (h->leaders) ACC_CHECK(h->leaders->ops->barrier(h->leaders));
  if (h->k > 1) ACC_CHECK(h->local->ops->barrier(h->local));
  end_local(h);
  return ACC_OK;
}

static acc_result h_broadcast(acc__backend *be, void *buf, size_t n, int root) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  int rm = root / h->k, rl = root % h->k;
  if (h->mach == rm && h->k > 1) ACC_CHECK(h->local->ops->broadcast(h->local, buf, n, rl));
  if (h->leaders) ACC_CHECK(h->leaders->ops->broadcast(h->leaders, buf, n, rm));
  if (h->mach != rm && h->k > 1) ACC_CHECK(h->local->ops->broadcast(h->local, buf, n, 0));
  end_local(h);
  return ACC_OK;
}

/* The leaders' all_reduce: the machine's sum on its leader (shm reduce), the leaders' all_reduce,
 * the result to the machine (shm broadcast). One gloo step of the whole buffer: the fewest
 * steps, for small buffers. */
static acc_result leaders_all_reduce(hier_be *h, const void *send, void *recv, size_t count,
                                     acc_dtype dt, acc_op op) {
  size_t bytes = count * acc_dtype_size(dt);
  if (h->k > 1)
    ACC_CHECK(h->local->ops->reduce(h->local, send, h->lrank == 0 ? recv : NULL, count, dt, op, 0));
  else if (send != recv)
    memcpy(recv, send, bytes);
  if (h->leaders) ACC_CHECK(h->leaders->ops->all_reduce(h->leaders, recv, recv, count, dt, op));
  if (h->k > 1) ACC_CHECK(h->local->ops->broadcast(h->local, recv, bytes, 0));
  return ACC_OK;
}

/* From this size on, all_reduce runs on every rail (see h_all_reduce). */
#define HIER_RAILS_MIN_BYTES ((size_t)256 * 1024)
/* From twice this size on, all_reduce (its buffer) and all_gather (its output) are pipelined in
 * pieces of about this many bytes (see rails_pipelined, gather_pipelined);
 * ACCELERATE_HIER_PIECE_BYTES overrides it (0: no pipeline). Every process of
 * every machine must cut the buffer the same way, or the rails would pair different pieces, so
 * rank 0's value is broadcast when the backend is created. */
#define HIER_PIPE_PIECE_BYTES ((size_t)4 * 1024 * 1024)

static void *rail_worker(void *arg) {
  hier_be *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!h->job && !h->quit) pthread_cond_wait(&h->cv, &h->mu);
    if (h->quit) break;
    acc_result (*fn)(hier_be *) = h->job_fn;
    pthread_mutex_unlock(&h->mu);
    acc_result rc = fn(h); /* the job's fields were set before it was posted, under mu */
    pthread_mutex_lock(&h->mu);
    h->job_rc = rc;
    if (rc != ACC_OK) snprintf(h->job_err, sizeof h->job_err, "%s", acc_last_error());
    h->job = 0;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* Posts a job (fn, its arguments copied from args: n bytes) to the worker, starting it first. */
static acc_result job_start(hier_be *h, acc_result (*fn)(hier_be *), const void *args, size_t n) {
  if (!h->worker_up) {
    if (pthread_mutex_init(&h->mu, NULL) != 0) return acc__error(ACC_ERR_SYSTEM, "hierarchical backend: cannot create a mutex for its pipeline thread");
    if (pthread_cond_init(&h->cv, NULL) != 0) {
      pthread_mutex_destroy(&h->mu);
      return acc__error(ACC_ERR_SYSTEM, "hierarchical backend: cannot create a condition variable for its pipeline thread");
    }
    if (pthread_create(&h->worker, NULL, rail_worker, h) != 0) {
      pthread_cond_destroy(&h->cv);
      pthread_mutex_destroy(&h->mu);
      return acc__error(ACC_ERR_SYSTEM, "hierarchical backend: cannot start its pipeline thread");
    }
    h->worker_up = 1;
  }
  pthread_mutex_lock(&h->mu);
  memcpy(&h->job_args, args, n);
  h->job_fn = fn;
  h->job_rc = ACC_OK;
  h->job = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return ACC_OK;
}

/* The rail all_reduce of rails_pipelined's piece, in place. */
static acc_result job_rail_all_reduce(hier_be *h) {
  const rail_args *a = &h->job_args.rail;
  return h->rail->ops->all_reduce(h->rail, a->buf, a->buf, a->count, a->dt, a->op);
}

static acc_result rail_start(hier_be *h, void *buf, size_t count, acc_dtype dt, acc_op op) {
  rail_args a = {buf, count, dt, op};
  return job_start(h, job_rail_all_reduce, &a, sizeof a);
}

/* Waits for the posted job (there is always one when called) and passes its error on, in the
 * worker's words, on this thread. */
static acc_result rail_wait(hier_be *h) {
  pthread_mutex_lock(&h->mu);
  while (h->job) pthread_cond_wait(&h->cv, &h->mu);
  acc_result rc = h->job_rc;
  pthread_mutex_unlock(&h->mu);
  if (rc != ACC_OK) return acc__error(rc, "%s", h->job_err);
  return ACC_OK;
}

/* A pipeline's shm step failed with rc while the worker may still run a job: waits for that job
 * (bounded by the rail's own timeout), so no thread writes into the program's buffer after the
 * call, and returns rc with the shm step's message, not the job's. */
static acc_result rail_drain(hier_be *h, acc_result rc) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", acc_last_error());
  (void)rail_wait(h);
  return acc__error(rc, "%s", msg);
}

/* h_all_reduce's rail path for large buffers, cut into P pieces: piece p's shm reduce_scatter
 * runs while the rail thread all-reduces piece p - 1 between machines, and piece p - 1's shm
 * all_gather while it all-reduces piece p, so the machine's shm steps hide behind the transfer
 * between machines instead of adding to it. Every piece is K slices of cs elements, as in the
 * unpipelined path; the pieces cover the first K * c elements. Regions never overlap: the rail
 * works on piece p's own slice, the shm steps on pieces p - 1 and p + 1. A shm step that fails
 * waits for the rail's piece in flight (bounded by the rail's own timeout) before returning, so
 * no thread writes into the program's buffer after the call. */
static acc_result rails_pipelined(hier_be *h, const char *s, char *r, size_t c, size_t pieces,
                                  acc_dtype dt, acc_op op) {
  size_t es = acc_dtype_size(dt), k = (size_t)h->k, l = (size_t)h->lrank;
  size_t base = c / pieces, extra = c % pieces, off = 0, prev_off = 0, prev_cs = 0;
  for (size_t p = 0; p <= pieces; p++) {
    size_t cs = p < pieces ? base + (p < extra ? 1 : 0) : 0;
    acc_result rc = ACC_OK;
    if (p < pieces) /* piece p: elements [k * off, k * (off + cs)), slice l at k * off + l * cs */
      rc = h->local->ops->reduce_scatter(h->local, s + k * off * es, r + (k * off + l * cs) * es, cs, dt, op);
    if (p > 0) {
      if (rc != ACC_OK) return rail_drain(h, rc); /* piece p - 1 is in flight */
      rc = rail_wait(h);
    }
    if (rc == ACC_OK && p < pieces) rc = rail_start(h, r + (k * off + l * cs) * es, cs, dt, op);
    if (rc == ACC_OK && p > 0)
      rc = h->local->ops->all_gather(h->local, r + (k * prev_off + l * prev_cs) * es, r + k * prev_off * es,
                                     prev_cs * es);
    if (rc != ACC_OK) {
      /* piece p may be in flight (its all_gather failed) */
      return p < pieces && h->worker_up ? rail_drain(h, rc) : rc;
    }
    prev_off = off;
    prev_cs = cs;
    off += cs;
  }
  return ACC_OK;
}

/* all_reduce: small buffers through the leaders (leaders_all_reduce). From
 * HIER_RAILS_MIN_BYTES on, every process carries a 1/K slice between machines, as NCCL's
 * channels do: a shm reduce_scatter leaves local rank l the machine's sum of slice l, rail l
 * (gloo over the local ranks l of every machine) all-reduces that slice, and a shm all_gather
 * puts the slices together. Each machine still sends one copy of the buffer, but K processes
 * (and K connections) share the work of the single leader, and no process copies the whole
 * buffer through the leader. The count % K elements at the end go the leaders' way. */
static acc_result h_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                               acc_dtype dt, acc_op op) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  size_t es = acc_dtype_size(dt), c = count / (size_t)h->k, kc = c * (size_t)h->k;
  if (h->k == 1 || c == 0 || count * es < HIER_RAILS_MIN_BYTES) {
    ACC_CHECK(leaders_all_reduce(h, send, recv, count, dt, op));
    end_local(h);
    return ACC_OK;
  }
  char *r = recv, *mine = r + (size_t)h->lrank * c * es;
  const char *s = send;
  size_t pieces = h->piece ? kc * es / h->piece : 0;
  if (pieces >= 2 && c >= pieces) {
    ACC_CHECK(rails_pipelined(h, s, r, c, pieces, dt, op));
  } else {
    /* send == recv is reduce_scatter's in-place form; otherwise they do not overlap */
    ACC_CHECK(h->local->ops->reduce_scatter(h->local, s, mine, c, dt, op));
    ACC_CHECK(h->rail->ops->all_reduce(h->rail, mine, mine, c, dt, op));
    ACC_CHECK(h->local->ops->all_gather(h->local, mine, r, c * es));
  }
  if (kc < count)
    ACC_CHECK(leaders_all_reduce(h, s + kc * es, r + kc * es, count - kc, dt, op));
  end_local(h);
  return ACC_OK;
}

static acc_result h_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                           acc_dtype dt, acc_op op, int root) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  size_t bytes = count * acc_dtype_size(dt);
  int rm = root / h->k, rl = root % h->k, is_root = be->rank == root;
  /* leaders: [0, bytes) the machine's sum, [bytes, 2 bytes) the result on the root machine */
  char *t = NULL;
  if (h->lrank == 0 || (h->mach == rm && !is_root)) {
    t = scratch(h, 2 * bytes);
    if (!t) return ACC_ERR_NOMEM;
  }
  if (h->k > 1)
    ACC_CHECK(h->local->ops->reduce(h->local, send, h->lrank == 0 ? t : NULL, count, dt, op, 0));
  else
    memcpy(t, send, bytes);
  if (h->leaders)
    ACC_CHECK(h->leaders->ops->reduce(h->leaders, t, t + bytes, count, dt, op, rm));
  if (h->mach == rm) {
    if (rl == 0) {
      if (is_root) memcpy(recv, t + bytes, bytes);
    } else {
      /* from the leader to the root: a broadcast inside the root's machine */
      void *dst = is_root ? recv : t + bytes;
      ACC_CHECK(h->local->ops->broadcast(h->local, dst, bytes, 0));
    }
  }
  end_local(h);
  return ACC_OK;
}

/* The leaders' all_gather of one piece (piece_args): bytes [off, off + len) of every machine's
 * block, this machine's taken from its place in the output (r), the others landing in theirs
 * (the leaders' strided all_gather, stride one machine block: no scratch, no copy). */
static acc_result job_gather_piece(hier_be *h) {
  const piece_args *a = &h->job_args.piece;
  acc__backend *l = h->leaders;
  return l->ops->all_gather_strided(l, a->r + (size_t)h->mach * a->block + a->off, a->r + a->off,
                                    a->len, a->block);
}

/* The length of the piece of ps bytes at off in a block of `block` bytes (the last is shorter). */
static size_t piece_len(size_t block, size_t off, size_t ps) {
  return block - off < ps ? block - off : ps;
}

/* h_all_gather's step between machines and the broadcast after it, for large outputs: every
 * machine's block (already gathered on its leader, in place in r) is cut into the same P pieces
 * of ps bytes (the last shorter); the leader's worker thread exchanges piece p between the
 * leaders (job_gather_piece) while the machine broadcasts piece p - 1 of every block over shm,
 * so the shm broadcast hides behind the transfer between machines. The other processes of the
 * machine only broadcast, in the same order. As in rails_pipelined, a failing shm step waits
 * for the piece in flight before returning. */
static acc_result gather_pipelined(hier_be *h, char *r, size_t block, size_t pieces) {
  size_t ps = (block + pieces - 1) / pieces;
  pieces = (block + ps - 1) / ps; /* every piece at least one byte */
  for (size_t p = 0; p <= pieces; p++) {
    acc_result rc = ACC_OK;
    if (p > 0 && h->leaders) rc = rail_wait(h); /* piece p - 1 is in place on the leader */
    if (rc == ACC_OK && p < pieces && h->leaders) {
      piece_args a = {r, p * ps, piece_len(block, p * ps, ps), block};
      rc = job_start(h, job_gather_piece, &a, sizeof a);
    }
    if (rc != ACC_OK) return rc; /* nothing in flight: the job failed, or did not start */
    if (p == 0) continue;
    size_t off = (p - 1) * ps, len = piece_len(block, off, ps);
    for (int m = 0; m < h->m && rc == ACC_OK; m++)
      rc = h->local->ops->broadcast(h->local, r + (size_t)m * block + off, len, 0);
    if (rc != ACC_OK) return p < pieces && h->leaders ? rail_drain(h, rc) : rc; /* p in flight */
  }
  return ACC_OK;
}

static acc_result h_all_gather(acc__backend *be, const void *send, void *recv, size_t n) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  char *r = recv;
  size_t block = (size_t)h->k * n, total = (size_t)be->size * n;
  char *mine = r + (size_t)h->mach * block;
  const void *src = send;
  if ((const char *)send >= r && (const char *)send < r + total) {
    void *t = scratch(h, n); /* send inside recv (in place): copy it out first */
    if (!t) return ACC_ERR_NOMEM;
    memcpy(t, send, n);
    src = t;
  }
  if (h->k > 1)
    ACC_CHECK(h->local->ops->gather(h->local, src, h->lrank == 0 ? mine : NULL, n, 0));
  else if (src != mine)
    memmove(mine, src, n);
  size_t pieces = h->piece ? total / h->piece : 0;
  if (h->k > 1 && h->m > 1 && pieces >= 2) {
    ACC_CHECK(gather_pipelined(h, r, block, pieces));
  } else {
    if (h->leaders) ACC_CHECK(h->leaders->ops->all_gather(h->leaders, mine, r, block));
    if (h->k > 1) ACC_CHECK(h->local->ops->broadcast(h->local, r, total, 0));
  }
  end_local(h);
  return ACC_OK;
}

static acc_result h_gather(acc__backend *be, const void *send, void *recv, size_t n, int root) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  size_t block = (size_t)h->k * n, total = (size_t)be->size * n;
  int rm = root / h->k, rl = root % h->k, is_root = be->rank == root;
  /* the full result lives in recv on the root, in scratch elsewhere (leaders, root machine) */
  char *full = NULL;
  if (is_root) full = recv;
  else if (h->lrank == 0 || h->mach == rm) {
    full = scratch(h, total);
    if (!full) return ACC_ERR_NOMEM;
  }
  char *mine = full ? full + (size_t)h->mach * block : NULL;
  if (h->k > 1)
    ACC_CHECK(h->local->ops->gather(h->local, send, h->lrank == 0 ? mine : NULL, n, 0));
  else
    memcpy(mine, send, n);
  if (h->leaders) {
    /* gloo's gather reads its input while writing the root's output: keep them apart */
    void *in = mine;
    if (h->mach == rm) {
      char *t = acc__malloc(block);
      if (!t) return ACC_ERR_NOMEM;
      memcpy(t, mine, block);
      acc_result rc = h->leaders->ops->gather(h->leaders, t, full, block, rm);
      acc__free(t);
      ACC_CHECK(rc);
    } else {
      ACC_CHECK(h->leaders->ops->gather(h->leaders, in, NULL, block, rm));
    }
  }
  if (h->mach == rm && rl != 0 && h->k > 1)
    ACC_CHECK(h->local->ops->broadcast(h->local, full, total, 0));
  end_local(h);
  return ACC_OK;
}

static acc_result h_all_gather_v(acc__backend *be, const void *send, void *recv,
                                 const size_t *sizes) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  size_t *msz = acc__calloc((size_t)h->m, sizeof *msz);
  if (!msz) return ACC_ERR_NOMEM;
  size_t total = 0, off = 0;
  for (int mm = 0; mm < h->m; mm++) {
    for (int l = 0; l < h->k; l++) msz[mm] += sizes[mm * h->k + l];
    if (mm < h->mach) off += msz[mm];
    total += msz[mm];
  }
  acc_result rc = ACC_OK;
  char *r = recv;
  size_t mine = msz[h->mach], sz = sizes[be->rank];
  if (sz > 0 && (const char *)send >= r && (const char *)send < r + total) {
    void *t = scratch(h, sz); /* send inside recv (in place): copy it out first */
    if (!t) {
      acc__free(msz);
      return ACC_ERR_NOMEM;
    }
    memcpy(t, send, sz);
    send = t;
  }
  if (mine > 0) {
    if (h->k > 1) rc = h->local->ops->all_gather_v(h->local, send, r + off, sizes + h->mach * h->k);
    else if (send != r + off) memmove(r + off, send, mine);
  }
  if (rc == ACC_OK && h->leaders && total > 0) {
    void *t = mine ? acc__malloc(mine) : NULL;
    if (mine && !t) rc = ACC_ERR_NOMEM;
    if (rc == ACC_OK) {
      if (mine) memcpy(t, r + off, mine);
      rc = h->leaders->ops->all_gather_v(h->leaders, t, r, msz);
    }
    acc__free(t);
  }
  if (rc == ACC_OK && h->k > 1 && total > 0) rc = h->local->ops->broadcast(h->local, r, total, 0);
  acc__free(msz);
  end_local(h);
  return rc;
}

/* reduce_scatter: the machine's sum of the whole buffer on its leader (shm reduce), the leaders'
 * reduce_scatter over machine blocks (k blocks each: the gloo module's own, not an all_reduce),
 * then the machine's block to its processes (shm broadcast), each keeping its own. */
static acc_result h_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op) {
  hier_be *h = (hier_be *)be;
  tag_inner(h);
  size_t es = acc_dtype_size(dt), n = count * es, blk = (size_t)h->k * n;
  size_t total = (size_t)be->size * n;
  char *t = scratch(h, h->lrank == 0 ? total : blk);
  if (!t) return ACC_ERR_NOMEM;
  char *mblk = h->lrank == 0 ? t + (size_t)h->mach * blk : t;
  if (h->k > 1)
    ACC_CHECK(h->local->ops->reduce(h->local, send, h->lrank == 0 ? t : NULL,
                                    count * (size_t)be->size, dt, op, 0));
  else
    memcpy(t, send, total);
  if (h->leaders) {
    acc__backend *g = h->leaders;
    if (g->ops->reduce_scatter) {
      ACC_CHECK(g->ops->reduce_scatter(g, t, mblk, count * (size_t)h->k, dt, op));
    } else {
      ACC_CHECK(g->ops->all_reduce(g, t, t, count * (size_t)be->size, dt, op));
    }
  }
  if (h->k > 1) ACC_CHECK(h->local->ops->broadcast(h->local, mblk, blk, 0));
  memmove(recv, mblk + (size_t)h->lrank * n, n);
  end_local(h);
  return ACC_OK;
}

static void h_destroy(acc__backend *be) {
  hier_be *h = (hier_be *)be;
  if (h->worker_up) {
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->worker, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
  }
  if (h->rail) h->rail->ops->destroy(h->rail);
  h->local->ops->destroy(h->local);
  acc__free(h->scratch);
  acc__free(h);
}

/* The subgroups (backend.h): the machine's shm group and this local rank's gloo rail, the very
 * backends the job's collectives use for their steps. Between the job's collectives they are
 * idle (the rail thread of h_all_reduce has finished before it returns), so a subgroup call
 * cannot cross one of the job's. The shm group checks the call tags itself and the gloo rail
 * carries them in its header exchange, so a subgroup call that differs between processes fails
 * with ACC_ERR_MISMATCH on every member; a dead member is seen by shm (its robust mutex, the
 * board) or by gloo (a closed connection, else the timeout). */
static acc_result h_subgroup(acc__backend *be, int which, acc__backend **out) {
  hier_be *h = (hier_be *)be;
  *out = NULL;
  if (which == ACC__GROUP_LOCAL) *out = h->k > 1 ? h->local : NULL;
  else if (which == ACC__GROUP_RAIL) *out = h->rail;
  else return acc__error(ACC_ERR_INVALID_ARGUMENT, "hierarchical backend: group %d is not a subgroup", which);
  return ACC_OK;
}

static const acc__backend_ops hier_ops = {
    "hierarchical", h_barrier, h_broadcast, h_all_reduce, h_reduce, h_all_gather, h_gather,
    h_all_gather_v, h_destroy, NULL, 0, h_reduce_scatter, NULL, NULL, NULL, h_subgroup,
    NULL, /* all_gather_strided: only its own leaders' */
};

acc_result acc__backend_hier_create(acc__backend **out, const acc__proc_info *info,
                                    acc__group_create_fn leaders_create) {
  *out = NULL;
  int k = info->local_size, m = info->num_machines;
  if (m < 2 || k < 1 || info->size != k * m || info->rank != info->machine_rank * k + info->local_rank)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "the hierarchical backend needs the same number of processes on every "
                      "machine, with consecutive ranks (rank %d is local rank %d of %d on machine "
                      "%d of %d): use ACCELERATE_BACKEND=gloo",
                      info->rank, info->local_rank, k, info->machine_rank, m);
  hier_be *h = acc__calloc(1, sizeof *h);
  if (!h) return ACC_ERR_NOMEM;
  h->base.ops = &hier_ops;
  h->base.rank = info->rank;
  h->base.size = info->size;
  h->k = k;
  h->m = m;
  h->lrank = info->local_rank;
  h->mach = info->machine_rank;
  acc__proc_info li = *info;
  li.rank = info->local_rank;
  li.size = k;
  li.machine_group = 1;
  acc_result rc = k > 1 ? acc__backend_shm_create(&h->local, &li) : acc__backend_single_create(&h->local);
  if (rc == ACC_OK) { /* rail l: local rank l of every machine; rail 0 is the leaders' group */
    acc__proc_info gi = *info;
    gi.rank = info->machine_rank;
    gi.size = m;
    gi.local_rank = 0;
    gi.local_size = 1;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "hier-rail-%d", info->local_rank);
    rc = leaders_create(&h->rail, &gi, prefix);
    if (rc == ACC_OK && !h->rail->ops->all_gather_strided) { /* gather_pipelined's pieces */
      rc = acc__error(ACC_ERR_INTERNAL, "hierarchical backend: its group between machines (%s) "
                      "has no strided all_gather", h->rail->ops->name);
      h->rail->ops->destroy(h->rail);
    }
    if (info->local_rank == 0) h->leaders = h->rail;
  }
  if (rc == ACC_OK) { /* the pipeline's piece: rank 0's, so that every rail cuts alike */
    long v = (long)HIER_PIPE_PIECE_BYTES;
    int set = 0;
    uint64_t piece = 0;
    rc = acc__env_int("ACCELERATE_HIER_PIECE_BYTES", &v, &set);
    piece = (uint64_t)v;
    if (rc == ACC_OK) {
      h->base.op_name = "join (the hierarchical backend's set-up)";
      rc = h_broadcast(&h->base, &piece, sizeof piece, 0);
      h->base.op_name = NULL;
      h->piece = (size_t)piece;
    }
    if (rc != ACC_OK) h->rail->ops->destroy(h->rail);
  }
  if (rc != ACC_OK) {
    if (h->local) h->local->ops->destroy(h->local);
    acc__free(h);
    return rc;
  }
  *out = &h->base;
  return ACC_OK;
}
