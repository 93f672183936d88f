/* FSDP's per-step calls: the pool of unit buffers, the gather before a unit's forward and
 * backward, the reduce-scatter after its backward, prefetch, no_sync and clipping over the shards.
 * docs/fsdp.md, "Data path". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "accelerate.h"
#include "accelerate/fsdp.h"
#include "backend/collcheck.h"
#include "comm/async.h"
#include "comm/group.h"
#include "train/fsdp.h"
#include "train/fsdp_mem.h"

/* A released buffer is filled with 0xff bytes (fsdp_mem.c's poison): a NaN read as float32, and two
 * NaNs read as bf16 or fp16 values (0xffff is a NaN in both). A program that reads it after the unit
 * ended computes NaN, and one that writes it is caught when the buffer is taken again. Every buffer
 * operation goes through fsdp_mem.h, so the same code runs on host and device memory (the 16-bit
 * conversions included: the device's cast and widen kernels). */

static acc__fsdp_pool_buf *pool_find(acc_fsdp *f, const void *p) {
  for (size_t i = 0; i < f->npool; i++)
    if (f->pool[i].p == p) return &f->pool[i];
  return NULL;
}

size_t acc__fsdp_padded(const acc_fsdp *f, size_t u) {
  const acc__fsdp_unit *un = &f->units[u];
  return f->sharded ? un->shard * (size_t)f->sworld : un->numel;
}

size_t acc__fsdp_esize(const acc_fsdp *f) { return f->dtype == ACC_F32 ? sizeof(float) : sizeof(uint16_t); }

/* Buffer kinds: parameters and gradients in the table's dtype, (16-bit tables) a float32 scratch
 * buffer the gradients are widened into for the reduction, and (a comm hook) the gradients in the
 * hook's 16-bit type for the reduction. */
enum { BUF_PARAMS = 0, BUF_GRADS = 1, BUF_REDUCE32 = 2, BUF_HOOK16 = 3 };

/* 4-byte words of unit u's buffer of `kind` (the pool counts in float32 words) */
static size_t buf_words(const acc_fsdp *f, size_t u, int kind) {
  size_t n = acc__fsdp_padded(f, u);
  size_t es = kind == BUF_HOOK16 ? sizeof(uint16_t) : kind == BUF_REDUCE32 ? sizeof(float) : acc__fsdp_esize(f);
  n = (n * es + sizeof(float) - 1) / sizeof(float);
  return n ? n : 1;
}

/* The parameters a begin call returns come from the pool (gathered, or under NO_SHARD rounded to
 * the table's 16-bit dtype); NO_SHARD in float32 returns the master shard itself. */
static int params_pooled(const acc_fsdp *f) {
  /* (offload_params on a device: the master shard is host memory, the program's copy the device's) */
  return f->sharded || f->dtype != ACC_F32 || (f->dev && !acc__fsdp_shard_on_device(f));
}

/* Every released buffer is checked (the pool holds a few) at each begin call: a late write is
 * reported at the next unit call whichever buffer it hit. */
static acc_result pool_check(acc_fsdp *f) {
  for (size_t i = 0; i < f->npool; i++) {
    acc__fsdp_pool_buf *b = &f->pool[i];
    if (b->in_use || !b->poisoned) continue;
    size_t at;
    ACC_CHECK(acc__fsdp_mem_poison_find(f, b->p, b->cap, &at));
    if (at != SIZE_MAX) {
      /* the element in the dtype the program saw (16-bit buffers: two per word, the low half first;
       * the word read through fsdp_mem.c, host or device memory) */
      if (b->kind != BUF_REDUCE32 && acc__fsdp_esize(f) == sizeof(uint16_t)) {
        float word;
        uint16_t lo;
        ACC_CHECK(acc__fsdp_mem_out(f, &word, b->p + at, 1));
        memcpy(&lo, &word, sizeof lo);
        at = 2 * at + (lo == 0xffffu ? 1 : 0);
      }
      ACC_CHECK(acc__fsdp_mem_poison(f, b->p, b->cap)); /* reported once */
      return acc__error(ACC_ERR_INVALID_USAGE,
                        "FSDP: the gathered %s buffer of unit '%s' was written after the unit ended (element %zu): "
                        "the pointers acc_fsdp_unit_%s_begin returned are valid only until the unit's end call",
                        b->kind == BUF_GRADS ? "gradient" : "parameter", f->units[b->owner].name, at,
                        b->kind == BUF_GRADS ? "backward" : "forward");
    }
  }
  return ACC_OK;
}

static void pool_mark(acc_fsdp *f, acc__fsdp_pool_buf *b, size_t unit, int kind) {
  b->in_use = 1;
  b->owner = unit;
  b->kind = kind;
  b->poisoned = 0;
  f->pool_in_use++;
  f->pool_elems_in_use += b->cap;
  if (f->pool_in_use > f->pool_peak) f->pool_peak = f->pool_in_use;
  if (f->pool_elems_in_use > f->pool_elems_peak) f->pool_elems_peak = f->pool_elems_in_use;
}

/* Takes a free buffer of at least the unit's padded size (the smallest that fits, unless it is
 * more than twice the size: then a buffer of the unit's size is allocated, so that a small unit
 * (the embedding, a final norm) kept while the blocks run does not hold a block-sized buffer). */
static acc_result pool_take(acc_fsdp *f, size_t unit, int kind, void **out) {
  const size_t need = buf_words(f, unit, kind);
  acc__fsdp_pool_buf *best = NULL;
  for (size_t i = 0; i < f->npool; i++) {
    acc__fsdp_pool_buf *b = &f->pool[i];
    if (b->in_use || b->cap < need || b->cap / 2 > need) continue;
    if (!best || b->cap < best->cap) best = b;
  }
  if (best) {
    pool_mark(f, best, unit, kind);
    *out = best->p;
    return ACC_OK;
  }
  acc__fsdp_pool_buf *np = acc__realloc(f->pool, (f->npool + 1) * sizeof *np);
  if (!np) return ACC_ERR_NOMEM;
  f->pool = np;
  float *p;
  ACC_CHECK(acc__fsdp_mem_alloc(f, need, &p));
  f->pool[f->npool] = (acc__fsdp_pool_buf){p, need, 0, 0, 0, 0};
  f->pool_elems += need;
  pool_mark(f, &f->pool[f->npool++], unit, kind);
  *out = p;
  return ACC_OK;
}

static void pool_give(acc_fsdp *f, void *p) {
  acc__fsdp_pool_buf *b = pool_find(f, p);
  if (!b || !b->in_use) return;
  /* a buffer whose poison could not be queued is not checked later (no false report) */
  b->poisoned = acc__fsdp_mem_poison(f, b->p, b->cap) == ACC_OK;
  b->in_use = 0;
  f->pool_in_use--;
  f->pool_elems_in_use -= b->cap;
}

/* Unit u's shard copied into its block of dst and the all-gather over the shard group, run now
 * (h NULL) or submitted to the comm worker (*h its handle: comm/async.h), so that it runs while
 * the program computes another unit. The shard is copied on this thread before the submit: the
 * worker touches only dst, which nothing else reads or writes until the handle is waited. */
static acc_result gather_start(acc_fsdp *f, size_t u, void *dst, acc__comm_job **h) {
  const acc__fsdp_unit *un = &f->units[u];
  /* each process's block of dst is its shard (rounded to the table's 16-bit dtype: half the
   * bytes on the wire): the all-gather in place, over the shard group */
  const size_t es = acc__fsdp_esize(f);
  void *mine = (char *)dst + un->shard * (size_t)f->srank * es;
  ACC_CHECK(acc__fsdp_shard_to_pool(f, mine, f->master + un->shard_at, un->shard, f->dtype));
  acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 0));
  acc_result rc;
  if (f->dcomm) { /* NCCL on the device (fsdp_coll.c): run now, on the compute stream */
    if (h) *h = NULL;
    rc = acc__fsdp_coll_all_gather(f, f->shard_group, mine, dst, un->shard, f->dtype);
  } else {
    rc = h ? acc__comm_async_all_gather(f->st, f->shard_group, mine, dst, un->shard, f->dtype, h)
           : acc__comm_group_all_gather(f->st, f->shard_group, mine, dst, un->shard, f->dtype);
  }
  if (rc != ACC_OK) return acc__error_context(rc, "FSDP: gathering the parameters of unit '%s'", un->name);
  return ACC_OK;
}

acc_result acc__fsdp_gather_unit(acc_fsdp *f, size_t u, void *dst, int kind) {
  (void)kind;
  return gather_start(f, u, dst, NULL);
}

/* Unit u's submitted gather waited for: its parameters are in pbuf, or (error) pbuf is back in the
 * pool and the error is the gather's. */
static acc_result settle_unit(acc_fsdp *f, size_t u) {
  acc__fsdp_unit *un = &f->units[u];
  if (!un->pending) return ACC_OK;
  acc_result rc = acc__comm_async_wait(un->pending);
  un->pending = NULL;
  if (rc == ACC_OK) return ACC_OK;
  pool_give(f, un->pbuf);
  un->pbuf = NULL;
  un->prefetched = 0;
  return acc__error_context(rc, "FSDP: gathering the parameters of unit '%s' (prefetched)", un->name);
}

static acc_result finish_reduce(acc_fsdp *f);

static acc_result settle_all(acc_fsdp *f) {
  acc_result first = finish_reduce(f);
  char msg[1024] = "";
  if (first != ACC_OK) snprintf(msg, sizeof msg, "%s", acc_last_error());
  for (size_t k = 0; f && k < f->nunits; k++) {
    acc_result rc = settle_unit(f, k);
    if (rc != ACC_OK && first == ACC_OK) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", acc_last_error());
    }
  }
  if (first != ACC_OK) acc__error(first, "%s", msg);
  return first;
}

/* Unit u's parameters held in pbuf (gathered, prefetched or kept). async: a sharded gather is
 * submitted (un->pending) instead of run; the unit's begin call waits for it. */
static acc_result hold_params(acc_fsdp *f, size_t u, int async) {
  acc__fsdp_unit *un = &f->units[u];
  if (un->pbuf) return settle_unit(f, u);
  if (!params_pooled(f)) {
    un->pbuf = f->master + un->shard_at; /* NO_SHARD: the full parameters are the shard */
    return ACC_OK;
  }
  ACC_CHECK(pool_take(f, u, BUF_PARAMS, &un->pbuf));
  acc_result rc = ACC_OK;
  if (f->sharded) rc = gather_start(f, u, un->pbuf, async ? &un->pending : NULL);
  else rc = acc__fsdp_shard_to_pool(f, un->pbuf, f->master + un->shard_at, un->numel, f->dtype); /* NO_SHARD */
  if (rc != ACC_OK) {
    pool_give(f, un->pbuf);
    un->pbuf = NULL;
  }
  return rc;
}

static void drop_params(acc_fsdp *f, size_t u) {
  acc__fsdp_unit *un = &f->units[u];
  if (un->pending) (void)settle_unit(f, u); /* a failed gather broke the group: later calls report it */
  if (un->pbuf && params_pooled(f)) pool_give(f, un->pbuf);
  un->pbuf = NULL;
  un->prefetched = 0;
}

/* Prefetch: unit `next`'s gather submitted now, to run on the comm worker thread while the program
 * computes the current unit (comm/async.h; at once on backends that cannot overlap); the unit's
 * begin call waits for it. Prefetch is in declaration order; a unit already held is left alone. */
static acc_result prefetch(acc_fsdp *f, size_t next, int backward) {
  if (!f->sharded || next >= f->nunits) return ACC_OK;
  acc__fsdp_unit *un = &f->units[next];
  /* only a unit still to run in this pass: in forward one not started, in backward one whose
   * forward ended and whose backward has not begun (a unit already done would be gathered for
   * nothing, and its copy would outlive the optimizer step) */
  if (un->pbuf || un->phase != (backward ? ACC__FSDP_FWD_DONE : ACC__FSDP_IDLE)) return ACC_OK;
  f->settle = settle_all;
  ACC_CHECK(hold_params(f, next, 1));
  un->prefetched = 1;
  return ACC_OK;
}

static acc_result check_unit(const acc_fsdp *f, size_t unit, const char *fn) {
  ACC_CHECK(acc__fsdp_check_ready(f, fn));
  if (unit >= f->nunits)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: unit %zu is out of range (%zu units)", fn, unit, f->nunits);
  return ACC_OK;
}

/* fp16: gradients unscaled (by clipping or acc_fsdp_unscale_gradients) must be stepped by
 * acc_fsdp_optimizer_step, which updates the loss scale, before the next pass adds scaled ones. */
static acc_result check_not_unscaled(const acc_fsdp *f, const char *fn) {
  if (!f->unscaled) return ACC_OK;
  return acc__error(ACC_ERR_INVALID_USAGE,
                    "%s: the gradients of the last step were unscaled but acc_fsdp_optimizer_step did not run: under "
                    "fp16 step the shards' optimizer with acc_fsdp_optimizer_step (it skips on overflow and updates "
                    "the loss scale), not acc_optimizer_step", fn);
}

static const char *phase_name(int p) {
  return p == ACC__FSDP_IDLE ? "not started" : p == ACC__FSDP_FWD ? "in forward" : p == ACC__FSDP_FWD_DONE ? "after forward" : "in backward";
}

/* The begin calls name the dtype the program reads: the float calls only fit a float32 table, the
 * _typed calls take the table's dtype. */
static acc_result check_dtype(const acc_fsdp *f, size_t unit, acc_dtype want, const char *fn) {
  if (want == f->dtype) return ACC_OK;
  if (want != ACC_F32 && want != ACC_BF16 && want != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: dtype %s is not a parameter dtype (ACC_F32, ACC_BF16, ACC_F16)",
                      fn, acc_dtype_name(want));
  return acc__error(ACC_ERR_MISMATCH,
                    "%s: unit '%s' is gathered as %s (the dtype given to acc_fsdp_create) but the call asks for %s%s",
                    fn, f->units[unit].name, acc__fsdp_dtype_word(f->dtype), acc__fsdp_dtype_word(want),
                    want == ACC_F32 ? ": use acc_fsdp_unit_forward_begin_typed / acc_fsdp_unit_backward_begin_typed "
                                      "with the table's dtype"
                                    : ": pass the table's dtype");
}

static acc_result forward_begin(acc_fsdp *f, size_t unit, acc_dtype dtype, const void **params, const char *fn) {
  ACC_CHECK(check_unit(f, unit, fn));
  if (!params) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: params is NULL", fn);
  ACC_CHECK(check_dtype(f, unit, dtype, fn));
  ACC_CHECK(check_not_unscaled(f, fn));
  acc__fsdp_unit *un = &f->units[unit];
  if (un->phase == ACC__FSDP_FWD || un->phase == ACC__FSDP_BWD)
    return acc__error(ACC_ERR_INVALID_USAGE, "%s: unit '%s' is %s: end it first", fn, un->name, phase_name(un->phase));
  ACC_CHECK(acc__fsdp_mem_enter(f));
  ACC_CHECK(pool_check(f));
  ACC_CHECK(hold_params(f, unit, 0));
  un->prefetched = 0;
  un->phase = ACC__FSDP_FWD;
  if (f->fwd_prefetch) ACC_CHECK(prefetch(f, unit + 1, 0));
  *params = un->pbuf;
  return acc__fsdp_mem_leave(f);
}

acc_result acc_fsdp_unit_forward_begin(acc_fsdp *f, size_t unit, const float **params) {
  const void *p = NULL;
  acc_result rc = forward_begin(f, unit, ACC_F32, params ? &p : NULL, "acc_fsdp_unit_forward_begin");
  if (rc == ACC_OK) *params = p;
  return rc;
}

acc_result acc_fsdp_unit_forward_begin_typed(acc_fsdp *f, size_t unit, acc_dtype dtype, const void **params) {
  return forward_begin(f, unit, dtype, params, "acc_fsdp_unit_forward_begin_typed");
}

acc_result acc_fsdp_unit_forward_end(acc_fsdp *f, size_t unit) {
  ACC_CHECK(check_unit(f, unit, "acc_fsdp_unit_forward_end"));
  acc__fsdp_unit *un = &f->units[unit];
  if (un->phase != ACC__FSDP_FWD)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_fsdp_unit_forward_end: unit '%s' is %s, not in forward (call acc_fsdp_unit_forward_begin)",
                      un->name, phase_name(un->phase));
  ACC_CHECK(acc__fsdp_mem_enter(f)); /* the poison after the program's last read */
  if (f->reshard) drop_params(f, unit);
  un->phase = ACC__FSDP_FWD_DONE;
  return ACC_OK;
}

static acc_result backward_begin(acc_fsdp *f, size_t unit, acc_dtype dtype, const void **params, void **grads,
                                 const char *fn) {
  ACC_CHECK(check_unit(f, unit, fn));
  if (!params || !grads) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: params or grads is NULL", fn);
  ACC_CHECK(check_dtype(f, unit, dtype, fn));
  ACC_CHECK(check_not_unscaled(f, fn));
  acc__fsdp_unit *un = &f->units[unit];
  if (un->phase == ACC__FSDP_FWD || un->phase == ACC__FSDP_BWD)
    return acc__error(ACC_ERR_INVALID_USAGE, "%s: unit '%s' is %s", fn, un->name, phase_name(un->phase));
  ACC_CHECK(acc__fsdp_mem_enter(f));
  ACC_CHECK(pool_check(f));
  ACC_CHECK(hold_params(f, unit, 0));
  un->prefetched = 0;
  if (f->rs.active && f->rs.unit == unit) ACC_CHECK(finish_reduce(f)); /* its buffers are free again */
  if (un->nosync && !acc__fsdp_shard_on_device(f) && f->dev) {
    /* offload_params: the no_sync gradients (host memory) copied into a gradient buffer of the
     * device, which the program adds to; the host copy is freed (kept again by a no_sync end) */
    const size_t words = buf_words(f, unit, BUF_GRADS);
    ACC_CHECK(pool_take(f, unit, BUF_GRADS, &un->gbuf));
    acc_result rc = acc__fsdp_shard_to_pool(f, un->gbuf, un->nosync, words, ACC_F32);
    if (rc != ACC_OK) {
      pool_give(f, un->gbuf);
      un->gbuf = NULL;
      return rc;
    }
    acc__fsdp_shard_free(f, un->nosync);
    un->nosync = NULL;
    f->nosync_bytes -= acc__fsdp_padded(f, unit) * acc__fsdp_esize(f);
  } else if (un->nosync) {
    un->gbuf = un->nosync; /* the gradients accumulated under no_sync: the program adds to them */
  } else {
    ACC_CHECK(pool_take(f, unit, BUF_GRADS, &un->gbuf));
    ACC_CHECK(acc__fsdp_mem_zero(f, un->gbuf, buf_words(f, unit, BUF_GRADS)));
  }
  un->phase = ACC__FSDP_BWD;
  if (f->bwd_prefetch == ACC_FSDP_BACKWARD_PRE && unit > 0) ACC_CHECK(prefetch(f, unit - 1, 1));
  *params = un->pbuf;
  *grads = un->gbuf;
  return acc__fsdp_mem_leave(f);
}

acc_result acc_fsdp_unit_backward_begin(acc_fsdp *f, size_t unit, const float **params, float **grads) {
  const void *p = NULL;
  void *g = NULL;
  acc_result rc = backward_begin(f, unit, ACC_F32, params ? &p : NULL, grads ? &g : NULL,
                                 "acc_fsdp_unit_backward_begin");
  if (rc == ACC_OK) {
    *params = p;
    *grads = g;
  }
  return rc;
}

acc_result acc_fsdp_unit_backward_begin_typed(acc_fsdp *f, size_t unit, acc_dtype dtype, const void **params,
                                              void **grads) {
  return backward_begin(f, unit, dtype, params, grads, "acc_fsdp_unit_backward_begin_typed");
}

/* The averaged gradient of unit u (gbuf, numel floats) added into this process's shard. */
/* The unit's gradients as float32 for the reduction: the program's buffer itself (float32 table), or
 * a pool buffer they are widened into (16-bit table: the reduction runs in float32, as the
 * accelerator's typed tables average, whatever the number of processes). *scratch: what to give
 * back. */
static acc_result grads_f32(acc_fsdp *f, size_t u, float **g, void **scratch) {
  acc__fsdp_unit *un = &f->units[u];
  *scratch = NULL;
  if (f->dtype == ACC_F32) {
    *g = un->gbuf;
    return ACC_OK;
  }
  ACC_CHECK(pool_take(f, u, BUF_REDUCE32, scratch));
  *g = *scratch;
  acc_result rc = acc__fsdp_mem_widen(f, *g, un->gbuf, un->numel, f->dtype);
  size_t padded = acc__fsdp_padded(f, u);
  if (rc == ACC_OK && padded > un->numel) rc = acc__fsdp_mem_zero(f, *g + un->numel, padded - un->numel);
  if (rc != ACC_OK) {
    pool_give(f, *scratch);
    *scratch = NULL;
  }
  return rc;
}

/* The comm hook's division (PyTorch FSDP's DefaultState): by `pre` before the sum, the largest
 * power of two p with world % p == 0 and world / p > p reached by doubling from 1, and by world / pre
 * after it, so that neither the 16-bit sum overflows nor its addends underflow. */
static void hook_factors(int world, float *pre, float *post) {
  int p = 1;
  while (world % p == 0 && world / p > p) p *= 2;
  *pre = (float)p;
  *post = (float)world / (float)p;
}

/* x (n floats) divided by d in float32 and rounded to the hook's 16-bit type into h, then widened
 * back into x: the 16-bit division PyTorch's hook does (a power-of-two d divides exactly; another is
 * the product by the float reciprocal). */
static acc_result hook_divide(acc_fsdp *f, float *x, void *h, size_t n, float d) {
  if (d > 1.0f) ACC_CHECK(acc__fsdp_mem_scale(f, x, n, 1.0f / d));
  ACC_CHECK(acc__fsdp_mem_narrow(f, h, x, n, f->compress));
  return acc__fsdp_mem_widen(f, x, h, n, f->compress);
}

/* The reduction under the accelerator's fp16 / bf16 comm hook (PyTorch FSDP's fp16_compress_hook /
 * bf16_compress_hook): the unit's gradients rounded to the hook's type and divided by `pre` there,
 * reduce-scattered (NO_SHARD: all-reduced; HYBRID: then all-reduced over the rail) as 16-bit values
 * summed in that type, divided by world / pre in that type, widened and added into the shard. */
static acc_result reduce_unit_hook(acc_fsdp *f, size_t u) {
  acc__fsdp_unit *un = &f->units[u];
  const size_t padded = acc__fsdp_padded(f, u), n = f->sharded ? un->shard : un->numel;
  const acc_dtype dt = f->compress;
  float pre, post;
  hook_factors(f->world, &pre, &post);
  float *g;
  void *scratch, *h = NULL;
  ACC_CHECK(grads_f32(f, u, &g, &scratch));
  /* float32 table: the program's buffer (given back after this) holds the padding; zero it */
  acc_result rc = ACC_OK;
  if (!scratch && padded > un->numel) rc = acc__fsdp_mem_zero(f, g + un->numel, padded - un->numel);
  if (rc == ACC_OK) rc = pool_take(f, u, BUF_HOOK16, &h);
  if (rc == ACC_OK) rc = acc__fsdp_mem_narrow(f, h, g, padded, dt);
  if (rc == ACC_OK && pre > 1.0f) {
    rc = acc__fsdp_mem_widen(f, g, h, padded, dt);
    if (rc == ACC_OK) rc = acc__fsdp_mem_scale(f, g, padded, 1.0f / pre);
    if (rc == ACC_OK) rc = acc__fsdp_mem_narrow(f, h, g, padded, dt);
  }
  void *out = f->sharded ? (char *)h + un->shard * (size_t)f->srank * sizeof(uint16_t) : h;
  if (rc == ACC_OK && f->sharded) {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 1));
    rc = acc__fsdp_coll_reduce_scatter(f, f->shard_group, h, out, un->shard, dt, ACC_SUM);
    if (rc == ACC_OK && f->replicas > 1) {
      acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 2));
      rc = acc__comm_group_all_reduce(f->st, ACC__GROUP_RAIL, out, out, un->shard, dt, ACC_SUM);
    }
  } else if (rc == ACC_OK) {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 2));
    rc = acc__fsdp_coll_all_reduce(f, ACC__GROUP_WORLD, h, h, un->numel, dt, ACC_SUM);
  }
  if (rc == ACC_OK) rc = acc__fsdp_mem_widen(f, g, out, n, dt);
  if (rc == ACC_OK && post > 1.0f) rc = hook_divide(f, g, out, n, post);
  if (rc == ACC_OK) rc = acc__fsdp_shard_add(f, f->gshard + un->shard_at, g, n, 1.0f);
  if (h) pool_give(f, h);
  if (scratch) pool_give(f, scratch);
  if (rc != ACC_OK)
    return acc__error_context(rc, "FSDP: reducing the %s-compressed gradients of unit '%s' (comm hook)",
                              acc__fsdp_dtype_word(dt), un->name);
  return ACC_OK;
}

/* The gradient buffer of a finished reduction: a no_sync buffer is freed, a pool buffer given back. */
static void release_grads(acc_fsdp *f, size_t u, void *gbuf) {
  acc__fsdp_unit *un = &f->units[u];
  if (gbuf && gbuf == un->nosync) {
    acc__fsdp_shard_free(f, un->nosync);
    un->nosync = NULL;
    f->nosync_bytes -= acc__fsdp_padded(f, u) * acc__fsdp_esize(f);
  } else if (gbuf) {
    pool_give(f, gbuf);
  }
}

/* The reduction in flight (f->rs) waited for, its block added into the gradient shard and its
 * buffers given back; nothing when none is. */
static acc_result finish_reduce(acc_fsdp *f) {
  if (!f || !f->rs.active) return ACC_OK;
  const size_t u = f->rs.unit;
  const acc__fsdp_unit *un = &f->units[u];
  acc_result rc = acc__comm_async_wait(f->rs.h[0]);
  acc_result rc2 = acc__comm_async_wait(f->rs.h[1]);
  if (rc == ACC_OK && rc2 != ACC_OK) rc = rc2;
  char msg[1024] = "";
  if (rc != ACC_OK) snprintf(msg, sizeof msg, "%s", acc_last_error());
  f->rs.active = 0;
  f->rs.h[0] = f->rs.h[1] = NULL;
  if (rc == ACC_OK)
    rc = acc__fsdp_shard_add(f, f->gshard + un->shard_at, f->rs.out, un->shard, 1.0f / (float)f->world);
  acc__fsdp_mem_free(f, f->rs.tmp);
  f->rs.tmp = NULL;
  release_grads(f, u, f->rs.gbuf);
  f->rs.gbuf = NULL;
  if (rc != ACC_OK) {
    if (msg[0]) acc__error(rc, "%s", msg);
    return acc__error_context(rc, "FSDP: reducing the gradients of unit '%s'", un->name);
  }
  return ACC_OK;
}

static acc_result reduce_unit(acc_fsdp *f, size_t u) {
  ACC_CHECK(finish_reduce(f)); /* at most one reduction in flight */
  /* the comm hook (one process: nothing to compress, as the accelerator's DDP hook) */
  if (f->compress != ACC_F32 && f->world > 1) return reduce_unit_hook(f, u);
  acc__fsdp_unit *un = &f->units[u];
  float *g, *dst = f->gshard + un->shard_at;
  void *scratch;
  ACC_CHECK(grads_f32(f, u, &g, &scratch));
  const float scale = 1.0f / (float)f->world;
  acc_result rc;
  if (f->sharded) {
    size_t padded = un->shard * (size_t)f->sworld;
    float *send = g;
    float *tmp = NULL;
    if (padded > un->numel && !scratch) {
      if (g == un->nosync) {
        ACC_CHECK(acc__fsdp_mem_alloc(f, padded, &tmp));
        rc = acc__fsdp_mem_copy(f, tmp, g, un->numel);
        if (rc != ACC_OK) {
          acc__fsdp_mem_free(f, tmp);
          return rc;
        }
        send = tmp;
      }
      rc = acc__fsdp_mem_zero(f, send + un->numel, padded - un->numel);
      if (rc != ACC_OK) {
        acc__fsdp_mem_free(f, tmp);
        return rc;
      }
    }
    float *out = send + un->shard * (size_t)f->srank; /* in place: this process's block */
    /* float32: submitted, finished by finish_reduce (the next reduction, the pass's end); NCCL on the
     * device (f->dcomm): run now below */
    if (!scratch && !f->dcomm) {
      f->rs.h[0] = f->rs.h[1] = NULL;
      acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 1));
      rc = acc__comm_async_reduce_scatter(f->st, f->shard_group, send, out, un->shard, ACC_F32, ACC_SUM, &f->rs.h[0]);
      if (rc == ACC_OK && f->replicas > 1) { /* HYBRID: the machines' sums of this shard, added */
        acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 2));
        rc = acc__comm_async_all_reduce(f->st, ACC__GROUP_RAIL, out, out, un->shard, ACC_F32, ACC_SUM, &f->rs.h[1]);
      }
      f->rs.active = 1;
      f->rs.unit = u;
      f->rs.out = out;
      f->rs.tmp = tmp;
      f->rs.gbuf = un->gbuf;
      f->settle = settle_all;
      if (rc != ACC_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", acc_last_error());
        (void)finish_reduce(f);
        return acc__error_context(acc__error(rc, "%s", msg), "FSDP: reducing the gradients of unit '%s'", un->name);
      }
      return ACC_OK;
    }
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 1));
    rc = acc__fsdp_coll_reduce_scatter(f, f->shard_group, send, out, un->shard, ACC_F32, ACC_SUM);
    if (rc == ACC_OK && f->replicas > 1) { /* HYBRID: the machines' sums of this shard, added */
      acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 2));
      rc = acc__comm_group_all_reduce(f->st, ACC__GROUP_RAIL, out, out, un->shard, ACC_F32, ACC_SUM);
    }
    if (rc == ACC_OK) rc = acc__fsdp_shard_add(f, dst, out, un->shard, scale);
    acc__fsdp_mem_free(f, tmp);
  } else {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(u, 2));
    rc = acc__fsdp_coll_all_reduce(f, ACC__GROUP_WORLD, g, g, un->numel, ACC_F32, ACC_SUM);
    if (rc == ACC_OK) rc = acc__fsdp_shard_add(f, dst, g, un->numel, scale);
  }
  if (scratch) pool_give(f, scratch);
  if (rc != ACC_OK) return acc__error_context(rc, "FSDP: reducing the gradients of unit '%s'", un->name);
  return ACC_OK;
}

acc_result acc_fsdp_unit_backward_end(acc_fsdp *f, size_t unit) {
  ACC_CHECK(check_unit(f, unit, "acc_fsdp_unit_backward_end"));
  acc__fsdp_unit *un = &f->units[unit];
  if (un->phase != ACC__FSDP_BWD)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "acc_fsdp_unit_backward_end: unit '%s' is %s, not in backward (call acc_fsdp_unit_backward_begin)",
                      un->name, phase_name(un->phase));
  ACC_CHECK(acc__fsdp_mem_enter(f)); /* the program's gradients are written */
  if (f->no_sync) {
    if (!un->nosync) {
      const size_t words = buf_words(f, unit, BUF_GRADS);
      float *keep;
      ACC_CHECK(acc__fsdp_shard_alloc(f, words, &keep)); /* offload_params: host memory */
      un->nosync = keep;
      f->nosync_bytes += acc__fsdp_padded(f, unit) * acc__fsdp_esize(f);
      ACC_CHECK(acc__fsdp_shard_from_pool(f, un->nosync, un->gbuf, words));
      pool_give(f, un->gbuf);
    }
  } else {
    ACC_CHECK(reduce_unit(f, unit));
    /* a reduction in flight gives the buffer back when it finishes */
    if (!(f->rs.active && f->rs.unit == unit)) release_grads(f, unit, un->gbuf);
  }
  un->gbuf = NULL;
  drop_params(f, unit);
  un->phase = ACC__FSDP_IDLE;
  if (f->bwd_prefetch == ACC_FSDP_BACKWARD_POST && unit > 0) ACC_CHECK(prefetch(f, unit - 1, 1));
  /* the pass is over when no unit waits for its backward: a prefetched copy nobody took (a unit
   * the program skipped) is dropped, so that none survives the optimizer step */
  int open = 0;
  for (size_t k = 0; k < f->nunits && !open; k++) open = f->units[k].phase != ACC__FSDP_IDLE;
  for (size_t k = 0; k < f->nunits && !open; k++)
    if (f->units[k].prefetched) drop_params(f, k);
  if (!open) ACC_CHECK(finish_reduce(f)); /* the shards hold the whole pass's gradients when it ends */
  return ACC_OK;
}

acc_result acc_fsdp_reshard(acc_fsdp *f) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_reshard"));
  for (size_t k = 0; k < f->nunits; k++) {
    acc__fsdp_unit *un = &f->units[k];
    if (un->phase == ACC__FSDP_FWD || un->phase == ACC__FSDP_BWD)
      return acc__error(ACC_ERR_INVALID_USAGE, "acc_fsdp_reshard: unit '%s' is %s: end it first", un->name,
                        phase_name(un->phase));
  }
  ACC_CHECK(acc__fsdp_settle(f));
  ACC_CHECK(acc__fsdp_mem_enter(f));
  for (size_t k = 0; k < f->nunits; k++) {
    drop_params(f, k);
    f->units[k].phase = ACC__FSDP_IDLE;
  }
  return ACC_OK;
}

acc_result acc_fsdp_set_no_sync(acc_fsdp *f, int on) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_set_no_sync"));
  f->no_sync = on ? 1 : 0;
  return ACC_OK;
}

acc_result acc_fsdp_clip_grad_norm(acc_fsdp *f, float max_norm, double norm_type, float *total_norm) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_clip_grad_norm"));
  int inf = isinf(norm_type) && norm_type > 0;
  if (!inf && norm_type != 2.0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_clip_grad_norm: norm_type %g is not supported (2 or INFINITY)",
                      norm_type);
  if (!(max_norm >= 0.0f))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_clip_grad_norm: max_norm %g must be >= 0", (double)max_norm);
  ACC_CHECK(acc__fsdp_settle(f)); /* a prefetch skipped by the program: waited, its error reported */
  ACC_CHECK(acc__fsdp_unscale(f, "acc_fsdp_clip_grad_norm")); /* fp16: clip what the optimizer steps */
  /* this process's part: its range of each unit (padding left out; NO_SHARD: counted on process 0
   * only, HYBRID: on the first machine's processes only, then shared, so no shard is counted
   * twice) */
  ACC_CHECK(acc__fsdp_mem_enter(f));
  double local = 0;
  int count_here = f->sharded ? f->replica == 0 : f->rank == 0;
  if (count_here)
    for (size_t k = 0; k < f->nunits; k++) {
      const acc__fsdp_unit *u = &f->units[k];
      ACC_CHECK(acc__fsdp_shard_norm(f, f->gshard + u->shard_at, u->hi - u->lo, &local, inf ? &local : NULL));
    }
  double total = local;
  if (f->world > 1) {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(0, 3));
    ACC_CHECK(acc_all_reduce(f->st, &local, &total, 1, ACC_F64, inf ? ACC_MAX : ACC_SUM));
  }
  /* the coefficient as acc_clip_grad_norm computes it (float), so NO_SHARD matches an unsharded run */
  float norm = inf ? (float)total : (float)sqrt(total);
  if (total_norm) *total_norm = norm;
  float coef = max_norm / (norm + 1e-6f);
  return acc__fsdp_shard_scale(f, f->gshard, f->shard_total, coef);
}
