/* Shared-memory backend, registered buffers: memory that every rank of the machine maps, so that
 * an all_reduce of a buffer inside it reads the peers' data where it lies and writes the result
 * straight into every rank's buffer, without the copies into and out of the segment.
 *
 * Allocation (acc__shm_alloc_shared, a collective: every rank, same order, same size; comm.c
 * checks the call tags). Allocation number k (counted the same on every rank) is a file
 * "<segment name>-a<k>-r<rank>" in /dev/shm that its rank creates (O_EXCL, mode 0600) and maps.
 * Step 1: every rank has created its file, or published in its slot the errno of why not.
 * Every rank then maps every peer's file. Step 2: every rank has mapped every peer's, or
 * published why not. Each rank unlinks its own file after step 2, success or not: from then on no
 * /dev/shm entry exists (a rank killed between the create and step 2 leaves one behind; the
 * name carries the job's unpredictable token; its first page names its creator, so the next job's
 * reclaim removes it once that process is dead, as for the segment: rdzv.c). The outcome is the same on every rank: all
 * succeeded, or every rank unmaps and fails with a message naming the rank that could not.
 *
 * The all_reduce (acc__shm_reg_all_reduce, shm_coll.c calls it for every all_reduce above the
 * one-step size once this machine made an allocation: the same on every rank). Before its first
 * step a rank stores in its slot the number of the allocation its buffer lies in and the offset
 * (number 0: not in place, or not in such memory). A slot of the step's parity, not the control
 * block: a rank rewrites it only after every rank has read it (shm_coll.c's buffer rule). After
 * the step, when every rank named the same allocation, each rank reduces its block of the
 * message (elements [me * count / n, (me + 1) * count / n)) from every rank's buffer, in rank
 * order (the same bits as the copy path), and writes it into its own buffer and, with
 * non-temporal stores, into every peer's; a second step and every buffer holds the whole result.
 * Per rank: the message read once, written once. Otherwise the copy path runs as before (one
 * step later).
 *
 * Free (acc__shm_free_shared) is local: the rank unmaps its allocation and its mappings of the
 * peers' allocations with the same number (the memory lives until the last rank unmaps it).
 */
#include "backend/shm_impl.h"
#include "backend/rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct acc__shm_reg {
  uint64_t id;     /* allocation number, from 1 */
  size_t bytes;    /* as asked (the same on every rank) */
  size_t map_len;  /* bytes rounded up to pages */
  uint8_t **peer;  /* n mappings; peer[me] is this rank's memory */
};

static int reg_name(const shm_be *s, uint64_t id, int rank, char *out, size_t cap) {
  int len = snprintf(out, cap, "%s-a%llu-r%d", s->name, (unsigned long long)id, rank);
  return len > 0 && (size_t)len < cap && len <= NAME_MAX ? 0 : -1;
}

static void reg_unmap(shm_be *s, struct acc__shm_reg *g) {
  for (int r = 0; r < s->n; r++)
    if (g->peer[r]) munmap(g->peer[r], g->map_len);
  acc__free(g->peer);
}

static size_t page_size(void) {
  long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? (size_t)page : 4096;
}

/* Creates and maps this rank's file; 0 or an errno. The file is one page naming its creator
 * (acc__shm_reg_owner, written first: a kill from then on leaves a file the next job's reclaim
 * recognizes), then the data. */
static int create_mine(shm_be *s, struct acc__shm_reg *g, char *name, size_t cap) {
  if (reg_name(s, g->id, s->me, name, cap) != 0) return ENAMETOOLONG;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  acc__shm_reg_owner o = {ACC_SHM_REG_MAGIC, (int32_t)getpid(), 0, acc__proc_start_time(getpid()),
                          acc__pid_namespace()};
  size_t pg = page_size();
  int e = pwrite(fd, &o, sizeof o, 0) == (ssize_t)sizeof o ? 0 : errno ? errno : EIO;
  /* the pages are reserved now (ENOSPC when /dev/shm is too small), not at the first store into
   * them, which would end the process with SIGBUS */
  if (!e) e = posix_fallocate(fd, 0, (off_t)(pg + g->map_len));
  void *p = e ? MAP_FAILED
              : mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pg);
  if (!e && p == MAP_FAILED) e = errno;
  close(fd);
  if (e) {
    shm_unlink(name);
    return e;
  }
  g->peer[s->me] = p;
  return 0;
}

/* Maps rank r's file; 0 or an errno (EINVAL: it is not the size every rank asked for). */
static int map_peer(shm_be *s, struct acc__shm_reg *g, int r, char *name, size_t cap) {
  if (reg_name(s, g->id, r, name, cap) != 0) return ENAMETOOLONG;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct stat st;
  size_t pg = page_size();
  int e = fstat(fd, &st) != 0 ? errno : (size_t)st.st_size != pg + g->map_len ? EINVAL : 0;
  void *p = e ? MAP_FAILED
              : mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)pg);
  if (!e && p == MAP_FAILED) e = errno;
  close(fd);
  if (!e) g->peer[r] = p;
  return e;
}

/* Two words published with the next step, in this rank's slot of its parity (read by the others
 * after the step and before the one after it; not rewritten before they have: shm_coll.c). */
static uint64_t *words(shm_be *s, int r, int p) { return (uint64_t *)acc__shm_slot(s, r, p); }
static int parity_next(const shm_be *s) { return (int)((s->counter + 1) & 1); }

/* Publishes this rank's errno (0: fine) with the next step, steps, and returns the first rank
 * that published one (-1: none) in *bad and its errno in *bad_errno. */
static acc_result agree(shm_be *s, int e, int *bad, int *bad_errno) {
  int p = parity_next(s);
  words(s, s->me, p)[0] = (uint64_t)e + 1;
  ACC_CHECK(acc__shm_step(s));
  *bad = -1;
  for (int r = 0; r < s->n && *bad < 0; r++)
    if (words(s, r, p)[0] != 1) *bad = r, *bad_errno = (int)(words(s, r, p)[0] - 1);
  return ACC_OK;
}

acc_result acc__shm_alloc_shared(acc__backend *be, size_t bytes, void **out) {
  shm_be *s = (shm_be *)be;
  *out = NULL;
  long page = sysconf(_SC_PAGESIZE);
  size_t pg = page > 0 ? (size_t)page : 4096;
  struct acc__shm_reg g = {.id = ++s->reg_made, .bytes = bytes};
  g.map_len = bytes <= (size_t)INT64_MAX - pg ? (bytes + pg - 1) / pg * pg : 0;
  g.peer = acc__calloc((size_t)s->n, sizeof *g.peer);
  struct acc__shm_reg *grown = acc__realloc(s->regs, (s->nregs + 1) * sizeof *s->regs);
  if (grown) s->regs = grown;
  char name[NAME_MAX + 64] = "";
  int e = !g.map_len ? EFBIG : !g.peer || !grown ? ENOMEM : create_mine(s, &g, name, sizeof name);
  int bad = -1, bad_peer = -1, be_errno = 0;
  acc_result rc = agree(s, e, &bad, &be_errno);
  if (rc == ACC_OK && bad < 0) {
    for (int r = 0; r < s->n && e == 0; r++)
      if (r != s->me && (e = map_peer(s, &g, r, name, sizeof name)) != 0) bad_peer = r;
    rc = agree(s, e, &bad, &be_errno);
  }
  char mine[NAME_MAX + 64];
  if (g.peer && g.peer[s->me] && reg_name(s, g.id, s->me, mine, sizeof mine) == 0) shm_unlink(mine);
  if (rc == ACC_OK && bad < 0) {
    s->regs[s->nregs++] = g;
    *out = g.peer[s->me];
    return ACC_OK;
  }
  if (g.peer) reg_unmap(s, &g);
  if (rc != ACC_OK) return rc;
  /* the same result on every rank (not REMOTE: the group is intact): NOMEM when the first rank
   * that failed ran out of room, else SYSTEM; each rank names its own failure, or that rank's */
  acc_result code = be_errno == ENOSPC || be_errno == ENOMEM || be_errno == EFBIG ? ACC_ERR_NOMEM : ACC_ERR_SYSTEM;
  const char *hint = code == ACC_ERR_NOMEM ? " (is /dev/shm full or too small? `df -h /dev/shm`)" : "";
  if (e != 0 && bad_peer >= 0)
    return acc__error(code, "alloc_shared: rank %d could not map rank %d's %zu bytes of shared memory (%s%s): %s",
                      s->rank_base + s->me, s->rank_base + bad_peer, bytes, name, s->where, strerror(e));
  if (e != 0)
    return acc__error(code, "alloc_shared: rank %d could not create %zu bytes of shared memory in /dev/shm%s (%s): %s%s",
                      s->rank_base + s->me, bytes, s->where, name, strerror(e), hint);
  return acc__error(code, "alloc_shared: rank %d could not create or map %zu bytes of shared memory in /dev/shm%s: "
                    "%s%s; no rank kept its allocation",
                    s->rank_base + bad, bytes, s->where, strerror(be_errno), hint);
}

int acc__shm_free_shared(acc__backend *be, void *p) {
  shm_be *s = (shm_be *)be;
  for (int i = 0; i < s->nregs; i++) {
    if (s->regs[i].peer[s->me] != p) continue;
    reg_unmap(s, &s->regs[i]);
    s->regs[i] = s->regs[--s->nregs];
    return 1;
  }
  return 0;
}

void acc__shm_reg_destroy(shm_be *s) {
  for (int i = 0; i < s->nregs; i++) reg_unmap(s, &s->regs[i]);
  acc__free(s->regs);
  s->regs = NULL;
  s->nregs = 0;
}

/* The allocation [p, p + bytes) lies in, or NULL; its offset in *off. */
static const struct acc__shm_reg *find(const shm_be *s, const void *p, size_t bytes, size_t *off) {
  uintptr_t b = (uintptr_t)p;
  for (int i = 0; i < s->nregs; i++) {
    uintptr_t base = (uintptr_t)s->regs[i].peer[s->me];
    if (b >= base && b - base <= s->regs[i].bytes && bytes <= s->regs[i].bytes - (b - base)) {
      *off = (size_t)(b - base);
      return &s->regs[i];
    }
  }
  return NULL;
}

acc_result acc__shm_reg_all_reduce(shm_be *s, const void *send, void *recv, size_t count,
                                   acc_dtype dt, acc_op op, const float *scale, int *done) {
  size_t es = acc_dtype_size(dt), off = 0;
  const struct acc__shm_reg *g = send == recv ? find(s, recv, count * es, &off) : NULL;
  *done = 0;
  int p = parity_next(s);
  words(s, s->me, p)[0] = g ? g->id : 0;
  words(s, s->me, p)[1] = (uint64_t)off;
  ACC_CHECK(acc__shm_step(s));
  for (int r = 0; r < s->n; r++)
    if (!g || words(s, r, p)[0] != g->id) return ACC_OK; /* the copy path, on every rank */
  size_t lo = (size_t)s->me * count / (size_t)s->n, hi = ((size_t)s->me + 1) * count / (size_t)s->n;
  const void **src = s->rsrc;
  uint8_t **dst = s->rdst;
  int nd = 0;
  for (int r = 0; r < s->n; r++) {
    uint8_t *at = g->peer[r] + (size_t)words(s, r, p)[1] + lo * es;
    src[r] = at;
    if (r != s->me) dst[nd++] = at;
  }
  acc__shm_reduce_block(s->tile, (uint8_t *)recv + lo * es, dst, nd, src, s->n, hi - lo, dt, op,
                        1, scale);
  *done = 1;
  return acc__shm_step(s); /* every block is in every buffer */
}
