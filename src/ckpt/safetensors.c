/* safetensors files: an 8-byte little-endian header length N, N bytes of JSON header, then the
 * tensor data. Writer (atomic) and validating reader (mmap or memory). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/load_defer.h"
#include "core/json_util.h"

#define ST_MAX_HEADER 100000000ull
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

static const char *const dtype_names[ACC_DTYPE_COUNT_] = {"F32", "F64", "F16", "BF16", "I32", "I64", "U8", "U64"};

const char *acc_safetensors_dtype_name(acc_dtype dtype) {
  return ((unsigned)dtype < ACC_DTYPE_COUNT_) ? dtype_names[dtype] : NULL;
}

static int dtype_from_name(const char *s, acc_dtype *out) {
  for (int i = 0; i < ACC_DTYPE_COUNT_; i++)
    if (strcmp(s, dtype_names[i]) == 0) {
      *out = (acc_dtype)i;
      return 1;
    }
  return 0;
}

/* numel * element size with overflow checks; returns 0 on overflow. */
static int tensor_nbytes(int ndim, const int64_t *shape, size_t esize, uint64_t *out) {
  uint64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0) return 0;
    if (__builtin_mul_overflow(n, (uint64_t)shape[d], &n)) return 0;
  }
  if (__builtin_mul_overflow(n, (uint64_t)esize, &n)) return 0;
  *out = n;
  return 1;
}

/* ---- writer ------------------------------------------------------------------------------ */

typedef struct st_write_ctx {
  const char *path;
  const acc_tensor_view *tensors;
  size_t count;
  const uint64_t *nbytes;
  const char *header;
  size_t header_len; /* padded */
  acc__st_source_fn src; /* NULL: the views' data are host memory, written as they are */
  void *src_payload;
} st_write_ctx;

static acc_result st_write_body(void *payload, int fd) {
  st_write_ctx *w = payload;
  unsigned char len8[8];
  uint64_t n = w->header_len;
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
  ACC_CHECK(acc__write_all(fd, len8, 8, w->path));
  ACC_CHECK(acc__write_all(fd, w->header, w->header_len, w->path));
  for (size_t i = 0; i < w->count; i++) {
    if (!w->nbytes[i]) continue;
    if (w->src) ACC_CHECK(w->src(w->src_payload, &w->tensors[i], (size_t)w->nbytes[i], fd, w->path));
    else ACC_CHECK(acc__write_all(fd, w->tensors[i].data, (size_t)w->nbytes[i], w->path));
  }
  return ACC_OK;
}

static acc_result st_write(const char *path, const acc_tensor_view *tensors, size_t count, const char *const *meta_keys,
                           const char *const *meta_values, size_t meta_count, acc__st_source_fn src, void *payload);

acc_result acc_safetensors_write(const char *path, const acc_tensor_view *tensors, size_t count,
                                 const char *const *meta_keys, const char *const *meta_values, size_t meta_count) {
  return st_write(path, tensors, count, meta_keys, meta_values, meta_count, NULL, NULL);
}

acc_result acc__safetensors_write_src(const char *path, const acc_tensor_view *tensors, size_t count,
                                      acc__st_source_fn src, void *payload) {
  if (!src) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__safetensors_write_src: src is NULL");
  return st_write(path, tensors, count, NULL, NULL, 0, src, payload);
}

acc_result acc__safetensors_write_src_meta(const char *path, const acc_tensor_view *tensors, size_t count,
                                           const char *const *meta_keys, const char *const *meta_values,
                                           size_t meta_count, acc__st_source_fn src, void *payload) {
  if (!src) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__safetensors_write_src_meta: src is NULL");
  return st_write(path, tensors, count, meta_keys, meta_values, meta_count, src, payload);
}

static acc_result st_write(const char *path, const acc_tensor_view *tensors, size_t count, const char *const *meta_keys,
                           const char *const *meta_values, size_t meta_count, acc__st_source_fn src, void *payload) {
  if (!path || !*path) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write: path is empty");
  if (count && !tensors)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write: %zu tensors but tensors is NULL", count);
  if (meta_count && (!meta_keys || !meta_values))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write: %zu metadata entries but keys or values is NULL",
                      meta_count);
  acc_result rc = ACC_OK;
  json_t *root = json_object(), *meta = json_object();
  uint64_t *nbytes = acc__calloc(count ? count : 1, sizeof *nbytes);
  char *header = NULL;
  if (!root || !meta || !nbytes) {
    rc = acc__error(ACC_ERR_NOMEM, "out of memory building the header of '%s'", path);
    goto done;
  }
  if (json_object_set_new(meta, "format", json_string("pt")) != 0) goto nomem;
  for (size_t i = 0; i < meta_count; i++) {
    if (!meta_keys[i] || !meta_values[i]) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): metadata entry %zu has a NULL key or value",
                      path, i);
      goto done;
    }
    json_t *v = json_string(meta_values[i]);
    if (!v) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): metadata '%s' is not valid UTF-8", path,
                      meta_keys[i]);
      goto done;
    }
    if (json_object_set_new(meta, meta_keys[i], v) != 0) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): metadata key %zu is not valid UTF-8", path, i);
      goto done;
    }
  }
  if (json_object_set_new(root, "__metadata__", meta) != 0) {
    meta = NULL;
    goto nomem;
  }
  meta = NULL;
  uint64_t offset = 0;
  for (size_t i = 0; i < count; i++) {
    const acc_tensor_view *t = &tensors[i];
    const char *name = t->name;
    if (!name || !*name || strcmp(name, "__metadata__") == 0) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor %zu has name '%s' (must be "
                      "non-empty and not __metadata__)", path, i, name ? name : "(null)");
      goto done;
    }
    if (json_object_get(root, name)) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor name '%s' appears twice", path, name);
      goto done;
    }
    size_t esize = acc_dtype_size(t->dtype);
    if (!acc_safetensors_dtype_name(t->dtype) || !esize) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor '%s' has unknown dtype %d", path,
                      name, (int)t->dtype);
      goto done;
    }
    if (t->ndim < 0 || t->ndim > ACC_MAX_DIMS) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor '%s' has ndim %d (expected 0..%d)",
                      path, name, t->ndim, ACC_MAX_DIMS);
      goto done;
    }
    if (!tensor_nbytes(t->ndim, t->shape, esize, &nbytes[i]) || nbytes[i] > SIZE_MAX) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor '%s' has a negative or too "
                      "large shape", path, name);
      goto done;
    }
    if (nbytes[i] && !t->data) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor '%s' has no data", path, name);
      goto done;
    }
    json_t *obj = json_object(), *shape = json_array(), *offs = json_array();
    if (!obj || !shape || !offs) {
      json_decref(obj);
      json_decref(shape);
      json_decref(offs);
      goto nomem;
    }
    int lost = 0; /* the *_new calls take their value even when they fail */
    for (int d = 0; d < t->ndim; d++)
      lost |= json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) != 0;
    lost |= json_array_append_new(offs, json_integer((json_int_t)offset)) != 0;
    lost |= json_array_append_new(offs, json_integer((json_int_t)(offset + nbytes[i]))) != 0;
    lost |= json_object_set_new(obj, "dtype", json_string(dtype_names[t->dtype])) != 0;
    lost |= json_object_set_new(obj, "shape", shape) != 0;
    lost |= json_object_set_new(obj, "data_offsets", offs) != 0;
    if (lost) {
      json_decref(obj);
      goto nomem;
    }
    if (json_object_set_new(root, name, obj) != 0) {
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_write('%s'): tensor name %zu is not valid UTF-8",
                      path, i);
      goto done;
    }
    offset += nbytes[i];
  }
  char *text = acc__json_dumps(root, JSON_COMPACT, "a safetensors header");
  if (!text) goto nomem;
  size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7;
  header = acc__malloc(padded ? padded : 8);
  if (!header) {
    acc__free(text);
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  memcpy(header, text, tl);
  memset(header + tl, ' ', padded - tl);
  acc__free(text);
  st_write_ctx w = {path, tensors, count, nbytes, header, padded, src, payload};
  rc = acc__write_fd_atomic(path, st_write_body, &w);
  goto done;
nomem:
  rc = acc__error(ACC_ERR_NOMEM, "out of memory building the header of '%s'", path);
done:
  json_decref(meta);
  json_decref(root);
  acc__free(nbytes);
  acc__free(header);
  return rc;
}

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct st_tensor {
  char *name;
  acc_dtype dtype;
  int ndim;
  int64_t shape[ACC_MAX_DIMS];
  uint64_t begin, end;
  size_t order; /* position in the JSON header */
} st_tensor;

struct acc_safetensors {
  uint32_t magic;
  char *label;
  const unsigned char *base;
  size_t size;
  int mapped;
  int fd; /* -1, or kept open for acc__safetensors_pread */
  size_t data_start;
  st_tensor *t;
  size_t n;
  char **mkeys, **mvals;
  size_t nmeta;
};

static void st_free(acc_safetensors *f) {
  if (!f) return;
  for (size_t i = 0; i < f->n; i++) acc__free(f->t[i].name);
  acc__free(f->t);
  for (size_t i = 0; i < f->nmeta; i++) {
    acc__free(f->mkeys[i]);
    acc__free(f->mvals[i]);
  }
  acc__free(f->mkeys);
  acc__free(f->mvals);
  if (f->mapped && f->base) munmap((void *)f->base, f->size);
  if (f->fd >= 0) close(f->fd);
  acc__free(f->label);
  f->magic = ACC__MAGIC_DEAD;
  acc__free(f);
}

static int tensor_cmp(const void *a, const void *b) {
  const st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

static acc_result parse_metadata(acc_safetensors *f, json_t *meta) {
  if (!json_is_object(meta))
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': \"__metadata__\" is not an object of strings", f->label);
  size_t n = json_object_size(meta);
  f->mkeys = acc__calloc(n ? n : 1, sizeof(char *));
  f->mvals = acc__calloc(n ? n : 1, sizeof(char *));
  if (!f->mkeys || !f->mvals) return ACC_ERR_NOMEM;
  const char *key;
  json_t *v;
  json_object_foreach(meta, key, v) {
    if (!json_is_string(v))
      return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': metadata entry '%s' is not a string", f->label, key);
    f->mkeys[f->nmeta] = acc__strdup(key);
    f->mvals[f->nmeta] = acc__strdup(json_string_value(v));
    f->nmeta++;
    if (!f->mkeys[f->nmeta - 1] || !f->mvals[f->nmeta - 1]) return ACC_ERR_NOMEM;
  }
  return ACC_OK;
}

static acc_result parse_tensor(acc_safetensors *f, const char *name, json_t *obj, uint64_t data_len, st_tensor *t) {
  const char *label = f->label;
  if (!json_is_object(obj))
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': entry is not an object", label, name);
  json_t *jd = json_object_get(obj, "dtype"), *js = json_object_get(obj, "shape"),
         *jo = json_object_get(obj, "data_offsets");
  if (!json_is_string(jd))
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': \"dtype\" is missing or not a string",
                      label, name);
  if (!dtype_from_name(json_string_value(jd), &t->dtype))
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': unknown dtype '%s' (supported: F32 F64 "
                      "F16 BF16 I32 I64 U8)", label, name, json_string_value(jd));
  if (!json_is_array(js))
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': \"shape\" is missing or not a list",
                      label, name);
  size_t nd = json_array_size(js);
  if (nd > ACC_MAX_DIMS)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': shape has %zu dimensions (at most %d "
                      "supported)", label, name, nd, ACC_MAX_DIMS);
  t->ndim = (int)nd;
  for (size_t d = 0; d < nd; d++) {
    json_t *e = json_array_get(js, d);
    if (!json_is_integer(e) || json_integer_value(e) < 0)
      return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': shape entry %zu is not a non-negative "
                        "integer", label, name, d);
    t->shape[d] = (int64_t)json_integer_value(e);
  }
  if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
      !json_is_integer(json_array_get(jo, 1)))
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': \"data_offsets\" is not a list "
                      "[begin, end] of two integers", label, name);
  json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
  if (b < 0 || e < b)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': data_offsets [%lld, %lld] are not "
                      "0 <= begin <= end", label, name, (long long)b, (long long)e);
  if ((uint64_t)e > data_len)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': data_offsets end %lld is beyond the "
                      "data section (%llu bytes; the file is truncated?)", label, name, (long long)e,
                      (unsigned long long)data_len);
  t->begin = (uint64_t)b;
  t->end = (uint64_t)e;
  uint64_t nbytes = 0;
  int fits = tensor_nbytes(t->ndim, t->shape, acc_dtype_size(t->dtype), &nbytes);
  if (!fits || nbytes != t->end - t->begin) {
    if (!fits)
      return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': shape is too large (numel * size "
                        "overflows)", label, name);
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s': data_offsets span %llu bytes but "
                      "dtype %s and its shape need %llu", label, name, (unsigned long long)(t->end - t->begin),
                      dtype_names[t->dtype], (unsigned long long)nbytes);
  }
  t->name = acc__strdup(name);
  return t->name ? ACC_OK : ACC_ERR_NOMEM;
}

/* The format requires the tensors, sorted by offset, to cover the data section exactly: each one
 * begins where the previous one ends (an empty tensor too) and the last one ends at the end of the
 * file. A hole, an overlap or trailing bytes mean a damaged file, two interleaved writes or a
 * polyglot file; the reference reader refuses all three, and so does this one. */
static acc_result check_tiling(const acc_safetensors *f, uint64_t data_len) {
  const char *label = f->label;
  uint64_t at = 0;
  const st_tensor *prev = NULL;
  for (size_t i = 0; i < f->n; i++) {
    const st_tensor *t = &f->t[i];
    if (t->begin < at)
      return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' "
                        "(which ends at %llu)", label, t->name, (unsigned long long)t->begin,
                        (unsigned long long)t->end, prev->name, (unsigned long long)at);
    if (t->begin > at)
      return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': bytes %llu..%llu of the data section belong to no "
                        "tensor (a hole %s, before tensor '%s' at data_offsets [%llu, %llu]); the format requires "
                        "the tensors to cover the data section without holes (a damaged file or two interleaved "
                        "writes?)", label, (unsigned long long)at, (unsigned long long)t->begin,
                        prev ? "between tensors" : "at the start", t->name, (unsigned long long)t->begin,
                        (unsigned long long)t->end);
    at = t->end;
    prev = t;
  }
  if (at != data_len) {
    if (!prev)
      return acc__error(ACC_ERR_FORMAT, "safetensors file '%s' has no tensors but %llu bytes after its header "
                        "(bytes 0..%llu of the data section); the format allows no trailing bytes", label,
                        (unsigned long long)data_len, (unsigned long long)data_len);
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': %llu trailing bytes (%llu..%llu of the data section) "
                      "after the last tensor '%s' (data_offsets [%llu, %llu]); the format requires the data section "
                      "to end with its last tensor (a damaged file or two interleaved writes?)", label,
                      (unsigned long long)(data_len - at), (unsigned long long)at, (unsigned long long)data_len,
                      prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end);
  }
  return ACC_OK;
}

static acc_result st_parse(acc_safetensors *f) {
  const char *label = f->label;
  if (f->size < 8)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s' is %zu bytes, shorter than the 8-byte header length",
                      label, f->size);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)f->base[i] << (8 * i);
  if (n > ST_MAX_HEADER)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': header length %llu is absurd (more than %llu bytes); "
                      "not a safetensors file?", label, (unsigned long long)n, ST_MAX_HEADER);
  if (n > f->size - 8)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': header length %llu goes beyond the end of the file "
                      "(%zu bytes)", label, (unsigned long long)n, f->size);
  if (n < 2)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': header length %llu is too small for a JSON object",
                      label, (unsigned long long)n);
  f->data_start = 8 + (size_t)n;
  uint64_t data_len = f->size - f->data_start;
  json_error_t err;
  json_t *root = json_loadb((const char *)f->base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return acc__error(ACC_ERR_FORMAT, "safetensors file '%s': header is not valid JSON: %s (line %d, column %d)",
                      label, err.text, err.line, err.column);
  acc_result rc = ACC_OK;
  if (!json_is_object(root)) {
    rc = acc__error(ACC_ERR_FORMAT, "safetensors file '%s': header is not a JSON object", label);
    goto done;
  }
  size_t cap = json_object_size(root);
  f->t = acc__calloc(cap ? cap : 1, sizeof *f->t);
  if (!f->t) {
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  const char *key;
  json_t *v;
  size_t order = 0;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0) {
      ACC_CHECK_GOTO(parse_metadata(f, v), rc, done);
      continue;
    }
    if (!*key) {
      rc = acc__error(ACC_ERR_FORMAT, "safetensors file '%s': a tensor has an empty name", label);
      goto done;
    }
    st_tensor *t = &f->t[f->n];
    memset(t, 0, sizeof *t);
    t->order = order++;
    ACC_CHECK_GOTO(parse_tensor(f, key, v, data_len, t), rc, done);
    f->n++;
  }
  if (f->n > 1) qsort(f->t, f->n, sizeof *f->t, tensor_cmp);
  rc = check_tiling(f, data_len);
done:
  json_decref(root);
  return rc;
}

static acc_result st_new(acc_safetensors **out, const char *label) {
  acc_safetensors *f = acc__calloc(1, sizeof *f);
  if (!f) return ACC_ERR_NOMEM;
  f->magic = ACC__MAGIC_SAFETENSORS;
  f->fd = -1;
  f->label = acc__strdup(label);
  if (!f->label) {
    acc__free(f);
    return ACC_ERR_NOMEM;
  }
  *out = f;
  return ACC_OK;
}

acc_result acc_safetensors_open_memory(acc_safetensors **out, const void *data, size_t size, const char *label) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_open_memory: out is NULL");
  *out = NULL;
  if (!data && size) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_open_memory: data is NULL");
  acc_safetensors *f;
  ACC_CHECK(st_new(&f, label ? label : "<memory>"));
  f->base = data;
  f->size = size;
  acc_result rc = st_parse(f);
  if (rc != ACC_OK) {
    st_free(f);
    return rc;
  }
  *out = f;
  return ACC_OK;
}

static acc_result open_file(acc_safetensors **out, const char *path, int keep_fd) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_open: out is NULL");
  *out = NULL;
  if (!path) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_open: path is NULL");
  int fd = -1;
  struct stat sb;
  ACC_CHECK(acc__open_regular(path, "safetensors file", &fd, &sb));
  acc_safetensors *f;
  acc_result rc = st_new(&f, path);
  if (rc != ACC_OK) {
    close(fd);
    return rc;
  }
  f->size = (size_t)sb.st_size;
  if (f->size > 0) {
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      rc = acc__error(ACC_ERR_IO, "could not map safetensors file '%s' (%zu bytes): %s", path, f->size, strerror(errno));
      close(fd);
      st_free(f);
      return rc;
    }
    f->base = p;
    f->mapped = 1;
  } else {
    f->base = (const unsigned char *)"";
  }
  if (keep_fd) f->fd = fd;
  else close(fd);
  rc = st_parse(f);
  if (rc != ACC_OK) {
    st_free(f);
    return rc;
  }
  *out = f;
  return ACC_OK;
}

acc_result acc_safetensors_open(acc_safetensors **out, const char *path) { return open_file(out, path, 0); }

acc_result acc__safetensors_open_fd(acc_safetensors **out, const char *path) { return open_file(out, path, 1); }

/* The tensor's bytes as a range of the file, checked to lie inside the mapping. */
static acc_result view_range(const acc_safetensors *f, const acc_tensor_view *v, size_t *off) {
  const unsigned char *p = v->data;
  if (!f->mapped || p < f->base + f->data_start || (size_t)(p - f->base) > f->size ||
      v->nbytes > f->size - (size_t)(p - f->base))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "safetensors file '%s': tensor '%s' is not a tensor of this file",
                      f->label, v->name ? v->name : "?");
  *off = (size_t)(p - f->base);
  return ACC_OK;
}

acc_result acc__safetensors_check_readable(const acc_safetensors *f, const acc_tensor_view *v) {
  ACC_CHECK(acc__check_handle(f, ACC__HANDLE_SAFETENSORS, "acc__safetensors_check_readable"));
  if (!v->nbytes) return ACC_OK;
  size_t off = 0;
  ACC_CHECK(view_range(f, v, &off));
  const long pg = sysconf(_SC_PAGESIZE);
  const size_t page = pg > 0 ? (size_t)pg : 4096, lo = off / page * page, len = off + v->nbytes - lo;
  unsigned char *base = (unsigned char *)f->base + lo;
  /* Pages already in the page cache cannot fail to read (the usual case right after a save or a
   * first read): mincore says so without touching them. Otherwise the kernel reads them now. */
  size_t npages = (len + page - 1) / page, resident = 0;
  unsigned char vec[4096];
  for (size_t done = 0; done < npages;) {
    size_t n = npages - done < sizeof vec ? npages - done : sizeof vec;
    size_t bytes = done + n == npages ? len - done * page : n * page;
    if (mincore(base + done * page, bytes, vec) != 0) break;
    size_t k = 0;
    while (k < n && (vec[k] & 1)) k++;
    resident += k;
    if (k < n) break;
    done += n;
  }
  if (resident == npages) return ACC_OK;
  if (madvise(base, len, MADV_POPULATE_READ) == 0) return ACC_OK;
  if (errno == EINVAL) return ACC_OK; /* kernel before 5.14: the read itself reports errors */
  return acc__error(ACC_ERR_IO, "safetensors file '%s': tensor '%s' (bytes %zu..%zu of the file) cannot be read: %s",
                    f->label, v->name ? v->name : "?", off, off + v->nbytes, strerror(errno));
}

acc_result acc__safetensors_pread(const acc_safetensors *f, const acc_tensor_view *v, void *dst) {
  ACC_CHECK(acc__check_handle(f, ACC__HANDLE_SAFETENSORS, "acc__safetensors_pread"));
  size_t off = 0;
  ACC_CHECK(view_range(f, v, &off));
  if (f->fd < 0) { /* not opened with acc__safetensors_open_fd: from the mapping */
    if (v->nbytes) memcpy(dst, f->base + off, v->nbytes);
    return ACC_OK;
  }
  for (size_t got = 0; got < v->nbytes;) {
    ssize_t r = pread(f->fd, (char *)dst + got, v->nbytes - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return acc__error(ACC_ERR_IO, "safetensors file '%s': reading tensor '%s' (bytes %zu..%zu of the file) failed "
                        "after %zu bytes: %s", f->label, v->name ? v->name : "?", off, off + v->nbytes, got,
                        r < 0 ? strerror(errno) : "the file is shorter than when it was opened");
    got += (size_t)r;
  }
  return ACC_OK;
}

void acc_safetensors_close(acc_safetensors *f) {
  if (!acc__handle_ok(f, ACC__HANDLE_SAFETENSORS)) return;
  st_free(f);
}

static int valid(const acc_safetensors *f) { return acc__handle_ok(f, ACC__HANDLE_SAFETENSORS); }

size_t acc_safetensors_count(const acc_safetensors *f) { return valid(f) ? f->n : 0; }

const char *acc_safetensors_path(const acc_safetensors *f) { return valid(f) ? f->label : NULL; }

static void fill_view(const acc_safetensors *f, const st_tensor *t, acc_tensor_view *out) {
  memset(out, 0, sizeof *out);
  out->name = t->name;
  out->dtype = t->dtype;
  out->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) out->shape[d] = t->shape[d];
  out->data = f->base + f->data_start + t->begin;
  out->nbytes = (size_t)(t->end - t->begin);
}

acc_result acc_safetensors_tensor(const acc_safetensors *f, size_t i, acc_tensor_view *out) {
  ACC_CHECK(acc__check_handle(f, ACC__HANDLE_SAFETENSORS, "acc_safetensors_tensor"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_tensor: out is NULL");
  if (i >= f->n)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_tensor: index %zu out of range (file '%s' has %zu "
                      "tensors)", i, f->label, f->n);
  fill_view(f, &f->t[i], out);
  return ACC_OK;
}

acc_result acc_safetensors_find(const acc_safetensors *f, const char *name, acc_tensor_view *out) {
  ACC_CHECK(acc__check_handle(f, ACC__HANDLE_SAFETENSORS, "acc_safetensors_find"));
  if (!out || !name) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_find: NULL argument");
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0) {
      fill_view(f, &f->t[i], out);
      return ACC_OK;
    }
  return acc__error(ACC_ERR_INVALID_ARGUMENT, "safetensors file '%s' has no tensor named '%s'", f->label, name);
}

const char *acc_safetensors_metadata(const acc_safetensors *f, const char *key) {
  if (!valid(f) || !key) return NULL;
  for (size_t i = 0; i < f->nmeta; i++)
    if (strcmp(f->mkeys[i], key) == 0) return f->mvals[i];
  return NULL;
}

size_t acc_safetensors_metadata_count(const acc_safetensors *f) { return valid(f) ? f->nmeta : 0; }

acc_result acc_safetensors_metadata_at(const acc_safetensors *f, size_t i, const char **key, const char **value) {
  if (!valid(f) || i >= f->nmeta || !key || !value)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_safetensors_metadata_at: invalid handle, index or NULL output");
  *key = f->mkeys[i];
  *value = f->mvals[i];
  return ACC_OK;
}
