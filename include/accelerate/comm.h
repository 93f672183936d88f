/* accelerate-c: collective operations on raw buffers. Every function here is collective: every
 * process of the group must call it, in the same order, with matching dtype/count/root
 * (debug mode checks this). With one process they copy (or do nothing). A peer that dies makes
 * the call fail with ACC_ERR_REMOTE naming the rank; a late peer, ACC_ERR_TIMEOUT after the
 * state's timeout. After such a failure the group is broken: later collectives fail at once.
 * Threads: collectives of one process are issued from one thread at a time, in program order. */
#ifndef ACCELERATE_COMM_H
#define ACCELERATE_COMM_H

#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

ACC_EXTERN acc_result acc_barrier(acc_state *st);

/** Broadcasts count elements of buf from process root to every process (in place). */
ACC_EXTERN acc_result acc_broadcast(acc_state *st, void *buf, size_t count, acc_dtype dtype, int root);

/** recv[i] = op over processes of send[i]. send == recv is allowed (in place). */
ACC_EXTERN acc_result acc_all_reduce(acc_state *st, const void *send, void *recv, size_t count,
                                     acc_dtype dtype, acc_op op);

/** Like acc_all_reduce, but only root's recv is written (recv may be NULL elsewhere). */
ACC_EXTERN acc_result acc_reduce(acc_state *st, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, acc_op op, int root);

/** recv (count * num_processes elements) = the send buffers of all processes in rank order. */
ACC_EXTERN acc_result acc_all_gather(acc_state *st, const void *send, void *recv, size_t count,
                                     acc_dtype dtype);

/** Like acc_all_gather, but only root's recv is written (recv may be NULL elsewhere). */
ACC_EXTERN acc_result acc_gather(acc_state *st, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, int root);

/**
 * All-gather of byte blobs of different sizes (the base of gather_object).
 * *out receives the concatenation in rank order, *out_sizes num_processes sizes.
 * Ownership: free both with acc_free.
 */
ACC_EXTERN acc_result acc_all_gather_bytes(acc_state *st, const void *send, size_t nbytes,
                                           void **out, size_t **out_sizes);

#ifdef __cplusplus
}
#endif
#endif
