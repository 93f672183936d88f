/* Collectives of the comm layer for the layers above it, beyond the public API (comm.c). */
#ifndef ACC_COMM_COMM_H
#define ACC_COMM_COMM_H

#include "core/internal.h"

/* In-place f32 SUM all_reduce of buf, then every element multiplied by scale: the same bits as
 * acc_all_reduce(SUM) followed by `buf[i] *= scale`, and the same call to the other processes'
 * checks (an all_reduce of count f32, SUM); backends that can fold the multiplication into the
 * reduction (shm) skip the extra pass over the buffer. file/line: the caller's call site. */
acc_result acc__all_reduce_scaled_at(acc_state *st, float *buf, size_t count, float scale,
                                     const char *file, int line);
#define acc__all_reduce_scaled(st, buf, count, scale) \
  acc__all_reduce_scaled_at((st), (buf), (count), (scale), __FILE__, __LINE__)

/* A collective (every process, the same order, the same bytes > 0): bytes of zeroed host memory
 * that the backend shares between the processes of this machine (shm: every process maps every
 * process's), so that an in-place all_reduce of a buffer inside it, at any offset, made while
 * every process's buffer lies in its allocation of the same call, moves no copies through the
 * backend (docs/backends.md). *out NULL and ACC_OK where the backend has no such memory (one
 * process, MPI, gloo, several machines): the caller allocates ordinary memory. Fails on every
 * process or on none. */
acc_result acc__comm_alloc_shared_at(acc_state *st, size_t bytes, void **out, const char *file,
                                     int line);
#define acc__comm_alloc_shared(st, bytes, out) \
  acc__comm_alloc_shared_at((st), (bytes), (out), __FILE__, __LINE__)
/* Local: frees p when it came from acc__comm_alloc_shared (1); 0 when it did not. */
int acc__comm_free_shared(acc_state *st, void *p);

/* ACC_ERR_INVALID_ARGUMENT "<fn>: <what> is NULL but count > 0" when p is NULL (the collectives'
 * buffer check, comm.c and comm_group.c). */
acc_result acc__comm_need_buf(const void *p, const char *fn, const char *what);

#endif
