/* The checkpoint state of an accelerator (ckpt/accel_state.h): its project configuration
 * (directories, automatic naming, total_limit), the objects registered for checkpointing, the
 * save/load pre-hooks, and what save_state.c and load_state.c share: the agreement between the
 * processes, the path broadcast and the checkpoint's file names. */
#include <stdio.h>
#include <string.h>

#include "ckpt/accel_state.h"
#include "core/fs.h"
#include "backend/collcheck.h"

struct acc__state_hook {
  uint64_t id;
  int load; /* 0: save_state pre-hook, 1: load_state pre-hook */
  acc_state_hook_fn fn;
  void *payload;
  char name[64];
};

void acc__accel_ckpt_free(acc__accel_ckpt *c) {
  if (!c) return;
  acc_project_config_destroy(c->project);
  if (c->own_free) c->own_free(c->own);
  if (c->zbufs_free) c->zbufs_free(c->zbufs);
  for (size_t i = 0; i < c->nstems; i++) acc__free(c->stems[i]);
  acc__free(c->stems);
  acc__free(c->custom);
  acc__free(c->hooks);
  acc__free(c);
}

/* A checkpoint file stem: letters, digits, '_', '-', '.', not starting with '.', at most 200. */
static int stem_ok(const char *s) {
  if (!s || !*s || strlen(s) > 200 || s[0] == '.') return 0;
  for (const char *q = s; *q; q++)
    if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_' ||
          *q == '-' || *q == '.'))
      return 0;
  return 1;
}

static int stem_taken(const acc__accel_ckpt *c, const char *stem) {
  for (size_t i = 0; c && i < c->nstems; i++)
    if (strcmp(c->stems[i], stem) == 0) return 1;
  return 0;
}

static acc_result stem_add(acc__accel_ckpt *c, const char *stem) {
  char **v = acc__realloc(c->stems, (c->nstems + 1) * sizeof *v);
  if (!v) return ACC_ERR_NOMEM;
  c->stems = v;
  if (!(v[c->nstems] = acc__strdup(stem))) return ACC_ERR_NOMEM;
  c->nstems++;
  return ACC_OK;
}

acc_result acc__ckpt_check_group(const char *fn, const char *stem, const acc_named_buffer *bufs, size_t count,
                                 int allow_empty) {
  if (!stem_ok(stem))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: stem '%s' is not a file name (letters, digits, '_', '-', '.'; not starting with '.')", fn,
                      stem ? stem : "(null)");
  if (!bufs || !count) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: no buffers given for '%s'", fn, stem);
  for (size_t i = 0; i < count; i++) {
    if (!bufs[i].name || !*bufs[i].name || (!bufs[i].data && !bufs[i].fixed) || acc_dtype_size(bufs[i].dtype) == 0 ||
        (!allow_empty && !bufs[i].count))
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: buffer %zu of '%s' (%s) needs a name, data or fixed, a known "
                        "dtype%s", fn, i, stem, bufs[i].name ? bufs[i].name : "no name",
                        allow_empty ? "" : " and count >= 1");
    for (size_t j = 0; j < i; j++)
      if (strcmp(bufs[i].name, bufs[j].name) == 0)
        return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: buffer name '%s' appears twice in '%s'", fn, bufs[i].name,
                          stem);
  }
  return ACC_OK;
}

acc_result acc__ckpt_claim_stem(acc__accel_ckpt *c, const char *fn, const char *stem) {
  if (stem_taken(c, stem))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the stem '%s' is already registered", fn, stem);
  return stem_add(c, stem);
}

static acc_result get_ckpt(acc__accel_parts *p, acc__accel_ckpt **out) {
  if (!*p->ckpt) {
    *p->ckpt = acc__calloc(1, sizeof **p->ckpt);
    if (!*p->ckpt) return ACC_ERR_NOMEM;
    *p->ckpt_free = acc__accel_ckpt_free; /* the accelerator frees it with itself */
  }
  *out = *p->ckpt;
  return ACC_OK;
}

acc_result acc__accel_ckpt_project(acc__accel_parts *p, acc_project_config **out) {
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(p, &c));
  if (!c->project) ACC_CHECK(acc_project_config_create(&c->project, NULL));
  *out = c->project;
  return ACC_OK;
}

acc_result acc_accelerator_set_project_config(acc_accelerator *acc, const acc_project_options *opts) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  acc_project_config *np;
  /* The project handle gets no total_limit: acc_checkpoint_begin would prune before the new
   * checkpoint is durable (with total_limit 1 a crash would leave none). We prune after. */
  acc_project_options o = ACC_PROJECT_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_project_options, ACC_PROJECT_OPTIONS_VERSION, "set_project_config");
  int limit = o.total_limit;
  o.total_limit = 0;
  ACC_CHECK(acc_project_config_create(&np, &o));
  if (limit < ACC_UNSET) {
    acc_project_config_destroy(np);
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "set_project_config: total_limit is %d (must be > 0, or 0 / ACC_UNSET for no limit)", limit);
  }
  acc_project_config_destroy(c->project);
  c->project = np;
  c->automatic = o.automatic_checkpoint_naming != 0;
  c->total_limit = limit > 0 ? limit : 0;
  return ACC_OK;
}

acc_project_config *acc_accelerator_project_config(const acc_accelerator *acc) {
  acc__accel_ckpt *c = acc__accelerator_ckpt(acc);
  return c ? c->project : NULL;
}

acc_result acc_accelerator_set_strict_process_count(acc_accelerator *acc, int strict) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  c->strict_processes = strict != 0;
  return ACC_OK;
}

acc_result acc_accelerator_register_for_checkpointing(acc_accelerator *acc, void *obj, acc_checkpoint_save_fn save,
                                                      acc_checkpoint_load_fn load) {
  return acc_accelerator_register_for_checkpointing_limit(acc, obj, save, load,
                                                          ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT);
}

acc_result acc_accelerator_register_for_checkpointing_limit(acc_accelerator *acc, void *obj,
                                                            acc_checkpoint_save_fn save,
                                                            acc_checkpoint_load_fn load, uint64_t max_bytes) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  if (!save || !load)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "register_for_checkpointing: an object needs both a save and a load callback to be "
                      "stored (got save %s, load %s)", save ? "set" : "NULL", load ? "set" : "NULL");
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  if (c->ncustom == c->cap) {
    int nc = c->cap ? c->cap * 2 : 4;
    acc__custom_obj *v = acc__realloc(c->custom, (size_t)nc * sizeof *v);
    if (!v) return ACC_ERR_NOMEM;
    c->custom = v;
    c->cap = nc;
  }
  c->custom[c->ncustom++] = (acc__custom_obj){obj, save, load, max_bytes};
  return ACC_OK;
}

/* ---- save / load pre-hooks -------------------------------------------------------------------- */

static acc_result register_hook(acc_accelerator *acc, int load, acc_state_hook_fn fn, void *payload, const char *name,
                                uint64_t *id) {
  const char *what = load ? "register_load_state_pre_hook" : "register_save_state_pre_hook";
  if (id) *id = 0;
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  if (!fn) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the hook function is NULL", what);
  acc__accel_ckpt *c;
  ACC_CHECK(get_ckpt(&p, &c));
  if (c->in_hook) return acc__error(ACC_ERR_INVALID_USAGE, "%s: called from inside a save/load pre-hook", what);
  if (c->nhooks == c->hooks_cap) {
    int nc = c->hooks_cap ? c->hooks_cap * 2 : 4;
    acc__state_hook *v = acc__realloc(c->hooks, (size_t)nc * sizeof *v);
    if (!v) return ACC_ERR_NOMEM;
    c->hooks = v;
    c->hooks_cap = nc;
  }
  acc__state_hook *h = &c->hooks[c->nhooks++];
  h->id = ++c->next_hook_id;
  h->load = load;
  h->fn = fn;
  h->payload = payload;
  if (name)
    snprintf(h->name, sizeof h->name, "'%s'", name);
  else
    snprintf(h->name, sizeof h->name, "#%llu", (unsigned long long)h->id);
  if (id) *id = h->id;
  return ACC_OK;
}

acc_result acc_accelerator_register_save_state_pre_hook(acc_accelerator *acc, acc_state_hook_fn fn, void *payload,
                                                        const char *name, uint64_t *id) {
  return register_hook(acc, 0, fn, payload, name, id);
}

acc_result acc_accelerator_register_load_state_pre_hook(acc_accelerator *acc, acc_state_hook_fn fn, void *payload,
                                                        const char *name, uint64_t *id) {
  return register_hook(acc, 1, fn, payload, name, id);
}

acc_result acc_accelerator_remove_state_hook(acc_accelerator *acc, uint64_t id) {
  acc__accel_parts p;
  ACC_CHECK(acc__accelerator_parts(acc, &p));
  acc__accel_ckpt *c = *p.ckpt;
  uint64_t issued = c ? c->next_hook_id : 0;
  if (id == 0 || id > issued)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "remove_state_hook: no hook was registered with id %llu (ids issued "
                      "so far: 1..%llu)", (unsigned long long)id, (unsigned long long)issued);
  if (c->in_hook) return acc__error(ACC_ERR_INVALID_USAGE, "remove_state_hook: called from inside a save/load pre-hook");
  for (int i = 0; i < c->nhooks; i++) {
    if (c->hooks[i].id != id) continue;
    memmove(&c->hooks[i], &c->hooks[i + 1], (size_t)(c->nhooks - i - 1) * sizeof *c->hooks);
    c->nhooks--;
    break;
  }
  return ACC_OK; /* already removed: nothing to do, as with a removable handle */
}

/* Runs this process's save (load 0) or load (load 1) pre-hooks in order; the first failure
 * stops the others and names the hook. Local: the caller combines the result with the other
 * processes' through acc__state_agree(). */
acc_result acc__accel_ckpt_run_hooks(acc_accelerator *acc, acc__accel_ckpt *c, int load, const char *dir) {
  if (!c) return ACC_OK;
  acc_result rc = ACC_OK;
  c->in_hook = 1;
  for (int i = 0; i < c->nhooks && rc == ACC_OK; i++) {
    const acc__state_hook *h = &c->hooks[i];
    if (h->load != load) continue;
    acc_clear_error();
    rc = h->fn(acc, dir, h->payload);
    if (rc != ACC_OK)
      rc = acc__callback_result(rc, "%s: pre-hook %s (id %llu)", load ? "load_state" : "save_state", h->name,
                                (unsigned long long)h->id);
  }
  c->in_hook = 0;
  return rc;
}

/* ---- collective helpers ------------------------------------------------------------------------ */

/* Every process learns whether any process failed: the failing process (the highest-numbered
 * one when several fail) sends its error code and message, so every process returns the same
 * error and none is left waiting in a later collective. */
acc_result acc__state_agree(acc_state *st, acc_result local, const char *what) {
  int rank = acc_state_process_index(st);
  int32_t who = local != ACC_OK ? rank + 1 : 0;
  acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 0);
  acc_result rc = acc_all_reduce(st, &who, &who, 1, ACC_I32, ACC_MAX);
  if (rc != ACC_OK) {
    if (local != ACC_OK) return local;
    return acc__error_context(rc, "%s: exchanging the status with the other processes", what);
  }
  if (who == 0) return ACC_OK;
  if (who < 0 || who > acc_state_num_processes(st)) /* another exchange paired with this one */
    return acc__error(ACC_ERR_MISMATCH,
                      "%s: the processes are out of step (run with --debug): the status exchange "
                      "returned %ld, which is not a process index + 1 (1..%d)",
                      what, (long)who, acc_state_num_processes(st));
  struct {
    int32_t rc;
    char msg[1020];
  } e;
  memset(&e, 0, sizeof e);
  if (who - 1 == rank) {
    e.rc = (int32_t)local;
    snprintf(e.msg, sizeof e.msg, "%s", acc_last_error());
  }
  acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 1);
  rc = acc_broadcast(st, &e, sizeof e, ACC_U8, who - 1);
  if (local != ACC_OK) return local;
  if (rc != ACC_OK) return acc__error_context(rc, "%s failed on process %d", what, who - 1);
  e.msg[sizeof e.msg - 1] = 0;
  return acc__error(e.rc > 0 ? (acc_result)e.rc : ACC_ERR_REMOTE, "%s (on process %d)", e.msg, who - 1);
}

acc_result acc__state_bcast_path(acc_state *st, char buf[ACC__STATE_PATH_BUF]) {
  acc__comm_origin(ACC__ORIGIN_STATE_AGREE, 2);
  return acc_broadcast(st, buf, ACC__STATE_PATH_BUF, ACC_U8, 0);
}

/* ---- file names ------------------------------------------------------------------------------- */

char *acc__state_file_name(const char *dir, const char *stem, int i, const char *ext) {
  char name[96];
  if (i == 0)
    snprintf(name, sizeof name, "%s%s", stem, ext);
  else
    snprintf(name, sizeof name, "%s_%d%s", stem, i, ext);
  return acc__path_join(dir, name);
}
