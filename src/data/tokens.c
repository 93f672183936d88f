/* Token-stream datasets (acc_dataset_create_tokens): windows of T + 1 tokens over token files,
 * raw uint16/uint32 or llm.c shards, as a map-style dataset the library's loader shards, shuffles
 * and resumes like any other. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"
#include "core/fs.h"

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)

typedef struct tok_file {
  char *path;
  int fd;
  int64_t data_off, ntok, first_window; /* windows [first_window, next file's first_window) */
} tok_file;

typedef struct tok_set {
  tok_file *files; /* one per name; those past max_windows are not opened (fd -1, ntok -1) */
  int nfiles;      /* files opened and read: [0, nfiles) */
  int nnames;      /* the program's paths with every pattern expanded */
  int64_t T, S, vocab, windows; /* S: the stride */
  size_t width;
} tok_set;

/* Why the last fetch of this thread failed. Fetches may run at once on several threads (two
 * loaders over one dataset, each with its prefetch thread), so nothing a fetch writes is shared:
 * the message is per thread (the loader reads it on the thread whose fetch failed) and the raw
 * window is read into a buffer of the call's own. */
static _Thread_local char tok_err[512];

static void tok_free(void *payload) {
  tok_set *s = payload;
  if (!s) return;
  for (int f = 0; s->files && f < s->nnames; f++) {
    if (s->files[f].fd >= 0) close(s->files[f].fd);
    acc__free(s->files[f].path);
  }
  acc__free(s->files);
  acc__free(s);
}

static const char *tok_error(void *payload) {
  (void)payload;
  return tok_err;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int read_full(int fd, void *buf, size_t n, off_t off) {
  unsigned char *b = buf;
  while (n) {
    ssize_t r = pread(fd, b, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r, n -= (size_t)r, off += r;
  }
  return 0;
}

static acc_result open_file(tok_set *s, tok_file *tf, const char *path, acc_token_format fmt) {
  static const char fn[] = "acc_dataset_create_tokens";
  struct stat st;
  ACC_CHECK(acc__open_regular(path, "token file", &tf->fd, &st));
  int64_t size = (int64_t)st.st_size;
  if (fmt == ACC_TOKENS_LLMC) {
    unsigned char h[12];
    if (size < LLMC_HEADER_BYTES || read_full(tf->fd, h, sizeof h, 0) != 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: token file '%s' has %lld bytes, fewer than the %d-byte header of an llm.c shard "
                        "(for raw token files set format to ACC_TOKENS_U16 or ACC_TOKENS_U32)",
                        fn, path, (long long)size, LLMC_HEADER_BYTES);
    uint32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
    if (magic != LLMC_MAGIC)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: token file '%s': header field 'magic' (int32 0) is %u, expected %d for an llm.c "
                        "shard (for raw token files set format to ACC_TOKENS_U16 or ACC_TOKENS_U32)",
                        fn, path, magic, LLMC_MAGIC);
    if (version != 1)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: token file '%s': header field 'version' (int32 1) is %u, expected 1 (uint16 tokens)",
                        fn, path, version);
    int64_t want = LLMC_HEADER_BYTES + 2 * (int64_t)count;
    if ((int32_t)count < 0 || want != size)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: token file '%s': header field 'token count' (int32 2) is %d, so the file should "
                        "have %lld bytes, but it has %lld (truncated or not an llm.c shard)",
                        fn, path, (int32_t)count, (long long)want, (long long)size);
    tf->data_off = LLMC_HEADER_BYTES;
    tf->ntok = (int64_t)count;
  } else {
    if (size % (int64_t)s->width != 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: token file '%s' has %lld bytes, not a multiple of %zu (uint%zu tokens)", fn, path,
                        (long long)size, s->width, s->width * 8);
    tf->data_off = 0;
    tf->ntok = size / (int64_t)s->width;
  }
  return ACC_OK;
}

static int tok_fetch(int64_t index, void *const *fields, void *payload) {
  tok_set *s = payload;
  tok_err[0] = '\0';
  int lo = 0, hi = s->nfiles - 1; /* the last file whose first window is <= index */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->files[mid].first_window <= index) lo = mid;
    else hi = mid - 1;
  }
  const tok_file *tf = &s->files[lo];
  int64_t pos = (index - tf->first_window) * s->S, n = s->T + 1;
  off_t off = (off_t)(tf->data_off + pos * (int64_t)s->width);
  unsigned char stackbuf[16384], *buf = stackbuf;
  size_t nbytes = (size_t)n * s->width;
  if (nbytes > sizeof stackbuf && !(buf = acc__malloc(nbytes))) {
    snprintf(tok_err, sizeof tok_err, ": out of memory reading a window of %zu bytes", nbytes);
    return 1;
  }
  int rc = 0;
  if (read_full(tf->fd, buf, nbytes, off) != 0) {
    snprintf(tok_err, sizeof tok_err, ": cannot read tokens %lld..%lld of '%s' (%s)", (long long)pos,
             (long long)(pos + n - 1), tf->path, errno ? strerror(errno) : "file shrank");
    rc = 1;
  }
  int32_t *in = fields[0], *tg = fields[1];
  for (int64_t k = 0; rc == 0 && k < n; k++) {
    uint32_t t = s->width == 2 ? (uint32_t)(buf[2 * k] | buf[2 * k + 1] << 8) : le32(buf + 4 * k);
    if ((s->vocab > 0 && (int64_t)t >= s->vocab) || t > INT32_MAX) {
      snprintf(tok_err, sizeof tok_err, ": token %lld of '%s' is %u, outside the vocabulary (vocab_size %lld)",
               (long long)(pos + k), tf->path, t, (long long)s->vocab);
      rc = 2;
      break;
    }
    if (k < s->T) in[k] = (int32_t)t;
    if (k > 0) tg[k - 1] = (int32_t)t;
  }
  if (buf != stackbuf) acc__free(buf);
  return rc;
}

/* ---- the files: patterns expanded --------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int has_glob_chars(const char *p) { return strpbrk(p, "*?[") != NULL; }

/* Appends the files of entry p to *names: p itself when it names an existing file or holds no
 * pattern character (a missing file then fails when opened, naming it), else the files matching
 * the pattern p (glob(3)) sorted by strcmp (byte order: the same on every process, whatever its
 * locale). A pattern matching nothing is an error naming it. */
static acc_result expand_entry(const char *fn, int i, const char *p, char ***names, int *n, int *cap) {
  struct stat st;
  glob_t g;
  memset(&g, 0, sizeof g);
  size_t nm = 1;
  int globbed = 0;
  if (stat(p, &st) != 0 && has_glob_chars(p)) {
    int grc = glob(p, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
      globfree(&g);
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the pattern '%s' (path %d) matches no file", fn, p, i);
    }
    if (grc != 0) {
      globfree(&g);
      return acc__error(grc == GLOB_NOSPACE ? ACC_ERR_NOMEM : ACC_ERR_IO,
                        "%s: cannot expand the pattern '%s' (path %d): %s", fn, p, i,
                        grc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_str);
    nm = g.gl_pathc;
    globbed = 1;
  }
  acc_result rc = ACC_OK;
  if ((size_t)*n + nm > (size_t)INT32_MAX)
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the pattern '%s' (path %d) matches too many files", fn, p, i);
  if (rc == ACC_OK && (size_t)*n + nm > (size_t)*cap) {
    size_t nc = ((size_t)*n + nm) * 2;
    char **v = acc__realloc(*names, nc * sizeof *v);
    if (!v) rc = ACC_ERR_NOMEM;
    else {
      *names = v;
      *cap = (int)(nc > (size_t)INT32_MAX ? INT32_MAX : nc);
    }
  }
  for (size_t k = 0; rc == ACC_OK && k < nm; k++) {
    char *d = acc__strdup(globbed ? g.gl_pathv[k] : p);
    if (!d) rc = ACC_ERR_NOMEM;
    else (*names)[(*n)++] = d;
  }
  if (globbed) globfree(&g);
  return rc;
}

static void names_free(char **names, int n) {
  for (int i = 0; names && i < n; i++) acc__free(names[i]);
  acc__free(names);
}

int acc__tokens_num_files(const acc_dataset *ds) {
  if (!ds || ds->free_payload != tok_free) return -1;
  return ((const tok_set *)ds->payload)->nnames;
}

void acc__tokens_file(const acc_dataset *ds, int i, const char **path, int64_t *ntok) {
  const tok_set *s = ds->payload;
  *path = s->files[i].path;
  *ntok = i < s->nfiles ? s->files[i].ntok : -1;
}

acc_result acc_dataset_create_tokens(acc_dataset **out, const char *const *paths, int num_paths,
                                     const acc_token_options *user) {
  static const char fn[] = "acc_dataset_create_tokens";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  acc_token_options o = ACC_TOKEN_OPTIONS_INIT;
  if (!user)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: options are required (seq_len at least)", fn);
  ACC__READ_OPTIONS(o, user, acc_token_options, ACC_TOKEN_OPTIONS_VERSION, fn);
  if (o.seq_len < 1 || o.seq_len > ((int64_t)1 << 28))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: seq_len is %lld, expected 1..2^28", fn, (long long)o.seq_len);
  if (o.format != ACC_TOKENS_LLMC && o.format != ACC_TOKENS_U16 && o.format != ACC_TOKENS_U32)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: format is %d, expected ACC_TOKENS_LLMC (0), ACC_TOKENS_U16 (1) or ACC_TOKENS_U32 (2)", fn,
                      (int)o.format);
  if (o.vocab_size < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: vocab_size is %lld, expected >= 0 (0: unchecked)", fn,
                      (long long)o.vocab_size);
  if (o.stride < 0 || o.stride > ((int64_t)1 << 28))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: stride is %lld, expected 1..2^28 (0: seq_len)", fn,
                      (long long)o.stride);
  if (o.max_windows < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: max_windows is %lld, expected >= 0 (0: every window)", fn,
                      (long long)o.max_windows);
  if (!paths || num_paths < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: no token files (num_paths %d)", fn, num_paths);
  for (int f = 0; f < num_paths; f++)
    if (!paths[f] || !*paths[f]) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: path %d is empty", fn, f);
  char **names = NULL;
  int nn = 0, cap = 0;
  for (int f = 0; f < num_paths; f++) {
    acc_result erc = expand_entry(fn, f, paths[f], &names, &nn, &cap);
    if (erc != ACC_OK) {
      names_free(names, nn);
      return erc;
    }
  }
  tok_set *s = acc__calloc(1, sizeof *s);
  if (!s) {
    names_free(names, nn);
    return ACC_ERR_NOMEM;
  }
  s->T = o.seq_len;
  s->S = o.stride ? o.stride : o.seq_len;
  s->vocab = o.vocab_size;
  s->width = o.format == ACC_TOKENS_U32 ? 4 : 2;
  s->files = acc__calloc((size_t)nn, sizeof *s->files);
  acc_result rc = s->files ? ACC_OK : ACC_ERR_NOMEM;
  if (rc == ACC_OK) {
    s->nnames = nn;
    for (int f = 0; f < nn; f++) {
      s->files[f].fd = -1;
      s->files[f].ntok = -1;
      s->files[f].path = names[f]; /* taken over */
      names[f] = NULL;
    }
  }
  names_free(names, nn);
  for (int f = 0; rc == ACC_OK && f < s->nnames; f++) {
    s->nfiles = f + 1;
    rc = open_file(s, &s->files[f], s->files[f].path, o.format);
    if (rc != ACC_OK) break;
    s->files[f].first_window = s->windows;
    s->windows += s->files[f].ntok >= s->T + 1 ? (s->files[f].ntok - s->T - 1) / s->S + 1 : 0;
    if (o.max_windows > 0 && s->windows >= o.max_windows) { /* the files after it are not needed */
      s->windows = o.max_windows;
      break;
    }
  }
  if (rc == ACC_OK && o.max_windows > s->windows)
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "%s: max_windows is %lld but the %d token file(s) (first: '%s') hold only %lld windows of "
                    "seq_len + 1 = %lld tokens", fn, (long long)o.max_windows, s->nnames, s->files[0].path,
                    (long long)s->windows, (long long)(s->T + 1));
  if (rc == ACC_OK && s->windows == 0)
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "%s: the %d token file(s) (first: '%s') hold no window of seq_len + 1 = %lld tokens", fn,
                    s->nnames, s->files[0].path, (long long)(s->T + 1));
  acc_field_desc fields[2] = {{ACC_I32, (size_t)s->T}, {ACC_I32, (size_t)s->T}};
  if (rc == ACC_OK) rc = acc_dataset_create_map(out, s->windows, fields, 2, tok_fetch, s);
  if (rc != ACC_OK) {
    tok_free(s);
    return rc;
  }
  (*out)->free_payload = tok_free;
  (*out)->fetch_error = tok_error;
  return ACC_OK;
}
