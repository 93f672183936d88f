/* accelerate-c: results, errors, data types and reduction operations shared by every module.
 * Threads: every function here may be called from any thread; the last error is per thread. */
#ifndef ACCELERATE_COMMON_H
#define ACCELERATE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(ACC_BUILDING_LIBRARY)
#define ACC_EXTERN __attribute__((visibility("default")))
#else
#define ACC_EXTERN
#endif

#if defined(__GNUC__)
#define ACC_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define ACC_PRINTF(fmt_index, first_arg)
#endif

/*
 * Conventions of the public headers.
 * - Versions: every function declaration carries `@since X.Y`, the library version that added
 *   it (0.1: the first release; 0.2: added after it), as libgit2 and libuv document theirs.
 * - Getters: a property is read by acc_<object>_<property>(obj) without "get_"
 *   (acc_state_num_processes, acc_accelerator_mixed_precision, acc_optimizer_group_lr); a
 *   setter is acc_<object>_set_<property>. "get_" is kept by calls that copy a whole state out
 *   through out-parameters, each paired with a set_state (acc_scheduler_get_state,
 *   acc_grad_scaler_get_state, acc_rng_state_get), by acc_get_logger (Accelerate's get_logger:
 *   it fetches or creates a logger), and by three getters that carry torch's names
 *   (acc_optimizer_get_kind, acc_optimizer_get_lr, acc_scheduler_get_last_lr: get_lr(),
 *   get_last_lr()); they are not renamed, so no program breaks.
 */

/**
 * Status of every fallible call. ACC_OK is 0; everything else is an error whose details are in
 * acc_last_error(). New values are only ever appended.
 */
typedef enum acc_result {
  ACC_OK = 0,
  ACC_ERR_INVALID_ARGUMENT = 1, /* a parameter is out of range, NULL, or malformed */
  ACC_ERR_INVALID_USAGE = 2,    /* the call is not allowed in the current state */
  ACC_ERR_SYSTEM = 3,           /* an operating-system call failed (errno in the message) */
  ACC_ERR_BACKEND = 4,          /* the communication backend (MPI, NCCL) reported an error */
  ACC_ERR_REMOTE = 5,           /* a peer process died or left the process group */
  ACC_ERR_TIMEOUT = 6,          /* a peer did not arrive within the timeout */
  ACC_ERR_NOMEM = 7,            /* an allocation failed */
  ACC_ERR_NOT_SUPPORTED = 8,    /* the feature is not built in or not available here */
  ACC_ERR_INTERNAL = 9,         /* a bug in accelerate-c: please report it */
  ACC_ERR_IO = 10,              /* reading or writing a file failed */
  ACC_ERR_FORMAT = 11,          /* a file or string is not in the expected format */
  ACC_ERR_MISMATCH = 12,        /* ranks disagree (debug mode), or saved and current state differ */
  ACC_ERR_NOT_FOUND = 13        /* what was looked for does not exist (e.g. no checkpoint yet) */
} acc_result;

/** A static one-line description of a result code. Never NULL. @since 0.1 */
ACC_EXTERN const char *acc_result_string(acc_result rc);

/**
 * The detailed message of the last failed acc_* call on this thread: what went wrong, naming the
 * file, key, rank or value involved. Never NULL; valid until the next acc_* call on this thread.
 * Thread safety: thread-local.
 * @since 0.1
 */
ACC_EXTERN const char *acc_last_error(void);

/** Clears this thread's last error. @since 0.1 */
ACC_EXTERN void acc_clear_error(void);

/**
 * Sets this thread's last error from user code (a checkpoint callback, a helper module) and
 * returns rc, so a callback can `return acc_error_set(ACC_ERR_FORMAT, "counter: %zu bytes", n);`
 * and the library's caller reads that message. printf format.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_error_set(acc_result rc, const char *fmt, ...) ACC_PRINTF(2, 3);

/** The enumerator's name of a result code ("ACC_ERR_IO"); "ACC_ERR_?" for an unknown code. @since 0.1 */
ACC_EXTERN const char *acc_result_name(acc_result rc);

/** ACC_VERSION_NUMBER of the library actually linked. @since 0.1 */
ACC_EXTERN unsigned acc_version(void);
/** @since 0.1 */
ACC_EXTERN const char *acc_version_string(void);

/** Element types of buffers passed to collectives and tensors. Values are never renumbered. */
typedef enum acc_dtype {
  ACC_F32 = 0,
  ACC_F64 = 1,
  ACC_F16 = 2,
  ACC_BF16 = 3,
  ACC_I32 = 4,
  ACC_I64 = 5,
  ACC_U8 = 6,
  ACC_U64 = 7, /* @since 0.3: an RNG state, a counter that must not wrap (numpy's uint64) */
  ACC_DTYPE_COUNT_ = 8
} acc_dtype;

/** Size in bytes of one element; 0 for an unknown dtype. @since 0.1 */
ACC_EXTERN size_t acc_dtype_size(acc_dtype dtype);
/** Short name ("f32", "bf16", ...); "unknown" for an unknown dtype. @since 0.1 */
ACC_EXTERN const char *acc_dtype_name(acc_dtype dtype);

/** Reduction operations. MEAN is SUM divided by the number of processes. */
typedef enum acc_op { ACC_SUM = 0, ACC_MEAN = 1, ACC_MIN = 2, ACC_MAX = 3, ACC_OP_COUNT_ = 4 } acc_op;
/** @since 0.1 */
ACC_EXTERN const char *acc_op_name(acc_op op);

/** Frees memory that an acc_* call allocated for the caller ("Ownership: free with acc_free"). @since 0.1 */
ACC_EXTERN void acc_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif
