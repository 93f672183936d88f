/* Every process reads the same token files (data_internal.h, acc__tokens_agree): a glob pattern
 * expands to what each machine's file system holds, so a shard missing, extra or of another size
 * on one machine would make the processes read different streams without a word. prepare
 * compares a digest of each process's list (file names without their directories, in reading
 * order, and token counts: processes may read their own copies from directories of their own)
 * with process 0's, and when one differs, names the first process that differs and its first
 * differing file on every process. */
#include <stdio.h>
#include <string.h>

#include "accelerate/comm.h"
#include "accelerate/state.h"
#include "backend/collcheck.h"
#include "data/data_internal.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static void put64(unsigned char *p, int64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)v >> (8 * i));
}

static int64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return (int64_t)v;
}

/* A file's name without its directory: what is compared (processes may read their own copies of
 * the shards from directories of their own, as node-local scratch space). */
static const char *base(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* The files of ds as one blob: for each, its path, a NUL, its token count (8 bytes LE). */
static acc_result list_blob(const acc_dataset *ds, unsigned char **out, size_t *len) {
  const int n = acc__tokens_num_files(ds);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    const char *p;
    int64_t t;
    acc__tokens_file(ds, i, &p, &t);
    total += strlen(p) + 1 + 8;
  }
  unsigned char *b = acc__malloc(total ? total : 1);
  if (!b) return ACC_ERR_NOMEM;
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    const char *p;
    int64_t t;
    acc__tokens_file(ds, i, &p, &t);
    size_t l = strlen(p) + 1;
    memcpy(b + at, p, l);
    put64(b + at + l, t);
    at += l + 8;
  }
  *out = b;
  *len = total;
  return ACC_OK;
}

/* Entry k of a blob (paths are NUL-terminated inside it; the blob came from list_blob). */
typedef struct entry {
  const char *path;
  int64_t ntok;
} entry;

static int blob_entries(const unsigned char *b, size_t len, entry *e, int max) {
  int n = 0;
  for (size_t at = 0; at < len && n < max;) {
    const unsigned char *z = memchr(b + at, 0, len - at);
    if (!z || (size_t)(z - b) + 1 + 8 > len) break;
    e[n].path = (const char *)(b + at);
    e[n].ntok = get64(z + 1);
    n++;
    at = (size_t)(z - b) + 1 + 8;
  }
  return n;
}

static int find(const entry *e, int n, const char *path) {
  for (int i = 0; i < n; i++)
    if (strcmp(base(e[i].path), base(path)) == 0) return i;
  return -1;
}

static int same(const entry *a, const entry *b) { return strcmp(base(a->path), base(b->path)) == 0; }

/* What differs between process 0's files z[0..nz) and mine m[0..nm) (process me), first. */
static void describe(char *msg, size_t cap, int me, const entry *z, int nz, const entry *m, int nm) {
  int i = 0;
  while (i < nz && i < nm && same(&z[i], &m[i]) && z[i].ntok == m[i].ntok) i++;
  if (i < nz && i < nm && same(&z[i], &m[i]))
    snprintf(msg, cap, "'%s' (file %d) holds %lld tokens on process %d but %lld on process 0 ('%s'; another copy of "
             "the file)", m[i].path, i + 1, (long long)m[i].ntok, me, (long long)z[i].ntok, z[i].path);
  else if (i < nz && find(m, nm, z[i].path) < 0)
    snprintf(msg, cap, "process %d has no '%s' (process 0's '%s', file %d of %d there; process %d sees %d file(s))",
             me, base(z[i].path), z[i].path, i + 1, nz, me, nm);
  else if (i < nm && find(z, nz, m[i].path) < 0)
    snprintf(msg, cap, "process %d sees '%s' (its file %d of %d), which process 0 does not (process 0 sees %d file(s))",
             me, m[i].path, i + 1, nm, nz);
  else if (i < nz && i < nm)
    snprintf(msg, cap, "file %d is '%s' on process 0 but '%s' on process %d (the same files in another order)", i + 1,
             z[i].path, m[i].path, me);
  else
    snprintf(msg, cap, "process %d sees %d file(s), process 0 sees %d", me, nm, nz);
}

/* The digest of ds's files: names without directories and token counts, in order. */
static uint64_t digest(const acc_dataset *ds) {
  uint64_t h = 0xcbf29ce484222325ull;
  const int n = acc__tokens_num_files(ds);
  for (int i = 0; i < n; i++) {
    const char *p;
    int64_t t;
    unsigned char t8[8];
    acc__tokens_file(ds, i, &p, &t);
    const char *b = base(p);
    h = fnv(h, b, strlen(b) + 1);
    put64(t8, t);
    h = fnv(h, t8, 8);
  }
  return h;
}

acc_result acc__tokens_agree(struct acc_state *st, const acc_dataset *ds, const char *fn) {
  const int n = acc__tokens_num_files(ds);
  if (n < 0) return ACC_OK;
  const int np = acc_state_num_processes(st), me = acc_state_process_index(st);
  unsigned char *mine = NULL;
  size_t mlen = 0;
  acc_result rc = list_blob(ds, &mine, &mlen);
  /* a failure to build the list still takes part (digest 0 with count -1: it differs) */
  uint64_t d[2] = {rc == ACC_OK ? digest(ds) : 0, rc == ACC_OK ? (uint64_t)n : UINT64_MAX};
  uint64_t z0[2] = {d[0], d[1]};
  acc__comm_origin(ACC__ORIGIN_PREPARE, -10);
  acc_result crc = acc_broadcast(st, z0, 2, ACC_U64, 0);
  const int differs = z0[0] != d[0] || z0[1] != d[1];
  int64_t v[2] = {differs ? me : np, differs}; /* the first process that differs; how many do */
  acc__comm_origin(ACC__ORIGIN_PREPARE, -10);
  if (crc == ACC_OK) crc = acc_all_reduce(st, &v[0], &v[0], 1, ACC_I64, ACC_MIN);
  if (crc != ACC_OK || v[0] >= np) {
    acc__free(mine);
    return crc != ACC_OK ? crc : rc;
  }
  const int first = (int)v[0];
  acc__comm_origin(ACC__ORIGIN_PREPARE, -10);
  crc = acc_all_reduce(st, &v[1], &v[1], 1, ACC_I64, ACC_SUM);
  const int64_t ndiff = v[1];
  /* process 0's list to every process, then the first differing process says what differs */
  void *zb = me == 0 ? mine : NULL;
  size_t zlen = me == 0 ? mlen : 0;
  acc__comm_origin(ACC__ORIGIN_PREPARE, -11);
  crc = acc_broadcast_object(st, &zb, &zlen, 0);
  char msg[1024];
  memset(msg, 0, sizeof msg);
  if (me == first) {
    int cz = (int)(zlen / 9) + 1, cm = (int)(mlen / 9) + 1;
    entry *z = acc__calloc((size_t)cz, sizeof *z), *m = acc__calloc((size_t)cm, sizeof *m);
    if (crc == ACC_OK && rc == ACC_OK && z && m)
      describe(msg, sizeof msg, me, z, blob_entries(zb, zlen, z, cz), m, blob_entries(mine, mlen, m, cm));
    else
      snprintf(msg, sizeof msg, "process %d sees other files than process 0 (and could not say which: %s)", me,
               rc != ACC_OK || crc != ACC_OK ? acc_last_error() : "out of memory");
    acc__free(z);
    acc__free(m);
  }
  if (me != 0 && zb) acc_free(zb);
  acc__free(mine);
  acc__comm_origin(ACC__ORIGIN_PREPARE, -12);
  acc_result brc = acc_broadcast(st, msg, sizeof msg, ACC_U8, first);
  if (brc != ACC_OK) return brc;
  msg[sizeof msg - 1] = 0;
  if (ndiff > 1)
    return acc__error(ACC_ERR_MISMATCH, "%s: the processes read different token files: %s (and %lld more process(es) "
                      "differ from process 0); every process must see the same files", fn, msg, (long long)ndiff - 1);
  return acc__error(ACC_ERR_MISMATCH, "%s: the processes read different token files: %s; every process must see the "
                    "same files", fn, msg);
}
