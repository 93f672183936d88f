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

#endif
