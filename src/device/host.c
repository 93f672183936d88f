/* The two host implementations of the device interface (device.h):
 *
 * cpu:  host memory is device memory; every operation runs at once on the calling thread.
 * fake: behaves like a GPU without one, so code written against the device layer can be tested in
 *       CPU-only CI. Device memory is unreachable from host code, as on a GPU: each allocation is
 *       one shared anonymous mapping mapped twice (mremap with old size 0), the address handed
 *       out (the "device pointer") PROT_NONE, so a host load or store through it dies by SIGSEGV,
 *       and a second, private read-write view that only the fake device's own copies and kernels
 *       use (device pointers are translated to it when an operation is queued). The host_kernel
 *       op (acc__device_host_kernel, acc_accelerator_host_kernel) is the fake twin of a kernel
 *       launch: it opens the device pointers to host code for the duration of one call (tests,
 *       and the examples' fake paths, compute that way). Every pointer argument is checked
 *       against the tracked allocations (a host pointer where device memory is expected, or the
 *       reverse, or a range running past its allocation, is refused with a message naming the
 *       operation and the argument). Operations queue per stream and run only when the program
 *       synchronizes (stream or event sync, event query, a stream waiting on an event, free,
 *       close). Queuing an operation that touches memory an operation of another stream writes
 *       (or writes memory it reads) is refused unless the two are ordered: by an event the stream
 *       waited for (directly or through other streams' waits), or by the host having synchronized
 *       with that work before queuing. The host destination of a device-to-host copy is filled with 0xff bytes
 *       (NaN for floats) when the copy is queued, so reading it before synchronizing shows. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device/device_impl.h"
#include "device/kernels.h"

/* ---- the operations, run on the host -------------------------------------------------------- */

enum {
  OP_COPY,
  OP_MEMSET,
  OP_SGD,
  OP_ADAMW,
  OP_UNSCALE,
  OP_NORMP,
  OP_NORMF,
  OP_SCALE,
  OP_CAST,
  OP_CLAMP,
  OP_ROUND16,
  OP_WIDEN,
  OP_AXPY
};
static const char *const op_names[] = {"copy",  "memset", "sgd",   "adamw",
                                       "unscale", "norm_partials", "norm_finish", "scale",
                                       "cast",  "clamp",  "round_f16", "widen", "axpy"};

typedef struct range {
  const void *p;
  size_t len;
  int write;
  const char *arg;
} range;

typedef struct fop {
  int type;
  union {
    struct {
      void *dst;
      const void *src;
      size_t bytes;
      int kind;
    } copy;
    struct {
      void *dst;
      int value;
      size_t bytes;
    } set;
    acc__sgd_args sgd;
    acc__adamw_args adamw;
    struct {
      float *g;
      size_t n;
      float inv;
      int32_t *flag;
    } unscale;
    struct {
      const float *g;
      size_t n;
      double *partials;
    } normp;
    struct {
      const double *partials;
      size_t count;
      float max_norm;
      float *norm, *coef;
    } normf;
    struct {
      float *buf;
      size_t n;
      const float *coef;
    } scale;
    struct {
      uint16_t *dst;
      const float *src;
      size_t n;
      int dtype;
    } cast;
    struct {
      float *buf;
      size_t n;
      float clip;
    } clamp;
    struct {
      float *dst;
      const uint16_t *src;
      size_t n;
      int dtype;
    } widen;
    struct {
      float *dst;
      const float *src;
      size_t n;
      float a;
    } axpy;
  } u;
  range r[6];
  int nr;
  uint64_t seq;
  struct fop *next;
} fop;

static void run_op(const fop *o) {
  switch (o->type) {
    case OP_COPY:
      if (o->u.copy.bytes) memmove(o->u.copy.dst, o->u.copy.src, o->u.copy.bytes);
      break;
    case OP_MEMSET:
      if (o->u.set.bytes) memset(o->u.set.dst, o->u.set.value, o->u.set.bytes);
      break;
    case OP_SGD: {
      const acc__sgd_args *a = &o->u.sgd;
      if (a->skip_if && *a->skip_if) break;
      float scale = a->grad_scale ? *a->grad_scale : 1.0f;
      for (size_t k = 0; k < a->n; k++) acc__k_sgd(a, scale, k);
      break;
    }
    case OP_ADAMW: {
      const acc__adamw_args *a = &o->u.adamw;
      if (a->skip_if && *a->skip_if) break;
      float scale = a->grad_scale ? *a->grad_scale : 1.0f;
      for (size_t k = 0; k < a->n; k++) acc__k_adamw(a, scale, k);
      break;
    }
    case OP_UNSCALE: {
      float *g = o->u.unscale.g;
      int found = 0;
      for (size_t k = 0; k < o->u.unscale.n; k++) {
        if (!acc__k_finite(g[k])) found = 1;
        g[k] *= o->u.unscale.inv;
      }
      if (found) *o->u.unscale.flag = 1;
      break;
    }
    case OP_NORMP: {
      const float *g = o->u.normp.g;
      size_t n = o->u.normp.n, np = acc__norm_partials(n);
      for (size_t i = 0; i < np; i++) {
        double s = 0.0;
        size_t end = (i + 1) * ACC__NORM_CHUNK < n ? (i + 1) * ACC__NORM_CHUNK : n;
        for (size_t k = i * ACC__NORM_CHUNK; k < end; k++) s += (double)g[k] * (double)g[k];
        o->u.normp.partials[i] = s;
      }
      break;
    }
    case OP_NORMF: {
      double total = 0.0;
      for (size_t i = 0; i < o->u.normf.count; i++) total += o->u.normf.partials[i];
      acc__k_norm_finish(total, o->u.normf.max_norm, o->u.normf.norm, o->u.normf.coef);
      break;
    }
    case OP_SCALE: {
      float c = *o->u.scale.coef;
      if (c < 1.0f)
        for (size_t k = 0; k < o->u.scale.n; k++) o->u.scale.buf[k] *= c;
      break;
    }
    case OP_CAST: {
      const float *s = o->u.cast.src;
      uint16_t *d = o->u.cast.dst;
      if (o->u.cast.dtype == ACC_BF16)
        for (size_t k = 0; k < o->u.cast.n; k++) d[k] = acc__k_f32_to_bf16(s[k]);
      else
        for (size_t k = 0; k < o->u.cast.n; k++) d[k] = acc__k_f32_to_f16(s[k]);
      break;
    }
    case OP_CLAMP:
      for (size_t k = 0; k < o->u.clamp.n; k++)
        o->u.clamp.buf[k] = acc__k_clamp(o->u.clamp.buf[k], o->u.clamp.clip);
      break;
    case OP_ROUND16:
      for (size_t k = 0; k < o->u.clamp.n; k++)
        o->u.clamp.buf[k] = acc__k_round_f16(o->u.clamp.buf[k]);
      break;
    case OP_AXPY:
      for (size_t k = 0; k < o->u.axpy.n; k++)
        o->u.axpy.dst[k] = acc__k_axpy(o->u.axpy.dst[k], o->u.axpy.src[k], o->u.axpy.a);
      break;
    case OP_WIDEN: {
      const uint16_t *s = o->u.widen.src;
      float *d = o->u.widen.dst;
      if (o->u.widen.dtype == ACC_BF16)
        for (size_t k = 0; k < o->u.widen.n; k++) d[k] = acc__k_bf16_to_f32(s[k]);
      else
        for (size_t k = 0; k < o->u.widen.n; k++) d[k] = acc__k_f16_to_f32(s[k]);
      break;
    }
    default: break;
  }
}

/* ---- the fake device's state ---------------------------------------------------------------- */

/* Ordering is tracked with vector clocks: know[id] is the last operation (a global sequence
 * number) of stream id that is ordered before the next operation of this stream (or, for the
 * host, before anything it queues next). Stream ids are reused after a stream is destroyed;
 * sequence numbers never are, so a stale entry is harmless. */
#define MAX_STREAMS 64
#define MAX_HISTORY 4096 /* operations kept per stream after they ran, for the order check */

typedef struct fstream {
  int id; /* 0: the default stream */
  fop *head, *tail;           /* queued, not yet run */
  fop *done_head, *done_tail; /* ran, not yet known to the host */
  size_t ndone;
  uint64_t queued; /* seq of the last queued op */
  uint64_t know[MAX_STREAMS];
  struct fstream *next_stream;
} fstream;

typedef struct fevent {
  int recorded, sid;
  uint64_t know[MAX_STREAMS]; /* what an operation waiting for the event is ordered after */
} fevent;

typedef struct alloc_rec {
  char *base;   /* the device pointer: PROT_NONE outside host kernels */
  char *view;   /* the same pages, read-write: what the fake device's operations touch */
  size_t size, mapped;
} alloc_rec;

typedef struct fake {
  pthread_mutex_t mu;
  alloc_rec *allocs;
  size_t nallocs, cap;
  fstream def; /* the default stream, head of the list of streams */
  uint64_t used_ids; /* bit i: stream id i is in use */
  uint64_t next_seq;
  uint64_t host_know[MAX_STREAMS];
  int kernel_depth; /* host kernels running (h_host_kernel) */
} fake;

static void learn(uint64_t *dst, const uint64_t *src) {
  for (int i = 0; i < MAX_STREAMS; i++)
    if (src[i] > dst[i]) dst[i] = src[i];
}

/* Drops the history the host already knows (everything queued later is ordered after it). */
static void prune(fake *f) {
  for (fstream *s = &f->def; s; s = s->next_stream)
    while (s->done_head && s->done_head->seq <= f->host_know[s->id]) {
      fop *o = s->done_head;
      s->done_head = o->next;
      if (!s->done_head) s->done_tail = NULL;
      s->ndone--;
      free(o);
    }
}

static fstream *stream_of(fake *f, void *s) { return s ? (fstream *)s : &f->def; }

/* p translated to the read-write view when it points into an allocation; host pointers as
 * they are. */
static void *xl(const fake *f, const void *p) {
  const char *c = p;
  if (!c) return NULL;
  for (size_t i = 0; i < f->nallocs; i++)
    if (c >= f->allocs[i].base &&
        c < f->allocs[i].base + (f->allocs[i].size ? f->allocs[i].size : 1))
      return f->allocs[i].view + (c - f->allocs[i].base);
  return (void *)c;
}

static const alloc_rec *find_alloc(const fake *f, const void *p) {
  const char *c = p;
  for (size_t i = 0; i < f->nallocs; i++)
    if (c >= f->allocs[i].base &&
        c < f->allocs[i].base + (f->allocs[i].size ? f->allocs[i].size : 1))
      return &f->allocs[i];
  return NULL;
}

static acc_result check_dev(const fake *f, const char *op, const range *r) {
  if (r->len == 0) return ACC_OK;
  if (!r->p)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "fake device: %s: argument %s is NULL (%zu bytes)",
                      op, r->arg, r->len);
  const alloc_rec *a = find_alloc(f, r->p);
  if (!a)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "fake device: %s: argument %s (%p) is not device memory: a host pointer, or "
                      "memory already freed; allocate it with acc__device_alloc and copy host data "
                      "in with acc__device_copy (host to device)",
                      op, r->arg, r->p);
  size_t off = (size_t)((const char *)r->p - a->base);
  if (r->len > a->size - off)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "fake device: %s: argument %s: %zu bytes at offset %zu run past the end of "
                      "its %zu-byte device allocation",
                      op, r->arg, r->len, off, a->size);
  return ACC_OK;
}

static acc_result check_host(const fake *f, const char *op, const range *r) {
  if (r->len == 0) return ACC_OK;
  if (!r->p)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "fake device: %s: argument %s is NULL (%zu bytes)",
                      op, r->arg, r->len);
  const char *p = r->p;
  for (size_t i = 0; i < f->nallocs; i++) {
    const alloc_rec *a = &f->allocs[i];
    if (p < a->base + a->size && a->base < p + r->len)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "fake device: %s: argument %s (%p) is device memory where a host pointer "
                        "is expected; use a device-to-device copy, or copy it to host memory "
                        "first",
                        op, r->arg, r->p);
  }
  return ACC_OK;
}

static void run_stream(fstream *s, uint64_t upto) {
  while (s->head && s->head->seq <= upto) {
    fop *o = s->head;
    run_op(o);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    o->next = NULL; /* into the history */
    if (s->done_tail) s->done_tail->next = o;
    else s->done_head = o;
    s->done_tail = o;
    if (++s->ndone > MAX_HISTORY) {
      fop *old = s->done_head;
      s->done_head = old->next;
      s->ndone--;
      free(old);
    }
  }
}

/* The host waits for everything queued on s. */
static void host_sync_stream(fake *f, fstream *s) {
  run_stream(s, UINT64_MAX);
  learn(f->host_know, s->know);
  if (s->queued > f->host_know[s->id]) f->host_know[s->id] = s->queued;
  prune(f);
}

static void run_all(fake *f) {
  for (fstream *s = &f->def; s; s = s->next_stream) host_sync_stream(f, s);
}

static int overlap(const range *a, const range *b) {
  if (!a->len || !b->len) return 0;
  const char *pa = a->p, *pb = b->p;
  return pa < pb + b->len && pb < pa + a->len;
}

/* Whether a queued operation of any stream touches r. */
static int pending_use(const fake *f, const range *r) {
  for (const fstream *t = &f->def; t; t = t->next_stream)
    for (const fop *q = t->head; q; q = q->next)
      for (int j = 0; j < q->nr; j++)
        if (overlap(r, &q->r[j])) return 1;
  return 0;
}

static acc_result order_error(const fop *o, int i, const fstream *s, const fop *q, int j,
                              const fstream *t, int ran) {
  return acc__error(
      ACC_ERR_INVALID_USAGE,
      "fake device: stream order violation: %s on stream %d %s %s (%p, %zu bytes), which %s "
      "queued on stream %d %s (argument %s)%s: record an event on stream %d after it and make "
      "stream %d wait for that event (acc__dstream_wait) before this operation",
      op_names[o->type], s->id, o->r[i].write ? "writes" : "reads", o->r[i].arg, o->r[i].p,
      o->r[i].len, op_names[q->type], t->id, q->r[j].write ? "writes" : "reads", q->r[j].arg,
      ran ? ", and nothing orders the two" : " and has not run yet", t->id, s->id);
}

static acc_result check_list(const fop *o, const fstream *s, const fop *list, const fstream *t,
                             int ran) {
  for (const fop *q = list; q; q = q->next) {
    if (q->seq <= s->know[t->id]) continue; /* ordered before o */
    for (int i = 0; i < o->nr; i++)
      for (int j = 0; j < q->nr; j++)
        if ((o->r[i].write || q->r[j].write) && overlap(&o->r[i], &q->r[j]))
          return order_error(o, i, s, q, j, t, ran);
  }
  return ACC_OK;
}

/* Refuses o on stream s when an operation of another stream, not ordered before it, writes what
 * o touches or touches what o writes. */
static acc_result check_order(fake *f, const fop *o, fstream *s) {
  learn(s->know, f->host_know); /* o comes after everything the host has waited for */
  for (const fstream *t = &f->def; t; t = t->next_stream) {
    if (t == s) continue;
    ACC_CHECK(check_list(o, s, t->done_head, t, 1));
    ACC_CHECK(check_list(o, s, t->head, t, 0));
  }
  return ACC_OK;
}

static size_t page_round(size_t bytes) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (bytes == 0) return pg;
  if (bytes > SIZE_MAX - pg) return 0;
  return (bytes + pg - 1) / pg * pg;
}

/* One shared anonymous mapping (the read-write view) and a second mapping of the same pages
 * (mremap with old size 0), made PROT_NONE: the device pointer. */
static int fake_map(size_t bytes, size_t *mapped, char **base, char **view) {
  size_t len = page_round(bytes);
  if (!len) {
    errno = ENOMEM;
    return -1;
  }
  void *v = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (v == MAP_FAILED) return -1;
  void *b = mremap(v, 0, len, MREMAP_MAYMOVE);
  if (b == MAP_FAILED || mprotect(b, len, PROT_NONE) != 0) {
    int e = errno;
    if (b != MAP_FAILED) munmap(b, len);
    munmap(v, len);
    errno = e;
    return -1;
  }
  *mapped = len;
  *base = b;
  *view = v;
  return 0;
}

static void fake_unmap(const alloc_rec *a) {
  munmap(a->base, a->mapped);
  munmap(a->view, a->mapped);
}

/* ---- the ops table shared by cpu and fake --------------------------------------------------- */

typedef struct hostdev {
  int fake;
  fake f;
} hostdev;

static void free_history(fstream *s) {
  while (s->done_head) {
    fop *o = s->done_head;
    s->done_head = o->next;
    free(o);
  }
  s->done_tail = NULL;
  s->ndone = 0;
}

static int h_open_common(int is_fake, void **ctx) {
  hostdev *h = acc__calloc(1, sizeof *h);
  if (!h) return ACC_ERR_NOMEM;
  h->fake = is_fake;
  pthread_mutex_init(&h->f.mu, NULL);
  h->f.used_ids = 1; /* the default stream */
  *ctx = h;
  return ACC_OK;
}
static int h_open_cpu(int ordinal, void **ctx) {
  if (ordinal != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "cpu device: ordinal %d does not exist (only 0)",
                      ordinal);
  return h_open_common(0, ctx);
}
static int h_open_fake(int ordinal, void **ctx) {
  /* each process has its own arena: fake:N stands for the N-th GPU of the machine */
  if (ordinal < 0 || ordinal >= ACC__MAX_GPUS)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "fake device: ordinal %d does not exist (0..%d)",
                      ordinal, ACC__MAX_GPUS - 1);
  return h_open_common(1, ctx);
}

static void h_close(void *ctx) {
  hostdev *h = ctx;
  if (!h) return;
  if (h->fake) {
    run_all(&h->f);
    for (size_t i = 0; i < h->f.nallocs; i++) fake_unmap(&h->f.allocs[i]);
    free(h->f.allocs);
    fstream *s = h->f.def.next_stream;
    free_history(&h->f.def);
    while (s) {
      fstream *n = s->next_stream;
      free_history(s);
      free(s);
      s = n;
    }
  }
  pthread_mutex_destroy(&h->f.mu);
  free(h);
}

static int h_alloc(void *ctx, size_t bytes, void **p) {
  hostdev *h = ctx;
  if (!h->fake) {
    *p = acc__malloc(bytes ? bytes : 1);
    return *p ? ACC_OK : ACC_ERR_NOMEM;
  }
  size_t mapped = 0;
  char *base = NULL, *view = NULL;
  if (fake_map(bytes, &mapped, &base, &view) != 0)
    return acc__error(ACC_ERR_NOMEM, "fake device: cannot allocate %zu bytes of device memory: %s",
                      bytes, strerror(errno));
  pthread_mutex_lock(&h->f.mu);
  if (h->f.nallocs == h->f.cap) {
    size_t cap = h->f.cap ? 2 * h->f.cap : 16;
    alloc_rec *n = acc__realloc(h->f.allocs, cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&h->f.mu);
      fake_unmap(&(alloc_rec){base, view, bytes, mapped});
      return ACC_ERR_NOMEM;
    }
    h->f.allocs = n;
    h->f.cap = cap;
  }
  h->f.allocs[h->f.nallocs++] = (alloc_rec){base, view, bytes, mapped};
  /* inside a host kernel, device memory is open to the host: this allocation too */
  if (h->f.kernel_depth) mprotect(base, mapped, PROT_READ | PROT_WRITE);
  pthread_mutex_unlock(&h->f.mu);
  *p = base;
  return ACC_OK;
}

static int h_free(void *ctx, void *p) {
  hostdev *h = ctx;
  if (!p) return ACC_OK;
  if (!h->fake) {
    free(p);
    return ACC_OK;
  }
  pthread_mutex_lock(&h->f.mu);
  run_all(&h->f); /* like cudaFree: the device finishes its work first */
  for (size_t i = 0; i < h->f.nallocs; i++)
    if (h->f.allocs[i].base == p) {
      fake_unmap(&h->f.allocs[i]);
      h->f.allocs[i] = h->f.allocs[--h->f.nallocs];
      pthread_mutex_unlock(&h->f.mu);
      return ACC_OK;
    }
  int inside = find_alloc(&h->f, p) != NULL;
  pthread_mutex_unlock(&h->f.mu);
  if (inside)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "fake device: free: %p is inside a device allocation, not its start", p);
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "fake device: free: %p is not device memory (a host pointer, or freed twice)",
                    p);
}

/* The fake twin of a kernel launch: everything queued runs first (the host kernel comes after
 * all of the device's work, and everything queued later after it), device memory is open to the
 * host while fn runs, then unreachable again. Calls may nest and come from several threads; the
 * memory closes when the last one returns. */
static int h_host_kernel(void *ctx, void (*fn)(void *), void *arg) {
  hostdev *h = ctx;
  if (!h->fake) {
    fn(arg);
    return ACC_OK;
  }
  pthread_mutex_lock(&h->f.mu);
  run_all(&h->f);
  if (h->f.kernel_depth++ == 0)
    for (size_t i = 0; i < h->f.nallocs; i++)
      mprotect(h->f.allocs[i].base, h->f.allocs[i].mapped, PROT_READ | PROT_WRITE);
  pthread_mutex_unlock(&h->f.mu);
  fn(arg);
  pthread_mutex_lock(&h->f.mu);
  if (--h->f.kernel_depth == 0)
    for (size_t i = 0; i < h->f.nallocs; i++)
      mprotect(h->f.allocs[i].base, h->f.allocs[i].mapped, PROT_NONE);
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

static int h_is_device_ptr(void *ctx, const void *p, int *yes) {
  hostdev *h = ctx;
  if (!h->fake) {
    *yes = 1;
    return ACC_OK;
  }
  pthread_mutex_lock(&h->f.mu);
  *yes = p && find_alloc(&h->f, p) != NULL;
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

static int h_stream_create(void *ctx, void **s) {
  hostdev *h = ctx;
  fstream *n = acc__calloc(1, sizeof *n);
  if (!n) return ACC_ERR_NOMEM;
  pthread_mutex_lock(&h->f.mu);
  int id = 1;
  while (id < MAX_STREAMS && (h->f.used_ids >> id & 1u)) id++;
  if (id == MAX_STREAMS) {
    pthread_mutex_unlock(&h->f.mu);
    free(n);
    return acc__error(ACC_ERR_NOMEM, "fake device: more than %d streams at once",
                      MAX_STREAMS - 1);
  }
  h->f.used_ids |= (uint64_t)1 << id;
  n->id = id;
  n->next_stream = h->f.def.next_stream;
  h->f.def.next_stream = n;
  pthread_mutex_unlock(&h->f.mu);
  *s = n;
  return ACC_OK;
}

static int h_stream_destroy(void *ctx, void *s) {
  hostdev *h = ctx;
  if (!s) return ACC_OK;
  pthread_mutex_lock(&h->f.mu);
  fstream *st = s;
  host_sync_stream(&h->f, st);
  for (fstream **pp = &h->f.def.next_stream; *pp; pp = &(*pp)->next_stream)
    if (*pp == st) {
      *pp = st->next_stream;
      break;
    }
  h->f.used_ids &= ~((uint64_t)1 << st->id);
  pthread_mutex_unlock(&h->f.mu);
  free_history(st);
  free(st);
  return ACC_OK;
}

static int h_stream_sync(void *ctx, void *s) {
  hostdev *h = ctx;
  pthread_mutex_lock(&h->f.mu);
  host_sync_stream(&h->f, stream_of(&h->f, s));
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

static int h_event_create(void *ctx, void **e) {
  *e = acc__calloc(1, sizeof(fevent));
  return *e ? ACC_OK : ACC_ERR_NOMEM;
}

static int h_event_destroy(void *ctx, void *e) {
  free(e);
  return ACC_OK;
}

static int h_event_record(void *ctx, void *e, void *s) {
  hostdev *h = ctx;
  fevent *ev = e;
  pthread_mutex_lock(&h->f.mu);
  fstream *st = stream_of(&h->f, s);
  learn(st->know, h->f.host_know);
  memcpy(ev->know, st->know, sizeof ev->know);
  ev->know[st->id] = st->queued;
  ev->sid = st->id;
  ev->recorded = 1;
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

/* Everything the event is ordered after runs now; an event never recorded is complete, as in
 * CUDA. */
static void run_event(fake *f, const fevent *ev) {
  if (!ev->recorded) return;
  for (fstream *t = &f->def; t; t = t->next_stream) run_stream(t, ev->know[t->id]);
}

/* Later operations of s are ordered after the event. */
static int h_stream_wait(void *ctx, void *s, void *e) {
  hostdev *h = ctx;
  fevent *ev = e;
  pthread_mutex_lock(&h->f.mu);
  run_event(&h->f, ev);
  if (ev->recorded) learn(stream_of(&h->f, s)->know, ev->know);
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

/* The host waits for the event. */
static int h_event_sync(void *ctx, void *e) {
  hostdev *h = ctx;
  fevent *ev = e;
  pthread_mutex_lock(&h->f.mu);
  run_event(&h->f, ev);
  if (ev->recorded) {
    learn(h->f.host_know, ev->know);
    prune(&h->f);
  }
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

static int h_event_query(void *ctx, void *e, int *done) {
  ACC_CHECK(h_event_sync(ctx, e));
  *done = 1;
  return ACC_OK;
}

/* The pointer arguments of a queued operation, turned into the read-write views it runs on (its
 * ranges keep the device addresses, for the order checks). */
#define XL(field) ((field) = xl(f, (field)))
static void translate(const fake *f, fop *o) {
  switch (o->type) {
    case OP_COPY: XL(o->u.copy.dst); XL(o->u.copy.src); break;
    case OP_MEMSET: XL(o->u.set.dst); break;
    case OP_SGD:
      XL(o->u.sgd.w); XL(o->u.sgd.g); XL(o->u.sgd.buf); XL(o->u.sgd.grad_scale);
      XL(o->u.sgd.skip_if);
      break;
    case OP_ADAMW:
      XL(o->u.adamw.w); XL(o->u.adamw.g); XL(o->u.adamw.m); XL(o->u.adamw.v);
      XL(o->u.adamw.grad_scale); XL(o->u.adamw.skip_if);
      break;
    case OP_UNSCALE: XL(o->u.unscale.g); XL(o->u.unscale.flag); break;
    case OP_NORMP: XL(o->u.normp.g); XL(o->u.normp.partials); break;
    case OP_NORMF: XL(o->u.normf.partials); XL(o->u.normf.norm); XL(o->u.normf.coef); break;
    case OP_SCALE: XL(o->u.scale.buf); XL(o->u.scale.coef); break;
    case OP_CAST: XL(o->u.cast.dst); XL(o->u.cast.src); break;
    case OP_CLAMP:
    case OP_ROUND16: XL(o->u.clamp.buf); break;
    case OP_WIDEN: XL(o->u.widen.dst); XL(o->u.widen.src); break;
    case OP_AXPY: XL(o->u.axpy.dst); XL(o->u.axpy.src); break;
    default: break;
  }
}
#undef XL

/* Checks o's ranges (device or host as marked), then runs it (cpu) or queues it (fake). */
static int submit(hostdev *h, fop *o, const int *is_dev, void *s) {
  if (!h->fake) {
    for (int i = 0; i < o->nr; i++)
      if (o->r[i].len && !o->r[i].p)
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "cpu device: %s: argument %s is NULL (%zu bytes)", op_names[o->type],
                          o->r[i].arg, o->r[i].len);
    run_op(o);
    return ACC_OK;
  }
  const char *name = op_names[o->type];
  pthread_mutex_lock(&h->f.mu);
  fstream *st = stream_of(&h->f, s);
  acc_result rc = ACC_OK;
  for (int i = 0; i < o->nr && rc == ACC_OK; i++)
    rc = is_dev[i] ? check_dev(&h->f, name, &o->r[i]) : check_host(&h->f, name, &o->r[i]);
  if (rc == ACC_OK) rc = check_order(&h->f, o, st);
  if (rc != ACC_OK) {
    pthread_mutex_unlock(&h->f.mu);
    return rc;
  }
  /* The host copy of a device-to-host copy is garbage until the copy has run; unless a queued
   * operation (same stream: legal) still reads or writes that host memory. */
  int poison = o->type == OP_COPY && o->u.copy.kind == ACC__COPY_D2H && o->u.copy.bytes &&
               !pending_use(&h->f, &o->r[0]);
  fop *q = acc__malloc(sizeof *q);
  if (!q) {
    pthread_mutex_unlock(&h->f.mu);
    return ACC_ERR_NOMEM;
  }
  *q = *o;
  translate(&h->f, q);
  q->seq = ++h->f.next_seq;
  q->next = NULL;
  if (st->tail) st->tail->next = q;
  else st->head = q;
  st->tail = q;
  st->queued = q->seq;
  if (poison) memset(o->u.copy.dst, 0xff, o->u.copy.bytes);
  pthread_mutex_unlock(&h->f.mu);
  return ACC_OK;
}

#define RANGE(ptr, bytes, w, name) ((range){(ptr), (bytes), (w), (name)})

static int h_copy(void *ctx, void *dst, const void *src, size_t bytes, int kind, void *s) {
  fop o = {.type = OP_COPY, .nr = 2};
  o.u.copy.dst = dst;
  o.u.copy.src = src;
  o.u.copy.bytes = bytes;
  o.u.copy.kind = kind;
  o.r[0] = RANGE(dst, bytes, 1, "dst");
  o.r[1] = RANGE(src, bytes, 0, "src");
  int dev[2] = {kind != ACC__COPY_D2H, kind != ACC__COPY_H2D};
  return submit(ctx, &o, dev, s);
}

static int h_memset(void *ctx, void *dst, int value, size_t bytes, void *s) {
  fop o = {.type = OP_MEMSET, .nr = 1};
  o.u.set.dst = dst;
  o.u.set.value = value;
  o.u.set.bytes = bytes;
  o.r[0] = RANGE(dst, bytes, 1, "dst");
  int dev[1] = {1};
  return submit(ctx, &o, dev, s);
}

static int h_sgd(void *ctx, const acc__sgd_args *a, void *s) {
  fop o = {.type = OP_SGD};
  o.u.sgd = *a;
  size_t b = a->n * sizeof(float);
  o.r[o.nr++] = RANGE(a->w, b, 1, "w");
  o.r[o.nr++] = RANGE(a->g, b, 0, "g");
  if (a->has_momentum) o.r[o.nr++] = RANGE(a->buf, b, 1, "buf");
  if (a->grad_scale) o.r[o.nr++] = RANGE(a->grad_scale, sizeof(float), 0, "grad_scale");
  if (a->skip_if) o.r[o.nr++] = RANGE(a->skip_if, sizeof(int32_t), 0, "skip_if");
  int dev[6] = {1, 1, 1, 1, 1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_adamw(void *ctx, const acc__adamw_args *a, void *s) {
  fop o = {.type = OP_ADAMW};
  o.u.adamw = *a;
  size_t b = a->n * sizeof(float);
  o.r[o.nr++] = RANGE(a->w, b, 1, "w");
  o.r[o.nr++] = RANGE(a->g, b, 0, "g");
  o.r[o.nr++] = RANGE(a->m, b, 1, "m");
  o.r[o.nr++] = RANGE(a->v, b, 1, "v");
  if (a->grad_scale) o.r[o.nr++] = RANGE(a->grad_scale, sizeof(float), 0, "grad_scale");
  if (a->skip_if) o.r[o.nr++] = RANGE(a->skip_if, sizeof(int32_t), 0, "skip_if");
  int dev[6] = {1, 1, 1, 1, 1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_unscale(void *ctx, float *g, size_t n, float inv, int32_t *flag, void *s) {
  fop o = {.type = OP_UNSCALE, .nr = 2};
  o.u.unscale.g = g;
  o.u.unscale.n = n;
  o.u.unscale.inv = inv;
  o.u.unscale.flag = flag;
  o.r[0] = RANGE(g, n * sizeof(float), 1, "grad");
  o.r[1] = RANGE(flag, sizeof(int32_t), 1, "found_inf");
  int dev[2] = {1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_norm_partials(void *ctx, const float *g, size_t n, double *partials, void *s) {
  fop o = {.type = OP_NORMP, .nr = 2};
  o.u.normp.g = g;
  o.u.normp.n = n;
  o.u.normp.partials = partials;
  o.r[0] = RANGE(g, n * sizeof(float), 0, "grad");
  o.r[1] = RANGE(partials, acc__norm_partials(n) * sizeof(double), 1, "partials");
  int dev[2] = {1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_norm_finish(void *ctx, const double *partials, size_t count, float max_norm,
                         float *norm, float *coef, void *s) {
  fop o = {.type = OP_NORMF, .nr = 3};
  o.u.normf.partials = partials;
  o.u.normf.count = count;
  o.u.normf.max_norm = max_norm;
  o.u.normf.norm = norm;
  o.u.normf.coef = coef;
  o.r[0] = RANGE(partials, count * sizeof(double), 0, "partials");
  o.r[1] = RANGE(norm, sizeof(float), 1, "norm");
  o.r[2] = RANGE(coef, sizeof(float), 1, "coef");
  int dev[3] = {1, 1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_scale(void *ctx, float *buf, size_t n, const float *coef, void *s) {
  fop o = {.type = OP_SCALE, .nr = 2};
  o.u.scale.buf = buf;
  o.u.scale.n = n;
  o.u.scale.coef = coef;
  o.r[0] = RANGE(buf, n * sizeof(float), 1, "buf");
  o.r[1] = RANGE(coef, sizeof(float), 0, "coef");
  int dev[2] = {1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_cast(void *ctx, uint16_t *dst, const float *src, size_t n, int dtype, void *s) {
  fop o = {.type = OP_CAST, .nr = 2};
  o.u.cast.dst = dst;
  o.u.cast.src = src;
  o.u.cast.n = n;
  o.u.cast.dtype = dtype;
  o.r[0] = RANGE(dst, n * sizeof(uint16_t), 1, "dst");
  o.r[1] = RANGE(src, n * sizeof(float), 0, "src");
  int dev[2] = {1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_clamp(void *ctx, float *buf, size_t n, float clip, void *s) {
  fop o = {.type = OP_CLAMP, .nr = 1};
  o.u.clamp.buf = buf;
  o.u.clamp.n = n;
  o.u.clamp.clip = clip;
  o.r[0] = RANGE(buf, n * sizeof(float), 1, "buf");
  int dev[1] = {1};
  return submit(ctx, &o, dev, s);
}

static int h_round_f16(void *ctx, float *buf, size_t n, void *s) {
  fop o = {.type = OP_ROUND16, .nr = 1};
  o.u.clamp.buf = buf;
  o.u.clamp.n = n;
  o.r[0] = RANGE(buf, n * sizeof(float), 1, "buf");
  int dev[1] = {1};
  return submit(ctx, &o, dev, s);
}

static int h_widen(void *ctx, float *dst, const uint16_t *src, size_t n, int dtype, void *s) {
  fop o = {.type = OP_WIDEN, .nr = 2};
  o.u.widen.dst = dst;
  o.u.widen.src = src;
  o.u.widen.n = n;
  o.u.widen.dtype = dtype;
  o.r[0] = RANGE(dst, n * sizeof(float), 1, "dst");
  o.r[1] = RANGE(src, n * sizeof(uint16_t), 0, "src");
  int dev[2] = {1, 1};
  return submit(ctx, &o, dev, s);
}

static int h_axpy(void *ctx, float *dst, const float *src, size_t n, float a, void *s) {
  fop o = {.type = OP_AXPY, .nr = 2};
  o.u.axpy.dst = dst;
  o.u.axpy.src = src;
  o.u.axpy.n = n;
  o.u.axpy.a = a;
  o.r[0] = RANGE(dst, n * sizeof(float), 1, "dst");
  o.r[1] = RANGE(src, n * sizeof(float), 0, "src");
  int dev[2] = {1, 1};
  return submit(ctx, &o, dev, s);
}

size_t acc__fake_queued(void *ctx) {
  hostdev *h = ctx;
  size_t n = 0;
  pthread_mutex_lock(&h->f.mu);
  for (const fstream *s = &h->f.def; s; s = s->next_stream)
    for (const fop *q = s->head; q; q = q->next) n++;
  pthread_mutex_unlock(&h->f.mu);
  return n;
}

static int h_probe(acc__device_probe_info *info) { return ACC_OK; }

#define HOST_OPS(NAME, OPEN, NCCL5, CHECK, ABORT, AG, RS)                                     \
  {ACC__DEVICE_ABI_VERSION, sizeof(acc__device_ops), NAME, NULL, h_probe, OPEN, h_close,      \
   h_alloc, h_free, h_is_device_ptr, h_stream_create, h_stream_destroy, h_stream_sync,        \
   h_event_create, h_event_destroy, h_event_record, h_stream_wait, h_event_sync, h_event_query, \
   h_copy, h_memset, h_sgd, h_adamw, h_unscale, h_norm_partials, h_norm_finish, h_scale, h_cast, \
   NCCL5, h_clamp, h_round_f16, NULL, NULL, CHECK, ABORT, h_widen, h_host_kernel, h_axpy, AG, RS}

/* the cpu device has no NCCL; the fake one has fake_nccl.c's */
#define NO_NCCL5 NULL, NULL, NULL, NULL, NULL
#define FAKE_NCCL5 acc__fnccl_unique_id, acc__fnccl_init, acc__fnccl_all_reduce, acc__fnccl_wait, acc__fnccl_destroy
const acc__device_ops acc__device_cpu_ops = HOST_OPS("cpu", h_open_cpu, NO_NCCL5, NULL, NULL, NULL, NULL);
const acc__device_ops acc__device_fake_ops =
    HOST_OPS("fake", h_open_fake, FAKE_NCCL5, acc__fnccl_check, acc__fnccl_abort, acc__fnccl_all_gather,
             acc__fnccl_reduce_scatter);
