/* The library's optimizer over acc_fsdp_model on a device: acc_optimizer_step and
 * acc_optimizer_zero_grad reach here through the model's stepper (model_internal.h) and run the
 * device's SGD / AdamW kernels on the shards, with the optimizer's state in device memory
 * (d_state, laid out like master). The optimizer's host buffers hold the state only around
 * checkpoints (acc__fsdp_optim_sync), as for a model trained on a device (train_optim.c). */
#include <string.h>

#include "train/fsdp.h"
#include "train/fsdp_mem.h"
#include "train/model_internal.h"
#include "train/train.h"

static int state_kinds(const acc_optimizer *opt) {
  if (acc_optimizer_get_kind(opt) == ACC_OPTIMIZER_ADAMW) return 2;
  double mom = 0;
  acc_optimizer_scalar_get(opt, 3, NULL, &mom);
  return mom != 0.0 ? 1 : 0;
}

/* Copies the state the optimizer's host buffers hold (zeros, or values set or loaded) into d_state
 * (to_host 0), or d_state into them (to_host 1). */
static acc_result state_move(acc_fsdp *f, acc_optimizer *opt, int to_host) {
  for (int b = 0; b < state_kinds(opt); b++) {
    if (!f->d_state[b]) continue;
    for (size_t k = 0; k < f->nunits; k++) {
      const acc__fsdp_unit *u = &f->units[k];
      if (!u->shard || !acc__optimizer_state_present(opt, k, b)) continue;
      float *h = acc__optimizer_state_host(opt, k, b);
      if (!h) return ACC_ERR_NOMEM;
      float *dv = f->d_state[b] + u->shard_at;
      ACC_CHECK(to_host ? acc__fsdp_mem_out(f, h, dv, u->shard) : acc__fsdp_mem_in(f, dv, h, u->shard));
    }
  }
  return ACC_OK;
}

/* The device state of opt, allocated (and filled from its host buffers) on first use. */
static acc_result bind(acc_fsdp *f, acc_optimizer *opt) {
  if (f->dopt && f->dopt != opt && acc__handle_ok(f->dopt, ACC__HANDLE_OPTIMIZER))
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_optimizer_step: FSDP on %s steps one optimizer over acc_fsdp_model; another one was "
                      "stepped before (destroy it first)", acc__device_name(f->dev->dev));
  if (f->dopt != opt) {
    for (int b = 0; b < 2; b++) {
      acc__fsdp_mem_free(f, f->d_state[b]);
      f->d_state[b] = NULL;
    }
    f->dopt = opt;
  }
  for (int b = 0; b < state_kinds(opt); b++) {
    if (f->d_state[b]) continue;
    ACC_CHECK(acc__fsdp_mem_alloc(f, f->shard_total, &f->d_state[b]));
    for (size_t k = 0; k < f->nunits; k++) {
      const acc__fsdp_unit *u = &f->units[k];
      if (!u->shard || !acc__optimizer_state_present(opt, k, b)) continue;
      float *h = acc__optimizer_state_host(opt, k, b);
      if (!h) return ACC_ERR_NOMEM;
      ACC_CHECK(acc__fsdp_mem_in(f, f->d_state[b] + u->shard_at, h, u->shard));
    }
  }
  return ACC_OK;
}

static acc_result dev_step(void *ctx, acc_optimizer *opt) {
  acc_fsdp *f = ctx;
  ACC_CHECK(acc__fsdp_mem_enter(f));
  ACC_CHECK(bind(f, opt));
  double hp[3]; /* SGD: momentum, dampening, nesterov; AdamW: beta1, beta2, eps */
  for (size_t k = 0; k < 3; k++) ACC_CHECK(acc_optimizer_scalar_get(opt, 3 + k, NULL, &hp[k]));
  const int64_t step = acc_optimizer_step_count(opt) + 1;
  const int sgd = acc_optimizer_get_kind(opt) == ACC_OPTIMIZER_SGD;
  acc__device *dev = f->dev->dev;
  for (size_t k = 0; k < f->nunits; k++) { /* parameter k is unit k's shard */
    const acc__fsdp_unit *u = &f->units[k];
    int g = acc__optimizer_param_group(opt, k);
    if (g < 0 || !u->shard) continue;
    double lr = acc_optimizer_group_lr(opt, (size_t)g), wd = acc_optimizer_group_weight_decay(opt, (size_t)g);
    if (sgd) {
      acc__sgd_args a;
      memset(&a, 0, sizeof a);
      acc__sgd_args_set(&a, lr, hp[0], hp[1], hp[2] != 0.0, wd, !acc__optimizer_state_present(opt, k, 0));
      a.w = f->master + u->shard_at;
      a.g = f->gshard + u->shard_at;
      a.buf = f->d_state[0] ? f->d_state[0] + u->shard_at : NULL;
      a.n = u->shard;
      ACC_CHECK(acc__device_sgd(dev, &a, f->dev->stream));
    } else {
      acc__adamw_args a;
      memset(&a, 0, sizeof a);
      acc__adamw_args_set(&a, lr, hp[0], hp[1], hp[2], wd, step);
      a.w = f->master + u->shard_at;
      a.g = f->gshard + u->shard_at;
      a.m = f->d_state[0] + u->shard_at;
      a.v = f->d_state[1] + u->shard_at;
      a.n = u->shard;
      ACC_CHECK(acc__device_adamw(dev, &a, f->dev->stream));
    }
  }
  ACC_CHECK(acc__optimizer_device_stepped(opt));
  return acc__fsdp_mem_leave(f);
}

static acc_result dev_zero_grad(void *ctx, acc_optimizer *opt) {
  acc_fsdp *f = ctx;
  ACC_CHECK(acc__fsdp_mem_enter(f));
  for (size_t k = 0; k < f->nunits; k++)
    if (acc__optimizer_param_group(opt, k) >= 0)
      ACC_CHECK(acc__fsdp_mem_zero(f, f->gshard + f->units[k].shard_at, f->units[k].shard));
  return acc__fsdp_mem_leave(f);
}

void acc__fsdp_optim_install(acc_fsdp *f) {
  /* host shards (the CPU, offload_params): acc_optimizer_step's own loops */
  if (!acc__fsdp_shard_on_device(f)) return;
  acc__model_stepper s = {dev_step, dev_zero_grad, f};
  acc__model_set_stepper(f->model, &s);
}

acc_result acc__fsdp_optim_sync(acc_fsdp *f, acc_optimizer *opt, int to_host) {
  if (!acc__fsdp_shard_on_device(f) || !opt || opt != f->dopt) return ACC_OK;
  ACC_CHECK(state_move(f, opt, to_host));
  return acc__fsdp_mem_sync(f);
}

void acc__fsdp_optim_free(acc_fsdp *f) {
  for (int b = 0; b < 2; b++) {
    acc__fsdp_mem_free(f, f->d_state[b]);
    f->d_state[b] = NULL;
  }
  f->dopt = NULL;
}
