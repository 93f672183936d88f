/* Shared-memory backend, the collectives: barrier, broadcast, all_reduce / reduce (one step or
 * chunked by blocks, as shm_algo.c's table says), reduce_scatter, all_gather / gather / all_gather_v, each a
 * sequence of steps (shm_step.c) moving data through the slots and the result area of the
 * segment (shm.h).
 *
 * Which algorithm runs for a given collective, process count and size is in one table
 * (shm_algo.c): all_reduce/reduce in one step or by blocks, all_gather's copies out with ordinary
 * or non-temporal stores.
 *
 * Buffer rule (why double buffering is safe). A step numbered s uses buffers of parity s & 1:
 *   - slots of parity p are written only before publishing a step s with s & 1 == p, and read
 *     only after step s and before publishing s + 1;
 *   - the result area of parity p is written only after step s (s & 1 == p) and before s + 1,
 *     and read only after s + 1 and before publishing s + 2.
 * A rank writes the same buffer again for step s + 2 only after it has passed step s + 1 (slots)
 * or s + 2 (result), i.e. after every rank has published the step that follows its reads. So a
 * large all_reduce needs ONE step per chunk (plus one): write chunk c into my slot; step; copy
 * out the result of chunk c-1; reduce my 1/N share of chunk c into the result area; repeat.
 * One-sided steps (a broadcast of one slot: the root does not wait, the receivers wait for the
 * root only) do not prove that every rank has passed them, so every collective starts with
 * acc__shm_sync, which waits until every rank has published the current step before anything is
 * written: the rule above holds again. Large messages may move by single copy instead
 * (shm_cma.c, same steps around the reads).
 *
 * Determinism. Reductions add slots in rank order (rank 0 + rank 1 + ...) elementwise, whether
 * small or chunked, so every rank gets the same bits, independent of the chunk size.
 */
#include "backend/shm_impl.h"

#include <string.h>



/* ---- small helpers ------------------------------------------------------------------------ */

#define copy_bytes acc__shm_copy /* shm_cma.c */

static inline uint8_t *slot(shm_be *s, int r, int p) { return acc__shm_slot(s, r, p); }
static inline uint8_t *result_area(shm_be *s, int p) {
  return s->slots + ((size_t)s->n * 2 + (size_t)p) * s->chunk;
}
/* Parity of the next step. */
static inline int next_parity(shm_be *s) { return (int)((s->counter + 1) & 1); }

/* ---- reductions --------------------------------------------------------------------------- */

/* dst[0..n) = slot(0) op slot(1) op ... (rank order), elements starting at element `lo`. */
static void reduce_slots(shm_be *s, void *dst, int p, size_t lo, size_t n, acc_dtype dt, acc_op op) {
  size_t es = acc_dtype_size(dt);
  if (n == 0) return;
  if (dt == ACC_F32 && op == ACC_SUM) {
    float *restrict d = dst;
    const float *restrict a = (const float *)slot(s, 0, p) + lo;
    const float *restrict b = (const float *)slot(s, 1, p) + lo;
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    for (int r = 2; r < s->n; r++) {
      const float *restrict c = (const float *)slot(s, r, p) + lo;
      for (size_t i = 0; i < n; i++) d[i] += c[i];
    }
    return;
  }
  if (dt == ACC_F64 && op == ACC_SUM) {
    double *restrict d = dst;
    const double *restrict a = (const double *)slot(s, 0, p) + lo;
    const double *restrict b = (const double *)slot(s, 1, p) + lo;
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    for (int r = 2; r < s->n; r++) {
      const double *restrict c = (const double *)slot(s, r, p) + lo;
      for (size_t i = 0; i < n; i++) d[i] += c[i];
    }
    return;
  }
  copy_bytes(dst, slot(s, 0, p) + lo * es, n * es);
  for (int r = 1; r < s->n; r++) acc__reduce_inplace(dst, slot(s, r, p) + lo * es, n, dt, op);
}

/* Copy into the segment: non-temporal stores for messages of at least stream_min bytes. */
static void put(shm_be *s, void *dst, const void *src, size_t n, size_t msg_bytes) {
  if (msg_bytes >= s->stream_min)
    acc__shm_copy_nt(dst, src, n);
  else
    copy_bytes(dst, src, n);
}

/* All-reduce (root < 0) or reduce to root. recv is NULL on non-roots for reduce. scale (f32 SUM
 * all_reduce only, else NULL): every element of the sum multiplied by *scale by its reducer.
 *
 * Large messages, per chunk of ce elements, split into n blocks (block j: elements
 * [j * nc / n, (j + 1) * nc / n)): a rank writes into its slot only the blocks the others reduce
 * (not its own); after the step it reduces its own block from its send buffer and the peers'
 * slots, writing the result both into its recv and into the result area, and after the next
 * step copies the peers' blocks of the result out. Per rank that moves (n-1)/n of the message
 * in, reads it once to reduce and (n-1)/n out: no copy of the own block through the segment,
 * no copy of the own result out of it. */
/* Whether an all_reduce / reduce of that size takes one step (the table's onestep, when the
 * message fits a slot), else blocks. The same answer on every rank. */
static int one_step(shm_be *s, size_t bytes) {
  return bytes <= s->chunk &&
         acc__shm_algo_pick(s->algo_forced[ACC__SHM_OP_ALL_REDUCE], ACC__SHM_OP_ALL_REDUCE, s->n,
                            bytes) == ACC__SHM_ALGO_ONESTEP;
}

static acc_result reduce_common(shm_be *s, const void *send, void *recv, size_t count, acc_dtype dt,
                                acc_op op, int root, const float *scale) {
  size_t es = acc_dtype_size(dt);
  size_t bytes = count * es;
  int out = root < 0 || root == s->me;
  if (one_step(s, bytes)) {
    int p = next_parity(s);
    put(s, slot(s, s->me, p), send, bytes, bytes);
    ACC_CHECK(acc__shm_step(s));
    if (out) reduce_slots(s, recv, p, 0, count, dt, op);
    if (out && scale)
      for (size_t i = 0; i < count; i++) ((float *)recv)[i] *= *scale;
    return ACC_OK;
  }
  const void **src = s->rsrc;
  size_t ce = s->chunk / es;
  const uint8_t *in = send;
  uint8_t *o = recv;
  size_t prev_off = 0, prev_lo = 0, prev_hi = 0, prev_n = 0;
  int prev_p = 0, have_prev = 0;
  acc_result rc = ACC_OK;
  for (size_t off = 0; off < count; off += ce) {
    size_t nc = count - off < ce ? count - off : ce;
    size_t lo = (size_t)s->me * nc / (size_t)s->n, hi = ((size_t)s->me + 1) * nc / (size_t)s->n;
    int p = next_parity(s);
    uint8_t *mine = slot(s, s->me, p);
    put(s, mine, in + off * es, lo * es, bytes); /* the blocks before mine, then those after */
    put(s, mine + hi * es, in + (off + hi) * es, (nc - hi) * es, bytes);
    rc = acc__shm_step(s); /* everyone wrote chunk c and finished reducing chunk c-1 */
    if (rc != ACC_OK) break;
    if (have_prev && out) {
      copy_bytes(o + prev_off * es, result_area(s, prev_p), prev_lo * es);
      copy_bytes(o + (prev_off + prev_hi) * es, result_area(s, prev_p) + prev_hi * es,
                 (prev_n - prev_hi) * es);
    }
    for (int r = 0; r < s->n; r++)
      src[r] = r == s->me ? (const void *)(in + (off + lo) * es) : (const void *)(slot(s, r, p) + lo * es);
    uint8_t *res = result_area(s, p) + lo * es;
    acc__shm_reduce_block(s->tile, out ? o + (off + lo) * es : NULL, &res, 1, src, s->n, hi - lo,
                          dt, op, bytes >= s->stream_min, scale);
    prev_off = off, prev_lo = lo, prev_hi = hi, prev_n = nc, prev_p = p, have_prev = 1;
  }
  if (rc == ACC_OK) rc = acc__shm_step(s);
  if (rc == ACC_OK && out) {
    copy_bytes(o + prev_off * es, result_area(s, prev_p), prev_lo * es);
    copy_bytes(o + (prev_off + prev_hi) * es, result_area(s, prev_p) + prev_hi * es,
               (prev_n - prev_hi) * es);
  }
  return rc;
}

/* ---- ops ----------------------------------------------------------------------------------- */

acc_result acc__shm_barrier(acc__backend *be) { return acc__shm_step((shm_be *)be); }

acc_result acc__shm_broadcast(acc__backend *be, void *buf, size_t nbytes, int root) {
  shm_be *s = (shm_be *)be;
  if (acc__shm_ring_use(s, nbytes)) return acc__shm_ring_broadcast(s, buf, nbytes, root); /* one-sided */
  if (acc__shm_cma_use(s, ACC__SHM_CMA_BCAST, nbytes)) return acc__shm_cma_broadcast(s, buf, nbytes, root);
  uint8_t *b = buf;
  for (size_t off = 0; off < nbytes; off += s->chunk) {
    size_t len = nbytes - off < s->chunk ? nbytes - off : s->chunk;
    int p = next_parity(s);
    if (s->me == root) put(s, slot(s, root, p), b + off, len, nbytes);
    ACC_CHECK(acc__shm_step(s));
    if (s->me != root) copy_bytes(b + off, slot(s, root, p), len);
  }
  return ACC_OK;
}

/* all_reduce and its scaled form (scale NULL: none). Once this machine's ranks made a shared
 * allocation (the same on every rank), every all_reduce that does not take one step first tries the
 * in-place path of registered buffers (shm_reg.c); then single copy where it is on (which
 * multiplies after its call), else the copy path. */
static acc_result all_reduce(shm_be *s, const void *send, void *recv, size_t count, acc_dtype dt,
                             acc_op op, const float *scale) {
  int done = 0;
  size_t bytes = count * acc_dtype_size(dt);
  if (s->reg_made > 0 && !one_step(s, bytes)) {
    ACC_CHECK(acc__shm_reg_all_reduce(s, send, recv, count, dt, op, scale, &done));
    if (done) return ACC_OK;
  }
  if (!acc__shm_cma_use(s, ACC__SHM_CMA_REDUCE, bytes)) return reduce_common(s, send, recv, count, dt, op, -1, scale);
  ACC_CHECK(acc__shm_cma_all_reduce(s, send, recv, count, dt, op));
  if (scale)
    for (size_t i = 0; i < count; i++) ((float *)recv)[i] *= *scale;
  return ACC_OK;
}

acc_result acc__shm_all_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                               acc_dtype dtype, acc_op op) {
  return all_reduce((shm_be *)be, send, recv, count, dtype, op, NULL);
}

acc_result acc__shm_all_reduce_scaled_f32(acc__backend *be, const float *send, float *recv,
                                          size_t count, float scale) {
  return all_reduce((shm_be *)be, send, recv, count, ACC_F32, ACC_SUM, &scale);
}

acc_result acc__shm_reduce(acc__backend *be, const void *send, void *recv, size_t count,
                           acc_dtype dtype, acc_op op, int root) {
  return reduce_common((shm_be *)be, send, recv, count, dtype, op, root, NULL);
}

/* Reduce-scatter: step k carries piece k of every block. Each rank writes, into its slot, piece k
 * of block r at element r * pe (pe = chunk / es / n, the piece length), and after the step
 * reduces piece k of its own block from every slot straight into recv: every rank reduces at
 * once, one step per piece, no result area (the reads happen after step s and before s + 1,
 * as for any slot). In place (recv = send + me * count) is safe: piece k of the own block has
 * been copied to the slot before recv's piece k is written, and later steps read later pieces. */
acc_result acc__shm_reduce_scatter(acc__backend *be, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op) {
  shm_be *s = (shm_be *)be;
  size_t es = acc_dtype_size(dt), n = (size_t)s->n;
  size_t pe = s->chunk / es / n;
  if (pe >= 16) pe &= ~(size_t)15; /* pieces start on 64-byte boundaries for f32 */
  if (pe == 0) { /* more ranks than elements in a slot: all-reduce the lot, keep the block */
    uint8_t *tmp = acc__malloc(count * es * n);
    if (!tmp) return acc__error(ACC_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes",
                                count * es * n);
    acc_result rc = reduce_common(s, send, tmp, count * n, dt, op, -1, NULL);
    if (rc == ACC_OK) memmove(recv, tmp + (size_t)s->me * count * es, count * es);
    acc__free(tmp);
    return rc;
  }
  const uint8_t *in = send;
  uint8_t *o = recv;
  for (size_t off = 0; off < count; off += pe) {
    size_t len = count - off < pe ? count - off : pe;
    int p = next_parity(s);
    uint8_t *mine = slot(s, s->me, p);
    for (size_t r = 0; r < n; r++)
      put(s, mine + r * pe * es, in + (r * count + off) * es, len * es, count * es * n);
    ACC_CHECK(acc__shm_step(s));
    reduce_slots(s, o + off * es, p, (size_t)s->me * pe, len, dt, op);
  }
  return ACC_OK;
}

/* Gathers sizes[r] bytes from every rank into recv at displacement disp[r]; only when `out`. */
static acc_result gather_common(shm_be *s, const void *send, uint8_t *recv, const size_t *sizes,
                                const size_t *disp, int out) {
  size_t maxlen = 0;
  for (int r = 0; r < s->n; r++)
    if (sizes[r] > maxlen) maxlen = sizes[r];
  if (acc__shm_cma_use(s, ACC__SHM_CMA_GATHER, maxlen)) return acc__shm_cma_gather(s, send, recv, sizes, disp, out);
  int stream = acc__shm_algo_pick(s->algo_forced[ACC__SHM_OP_ALL_GATHER], ACC__SHM_OP_ALL_GATHER,
                                  s->n, maxlen) == ACC__SHM_ALGO_STREAM;
  const uint8_t *in = send;
  for (size_t off = 0; off < maxlen; off += s->chunk) {
    int p = next_parity(s);
    size_t mine = sizes[s->me] > off ? sizes[s->me] - off : 0;
    if (mine > s->chunk) mine = s->chunk;
    if (mine) put(s, slot(s, s->me, p), in + off, mine, maxlen * (size_t)s->n);
    ACC_CHECK(acc__shm_step(s));
    if (!out) continue;
    for (int r = 0; r < s->n; r++) {
      size_t len = sizes[r] > off ? sizes[r] - off : 0;
      if (len > s->chunk) len = s->chunk;
      if (!len) continue;
      uint8_t *dst = recv + disp[r] + off;
      if (r == s->me) {
        if (dst != in + off) memmove(dst, in + off, len);
      } else if (stream) {
        acc__shm_copy_nt(dst, slot(s, r, p), len);
      } else {
        copy_bytes(dst, slot(s, r, p), len);
      }
    }
  }
  return ACC_OK;
}

static acc_result uniform_gather(shm_be *s, const void *send, void *recv, size_t nbytes, int out) {
  size_t *sizes = acc__malloc(2 * (size_t)s->n * sizeof *sizes);
  if (!sizes) return ACC_ERR_NOMEM;
  size_t *disp = sizes + s->n;
  for (int r = 0; r < s->n; r++) sizes[r] = nbytes, disp[r] = (size_t)r * nbytes;
  acc_result rc = gather_common(s, send, recv, sizes, disp, out);
  acc__free(sizes);
  return rc;
}

acc_result acc__shm_all_gather(acc__backend *be, const void *send, void *recv, size_t nbytes) {
  return uniform_gather((shm_be *)be, send, recv, nbytes, 1);
}

acc_result acc__shm_gather(acc__backend *be, const void *send, void *recv, size_t nbytes, int root) {
  return uniform_gather((shm_be *)be, send, recv, nbytes, be->rank == root);
}

acc_result acc__shm_all_gather_v(acc__backend *be, const void *send, void *recv, const size_t *sizes) {
  shm_be *s = (shm_be *)be;
  size_t *disp = acc__malloc((size_t)s->n * sizeof *disp);
  if (!disp) return ACC_ERR_NOMEM;
  size_t at = 0;
  for (int r = 0; r < s->n; r++) disp[r] = at, at += sizes[r];
  acc_result rc = gather_common(s, send, recv, sizes, disp, 1);
  acc__free(disp);
  return rc;
}
