/* Allocation wrappers: every allocation of the library goes through these, so a failure always
 * leaves a message (ACC_ERR_NOMEM naming the size), and tests can make the N-th allocation fail.
 *
 * Failure injection is for tests only: acc__alloc_fail_nth is internal (hidden in the shared
 * library, reachable from test programs linked with the static one) and nothing in the library
 * or the environment arms it. Disarmed, it costs one relaxed atomic load per allocation. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* acc__tmp_alloc's header, 64 bytes before the pointer it returns (keeps 64-byte alignment of
 * mapped blocks): how the block was made and how long its mapping is. */
typedef struct {
  size_t maplen; /* 0: from malloc */
  uint64_t magic;
  unsigned char pad[48];
} tmp_head;
#define TMP_MAGIC 0x61636374656d7021ull
#define TMP_MAP_MIN ((size_t)64 << 10)

void *acc__tmp_alloc(size_t n) {
  if (n > SIZE_MAX - sizeof(tmp_head) - 4096) {
    acc__error(ACC_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return NULL;
  }
  size_t total = n + sizeof(tmp_head);
  tmp_head *h = NULL;
  if (injected()) {
    h = NULL;
  } else if (n >= TMP_MAP_MIN) {
    size_t maplen = (total + 4095) & ~(size_t)4095;
    void *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      h = m;
      h->maplen = maplen;
    }
  } else if ((h = malloc(total)) != NULL) {
    h->maplen = 0;
  }
  if (!h) {
    acc__error(ACC_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return NULL;
  }
  h->magic = TMP_MAGIC;
  return h + 1;
}

void acc__tmp_free(void *p) {
  if (!p) return;
  int saved = errno;
  tmp_head *h = (tmp_head *)p - 1;
  if (h->magic != TMP_MAGIC) abort(); /* not from acc__tmp_alloc: a library bug, never a user's */
  h->magic = 0;
  if (h->maplen) munmap(h, h->maplen);
  else free(h);
  errno = saved;
}
