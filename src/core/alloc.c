/* Allocation wrappers: every allocation of the library goes through these, so a failure always
 * leaves a message (ACC_ERR_NOMEM naming the size), and tests can make the N-th allocation fail.
 *
 * Failure injection is for tests only: acc__alloc_fail_nth is internal (hidden in the shared
 * library, reachable from test programs linked with the static one) and nothing in the library
 * or the environment arms it. Disarmed, it costs one relaxed atomic load per allocation. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static atomic_long fail_at = -1; /* allocation number that fails; < 0: none */
static atomic_long seen;         /* allocations since the last acc__alloc_fail_nth */

void acc__alloc_fail_nth(long n) {
  atomic_store(&fail_at, -1);
  atomic_store(&seen, 0);
  atomic_store(&fail_at, n);
}

long acc__alloc_count(void) { return atomic_load(&seen); }

/* 1 when this allocation must fail. */
static int injected(void) {
  long at = atomic_load_explicit(&fail_at, memory_order_relaxed);
  if (at < 0) return 0;
  return atomic_fetch_add(&seen, 1) == at;
}

void *acc__malloc(size_t n) {
  void *p = injected() ? NULL : malloc(n ? n : 1);
  if (!p) acc__error(ACC_ERR_NOMEM, "out of memory allocating %zu bytes", n);
  return p;
}

void *acc__calloc(size_t count, size_t size) {
  void *p = injected() ? NULL : calloc(count ? count : 1, size ? size : 1);
  if (!p) acc__error(ACC_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", count, size);
  return p;
}

void *acc__realloc(void *p, size_t n) {
  void *q = injected() ? NULL : realloc(p, n ? n : 1);
  if (!q) acc__error(ACC_ERR_NOMEM, "out of memory reallocating to %zu bytes", n);
  return q;
}

void acc__free(void *p) {
  int saved = errno;
  free(p);
  errno = saved;
}

void acc_free(void *p) { acc__free(p); }

char *acc__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = acc__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}
