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
/* Prefixes the current last error with "<context>: " and returns rc (for error paths). */
acc_result acc__error_context(acc_result rc, const char *fmt, ...) ACC_PRINTF(2, 3);

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

/* Allocation wrappers: NULL results set ACC_ERR_NOMEM with what was being allocated. */
void *acc__malloc(size_t n);
void *acc__calloc(size_t count, size_t size);
void *acc__realloc(void *p, size_t n);
void acc__free(void *p);
char *acc__strdup(const char *s);

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

/* Host checks (sysinfo.c): 1 when the kernel release (e.g. "5.4.0-150-generic") is below
 * major.minor.patch, 0 when not, -1 when it cannot be parsed; the warning text for a Linux kernel
 * below 5.5.0 (returns 1 when buf holds one); and the warning printed to stderr when it applies. */
int acc__kernel_below(const char *release, int major, int minor, int patch);
int acc__kernel_warning(const char *sysname, const char *release, char *buf, size_t cap);
void acc__warn_old_kernel(void);

#endif
