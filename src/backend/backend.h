/* The communication backend interface. Each backend (single, shm, mpi, later nccl) fills an
 * acc__backend_ops table; src/comm/comm.c validates arguments, runs debug-mode checks and turns MEAN
 * into SUM + divide before calling the table, so backends see only valid, non-empty calls and
 * only SUM/MIN/MAX. */
#ifndef ACC_BACKEND_H
#define ACC_BACKEND_H

#include "core/internal.h"

typedef struct acc__backend acc__backend;

typedef struct acc__backend_ops {
  const char *name;
  acc_result (*barrier)(acc__backend *be);
  /* nbytes > 0, root valid */
  acc_result (*broadcast)(acc__backend *be, void *buf, size_t nbytes, int root);
  /* count > 0; send may equal recv; op is SUM, MIN or MAX */
  acc_result (*all_reduce)(acc__backend *be, const void *send, void *recv, size_t count,
                           acc_dtype dtype, acc_op op);
  /* recv is only written (and non-NULL) on root; send may equal recv on root */
  acc_result (*reduce)(acc__backend *be, const void *send, void *recv, size_t count,
                       acc_dtype dtype, acc_op op, int root);
  /* recv holds size * nbytes; nbytes > 0 */
  acc_result (*all_gather)(acc__backend *be, const void *send, void *recv, size_t nbytes);
  /* recv (size * nbytes) only on root */
  acc_result (*gather)(acc__backend *be, const void *send, void *recv, size_t nbytes, int root);
  /* sizes[r] = bytes of rank r (known to all, may be 0); recv holds their sum, rank order */
  acc_result (*all_gather_v)(acc__backend *be, const void *send, void *recv, const size_t *sizes);
  /* Leaves the group and frees the backend. Peers waiting on this rank learn it left. */
  void (*destroy)(acc__backend *be);
  /* Optional (NULL: nothing to do): called by comm.c when a collective it started (be->call
   * set, size > 1) returns. */
  void (*call_end)(acc__backend *be);
  /* 1: the backend compares every rank's be->call->tag itself (on the first step of each new
   * be->call) and fails with ACC_ERR_MISMATCH; 0: comm.c exchanges the tags before the call. */
  int checks_tags;
  /* Optional (NULL: comm.c runs an all_reduce into a temporary and copies this rank's block).
   * send holds size * count elements, recv count: recv = op over ranks of block `rank` of send.
   * count > 0; op is SUM, MIN or MAX; recv may be send + rank * count elements (in place),
   * otherwise they do not overlap. */
  acc_result (*reduce_scatter)(acc__backend *be, const void *send, void *recv, size_t count,
                               acc_dtype dtype, acc_op op);
  /* Optional (NULL: comm.c runs all_reduce, then the multiplication): f32 SUM all_reduce, each
   * element of the sum then multiplied by `scale` (rounded once): the same bits as all_reduce
   * followed by `x *= scale`, without another pass over the buffer. count > 0; send may equal
   * recv. */
  acc_result (*all_reduce_scaled_f32)(acc__backend *be, const float *send, float *recv,
                                      size_t count, float scale);
  /* Optional (NULL: the backend has no memory to share; comm.c answers NULL). A collective
   * (every rank, same order, same bytes > 0): bytes of zeroed memory that the backend's
   * all_reduce can reach on every rank (shm: every rank maps every rank's), in *out. Fails on
   * every rank or on none. */
  acc_result (*alloc_shared)(acc__backend *be, size_t bytes, void **out);
  /* Optional, with alloc_shared. Local: frees p when it came from alloc_shared (1), else 0. */
  int (*free_shared)(acc__backend *be, void *p);
  /* Optional (NULL: the backend offers no subgroups; comm.c answers for one machine itself and
   * refuses otherwise). Local, no communication: the backend over `which` (ACC__GROUP_LOCAL:
   * this machine's processes; ACC__GROUP_RAIL: the processes of this local rank, one per
   * machine, ranked by machine) in *out, owned by be (never destroyed by the caller), whose rank
   * and size are the group's. *out NULL: the group is this process alone. Every process of the
   * job must then make the same subgroup calls in the same order (each group's members the same
   * ones), as with the job's own collectives; comm.c numbers them with the job's counter and
   * publishes their descriptor (be->call, with its group) to the group's backend. */
  acc_result (*subgroup)(acc__backend *be, int which, acc__backend **out);
  /* Optional (NULL: none; the hierarchical backend requires it of its group between machines,
   * gloo's, for its pipelined all_gather, and checks at create): all_gather whose block of
   * rank r lands at recv + r * stride (stride >= nbytes > 0; the bytes between blocks are not
   * written). send may be recv + rank * stride (in place), otherwise it overlaps
   * no block of the output. */
  acc_result (*all_gather_strided)(acc__backend *be, const void *send, void *recv, size_t nbytes,
                                   size_t stride);
} acc__backend_ops;

struct acc__backend {
  const acc__backend_ops *ops;
  int rank;
  int size;
  /* Set by comm.c before each call, for error messages: "all_reduce" and its number. */
  const char *op_name;
  uint64_t op_seq;
  /* The collective being run (descriptor, call site, tag; collcheck.h), or NULL between calls. */
  const struct acc__call *call;
  /* 1 when the backend may only be called from the thread that created it (an MPI whose provided
   * thread level is below MPI_THREAD_SERIALIZED): submitted collectives (comm/async.h) then run
   * at submit time on the caller's thread. 0 for every other backend. */
  int caller_thread_only;
};

/* What a backend needs to join the group. */
typedef struct acc__proc_info {
  int rank, size, local_rank, local_size;
  const char *job_id; /* unique per job and machine; safe for file names */
  double timeout_s;   /* collective timeout */
  /* Several machines joined through the rendezvous store (src/backend/store.h): the store
   * connection (NULL otherwise), this process's machine and the number of machines. */
  struct acc__store *store;
  int machine_rank, num_machines;
  /* 1 for the shared-memory group of one machine inside the hierarchical backend: rank and size
   * are the machine's (local), and its reports name the job's ranks and the machine. */
  int machine_group;
} acc__proc_info;

acc_result acc__backend_single_create(acc__backend **out);
acc_result acc__backend_shm_create(acc__backend **out, const acc__proc_info *info);
/* 1 when a rank other than this one is dead (*left 0) or left the group (*left 1): its rank and
 * pid; 0 when all are alive. Any thread (atomics and a trylock of the rank's robust mutex). */
int acc__shm_peer_gone(acc__backend *be, int *rank, int *pid, int *left);
/* In src/backend/mpi.c, reached through the module loader (src/backend/module.h). */
acc_result acc__backend_mpi_create(acc__backend **out, const acc__proc_info *info);

#endif
