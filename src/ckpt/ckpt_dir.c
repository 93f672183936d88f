/* Checkpoint directory transactions and the project configuration
 * (automatic checkpoint naming, rotation, "latest complete checkpoint"). */
#include "ckpt/ckpt_dir.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void progress(const char *phase) {
  if (acc__fs_progress_hook) acc__fs_progress_hook(phase);
}

/* ---- transactions --------------------------------------------------------------------------- */

int acc_checkpoint_is_complete(const char *dir) {
  if (!dir || !acc__is_dir(dir)) return 0;
  char *marker = acc__path_join(dir, ACC_CHECKPOINT_MARKER);
  if (!marker) return 0;
  int ok = acc__is_file(marker);
  acc__free(marker);
  return ok;
}

static void txn_free(acc__ckpt_txn *txn) {
  acc__free(txn->final_dir);
  acc__free(txn->tmp_dir);
  txn->final_dir = txn->tmp_dir = NULL;
}

acc_result acc__ckpt_begin(acc__ckpt_txn *txn, const char *final_dir) {
  memset(txn, 0, sizeof *txn);
  if (!final_dir || !*final_dir)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_checkpoint_begin: the checkpoint directory is empty");
  size_t n = strlen(final_dir);
  while (n > 1 && final_dir[n - 1] == '/') n--;
  txn->final_dir = acc__malloc(n + 1);
  txn->tmp_dir = acc__malloc(n + sizeof ACC__CKPT_TMP_SUFFIX);
  if (!txn->final_dir || !txn->tmp_dir) {
    txn_free(txn);
    return ACC_ERR_NOMEM;
  }
  memcpy(txn->final_dir, final_dir, n);
  txn->final_dir[n] = 0;
  memcpy(txn->tmp_dir, final_dir, n);
  memcpy(txn->tmp_dir + n, ACC__CKPT_TMP_SUFFIX, sizeof ACC__CKPT_TMP_SUFFIX);
  acc_result rc = ACC_OK;
  struct stat sb;
  if (stat(txn->final_dir, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode)) {
      rc = acc__error(ACC_ERR_INVALID_USAGE,
                      "checkpoint directory '%s' already exists as a file: remove it or choose another directory",
                      txn->final_dir);
    } else if (acc_checkpoint_is_complete(txn->final_dir)) {
      rc = acc__error(ACC_ERR_INVALID_USAGE,
                      "checkpoint directory '%s' already exists: delete it, choose another output directory, "
                      "or set the iteration (acc_project_config_set_iteration) to a number not used yet",
                      txn->final_dir);
    } else {
      rc = acc__rmtree(txn->final_dir); /* leftover of a crash between rename and marker */
    }
  }
  if (rc == ACC_OK) rc = acc__rmtree(txn->tmp_dir);
  if (rc == ACC_OK) {
    char *parent = acc__path_dirname(txn->final_dir);
    rc = parent ? acc__mkdirs(parent) : ACC_ERR_NOMEM;
    acc__free(parent);
  }
  if (rc == ACC_OK && mkdir(txn->tmp_dir, 0755) != 0)
    rc = acc__error(ACC_ERR_IO, "could not create checkpoint directory '%s': %s", txn->tmp_dir, strerror(errno));
  if (rc != ACC_OK) txn_free(txn);
  return rc;
}

acc_result acc__ckpt_commit(acc__ckpt_txn *txn) {
  if (!txn->tmp_dir) return acc__error(ACC_ERR_INVALID_USAGE, "acc_checkpoint_commit: no checkpoint in progress");
  /* Everything that allocates happens before the rename, so that a failure leaves either the
   * temporary directory (removed here) or nothing: never a final directory without its marker. */
  char *parent = acc__path_dirname(txn->final_dir);
  char *marker = acc__path_join(txn->final_dir, ACC_CHECKPOINT_MARKER);
  int renamed = 0;
  acc_result rc = (parent && marker) ? acc__fsync_tree(txn->tmp_dir) : ACC_ERR_NOMEM;
  if (rc != ACC_OK) goto done;
  progress("synced");
  if (rename(txn->tmp_dir, txn->final_dir) != 0) {
    rc = acc__error(ACC_ERR_IO, "could not rename checkpoint '%s' to '%s': %s", txn->tmp_dir, txn->final_dir,
                    strerror(errno));
    goto done;
  }
  renamed = 1;
  progress("renamed");
  ACC_CHECK_GOTO(acc__fsync_dir(parent), rc, done);
  static const char text[] = "accelerate-c checkpoint complete\n";
  ACC_CHECK_GOTO(acc__write_file_atomic(marker, text, sizeof text - 1), rc, done);
  progress("committed");
done:
  if (rc != ACC_OK) (void)acc__rmtree(renamed ? txn->final_dir : txn->tmp_dir); /* best effort */
  acc__free(parent);
  acc__free(marker);
  txn_free(txn);
  return rc;
}

void acc__ckpt_abort(acc__ckpt_txn *txn) {
  if (txn->tmp_dir) (void)acc__rmtree(txn->tmp_dir);
  txn_free(txn);
}

/* ---- project configuration ------------------------------------------------------------------ */

struct acc_project_config {
  uint32_t magic;
  char *project_dir;
  char *logging_dir; /* NULL: project_dir */
  int automatic;
  int total_limit;
  int64_t iteration;
};

struct acc_checkpoint {
  uint32_t magic;
  acc_project_config *project;
  acc__ckpt_txn txn;
  int automatic;
};

static int valid_project(const acc_project_config *p) { return acc__handle_ok(p, ACC__HANDLE_PROJECT); }

acc_result acc_project_config_create(acc_project_config **out, const acc_project_options *opts) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_project_config_create: out is NULL");
  *out = NULL;
  acc_project_options o = ACC_PROJECT_OPTIONS_INIT;
  ACC__READ_OPTIONS(o, opts, acc_project_options, ACC_PROJECT_OPTIONS_VERSION, "acc_project_config_create");
  if (o.iteration < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_project_config_create: iteration is %lld (must be >= 0)",
                      (long long)o.iteration);
  if (o.total_limit < ACC_UNSET)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_project_config_create: total_limit is %d (must be > 0, or 0 / ACC_UNSET for no limit)",
                      o.total_limit);
  acc_project_config *p = acc__calloc(1, sizeof *p);
  if (!p) return ACC_ERR_NOMEM;
  p->project_dir = acc__strdup(o.project_dir && *o.project_dir ? o.project_dir : ".");
  if (!p->project_dir) {
    acc__free(p);
    return ACC_ERR_NOMEM;
  }
  if (o.logging_dir && *o.logging_dir && !(p->logging_dir = acc__strdup(o.logging_dir))) {
    acc__free(p->project_dir);
    acc__free(p);
    return ACC_ERR_NOMEM;
  }
  p->magic = ACC__MAGIC_PROJECT;
  p->automatic = o.automatic_checkpoint_naming != 0;
  p->total_limit = o.total_limit > 0 ? o.total_limit : 0;
  p->iteration = o.iteration;
  *out = p;
  return ACC_OK;
}

void acc_project_config_destroy(acc_project_config *p) {
  if (!valid_project(p)) return;
  p->magic = ACC__MAGIC_DEAD;
  acc__free(p->project_dir);
  acc__free(p->logging_dir);
  acc__free(p);
}

int64_t acc_project_config_iteration(const acc_project_config *p) { return valid_project(p) ? p->iteration : -1; }

const char *acc_project_config_dir(const acc_project_config *p) { return valid_project(p) ? p->project_dir : NULL; }

const char *acc_project_config_logging_dir(const acc_project_config *p) {
  return valid_project(p) ? (p->logging_dir ? p->logging_dir : p->project_dir) : NULL;
}

acc_result acc_project_config_set_iteration(acc_project_config *p, int64_t iteration) {
  ACC_CHECK(acc__check_handle(p, ACC__HANDLE_PROJECT, "acc_project_config_set_iteration"));
  if (iteration < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "iteration is %lld (must be >= 0)", (long long)iteration);
  p->iteration = iteration;
  return ACC_OK;
}

/* Parses "checkpoint_<digits>" exactly; returns the number or -1. */
static long checkpoint_number(const char *name) {
  static const char prefix[] = "checkpoint_";
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
  const char *s = name + sizeof prefix - 1;
  if (!*s) return -1;
  long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    if (v > (LONG_MAX - 9) / 10) return -1;
    v = v * 10 + (*s - '0');
  }
  return v;
}

typedef acc__ckpt_entry entry;

static int entry_cmp(const void *a, const void *b) {
  long x = ((const entry *)a)->num, y = ((const entry *)b)->num;
  return (x > y) - (x < y);
}

void acc__ckpt_entries_free(acc__ckpt_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) acc__free(e[i].path);
  acc__free(e);
}

acc_result acc__ckpt_list(const char *base, int include_incomplete, acc__ckpt_entry **out, size_t *count) {
  *out = NULL;
  *count = 0;
  DIR *d = opendir(base);
  if (!d) {
    if (errno == ENOENT) return ACC_OK;
    return acc__error(ACC_ERR_IO, "could not list checkpoint directory '%s': %s", base, strerror(errno));
  }
  entry *v = NULL;
  size_t n = 0, cap = 0;
  acc_result rc = ACC_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long num = checkpoint_number(e->d_name);
    if (num < 0) continue;
    char *path = acc__path_join(base, e->d_name);
    if (!path) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    int complete = acc_checkpoint_is_complete(path);
    if (!complete && !include_incomplete) {
      acc__free(path);
      continue;
    }
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      entry *nv = acc__realloc(v, nc * sizeof *nv);
      if (!nv) {
        acc__free(path);
        rc = ACC_ERR_NOMEM;
        break;
      }
      v = nv;
      cap = nc;
    }
    v[n].num = num;
    v[n].path = path;
    v[n].complete = complete;
    n++;
  }
  closedir(d);
  if (rc != ACC_OK) {
    acc__ckpt_entries_free(v, n);
    return rc;
  }
  if (n > 1) qsort(v, n, sizeof *v, entry_cmp);
  *out = v;
  *count = n;
  return ACC_OK;
}

acc_result acc__ckpt_remove(const char *dir) {
  /* A checkpoint_N that is a symlink (e.g. to another run's checkpoint) is pruned by removing
   * the link only: nothing is deleted through a link the library did not create. */
  struct stat lst;
  if (lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode)) {
    if (unlink(dir) != 0 && errno != ENOENT)
      return acc__error(ACC_ERR_IO, "could not remove the link '%s': %s", dir, strerror(errno));
    char *parent = acc__path_dirname(dir);
    acc_result rc = parent ? acc__fsync_dir(parent) : ACC_ERR_NOMEM;
    acc__free(parent);
    return rc;
  }
  char *marker = acc__path_join(dir, ACC_CHECKPOINT_MARKER);
  if (!marker) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  if (unlink(marker) != 0 && errno != ENOENT)
    rc = acc__error(ACC_ERR_IO, "could not remove '%s': %s", marker, strerror(errno));
  acc__free(marker);
  if (rc == ACC_OK) rc = acc__fsync_dir(dir);
  if (rc == ACC_OK && acc__fs_progress_hook) acc__fs_progress_hook("pruning");
  if (rc == ACC_OK) rc = acc__rmtree(dir);
  return rc;
}

acc_result acc_checkpoint_begin(acc_project_config *p, const char *output_dir, acc_checkpoint **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_checkpoint_begin: out is NULL");
  *out = NULL;
  ACC_CHECK(acc__check_handle(p, ACC__HANDLE_PROJECT, "acc_checkpoint_begin"));
  char *target = NULL;
  acc_result rc = ACC_OK;
  if (p->automatic) {
    if (output_dir)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "acc_checkpoint_begin: output_dir '%s' given but automatic checkpoint naming is on "
                        "(pass NULL: the checkpoint goes to '%s/checkpoints/checkpoint_%lld')",
                        output_dir, p->project_dir, (long long)p->iteration);
    char *base = acc__path_join(p->project_dir, "checkpoints");
    if (!base) return ACC_ERR_NOMEM;
    char name[48];
    snprintf(name, sizeof name, "checkpoint_%lld", (long long)p->iteration);
    target = acc__path_join(base, name);
    if (!target) rc = ACC_ERR_NOMEM;
    if (rc == ACC_OK) rc = acc__mkdirs(base);
    if (rc == ACC_OK && p->total_limit > 0 && !acc_checkpoint_is_complete(target)) {
      entry *v;
      size_t n;
      rc = acc__ckpt_list(base, 0, &v, &n);
      if (rc == ACC_OK) {
        /* Oldest first, by the number in the name (never string order). */
        for (size_t i = 0; rc == ACC_OK && n + 1 > (size_t)p->total_limit && i < n + 1 - (size_t)p->total_limit; i++)
          rc = acc__ckpt_remove(v[i].path);
        acc__ckpt_entries_free(v, n);
      }
    }
    acc__free(base);
  } else {
    if (!output_dir || !*output_dir)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "acc_checkpoint_begin: no output directory given and automatic checkpoint naming is off");
    target = acc__strdup(output_dir);
    if (!target) rc = ACC_ERR_NOMEM;
  }
  acc_checkpoint *c = NULL;
  if (rc == ACC_OK) {
    c = acc__calloc(1, sizeof *c);
    if (!c) rc = ACC_ERR_NOMEM;
  }
  if (rc == ACC_OK) rc = acc__ckpt_begin(&c->txn, target);
  acc__free(target);
  if (rc != ACC_OK) {
    acc__free(c);
    return rc;
  }
  c->magic = ACC__MAGIC_CHECKPOINT;
  c->project = p;
  c->automatic = p->automatic;
  *out = c;
  return ACC_OK;
}

const char *acc_checkpoint_dir(const acc_checkpoint *c) {
  return acc__handle_ok(c, ACC__HANDLE_CHECKPOINT) ? c->txn.tmp_dir : NULL;
}

const char *acc_checkpoint_target(const acc_checkpoint *c) {
  return acc__handle_ok(c, ACC__HANDLE_CHECKPOINT) ? c->txn.final_dir : NULL;
}

acc_result acc_checkpoint_commit(acc_checkpoint *c) {
  ACC_CHECK(acc__check_handle(c, ACC__HANDLE_CHECKPOINT, "acc_checkpoint_commit"));
  acc_result rc = acc__ckpt_commit(&c->txn);
  if (rc == ACC_OK && valid_project(c->project)) c->project->iteration++; /* like save_state, always */
  c->magic = ACC__MAGIC_DEAD;
  acc__free(c);
  return rc;
}

void acc_checkpoint_abort(acc_checkpoint *c) {
  if (!acc__handle_ok(c, ACC__HANDLE_CHECKPOINT)) return;
  acc__ckpt_abort(&c->txn);
  c->magic = ACC__MAGIC_DEAD;
  acc__free(c);
}

acc_result acc_project_latest_checkpoint(const acc_project_config *p, char **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_project_latest_checkpoint: out is NULL");
  *out = NULL;
  ACC_CHECK(acc__check_handle(p, ACC__HANDLE_PROJECT, "acc_project_latest_checkpoint"));
  char *base = acc__path_join(p->project_dir, "checkpoints");
  if (!base) return ACC_ERR_NOMEM;
  entry *v;
  size_t n;
  acc_result rc = acc__ckpt_list(base, 0, &v, &n);
  if (rc == ACC_OK) {
    if (n == 0) {
      rc = acc__error(ACC_ERR_NOT_FOUND, "no complete checkpoint found in '%s' (looked for checkpoint_<N> "
                      "directories holding a %s marker)", base, ACC_CHECKPOINT_MARKER);
    } else {
      *out = v[n - 1].path;
      v[n - 1].path = NULL;
    }
    acc__ckpt_entries_free(v, n);
  }
  acc__free(base);
  return rc;
}

acc_result acc_project_resolve_load(const acc_project_config *p, const char *input_dir, char **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_project_resolve_load: out is NULL");
  *out = NULL;
  ACC_CHECK(acc__check_handle(p, ACC__HANDLE_PROJECT, "acc_project_resolve_load"));
  if (!input_dir) {
    if (!p->automatic)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "no input directory given and automatic checkpoint naming is off");
    return acc_project_latest_checkpoint(p, out);
  }
  size_t n = strlen(input_dir), ls = strlen(ACC__CKPT_TMP_SUFFIX);
  while (n > 1 && input_dir[n - 1] == '/') n--;
  if (!acc__is_dir(input_dir))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "tried to find checkpoint '%s' but the folder does not exist", input_dir);
  if (n >= ls && strncmp(input_dir + n - ls, ACC__CKPT_TMP_SUFFIX, ls) == 0)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "checkpoint '%s' is a temporary directory of a save that did not finish: load a complete "
                      "checkpoint instead", input_dir);
  if (!acc_checkpoint_is_complete(input_dir))
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "checkpoint '%s' is incomplete (no %s marker): the save that wrote it did not finish; load "
                      "an earlier checkpoint", input_dir, ACC_CHECKPOINT_MARKER);
  *out = acc__strdup(input_dir);
  return *out ? ACC_OK : ACC_ERR_NOMEM;
}

acc_result acc_project_checkpoint_loaded(acc_project_config *p, const char *dir) {
  ACC_CHECK(acc__check_handle(p, ACC__HANDLE_PROJECT, "acc_project_checkpoint_loaded"));
  if (!dir) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_project_checkpoint_loaded: dir is NULL");
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  size_t start = n;
  while (start > 0 && dir[start - 1] != '/') start--;
  char name[64];
  if (n - start >= sizeof name) return ACC_OK;
  memcpy(name, dir + start, n - start);
  name[n - start] = 0;
  long k = checkpoint_number(name);
  if (k >= 0 && p->automatic && k < LONG_MAX) p->iteration = k + 1;
  return ACC_OK;
}
