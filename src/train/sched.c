/* Learning-rate schedulers: transformers' get_*_schedule_with_warmup factors and a user lambda,
 * applied like torch's LambdaLR (lr = base_lr * factor(step); creation applies step 0). */
#include <math.h>
#include <string.h>

#include "core/internal.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

struct acc_scheduler {
  uint32_t magic;
  acc_optimizer *opt;
  acc_scheduler_options opts;
  int64_t step;
  size_t ngroups;
  double *base_lrs; /* one per parameter group of the optimizer */
  double last_lr;   /* group 0's */
};

static double warmup_factor(int64_t step, int64_t warmup) {
  return (double)step / (double)(warmup > 1 ? warmup : 1);
}

static double factor(const acc_scheduler *s, int64_t step) {
  const acc_scheduler_options *o = &s->opts;
  int64_t w = o->num_warmup_steps, t = o->num_training_steps;
  switch (o->kind) {
    case ACC_SCHEDULER_CONSTANT: return 1.0;
    case ACC_SCHEDULER_CONSTANT_WITH_WARMUP: return step < w ? warmup_factor(step, w) : 1.0;
    case ACC_SCHEDULER_LINEAR_WITH_WARMUP: {
      if (step < w) return warmup_factor(step, w);
      double f = (double)(t - step) / (double)(t - w > 1 ? t - w : 1);
      return f > 0.0 ? f : 0.0;
    }
    case ACC_SCHEDULER_COSINE_WITH_WARMUP: {
      if (step < w) return warmup_factor(step, w);
      double progress = (double)(step - w) / (double)(t - w > 1 ? t - w : 1);
      double f = 0.5 * (1.0 + cos(M_PI * o->num_cycles * 2.0 * progress));
      return f > 0.0 ? f : 0.0;
    }
    case ACC_SCHEDULER_LAMBDA: return o->fn(step, o->payload);
  }
  return 1.0;
}

/* Every group's lr = its base lr * factor(step) (torch's LambdaLR over param_groups). */
static acc_result apply(acc_scheduler *s) {
  double f = factor(s, s->step);
  for (size_t g = 0; g < s->ngroups; g++) {
    double lr = s->base_lrs[g] * f;
    if (!(lr >= 0.0) || isinf(lr))
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "acc_scheduler: the schedule gave lr %g at step %lld (group %zu, base_lr %g); the factor "
                        "must be finite and >= 0",
                        lr, (long long)s->step, g, s->base_lrs[g]);
  }
  for (size_t g = 0; g < s->ngroups; g++) ACC_CHECK(acc_optimizer_set_group_lr(s->opt, g, s->base_lrs[g] * f));
  s->last_lr = s->base_lrs[0] * f;
  return ACC_OK;
}

acc_result acc_scheduler_create(acc_scheduler **out, acc_optimizer *o, const acc_scheduler_options *opts) {
  const char *fn = "acc_scheduler_create";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  if (!acc_optimizer_model(o)) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: invalid optimizer handle", fn);
  acc_scheduler_options so = ACC_SCHEDULER_OPTIONS_INIT;
  ACC__READ_OPTIONS(so, opts, acc_scheduler_options, ACC_SCHEDULER_OPTIONS_VERSION, fn);
  if ((unsigned)so.kind > ACC_SCHEDULER_LAMBDA)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: unknown scheduler kind %d", fn, (int)so.kind);
  if (so.kind == ACC_SCHEDULER_LAMBDA && !so.fn)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: ACC_SCHEDULER_LAMBDA needs fn", fn);
  if (so.num_warmup_steps < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: num_warmup_steps %lld must be >= 0", fn,
                      (long long)so.num_warmup_steps);
  if ((so.kind == ACC_SCHEDULER_LINEAR_WITH_WARMUP || so.kind == ACC_SCHEDULER_COSINE_WITH_WARMUP) &&
      so.num_training_steps <= 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: num_training_steps %lld must be > 0 for a %s schedule", fn,
                      (long long)so.num_training_steps,
                      so.kind == ACC_SCHEDULER_LINEAR_WITH_WARMUP ? "linear" : "cosine");
  if (so.kind == ACC_SCHEDULER_COSINE_WITH_WARMUP && !isfinite(so.num_cycles))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: num_cycles must be finite", fn);
  acc_scheduler *s = acc__calloc(1, sizeof *s);
  if (!s) return ACC_ERR_NOMEM;
  s->magic = ACC__MAGIC_SCHEDULER;
  s->opt = o;
  s->opts = so;
  s->ngroups = acc_optimizer_group_count(o);
  s->base_lrs = acc__calloc(s->ngroups, sizeof *s->base_lrs);
  if (!s->base_lrs) {
    acc__free(s);
    return ACC_ERR_NOMEM;
  }
  for (size_t g = 0; g < s->ngroups; g++) s->base_lrs[g] = acc_optimizer_group_lr(o, g);
  s->step = 0;
  acc_result rc = apply(s);
  if (rc != ACC_OK) {
    acc__free(s->base_lrs);
    acc__free(s);
    return rc;
  }
  *out = s;
  return ACC_OK;
}

void acc_scheduler_destroy(acc_scheduler *s) {
  if (!acc__handle_ok(s, ACC__HANDLE_SCHEDULER)) return;
  s->magic = ACC__MAGIC_DEAD;
  acc__free(s->base_lrs);
  acc__free(s);
}

static acc_result check_sched(const acc_scheduler *s, const char *fn) {
  ACC_CHECK(acc__check_handle(s, ACC__HANDLE_SCHEDULER, fn));
  return ACC_OK;
}

acc_result acc_scheduler_step(acc_scheduler *s) {
  ACC_CHECK(check_sched(s, "acc_scheduler_step"));
  s->step++;
  acc_result rc = apply(s);
  if (rc != ACC_OK) s->step--;
  return rc;
}

double acc_scheduler_get_last_lr(const acc_scheduler *s) {
  return acc__handle_ok(s, ACC__HANDLE_SCHEDULER) ? s->last_lr : 0.0;
}

acc_result acc_scheduler_get_state(const acc_scheduler *s, int64_t *step, double *base_lr) {
  ACC_CHECK(check_sched(s, "acc_scheduler_get_state"));
  if (step) *step = s->step;
  if (base_lr) *base_lr = s->base_lrs[0];
  return ACC_OK;
}

acc_result acc_scheduler_set_state(acc_scheduler *s, int64_t step, double base_lr) {
  ACC_CHECK(check_sched(s, "acc_scheduler_set_state"));
  if (step < 0 || !(base_lr >= 0.0) || isinf(base_lr))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_scheduler_set_state: step %lld must be >= 0 and base_lr %g finite and >= 0",
                      (long long)step, base_lr);
  int64_t old_step = s->step;
  double old_base = s->base_lrs[0];
  s->step = step;
  s->base_lrs[0] = base_lr;
  acc_result rc = apply(s);
  if (rc != ACC_OK) {
    s->step = old_step;
    s->base_lrs[0] = old_base;
  }
  return rc;
}

size_t acc_scheduler_group_count(const acc_scheduler *s) {
  return acc__handle_ok(s, ACC__HANDLE_SCHEDULER) ? s->ngroups : 0;
}

double acc_scheduler_group_base_lr(const acc_scheduler *s, size_t group) {
  return (acc__handle_ok(s, ACC__HANDLE_SCHEDULER) && group < s->ngroups) ? s->base_lrs[group] : 0.0;
}

acc_result acc_scheduler_set_group_base_lr(acc_scheduler *s, size_t group, double base_lr) {
  const char *fn = "acc_scheduler_set_group_base_lr";
  ACC_CHECK(check_sched(s, fn));
  if (group >= s->ngroups)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: group %zu out of range (%zu groups)", fn, group, s->ngroups);
  if (!(base_lr >= 0.0) || isinf(base_lr))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: base_lr %g must be finite and >= 0", fn, base_lr);
  double old = s->base_lrs[group];
  s->base_lrs[group] = base_lr;
  acc_result rc = apply(s);
  if (rc != ACC_OK) s->base_lrs[group] = old;
  return rc;
}

acc_result acc_scheduler_training_steps(int64_t batches_per_epoch, int64_t num_epochs,
                                        int gradient_accumulation_steps, int num_processes,
                                        int split_batches, double warmup_fraction,
                                        int64_t *num_training_steps, int64_t *num_warmup_steps) {
  const char *fn = "acc_scheduler_training_steps";
  if (batches_per_epoch < 0 || num_epochs < 0 || gradient_accumulation_steps < 1 || num_processes < 1 ||
      !(warmup_fraction >= 0.0 && warmup_fraction <= 1.0) || !num_training_steps)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: batches_per_epoch %lld and num_epochs %lld must be >= 0, gradient_accumulation_steps "
                      "%d and num_processes %d >= 1, warmup_fraction %g in [0, 1], num_training_steps not NULL",
                      fn, (long long)batches_per_epoch, (long long)num_epochs, gradient_accumulation_steps,
                      num_processes, warmup_fraction);
  /* Optimizer steps per epoch: one per full accumulation window, plus one for a partial window
   * at the end of the epoch (the last batch always syncs). */
  int64_t opt_steps = (batches_per_epoch + gradient_accumulation_steps - 1) / gradient_accumulation_steps;
  int64_t per_step = split_batches ? 1 : num_processes; /* scheduler steps per optimizer step */
  if (num_epochs && opt_steps > INT64_MAX / num_epochs / per_step)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the number of steps overflows", fn);
  int64_t total = opt_steps * num_epochs * per_step;
  *num_training_steps = total;
  /* warmup rounded in optimizer steps, then scaled: warmup ends at the same optimizer step at
   * every process count (rounding total * fraction would not: 1 x 15 steps at 10 % warms up 1
   * optimizer step, 2 processes' 30 scheduler steps 3, i.e. 1.5 optimizer steps) */
  if (num_warmup_steps)
    *num_warmup_steps = (int64_t)((double)(opt_steps * num_epochs) * warmup_fraction) * per_step;
  return ACC_OK;
}
