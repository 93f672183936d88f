/* IDX reader on top of zlib's gz* functions (which also read uncompressed files). */
#include "idx.h"
#include "../pkg_hint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_MAGIC_U8_1D 0x00000801u
#define IDX_MAGIC_U8_3D 0x00000803u
/* Bounds that keep count*rows*cols far from overflow while allowing any real data set. */
#define IDX_MAX_COUNT 100000000
#define IDX_MAX_SIDE 65536
#define IDX_MAX_PIXELS ((int64_t)1 << 34)

static _Thread_local char idx_err[1024];

const char *idx_last_error(void) { return idx_err; }

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(idx_err, sizeof idx_err, fmt, ap);
  va_end(ap);
  return -1;
}

static int open_gz(const char *path, gzFile *out) {
  *out = NULL;
  if (!path) return fail("idx: path is NULL");
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (!f) {
    int e = errno ? errno : ENOMEM;
    char hint[160];
    if (e == ENOENT)
      return fail("cannot open %s: %s. Install the data set with %s, or pass --data DIR to read the files "
                  "from another directory",
                  path, strerror(e), pkg_install_hint("dataset-fashion-mnist", path, hint, sizeof hint));
    return fail("cannot open %s: %s", path, strerror(e));
  }
  gzbuffer(f, 1u << 17);
  *out = f;
  return 0;
}

/* gzerror's message without the "path: " prefix zlib puts in front of it. */
static const char *zlib_message(gzFile f, const char *path, int *zerr) {
  const char *msg = gzerror(f, zerr);
  size_t n = strlen(path);
  if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
  return msg;
}

/* Reads exactly n bytes; a short read is "truncated", a zlib failure is "corrupt". */
static int read_exact(gzFile f, const char *path, void *buf, size_t n, const char *what,
                      size_t *got_out) {
  size_t got = 0;
  unsigned char *p = buf;
  while (got < n) {
    size_t want = n - got > (1u << 20) ? (1u << 20) : n - got;
    int r = gzread(f, p + got, (unsigned)want);
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got_out) *got_out = got;
  if (got == n) return 0;
  int zerr = Z_OK;
  const char *zmsg = zlib_message(f, path, &zerr);
  if (zerr != Z_OK && zerr != Z_BUF_ERROR)
    return fail("%s is corrupt: %s while reading %s (got %zu of %zu bytes)", path, zmsg, what,
                got, n);
  return fail("%s is truncated: expected %zu bytes of %s, got %zu", path, n, what, got);
}

static uint32_t be32(const unsigned char *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Reads the magic number and ndim dimensions; checks the magic and each dimension's range. */
static int read_header(gzFile f, const char *path, uint32_t magic, int ndim, int32_t *dims) {
  unsigned char hdr[16];
  if (read_exact(f, path, hdr, 4 + 4 * (size_t)ndim, "header", NULL)) return -1;
  uint32_t m = be32(hdr);
  if (m != magic)
    return fail("%s is not an IDX file of %d-dimensional unsigned bytes: magic number is "
                "0x%08x, expected 0x%08x",
                path, ndim, m, magic);
  for (int i = 0; i < ndim; i++) {
    uint32_t d = be32(hdr + 4 + 4 * i);
    uint32_t max = i == 0 ? IDX_MAX_COUNT : IDX_MAX_SIDE;
    if (d == 0 || d > max)
      return fail("%s: dimension %d is %u, expected 1..%u", path, i, d, max);
    dims[i] = (int32_t)d;
  }
  return 0;
}

static int expect_eof(gzFile f, const char *path) {
  unsigned char extra;
  if (gzread(f, &extra, 1) != 0)
    return fail("%s has extra bytes after the data announced by its header", path);
  int zerr = Z_OK;
  const char *zmsg = zlib_message(f, path, &zerr);
  if (zerr != Z_OK && zerr != Z_BUF_ERROR) return fail("%s is corrupt: %s", path, zmsg);
  if (zerr == Z_BUF_ERROR) return fail("%s is truncated: %s", path, zmsg);
  return 0;
}

static int load_images(const char *path, idx_images *out, int as_bytes) {
  if (!out) return fail("idx_load_images: out is NULL");
  memset(out, 0, sizeof *out);
  gzFile f;
  if (open_gz(path, &f)) return -1;
  int32_t dims[3];
  unsigned char *chunk = NULL;
  float *pixels = NULL;
  unsigned char *bytes = NULL;
  if (read_header(f, path, IDX_MAGIC_U8_3D, 3, dims)) goto fail;
  int64_t per = (int64_t)dims[1] * dims[2];
  int64_t total = per * dims[0];
  if (total > IDX_MAX_PIXELS) {
    fail("%s: %d images of %dx%d pixels is too large", path, dims[0], dims[1], dims[2]);
    goto fail;
  }
  if (as_bytes)
    bytes = malloc((size_t)total);
  else
    pixels = malloc((size_t)total * sizeof *pixels);
  size_t chunk_n = 1u << 20;
  chunk = malloc(chunk_n);
  if ((!pixels && !bytes) || !chunk) {
    fail("%s: out of memory for %lld pixels", path, (long long)total);
    goto fail;
  }
  float scale[256]; /* exact pixel / 255 (a multiplication by 1/255 is not always exact) */
  for (int v = 0; v < 256; v++) scale[v] = (float)v / 255.0f;
  for (int64_t done = 0; done < total;) {
    size_t n = (size_t)(total - done) < chunk_n ? (size_t)(total - done) : chunk_n;
    size_t got = 0;
    if (read_exact(f, path, chunk, n, "pixel data", &got)) {
      /* Report the byte counts of the whole pixel block, not of this chunk. */
      if (strstr(idx_err, "truncated")) {
        long long have = (long long)done + (long long)got;
        fail("%s is truncated: expected %lld bytes of pixel data, got %lld (%lld complete "
             "images of %d)",
             path, (long long)total, have, have / per, dims[0]);
      }
      goto fail;
    }
    if (bytes)
      memcpy(bytes + done, chunk, n);
    else
      for (size_t i = 0; i < n; i++) pixels[done + (int64_t)i] = scale[chunk[i]];
    done += (int64_t)n;
  }
  if (expect_eof(f, path)) goto fail;
  free(chunk);
  gzclose(f);
  out->count = dims[0];
  out->rows = dims[1];
  out->cols = dims[2];
  out->pixels = pixels;
  out->bytes = bytes;
  return 0;
fail:
  free(chunk);
  free(pixels);
  free(bytes);
  gzclose(f);
  return -1;
}

int idx_load_images(const char *path, idx_images *out) { return load_images(path, out, 0); }

int idx_load_images_u8(const char *path, idx_images *out) { return load_images(path, out, 1); }

int idx_load_labels(const char *path, int32_t **labels, int32_t *count) {
  if (!labels || !count) return fail("idx_load_labels: labels or count is NULL");
  *labels = NULL;
  *count = 0;
  gzFile f;
  if (open_gz(path, &f)) return -1;
  int32_t n = 0;
  unsigned char *raw = NULL;
  int32_t *out = NULL;
  if (read_header(f, path, IDX_MAGIC_U8_1D, 1, &n)) goto fail;
  raw = malloc((size_t)n);
  out = malloc((size_t)n * sizeof *out);
  if (!raw || !out) {
    fail("%s: out of memory for %d labels", path, n);
    goto fail;
  }
  if (read_exact(f, path, raw, (size_t)n, "labels", NULL)) goto fail;
  if (expect_eof(f, path)) goto fail;
  for (int32_t i = 0; i < n; i++) out[i] = raw[i];
  free(raw);
  gzclose(f);
  *labels = out;
  *count = n;
  return 0;
fail:
  free(raw);
  free(out);
  gzclose(f);
  return -1;
}

static int load_fashion_mnist(const char *dir, int train, idx_dataset *out, int as_bytes) {
  if (!out) return fail("idx_load_fashion_mnist: out is NULL");
  memset(out, 0, sizeof *out);
  if (!dir) dir = IDX_FASHION_MNIST_DIR;
  const char *split = train ? "train" : "t10k";
  char ipath[4096], lpath[4096];
  int a = snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
  int b = snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
  if (a < 0 || b < 0 || (size_t)a >= sizeof ipath || (size_t)b >= sizeof lpath)
    return fail("data directory name is too long: %s", dir);
  int32_t nlabels = 0;
  if (load_images(ipath, &out->images, as_bytes)) return -1;
  if (idx_load_labels(lpath, &out->labels, &nlabels)) goto fail;
  if (out->images.rows != 28 || out->images.cols != 28) {
    fail("%s: images are %dx%d, expected 28x28 for Fashion-MNIST", ipath, out->images.rows,
         out->images.cols);
    goto fail;
  }
  if (nlabels != out->images.count) {
    fail("%s has %d labels but %s has %d images: the two files must match", lpath, nlabels,
         ipath, out->images.count);
    goto fail;
  }
  for (int32_t i = 0; i < nlabels; i++) {
    if (out->labels[i] < 0 || out->labels[i] > 9) {
      fail("%s: label %d of image %d is out of range 0..9", lpath, out->labels[i], i);
      goto fail;
    }
  }
  return 0;
fail:
  idx_dataset_free(out);
  return -1;
}

int idx_load_fashion_mnist(const char *dir, int train, idx_dataset *out) {
  return load_fashion_mnist(dir, train, out, 0);
}

int idx_load_fashion_mnist_u8(const char *dir, int train, idx_dataset *out) {
  return load_fashion_mnist(dir, train, out, 1);
}

void idx_normalize(idx_images *im, float mean, float std) {
  if (!im || !im->pixels || !(std > 0.0f)) return;
  size_t n = (size_t)im->count * (size_t)im->rows * (size_t)im->cols;
  float inv = 1.0f / std;
  for (size_t i = 0; i < n; i++) im->pixels[i] = (im->pixels[i] - mean) * inv;
}

void idx_images_free(idx_images *im) {
  if (!im) return;
  free(im->pixels);
  free(im->bytes);
  memset(im, 0, sizeof *im);
}

void idx_dataset_free(idx_dataset *ds) {
  if (!ds) return;
  idx_images_free(&ds->images);
  free(ds->labels);
  ds->labels = NULL;
}
