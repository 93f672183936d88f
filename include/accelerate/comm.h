/* accelerate-c: collective operations on raw buffers. Every function here is collective: every
 * process of the group must call it, in the same order, with matching dtype/count/root/op.
 * This is always checked: when the processes' calls differ, every process fails with
 * ACC_ERR_MISMATCH naming each process's call and call site. With one process they copy (or do
 * nothing). A peer that dies makes the call fail with ACC_ERR_REMOTE naming the rank; a late
 * peer, ACC_ERR_TIMEOUT after the state's timeout. After such a failure (or a mismatch) the
 * group is broken: later collectives fail at once.
 *
 * Call sites: each function has an `_at` variant taking the caller's file and line (they only
 * appear in messages: mismatches, hang reports). The macros at the end of this header make
 * every call `acc_all_reduce(...)` pass __FILE__ and __LINE__; the functions themselves keep
 * their names (take their address, or `(acc_all_reduce)(...)`, to call them without a site).
 * Define ACC_NO_CALL_SITE_MACROS before including to turn the macros off.
 * Threads: collectives of one process are issued from one thread at a time, in program order. */
#ifndef ACCELERATE_COMM_H
#define ACCELERATE_COMM_H

#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @since 0.1 */
ACC_EXTERN acc_result (acc_barrier)(acc_state *st);

/** Broadcasts count elements of buf from process root to every process (in place). @since 0.1 */
ACC_EXTERN acc_result (acc_broadcast)(acc_state *st, void *buf, size_t count, acc_dtype dtype, int root);

/** recv[i] = op over processes of send[i]. send == recv is allowed (in place). @since 0.1 */
ACC_EXTERN acc_result (acc_all_reduce)(acc_state *st, const void *send, void *recv, size_t count,
                                     acc_dtype dtype, acc_op op);

/** Like acc_all_reduce, but only root's recv is written (recv may be NULL elsewhere). @since 0.1 */
ACC_EXTERN acc_result (acc_reduce)(acc_state *st, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, acc_op op, int root);

/**
 * Reduce-scatter in equal blocks (like MPI_Reduce_scatter_block): send holds count *
 * num_processes elements, block r being elements [r * count, (r + 1) * count); every process
 * receives in recv (count elements) op over processes of its own block. A length that does not
 * divide by the number of processes is padded by the caller to count * num_processes. recv may
 * be send + rank * count elements (in place: the process's own block of send is overwritten);
 * any other overlap is refused. Every acc_op applies (MEAN divides by num_processes).
 * One process: a copy. Used by ZeRO for the gradients (docs/zero.md).
 * @since 0.1
 */
ACC_EXTERN acc_result (acc_reduce_scatter)(acc_state *st, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op);

/** recv (count * num_processes elements) = the send buffers of all processes in rank order.
 * @since 0.1
 * In place: send may be recv + rank * count elements. */
ACC_EXTERN acc_result (acc_all_gather)(acc_state *st, const void *send, void *recv, size_t count,
                                     acc_dtype dtype);

/** Like acc_all_gather, but only root's recv is written (recv may be NULL elsewhere). @since 0.1 */
ACC_EXTERN acc_result (acc_gather)(acc_state *st, const void *send, void *recv, size_t count,
                                 acc_dtype dtype, int root);

/**
 * All-gather of byte blobs of different sizes (the base of gather_object).
 * *out receives the concatenation in rank order, *out_sizes num_processes sizes.
 * Ownership: free both with acc_free.
 * @since 0.1
 */
ACC_EXTERN acc_result (acc_all_gather_bytes)(acc_state *st, const void *send, size_t nbytes,
                                           void **out, size_t **out_sizes);

/* The same with the caller's call site (file may be NULL: unknown). */
/** @since 0.1 */
ACC_EXTERN acc_result acc_barrier_at(acc_state *st, const char *file, int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_broadcast_at(acc_state *st, void *buf, size_t count, acc_dtype dtype,
                                       int root, const char *file, int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_all_reduce_at(acc_state *st, const void *send, void *recv, size_t count,
                                        acc_dtype dtype, acc_op op, const char *file, int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_reduce_at(acc_state *st, const void *send, void *recv, size_t count,
                                    acc_dtype dtype, acc_op op, int root, const char *file,
                                    int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_reduce_scatter_at(acc_state *st, const void *send, void *recv,
                                            size_t count, acc_dtype dtype, acc_op op,
                                            const char *file, int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_all_gather_at(acc_state *st, const void *send, void *recv, size_t count,
                                        acc_dtype dtype, const char *file, int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_gather_at(acc_state *st, const void *send, void *recv, size_t count,
                                    acc_dtype dtype, int root, const char *file, int line);
/** @since 0.1 */
ACC_EXTERN acc_result acc_all_gather_bytes_at(acc_state *st, const void *send, size_t nbytes,
                                              void **out, size_t **out_sizes, const char *file,
                                              int line);

#ifndef ACC_NO_CALL_SITE_MACROS
#define acc_barrier(...) acc_barrier_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_broadcast(...) acc_broadcast_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_all_reduce(...) acc_all_reduce_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_reduce(...) acc_reduce_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_reduce_scatter(...) acc_reduce_scatter_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_all_gather(...) acc_all_gather_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_gather(...) acc_gather_at(__VA_ARGS__, __FILE__, __LINE__)
#define acc_all_gather_bytes(...) acc_all_gather_bytes_at(__VA_ARGS__, __FILE__, __LINE__)
#endif

/**
 * Accelerate's gather_object for serialized objects: every process passes its blob (len bytes,
 * may be 0 and may differ between processes) and receives every process's blob.
 * @param out  receives the blobs concatenated in process order (blob r starts at the sum of
 *             lens[0..r-1]). Ownership: acc_free.
 * @param lens receives num_processes sizes. Ownership: acc_free.
 * Collective: yes (built on acc_all_gather_bytes). One process: a copy of its own blob.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_gather_object(acc_state *st, const void *send, size_t len, void **out, size_t **lens);

/**
 * Accelerate's broadcast_object_list for a serialized object: root's blob (*buf, *len; *buf may
 * be NULL when *len is 0) reaches every process. The size travels first, so the other
 * processes need not know it. On root *buf and *len are left as they are (still the caller's);
 * on every other process *buf is set to a new buffer holding the bytes (never NULL on success,
 * even for 0 bytes) and *len to its size. Ownership: on non-root processes free *buf with
 * acc_free. A root with a NULL buffer and a non-zero size, or a receiver that cannot allocate
 * the size, is an error on every process (no hang); on error non-root *buf is NULL.
 * Collective: yes (three collectives: size, allocation check, bytes).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_broadcast_object(acc_state *st, void **buf, size_t *len, int root);

#ifdef __cplusplus
}
#endif
#endif
