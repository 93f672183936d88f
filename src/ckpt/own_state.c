/* The state a program keeps itself, in save_state / load_state (include/accelerate/program_state.h):
 * groups of named buffers (its own optimizer's moments, a step counter) saved from the main
 * process as <stem>.safetensors, and per-process objects saved by every process as
 * process_object_<i>_<process>.bin. Both ride on one save and one load pre-hook of the
 * accelerator (ckpt/accel_state.c), so their results join the processes' agreement there.
 *
 * Loading is staged like the model and the optimizer: the load pre-hook only checks every file
 * (buffers: names, dtypes, sizes, bytes readable, like load_defer.c; objects: read into memory);
 * nothing of the program's changes. Once the rest of the checkpoint loaded, acc__own_state_commit
 * allocates the buffers the program left NULL and calls the objects' load callbacks, and puts
 * that back when a later check fails on any process (acc__own_state_rollback); the buffers' bytes
 * are read in last, with pread, once every process agreed (acc__own_state_read_in). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/accel_state.h"
#include "ckpt/load_defer.h"
#include "core/fs.h"
#include "device/devio.h"

typedef struct own_buf {
  char *name;
  acc_dtype dtype;
  void **data; /* the program's pointer, or &fixed */
  size_t count;
  void *fixed;
} own_buf;

typedef struct own_group {
  char *stem;
  own_buf *bufs;
  size_t n;
} own_group;

typedef struct own_obj {
  void *obj;
  acc_checkpoint_save_fn save;
  acc_checkpoint_load_fn load;
} own_obj;

/* Bytes read from a checkpoint, or kept to put the program's back. */
typedef struct own_bytes {
  void *data; /* objects: the bytes; buffers: NULL (read in from file / view by read_in) */
  const acc_safetensors *file;
  acc_tensor_view view;
  size_t len;
  int present; /* staged: in the file; kept: the buffer was allocated (objects: saved) */
  int allocated; /* commit: the library allocated the program's buffer (NULL before) */
} own_bytes;

typedef struct own_reg {
  own_group *groups;
  size_t ngroups;
  own_obj *objs;
  size_t nobjs;
  /* one load_state: what its pre-hook staged (every buffer of every group, then every object),
   * what the commit replaced, and how far it got */
  own_bytes *staged, *kept;
  acc_safetensors **files; /* one per group, open until the staging is dropped */
  size_t nslots;
  unsigned char *stage_buf; /* the host staging of device buffers, taken by the pre-hook (so the
                               read-in after the agreement allocates nothing) */
  size_t stage_len;
  int stage_ok;   /* the pre-hook of the current load_state staged everything */
  size_t applied; /* slots committed so far */
} own_reg;

static own_buf *slot_buf(own_reg *r, size_t k);

static size_t nbufs_total(const own_reg *r) {
  size_t n = 0;
  for (size_t g = 0; g < r->ngroups; g++) n += r->groups[g].n;
  return n;
}

static void bytes_free(own_bytes *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) acc__tmp_free(v[i].data);
  acc__free(v);
}

static void stage_clear(own_reg *r) {
  for (size_t g = 0; r->files && g < r->ngroups; g++) acc_safetensors_close(r->files[g]);
  acc__free(r->files);
  r->files = NULL;
  bytes_free(r->staged, r->nslots);
  bytes_free(r->kept, r->nslots);
  r->staged = r->kept = NULL;
  r->nslots = 0;
  r->stage_ok = 0;
  r->applied = 0;
  acc__tmp_free(r->stage_buf);
  r->stage_buf = NULL;
  r->stage_len = 0;
}

static void reg_free(void *p) {
  own_reg *r = p;
  if (!r) return;
  stage_clear(r);
  for (size_t g = 0; g < r->ngroups; g++) {
    for (size_t i = 0; i < r->groups[g].n; i++) acc__free(r->groups[g].bufs[i].name);
    acc__free(r->groups[g].bufs);
    acc__free(r->groups[g].stem);
  }
  acc__free(r->groups);
  acc__free(r->objs);
  acc__free(r);
}

/* ---- staging device buffers in chunks ------------------------------------------------------ */

/* Buffers in device memory (of a device an accelerator of this process trains on, devio.h) are
 * staged through one host buffer of at most ACCELERATE_CKPT_STAGE_BYTES (64 MiB by default),
 * rounded down to whole elements (at least one): save_state copies a chunk to the host with the
 * device's copy and writes it to the file, load_state reads a chunk from the file and copies it to
 * the device, chunk after chunk. Host code never reads device memory, and a 1 GiB moment buffer
 * needs 64 MiB of host memory, not 1 GiB. */
#define STAGE_DEFAULT_BYTES ((size_t)64 << 20)

static _Atomic uint64_t stat_chunks;
static _Atomic size_t stat_peak;

void acc__own_state_stage_stats(uint64_t *chunks, size_t *peak_bytes, int reset) {
  if (chunks) *chunks = stat_chunks;
  if (peak_bytes) *peak_bytes = stat_peak;
  if (reset) {
    stat_chunks = 0;
    stat_peak = 0;
  }
}

/* The chunk for elements of es bytes, buffers of total bytes: whole elements, at most total. */
static acc_result stage_chunk(size_t es, size_t total, size_t *out) {
  long v = 0;
  int set = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_CKPT_STAGE_BYTES", &v, &set));
  size_t c = set && v > 0 ? (size_t)v : STAGE_DEFAULT_BYTES;
  c -= c % es;
  if (c < es) c = es;
  *out = c < total ? c : total;
  return ACC_OK;
}

static void *stage_alloc(size_t bytes) {
  void *h = acc__tmp_alloc(bytes);
  size_t peak = stat_peak;
  while (h && bytes > peak && !atomic_compare_exchange_weak(&stat_peak, &peak, bytes)) {
  }
  return h;
}

/* save_state's source of a tensor's bytes: host memory as it is, device memory chunk by chunk. */
static acc_result write_staged(void *payload, const acc_tensor_view *v, size_t nbytes, int fd, const char *path) {
  const own_group *g = payload;
  char what[300];
  snprintf(what, sizeof what, "the program's device buffer '%s' of '%s'", v->name, g->stem);
  return acc__ckpt_write_staged(what, v, nbytes, fd, path);
}

acc_result acc__ckpt_write_staged(void *what, const acc_tensor_view *v, size_t nbytes, int fd, const char *path) {
  if (!acc__devio_find(v->data)) return acc__write_all(fd, v->data, nbytes, path);
  size_t chunk;
  ACC_CHECK(stage_chunk(acc_dtype_size(v->dtype), nbytes, &chunk));
  unsigned char *h = stage_alloc(chunk);
  if (!h)
    return acc__error(ACC_ERR_NOMEM, "save_state: no host memory to stage %s (%zu bytes a chunk; "
                      "ACCELERATE_CKPT_STAGE_BYTES sets the chunk)", (const char *)what, chunk);
  acc_result rc = ACC_OK;
  for (size_t off = 0; rc == ACC_OK && off < nbytes; off += chunk) {
    size_t n = nbytes - off < chunk ? nbytes - off : chunk;
    rc = acc__devio_to_host(h, (const unsigned char *)v->data + off, n);
    if (rc == ACC_OK) rc = acc__write_all(fd, h, n, path);
    stat_chunks++;
  }
  acc__tmp_free(h);
  return rc;
}

/* load_state's read-in of a device buffer: chunk by chunk from the file (tensor view v, checked
 * in the pre-hook) through h (chunk bytes, taken by the pre-hook) into the device. */
static acc_result read_staged(const own_bytes *sp, const own_buf *b, unsigned char *h, size_t chunk) {
  acc_result rc = ACC_OK;
  for (size_t off = 0; rc == ACC_OK && off < sp->len; off += chunk) {
    acc_tensor_view part = sp->view;
    part.data = (const unsigned char *)sp->view.data + off;
    part.nbytes = sp->len - off < chunk ? sp->len - off : chunk;
    rc = acc__safetensors_pread(sp->file, &part, h);
    if (rc == ACC_OK) rc = acc__devio_from_host((unsigned char *)*b->data + off, h, part.nbytes);
    stat_chunks++;
  }
  return rc;
}

/* The host staging the read-in of r's device buffers needs (the largest chunk of one), taken now,
 * before the processes agree: nothing is allocated once the first buffer is written. */
static acc_result stage_take(own_reg *r) {
  size_t need = 0, nb = nbufs_total(r);
  for (size_t k = 0; k < nb; k++) {
    const own_bytes *sp = &r->staged[k];
    const own_buf *b = slot_buf(r, k);
    if (!sp->present || !sp->len || !*b->data || !acc__devio_find(*b->data)) continue;
    size_t c;
    ACC_CHECK(stage_chunk(acc_dtype_size(b->dtype), sp->len, &c));
    if (c > need) need = c;
  }
  if (!need) return ACC_OK;
  if (!(r->stage_buf = stage_alloc(need)))
    return acc__error(ACC_ERR_NOMEM, "load_state: no host memory to stage the program's device buffers (%zu bytes; "
                      "ACCELERATE_CKPT_STAGE_BYTES sets the chunk)", need);
  r->stage_len = need;
  return ACC_OK;
}

/* ---- the hooks ---------------------------------------------------------------------------- */

static acc_result save_group(const own_group *g, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, g->stem);
  acc_tensor_view *v = acc__calloc(g->n ? g->n : 1, sizeof *v);
  if (!v) return ACC_ERR_NOMEM;
  size_t k = 0;
  for (size_t i = 0; i < g->n; i++) {
    const own_buf *b = &g->bufs[i];
    if (!*b->data) continue; /* not allocated yet: left out */
    v[k] = (acc_tensor_view){.name = b->name, .dtype = b->dtype, .ndim = 1, .data = *b->data};
    v[k].shape[0] = (int64_t)b->count;
    k++;
  }
  acc_result rc = acc__safetensors_write_src(path, v, k, write_staged, (void *)g);
  acc__free(v);
  return rc;
}

/* Checks group g's file into out[0 .. g->n) (*fp: the file, kept open): nothing of the
 * program's changes. */
static acc_result stage_group(const own_group *g, const char *dir, own_bytes *out, acc_safetensors **fp) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, g->stem);
  acc_safetensors *f;
  ACC_CHECK(acc__safetensors_open_fd(&f, path));
  *fp = f;
  acc_result rc = ACC_OK;
  /* every saved tensor must be a registered buffer */
  for (size_t t = 0; rc == ACC_OK && t < acc_safetensors_count(f); t++) {
    acc_tensor_view v;
    rc = acc_safetensors_tensor(f, t, &v);
    int known = 0;
    for (size_t i = 0; rc == ACC_OK && i < g->n && !known; i++) known = strcmp(g->bufs[i].name, v.name) == 0;
    if (rc == ACC_OK && !known)
      rc = acc__error(ACC_ERR_MISMATCH, "load_state: '%s' holds tensor '%s', which is not a buffer registered with "
                      "acc_accelerator_register_buffers under the stem '%s'", path, v.name, g->stem);
  }
  for (size_t i = 0; rc == ACC_OK && i < g->n; i++) {
    const own_buf *b = &g->bufs[i];
    acc_tensor_view v;
    if (acc_safetensors_find(f, b->name, &v) != ACC_OK) {
      acc_clear_error();
      if (*b->data)
        rc = acc__error(ACC_ERR_MISMATCH,
                        "load_state: '%s' has no tensor '%s' (the buffer was not allocated when the checkpoint "
                        "was saved) but the program's buffer is allocated now", path, b->name);
      continue; /* not allocated at save, not allocated now: nothing to restore */
    }
    size_t es = acc_dtype_size(b->dtype);
    if (v.dtype != b->dtype || v.nbytes != b->count * es) {
      rc = acc__error(ACC_ERR_MISMATCH,
                      "load_state: tensor '%s' of '%s' is %s with %zu bytes, expected %s with %zu elements (%zu bytes)",
                      b->name, path, acc_safetensors_dtype_name(v.dtype), v.nbytes,
                      acc_safetensors_dtype_name(b->dtype), b->count, b->count * es);
      break;
    }
    rc = acc__safetensors_check_readable(f, &v);
    if (rc != ACC_OK) break;
    out[i].file = f;
    out[i].view = v;
    out[i].len = v.nbytes;
    out[i].present = 1;
  }
  return rc;
}

static void obj_path(char *out, size_t cap, const char *dir, size_t i, int proc) {
  snprintf(out, cap, "%s/process_object_%zu_%d.bin", dir, i, proc);
}

static acc_result save_obj(const own_obj *o, size_t i, const char *dir, int proc) {
  char path[4096];
  obj_path(path, sizeof path, dir, i, proc);
  size_t len = 0;
  acc_clear_error();
  acc_result rc = o->save(o->obj, NULL, 0, &len);
  if (rc != ACC_OK) return acc__callback_result(rc, "save_state: the save callback of per-process object %zu", i);
  if (len > ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "save_state: per-process object %zu of process %d wants %zu bytes, "
                      "more than the limit of %llu", i, proc, len,
                      (unsigned long long)ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT);
  void *buf = acc__tmp_alloc(len ? len : 1);
  if (!buf) return ACC_ERR_NOMEM;
  size_t got = len;
  rc = acc__callback_result(o->save(o->obj, buf, len, &got),
                            "save_state: the save callback of per-process object %zu", i);
  if (rc == ACC_OK && got > len)
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "save_state: the save callback of per-process object %zu wrote %zu "
                    "bytes into a buffer of %zu", i, got, len);
  if (rc == ACC_OK) rc = acc__write_file_atomic(path, buf, got);
  acc__tmp_free(buf);
  return rc;
}

/* Reads and checks this process's file of object i into *out; the object is not called yet. */
static acc_result stage_obj(size_t i, const char *dir, int proc, int nproc, own_bytes *out) {
  char path[4096];
  int saved = 0; /* processes that saved this object: files _0 .. _{saved-1} */
  for (;; saved++) {
    obj_path(path, sizeof path, dir, i, saved);
    if (!acc__is_file(path)) break;
  }
  if (saved != nproc)
    return acc__error(ACC_ERR_MISMATCH,
                      "load_state: per-process object %zu was saved by %d process(es) (process_object_%zu_<p>.bin in "
                      "'%s') but %d processes are loading it; a per-process object cannot be mapped to another "
                      "number of processes (resume with %d, or keep state that is the same on every process in "
                      "acc_accelerator_register_for_checkpointing)", i, saved, i, dir, nproc, saved);
  obj_path(path, sizeof path, dir, i, proc);
  int fd;
  struct stat st;
  ACC_CHECK(acc__open_regular(path, "per-process object", &fd, &st));
  if ((uint64_t)st.st_size > ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT) {
    close(fd);
    return acc__error(ACC_ERR_FORMAT, "load_state: '%s' has %lld bytes, more than the limit of %llu", path,
                      (long long)st.st_size, (unsigned long long)ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT);
  }
  size_t len = (size_t)st.st_size;
  void *buf = acc__tmp_alloc(len ? len : 1);
  acc_result rc = buf ? ACC_OK : ACC_ERR_NOMEM;
  size_t off = 0;
  while (rc == ACC_OK && off < len) {
    ssize_t r = pread(fd, (char *)buf + off, len - off, (off_t)off);
    if (r <= 0) rc = acc__error(ACC_ERR_IO, "load_state: cannot read '%s'", path);
    else off += (size_t)r;
  }
  close(fd);
  if (rc != ACC_OK) {
    acc__tmp_free(buf);
    return rc;
  }
  out->data = buf;
  out->len = len;
  out->present = 1;
  return ACC_OK;
}

static acc_result save_hook(acc_accelerator *acc, const char *dir, void *payload) {
  own_reg *r = payload;
  acc_state *st = acc_accelerator_state(acc);
  int proc = acc_state_process_index(st);
  if (proc == 0)
    for (size_t g = 0; g < r->ngroups; g++) ACC_CHECK(save_group(&r->groups[g], dir));
  for (size_t i = 0; i < r->nobjs; i++) ACC_CHECK(save_obj(&r->objs[i], i, dir, proc));
  return ACC_OK;
}

static acc_result load_hook(acc_accelerator *acc, const char *dir, void *payload) {
  own_reg *r = payload;
  acc_state *st = acc_accelerator_state(acc);
  int proc = acc_state_process_index(st), n = acc_state_num_processes(st);
  stage_clear(r);
  size_t nb = nbufs_total(r), ns = nb + r->nobjs;
  r->staged = acc__calloc(ns ? ns : 1, sizeof *r->staged);
  r->kept = acc__calloc(ns ? ns : 1, sizeof *r->kept);
  r->files = acc__calloc(r->ngroups + 1, sizeof *r->files);
  if (!r->staged || !r->kept || !r->files) {
    stage_clear(r);
    return ACC_ERR_NOMEM;
  }
  r->nslots = ns;
  size_t s = 0;
  for (size_t g = 0; g < r->ngroups; s += r->groups[g].n, g++)
    ACC_CHECK(stage_group(&r->groups[g], dir, r->staged + s, &r->files[g]));
  for (size_t i = 0; i < r->nobjs; i++) ACC_CHECK(stage_obj(i, dir, proc, n, &r->staged[nb + i]));
  ACC_CHECK(stage_take(r));
  r->stage_ok = 1;
  return ACC_OK;
}

static own_reg *reg_of(acc__accel_ckpt *c) { return c ? (own_reg *)c->own : NULL; }

/* The program's side of slot k: buffer (g, i) or object j. */
static own_buf *slot_buf(own_reg *r, size_t k) {
  for (size_t g = 0; g < r->ngroups; g++) {
    if (k < r->groups[g].n) return &r->groups[g].bufs[k];
    k -= r->groups[g].n;
  }
  return NULL;
}

/* Puts back slots [0, r->applied): buffers the commit allocated are freed and NULL again (the
 * others were not written), objects are loaded with what their save callback gave before. */
static void rollback(own_reg *r) {
  size_t nb = nbufs_total(r);
  for (size_t k = 0; k < r->applied; k++) {
    own_bytes *kp = &r->kept[k];
    if (k < nb) {
      own_buf *b = slot_buf(r, k);
      if (kp->allocated) {
        acc__free(*b->data);
        *b->data = NULL;
      }
    } else if (kp->present) {
      const own_obj *o = &r->objs[k - nb];
      (void)o->load(o->obj, kp->data, kp->len);
    }
  }
  r->applied = 0;
}

acc_result acc__own_state_commit(acc__accel_ckpt *c) {
  own_reg *r = reg_of(c);
  if (!r || !r->nslots) return ACC_OK;
  if (!r->stage_ok)
    return acc__error(ACC_ERR_INVALID_USAGE, "load_state: the program's own state was not staged");
  size_t nb = nbufs_total(r);
  /* first what the objects hold now, so a failure from here on can put it back (the buffers are
   * not written before acc__own_state_read_in) */
  for (size_t k = nb; k < r->nslots; k++) {
    own_bytes *kp = &r->kept[k];
    const own_obj *o = &r->objs[k - nb];
    size_t len = 0, used = 0;
    acc_clear_error();
    acc_result rc = o->save(o->obj, NULL, 0, &len);
    if (rc == ACC_OK && len > ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT) rc = ACC_ERR_INVALID_ARGUMENT;
    if (rc == ACC_OK && !(kp->data = acc__tmp_alloc(len ? len : 1))) return ACC_ERR_NOMEM;
    if (rc == ACC_OK) rc = o->save(o->obj, kp->data, len, &used);
    if (rc != ACC_OK || used > len)
      return acc__error(rc != ACC_OK ? rc : ACC_ERR_INVALID_ARGUMENT,
                        "load_state: could not keep a copy of per-process object %zu before loading it (its save "
                        "callback failed or wrote more than it asked for)", k - nb);
    kp->len = used;
    kp->present = 1;
  }
  /* then the buffers the program left NULL, and the objects' bytes */
  for (size_t k = 0; k < r->nslots; k++) {
    const own_bytes *sp = &r->staged[k];
    acc_result rc = ACC_OK;
    if (k < nb) {
      own_buf *b = slot_buf(r, k);
      if (sp->present && !*b->data) {
        *b->data = acc__calloc(1, sp->len ? sp->len : 1); /* the program owns it from now on (free()) */
        if (!*b->data) rc = ACC_ERR_NOMEM;
        else r->kept[k].allocated = 1;
      }
    } else {
      const own_obj *o = &r->objs[k - nb];
      acc_clear_error();
      rc = acc__callback_result(o->load(o->obj, sp->data, sp->len),
                                "load_state: the load callback of per-process object %zu", k - nb);
    }
    if (rc != ACC_OK) {
      r->applied = k; /* slot k failed before changing anything of the program's */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", acc_last_error());
      rollback(r);
      return acc__error(rc, "%s", msg);
    }
    r->applied = k + 1;
  }
  return ACC_OK;
}

acc_result acc__own_state_read_in(acc__accel_ckpt *c) {
  own_reg *r = reg_of(c);
  if (!r || !r->nslots || !r->stage_ok) return ACC_OK;
  size_t nb = nbufs_total(r);
  for (size_t k = 0; k < nb; k++) {
    const own_bytes *sp = &r->staged[k];
    own_buf *b = slot_buf(r, k);
    if (!sp->present || !sp->len || !*b->data) continue;
    acc_result rc;
    if (acc__devio_find(*b->data)) { /* device memory: chunk by chunk through the pre-hook's buffer */
      size_t chunk;
      rc = stage_chunk(acc_dtype_size(b->dtype), sp->len, &chunk);
      if (rc == ACC_OK && chunk > r->stage_len)
        rc = acc__error(ACC_ERR_INVALID_USAGE, "load_state: the program's device buffer '%s' was not staged (the "
                        "stage size changed during load_state)", b->name);
      if (rc == ACC_OK) rc = read_staged(sp, b, r->stage_buf, chunk);
    } else {
      rc = acc__safetensors_pread(sp->file, &sp->view, *b->data);
    }
    if (rc != ACC_OK)
      return acc__error_context(rc, "load_state: reading the program's buffer '%s' failed after every check passed "
                                "(the checkpoint changed while it was loading, or the device failed)", b->name);
  }
  return ACC_OK;
}

void acc__own_state_rollback(acc__accel_ckpt *c) {
  own_reg *r = reg_of(c);
  if (!r) return;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", acc_last_error()); /* the failure being reported stays */
  rollback(r);
  (void)acc__error(ACC_ERR_IO, "%s", msg); /* acc__error keeps the text; the caller returns its code */
}

void acc__own_state_release(acc__accel_ckpt *c) {
  own_reg *r = reg_of(c);
  if (r) stage_clear(r);
}

/* ---- registration ------------------------------------------------------------------------- */

static acc_result get_reg(acc_accelerator *acc, own_reg **out) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc_project_config *proj;
  ACC_CHECK(acc__accel_ckpt_project(&p, &proj)); /* creates the checkpoint state */
  acc__accel_ckpt *c = *p.ckpt;
  if (!c->own) {
    own_reg *r = acc__calloc(1, sizeof *r);
    if (!r) return ACC_ERR_NOMEM;
    acc_result rc = acc_accelerator_register_save_state_pre_hook(acc, save_hook, r, "program state (save)", NULL);
    if (rc == ACC_OK)
      rc = acc_accelerator_register_load_state_pre_hook(acc, load_hook, r, "program state (load)", NULL);
    if (rc != ACC_OK) {
      acc__free(r);
      return rc;
    }
    c->own = r;
    c->own_free = reg_free;
  }
  *out = c->own;
  return ACC_OK;
}

acc_result acc_accelerator_register_buffers(acc_accelerator *acc, const char *stem, const acc_named_buffer *bufs,
                                            size_t count) {
  static const char fn[] = "acc_accelerator_register_buffers";
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  ACC_CHECK(acc__ckpt_check_group(fn, stem, bufs, count, 0));
  own_reg *r;
  ACC_CHECK(get_reg(acc, &r));
  ACC_CHECK(acc__ckpt_claim_stem(acc__accelerator_ckpt(acc), fn, stem));
  own_group *gs = acc__realloc(r->groups, (r->ngroups + 1) * sizeof *gs);
  if (!gs) return ACC_ERR_NOMEM;
  r->groups = gs;
  own_group *g = &gs[r->ngroups];
  memset(g, 0, sizeof *g);
  g->stem = acc__strdup(stem);
  g->bufs = acc__calloc(count, sizeof *g->bufs);
  acc_result rc = g->stem && g->bufs ? ACC_OK : ACC_ERR_NOMEM;
  for (size_t i = 0; rc == ACC_OK && i < count; i++) {
    g->bufs[i] = (own_buf){acc__strdup(bufs[i].name), bufs[i].dtype, bufs[i].data, bufs[i].count, bufs[i].fixed};
    if (!bufs[i].data) g->bufs[i].data = &g->bufs[i].fixed; /* own_buf lives as long as the registry */
    g->n = i + 1;
    if (!g->bufs[i].name) rc = ACC_ERR_NOMEM;
  }
  r->ngroups++; /* freed with the registry even when incomplete */
  if (rc != ACC_OK) {
    r->ngroups--;
    for (size_t i = 0; i < g->n; i++) acc__free(g->bufs[i].name);
    acc__free(g->bufs);
    acc__free(g->stem);
  }
  return rc;
}

acc_result acc_accelerator_register_for_checkpointing_per_process(acc_accelerator *acc, void *obj,
                                                                  acc_checkpoint_save_fn save,
                                                                  acc_checkpoint_load_fn load) {
  static const char fn[] = "acc_accelerator_register_for_checkpointing_per_process";
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, fn));
  if (!save || !load)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: an object needs both a save and a load callback (got save %s, "
                      "load %s)", fn, save ? "set" : "NULL", load ? "set" : "NULL");
  own_reg *r;
  ACC_CHECK(get_reg(acc, &r));
  own_obj *v = acc__realloc(r->objs, (r->nobjs + 1) * sizeof *v);
  if (!v) return ACC_ERR_NOMEM;
  r->objs = v;
  v[r->nobjs++] = (own_obj){obj, save, load};
  return ACC_OK;
}
