/* load_state's deferred tensor copies (load_defer.h): what goes where, and the commit that reads
 * it there once every process agreed. */
#include <string.h>

#include "ckpt/load_defer.h"
#include "device/devio.h"

typedef struct defer_item {
  const acc_safetensors *f;
  acc_tensor_view v;
  float *dst;
  size_t numel;
  acc_optimizer *opt; /* NULL: a parameter */
  size_t i;
  int b;
} defer_item;

struct acc__defer {
  acc_safetensors **files;
  size_t nfiles, files_cap;
  defer_item *items;
  size_t nitems, items_cap;
};

acc_result acc__defer_new(acc__defer **out) {
  *out = acc__calloc(1, sizeof **out);
  return *out ? ACC_OK : ACC_ERR_NOMEM;
}

void acc__defer_free(acc__defer *d) {
  if (!d) return;
  for (size_t k = 0; k < d->nfiles; k++) acc_safetensors_close(d->files[k]);
  acc__free(d->files);
  acc__free(d->items);
  acc__free(d);
}

acc_result acc__defer_adopt(acc__defer *d, acc_safetensors *f) {
  if (d->nfiles == d->files_cap) {
    size_t cap = d->files_cap ? 2 * d->files_cap : 8;
    acc_safetensors **nf = acc__realloc(d->files, cap * sizeof *nf);
    if (!nf) {
      acc_safetensors_close(f);
      return ACC_ERR_NOMEM;
    }
    d->files = nf;
    d->files_cap = cap;
  }
  d->files[d->nfiles++] = f;
  return ACC_OK;
}

acc_result acc__defer_tensor(acc__defer *d, const acc_safetensors *f, const acc_tensor_view *v, float *dst,
                             size_t numel, acc_optimizer *o, size_t i, int b) {
  ACC_CHECK(acc__safetensors_check_readable(f, v));
  if (d->nitems == d->items_cap) {
    size_t cap = d->items_cap ? 2 * d->items_cap : 64;
    defer_item *ni = acc__realloc(d->items, cap * sizeof *ni);
    if (!ni) return ACC_ERR_NOMEM;
    d->items = ni;
    d->items_cap = cap;
  }
  d->items[d->nitems++] = (defer_item){f, *v, dst, numel, o, i, b};
  return ACC_OK;
}

/* The parameter index and buffer that tensor v of optimizer oi's file fills, checked as
 * acc_optimizer_state_set checks it. */
acc_result acc__defer_optimizer(acc__defer *d, acc_optimizer *o, const acc_safetensors *f, const char *path, int oi) {
  for (size_t k = 0; k < acc_safetensors_count(f); k++) {
    acc_tensor_view v;
    ACC_CHECK(acc_safetensors_tensor(f, k, &v));
    if (v.dtype != ACC_F32)
      return acc__error(ACC_ERR_FORMAT, "'%s': optimizer state '%s' is %s, expected F32", path, v.name,
                        acc_safetensors_dtype_name(v.dtype) ? acc_safetensors_dtype_name(v.dtype) : "?");
    size_t i = 0;
    int b = 0;
    char fn[600];
    snprintf(fn, sizeof fn, "load_state: optimizer %d from '%s'", oi, path);
    ACC_CHECK(acc__optimizer_state_find(o, fn, v.name, v.ndim, v.shape, v.nbytes / sizeof(float), &i, &b));
    float *dst = acc__optimizer_state_host(o, i, b); /* allocated when absent; marked present at commit */
    if (!dst) return ACC_ERR_NOMEM;
    ACC_CHECK(acc__defer_tensor(d, f, &v, dst, v.nbytes / sizeof(float), o, i, b));
  }
  return ACC_OK;
}

acc_result acc__defer_commit(acc__defer *d) {
  for (size_t k = 0; d && k < d->nitems; k++) {
    const defer_item *it = &d->items[k];
    if (it->v.dtype == ACC_F32) {
      acc_result rc = acc__safetensors_pread(it->f, &it->v, it->dst);
      if (rc != ACC_OK)
        return acc__error_context(rc, "load_state: the checkpoint changed while it was loading (%zu of %zu "
                                  "tensors were read in; the rest keep their values)", k, d->nitems);
    } else {
      acc__tensor_to_f32(it->dst, &it->v, it->numel); /* from the mapping */
    }
    if (it->opt) acc__optimizer_state_set_present(it->opt, it->i, it->b, 1);
  }
  return ACC_OK;
}

void acc__tensor_to_f32(float *dst, const acc_tensor_view *v, size_t numel) {
  const unsigned char *src = v->data;
  switch (v->dtype) {
    case ACC_F32: memcpy(dst, src, numel * 4); break;
    case ACC_F64:
      for (size_t i = 0; i < numel; i++) {
        double x;
        memcpy(&x, src + 8 * i, 8);
        dst[i] = (float)x;
      }
      break;
    case ACC_F16:
    case ACC_BF16:
      for (size_t i = 0; i < numel; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = v->dtype == ACC_F16 ? acc__f16_to_f32(h) : acc__bf16_to_f32(h);
      }
      break;
    default: break;
  }
}

int acc__defer_model_on_host(const acc_model *m) {
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *p = acc_model_parameter(m, i);
    if (p->numel) return acc__devio_find(p->data) == NULL;
  }
  return 1;
}
