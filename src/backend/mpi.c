/* The MPI backend: every collective maps onto the MPI call of the same name, on a private
 * duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN so that MPI failures come back as
 * ACC_ERR_BACKEND instead of aborting the process.
 *
 * Counts: MPI takes int counts, so large buffers are split into chunks of at most
 * ACC_MPI_CHUNK_MAX elements (reductions, broadcast) or gathered through a resized datatype whose
 * extent is the per-rank block (gathers), so nothing here overflows for buffers > 2 GiB.
 * f16 and bf16 reductions use user-defined MPI_Ops that reduce through float
 * (acc__reduce_inplace), on contiguous 16-bit datatypes of their own.
 *
 * Robustness: every collective is started non-blocking (MPI_Iallreduce, MPI_Ibcast, ...) and
 * completed by a polling wait (MPI_Test) with the state's collective timeout (timeout_s,
 * ACCELERATE_TIMEOUT), so a peer that is late or gone gives ACC_ERR_TIMEOUT naming the
 * operation instead of a hang, and an MPI error (MPI_ERRORS_RETURN) gives ACC_ERR_BACKEND.
 * MPI cannot cancel a started collective: after either failure the group is marked broken,
 * later calls fail at once, and destroy skips MPI_Finalize (which would wait for the peers);
 * the process should exit, and mpirun then stops the job.
 *
 * Subgroups (backend.h): on several machines with several processes each, two communicators split
 * at start-up, the machine's ranks and this local rank's rail (make_subgroups). */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/collcheck.h"

#define ACC_MPI_CHUNK_MAX ((size_t)1 << 30) /* elements or bytes per MPI call */

typedef struct mpi_backend {
  acc__backend base;
  MPI_Comm comm;
  int we_initialized;
  size_t chunk; /* ACC_MPI_CHUNK_MAX; ACCELERATE_MPI_CHUNK lowers it (tests: to split calls) */
  double timeout_s; /* collective timeout; <= 0: none */
  double hang_s;    /* hang-report threshold (ACCELERATE_HANG_REPORT_S); 0: off */
  int broken;       /* a collective failed or timed out: the group cannot be used */
  char broken_why[256];
  MPI_Datatype f16_type, bf16_type;
  MPI_Op half_ops[2][3]; /* [f16|bf16][sum|min|max] */
  /* The subgroups (backend.h's subgroup op), made at start-up on several machines: [0] this
   * machine's processes (ranks m*K .. m*K+K-1, K the local size: the placement the callers
   * require and check), [1] this local rank's rail (rank % K, ranked as the job); NULL otherwise. A subgroup borrows its parent's
   * datatypes and ops (parent non-NULL) and frees only its communicator. */
  struct mpi_backend *sub[2];
  struct mpi_backend *parent;
} mpi_backend;

static mpi_backend *as_mpi(acc__backend *be) { return (mpi_backend *)be; }

static acc_result mpi_fail(acc__backend *be, int err, const char *call) {
  char msg[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) len = 0;
  msg[len] = '\0';
  return acc__error(ACC_ERR_BACKEND, "MPI backend: %s (%s #%llu) failed on rank %d of %d: %s",
                    call, be->op_name ? be->op_name : "setup", (unsigned long long)be->op_seq,
                    be->rank, be->size, len ? msg : "unknown MPI error");
}

static void mark_broken(mpi_backend *m) {
  m->broken = 1;
  snprintf(m->broken_why, sizeof m->broken_why, "%s", acc_last_error());
}

static acc_result check_usable(acc__backend *be) {
  mpi_backend *m = (mpi_backend *)be;
  if (!m->broken) return ACC_OK;
  return acc__error(ACC_ERR_BACKEND,
                    "MPI backend: %s (#%llu) on rank %d cannot run: an earlier collective failed "
                    "and MPI cannot recover the group (%s); end the program",
                    be->op_name ? be->op_name : "collective", (unsigned long long)be->op_seq,
                    be->rank, m->broken_why);
}

/* The hang report of a wait longer than the threshold. MPI shows nothing of the other ranks while
 * a collective is pending, so the line names this rank's call only; every rank that waits prints
 * one, and the ranks without a line are the ones the others wait for. */
static void hang_report(acc__backend *be, const char *call, double waited) {
  char one[400] = "", line[1200];
  if (be->call) {
    acc__call_rec r;
    memset(&r, 0, sizeof r);
    acc__call_rec_fields(&r, be->call);
    acc__call_rec_site(&r, be->call->file);
    acc__call_rec_describe(one, sizeof one, &r);
  }
  snprintf(line, sizeof line,
           "accelerate: hang report: rank %d of %d (pid %d): %s (collective #%llu) %s has waited "
           "%.1f s in %s (timeout %g s, ACCELERATE_TIMEOUT); the MPI backend cannot see which "
           "ranks have not arrived or what they do: each waiting rank prints such a line, the "
           "ranks without one are missing",
           be->rank, be->size, (int)getpid(), be->op_name ? be->op_name : "collective",
           (unsigned long long)be->op_seq, one, waited, call, as_mpi(be)->timeout_s);
  acc__report_line(line);
}

/* Completes *req, polling MPI_Test until it is done or the collective timeout passes. The
 * first polls are back to back (latency), then the wait yields (50 ms) and then sleeps up to 1 ms
 * between polls, so a rank waiting for a late peer does not take a core from it. */
static acc_result mpi_wait(acc__backend *be, MPI_Request *req, const char *call) {
  mpi_backend *m = (mpi_backend *)be;
  const double t0 = acc__now();
  long sleep_ns = 50000;
  int reported = 0;
  for (unsigned long polls = 0;; polls++) {
    int done = 0;
    int err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (err != MPI_SUCCESS) {
      acc_result rc = mpi_fail(be, err, call);
      mark_broken(m);
      return rc;
    }
    if (done) return ACC_OK;
    if (polls < 256) continue;
    double waited = acc__now() - t0;
    if (!reported && m->hang_s > 0 && waited >= m->hang_s) {
      reported = 1;
      hang_report(be, call, waited);
    }
    if (m->timeout_s > 0 && waited >= m->timeout_s) {
      acc_result rc = acc__error(
          ACC_ERR_TIMEOUT,
          "MPI backend: %s (collective #%llu, %s) on rank %d of %d: timed out after %g s "
          "(ACCELERATE_TIMEOUT): at least one other rank did not take part in time (late, "
          "stuck, or gone); the group cannot be used any more",
          be->op_name ? be->op_name : "collective", (unsigned long long)be->op_seq, call, be->rank,
          be->size, m->timeout_s);
      mark_broken(m);
      return rc;
    }
    if (waited < 0.05) {
      sched_yield();
    } else {
      struct timespec ts = {0, sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < 1000000) sleep_ns *= 2;
    }
  }
}

/* Starts a non-blocking call and waits for it (with the timeout). */
#define MPI_RUN(be, name, call)                                                          \
  do {                                                                               \
    MPI_Request acc__req_ = MPI_REQUEST_NULL;                                        \
    int acc__mpi_err_ = (call);                                                      \
    if (acc__mpi_err_ != MPI_SUCCESS) {                                              \
      acc_result acc__rc_ = mpi_fail((be), acc__mpi_err_, name);                     \
      mark_broken(as_mpi(be));                                                       \
      return acc__rc_;                                                               \
    }                                                                                \
    ACC_CHECK(mpi_wait((be), &acc__req_, name));                                     \
  } while (0)

/* ---- f16/bf16 user reductions ----------------------------------------------------------- */
#define HALF_OP_FN(name, dtype, op)                                                  \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {              \
    (void)dt;                                                                        \
    acc__reduce_inplace(inout, in, (size_t)*len, dtype, op);                         \
  }
HALF_OP_FN(f16_sum, ACC_F16, ACC_SUM)
HALF_OP_FN(f16_min, ACC_F16, ACC_MIN)
HALF_OP_FN(f16_max, ACC_F16, ACC_MAX)
HALF_OP_FN(bf16_sum, ACC_BF16, ACC_SUM)
HALF_OP_FN(bf16_min, ACC_BF16, ACC_MIN)
HALF_OP_FN(bf16_max, ACC_BF16, ACC_MAX)

static int op_index(acc_op op) { return op == ACC_MIN ? 1 : op == ACC_MAX ? 2 : 0; }

static void map_types(mpi_backend *m, acc_dtype dtype, acc_op op, MPI_Datatype *t, MPI_Op *o) {
  switch (dtype) {
    case ACC_F32: *t = MPI_FLOAT; break;
    case ACC_F64: *t = MPI_DOUBLE; break;
    case ACC_I32: *t = MPI_INT32_T; break;
    case ACC_I64: *t = MPI_INT64_T; break;
    case ACC_U8: *t = MPI_UINT8_T; break;
    case ACC_U64: *t = MPI_UINT64_T; break;
    case ACC_F16: *t = m->f16_type; *o = m->half_ops[0][op_index(op)]; return;
    case ACC_BF16: *t = m->bf16_type; *o = m->half_ops[1][op_index(op)]; return;
    default: *t = MPI_BYTE; break;
  }
  *o = op == ACC_MIN ? MPI_MIN : op == ACC_MAX ? MPI_MAX : MPI_SUM;
}

/* ---- ops ----------------------------------------------------------------------------------- */
static acc_result mpi_barrier(acc__backend *be) {
  ACC_CHECK(check_usable(be));
  MPI_RUN(be, "MPI_Ibarrier", MPI_Ibarrier(as_mpi(be)->comm, &acc__req_));
  return ACC_OK;
}

static acc_result mpi_broadcast(acc__backend *be, void *buf, size_t nbytes, int root) {
  ACC_CHECK(check_usable(be));
  const size_t chunk = as_mpi(be)->chunk;
  for (size_t off = 0; off < nbytes; off += chunk) {
    size_t n = nbytes - off < chunk ? nbytes - off : chunk;
    MPI_RUN(be, "MPI_Ibcast", MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, as_mpi(be)->comm, &acc__req_));
  }
  return ACC_OK;
}

static acc_result mpi_reduce_common(acc__backend *be, const void *send, void *recv, size_t count,
                                    acc_dtype dtype, acc_op op, int root, int all) {
  ACC_CHECK(check_usable(be));
  mpi_backend *m = as_mpi(be);
  MPI_Datatype t;
  MPI_Op o;
  map_types(m, dtype, op, &t, &o);
  size_t es = acc_dtype_size(dtype);
  int in_place = send == recv;
  const size_t chunk = m->chunk;
  for (size_t off = 0; off < count; off += chunk) {
    size_t n = count - off < chunk ? count - off : chunk;
    const void *s = in_place ? MPI_IN_PLACE : (const char *)send + off * es;
    void *r = recv ? (char *)recv + off * es : NULL;
    if (all) {
      MPI_RUN(be, "MPI_Iallreduce", MPI_Iallreduce(s, r, (int)n, t, o, m->comm, &acc__req_));
    } else {
      /* MPI_IN_PLACE is only valid at the root; elsewhere send is the data. */
      if (be->rank != root) s = (const char *)send + off * es;
      MPI_RUN(be, "MPI_Ireduce", MPI_Ireduce(s, r, (int)n, t, o, root, m->comm, &acc__req_));
    }
  }
  return ACC_OK;
}

static acc_result mpi_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, acc_op op) {
  return mpi_reduce_common(be, send, recv, count, dtype, op, 0, 1);
}

static acc_result mpi_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                             acc_dtype dtype, acc_op op, int root) {
  return mpi_reduce_common(be, send, recv, count, dtype, op, root, 0);
}

/* MPI_Reduce_scatter_block. Directly when the buffers are apart and count fits one call;
 * otherwise (in place, or more than the chunk limit) piece by piece through a packed temporary
 * (piece k of every block, MPI_IN_PLACE), whose first piece is this rank's result. */
static acc_result mpi_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                                     acc_dtype dtype, acc_op op) {
  ACC_CHECK(check_usable(be));
  mpi_backend *m = as_mpi(be);
  MPI_Datatype t;
  MPI_Op o;
  map_types(m, dtype, op, &t, &o);
  size_t es = acc_dtype_size(dtype), n = (size_t)be->size;
  const char *s = send;
  char *r = recv;
  int overlap = r < s + count * es * n && s < r + count * es;
  if (!overlap && count <= m->chunk) {
    MPI_RUN(be, "MPI_Ireduce_scatter_block",
            MPI_Ireduce_scatter_block(send, recv, (int)count, t, o, m->comm, &acc__req_));
    return ACC_OK;
  }
  size_t pe = count < m->chunk ? count : m->chunk;
  if (pe * n > (size_t)INT_MAX) pe = (size_t)INT_MAX / n;
  char *tmp = acc__malloc(pe * n * es);
  if (!tmp) return acc__error(ACC_ERR_NOMEM, "MPI backend: reduce_scatter: cannot allocate %zu bytes", pe * n * es);
  for (size_t off = 0; off < count; off += pe) {
    size_t len = count - off < pe ? count - off : pe;
    for (size_t q = 0; q < n; q++) memcpy(tmp + q * len * es, s + (q * count + off) * es, len * es);
    /* after a failure MPI may still use tmp: it is left allocated (the group is unusable) */
    MPI_RUN(be, "MPI_Ireduce_scatter_block",
            MPI_Ireduce_scatter_block(MPI_IN_PLACE, tmp, (int)len, t, o, m->comm, &acc__req_));
    memcpy(r + off * es, tmp, len * es);
  }
  acc__free(tmp);
  return ACC_OK;
}

/* All-gather or gather of nbytes per rank. Each chunk of a rank's block lands at
 * recv + r * nbytes + off: a datatype of the chunk's length, resized to an extent of nbytes,
 * places every rank's piece with one call and int-sized counts. */
static acc_result gather_common(acc__backend *be, const void *send, void *recv, size_t nbytes,
                                int root, int all) {
  ACC_CHECK(check_usable(be));
  mpi_backend *m = as_mpi(be);
  const int want_recv = all || be->rank == root;
  const char *src = send;
  void *tmp = NULL;
  if (want_recv && recv) {
    const char *r0 = recv, *r1 = (const char *)recv + nbytes * (size_t)be->size;
    const char *s0 = send;
    if (s0 < r1 && s0 + nbytes > r0) { /* send overlaps recv: take a copy */
      tmp = acc__malloc(nbytes);
      if (!tmp) return ACC_ERR_NOMEM;
      memcpy(tmp, send, nbytes);
      src = tmp;
    }
  }
  acc_result rc = ACC_OK;
  const size_t chunk = m->chunk;
  for (size_t off = 0; off < nbytes && rc == ACC_OK; off += chunk) {
    size_t n = nbytes - off < chunk ? nbytes - off : chunk;
    MPI_Datatype piece, block;
    int err = MPI_Type_contiguous((int)n, MPI_BYTE, &piece);
    if (err != MPI_SUCCESS) { rc = mpi_fail(be, err, "MPI_Type_contiguous"); break; }
    err = MPI_Type_create_resized(piece, 0, (MPI_Aint)nbytes, &block);
    MPI_Type_free(&piece);
    if (err != MPI_SUCCESS) { rc = mpi_fail(be, err, "MPI_Type_create_resized"); break; }
    err = MPI_Type_commit(&block);
    if (err == MPI_SUCCESS) {
      char *r = recv ? (char *)recv + off : NULL;
      MPI_Request req = MPI_REQUEST_NULL;
      if (all)
        err = MPI_Iallgather(src + off, (int)n, MPI_BYTE, r, 1, block, m->comm, &req);
      else
        err = MPI_Igather(src + off, (int)n, MPI_BYTE, r, 1, block, root, m->comm, &req);
      if (err != MPI_SUCCESS) {
        rc = mpi_fail(be, err, all ? "MPI_Iallgather" : "MPI_Igather");
        mark_broken(m);
      } else {
        rc = mpi_wait(be, &req, all ? "MPI_Iallgather" : "MPI_Igather");
      }
    } else {
      rc = mpi_fail(be, err, "MPI_Type_commit");
    }
    MPI_Type_free(&block); /* MPI keeps it alive while a started call still uses it */
  }
  /* after a failure MPI may still write from tmp's request: leave it (the group is unusable) */
  if (!m->broken) acc__free(tmp);
  return rc;
}

static acc_result mpi_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes) {
  return gather_common(be, send, recv, nbytes, 0, 1);
}

static acc_result mpi_gather(acc__backend *be, const void *send, void *recv, size_t nbytes,
                             int root) {
  return gather_common(be, send, recv, nbytes, root, 0);
}

static acc_result mpi_all_gather_v(acc__backend *be, const void *send, void *recv,
                                   const size_t *sizes) {
  ACC_CHECK(check_usable(be));
  mpi_backend *m = as_mpi(be);
  size_t total = 0, mine_off = 0;
  for (int r = 0; r < be->size; r++) {
    if (r == be->rank) mine_off = total;
    total += sizes[r];
  }
  if (total <= m->chunk) {
    int *counts = acc__malloc(sizeof(int) * 2 * (size_t)be->size);
    if (!counts) return ACC_ERR_NOMEM;
    int *displs = counts + be->size;
    for (int r = 0, d = 0; r < be->size; r++) {
      counts[r] = (int)sizes[r];
      displs[r] = d;
      d += counts[r];
    }
    /* In place when the caller's data already sits in its slot of recv. */
    const void *s = send == (const char *)recv + mine_off ? MPI_IN_PLACE : send;
    void *tmp = NULL;
    if (s != MPI_IN_PLACE && sizes[be->rank] && (const char *)send < (const char *)recv + total &&
        (const char *)send + sizes[be->rank] > (const char *)recv) {
      tmp = acc__malloc(sizes[be->rank]);
      if (!tmp) {
        acc__free(counts);
        return ACC_ERR_NOMEM;
      }
      memcpy(tmp, send, sizes[be->rank]);
      s = tmp;
    }
    MPI_Request req = MPI_REQUEST_NULL;
    int err = MPI_Iallgatherv(s, counts[be->rank], MPI_BYTE, recv, counts, displs, MPI_BYTE, m->comm, &req);
    acc_result rc;
    if (err != MPI_SUCCESS) {
      rc = mpi_fail(be, err, "MPI_Iallgatherv");
      mark_broken(m);
    } else {
      rc = mpi_wait(be, &req, "MPI_Iallgatherv");
    }
    if (rc == ACC_OK) { /* after a failure MPI may still use them: leave them */
      acc__free(tmp);
      acc__free(counts);
    }
    return rc;
  }
  /* More than the chunk limit (INT_MAX at most) in all: each rank broadcasts its block in turn (chunked). */
  if (sizes[be->rank] && (char *)recv + mine_off != send)
    memmove((char *)recv + mine_off, send, sizes[be->rank]);
  size_t off = 0;
  for (int r = 0; r < be->size; r++) {
    if (sizes[r]) ACC_CHECK(mpi_broadcast(be, (char *)recv + off, sizes[r], r));
    off += sizes[r];
  }
  return ACC_OK;
}

static void mpi_destroy(acc__backend *be) {
  if (!be) return;
  mpi_backend *m = as_mpi(be);
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (int i = 0; i < 2; i++)
    if (m->sub[i]) {
      if (m->sub[i]->broken) m->broken = 1; /* a collective in flight there: leave MPI as it is */
      if (!finalized && !m->broken && m->sub[i]->comm != MPI_COMM_NULL) MPI_Comm_free(&m->sub[i]->comm);
      acc__free(m->sub[i]);
    }
  if (m->parent) { /* a subgroup: its parent frees it */
    return;
  }
  /* A broken group has a collective MPI cannot cancel: freeing the communicator or finalizing
   * would wait for the peers, which may never come. Leave MPI as it is. */
  if (!finalized && !m->broken) {
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        if (m->half_ops[i][j] != MPI_OP_NULL) MPI_Op_free(&m->half_ops[i][j]);
    if (m->f16_type != MPI_DATATYPE_NULL) MPI_Type_free(&m->f16_type);
    if (m->bf16_type != MPI_DATATYPE_NULL) MPI_Type_free(&m->bf16_type);
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    if (m->we_initialized) MPI_Finalize();
  }
  acc__free(m);
}

/* Tags: comm.c compares them with a 16-byte all_reduce before each collective (checks_tags 0). */
static acc_result mpi_subgroup(acc__backend *be, int which, acc__backend **out);

static const acc__backend_ops mpi_ops = {
    "mpi",          mpi_barrier, mpi_broadcast,    mpi_all_reduce, mpi_reduce,
    mpi_all_gather, mpi_gather,  mpi_all_gather_v, mpi_destroy,    NULL,
    0,              mpi_reduce_scatter, NULL, NULL, NULL, /* no memory to share */
    mpi_subgroup,
    NULL, /* all_gather_strided: only the hierarchical backend's leaders (gloo) call it */
};

static acc_result mpi_subgroup(acc__backend *be, int which, acc__backend **out) {
  mpi_backend *m = as_mpi(be);
  *out = NULL;
  if (which != ACC__GROUP_LOCAL && which != ACC__GROUP_RAIL)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "MPI backend: group %d is not a subgroup", which);
  mpi_backend *g = m->sub[which == ACC__GROUP_LOCAL ? 0 : 1];
  if (!g)
    return acc__error(ACC_ERR_NOT_SUPPORTED, "MPI backend: no subgroups were made (they are made at start-up "
                      "when the job spans several machines with several processes each)");
  *out = g->base.size > 1 ? &g->base : NULL;
  return ACC_OK;
}

/* The subgroups: a collective of every process at start-up (two MPI_Comm_split). */
static acc_result make_subgroups(mpi_backend *m, int k) {
  MPI_Comm c[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
  int err = MPI_Comm_split(m->comm, m->base.rank / k, m->base.rank, &c[0]);
  if (err == MPI_SUCCESS) err = MPI_Comm_split(m->comm, m->base.rank % k, m->base.rank, &c[1]);
  if (err != MPI_SUCCESS) {
    for (int i = 0; i < 2; i++)
      if (c[i] != MPI_COMM_NULL) MPI_Comm_free(&c[i]);
    return mpi_fail(&m->base, err, "MPI_Comm_split (subgroups)");
  }
  for (int i = 0; i < 2; i++) {
    mpi_backend *g = acc__calloc(1, sizeof *g);
    if (!g) {
      for (int j = i; j < 2; j++) MPI_Comm_free(&c[j]);
      return ACC_ERR_NOMEM;
    }
    *g = *m;
    g->sub[0] = g->sub[1] = NULL;
    g->parent = m;
    g->we_initialized = 0;
    g->comm = c[i];
    MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g->comm, &g->base.rank);
    MPI_Comm_size(g->comm, &g->base.size);
    m->sub[i] = g;
  }
  return ACC_OK;
}

acc_result acc__backend_mpi_create(acc__backend **out, const acc__proc_info *info) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "MPI backend: MPI was already finalized in this process (by an earlier "
                      "acc_state_destroy or by the program); MPI cannot be initialized twice, so "
                      "keep one acc_state for the whole run");
  mpi_backend *m = acc__calloc(1, sizeof *m);
  if (!m) return ACC_ERR_NOMEM;
  m->base.ops = &mpi_ops;
  m->base.rank = info->rank;
  m->base.size = info->size;
  m->comm = MPI_COMM_NULL;
  m->chunk = ACC_MPI_CHUNK_MAX;
  m->timeout_s = info->timeout_s;
  if (acc__hang_report_env(&m->hang_s) != ACC_OK) {
    acc__free(m);
    return acc__error_context(ACC_ERR_INVALID_ARGUMENT, "rank %d", info->rank);
  }
  long chunk = 0;
  int chunk_set = 0;
  if (acc__env_int("ACCELERATE_MPI_CHUNK", &chunk, &chunk_set) != ACC_OK) {
    acc__free(m);
    return ACC_ERR_INVALID_ARGUMENT;
  }
  if (chunk_set && (size_t)chunk < ACC_MPI_CHUNK_MAX) m->chunk = (size_t)chunk;
  m->f16_type = m->bf16_type = MPI_DATATYPE_NULL;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) m->half_ops[i][j] = MPI_OP_NULL;
  acc__backend *be = &m->base;
  acc_result rc = ACC_OK;
  int err;
  if (!initialized) {
    int provided = 0;
    err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (err != MPI_SUCCESS) {
      acc__free(m);
      return acc__error(ACC_ERR_BACKEND, "MPI backend: MPI_Init_thread failed (error %d); is "
                        "this process running under mpirun?", err);
    }
    m->we_initialized = 1;
  }
  /* submitted collectives (comm/async.h) run on the comm worker thread only where MPI allows
   * calls from any thread one at a time; below that they run on the caller's thread */
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  be->caller_thread_only = level < MPI_THREAD_SERIALIZED;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  err = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
  if (err != MPI_SUCCESS) {
    rc = mpi_fail(be, err, "MPI_Comm_dup");
    goto fail;
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  int rank = -1, size = -1;
  MPI_Comm_rank(m->comm, &rank);
  MPI_Comm_size(m->comm, &size);
  if (rank != info->rank || size != info->size) {
    rc = acc__error(ACC_ERR_MISMATCH,
                    "MPI backend: MPI says this is rank %d of %d but the launch environment "
                    "says rank %d of %d; start the program with one launcher only (mpirun, or "
                    "accelerate launch with mpirun_hostfile)",
                    rank, size, info->rank, info->size);
    goto fail;
  }
  if ((err = MPI_Type_contiguous(1, MPI_UINT16_T, &m->f16_type)) != MPI_SUCCESS ||
      (err = MPI_Type_commit(&m->f16_type)) != MPI_SUCCESS ||
      (err = MPI_Type_contiguous(1, MPI_UINT16_T, &m->bf16_type)) != MPI_SUCCESS ||
      (err = MPI_Type_commit(&m->bf16_type)) != MPI_SUCCESS) {
    rc = mpi_fail(be, err, "MPI_Type_contiguous");
    goto fail;
  }
  MPI_User_function *fns[2][3] = {{f16_sum, f16_min, f16_max}, {bf16_sum, bf16_min, bf16_max}};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      if ((err = MPI_Op_create(fns[i][j], 1, &m->half_ops[i][j])) != MPI_SUCCESS) {
        rc = mpi_fail(be, err, "MPI_Op_create");
        goto fail;
      }
  /* several machines with several processes each: the subgroups (FSDP's HYBRID strategies) */
  if (info->size > 1) { /* every process decides alike: the same local size everywhere (one allreduce) */
    int k[2] = {info->local_size, -info->local_size};
    if ((err = MPI_Allreduce(MPI_IN_PLACE, k, 2, MPI_INT, MPI_MIN, m->comm)) != MPI_SUCCESS) {
      rc = mpi_fail(be, err, "MPI_Allreduce (local sizes)");
      goto fail;
    }
    int even = k[0] == -k[1] && k[0] > 1 && k[0] < info->size && info->size % k[0] == 0;
    if (even && (rc = make_subgroups(m, k[0])) != ACC_OK) goto fail;
  }
  *out = be;
  return ACC_OK;
fail:
  mpi_destroy(be);
  return rc;
}
