/* Internal helpers shared by every module of libaccelerate. Not API. */
#ifndef ACC_INTERNAL_H
#define ACC_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "accelerate.h"

/* Records rc and a printf-style message as this thread's last error; returns rc. */
acc_result acc__error(acc_result rc, const char *fmt, ...) ACC_PRINTF(2, 3);
acc_result acc__verror(acc_result rc, const char *fmt, va_list ap);
/* The acc_result of this thread's last error message (ACC_OK when there is none). */
acc_result acc__last_error_code(void);
/* Prefixes the current last error with "<context>: " and returns rc (for error paths). */
acc_result acc__error_context(acc_result rc, const char *fmt, ...) ACC_PRINTF(2, 3);

/* Wraps the result of a user callback, called after acc_clear_error(): a failure with no message
 * becomes "<what> returned ACC_ERR_..."; one with a message gets "<what>: " in front. */
acc_result acc__callback_result(acc_result rc, const char *fmt, ...) ACC_PRINTF(2, 3);

#define ACC_CHECK(call)                        \
  do {                                         \
    acc_result acc__rc_ = (call);              \
    if (acc__rc_ != ACC_OK) return acc__rc_;   \
  } while (0)

#define ACC_CHECK_GOTO(call, rc, label) \
  do {                                  \
    (rc) = (call);                      \
    if ((rc) != ACC_OK) goto label;     \
  } while (0)

/* Opaque handles. Every handle struct starts with `uint32_t magic`, set to its kind's value at
 * creation and to ACC__MAGIC_DEAD when destroyed. This is the one table of those values
 * (src/core/handle.c checks at compile time that they are distinct):
 *   X(KIND, magic, public type name, noun used in messages) */
#define ACC__HANDLE_KINDS(X)                                                      \
  X(STATE, 0x41435354, "acc_state", "state")                 /* "ACST" */        \
  X(ACCELERATOR, 0x41434143, "acc_accelerator", "accelerator") /* "ACAC" */      \
  X(DATASET, 0x41434453, "acc_dataset", "dataset")           /* "ACDS" */        \
  X(DATALOADER, 0x41434c44, "acc_dataloader", "dataloader")  /* "ACLD" */        \
  X(MODEL, 0x41434d44, "acc_model", "model")                 /* "ACMD" */        \
  X(OPTIMIZER, 0x41434f50, "acc_optimizer", "optimizer")     /* "ACOP" */        \
  X(SCHEDULER, 0x41435344, "acc_scheduler", "scheduler")     /* "ACSD" */        \
  X(GRAD_SCALER, 0x41435343, "acc_grad_scaler", "grad scaler") /* "ACSC" */      \
  X(SAFETENSORS, 0x41435346, "acc_safetensors", "safetensors file") /* "ACSF" */ \
  X(PROJECT, 0x41435052, "acc_project_config", "project config") /* "ACPR" */   \
  X(CHECKPOINT, 0x4143434b, "acc_checkpoint", "checkpoint")  /* "ACCK" */        \
  X(BATCH_SHARD, 0x41434253, "acc_batch_shard", "batch shard") /* "ACBS" */      \
  X(ITERABLE_SHARD, 0x41434953, "acc_iterable_shard", "iterable shard") /* "ACIS" */

typedef enum acc__handle_kind {
#define ACC__X(kind, magic, type, noun) ACC__HANDLE_##kind,
  ACC__HANDLE_KINDS(ACC__X)
#undef ACC__X
  ACC__HANDLE_KIND_COUNT
} acc__handle_kind;

enum acc__magic {
#define ACC__X(kind, magic, type, noun) ACC__MAGIC_##kind = magic,
  ACC__HANDLE_KINDS(ACC__X)
#undef ACC__X
  ACC__MAGIC_DEAD = 0x44454144 /* "DEAD": a destroyed handle of any kind */
};

/* The check at the top of every public function taking a handle. NULL, a destroyed handle, a
 * handle of another kind and anything else all give ACC_ERR_INVALID_ARGUMENT with a message
 * "<fn>: ..." that says which. */
acc_result acc__check_handle(const void *h, acc__handle_kind kind, const char *fn);
/* The same test without a message, for accessors that cannot fail (they return a default). */
int acc__handle_ok(const void *h, acc__handle_kind kind);

/* Reads the caller's options struct `user` (may be NULL: defaults) into dst, which holds the
 * defaults (the INIT macro) and is dst_size bytes of the library's current `version`: rejects
 * an uninitialized struct, a newer version and unknown trailing fields that are set (see
 * src/core/options.c). Used by every function that takes an options struct. */
acc_result acc__options_read(void *dst, size_t dst_size, uint32_t version, const void *user,
                             const char *fn, const char *type);
#define ACC__READ_OPTIONS(dst, user, type, VERSION, fn) \
  ACC_CHECK(acc__options_read(&(dst), sizeof(type), (VERSION), (user), (fn), #type))

/* Allocation wrappers: NULL results set ACC_ERR_NOMEM with what was being allocated. */
void *acc__malloc(size_t n);
void *acc__calloc(size_t count, size_t size);
void *acc__realloc(void *p, size_t n);
void acc__free(void *p);
char *acc__strdup(const char *s);
/* Temporaries that live only inside one library call (checkpoint snapshots, staged file bytes):
 * from 64 KiB on they are mappings of their own, so freeing them never raises glibc's dynamic mmap
 * threshold and never moves where the program's next large malloc lands (docs/PERFORMANCE.md, the
 * cost of adoption). Free only with acc__tmp_free; failures and injection as acc__malloc. */
void *acc__tmp_alloc(size_t n);
void acc__tmp_free(void *p);
/* Tests only (src/core/alloc.c): from now on, allocation number n (0-based) through the wrappers
 * fails; n < 0 disarms. acc__alloc_count() is the number of allocations since that call. */
void acc__alloc_fail_nth(long n);
long acc__alloc_count(void);

/* Environment helpers. */
/* Parses a boolean like Accelerate's str_to_bool (y/yes/t/true/on/1, n/no/f/false/off/0). */
acc_result acc__parse_bool(const char *name, const char *value, int *out);
/* Reads an env var as bool; *out untouched when unset. Error names the variable. */
acc_result acc__env_bool(const char *name, int *out, int *was_set);
/* Reads an env var as a non-negative int; *was_set = 0 when unset. Error names the variable. */
acc_result acc__env_int(const char *name, long *out, int *was_set);
acc_result acc__env_double(const char *name, double *out, int *was_set);

/* Monotonic clock in seconds. */
double acc__now(void);

/* Element-wise reduction of count elements: dst[i] = op(dst[i], src[i]); op is SUM/MIN/MAX
 * (MEAN reduces like SUM). */
void acc__reduce_inplace(void *dst, const void *src, size_t count, acc_dtype dtype, acc_op op);
/* dst[i] = src[i] / divisor (integers: truncating division), for ACC_MEAN. */
void acc__divide(void *buf, size_t count, acc_dtype dtype, int divisor);

/* IEEE half and bfloat16 conversions: round to nearest even, NaN and infinities kept. */
uint16_t acc__f32_to_f16(float f);
float acc__f16_to_f32(uint16_t h);
uint16_t acc__f32_to_bf16(float f);
float acc__bf16_to_f32(uint16_t b);
/* The same over arrays, bit for bit the same results, vectorized (f16: F16C instructions where
 * the CPU has them): dst[i] = convert(src[i]), i < n. dtype is ACC_F16 or ACC_BF16. */
void acc__half_to_f32_n(float *dst, const uint16_t *src, size_t n, acc_dtype dtype);
void acc__f32_to_half_n(uint16_t *dst, const float *src, size_t n, acc_dtype dtype);

/* Host checks (sysinfo.c): 1 when the kernel release (e.g. "5.4.0-150-generic") is below
 * major.minor.patch, 0 when not, -1 when it cannot be parsed; the warning text for a Linux kernel
 * below 5.5.0 (returns 1 when buf holds one); and the warning printed to stderr when it applies. */
int acc__kernel_below(const char *release, int major, int minor, int patch);
int acc__kernel_warning(const char *sysname, const char *release, char *buf, size_t cap);
void acc__warn_old_kernel(void);
/* Name of a signal ("SIGKILL"), or "signal <n>" in a static buffer for unknown ones. */
const char *acc__signal_name(int sig);

/* ZeRO (src/train/optim.c). The parameters with a gradient are laid out end to end in registration
 * order: offset[i] is parameter i's first element in that flat layout (SIZE_MAX: not in it).
 * restrict keeps only elements [lo, hi) of the layout: the step updates only them and the state
 * buffers shrink to them (not collective). unrestrict all-gathers the state back to full
 * tensors (collective; flat holds shard * num_processes floats, this process's shard being
 * [rank * shard, (rank + 1) * shard)). */
size_t acc__optimizer_state_floats(const acc_optimizer *o);
/* The floats of the accelerator's own gradient/parameter exchange buffers, all models: bucket
 * staging, ZeRO's flat layout (stage 1) or bucket/chunk buffer (stage 2). */
size_t acc__accelerator_sync_buffer_floats(const acc_accelerator *acc);
int acc__optimizer_is_restricted(const acc_optimizer *o);
/* Unscales one more model's gradients in the current iteration (src/train/precision.c). */
acc_result acc__grad_scaler_unscale_more(acc_grad_scaler *s, acc_model *m, int *found_inf);
acc_result acc__optimizer_restrict(acc_optimizer *o, const size_t *offset, size_t lo, size_t hi);
acc_result acc__optimizer_unrestrict(acc_optimizer *o, acc_state *st, const size_t *offset,
                                     float *flat, size_t shard);

#endif
