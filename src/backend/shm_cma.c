/* Shared-memory backend, single-copy collectives: large broadcast, all_gather / gather /
 * all_gather_v and all_reduce move the bytes once, straight from one rank's buffer into
 * another's, with process_vm_readv(2) ("cross-memory attach"), instead of twice through the
 * segment's slots.
 *
 * Used only when asked for. Default (ACCELERATE_SHM_SINGLE_COPY unset or auto, and
 * ACCELERATE_SHM_SINGLE_COPY_MIN_BYTES unset): the copies, and no probe at set-up. Since the
 * copies write into the segment with non-temporal stores (shm_coll.c, session 7) they beat
 * single copy at every size measured on the 2-vCPU KVM guest but one, a tie (16 KiB-4 MiB,
 * bound ranks, interleaved; docs/PERFORMANCE.md); before that single copy was the default for broadcast and
 * the gathers from 64 KiB (session 6). auto with the threshold set: single copy from there on
 * where every rank can read its peers; on: required, from the threshold or else from the
 * defaults below (all_reduce only with the threshold set).
 *
 * Set-up (acc__shm_cma_publish, then acc__shm_cma_agree after the rendezvous step). Rank 0
 * chooses the mode (ACCELERATE_SHM_SINGLE_COPY: off, auto, on) and the threshold
 * (ACCELERATE_SHM_SINGLE_COPY_MIN_BYTES, else the default below) and writes them into
 * the header, so every rank takes the same path for the same call. Each rank publishes the
 * address of a word of its own memory holding a random nonce, and its PID namespace; under
 * Yama's ptrace_scope 1 it lets its parent's descendants (the launcher's other ranks) read it
 * (PR_SET_PTRACER). After the rendezvous step every rank reads every peer's word through the
 * peer's pid: the read must succeed and return the nonce (a pid of another namespace or a
 * reused pid fails this), and the namespaces must agree. One more step, and single copy is on
 * only if every rank could read every peer (a kernel or container that forbids it, EPERM or
 * ENOSYS, gives the copy path). Nothing is probed again.
 *
 * Buffer rule. A collective publishes the addresses of its buffers (xsend, xrecv in the
 * control block, on the seq line) before its first step, and every read of a peer's buffer
 * happens between two steps that the peer also takes: the peer cannot return (and reuse or
 * free its buffer) before everybody has published the step that follows the reads.
 *
 * Determinism. all_reduce reduces its elements in rank order (rank 0 op rank 1 op ...) like the
 * copy path, so both paths give the same bits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "backend/shm_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "backend/rdzv.h"
#include "core/env.h"

/* Smallest message in bytes that moves by single copy, per collective kind, with
 * ACCELERATE_SHM_SINGLE_COPY=on and no threshold set: below, one syscall per peer cost more than
 * the (then plain) copies it saved (session 6). */
#define CMA_MIN_BCAST (64u * 1024u)
#define CMA_MIN_GATHER (64u * 1024u)
#define CMA_MIN_REDUCE UINT64_MAX /* all_reduce: only with the threshold set */
#define CMA_PIECE (256u * 1024u) /* all_reduce: bytes per peer read into the scratch at once */

/* ---- copies ---------------------------------------------------------------------------------- */

/* memcpy for the data copies. glibc's memcpy uses `rep movsb` below ~L2 size, which on the AMD
 * EPYC of the build machine runs at ~2 GB/s instead of ~40 GB/s when the destination is 16 bytes
 * off the source's alignment, as with malloc'ed user buffers against page-aligned slots
 * (measured, docs/PERFORMANCE.md). A plain SSE2 loop has no such cliff. */
void acc__shm_copy(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= 512) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
      __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
      _mm_storeu_si128((__m128i *)(d + i), a);
      _mm_storeu_si128((__m128i *)(d + i + 16), b);
      _mm_storeu_si128((__m128i *)(d + i + 32), c);
      _mm_storeu_si128((__m128i *)(d + i + 48), e);
    }
    if (i < n) memcpy(d + i, s + i, n - i);
    return;
  }
#endif
  memcpy(dst, src, n);
}
/* The copy into the segment: non-temporal stores, which write whole lines to memory without
 * first fetching them. Without them, on the 2-vCPU AMD EPYC guest of the build machine, writing
 * into lines that the peer read at its last step ran at 5-6 GB/s (acc__shm_copy, from 64 KiB;
 * glibc's memcpy from 1 MiB) while both ranks copied at once (ownership of every line taken back
 * from the peer's cache), 38-40 GB/s with them (bench/comm/store_probe, docs/PERFORMANCE.md,
 * session 7). Copies under NT_MIN_COPY bytes use ordinary stores: there the reader's miss to
 * memory cost more than the stores saved (256 B-1 KiB collectives 10-50 % slower with
 * streaming, 4 KiB and up faster). The stores are weakly ordered: the sfence at the end makes
 * them visible before the step that publishes them. */
#define NT_MIN_COPY 2048u
void acc__shm_copy_nt(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  uint8_t *d = dst;
  const uint8_t *s = src;
  size_t head = (size_t)(-(uintptr_t)d & 15);
  if (n < NT_MIN_COPY + head) {
    acc__shm_copy(dst, src, n);
    return;
  }
  if (head) memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_stream_si128((__m128i *)(d + i), a);
    _mm_stream_si128((__m128i *)(d + i + 16), b);
    _mm_stream_si128((__m128i *)(d + i + 32), c);
    _mm_stream_si128((__m128i *)(d + i + 48), e);
  }
  _mm_sfence();
  if (i < n) memcpy(d + i, s + i, n - i);
#else
  memcpy(dst, src, n);
#endif
}

/* ---- set-up --------------------------------------------------------------------------------- */

acc_result acc__shm_cma_choose(shm_be *s) {
  int mode = 0, set = 0;
  ACC_CHECK(acc__env_enum("ACCELERATE_SHM_SINGLE_COPY", &mode, &set));
  long min = 0;
  int mset = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_SHM_SINGLE_COPY_MIN_BYTES", &min, &mset));
  /* unset: auto; auto without a threshold: the copies, and no probe (see the top) */
  s->hdr->cma_mode = (uint32_t)(set ? mode : 1);
  if (s->hdr->cma_mode == 1 && !mset) s->hdr->cma_mode = 0;
  uint64_t def[3] = {CMA_MIN_BCAST, CMA_MIN_GATHER, CMA_MIN_REDUCE};
  for (int k = 0; k < 3; k++) s->hdr->cma_min[k] = mset ? (uint64_t)min : def[k];
  return ACC_OK;
}

/* Yama's ptrace_scope (0 when Yama is absent). */
static int yama_scope(void) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  int v = 0;
  if (!f) return 0;
  if (fscanf(f, "%d", &v) != 1) v = 0;
  fclose(f);
  return v;
}

void acc__shm_cma_publish(shm_be *s) {
  acc__shm_ctrl *c = &s->ctrl[s->me];
  s->cma_word = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)s ^ (uint64_t)(acc__now() * 1e9);
  s->cma_word |= 1; /* never 0: an unset word of a peer cannot match */
  c->cma_nonce = s->cma_word;
  c->cma_addr = (uint64_t)(uintptr_t)&s->cma_word;
  c->pidns = acc__pid_namespace();
  atomic_store(&c->cma_ok, 0);
  /* Yama 1: only descendants of a declared tracer may read us; the ranks of one launcher are
   * its children. (2 and 3 forbid it: the probe fails and the copy path is used.) */
  if (s->hdr->cma_mode != 0 && s->n > 1 && yama_scope() == 1)
    prctl(PR_SET_PTRACER, (unsigned long)getppid(), 0, 0, 0);
}

/* Reads len bytes at remote address `from` of rank r into dst; loops over partial reads. */
static int cma_read(shm_be *s, int r, void *dst, uint64_t from, size_t len) {
  pid_t pid = atomic_load(&s->ctrl[r].pid);
  uint8_t *d = dst;
  while (len > 0) {
    struct iovec l = {d, len}, rm = {(void *)(uintptr_t)from, len};
    ssize_t got = process_vm_readv(pid, &l, 1, &rm, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) errno = EFAULT;
      return -1;
    }
    d += got, from += (uint64_t)got, len -= (size_t)got;
  }
  return 0;
}

acc_result acc__shm_cma_agree(shm_be *s) {
  s->cma = 0;
  if (s->n < 2) return ACC_OK;
  uint32_t mode = s->hdr->cma_mode;
  for (int k = 0; k < 3; k++) s->cma_min[k] = (size_t)s->hdr->cma_min[k];
  if (mode == 0) return ACC_OK; /* off (every rank reads the same header): no probe, no step */
  int ok = 1;
  char why[200] = "";
  uint64_t ns = s->ctrl[s->me].pidns;
  for (int r = 0; r < s->n && ok; r++) {
    if (r == s->me) continue;
    acc__shm_ctrl *c = &s->ctrl[r];
    if (c->pidns != ns || ns == 0) {
      ok = 0;
      snprintf(why, sizeof why, "rank %d runs in another PID namespace than rank %d", r, s->me);
      break;
    }
    uint64_t v = 0;
    if (cma_read(s, r, &v, c->cma_addr, sizeof v) != 0) {
      int e = errno;
      ok = 0;
      snprintf(why, sizeof why,
               "rank %d cannot read the memory of rank %d (pid %d) with process_vm_readv: %s%s",
               s->me, r, (int)atomic_load(&c->pid), strerror(e),
               e == EPERM ? " (ptrace policy: /proc/sys/kernel/yama/ptrace_scope, or a "
                            "container's seccomp profile)"
                          : "");
    } else if (v != c->cma_nonce) {
      ok = 0;
      snprintf(why, sizeof why, "rank %d read another process than rank %d at pid %d", s->me, r,
               (int)atomic_load(&c->pid));
    }
  }
  atomic_store(&s->ctrl[s->me].cma_ok, ok);
  ACC_CHECK(acc__shm_step(s)); /* every rank has probed */
  int all = 1, bad = -1;
  for (int r = 0; r < s->n; r++)
    if (!atomic_load(&s->ctrl[r].cma_ok)) all = 0, bad = bad < 0 ? r : bad;
  if (all) {
    s->scratch = acc__malloc((size_t)s->n * CMA_PIECE);
    s->cma_src = acc__calloc((size_t)s->n, sizeof *s->cma_src);
    if (!s->scratch || !s->cma_src) return acc__error(ACC_ERR_NOMEM, "rank %d: cannot allocate %zu bytes", s->me,
                                       (size_t)s->n * CMA_PIECE);
    s->cma = 1;
    return ACC_OK;
  }
  if (mode == 2) { /* on: required */
    if (ok)
      snprintf(why, sizeof why, "rank %d could not read the memory of its peers", bad);
    return acc__error(ACC_ERR_SYSTEM,
                      "rank %d: ACCELERATE_SHM_SINGLE_COPY=on, but single-copy transfers are not "
                      "available: %s; set it to auto to fall back to copies through shared "
                      "memory",
                      s->me, why);
  }
  return ACC_OK;
}

int acc__shm_cma_use(const shm_be *s, int kind, size_t bytes) {
  return s->cma && bytes >= s->cma_min[kind];
}

/* ---- the collectives ------------------------------------------------------------------------ */

static acc_result read_error(shm_be *s, int r, size_t len) {
  int e = errno;
  return acc__error(ACC_ERR_SYSTEM,
                    "%s on rank %d: cannot read %zu bytes from rank %d (pid %d) by single copy "
                    "(process_vm_readv: %s): is its buffer as large as the call says? "
                    "(ACCELERATE_SHM_SINGLE_COPY=off avoids single copies)",
                    s->base.op_name ? s->base.op_name : "collective", s->me, len, r,
                    (int)atomic_load(&s->ctrl[r].pid), strerror(e));
}

/* A failed read is marked before this rank's next step; after its last step every rank checks the
 * peers' marks for the collective that began at step op0 (so no rank returns OK with a share of
 * the result missing). */
static acc_result fail_mark(shm_be *s, uint64_t op0, acc_result rc) {
  if (rc != ACC_OK) atomic_store(&s->ctrl[s->me].cma_fail, op0 + 1);
  return rc;
}
static acc_result peers_failed(shm_be *s, uint64_t op0) {
  for (int r = 0; r < s->n; r++)
    if (r != s->me && atomic_load(&s->ctrl[r].cma_fail) > op0)
      return acc__error(ACC_ERR_REMOTE,
                        "%s on rank %d: rank %d (pid %d) could not read its peers' memory by single "
                        "copy (its own error says why), so the result is incomplete "
                        "(ACCELERATE_SHM_SINGLE_COPY=off avoids single copies)",
                        s->base.op_name ? s->base.op_name : "collective", s->me, r,
                        (int)atomic_load(&s->ctrl[r].pid));
  return ACC_OK;
}

static void publish_addrs(shm_be *s, const void *send, const void *recv) {
  s->ctrl[s->me].xsend = (uint64_t)(uintptr_t)send;
  s->ctrl[s->me].xrecv = (uint64_t)(uintptr_t)recv;
}

acc_result acc__shm_cma_broadcast(shm_be *s, void *buf, size_t nbytes, int root) {
  uint64_t op0 = s->counter;
  publish_addrs(s, buf, buf);
  ACC_CHECK(acc__shm_step(s)); /* the root's address is known */
  acc_result rc = ACC_OK;
  if (s->me != root && cma_read(s, root, buf, s->ctrl[root].xsend, nbytes) != 0)
    rc = fail_mark(s, op0, read_error(s, root, nbytes));
  acc_result rc2 = acc__shm_step(s); /* everyone has read: the root may return */
  if (rc == ACC_OK && rc2 == ACC_OK && s->me == root) rc2 = peers_failed(s, op0);
  return rc != ACC_OK ? rc : rc2;
}

acc_result acc__shm_cma_gather(shm_be *s, const void *send, uint8_t *recv, const size_t *sizes,
                               const size_t *disp, int out) {
  publish_addrs(s, send, recv);
  ACC_CHECK(acc__shm_step(s));
  acc_result rc = ACC_OK;
  if (out) {
    /* start with the next rank, so that the ranks do not all read rank 0 at once */
    for (int k = 1; k < s->n && rc == ACC_OK; k++) {
      int r = (s->me + k) % s->n;
      if (sizes[r] && cma_read(s, r, recv + disp[r], s->ctrl[r].xsend, sizes[r]) != 0)
        rc = read_error(s, r, sizes[r]);
    }
    uint8_t *dst = recv + disp[s->me];
    if (rc == ACC_OK && sizes[s->me] && dst != (const uint8_t *)send)
      memmove(dst, send, sizes[s->me]);
  }
  acc_result rc2 = acc__shm_step(s);
  return rc != ACC_OK ? rc : rc2;
}

/* Boundary of rank r's share of count elements: a multiple of 64 bytes (but the ends). */
static size_t share(size_t count, size_t es, int n, int r) {
  if (r >= n) return count;
  size_t b = (size_t)r * count / (size_t)n;
  size_t q = es < 64 ? 64 / es : 1;
  return b / q * q;
}

/* tmp[0..m) = src[0] op src[1] op ... in rank order. */
static void reduce_sources(void *tmp, const uint8_t *const *src, int n, size_t m, acc_dtype dt,
                           acc_op op) {
  if (dt == ACC_F32 && op == ACC_SUM) {
    float *restrict d = tmp;
    const float *restrict a = (const float *)src[0], *restrict b = (const float *)src[1];
    for (size_t i = 0; i < m; i++) d[i] = a[i] + b[i];
    for (int r = 2; r < n; r++) {
      const float *restrict c = (const float *)src[r];
      for (size_t i = 0; i < m; i++) d[i] += c[i];
    }
    return;
  }
  if (dt == ACC_F64 && op == ACC_SUM) {
    double *restrict d = tmp;
    const double *restrict a = (const double *)src[0], *restrict b = (const double *)src[1];
    for (size_t i = 0; i < m; i++) d[i] = a[i] + b[i];
    for (int r = 2; r < n; r++) {
      const double *restrict c = (const double *)src[r];
      for (size_t i = 0; i < m; i++) d[i] += c[i];
    }
    return;
  }
  memcpy(tmp, src[0], m * acc_dtype_size(dt));
  for (int r = 1; r < n; r++) acc__reduce_inplace(tmp, src[r], m, dt, op);
}

/* All-reduce: each rank reduces its share of the elements, reading the peers' send buffers
 * piece by piece into its scratch, and writes it into its own recv (in place is safe: a rank
 * writes only its share, the peers read only theirs); step; each reads the other shares from
 * their owners' recv; step. */
acc_result acc__shm_cma_all_reduce(shm_be *s, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op) {
  size_t es = acc_dtype_size(dt);
  int n = s->n;
  uint64_t op0 = s->counter;
  publish_addrs(s, send, recv);
  ACC_CHECK(acc__shm_step(s));
  acc_result rc = ACC_OK;
  size_t lo = share(count, es, n, s->me), hi = share(count, es, n, s->me + 1);
  size_t pe = CMA_PIECE / es;
  const uint8_t **src = s->cma_src;
  uint8_t *tmp = s->scratch + (size_t)(n - 1) * CMA_PIECE;
  for (size_t off = lo; off < hi && rc == ACC_OK; off += pe) {
    size_t m = hi - off < pe ? hi - off : pe;
    int slot_i = 0;
    for (int r = 0; r < n && rc == ACC_OK; r++) {
      if (r == s->me) {
        src[r] = (const uint8_t *)send + off * es;
        continue;
      }
      uint8_t *dst = s->scratch + (size_t)slot_i++ * CMA_PIECE;
      if (cma_read(s, r, dst, s->ctrl[r].xsend + off * es, m * es) != 0)
        rc = read_error(s, r, m * es);
      src[r] = dst;
    }
    if (rc != ACC_OK) {
      fail_mark(s, op0, rc); /* this rank's share stays unreduced: the peers must not use it */
      break;
    }
    reduce_sources(tmp, src, n, m, dt, op);
    acc__shm_copy((uint8_t *)recv + off * es, tmp, m * es);
  }
  acc_result rc2 = acc__shm_step(s); /* every share is reduced (or its owner marked a failure) */
  if (rc == ACC_OK) rc = rc2;
  if (rc == ACC_OK) rc = peers_failed(s, op0);
  if (rc == ACC_OK) {
    for (int k = 1; k < n && rc == ACC_OK; k++) {
      int r = (s->me + k) % n;
      size_t a = share(count, es, n, r), b = share(count, es, n, r + 1);
      if (b > a && cma_read(s, r, (uint8_t *)recv + a * es, s->ctrl[r].xrecv + a * es, (b - a) * es) != 0)
        rc = read_error(s, r, (b - a) * es);
    }
  }
  rc2 = acc__shm_step(s); /* everyone has read: the owners may return */
  return rc != ACC_OK ? rc : rc2;
}

/* ---- the block reduction of all_reduce (shm_coll.c, shm_reg.c) --------------------------- */

/* The reduction of a block, from n sources in rank order, a tile at a time into `tile`
 * (ACC__SHM_REDUCE_TILE bytes, malloc'ed: any element type may live there): then the tile goes
 * into each of res[0..nres) (with non-temporal stores when nt) and, when out is not NULL, into
 * out with ordinary stores. The copy path: src[me] is this rank's send buffer, the others peers'
 * slots, res the result area (read by the peers), out the caller's recv. Registered buffers
 * (shm_reg.c): src every rank's buffer, out this rank's, res the peers'. out may be src[me] (in
 * place): a tile is written only after it was read. */
void acc__shm_reduce_block(uint8_t *tile, void *out, uint8_t *const *res, int nres,
                           const void *const *src, int n, size_t len, acc_dtype dt, acc_op op,
                           int nt, const float *scale) {
  size_t es = acc_dtype_size(dt), te = ACC__SHM_REDUCE_TILE / es;
  for (size_t t = 0; t < len; t += te) {
    size_t m = len - t < te ? len - t : te, at = t * es;
    if (dt == ACC_F32 && op == ACC_SUM && n >= 2) {
      float *x = (float *)tile;
      const float *a = (const float *)src[0] + t, *b = (const float *)src[1] + t;
      for (size_t i = 0; i < m; i++) x[i] = a[i] + b[i];
      for (int r = 2; r < n; r++) {
        const float *c = (const float *)src[r] + t;
        for (size_t i = 0; i < m; i++) x[i] += c[i];
      }
      if (scale)
        for (size_t i = 0; i < m; i++) x[i] *= *scale;
    } else {
      memcpy(tile, (const uint8_t *)src[0] + at, m * es);
      for (int r = 1; r < n; r++) acc__reduce_inplace(tile, (const uint8_t *)src[r] + at, m, dt, op);
      if (scale) /* f32 SUM of one rank */
        for (size_t i = 0; i < m; i++) ((float *)tile)[i] *= *scale;
    }
    if (out) memcpy((uint8_t *)out + at, tile, m * es);
    for (int k = 0; k < nres; k++) {
      if (nt)
        acc__shm_copy_nt(res[k] + at, tile, m * es);
      else
        memcpy(res[k] + at, tile, m * es);
    }
  }
}
