/* FSDP checkpoints (docs/fsdp.md, "Checkpoints"): SHARDED_STATE_DICT (each process writes its
 * ranges, self-describing files, resumable on any process count and strategy), FULL_STATE_DICT
 * (process 0 gathers and writes what acc_save_model writes), loading either into this run's
 * shards, and merge-weights. Ranges are kept in whole-table element coordinates, so a load does
 * not depend on how the saving run divided the table into units. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "accelerate.h"
#include "accelerate/fsdp.h"
#include "backend/collcheck.h"
#include "ckpt/accel_state.h"
#include "ckpt/ckpt_dir.h"
#include "ckpt/load_defer.h"
#include "core/fs.h"
#include "device/devio.h"
#include "train/fsdp.h"
#include "train/fsdp_mem.h"

#define FULL_MODEL "model.safetensors"
#define FULL_OPTIM "optimizer.safetensors"

static void shard_file_name(char *buf, size_t cap, int rank) {
  snprintf(buf, cap, "fsdp_shard_rank%d.safetensors", rank);
}

/* "name:numel;..." of every row: what a load compares. */
static char *rows_text(const acc_param_spec *rows, const size_t *numel, size_t n) {
  size_t cap = 64;
  for (size_t r = 0; r < n; r++) cap += strlen(rows[r].name) + 48;
  char *s = acc__malloc(cap), *p = s;
  if (!s) return NULL;
  *p = 0;
  for (size_t r = 0; r < n; r++) p += snprintf(p, cap - (size_t)(p - s), "%s:%zu;", rows[r].name, numel[r]);
  return s;
}

/* A shape as text "d0xd1x..." (empty for a scalar), and back. */
static void shape_text(char *buf, size_t cap, const acc_param_spec *row) {
  size_t len = 0;
  buf[0] = 0;
  for (int d = 0; d < row->ndim && len < cap; d++)
    len += (size_t)snprintf(buf + len, cap - len, d ? "x%" PRId64 : "%" PRId64, row->shape[d]);
}

/* "d0xd1;..." of every row ("-" for a scalar): merge-weights' shapes. */
static char *shapes_text(const acc_param_spec *rows, size_t n) {
  size_t cap = 16 + n * (ACC_MAX_DIMS * 21 + 2);
  char *s = acc__malloc(cap), *p = s;
  if (!s) return NULL;
  *p = 0;
  for (size_t r = 0; r < n; r++) {
    char one[ACC_MAX_DIMS * 21 + 1];
    shape_text(one, sizeof one, &rows[r]);
    p += snprintf(p, cap - (size_t)(p - s), "%s;", one[0] ? one : "-");
  }
  return s;
}

/* ---- agreement ----------------------------------------------------------------------------- */

/* Every process's status: the first failing process's message reaches every process. */
static acc_result agree(acc_fsdp *f, acc_result rc, const char *what) {
  if (f->world == 1) return rc;
  char msg[512] = "";
  if (rc != ACC_OK) snprintf(msg, sizeof msg, "%s", acc_last_error());
  int32_t mine = rc != ACC_OK ? f->rank + 1 : 0, first = 0;
  int32_t *all = acc__malloc((size_t)f->world * sizeof *all);
  if (!all) return ACC_ERR_NOMEM;
  acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(0, 5));
  acc_result c = acc_all_gather(f->st, &mine, all, 1, ACC_I32);
  for (int r = 0; c == ACC_OK && r < f->world; r++)
    if (all[r]) {
      first = all[r];
      break;
    }
  acc__free(all);
  if (c != ACC_OK) return c;
  if (!first) return ACC_OK;
  int code = rc;
  acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(1, 5));
  c = acc_broadcast(f->st, msg, sizeof msg, ACC_U8, first - 1);
  if (c == ACC_OK) {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(2, 5));
    c = acc_broadcast(f->st, &code, 1, ACC_I32, first - 1);
  }
  if (c != ACC_OK) return c;
  msg[sizeof msg - 1] = 0;
  if (first - 1 == f->rank) return acc__error(rc, "%s", msg);
  return acc__error(code ? (acc_result)code : ACC_ERR_REMOTE, "%s: process %d failed: %s", what, first - 1, msg);
}

/* ---- the optimizer's state over the shard model -------------------------------------------- */

/* State tensor i of opt as (unit k, buffer name); 0 when it is not a unit's. */
static int state_of(const acc_fsdp *f, const acc_optimizer *opt, size_t i, size_t *unit, const char **buf,
                    const float **data) {
  const char *name;
  size_t numel;
  if (acc_optimizer_state_get(opt, i, &name, data, &numel, NULL, NULL) != ACC_OK) return 0;
  for (size_t k = 0; k < f->nunits; k++) {
    char pre[600];
    snprintf(pre, sizeof pre, "state.%s.flat_param_shard.", f->units[k].name);
    if (strncmp(name, pre, strlen(pre)) == 0 && numel == f->units[k].shard) {
      *unit = k;
      *buf = name + strlen(pre);
      return 1;
    }
  }
  return 0;
}

/* ---- SHARDED_STATE_DICT ------------------------------------------------------------------- */

static acc_result write_sharded(acc_fsdp *f, const acc_optimizer *opt, const char *tmp_dir) {
  if (!f->sharded && f->rank != 0) return ACC_OK; /* NO_SHARD: process 0 holds everything */
  if (f->replica != 0) return ACC_OK; /* HYBRID: the first machine's processes write, the others hold replicas */
  size_t nstate = opt ? acc_optimizer_state_count(opt) : 0, nscal = opt ? acc_optimizer_scalar_count(opt) : 0;
  size_t cap = f->nunits * (1 + nstate), nt = 0;
  acc_tensor_view *v = acc__calloc(cap ? cap : 1, sizeof *v);
  char **names = acc__calloc(cap ? cap : 1, sizeof *names);
  size_t nmeta = 8 + f->nunits + nscal;
  char **keys = acc__calloc(nmeta, sizeof *keys), **vals = acc__calloc(nmeta, sizeof *vals);
  char *rows = rows_text(f->rows, f->row_numel, f->nrows);
  acc_result rc = (v && names && keys && vals && rows) ? ACC_OK : ACC_ERR_NOMEM;
  size_t nm = 0;
#define META(k, ...)                                                        \
  do {                                                                      \
    char tmpv[128];                                                         \
    snprintf(tmpv, sizeof tmpv, __VA_ARGS__);                               \
    keys[nm] = acc__strdup(k);                                              \
    vals[nm] = acc__strdup(tmpv);                                           \
    if (!keys[nm] || !vals[nm]) rc = ACC_ERR_NOMEM;                         \
    nm++;                                                                   \
  } while (0)
  if (rc == ACC_OK) {
    META("fsdp.format", "1");
    META("fsdp.world", "%d", f->world);
    META("fsdp.rank", "%d", f->srank);
    META("fsdp.files", "%d", f->sharded ? f->sworld : 1);
    META("fsdp.replicas", "%d", f->replicas);
    META("fsdp.strategy", "%d", f->strategy);
    keys[nm] = acc__strdup("fsdp.rows");
    vals[nm] = acc__strdup(rows);
    if (!keys[nm] || !vals[nm]) rc = ACC_ERR_NOMEM;
    nm++;
    char *shapes = shapes_text(f->rows, f->nrows);
    keys[nm] = acc__strdup("fsdp.shapes");
    vals[nm] = shapes;
    if (!keys[nm] || !vals[nm]) rc = ACC_ERR_NOMEM;
    nm++;
  }
  for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    char key[64];
    snprintf(key, sizeof key, "range.%zu", k);
    META(key, "%zu:%zu", u->off + u->lo, u->off + u->hi);
    if (u->hi == u->lo) continue;
    names[nt] = acc__malloc(32);
    if (!names[nt]) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    snprintf(names[nt], 32, "param.%zu", k);
    v[nt] = (acc_tensor_view){.name = names[nt], .dtype = ACC_F32, .ndim = 1, .data = f->master + u->shard_at};
    v[nt].shape[0] = (int64_t)(u->hi - u->lo);
    nt++;
  }
  for (size_t i = 0; i < nstate && rc == ACC_OK; i++) {
    size_t k;
    const char *buf;
    const float *data;
    if (!state_of(f, opt, i, &k, &buf, &data)) continue;
    const acc__fsdp_unit *u = &f->units[k];
    if (u->hi == u->lo) continue;
    size_t len = strlen(buf) + 32;
    names[nt] = acc__malloc(len);
    if (!names[nt]) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    snprintf(names[nt], len, "%s.%zu", buf, k);
    v[nt] = (acc_tensor_view){.name = names[nt], .dtype = ACC_F32, .ndim = 1, .data = data};
    v[nt].shape[0] = (int64_t)(u->hi - u->lo);
    nt++;
  }
  for (size_t i = 0; i < nscal && rc == ACC_OK; i++) {
    const char *sn;
    double val;
    if (acc_optimizer_scalar_get(opt, i, &sn, &val) != ACC_OK) continue;
    char key[96];
    snprintf(key, sizeof key, "opt.%s", sn);
    META(key, "%.17g", val);
  }
#undef META
  if (rc == ACC_OK) {
    char fname[64];
    shard_file_name(fname, sizeof fname, f->srank);
    char *path = acc__path_join(tmp_dir, fname);
    /* on a device the shards are written chunk by chunk through bounded host staging */
    char what[96];
    snprintf(what, sizeof what, "the FSDP shards of process %d", f->rank);
    rc = path ? acc__safetensors_write_src_meta(path, v, nt, (const char *const *)keys, (const char *const *)vals, nm,
                                                acc__ckpt_write_staged, what)
              : ACC_ERR_NOMEM;
    acc__free(path);
  }
  for (size_t i = 0; i < cap; i++) acc__free(names ? names[i] : NULL);
  for (size_t i = 0; i < nmeta; i++) {
    acc__free(keys ? keys[i] : NULL);
    acc__free(vals ? vals[i] : NULL);
  }
  acc__free(names);
  acc__free(v);
  acc__free(keys);
  acc__free(vals);
  acc__free(rows);
  return rc;
}

/* ---- FULL_STATE_DICT ------------------------------------------------------------------------ */

/* The full values of one per-unit buffer (the master weights, or an optimizer state buffer),
 * gathered unit by unit to process 0 into full (total floats; process 0 only). src(k): this
 * process's shard of unit k. */
static acc_result gather_full(acc_fsdp *f, const float *const *src, float *full, float *tmp) {
  for (size_t k = 0; k < f->nunits; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    if (!f->sharded) {
      if (f->rank == 0) ACC_CHECK(acc__devio_to_host(full + u->off, src[k], u->numel * sizeof(float)));
      continue;
    }
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(k, 5));
    ACC_CHECK(acc_gather(f->st, src[k], f->rank == 0 ? tmp : NULL, u->shard, ACC_F32, 0));
    if (f->rank == 0) memcpy(full + u->off, tmp, u->numel * sizeof(float));
  }
  return ACC_OK;
}

/* A model over `full` with the table's rows (for acc_save_model's exact file). */
static acc_result full_model(const acc_param_spec *rows, size_t nrows, float *full, acc_model **out) {
  ACC_CHECK(acc_model_create(out));
  acc_result rc = acc_model_add_flat(*out, rows, nrows, full, NULL, NULL);
  if (rc != ACC_OK) {
    acc_model_destroy(*out);
    *out = NULL;
  }
  return rc;
}

static acc_result write_full(acc_fsdp *f, const acc_optimizer *opt, const char *dir, int weights_only) {
  int main = f->rank == 0;
  float *full = main ? acc__calloc(f->total ? f->total : 1, sizeof(float)) : NULL;
  /* a unit's gather: S floats from every process (HYBRID: every machine's replicas too; the first
   * machine's processes, ranks 0 .. sworld - 1, hold the whole unit) */
  size_t tmp_elems = f->sharded ? f->buf_elems / (size_t)f->sworld * (size_t)f->world : f->buf_elems;
  float *tmp = main ? acc__malloc((tmp_elems ? tmp_elems : 1) * sizeof(float)) : NULL;
  const float **src = acc__calloc(f->nunits, sizeof *src);
  acc_result rc = (!main || (full && tmp)) && src ? ACC_OK : ACC_ERR_NOMEM;
  rc = agree(f, rc, "FSDP full state dict");
  for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++) src[k] = f->master + f->units[k].shard_at;
  if (rc == ACC_OK) rc = gather_full(f, src, full, tmp);
  acc_result wrc = ACC_OK;
  if (rc == ACC_OK && main) {
    acc_model *m = NULL;
    wrc = full_model(f->rows, f->nrows, full, &m);
    if (wrc == ACC_OK) wrc = acc_save_model(NULL, m, dir, 0, ACC_F32);
    acc_model_destroy(m);
  }
  /* the optimizer: one full tensor per row and buffer, "state.<row>.<buffer>", scalars as metadata */
  size_t nstate = opt && !weights_only ? acc_optimizer_state_count(opt) : 0;
  size_t nbuf = nstate / (f->nunits ? f->nunits : 1);
  float **bufs = acc__calloc(nbuf + 1, sizeof *bufs);
  const char **bufnames = acc__calloc(nbuf + 1, sizeof *bufnames);
  if (!bufs || !bufnames) rc = ACC_ERR_NOMEM;
  size_t nb = 0;
  for (size_t b = 0; b < nbuf && rc == ACC_OK; b++) {
    /* buffer b of every unit: state tensors come in parameter order, nbuf per parameter */
    const char *bname = NULL;
    for (size_t k = 0; k < f->nunits; k++) {
      size_t unit;
      const char *buf;
      const float *data;
      if (!state_of(f, opt, k * nbuf + b, &unit, &buf, &data)) {
        rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "acc_fsdp_save_state: the optimizer is not one over acc_fsdp_model (state tensor %zu)",
                        k * nbuf + b);
        break;
      }
      src[unit] = data;
      bname = buf;
    }
    if (rc != ACC_OK) break;
    bufs[nb] = main ? acc__calloc(f->total ? f->total : 1, sizeof(float)) : NULL;
    if (main && !bufs[nb]) rc = ACC_ERR_NOMEM;
    bufnames[nb++] = bname;
    if (rc == ACC_OK) rc = gather_full(f, src, bufs[nb - 1], tmp);
  }
  if (rc == ACC_OK && wrc == ACC_OK && main && opt && !weights_only) {
    size_t nt = nb * f->nrows, nscal = acc_optimizer_scalar_count(opt);
    acc_tensor_view *v = acc__calloc(nt ? nt : 1, sizeof *v);
    char **names = acc__calloc(nt ? nt : 1, sizeof *names);
    char **keys = acc__calloc(nscal + 1, sizeof *keys), **vals = acc__calloc(nscal + 1, sizeof *vals);
    if (!v || !names || !keys || !vals) wrc = ACC_ERR_NOMEM;
    size_t t = 0;
    for (size_t b = 0; b < nb && wrc == ACC_OK; b++)
      for (size_t r = 0; r < f->nrows && wrc == ACC_OK; r++) {
        size_t len = strlen(f->rows[r].name) + strlen(bufnames[b]) + 16;
        names[t] = acc__malloc(len);
        if (!names[t]) {
          wrc = ACC_ERR_NOMEM;
          break;
        }
        snprintf(names[t], len, "state.%s.%s", f->rows[r].name, bufnames[b]);
        v[t] = (acc_tensor_view){.name = names[t], .dtype = ACC_F32, .ndim = f->rows[r].ndim,
                                 .data = bufs[b] + f->row_off[r]};
        memcpy(v[t].shape, f->rows[r].shape, sizeof v[t].shape);
        t++;
      }
    size_t nk = 0;
    for (size_t i = 0; i < nscal && wrc == ACC_OK; i++) {
      const char *sn;
      double val;
      if (acc_optimizer_scalar_get(opt, i, &sn, &val) != ACC_OK) continue;
      char tv[64];
      snprintf(tv, sizeof tv, "%.17g", val);
      keys[nk] = acc__strdup(sn);
      vals[nk] = acc__strdup(tv);
      if (!keys[nk] || !vals[nk]) wrc = ACC_ERR_NOMEM;
      nk++;
    }
    char *path = acc__path_join(dir, FULL_OPTIM);
    if (wrc == ACC_OK)
      wrc = path ? acc_safetensors_write(path, v, t, (const char *const *)keys, (const char *const *)vals, nk)
                 : ACC_ERR_NOMEM;
    acc__free(path);
    for (size_t i = 0; i < nt; i++) acc__free(names ? names[i] : NULL);
    for (size_t i = 0; i <= nscal; i++) {
      acc__free(keys ? keys[i] : NULL);
      acc__free(vals ? vals[i] : NULL);
    }
    acc__free(names);
    acc__free(v);
    acc__free(keys);
    acc__free(vals);
  }
  for (size_t b = 0; b < nb; b++) acc__free(bufs[b]);
  acc__free(bufs);
  acc__free(bufnames);
  acc__free(src);
  acc__free(full);
  acc__free(tmp);
  if (rc != ACC_OK) return rc;
  return wrc;
}

acc_result acc_fsdp_save_state(acc_fsdp *f, const acc_optimizer *opt, const char *dir) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_save_state"));
  ACC_CHECK(acc__fsdp_settle(f));
  if (!dir || !*dir) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_save_state: the directory is empty");
  if (opt && acc_optimizer_model((acc_optimizer *)opt) != f->model)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_save_state: the optimizer was not created over acc_fsdp_model of this FSDP state");
  acc__ckpt_txn txn = {0};
  /* on a device: the optimizer's state into its host buffers, which the files are written from */
  acc_result rc = acc__fsdp_optim_sync(f, (acc_optimizer *)opt, 1);
  if (rc == ACC_OK) rc = acc__fsdp_mem_sync(f);
  if (f->rank == 0 && rc == ACC_OK) rc = acc__ckpt_begin(&txn, dir);
  rc = agree(f, rc, "acc_fsdp_save_state");
  if (rc != ACC_OK) return rc;
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  char *tmp_dir = acc__malloc(n + sizeof ACC__CKPT_TMP_SUFFIX);
  if (tmp_dir) {
    memcpy(tmp_dir, dir, n);
    memcpy(tmp_dir + n, ACC__CKPT_TMP_SUFFIX, sizeof ACC__CKPT_TMP_SUFFIX);
  }
  rc = tmp_dir ? ACC_OK : ACC_ERR_NOMEM;
  if (rc == ACC_OK)
    rc = f->sdt == ACC_FSDP_FULL_STATE_DICT ? write_full(f, opt, tmp_dir, 0) : write_sharded(f, opt, tmp_dir);
  rc = agree(f, rc, "acc_fsdp_save_state");
  acc__free(tmp_dir);
  if (f->rank == 0) {
    if (rc == ACC_OK) rc = acc__ckpt_commit(&txn);
    else acc__ckpt_abort(&txn);
  }
  return agree(f, rc, "acc_fsdp_save_state");
}

acc_result acc_fsdp_save_model(acc_fsdp *f, const char *dir) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_save_model"));
  ACC_CHECK(acc__fsdp_settle(f));
  if (!dir || !*dir) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_save_model: the directory is empty");
  acc_result rc = write_full(f, NULL, dir, 1);
  return agree(f, rc, "acc_fsdp_save_model");
}

/* ---- loading ------------------------------------------------------------------------------- */

/* One saved piece: table elements [a, b) of buffer `buf` ("param" or an optimizer buffer). */
typedef struct piece {
  size_t a, b;
  const float *data; /* borrowed from the open file, maybe unaligned: memcpy */
} piece;

/* Copies the part of [a, b) (whole-table coordinates, data at `src`) that falls into this
 * process's range of each unit, into dst (laid out like master). */
static void scatter_in(const acc_fsdp *f, size_t a, size_t b, const void *src, float *dst, unsigned char *seen) {
  for (size_t k = 0; k < f->nunits; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    size_t lo = u->off + u->lo, hi = u->off + u->hi;
    size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
    if (s >= e) continue;
    memcpy(dst + u->shard_at + (s - lo), (const char *)src + (s - a) * sizeof(float), (e - s) * sizeof(float));
    if (seen) memset(seen + u->shard_at + (s - lo), 1, e - s);
  }
}

static acc_result check_rows(const acc_fsdp *f, const char *saved, const char *path) {
  char *mine = rows_text(f->rows, f->row_numel, f->nrows);
  if (!mine) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  if (!saved) {
    rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: '%s' is not an FSDP shard (no fsdp.rows metadata)", path);
  } else if (strcmp(mine, saved) != 0) {
    /* name the first row that differs */
    const char *p = mine, *q = saved;
    size_t row = 0;
    while (*p && *q) {
      const char *pe = strchr(p, ';'), *qe = strchr(q, ';');
      if (!pe || !qe || pe - p != qe - q || memcmp(p, q, (size_t)(pe - p)) != 0) break;
      p = pe + 1;
      q = qe + 1;
      row++;
    }
    const char *qe = strchr(q, ';');
    rc = acc__error(ACC_ERR_MISMATCH,
                    "acc_fsdp_load_state: '%s' was saved from another table: row %zu is '%.*s' there (name:elements) "
                    "but '%s:%zu' here", path, row, qe ? (int)(qe - q) : (int)strlen(q), q,
                    row < f->nrows ? f->rows[row].name : "(none)", row < f->nrows ? f->row_numel[row] : (size_t)0);
  }
  acc__free(mine);
  return rc;
}

/* Staged values: a load fills these, and only a load every process finished is committed. */
typedef struct staged {
  float *master;
  size_t nbuf;
  char **bufname;
  float **buf;
  unsigned char *seen;
  char **sname;
  double *sval;
  size_t nscal;
} staged;

static void staged_free(staged *s) {
  acc__free(s->master);
  for (size_t b = 0; b < s->nbuf; b++) {
    acc__free(s->bufname[b]);
    acc__free(s->buf[b]);
  }
  acc__free(s->bufname);
  acc__free(s->buf);
  acc__free(s->seen);
  for (size_t i = 0; i < s->nscal; i++) acc__free(s->sname[i]);
  acc__free(s->sname);
  acc__free(s->sval);
}

static acc_result staged_buf(const acc_fsdp *f, staged *s, const char *name, float **out) {
  for (size_t b = 0; b < s->nbuf; b++)
    if (strcmp(s->bufname[b], name) == 0) {
      *out = s->buf[b];
      return ACC_OK;
    }
  char **nn = acc__realloc(s->bufname, (s->nbuf + 1) * sizeof *nn);
  if (!nn) return ACC_ERR_NOMEM;
  s->bufname = nn;
  float **nb = acc__realloc(s->buf, (s->nbuf + 1) * sizeof *nb);
  if (!nb) return ACC_ERR_NOMEM;
  s->buf = nb;
  s->bufname[s->nbuf] = acc__strdup(name);
  s->buf[s->nbuf] = acc__calloc(f->shard_total ? f->shard_total : 1, sizeof(float));
  if (!s->bufname[s->nbuf] || !s->buf[s->nbuf]) {
    acc__free(s->bufname[s->nbuf]);
    acc__free(s->buf[s->nbuf]);
    return ACC_ERR_NOMEM;
  }
  *out = s->buf[s->nbuf++];
  return ACC_OK;
}

static acc_result staged_scalar(staged *s, const char *name, const char *text) {
  char **nn = acc__realloc(s->sname, (s->nscal + 1) * sizeof *nn);
  if (!nn) return ACC_ERR_NOMEM;
  s->sname = nn;
  double *nv = acc__realloc(s->sval, (s->nscal + 1) * sizeof *nv);
  if (!nv) return ACC_ERR_NOMEM;
  s->sval = nv;
  s->sname[s->nscal] = acc__strdup(name);
  if (!s->sname[s->nscal]) return ACC_ERR_NOMEM;
  s->sval[s->nscal++] = strtod(text, NULL);
  return ACC_OK;
}

static acc_result load_sharded_file(const acc_fsdp *f, staged *s, const char *path, int want_scalars) {
  acc_safetensors *st = NULL;
  ACC_CHECK(acc_safetensors_open(&st, path));
  acc_result rc = check_rows(f, acc_safetensors_metadata(st, "fsdp.rows"), path);
  size_t nt = acc_safetensors_count(st);
  for (size_t i = 0; i < nt && rc == ACC_OK; i++) {
    acc_tensor_view v;
    rc = acc_safetensors_tensor(st, i, &v);
    if (rc != ACC_OK) break;
    const char *dot = strrchr(v.name, '.');
    char key[64];
    const char *range = NULL;
    if (dot) {
      snprintf(key, sizeof key, "range.%s", dot + 1);
      range = acc_safetensors_metadata(st, key);
    }
    size_t a = 0, b = 0;
    if (!dot || !range || sscanf(range, "%zu:%zu", &a, &b) != 2 || b < a || b > f->total || v.dtype != ACC_F32 ||
        v.ndim != 1 || (size_t)v.shape[0] != b - a) {
      rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: tensor '%s' of '%s' has no valid range (or is not a "
                      "1-d f32 tensor of the range's length)", v.name, path);
      break;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)(dot - v.name), v.name);
    float *dst = s->master;
    if (strcmp(buf, "param") == 0) {
      scatter_in(f, a, b, v.data, dst, s->seen);
      continue;
    }
    rc = staged_buf(f, s, buf, &dst);
    if (rc == ACC_OK) scatter_in(f, a, b, v.data, dst, NULL);
  }
  size_t nm = acc_safetensors_metadata_count(st);
  for (size_t i = 0; i < nm && rc == ACC_OK && want_scalars; i++) {
    const char *k, *val;
    if (acc_safetensors_metadata_at(st, i, &k, &val) != ACC_OK) continue;
    if (strncmp(k, "opt.", 4) == 0) rc = staged_scalar(s, k + 4, val);
  }
  acc_safetensors_close(st);
  return rc;
}

/* An accelerator's save_state (any ZeRO stage) writes the same model.safetensors and
 * optimizer.safetensors (state.<row>.<buffer>) as a FULL_STATE_DICT, but its optimizer scalars
 * (kind, step, lr, ...) in optimizer.json rather than in the tensors file's metadata: read them
 * from there, so such a checkpoint resumes under FSDP with its step count (docs/fsdp.md). */
static acc_result load_accel_scalars(staged *s, const char *dir) {
  char *path = acc__path_join(dir, "optimizer.json");
  if (!path) return ACC_ERR_NOMEM;
  if (!acc__is_file(path)) {
    acc__free(path);
    return ACC_OK;
  }
  json_t *j = NULL;
  json_error_t err;
  acc_result rc = acc__json_load_regular(path, "checkpoint file", 0, &j, &err);
  if (rc == ACC_OK && !j)
    rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: checkpoint file '%s' is not valid JSON (line %d: %s)", path,
                    err.line, err.text);
  else if (rc == ACC_OK && !json_is_object(j))
    rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: checkpoint file '%s' must hold a JSON object", path);
  const char *key;
  json_t *v;
  if (rc == ACC_OK) json_object_foreach(j, key, v) {
      if (strncmp(key, "group", 5) == 0) {
        rc = acc__error(ACC_ERR_MISMATCH, "acc_fsdp_load_state: '%s' holds parameter group scalar '%s': the optimizer "
                        "over FSDP shards has one group, so a checkpoint of several groups cannot resume under FSDP",
                        path, key);
        break;
      }
      if (!json_is_number(v)) {
        rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: checkpoint file '%s': \"%s\" is not a number", path, key);
        break;
      }
      char text[40];
      snprintf(text, sizeof text, "%.17g", json_number_value(v));
      rc = staged_scalar(s, key, text);
      if (rc != ACC_OK) break;
    }
  json_decref(j);
  acc__free(path);
  return rc;
}

static acc_result load_full_files(const acc_fsdp *f, staged *s, const char *dir) {
  char *path = acc__path_join(dir, FULL_MODEL);
  if (!path) return ACC_ERR_NOMEM;
  acc_safetensors *st = NULL;
  acc_result rc = acc_safetensors_open(&st, path);
  for (size_t r = 0; r < f->nrows && rc == ACC_OK; r++) {
    acc_tensor_view v;
    rc = acc_safetensors_find(st, f->rows[r].name, &v);
    if (rc != ACC_OK) {
      rc = acc__error(ACC_ERR_MISMATCH, "acc_fsdp_load_state: '%s' has no tensor '%s' (row %zu of the table)", path,
                      f->rows[r].name, r);
      break;
    }
    if (v.dtype != ACC_F32 || v.nbytes != f->row_numel[r] * sizeof(float)) {
      rc = acc__error(ACC_ERR_MISMATCH, "acc_fsdp_load_state: tensor '%s' of '%s' is %s with %zu bytes; the table's "
                      "row %zu needs f32 with %zu", f->rows[r].name, path, acc_dtype_name(v.dtype), v.nbytes, r,
                      f->row_numel[r] * sizeof(float));
      break;
    }
    scatter_in(f, f->row_off[r], f->row_off[r] + f->row_numel[r], v.data, s->master, s->seen);
  }
  acc_safetensors_close(st);
  acc__free(path);
  if (rc != ACC_OK) return rc;
  path = acc__path_join(dir, FULL_OPTIM);
  if (!path) return ACC_ERR_NOMEM;
  if (!acc__is_file(path)) {
    acc__free(path);
    return ACC_OK;
  }
  rc = acc_safetensors_open(&st, path);
  size_t nt = rc == ACC_OK ? acc_safetensors_count(st) : 0;
  for (size_t i = 0; i < nt && rc == ACC_OK; i++) {
    acc_tensor_view v;
    rc = acc_safetensors_tensor(st, i, &v);
    if (rc != ACC_OK) break;
    for (size_t r = 0; r < f->nrows; r++) {
      size_t ln = strlen(f->rows[r].name);
      if (strncmp(v.name, "state.", 6) || strncmp(v.name + 6, f->rows[r].name, ln) || v.name[6 + ln] != '.') continue;
      if (v.nbytes != f->row_numel[r] * sizeof(float)) continue;
      float *dst;
      rc = staged_buf(f, s, v.name + 7 + ln, &dst);
      if (rc == ACC_OK) scatter_in(f, f->row_off[r], f->row_off[r] + f->row_numel[r], v.data, dst, NULL);
      break;
    }
  }
  size_t nm = rc == ACC_OK ? acc_safetensors_metadata_count(st) : 0;
  for (size_t i = 0; i < nm && rc == ACC_OK; i++) {
    const char *k, *val;
    if (acc_safetensors_metadata_at(st, i, &k, &val) != ACC_OK || strcmp(k, "format") == 0) continue;
    rc = staged_scalar(s, k, val);
  }
  acc_safetensors_close(st);
  acc__free(path);
  if (rc == ACC_OK && s->nscal == 0) rc = load_accel_scalars(s, dir);
  return rc;
}

static acc_result read_all(const acc_fsdp *f, const char *dir, staged *s) {
  if (!acc_checkpoint_is_complete(dir))
    return acc__error(ACC_ERR_NOT_FOUND,
                      "acc_fsdp_load_state: '%s' is not a complete checkpoint (missing, or a save that was interrupted)",
                      dir);
  char name[64];
  shard_file_name(name, sizeof name, 0);
  char *p0 = acc__path_join(dir, name);
  if (!p0) return ACC_ERR_NOMEM;
  int sharded = acc__is_file(p0);
  acc_result rc = ACC_OK;
  if (!sharded) {
    rc = load_full_files(f, s, dir);
  } else {
    acc_safetensors *st = NULL;
    rc = acc_safetensors_open(&st, p0);
    const char *nf = rc == ACC_OK ? acc_safetensors_metadata(st, "fsdp.files") : NULL;
    long files = nf ? strtol(nf, NULL, 10) : 0;
    acc_safetensors_close(st);
    if (rc == ACC_OK && files < 1)
      rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: '%s' does not say how many shard files there are", p0);
    /* every file is opened (a small header each); only the ranges that overlap ours are copied */
    for (long r = 0; r < files && rc == ACC_OK; r++) {
      shard_file_name(name, sizeof name, (int)r);
      char *p = acc__path_join(dir, name);
      if (!p) rc = ACC_ERR_NOMEM;
      if (rc == ACC_OK && !acc__is_file(p))
        rc = acc__error(ACC_ERR_NOT_FOUND, "acc_fsdp_load_state: shard file '%s' is missing (the checkpoint has %ld)",
                        p, files);
      if (rc == ACC_OK) rc = load_sharded_file(f, s, p, r == 0);
      acc__free(p);
    }
  }
  acc__free(p0);
  for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    for (size_t i = 0; i < u->hi - u->lo; i++)
      if (!s->seen[u->shard_at + i]) {
        rc = acc__error(ACC_ERR_FORMAT, "acc_fsdp_load_state: '%s' holds no value for element %zu of unit '%s'", dir,
                        u->lo + i, u->name);
        break;
      }
  }
  return rc;
}

/* Checks that opt can take the staged state (before anything changes). */
static acc_result check_optimizer(const acc_fsdp *f, const acc_optimizer *opt, const staged *s, const char *dir) {
  if (!opt) return ACC_OK;
  for (size_t i = 0; i < s->nscal; i++)
    if (strcmp(s->sname[i], "kind") == 0 && (int)s->sval[i] != (int)acc_optimizer_get_kind(opt))
      return acc__error(ACC_ERR_MISMATCH, "acc_fsdp_load_state: '%s' holds the state of a%s optimizer, this one is %s",
                        dir, (int)s->sval[i] == 1 ? "n AdamW" : " SGD",
                        acc_optimizer_get_kind(opt) == ACC_OPTIMIZER_ADAMW ? "AdamW" : "SGD");
  /* every scalar must be one this optimizer has: a failure after the commit would leave it half set */
  size_t n = acc_optimizer_scalar_count(opt);
  for (size_t i = 0; i < s->nscal; i++) {
    int found = 0;
    for (size_t j = 0; j < n && !found; j++) {
      const char *name;
      double v;
      found = acc_optimizer_scalar_get(opt, j, &name, &v) == ACC_OK && strcmp(name, s->sname[i]) == 0;
    }
    if (!found)
      return acc__error(ACC_ERR_MISMATCH, "acc_fsdp_load_state: '%s' holds optimizer scalar '%s', which this optimizer "
                        "does not have (another optimizer configuration)", dir, s->sname[i]);
  }
  (void)f;
  return ACC_OK;
}

acc_result acc_fsdp_load_state(acc_fsdp *f, acc_optimizer *opt, const char *dir) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_load_state"));
  ACC_CHECK(acc__fsdp_settle(f));
  if (!dir || !*dir) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_load_state: the directory is empty");
  if (opt && acc_optimizer_model(opt) != f->model)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_load_state: the optimizer was not created over acc_fsdp_model of this FSDP state");
  staged s = {0};
  s.master = acc__calloc(f->shard_total ? f->shard_total : 1, sizeof(float));
  s.seen = acc__calloc(f->shard_total ? f->shard_total : 1, 1);
  acc_result rc = s.master && s.seen ? ACC_OK : ACC_ERR_NOMEM;
  if (rc == ACC_OK) rc = read_all(f, dir, &s);
  if (rc == ACC_OK) rc = check_optimizer(f, opt, &s, dir);
  rc = agree(f, rc, "acc_fsdp_load_state");
  if (rc != ACC_OK) {
    staged_free(&s);
    return rc;
  }
  /* commit: every process read everything it needs */
  rc = acc__fsdp_mem_in(f, f->master, s.master, f->shard_total);
  if (rc == ACC_OK) rc = acc__fsdp_mem_zero(f, f->gshard, f->shard_total);
  acc__fsdp_pool_free(f);
  for (size_t k = 0; opt && k < f->nunits && rc == ACC_OK; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    char pname[600];
    snprintf(pname, sizeof pname, "%s.flat_param_shard", u->name);
    for (size_t b = 0; b < s.nbuf && rc == ACC_OK; b++) {
      char sn[700];
      snprintf(sn, sizeof sn, "state.%s.%s", pname, s.bufname[b]);
      int64_t shape[1] = {(int64_t)u->shard};
      rc = acc_optimizer_state_set(opt, sn, s.buf[b] + u->shard_at, u->shard, 1, shape);
    }
  }
  for (size_t i = 0; opt && i < s.nscal && rc == ACC_OK; i++) rc = acc_optimizer_scalar_set(opt, s.sname[i], s.sval[i]);
  if (rc == ACC_OK) rc = acc__fsdp_optim_sync(f, opt, 0); /* on a device: the loaded state into its copy */
  staged_free(&s);
  return rc;
}

/* ---- merge-weights --------------------------------------------------------------------------- */

/* Parses "name:numel;..." into rows with 1-d shapes (merge-weights names and shapes come from
 * the rank-0 file's fsdp.shapes). */
acc_result acc_fsdp_merge_weights(const char *sharded_dir, const char *out_dir) {
  if (!sharded_dir || !*sharded_dir || !out_dir || !*out_dir)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_merge_weights: a directory is empty");
  if (!acc_checkpoint_is_complete(sharded_dir))
    return acc__error(ACC_ERR_NOT_FOUND, "accelerate merge-weights: '%s' is not a complete checkpoint directory",
                      sharded_dir);
  char name[64];
  shard_file_name(name, sizeof name, 0);
  char *p0 = acc__path_join(sharded_dir, name);
  if (!p0) return ACC_ERR_NOMEM;
  acc_safetensors *st = NULL;
  acc_result rc = acc__is_file(p0) ? acc_safetensors_open(&st, p0)
                                   : acc__error(ACC_ERR_FORMAT, "accelerate merge-weights: '%s' holds no %s: not a "
                                                "SHARDED_STATE_DICT checkpoint", sharded_dir, name);
  acc__free(p0);
  if (rc != ACC_OK) return rc;
  const char *rows = acc_safetensors_metadata(st, "fsdp.rows"), *shapes = acc_safetensors_metadata(st, "fsdp.shapes");
  const char *nf = acc_safetensors_metadata(st, "fsdp.files");
  long files = nf ? strtol(nf, NULL, 10) : 0;
  char *rows_c = rows ? acc__strdup(rows) : NULL, *shapes_c = shapes ? acc__strdup(shapes) : NULL;
  acc_safetensors_close(st);
  if (!rows_c || !shapes_c || files < 1) {
    acc__free(rows_c);
    acc__free(shapes_c);
    return acc__error(ACC_ERR_FORMAT, "accelerate merge-weights: the shard files of '%s' lack their table (fsdp.rows, "
                      "fsdp.shapes, fsdp.files)", sharded_dir);
  }
  size_t n = 0;
  for (const char *p = rows_c; *p; p++) n += *p == ';';
  acc_param_spec *spec = acc__calloc(n ? n : 1, sizeof *spec);
  size_t total = 0;
  rc = spec ? ACC_OK : ACC_ERR_NOMEM;
  char *save1 = NULL, *save2 = NULL;
  char *tok = rc == ACC_OK ? strtok_r(rows_c, ";", &save1) : NULL, *stok = strtok_r(shapes_c, ";", &save2);
  for (size_t r = 0; r < n && rc == ACC_OK; r++) {
    char *colon = tok ? strrchr(tok, ':') : NULL;
    if (!colon || !stok) {
      rc = acc__error(ACC_ERR_FORMAT, "accelerate merge-weights: row %zu of the table in '%s' is malformed", r,
                      sharded_dir);
      break;
    }
    *colon = 0;
    spec[r].name = tok;
    size_t numel = strtoull(colon + 1, NULL, 10), prod = 1;
    spec[r].ndim = 0;
    for (char *q = stok; *q && spec[r].ndim < ACC_MAX_DIMS;) {
      spec[r].shape[spec[r].ndim++] = strtoll(q, &q, 10);
      prod *= (size_t)spec[r].shape[spec[r].ndim - 1];
      if (*q == 'x') q++;
    }
    if (*stok == '-') spec[r].ndim = 0, prod = 1;
    if (prod != numel)
      rc = acc__error(ACC_ERR_FORMAT, "accelerate merge-weights: row '%s' of '%s': shape and element count disagree",
                      tok, sharded_dir);
    total += numel;
    tok = strtok_r(NULL, ";", &save1);
    stok = strtok_r(NULL, ";", &save2);
  }
  float *full = rc == ACC_OK ? acc__calloc(total ? total : 1, sizeof(float)) : NULL;
  if (rc == ACC_OK && !full) rc = ACC_ERR_NOMEM;
  for (long r = 0; r < files && rc == ACC_OK; r++) {
    shard_file_name(name, sizeof name, (int)r);
    char *p = acc__path_join(sharded_dir, name);
    rc = p ? acc_safetensors_open(&st, p) : ACC_ERR_NOMEM;
    size_t nt = rc == ACC_OK ? acc_safetensors_count(st) : 0;
    for (size_t i = 0; i < nt && rc == ACC_OK; i++) {
      acc_tensor_view v;
      rc = acc_safetensors_tensor(st, i, &v);
      if (rc != ACC_OK || strncmp(v.name, "param.", 6) != 0) continue;
      char key[64];
      snprintf(key, sizeof key, "range.%s", v.name + 6);
      const char *range = acc_safetensors_metadata(st, key);
      size_t a, b;
      if (!range || sscanf(range, "%zu:%zu", &a, &b) != 2 || b < a || b > total || v.nbytes != (b - a) * sizeof(float))
        rc = acc__error(ACC_ERR_FORMAT, "accelerate merge-weights: tensor '%s' of '%s' has no valid range", v.name, p);
      else
        memcpy(full + a, v.data, (b - a) * sizeof(float));
    }
    if (st) acc_safetensors_close(st);
    st = NULL;
    acc__free(p);
  }
  if (rc == ACC_OK) {
    acc_model *m = NULL;
    rc = full_model(spec, n, full, &m);
    if (rc == ACC_OK) rc = acc_save_model(NULL, m, out_dir, 0, ACC_F32);
    acc_model_destroy(m);
  }
  acc__free(full);
  acc__free(spec);
  acc__free(rows_c);
  acc__free(shapes_c);
  return rc;
}
