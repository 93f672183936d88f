/* PowerSGD's state in save_state / load_state (train/powersgd.h): every process writes
 * powersgd_<process>.safetensors with, per prepared model under the hook, the step counter (in
 * the metadata) and, per compressed parameter, its Q ("<model>/<parameter>/q", m x r) and its
 * error feedback ("<model>/<parameter>/error", n x m), float32. The first Q of a parameter is
 * drawn from a generator seeded by the parameter's index (the same on every process), so there is
 * no running generator; the seed is in the metadata and checked.
 *
 * A load stages into fresh states and swaps them in only once every process agreed (a failed load
 * leaves the hook as it was). At the process count that saved, each process takes its own file
 * back: the run continues bit for bit. At another count the error feedback and Q (one per
 * process, sums over the processes that saved) mean nothing to the new layout: the hook starts
 * fresh at the saved step counter and process 0 says so. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/accel_state.h"
#include "ckpt/psgd_state.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/powersgd.h"

#define PSGD_FORMAT "accelerate-c-powersgd"
#define PSGD_MAX_STEP ((int64_t)1 << 53)

int acc__psgd_state_models(const acc__accel_parts *p) {
  int n = 0;
  for (int i = 0; i < p->nmodels; i++) n += p->pmodels[i].psgd != NULL;
  return n;
}

static char *tensor_name(int model, const char *param, const char *what) {
  size_t len = strlen(param) + strlen(what) + 32;
  char *s = acc__malloc(len);
  if (s) snprintf(s, len, "%d/%s/%s", model, param, what);
  return s;
}

acc_result acc__psgd_state_save(acc__accel_parts *p, const char *dir) {
  if (!acc__psgd_state_models(p)) return ACC_OK;
  const int rank = acc_state_process_index(p->st);
  size_t cap = 0;
  for (int i = 0; i < p->nmodels; i++)
    if (p->pmodels[i].psgd) cap += 2 * acc_model_num_parameters(p->models[i]);
  acc_tensor_view *tv = acc__calloc(cap ? cap : 1, sizeof *tv);
  /* keys: format, process_index, num_processes, seed, then 3 per model */
  enum { FIXED = 4 };
  size_t nmeta_cap = FIXED + 3 * (size_t)p->nmodels;
  char **keys = acc__calloc(nmeta_cap, sizeof *keys), **vals = acc__calloc(nmeta_cap, sizeof *vals);
  acc_result rc = tv && keys && vals ? ACC_OK : ACC_ERR_NOMEM;
  size_t nt = 0, nm = 0;
  char buf[64];
#define META(k, ...)                                          \
  do {                                                        \
    if (rc != ACC_OK) break;                                  \
    snprintf(buf, sizeof buf, __VA_ARGS__);                   \
    keys[nm] = acc__strdup(k);                                \
    vals[nm] = acc__strdup(buf);                              \
    if (!keys[nm++] || !vals[nm - 1]) rc = ACC_ERR_NOMEM;     \
  } while (0)
  META("format", "%s", PSGD_FORMAT);
  META("process_index", "%d", rank);
  META("num_processes", "%d", acc_state_num_processes(p->st));
  META("seed", "%" PRIu64, acc__powersgd_seed());
  for (int i = 0; i < p->nmodels && rc == ACC_OK; i++) {
    const acc__powersgd *s = p->pmodels[i].psgd;
    if (!s) continue;
    char key[64];
    snprintf(key, sizeof key, "model%d.step", i);
    META(key, "%ld", acc__powersgd_iter(s));
    snprintf(key, sizeof key, "model%d.rank", i);
    META(key, "%d", acc__powersgd_rank(s));
    snprintf(key, sizeof key, "model%d.start_iter", i);
    META(key, "%ld", acc__powersgd_start_iter(s));
    size_t np = acc_model_num_parameters(p->models[i]);
    for (size_t k = 0; k < np && rc == ACC_OK; k++) {
      size_t d[3];
      const float *q, *err;
      if (!acc__powersgd_param(s, k, d, &q, &err)) continue;
      const char *name = acc_model_parameter(p->models[i], k)->name;
      tv[nt].name = tensor_name(i, name, "q");
      tv[nt].dtype = ACC_F32;
      tv[nt].ndim = 2;
      tv[nt].shape[0] = (int64_t)d[1];
      tv[nt].shape[1] = (int64_t)d[2];
      tv[nt].data = q;
      tv[nt + 1].name = tensor_name(i, name, "error");
      tv[nt + 1].dtype = ACC_F32;
      tv[nt + 1].ndim = 2;
      tv[nt + 1].shape[0] = (int64_t)d[0];
      tv[nt + 1].shape[1] = (int64_t)d[1];
      tv[nt + 1].data = err;
      nt += 2;
      if (!tv[nt - 2].name || !tv[nt - 1].name) rc = ACC_ERR_NOMEM;
    }
  }
#undef META
  char fname[64];
  snprintf(fname, sizeof fname, "powersgd_%d.safetensors", rank);
  char *path = rc == ACC_OK ? acc__path_join(dir, fname) : NULL;
  if (rc == ACC_OK && !path) rc = ACC_ERR_NOMEM;
  if (rc == ACC_OK)
    rc = acc_safetensors_write(path, tv, nt, (const char *const *)keys, (const char *const *)vals, nm);
  if (rc != ACC_OK && rc != ACC_ERR_NOMEM)
    rc = acc__error_context(rc, "save_state: the PowerSGD state of process %d", rank);
  for (size_t k = 0; tv && k < nt; k++) acc__free((void *)tv[k].name);
  for (size_t k = 0; k < nm; k++) acc__free(keys[k]), acc__free(vals[k]);
  acc__free(keys);
  acc__free(vals);
  acc__free(tv);
  acc__free(path);
  return rc;
}

void acc__psgd_staged_release(acc__psgd_staged *s) {
  for (int i = 0; i < ACC__MAX_PREPARED; i++) {
    acc__powersgd_destroy(s->fresh[i]);
    s->fresh[i] = NULL;
  }
}

/* A decimal integer in lo..hi from the file's metadata. */
static acc_result meta_int(const acc_safetensors *f, const char *path, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
  const char *v = acc_safetensors_metadata(f, key);
  char *end = NULL;
  long long x = v && *v && (*v == '-' || (*v >= '0' && *v <= '9')) ? strtoll(v, &end, 10) : 0;
  if (!v || !end || *end || x < lo || x > hi)
    return acc__error(ACC_ERR_FORMAT, "'%s': metadata \"%s\" must be an integer %lld..%lld, got %s%s%s", path, key,
                      (long long)lo, (long long)hi, v ? "\"" : "", v ? v : "none", v ? "\"" : "");
  *out = x;
  return ACC_OK;
}

/* The tensors of model i in the file into the fresh state s. */
static acc_result stage_tensors(const acc_safetensors *f, const char *path, int i, acc_model *m, acc__powersgd *s) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "%d/", i);
  size_t plen = strlen(prefix), n = acc_safetensors_count(f);
  for (size_t t = 0; t < n; t++) {
    acc_tensor_view v;
    ACC_CHECK(acc_safetensors_tensor(f, t, &v));
    if (strncmp(v.name, prefix, plen) != 0) continue;
    const char *pname = v.name + plen, *slash = strrchr(pname, '/');
    if (!slash || (strcmp(slash, "/q") != 0 && strcmp(slash, "/error") != 0))
      return acc__error(ACC_ERR_FORMAT, "'%s': tensor \"%s\" is not <model>/<parameter>/q or /error", path, v.name);
    const int is_q = !strcmp(slash, "/q");
    char *name = acc__malloc((size_t)(slash - pname) + 1);
    if (!name) return ACC_ERR_NOMEM;
    memcpy(name, pname, (size_t)(slash - pname));
    name[slash - pname] = 0;
    size_t idx = 0;
    acc_result rc = acc_model_find(m, name, &idx);
    if (rc != ACC_OK)
      rc = acc__error(ACC_ERR_MISMATCH, "'%s': tensor \"%s\" is for parameter '%s', which prepared model %d does not "
                      "have", path, v.name, name, i);
    size_t d[3] = {0, 0, 0};
    float *q = NULL, *err = NULL;
    if (rc == ACC_OK) {
      rc = acc__powersgd_set_param(s, idx, d, &q, &err);
      if (rc == ACC_ERR_MISMATCH)
        rc = acc__error(ACC_ERR_MISMATCH, "'%s': tensor \"%s\": parameter '%s' of prepared model %d is not "
                        "compressed at PowerSGD rank %d (its shape differs from the saved one)", path, v.name, name,
                        i, acc__powersgd_rank(s));
    }
    const int64_t want0 = (int64_t)(is_q ? d[1] : d[0]), want1 = (int64_t)(is_q ? d[2] : d[1]);
    if (rc == ACC_OK && (v.dtype != ACC_F32 || v.ndim != 2 || v.shape[0] != want0 || v.shape[1] != want1))
      rc = acc__error(ACC_ERR_MISMATCH, "'%s': tensor \"%s\" is %s of %d dimension(s) [%lld, %lld] but parameter "
                      "'%s' at PowerSGD rank %d needs f32 [%lld, %lld] (saved with another rank? resume with the "
                      "same ACCELERATE_POWERSGD_RANK)", path, v.name, acc_dtype_name(v.dtype), v.ndim,
                      (long long)(v.ndim > 0 ? v.shape[0] : 0), (long long)(v.ndim > 1 ? v.shape[1] : 0), name,
                      acc__powersgd_rank(s), (long long)want0, (long long)want1);
    if (rc == ACC_OK) memcpy(is_q ? q : err, v.data, (size_t)(want0 * want1) * sizeof(float));
    acc__free(name);
    ACC_CHECK(rc);
  }
  return ACC_OK;
}

acc_result acc__psgd_state_stage(acc__accel_parts *p, const char *dir, int64_t saved_np, int saved_models,
                                 acc__psgd_staged *out) {
  memset(out, 0, sizeof *out);
  if (!acc__psgd_state_models(p)) {
    out->ignored = saved_models > 0;
    return ACC_OK;
  }
  const int rank = acc_state_process_index(p->st), now = acc_state_num_processes(p->st);
  for (int i = 0; i < p->nmodels; i++)
    if (p->pmodels[i].psgd) ACC_CHECK(acc__powersgd_fresh(p->pmodels[i].psgd, &out->fresh[i]));
  out->active = 1;
  if (saved_models == 0) { /* saved without the hook: it starts here */
    out->why = 1;
    return ACC_OK;
  }
  const int remap = saved_np != now;
  const int src = rank < saved_np ? rank : 0;
  char name[64];
  snprintf(name, sizeof name, "powersgd_%d.safetensors", src);
  char *path = acc__path_join(dir, name);
  if (!path) return ACC_ERR_NOMEM;
  acc_safetensors *f = NULL;
  acc_result rc = acc_safetensors_open(&f, path);
  int64_t v = 0;
  if (rc == ACC_OK) {
    const char *fmt = acc_safetensors_metadata(f, "format");
    if (!fmt || strcmp(fmt, PSGD_FORMAT) != 0)
      rc = acc__error(ACC_ERR_FORMAT, "'%s' is not a PowerSGD state (metadata \"format\" is %s)", path,
                      fmt ? fmt : "missing");
  }
  if (rc == ACC_OK) rc = meta_int(f, path, "process_index", src, src, &v);
  if (rc == ACC_OK) rc = meta_int(f, path, "num_processes", saved_np, saved_np, &v);
  if (rc == ACC_OK) {
    const char *seed = acc_safetensors_metadata(f, "seed");
    char want[32];
    snprintf(want, sizeof want, "%" PRIu64, acc__powersgd_seed());
    if (!seed || strcmp(seed, want) != 0)
      rc = acc__error(ACC_ERR_MISMATCH, "'%s': metadata \"seed\" is %s but this library draws the first Q with seed "
                      "%s: the state is from another implementation", path, seed ? seed : "missing", want);
  }
  for (int i = 0; i < p->nmodels && rc == ACC_OK; i++) {
    acc__powersgd *s = out->fresh[i];
    if (!s) continue;
    char key[64];
    snprintf(key, sizeof key, "model%d.step", i);
    if (!acc_safetensors_metadata(f, key)) { /* this model was saved without the hook */
      out->why = 1;
      continue;
    }
    rc = meta_int(f, path, key, 0, PSGD_MAX_STEP, &v);
    if (rc == ACC_OK) acc__powersgd_set_iter(s, (long)v);
    if (rc != ACC_OK || remap) continue; /* another process count: fresh, at the saved step */
    int64_t r = 0;
    snprintf(key, sizeof key, "model%d.rank", i);
    rc = meta_int(f, path, key, 1, 1 << 30, &r);
    if (rc == ACC_OK && r != acc__powersgd_rank(s))
      rc = acc__error(ACC_ERR_MISMATCH, "'%s': prepared model %d was saved at PowerSGD rank %lld but runs at rank %d "
                      "now: resume with ACCELERATE_POWERSGD_RANK=%lld", path, i, (long long)r, acc__powersgd_rank(s),
                      (long long)r);
    if (rc == ACC_OK) rc = stage_tensors(f, path, i, p->models[i], s);
  }
  if (rc == ACC_OK && remap) out->why = 2;
  acc_safetensors_close(f);
  acc__free(path);
  if (rc != ACC_OK) acc__psgd_staged_release(out);
  return rc;
}

void acc__psgd_state_commit(acc__accel_parts *p, acc__psgd_staged *s, const char *dir, int64_t saved_np) {
  if (s->ignored && acc_state_process_index(p->st) == 0)
    acc__log(ACC_LOG_WARNING, "load_state: checkpoint '%s' holds a PowerSGD state but no comm hook runs now: it is "
             "not used", dir);
  if (!s->active) return;
  for (int i = 0; i < p->nmodels; i++) {
    if (!s->fresh[i]) continue;
    acc__powersgd_swap(p->pmodels[i].psgd, s->fresh[i]); /* the staged one now holds the old state */
    if (s->why && acc_state_process_index(p->st) == 0) {
      if (s->why == 2)
        acc__log(ACC_LOG_WARNING, "load_state: PowerSGD of prepared model %d starts fresh (zero error feedback, new "
                 "random Q) at step %ld: its state is per process and checkpoint '%s' was saved by %lld "
                 "process(es), %d run now", i, acc__powersgd_iter(p->pmodels[i].psgd), dir, (long long)saved_np,
                 acc_state_num_processes(p->st));
      else
        acc__log(ACC_LOG_WARNING, "load_state: PowerSGD of prepared model %d starts fresh at step 0: checkpoint '%s' "
                 "was saved without it", i, dir);
    }
  }
  acc__psgd_staged_release(s);
}
