/* Parameter tables in bf16 or fp16 with float32 master weights owned by the library (the layout of
 * GPU trainers): the program's forward and backward passes read and write its half-precision
 * buffers; the model's parameters point into a float32 master copy and float32 gradients, so the
 * gradient averaging (float32 accumulation), the optimizer (float32 moments, float32 steps),
 * clipping and checkpoints (float32 weights) work unchanged. The accelerator converts around
 * them: gradients widened before the average and rounded back after it, master weights rounded
 * into the program's buffer after every step, broadcast and load.
 *
 * A table in device memory (of a device an accelerator trains on, devio.h) gets its master
 * weights and float32 gradients in memory of the same device, and every conversion runs there as
 * a kernel on the accelerator's compute stream (acc__device_widen / acc__device_cast, the same
 * rounding as the host loops below: round to nearest even, widening exact). */
#include <string.h>

#include "accelerate.h"
#include "device/device.h"
#include "device/devio.h"
#include "train/model_internal.h"

static const char *dtype_word(acc_dtype d) {
  return d == ACC_BF16 ? "bf16" : d == ACC_F16 ? "fp16" : d == ACC_F32 ? "float32" : "an unsupported dtype";
}

static acc__typed_group *group_of(const acc_model *m, size_t index) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++)
    if (index >= g[k].first && index < g[k].first + g[k].count) return &g[k];
  return NULL;
}

static void widen(float *dst, const uint16_t *src, size_t n, acc_dtype dt) {
  acc__half_to_f32_n(dst, src, n, dt);
}

static void narrow(uint16_t *dst, const float *src, size_t n, acc_dtype dt) {
  acc__f32_to_half_n(dst, src, n, dt);
}

/* The conversions of one group, on its device's compute stream when it lives on a device. */
static acc_result g_widen(const acc__typed_group *g, float *dst, const uint16_t *src, size_t n) {
  if (g->dev) return acc__device_widen(g->dev->dev, dst, src, n, g->dtype, g->dev->stream);
  widen(dst, src, n, g->dtype);
  return ACC_OK;
}

static acc_result g_narrow(const acc__typed_group *g, uint16_t *dst, const float *src, size_t n) {
  if (g->dev) return acc__device_cast(g->dev->dev, dst, src, n, g->dtype, g->dev->stream);
  narrow(dst, src, n, g->dtype);
  return ACC_OK;
}

static const char *where_word(const acc__devctx *d) { return d ? acc__device_name(d->dev) : "host memory"; }

/* A device group whose device is still open (its accelerator alive): its master weights are
 * memory of a registered device, the one recorded. */
static int group_live(const acc__typed_group *g) { return !g->dev || acc__devio_find(g->grad32) == g->dev; }

static const char *group_where(const acc__typed_group *g) {
  return group_live(g) ? where_word(g->dev) : "memory of a device that was closed (its accelerator destroyed)";
}

/* master (unless the program's) and grad32 of a table of numel values: host memory, or memory of
 * device d (grad32 zeroed and the library's master widened from params there, on its compute
 * stream). */
static acc_result alloc_copies(acc__typed_group *g, acc__devctx *d, const uint16_t *params, size_t numel) {
  if (!d) {
    if (!g->master_program) g->master = acc__malloc(numel * sizeof(float));
    g->grad32 = acc__calloc(numel, sizeof(float));
    if (!g->master || !g->grad32) return ACC_ERR_NOMEM;
    if (!g->master_program) widen(g->master, params, numel, g->dtype);
    return ACC_OK;
  }
  if (!g->master_program) ACC_CHECK(acc__device_alloc(d->dev, numel * sizeof(float), (void **)&g->master));
  ACC_CHECK(acc__device_alloc(d->dev, numel * sizeof(float), (void **)&g->grad32));
  ACC_CHECK(acc__device_memset(d->dev, g->grad32, 0, numel * sizeof(float), d->stream));
  return g->master_program ? ACC_OK : g_widen(g, g->master, params, numel);
}

acc_result acc_model_add_flat_typed(acc_model *m, const acc_param_spec *table, size_t count, acc_dtype dtype,
                                    void *params, void *grads, size_t *first_index) {
  return acc__typed_add(m, table, count, dtype, params, grads, NULL, first_index, "acc_model_add_flat_typed");
}

acc_result acc__typed_add(acc_model *m, const acc_param_spec *table, size_t count, acc_dtype dtype, void *params,
                          void *grads, float *master, size_t *first_index, const char *fn) {
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, fn));
  if (dtype == ACC_F32 && !master) return acc_model_add_flat(m, table, count, params, grads, first_index);
  if (dtype != ACC_BF16 && dtype != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: dtype %d is not a parameter dtype: choose ACC_F32, ACC_BF16 or ACC_F16", fn, (int)dtype);
  if (!table || !count || !params)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                      !params ? "the parameter buffer is NULL" : "the table is empty");
  acc__devctx *dp = acc__devio_find(params), *dg = grads ? acc__devio_find(grads) : dp;
  if (dp != dg)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the %s parameter buffer is %s but the gradient buffer is %s; put both in host memory "
                      "or both in memory of the device the accelerator trains on", fn, dtype_word(dtype),
                      where_word(dp), where_word(dg));
  if (master && acc__devio_find(master) != dp)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the float32 master weights are %s but the %s parameter buffer is %s; put the master "
                      "weights where the parameters are", fn, where_word(acc__devio_find(master)), dtype_word(dtype),
                      where_word(dp));
  size_t numel = 0;
  for (size_t r = 0; r < count; r++) {
    size_t n;
    ACC_CHECK(acc__spec_numel(&table[r], r, fn, &n));
    if (n > SIZE_MAX / sizeof(float) - numel)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the table is too large", fn);
    numel += n;
  }
  acc__typed_group g;
  memset(&g, 0, sizeof g);
  g.dtype = dtype;
  g.dev = dp;
  g.master = master;
  g.master_program = master != NULL;
  g.ready = acc__calloc(count, 1);
  acc_result arc = g.ready ? alloc_copies(&g, dp, params, numel) : ACC_ERR_NOMEM;
  if (arc != ACC_OK) {
    acc__typed_group_free(&g);
    return arc;
  }
  size_t first = 0;
  acc_result rc = acc_model_add_flat(m, table, count, g.master, g.grad32, &first);
  if (rc == ACC_OK) {
    g.first = first;
    g.count = count;
    g.numel = numel;
    g.dtype = dtype;
    g.params = params;
    g.grads = grads;
    /* out of memory here leaves the parameters registered over master and grad32, which are
     * then not freed with the model (never left dangling) */
    ACC_CHECK(acc__model_typed_add(m, &g));
    if (first_index) *first_index = first;
    return ACC_OK;
  }
  acc__typed_group_free(&g);
  return rc;
}

acc_result acc_model_set_flat_grads_typed(acc_model *m, size_t first, acc_dtype dtype, void *grads) {
  static const char fn[] = "acc_model_set_flat_grads_typed";
  ACC_CHECK(acc__check_handle(m, ACC__HANDLE_MODEL, fn));
  acc__typed_group *g = group_of(m, first);
  if (dtype == ACC_F32 && !g) return acc_model_set_flat_grads(m, first, grads);
  if (!g || g->first != first)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: parameter index %zu does not start a table registered with acc_model_add_flat_typed (pass "
                      "the index it returned)", fn, first);
  if (dtype != g->dtype)
    return acc__error(ACC_ERR_MISMATCH, "%s: the table starting at '%s' holds %s parameters but the gradients are "
                      "given as %s; gradients take the dtype of their parameters", fn,
                      acc_model_parameter(m, first)->name, dtype_word(g->dtype), dtype_word(dtype));
  if (!grads) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the gradient buffer is NULL", fn);
  acc__devctx *dg = acc__devio_find(grads);
  if (dg != g->dev || !group_live(g))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the gradient buffer is %s but the table starting at '%s' has its parameters in %s; "
                      "gradients live where their parameters do", fn, where_word(dg),
                      acc_model_parameter(m, first)->name, group_where(g));
  g->grads = grads;
  g->grads_in = 0;
  return ACC_OK;
}

acc_dtype acc_model_parameter_dtype(const acc_model *m, size_t i) {
  if (!acc__handle_ok(m, ACC__HANDLE_MODEL) || i >= acc_model_num_parameters(m)) return ACC_F32;
  const acc__typed_group *g = group_of(m, i);
  return g ? g->dtype : ACC_F32;
}

const void *acc_model_parameter_storage(const acc_model *m, size_t i) {
  if (!acc__handle_ok(m, ACC__HANDLE_MODEL) || i >= acc_model_num_parameters(m)) return NULL;
  const acc_param *p = acc_model_parameter(m, i);
  const acc__typed_group *g = group_of(m, i);
  if (!g) return p->data;
  return g->params + (p->data - g->master);
}

/* ---- the accelerator's conversions (train_cpu.c, train_device.c) ------------------------------ */

int acc__typed_any(const acc_model *m) {
  size_t n;
  (void)acc__model_typed(m, &n);
  return n > 0;
}

acc_result acc__typed_check_place(const acc_model *m, const acc__devctx *d, const char *fn) {
  size_t n;
  const acc__typed_group *g = acc__model_typed(m, &n);
  const acc__devctx *want = acc__devctx_offhost(d) ? d : NULL;
  for (size_t k = 0; k < n; k++) {
    const char *name = acc_model_parameter(m, g[k].first)->name;
    if (!group_live(&g[k]))
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: the %s table starting at '%s' was registered over memory of a device that was closed "
                        "(the accelerator that allocated it was destroyed); register the table again with memory "
                        "of this accelerator's device", fn, dtype_word(g[k].dtype), name);
    if (g[k].dev == want) continue;
    if (!g[k].dev)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: the %s table starting at '%s' is in host memory and this accelerator trains on %s; "
                        "allocate the table's parameters and gradients with acc_accelerator_alloc (device "
                        "memory) before acc_model_add_flat_typed", fn, dtype_word(g[k].dtype), name,
                        acc__device_name(want->dev));
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: the %s table starting at '%s' is memory of %s but this accelerator trains on %s; "
                      "register the table with buffers of the device the accelerator trains on", fn,
                      dtype_word(g[k].dtype), name, acc__device_name(g[k].dev->dev),
                      want ? acc__device_name(want->dev) : "the CPU");
  }
  return ACC_OK;
}

acc_result acc__typed_params_in(acc_model *m) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++)
    if (!g[k].master_program) ACC_CHECK(g_widen(&g[k], g[k].master, g[k].params, g[k].numel));
  return ACC_OK;
}

/* The master weights rounded into the program's buffers (library_only: of the tables whose master
 * is the library's). */
static acc_result params_out(acc_model *m, int library_only) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++)
    if (!library_only || !g[k].master_program) ACC_CHECK(g_narrow(&g[k], g[k].params, g[k].master, g[k].numel));
  return ACC_OK;
}

acc_result acc__typed_params_out(acc_model *m) { return params_out(m, 0); }

acc_result acc__typed_params_out_library(acc_model *m) { return params_out(m, 1); }

static acc_result no_grads(const acc_model *m, const acc__typed_group *g, const char *fn) {
  return acc__error(ACC_ERR_INVALID_USAGE,
                    "%s: parameter '%s' takes a gradient but none is attached: its %s table has no gradient "
                    "buffer yet (acc_model_set_flat_grads_typed)", fn, acc_model_parameter(m, g->first)->name,
                    dtype_word(g->dtype));
}

/* Element offset of row i (a row of g) in the table's buffers. */
static size_t row_offset(const acc_model *m, const acc__typed_group *g, size_t i) {
  return (size_t)(acc_model_parameter(m, i)->data - g->master);
}

/* The rows [a, b) of g widened as one conversion (they are consecutive in the buffers). */
static acc_result widen_rows(const acc_model *m, const acc__typed_group *g, size_t a, size_t b) {
  size_t lo = row_offset(m, g, a);
  size_t hi = b < g->first + g->count ? row_offset(m, g, b) : g->numel;
  return hi > lo ? g_widen(g, g->grad32 + lo, g->grads + lo, hi - lo) : ACC_OK;
}

int acc__typed_program_master(const acc_model *m, size_t index) {
  const acc__typed_group *g = group_of(m, index);
  return g && g->master_program;
}

acc_result acc__typed_grads_in(acc_model *m, const char *fn) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++) {
    if (g[k].grads_in) continue;
    if (!g[k].grads) return no_grads(m, &g[k], fn);
    /* the rows grad_ready did not convert, a run of consecutive rows at a time (all of the table
     * in one conversion without grad_ready) */
    size_t end = g[k].first + g[k].count;
    for (size_t i = g[k].first; i < end;) {
      if (g[k].ready[i - g[k].first]) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < end && !g[k].ready[j - g[k].first]) j++;
      ACC_CHECK(widen_rows(m, &g[k], i, j));
      i = j;
    }
    g[k].grads_in = 1;
  }
  return ACC_OK;
}

acc_result acc__typed_grad_ready(acc_model *m, size_t index) {
  acc__typed_group *g = group_of(m, index);
  if (!g) return ACC_OK;
  if (!g->grads) return no_grads(m, g, "grad_ready");
  if (g->ready[index - g->first])
    return acc__error(ACC_ERR_INVALID_USAGE, "grad_ready: parameter '%s' was already marked ready in this step",
                      acc_model_parameter(m, index)->name);
  ACC_CHECK(widen_rows(m, g, index, index + 1));
  g->ready[index - g->first] = 1;
  return ACC_OK;
}

void acc__typed_ready_clear(acc_model *m) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++) memset(g[k].ready, 0, g[k].count);
}

acc_result acc__typed_grads_out(acc_model *m) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++)
    if (g[k].grads) ACC_CHECK(g_narrow(&g[k], g[k].grads, g[k].grad32, g[k].numel));
  return ACC_OK;
}

void acc__typed_grads_done(acc_model *m) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++) g[k].grads_in = 0;
}

acc_result acc__typed_zero_grads(acc_model *m, const acc_optimizer *opt) {
  size_t n;
  acc__typed_group *g = acc__model_typed(m, &n);
  for (size_t k = 0; k < n; k++) {
    g[k].grads_in = 0;
    memset(g[k].ready, 0, g[k].count); /* a step abandoned after grad_ready */
    if (!g[k].grads) continue;
    for (size_t i = g[k].first; i < g[k].first + g[k].count; i++) {
      if (opt && !acc_optimizer_has_parameter(opt, i)) continue;
      const acc_param *p = acc_model_parameter(m, i);
      uint16_t *at = g[k].grads + (p->data - g[k].master);
      if (!g[k].dev) memset(at, 0, p->numel * sizeof(uint16_t));
      else ACC_CHECK(acc__device_memset(g[k].dev->dev, at, 0, p->numel * sizeof(uint16_t), g[k].dev->stream));
    }
  }
  return ACC_OK;
}
