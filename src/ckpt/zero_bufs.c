/* The program's sharded buffers under ZeRO (acc_accelerator_register_zero_buffers): a program
 * that steps its own optimizer on its range of the model (acc_accelerator_zero_shard, llm.c's
 * `-z 1`) keeps its moments for that range only. save_state gathers every process's range to
 * process 0, which writes full tensors into <checkpoint>/<stem>.safetensors: the same file as
 * acc_accelerator_register_buffers writes for full-size buffers, so a checkpoint moves between
 * ZeRO and no ZeRO and between process counts. load_state's pre-hook checks the file and reads
 * this process's range into host staging; the program's buffers (host or device memory) are
 * written only once every process agreed that the whole checkpoint loads
 * (acc__zero_bufs_commit), so a failed load leaves them as they were. */
#include <stdio.h>
#include <string.h>

#include "ckpt/accel_state.h"
#include "ckpt/load_defer.h"
#include "device/devio.h"

typedef struct zbuf {
  char *name;
  acc_dtype dtype;
  void **data;   /* the program's pointer to its range */
  size_t count;  /* elements of its range (this process's shard count) */
  void *fixed;
  void *staged;  /* load: the checkpoint's values of the range, host memory */
} zbuf;

typedef struct zgroup {
  char *stem;
  acc_model *model;
  size_t total, first; /* the full tensors' elements; this process's first element */
  zbuf *bufs;
  size_t n;
} zgroup;

typedef struct zreg {
  zgroup *groups;
  size_t ngroups;
  int staged; /* the load pre-hook filled every staged buffer */
} zreg;

static void unstage(zreg *r) {
  for (size_t g = 0; g < r->ngroups; g++)
    for (size_t i = 0; i < r->groups[g].n; i++) {
      acc__tmp_free(r->groups[g].bufs[i].staged);
      r->groups[g].bufs[i].staged = NULL;
    }
  r->staged = 0;
}

static void reg_free(void *p) {
  zreg *r = p;
  if (!r) return;
  unstage(r);
  for (size_t g = 0; g < r->ngroups; g++) {
    for (size_t i = 0; i < r->groups[g].n; i++) acc__free(r->groups[g].bufs[i].name);
    acc__free(r->groups[g].bufs);
    acc__free(r->groups[g].stem);
  }
  acc__free(r->groups);
  acc__free(r);
}

static size_t layout_total(const acc_model *m) {
  size_t t = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++)
    if (acc_model_requires_grad(m, i)) t += acc_model_parameter(m, i)->numel;
  return t;
}

static void *buf_ptr(const zbuf *b) { return b->data ? *b->data : b->fixed; }

/* Host <-> the program's buffer (device memory through the device's copies). */
static acc_result to_host(void *dst, const void *src, size_t bytes) {
  if (acc__devio_find(src)) return acc__devio_to_host(dst, src, bytes);
  memcpy(dst, src, bytes);
  return ACC_OK;
}

static acc_result from_host(void *dst, const void *src, size_t bytes) {
  if (acc__devio_find(dst)) return acc__devio_from_host(dst, src, bytes);
  memcpy(dst, src, bytes);
  return ACC_OK;
}

/* ---- save (collective, from save_state after its pre-hooks agreed) -------------------------- */

static acc_result save_group(acc_state *st, const zgroup *g, const char *dir) {
  const int n = acc_state_num_processes(st), main_proc = acc_state_process_index(st) == 0;
  const size_t shard = g->total ? (g->total + (size_t)n - 1) / (size_t)n : 1;
  unsigned char **mine = acc__calloc(g->n, sizeof *mine), **full = acc__calloc(g->n, sizeof *full);
  acc_result rc = mine && full ? ACC_OK : ACC_ERR_NOMEM;
  for (size_t i = 0; rc == ACC_OK && i < g->n; i++) {
    const zbuf *b = &g->bufs[i];
    size_t es = acc_dtype_size(b->dtype);
    mine[i] = acc__tmp_alloc(shard * es);
    full[i] = main_proc ? acc__tmp_alloc(shard * (size_t)n * es) : NULL;
    if (!mine[i] || (main_proc && !full[i])) {
      rc = acc__error(ACC_ERR_NOMEM, "save_state: no host memory to gather the program's sharded buffer '%s' of "
                      "'%s' (%zu bytes)", b->name, g->stem, shard * (size_t)n * es);
      break;
    }
    memset(mine[i], 0, shard * es); /* the padding of a short last range */
    if (!buf_ptr(b))
      rc = acc__error(ACC_ERR_INVALID_USAGE, "save_state: the program's sharded buffer '%s' of '%s' is not allocated",
                      b->name, g->stem);
    else
      rc = to_host(mine[i], buf_ptr(b), b->count * es);
  }
  /* every process staged its ranges (or none gathers) */
  rc = acc__state_agree(st, rc, "save_state (staging the program's sharded buffers)");
  for (size_t i = 0; rc == ACC_OK && i < g->n; i++)
    rc = acc_gather(st, mine[i], full[i], shard * acc_dtype_size(g->bufs[i].dtype), ACC_U8, 0);
  if (rc == ACC_OK && main_proc) {
    acc_tensor_view *v = acc__calloc(g->n, sizeof *v);
    if (!v) rc = ACC_ERR_NOMEM;
    for (size_t i = 0; v && i < g->n; i++) {
      v[i] = (acc_tensor_view){.name = g->bufs[i].name, .dtype = g->bufs[i].dtype, .ndim = 1, .data = full[i]};
      v[i].shape[0] = (int64_t)g->total;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, g->stem);
    if (v) rc = acc_safetensors_write(path, v, g->n, NULL, NULL, 0);
    acc__free(v);
  }
  for (size_t i = 0; i < g->n; i++) {
    if (mine) acc__tmp_free(mine[i]);
    if (full) acc__tmp_free(full[i]);
  }
  acc__free(mine);
  acc__free(full);
  return rc;
}

acc_result acc__zero_bufs_save(acc_state *st, acc__accel_ckpt *c, const char *dir) {
  zreg *r = c ? c->zbufs : NULL;
  for (size_t g = 0; r && g < r->ngroups; g++) ACC_CHECK(save_group(st, &r->groups[g], dir));
  return ACC_OK;
}

/* ---- load: staged by a pre-hook, written after the agreement -------------------------------- */

static acc_result stage_group(zgroup *g, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, g->stem);
  acc_safetensors *f = NULL;
  acc_result rc = acc__safetensors_open_fd(&f, path);
  if (rc != ACC_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", acc_last_error()); /* the message is rewritten next */
    return acc__error(rc, "load_state: the program's sharded buffers '%s': %s", g->stem, why);
  }
  for (size_t i = 0; rc == ACC_OK && i < g->n; i++) {
    zbuf *b = &g->bufs[i];
    acc_tensor_view v;
    size_t es = acc_dtype_size(b->dtype);
    if (acc_safetensors_find(f, b->name, &v) != ACC_OK) {
      rc = acc__error(ACC_ERR_NOT_FOUND, "load_state: '%s' has no tensor '%s' (the program's sharded buffer)", path,
                      b->name);
    } else if (v.dtype != b->dtype || v.ndim != 1 || (size_t)v.shape[0] != g->total) {
      rc = acc__error(ACC_ERR_MISMATCH,
                      "load_state: '%s' tensor '%s' is %s [%lld] (%d dimension%s) but the program's sharded buffer is "
                      "%s over a model of %zu elements; the checkpoint was saved for another model or buffer", path,
                      b->name, acc_dtype_name(v.dtype), v.ndim >= 1 ? (long long)v.shape[0] : 0LL, v.ndim,
                      v.ndim == 1 ? "" : "s", acc_dtype_name(b->dtype), g->total);
    } else if (!buf_ptr(b)) {
      rc = acc__error(ACC_ERR_INVALID_USAGE, "load_state: the program's sharded buffer '%s' of '%s' is not allocated",
                      b->name, g->stem);
    } else if (!(b->staged = acc__tmp_alloc(b->count * es > 0 ? b->count * es : 1))) {
      rc = ACC_ERR_NOMEM;
    } else {
      acc_tensor_view part = v; /* this process's range of the full tensor */
      part.data = (unsigned char *)v.data + g->first * es;
      part.nbytes = b->count * es;
      rc = acc__safetensors_pread(f, &part, b->staged);
    }
  }
  acc_safetensors_close(f);
  return rc;
}

static acc_result load_hook(acc_accelerator *acc, const char *dir, void *payload) {
  (void)acc;
  zreg *r = payload;
  unstage(r);
  for (size_t g = 0; g < r->ngroups; g++) {
    acc_result rc = stage_group(&r->groups[g], dir);
    if (rc != ACC_OK) {
      unstage(r);
      return rc;
    }
  }
  r->staged = 1;
  return ACC_OK;
}

acc_result acc__zero_bufs_commit(acc__accel_ckpt *c) {
  zreg *r = c ? c->zbufs : NULL;
  if (!r || !r->staged) return ACC_OK;
  for (size_t g = 0; g < r->ngroups; g++)
    for (size_t i = 0; i < r->groups[g].n; i++) {
      zbuf *b = &r->groups[g].bufs[i];
      ACC_CHECK(from_host(buf_ptr(b), b->staged, b->count * acc_dtype_size(b->dtype)));
    }
  return ACC_OK;
}

void acc__zero_bufs_release(acc__accel_ckpt *c) {
  if (c && c->zbufs) unstage(c->zbufs);
}

/* ---- registration ---------------------------------------------------------------------------- */

static acc_result get_reg(acc_accelerator *acc, zreg **out) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc_project_config *proj;
  ACC_CHECK(acc__accel_ckpt_project(&p, &proj));
  acc__accel_ckpt *c = *p.ckpt;
  if (!c->zbufs) {
    zreg *r = acc__calloc(1, sizeof *r);
    if (!r) return ACC_ERR_NOMEM;
    acc_result rc = acc_accelerator_register_load_state_pre_hook(acc, load_hook, r, "sharded program state (load)",
                                                                 NULL);
    if (rc != ACC_OK) {
      acc__free(r);
      return rc;
    }
    c->zbufs = r;
    c->zbufs_free = reg_free;
  }
  *out = c->zbufs;
  return ACC_OK;
}

acc_result acc_accelerator_register_zero_buffers(acc_accelerator *acc, const char *stem, acc_model *model,
                                                 const acc_named_buffer *bufs, size_t count) {
  static const char fn[] = "acc_accelerator_register_zero_buffers";
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  ACC_CHECK(acc__ckpt_check_group(fn, stem, bufs, count, 1)); /* the last ranges may be empty */
  size_t first = 0, n = 0;
  acc_result zr = acc_accelerator_zero_shard(acc, model, &first, &n);
  if (zr != ACC_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", acc_last_error()); /* the message is rewritten next */
    return acc__error(zr, "%s: '%s': %s", fn, stem, why);
  }
  acc_model *m = model ? model : acc_accelerator_model(acc, 0);
  for (size_t i = 0; i < count; i++)
    if (bufs[i].count != n)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: buffer '%s' of '%s' holds %zu elements, but this process's range of the model is %zu "
                        "elements (acc_accelerator_zero_shard: [%zu, %zu)); a sharded buffer holds exactly its range",
                        fn, bufs[i].name, stem, bufs[i].count, n, first, first + n);
  zreg *r;
  ACC_CHECK(get_reg(acc, &r));
  ACC_CHECK(acc__ckpt_claim_stem(acc__accelerator_ckpt(acc), fn, stem));
  zgroup *gs = acc__realloc(r->groups, (r->ngroups + 1) * sizeof *gs);
  if (!gs) return ACC_ERR_NOMEM;
  r->groups = gs;
  zgroup *g = &gs[r->ngroups];
  memset(g, 0, sizeof *g);
  g->stem = acc__strdup(stem);
  g->bufs = acc__calloc(count, sizeof *g->bufs);
  g->model = m;
  g->total = layout_total(m);
  g->first = first;
  acc_result rc = g->stem && g->bufs ? ACC_OK : ACC_ERR_NOMEM;
  for (size_t i = 0; rc == ACC_OK && i < count; i++) {
    g->bufs[i] = (zbuf){acc__strdup(bufs[i].name), bufs[i].dtype, bufs[i].data, bufs[i].count, bufs[i].fixed, NULL};
    g->n = i + 1;
    if (!g->bufs[i].name) rc = ACC_ERR_NOMEM;
  }
  if (rc != ACC_OK) {
    for (size_t i = 0; i < g->n; i++) acc__free(g->bufs[i].name);
    acc__free(g->bufs);
    acc__free(g->stem);
    return rc;
  }
  r->ngroups++;
  return ACC_OK;
}
