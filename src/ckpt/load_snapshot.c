/* What load_state may change, copied before it reads anything and put back when it fails on any
 * process: the parameters of a model in device memory, optimizer scalars and which state tensors
 * are present (their values, and the parameters of a model in host memory, are only written once
 * everything agreed: load_defer.c), 
 * scheduler and GradScaler states, the global RNG, data loader positions, the accumulation step
 * and the objects registered for checkpointing (through their own save callback). A failed
 * load_state leaves every prepared object as it was. */
#include <string.h>

#include "ckpt/load_defer.h"
#include "ckpt/load_snapshot.h"
#include "core/log.h"
#include "data/data_internal.h"
#include "device/devio.h"
#include "train/train.h"

enum { BUFS = 2 }; /* optimizer state buffers per parameter (AdamW's two, SGD's one) */

typedef struct opt_snap {
  size_t nscalars;
  double *scalars;
  size_t nparams;
  unsigned char *present; /* nparams * BUFS */
} opt_snap;

typedef struct custom_snap {
  void *data;
  size_t len;
  int ok; /* the save callback worked: this object can be put back */
} custom_snap;

struct acc__load_snapshot {
  float **models; /* NULL: a model in host memory (load_state does not write it before the commit) */
  opt_snap *opts;
  int64_t *sched_step;
  double *sched_lrs; /* per scheduler: ACC__MAX_PREPARED group base lrs at most */
  size_t *sched_ngroups;
  float scale;
  int64_t tracker;
  uint8_t rng[ACC_RNG_STATE_SIZE];
  acc_dataloader_state *loaders;
  int64_t step;
  custom_snap *custom;
  int ncustom;
};

void acc__load_snapshot_free(acc__load_snapshot *s, const acc__accel_parts *p) {
  if (!s) return;
  for (int i = 0; s->models && i < p->nmodels; i++) acc__tmp_free(s->models[i]);
  for (int i = 0; s->opts && i < p->nopts; i++) {
    acc__free(s->opts[i].present);
    acc__free(s->opts[i].scalars);
  }
  for (int i = 0; s->custom && i < s->ncustom; i++) acc__tmp_free(s->custom[i].data);
  acc__free(s->models);
  acc__free(s->opts);
  acc__free(s->sched_step);
  acc__free(s->sched_lrs);
  acc__free(s->sched_ngroups);
  acc__free(s->loaders);
  acc__free(s->custom);
  acc__free(s);
}

static acc_result take_model(float **out, const acc_model *m) {
  if (acc__defer_model_on_host(m)) return ACC_OK;
  size_t n = acc_model_numel(m), off = 0;
  float *d = acc__tmp_alloc((n ? n : 1) * sizeof *d);
  if (!d) return ACC_ERR_NOMEM;
  for (size_t i = 0; i < acc_model_num_parameters(m); i++) {
    const acc_param *pa = acc_model_parameter(m, i);
    acc_result rc = acc__devio_to_host(d + off, pa->data, pa->numel * sizeof *d); /* device */
    if (rc != ACC_OK) {
      acc__tmp_free(d);
      return rc;
    }
    off += pa->numel;
  }
  *out = d;
  return ACC_OK;
}

static acc_result take_opt(opt_snap *s, acc_optimizer *o, const acc_model *m) {
  s->nscalars = acc_optimizer_scalar_count(o);
  s->scalars = acc__calloc(s->nscalars ? s->nscalars : 1, sizeof *s->scalars);
  s->nparams = acc_model_num_parameters(m);
  s->present = acc__calloc(s->nparams * BUFS + 1, sizeof *s->present);
  if (!s->scalars || !s->present) return ACC_ERR_NOMEM;
  for (size_t k = 0; k < s->nscalars; k++) ACC_CHECK(acc_optimizer_scalar_get(o, k, NULL, &s->scalars[k]));
  /* the values are not copied: load_state writes them only once everything agreed */
  for (size_t i = 0; i < s->nparams; i++)
    for (int b = 0; b < BUFS; b++) s->present[i * BUFS + (size_t)b] = (unsigned char)acc__optimizer_state_present(o, i, b);
  return ACC_OK;
}

acc_result acc__load_snapshot_take(const acc__accel_parts *p, acc__load_snapshot **out) {
  *out = NULL;
  acc__load_snapshot *s = acc__calloc(1, sizeof *s);
  if (!s) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  const int nsch = p->nscheds;
  s->models = acc__calloc((size_t)p->nmodels + 1, sizeof *s->models);
  s->opts = acc__calloc((size_t)p->nopts + 1, sizeof *s->opts);
  s->sched_step = acc__calloc((size_t)nsch + 1, sizeof *s->sched_step);
  s->sched_ngroups = acc__calloc((size_t)nsch + 1, sizeof *s->sched_ngroups);
  s->loaders = acc__calloc((size_t)p->nloaders + 1, sizeof *s->loaders);
  if (!s->models || !s->opts || !s->sched_step || !s->sched_ngroups || !s->loaders) rc = ACC_ERR_NOMEM;
  size_t total_groups = 0;
  for (int i = 0; rc == ACC_OK && i < nsch; i++) total_groups += acc_scheduler_group_count(p->scheds[i]);
  if (rc == ACC_OK && !(s->sched_lrs = acc__calloc(total_groups + 1, sizeof *s->sched_lrs))) rc = ACC_ERR_NOMEM;
  for (int i = 0; rc == ACC_OK && i < p->nmodels; i++) rc = take_model(&s->models[i], p->models[i]);
  for (int i = 0; rc == ACC_OK && i < p->nopts; i++)
    rc = take_opt(&s->opts[i], p->opts[i], acc_optimizer_model(p->opts[i]));
  for (int i = 0, g0 = 0; rc == ACC_OK && i < nsch; i++) {
    double base = 0;
    rc = acc_scheduler_get_state(p->scheds[i], &s->sched_step[i], &base);
    s->sched_ngroups[i] = acc_scheduler_group_count(p->scheds[i]);
    for (size_t g = 0; g < s->sched_ngroups[i]; g++)
      s->sched_lrs[g0 + (int)g] = g ? acc_scheduler_group_base_lr(p->scheds[i], g) : base;
    g0 += (int)s->sched_ngroups[i];
  }
  if (rc == ACC_OK && p->scaler) rc = acc_grad_scaler_get_state(p->scaler, &s->scale, &s->tracker);
  if (rc == ACC_OK) acc_rng_state_get(acc_rng_global(), s->rng);
  for (int i = 0; rc == ACC_OK && i < p->nloaders; i++) rc = acc_dataloader_state_get(p->loaders[i], &s->loaders[i]);
  s->step = *p->step;
  const acc__accel_ckpt *c = *p->ckpt;
  s->ncustom = c ? c->ncustom : 0;
  if (rc == ACC_OK && s->ncustom && !(s->custom = acc__calloc((size_t)s->ncustom, sizeof *s->custom)))
    rc = ACC_ERR_NOMEM;
  for (int i = 0; rc == ACC_OK && i < s->ncustom; i++) {
    /* An object whose save callback fails cannot be put back; load_state still runs. */
    custom_snap *cs = &s->custom[i];
    size_t len = 0, used = 0;
    if (c->custom[i].save(c->custom[i].obj, NULL, 0, &len) != ACC_OK) continue;
    if (!(cs->data = acc__tmp_alloc(len ? len : 1))) rc = ACC_ERR_NOMEM;
    else if (c->custom[i].save(c->custom[i].obj, cs->data, len, &used) == ACC_OK && used <= len) {
      cs->len = used;
      cs->ok = 1;
    }
  }
  if (rc != ACC_OK) {
    if (rc == ACC_ERR_NOMEM) rc = acc__error(ACC_ERR_NOMEM, "load_state: out of memory copying the prepared objects");
    acc__load_snapshot_free(s, p);
    return rc;
  }
  acc_clear_error(); /* a save callback that failed above left its text */
  *out = s;
  return ACC_OK;
}

static void restore_opt(const opt_snap *s, acc_optimizer *o) {
  for (size_t i = 0; i < s->nparams; i++)
    for (int b = 0; b < BUFS; b++) acc__optimizer_state_set_present(o, i, b, s->present[i * BUFS + (size_t)b]);
  /* One scalar at a time is validated against the others: two passes reach the saved set. */
  for (int pass = 0; pass < 2; pass++)
    for (size_t k = 1; k < s->nscalars; k++) {
      const char *name = NULL;
      if (acc_optimizer_scalar_get(o, k, &name, NULL) == ACC_OK) (void)acc_optimizer_scalar_set(o, name, s->scalars[k]);
    }
}

void acc__load_snapshot_restore(const acc__load_snapshot *s, const acc__accel_parts *p) {
  /* The message of the failure that made load_state give up is what the caller reports. */
  char *msg = acc__strdup(acc_last_error());
  for (int i = 0; i < p->nmodels; i++) {
    if (!s->models[i]) continue; /* in host memory: not written yet */
    size_t off = 0;
    for (size_t k = 0; k < acc_model_num_parameters(p->models[i]); k++) {
      const acc_param *pa = acc_model_parameter(p->models[i], k);
      (void)acc__devio_from_host(pa->data, s->models[i] + off, pa->numel * sizeof(float));
      off += pa->numel;
    }
  }
  /* Schedulers first: setting their state sets the optimizer's lr, which the optimizer's own
   * scalars then put back exactly. */
  for (int i = 0, g0 = 0; i < p->nscheds; i++) {
    for (size_t g = 1; g < s->sched_ngroups[i]; g++)
      (void)acc_scheduler_set_group_base_lr(p->scheds[i], g, s->sched_lrs[g0 + (int)g]);
    (void)acc_scheduler_set_state(p->scheds[i], s->sched_step[i], s->sched_lrs[g0]);
    g0 += (int)s->sched_ngroups[i];
  }
  for (int i = 0; i < p->nopts; i++) restore_opt(&s->opts[i], p->opts[i]);
  if (p->scaler) (void)acc_grad_scaler_set_state(p->scaler, s->scale, s->tracker);
  (void)acc_rng_state_set(acc_rng_global(), s->rng, sizeof s->rng);
  for (int i = 0; i < p->nloaders; i++) {
    acc_dataloader_state now;
    memset(&now, 0, sizeof now);
    if (acc_dataloader_state_get(p->loaders[i], &now) == ACC_OK && !memcmp(&now, &s->loaders[i], sizeof now))
      continue; /* untouched: keep its prefetched batches */
    (void)acc_dataloader_state_set(p->loaders[i], &s->loaders[i]);
  }
  *p->step = s->step;
  const acc__accel_ckpt *c = *p->ckpt;
  for (int i = 0; c && i < s->ncustom && i < c->ncustom; i++)
    if (s->custom[i].ok) (void)c->custom[i].load(c->custom[i].obj, s->custom[i].data, s->custom[i].len);
  if (msg) acc__error(ACC_ERR_IO, "%s", msg); /* acc__error keeps the text; the caller returns its code */
  acc__free(msg);
}
