/* Model weights: acc_save_model (Accelerate's save_model with sharding) and
 * acc_load_checkpoint_in_model (strict / non-strict, dtype conversion). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/load_defer.h"
#include "train/train.h"
#include "core/json_util.h"

#define WEIGHTS_NAME "model.safetensors"
#define INDEX_NAME "model.safetensors.index.json"

/* ---- save ---------------------------------------------------------------------------------- */

/* "model-NNNNN-of-NNNNN.safetensors" exactly. */
static int is_shard_name(const char *s) {
  static const char pat[] = "model-#####-of-#####.safetensors";
  if (strlen(s) != sizeof pat - 1) return 0;
  for (size_t i = 0; pat[i]; i++) {
    if (pat[i] == '#') {
      if (s[i] < '0' || s[i] > '9') return 0;
    } else if (s[i] != pat[i]) {
      return 0;
    }
  }
  return 1;
}

static void shard_name(char *buf, size_t cap, size_t i, size_t n) {
  if (n == 1)
    snprintf(buf, cap, "%s", WEIGHTS_NAME);
  else
    snprintf(buf, cap, "model-%05zu-of-%05zu.safetensors", i + 1, n);
}

/* Removes shard files of earlier saves that are not part of the new set of nshards files, and the
 * single-file / index file of the other layout. */
static acc_result remove_stale(const char *dir, size_t nshards) {
  DIR *d = opendir(dir);
  if (!d) return acc__error(ACC_ERR_IO, "could not list '%s': %s", dir, strerror(errno));
  acc_result rc = ACC_OK;
  struct dirent *e;
  while (rc == ACC_OK && (e = readdir(d)) != NULL) {
    int stale = 0;
    if (is_shard_name(e->d_name)) {
      size_t i = 0, n = 0;
      stale = 1;
      if (nshards > 1 && sscanf(e->d_name, "model-%5zu-of-%5zu", &i, &n) == 2 && n == nshards && i >= 1 && i <= n)
        stale = 0;
    } else if (nshards > 1 && strcmp(e->d_name, WEIGHTS_NAME) == 0) {
      stale = 1;
    } else if (nshards == 1 && strcmp(e->d_name, INDEX_NAME) == 0) {
      stale = 1;
    }
    if (!stale) continue;
    char *p = acc__path_join(dir, e->d_name);
    if (!p) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    if (acc__is_file(p) && unlink(p) != 0 && errno != ENOENT)
      rc = acc__error(ACC_ERR_IO, "could not remove stale weights file '%s': %s", p, strerror(errno));
    acc__free(p);
  }
  closedir(d);
  return rc;
}

static acc_result write_index(const char *dir, const acc_model *m, const size_t *shard_of, size_t nshards,
                              uint64_t total) {
  json_t *root = json_object(), *meta = json_object(), *map = json_object();
  acc_result rc = ACC_OK;
  char *text = NULL, *path = NULL;
  if (!root || !meta || !map) goto nomem;
  if (json_object_set_new(meta, "total_size", json_integer((json_int_t)total)) != 0) goto nomem;
  size_t np = acc_model_num_parameters(m);
  for (size_t i = 0; i < np; i++) {
    char name[64];
    shard_name(name, sizeof name, shard_of[i], nshards);
    if (json_object_set_new(map, acc_model_parameter(m, i)->name, json_string(name)) != 0) goto nomem;
  }
  int lost = json_object_set_new(root, "metadata", meta) != 0; /* set_new takes the value */
  lost |= json_object_set_new(root, "weight_map", map) != 0;
  meta = map = NULL;
  if (lost) goto nomem;
  /* = Python json.dumps(indent=2, sort_keys=True) */
  text = acc__json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII, "the model index");
  path = acc__path_join(dir, INDEX_NAME);
  if (!text || !path) goto nomem;
  size_t len = strlen(text);
  /* jansson writes \u00E9, Python \u00e9: lower-case the hex digits of every \u escape. */
  for (size_t i = 0; i + 1 < len; i++) {
    if (text[i] != '\\') continue;
    if (text[i + 1] == 'u')
      for (size_t k = i + 2; k < i + 6 && k < len; k++)
        if (text[k] >= 'A' && text[k] <= 'F') text[k] = (char)(text[k] - 'A' + 'a');
    i++; /* skip the escaped character */
  }
  char *withnl = acc__malloc(len + 2);
  if (!withnl) goto nomem;
  memcpy(withnl, text, len);
  withnl[len] = '\n';
  rc = acc__write_file_atomic(path, withnl, len + 1);
  acc__free(withnl);
  goto done;
nomem:
  rc = acc__error(ACC_ERR_NOMEM, "out of memory writing the index of '%s'", dir);
done:
  json_decref(meta);
  json_decref(map);
  json_decref(root);
  acc__free(text);
  acc__free(path);
  return rc;
}

static acc_result save_main(const acc_model *m, const char *dir, uint64_t max_shard, acc_dtype dtype) {
  struct stat sb;
  if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_save_model: '%s' is a file, not a directory: give a directory "
                      "to save the model into", dir);
  ACC_CHECK(acc__mkdirs(dir));
  size_t np = acc_model_num_parameters(m), esize = acc_dtype_size(dtype);
  size_t *shard_of = acc__calloc(np ? np : 1, sizeof *shard_of);
  if (!shard_of) return ACC_ERR_NOMEM;
  /* huggingface_hub's split: a tensor bigger than the limit becomes a shard of its own at once;
   * otherwise tensors fill the current shard until the next one would exceed the limit. Shards
   * are numbered in the order they are closed (so an oversized tensor can come before the shard
   * that was open when it was met), exactly as the reference does. */
  const size_t OPEN = (size_t)-1;
  size_t nshards = 0, first_open = 0;
  int have_open = 0;
  uint64_t cur_size = 0, total = 0;
  for (size_t i = 0; i < np; i++) {
    uint64_t sz = (uint64_t)acc_model_parameter(m, i)->numel * esize;
    total += sz;
    if (sz > max_shard) {
      shard_of[i] = nshards++;
      continue;
    }
    if (have_open && cur_size + sz > max_shard) {
      for (size_t j = first_open; j < i; j++)
        if (shard_of[j] == OPEN) shard_of[j] = nshards;
      nshards++;
      have_open = 0;
    }
    if (!have_open) {
      have_open = 1;
      first_open = i;
      cur_size = 0;
    }
    shard_of[i] = OPEN;
    cur_size += sz;
  }
  if (have_open) {
    for (size_t j = first_open; j < np; j++)
      if (shard_of[j] == OPEN) shard_of[j] = nshards;
    nshards++;
  }
  if (nshards == 0) nshards = 1; /* a model without parameters: one empty file */
  acc_result rc = ACC_OK;
  acc_tensor_view *views = acc__calloc(np ? np : 1, sizeof *views);
  void **conv = acc__calloc(np ? np : 1, sizeof *conv);
  if (!views || !conv) {
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  for (size_t s = 0; s < nshards && rc == ACC_OK; s++) {
    size_t k = 0;
    for (size_t i = 0; i < np; i++) {
      if (shard_of[i] != s) continue;
      const acc_param *p = acc_model_parameter(m, i);
      acc_tensor_view *v = &views[k++];
      memset(v, 0, sizeof *v);
      v->name = p->name;
      v->dtype = dtype;
      v->ndim = p->ndim;
      for (int d = 0; d < p->ndim; d++) v->shape[d] = p->shape[d];
      if (dtype == ACC_F32) {
        v->data = p->data;
      } else {
        uint16_t *h = acc__malloc(p->numel * 2 + 1);
        if (!h) {
          rc = ACC_ERR_NOMEM;
          break;
        }
        for (size_t e = 0; e < p->numel; e++)
          h[e] = dtype == ACC_F16 ? acc__f32_to_f16(p->data[e]) : acc__f32_to_bf16(p->data[e]);
        conv[i] = h;
        v->data = h;
      }
    }
    char name[64];
    shard_name(name, sizeof name, s, nshards);
    char *path = acc__path_join(dir, name);
    if (rc == ACC_OK && !path) rc = ACC_ERR_NOMEM;
    if (rc == ACC_OK) rc = acc_safetensors_write(path, views, k, NULL, NULL, 0);
    acc__free(path);
    for (size_t i = 0; i < np; i++) {
      acc__free(conv[i]);
      conv[i] = NULL;
    }
  }
  if (rc == ACC_OK && nshards > 1) rc = write_index(dir, m, shard_of, nshards, total);
  if (rc == ACC_OK) rc = remove_stale(dir, nshards);
done:
  acc__free(conv);
  acc__free(views);
  acc__free(shard_of);
  return rc;
}

/* A model in device memory is saved from a host copy (src/train/train_ckpt.c). */
static acc_result save_staged(const acc_model *m, const char *dir, uint64_t max_shard, acc_dtype dtype) {
  acc_model *h = NULL;
  ACC_CHECK(acc__dev_host_model(m, 0, &h, NULL));
  acc_result rc = save_main(h ? h : m, dir, max_shard, dtype);
  acc__dev_host_model_free(h);
  return rc;
}

acc_result acc_save_model(acc_state *st, const acc_model *model, const char *dir, uint64_t max_shard_size,
                          acc_dtype dtype) {
  if (!model || !dir || !*dir)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_save_model: model is NULL or the directory is empty");
  if (dtype != ACC_F32 && dtype != ACC_F16 && dtype != ACC_BF16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_save_model: dtype %s is not allowed (use f32, f16 or bf16)",
                      acc_dtype_name(dtype));
  if (max_shard_size == 0) max_shard_size = ACC_DEFAULT_MAX_SHARD_SIZE;
  acc_result rc = ACC_OK;
  if (!st || acc_state_is_main_process(st)) rc = save_staged(model, dir, max_shard_size, dtype);
  if (!st) return rc;
  char saved[1024] = "";
  if (rc != ACC_OK) snprintf(saved, sizeof saved, "%s", acc_last_error());
  acc_result brc = acc_barrier(st);
  if (rc != ACC_OK) return acc__error(rc, "%s", saved);
  return brc;
}

/* ---- load ---------------------------------------------------------------------------------- */

void acc_load_report_clear(acc_load_report *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_missing; i++) acc__free(r->missing[i]);
  for (size_t i = 0; i < r->n_unexpected; i++) acc__free(r->unexpected[i]);
  for (size_t i = 0; i < r->n_mismatched; i++) acc__free(r->mismatched[i]);
  acc__free(r->missing);
  acc__free(r->unexpected);
  acc__free(r->mismatched);
  memset(r, 0, sizeof *r);
}

/* Appends a copy of s. The capacity is the next power of two of *n: the array grows when *n is
 * 0 or a power of two, so n pushes cost O(n) copies in all. */
static acc_result list_push(char ***list, size_t *n, const char *s) {
  char **nl = *list;
  if ((*n & (*n - 1)) == 0) {
    nl = acc__realloc(*list, (*n ? 2 * *n : 1) * sizeof *nl);
    if (!nl) return ACC_ERR_NOMEM;
    *list = nl;
  }
  nl[*n] = acc__strdup(s);
  if (!nl[*n]) return ACC_ERR_NOMEM;
  (*n)++;
  return ACC_OK;
}

static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, cap - k, "[");
  for (int d = 0; d < ndim && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

typedef struct opened {
  acc_safetensors **files;
  size_t nfiles;
  int keep_fd; /* open for acc__safetensors_pread (load_state) */
} opened;

static void opened_close(opened *o) {
  for (size_t i = 0; i < o->nfiles; i++) acc_safetensors_close(o->files[i]);
  acc__free(o->files);
  o->files = NULL;
  o->nfiles = 0;
}

static acc_result open_one(opened *o, const char *path) {
  acc_safetensors **nf = acc__realloc(o->files, (o->nfiles + 1) * sizeof *nf);
  if (!nf) return ACC_ERR_NOMEM;
  o->files = nf;
  ACC_CHECK(o->keep_fd ? acc__safetensors_open_fd(&o->files[o->nfiles], path)
                      : acc_safetensors_open(&o->files[o->nfiles], path));
  o->nfiles++;
  return ACC_OK;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static acc_result open_index(opened *o, const char *index_path) {
  json_error_t err;
  json_t *root = NULL;
  ACC_CHECK(acc__json_load_regular(index_path, "index file", JSON_REJECT_DUPLICATES, &root, &err));
  if (!root)
    return acc__error(ACC_ERR_FORMAT, "index file '%s' is not valid JSON: %s (line %d)", index_path, err.text, err.line);
  acc_result rc = ACC_OK;
  char *dir = NULL;
  const char **names = NULL;
  json_t *map = json_object_get(root, "weight_map");
  if (!json_is_object(map)) {
    rc = acc__error(ACC_ERR_FORMAT, "index file '%s' has no \"weight_map\" object", index_path);
    goto done;
  }
  size_t n = json_object_size(map), k = 0;
  names = acc__calloc(n ? n : 1, sizeof *names);
  dir = acc__path_dirname(index_path);
  if (!names || !dir) {
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(map, key, v) {
    const char *f = json_string_value(v);
    if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
      rc = acc__error(ACC_ERR_FORMAT, "index file '%s': tensor '%s' maps to '%s', not a file name in the same "
                      "directory", index_path, key, f ? f : "(not a string)");
      goto done;
    }
    names[k++] = f;
  }
  qsort(names, k, sizeof *names, str_cmp);
  for (size_t i = 0; i < k && rc == ACC_OK; i++) {
    if (i > 0 && strcmp(names[i], names[i - 1]) == 0) continue;
    char *p = acc__path_join(dir, names[i]);
    if (!p) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    rc = open_one(o, p);
    acc__free(p);
  }
  /* Every tensor of the weight map must be in the file it names. */
  json_object_foreach(map, key, v) {
    if (rc != ACC_OK) break;
    const char *f = json_string_value(v);
    int found = 0;
    for (size_t i = 0; i < o->nfiles && !found; i++) {
      const char *path = acc_safetensors_path(o->files[i]);
      size_t lp = strlen(path), lf = strlen(f);
      acc_tensor_view tv;
      if (lp >= lf && strcmp(path + lp - lf, f) == 0 && (lp == lf || path[lp - lf - 1] == '/') &&
          acc_safetensors_find(o->files[i], key, &tv) == ACC_OK)
        found = 1;
    }
    if (!found)
      rc = acc__error(ACC_ERR_FORMAT, "index file '%s' says tensor '%s' is in '%s', but that file has no such tensor",
                      index_path, key, f);
  }
  if (rc == ACC_OK) acc_clear_error();
done:
  acc__free(names);
  acc__free(dir);
  json_decref(root);
  return rc;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static acc_result open_checkpoint(opened *o, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return acc__error(ACC_ERR_IO, "checkpoint '%s' does not exist: %s", path, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return ends_with(path, ".json") ? open_index(o, path) : open_one(o, path);
  char *single = acc__path_join(path, WEIGHTS_NAME);
  if (!single) return ACC_ERR_NOMEM;
  if (acc__is_file(single)) {
    acc_result rc = open_one(o, single);
    acc__free(single);
    return rc;
  }
  acc__free(single);
  DIR *d = opendir(path);
  if (!d) return acc__error(ACC_ERR_IO, "could not list checkpoint folder '%s': %s", path, strerror(errno));
  char *found[2] = {NULL, NULL};
  size_t nfound = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!ends_with(e->d_name, ".index.json")) continue;
    if (nfound < 2) found[nfound] = acc__strdup(e->d_name);
    nfound++;
  }
  closedir(d);
  acc_result rc;
  if (nfound == 0) {
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "'%s' is not a folder containing a .index.json file or a %s file",
                    path, WEIGHTS_NAME);
  } else if (nfound > 1) {
    rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "'%s' contains more than one .index.json file ('%s', '%s'%s): delete "
                    "the irrelevant ones", path, found[0] ? found[0] : "?", found[1] ? found[1] : "?",
                    nfound > 2 ? ", ..." : "");
  } else if (!found[0]) {
    rc = ACC_ERR_NOMEM;
  } else {
    char *ip = acc__path_join(path, found[0]);
    rc = ip ? open_index(o, ip) : ACC_ERR_NOMEM;
    acc__free(ip);
  }
  acc__free(found[0]);
  acc__free(found[1]);
  return rc;
}

/* Appends "; <text>" to the strict-mode message while there is room. */
static void msg_add(char *msg, size_t cap, size_t *len, size_t *dropped, const char *text) {
  size_t t = strlen(text);
  if (*len + t + 40 >= cap) {
    (*dropped)++;
    return;
  }
  *len += (size_t)snprintf(msg + *len, cap - *len, "%s%s", msg[*len - 1] == ':' ? " " : "; ", text);
}

static int is_float_dtype(acc_dtype d) { return d == ACC_F32 || d == ACC_F64 || d == ACC_F16 || d == ACC_BF16; }


/* The checks and the load of acc_load_checkpoint_in_model on a model in host memory; with d, the
 * tensors go to d (acc__defer_commit writes them) and d keeps the files open. */
static acc_result load_into(acc_model *model, const char *path, const acc_load_options *opts, acc_load_report *report,
                            acc__defer *defer) {
  const acc_load_options o = *opts;
  opened files = {NULL, 0, 1}; /* F32 tensors are read with pread: faster than copying from the mapping */
  size_t *from = NULL; /* the file of each matched parameter */
  acc_load_report local = {0};
  acc_load_report *r = report ? report : &local;
  size_t np = acc_model_num_parameters(model);
  acc_tensor_view *match = acc__calloc(np ? np : 1, sizeof *match);
  unsigned char *ok = acc__calloc(np ? np : 1, 1);
  from = acc__calloc(np ? np : 1, sizeof *from);
  char msg[1800];
  size_t mlen = 0, dropped = 0;
  acc_result rc = ACC_OK;
  if (!match || !ok || !from) {
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  ACC_CHECK_GOTO(open_checkpoint(&files, path), rc, done);
  mlen = (size_t)snprintf(msg, sizeof msg, "checkpoint '%s' does not match the model:", path);
  /* Tensor names must be unique across shards. */
  for (size_t f = 0; f < files.nfiles; f++)
    for (size_t t = 0; t < acc_safetensors_count(files.files[f]); t++) {
      acc_tensor_view v, w;
      acc_safetensors_tensor(files.files[f], t, &v);
      for (size_t g = 0; g < f; g++)
        if (acc_safetensors_find(files.files[g], v.name, &w) == ACC_OK) {
          rc = acc__error(ACC_ERR_FORMAT, "checkpoint '%s': tensor '%s' is in both '%s' and '%s'", path, v.name,
                          acc_safetensors_path(files.files[g]), acc_safetensors_path(files.files[f]));
          goto done;
        }
    }
  acc_clear_error();
  char text[600], s1[200], s2[200];
  for (size_t i = 0; i < np; i++) {
    const acc_param *p = acc_model_parameter(model, i);
    int found = 0;
    for (size_t f = 0; f < files.nfiles && !found; f++)
      if (acc_safetensors_find(files.files[f], p->name, &match[i]) == ACC_OK) {
        found = 1;
        from[i] = f;
      }
    format_shape(s2, sizeof s2, p->ndim, p->shape);
    if (!found) {
      ACC_CHECK_GOTO(list_push(&r->missing, &r->n_missing, p->name), rc, done);
      snprintf(text, sizeof text, "missing tensor '%s' (model shape %s)", p->name, s2);
      msg_add(msg, sizeof msg, &mlen, &dropped, text);
      continue;
    }
    const acc_tensor_view *v = &match[i];
    format_shape(s1, sizeof s1, v->ndim, v->shape);
    int same = v->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = v->shape[d] == p->shape[d];
    if (!same) {
      snprintf(text, sizeof text, "tensor '%s' has shape %s in the checkpoint but %s in the model", p->name, s1, s2);
    } else if (!is_float_dtype(v->dtype)) {
      snprintf(text, sizeof text, "tensor '%s' has dtype %s in the checkpoint, which cannot be loaded into a f32 "
               "parameter", p->name, acc_safetensors_dtype_name(v->dtype));
    } else {
      ok[i] = 1;
      continue;
    }
    ACC_CHECK_GOTO(list_push(&r->mismatched, &r->n_mismatched, p->name), rc, done);
    msg_add(msg, sizeof msg, &mlen, &dropped, text);
  }
  acc_clear_error();
  for (size_t f = 0; f < files.nfiles; f++)
    for (size_t t = 0; t < acc_safetensors_count(files.files[f]); t++) {
      acc_tensor_view v;
      size_t idx;
      acc_safetensors_tensor(files.files[f], t, &v);
      if (acc_model_find(model, v.name, &idx) == ACC_OK) continue;
      ACC_CHECK_GOTO(list_push(&r->unexpected, &r->n_unexpected, v.name), rc, done);
      format_shape(s1, sizeof s1, v.ndim, v.shape);
      snprintf(text, sizeof text, "unexpected tensor '%s' (checkpoint shape %s)", v.name, s1);
      msg_add(msg, sizeof msg, &mlen, &dropped, text);
    }
  acc_clear_error();
  if (o.strict && (r->n_missing || r->n_mismatched || r->n_unexpected)) {
    if (dropped) snprintf(msg + mlen, sizeof msg - mlen, "; and %zu more", dropped);
    rc = acc__error(ACC_ERR_MISMATCH, "%s (nothing was loaded; to load only the matching tensors, call acc_load_checkpoint_in_model with "
                    "options.strict = 0)", msg);
    goto done;
  }
  if (defer) { /* the files go to defer (it closes one it could not keep), then where each tensor goes */
    for (size_t f = 0; f < files.nfiles; f++) {
      rc = acc__defer_adopt(defer, files.files[f]);
      if (rc != ACC_OK) {
        for (size_t g = f + 1; g < files.nfiles; g++) acc_safetensors_close(files.files[g]);
        files.nfiles = 0;
        goto done;
      }
    }
    files.nfiles = 0; /* defer closes them; the array stays until opened_close */
  }
  for (size_t i = 0; i < np; i++) {
    if (!ok[i]) continue;
    const acc_param *p = acc_model_parameter(model, i);
    if (defer) ACC_CHECK_GOTO(acc__defer_tensor(defer, files.files[from[i]], &match[i], p->data, p->numel, NULL, 0, 0),
                          rc, done);
    else if (match[i].dtype == ACC_F32) {
      rc = acc__safetensors_pread(files.files[from[i]], &match[i], p->data);
      if (rc != ACC_OK) {
        rc = acc__error_context(rc, "checkpoint '%s' (%zu parameters were loaded before this one)", path, r->n_loaded);
        goto done;
      }
    } else {
      acc__tensor_to_f32(p->data, &match[i], p->numel);
    }
    r->n_loaded++;
  }
done:
  if (!report) acc_load_report_clear(&local);
  opened_close(&files);
  acc__free(from);
  acc__free(match);
  acc__free(ok);
  return rc;
}

acc_result acc_load_checkpoint_in_model(acc_model *model, const char *path, const acc_load_options *opts,
                                        acc_load_report *report) {
  if (report) memset(report, 0, sizeof *report);
  if (!model || !path)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_load_checkpoint_in_model: model or path is NULL");
  acc_load_options o = ACC_LOAD_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_load_options, ACC_LOAD_OPTIONS_VERSION, "acc_load_checkpoint_in_model");
  acc_model *staged = NULL; /* a model in device memory loads into a host copy, then goes back */
  acc__devctx *sdev = NULL;
  ACC_CHECK(acc__dev_host_model(model, 0, &staged, &sdev));
  if (staged) {
    acc_result src = acc_load_checkpoint_in_model(staged, path, opts, report);
    if (src == ACC_OK) src = acc__dev_host_model_push(sdev, staged, model, 0);
    acc__dev_host_model_free(staged);
    return src;
  }
  return load_into(model, path, &o, report, NULL);
}

acc_result acc__load_model_deferred(acc_model *model, const char *path, acc__defer *d) {
  if (!acc__defer_model_on_host(model))
    return acc__error(ACC_ERR_INVALID_USAGE, "load_state: the model is in device memory: it cannot be deferred");
  acc_load_options o = ACC_LOAD_OPTIONS_INIT;
  return load_into(model, path, &o, NULL, d);
}
