/* The ZeRO parameter all-gather (acc__zero_gather_pass: the library's step and the program's), and ZeRO
 * for a program that steps its own optimizer (llm.c's `-z 1`, issue 33 item 5): the range
 * of the model's parameters this process updates (acc_accelerator_zero_shard), and the all-gather
 * that hands every process the others' updated ranges afterwards (acc_accelerator_zero_gather).
 *
 * The layout is the one of the library's ZeRO (accel_models.c, docs/zero.md): the parameters that
 * take a gradient laid end to end in registration order, T elements, cut into N shards of
 * ceil(T / N) (the last one shorter, or empty). For a flat table whose rows all train, an element
 * of the layout is the same element of the table. The float32 values are gathered, and the
 * program's bf16/fp16 values of tables with the program's master (its own rounding kept); the
 * other typed tables are rounded from their gathered master. Host memory with memcpy, device
 * memory through host staging with the device's copies, after the program's queued work on its
 * named stream and before its next. */
#include <string.h>

#include "accelerate.h"
#include "backend/collcheck.h"
#include "device/device.h"
#include "train/accel.h"
#include "train/model_internal.h"
#include "train/train.h"

/* elements per process per all-gather: bounds the host staging (N x this x 4 bytes) */
#define GATHER_CHUNK ((size_t)1 << 20)

static void layout(const acc_model *m, int rank, int n, size_t *total, size_t *lo, size_t *hi) {
  size_t t;
  size_t shard = acc__model_zero_span(m, (size_t)n, &t);
  size_t a = (size_t)rank * shard;
  *total = t;
  *lo = a < t ? a : t;
  *hi = a + shard < t ? a + shard : t;
}

static acc_result find(acc_accelerator *acc, acc_model *model, const char *fn, acc__pmodel **pm) {
  ACC_CHECK(acc__accel_check(acc, fn));
  *pm = model ? acc__accel_find_model(acc, model) : (acc->nmodels ? &acc->models[0] : NULL);
  if (!*pm)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                      model ? "the model was not prepared in this accelerator (acc_accelerator_prepare_model)"
                            : "prepare the model first (acc_accelerator_prepare_model)");
  if (!acc->zero)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: this accelerator runs zero_stage 0 (every process updates every parameter); set "
                      "zero_stage 1 or 2 (acc_accelerator_options, --zero_stage, ACCELERATE_ZERO_STAGE)", fn);
  return ACC_OK;
}

acc_result acc_accelerator_zero_shard(acc_accelerator *acc, acc_model *model, size_t *first, size_t *count) {
  static const char fn[] = "acc_accelerator_zero_shard";
  if (!first || !count) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: first or count is NULL", fn);
  acc__pmodel *pm;
  ACC_CHECK(find(acc, model, fn, &pm));
  size_t t, lo, hi;
  layout(pm->model, acc_state_process_index(acc->st), acc_state_num_processes(acc->st), &t, &lo, &hi);
  *first = lo;
  *count = hi - lo;
  return ACC_OK;
}

/* The buffer of row i that a gather pass moves: pass 0 the float32 values (the master weights of a
 * bf16/fp16 row), pass 1 the program's bf16/fp16 values of a row whose table has the program's
 * master (its own rounding, stochastic or not, kept as it computed it); NULL: not in this pass. */
static void *row_buffer(const acc_model *m, size_t i, int pass) {
  if (pass == 0) return acc_model_parameter(m, i)->data;
  return acc__typed_program_master(m, i) ? (void *)acc_model_parameter_storage(m, i) : NULL;
}

/* Copies the layout range [a, b) between host buf (element a first, es bytes per element) and the
 * rows' buffers of `pass`: out = 1 from the rows into buf. Device memory through d's copies. */
static acc_result move(acc__devctx *d, acc_model *m, int pass, size_t es, size_t a, size_t b, char *buf,
                       int out) {
  size_t off = 0;
  for (size_t i = 0; i < acc_model_num_parameters(m) && off < b; i++) {
    if (!acc_model_requires_grad(m, i)) continue;
    size_t end = off + acc_model_parameter(m, i)->numel, s = off > a ? off : a, e = end < b ? end : b;
    char *row = row_buffer(m, i, pass);
    if (e > s && row) {
      char *at = row + (s - off) * es, *h = buf + (s - a) * es;
      size_t bytes = (e - s) * es;
      if (!d) memcpy(out ? h : at, out ? at : h, bytes);
      else
        ACC_CHECK(acc__device_copy(d->dev, out ? (void *)h : (void *)at, out ? (void *)at : (void *)h, bytes,
                                   out ? ACC__COPY_D2H : ACC__COPY_H2D, d->stream));
    }
    off = end;
  }
  return d && out ? acc__dstream_sync(d->dev, d->stream) : ACC_OK; /* buf is read next */
}

/* A bf16/fp16 table with the program's master takes pass 1 (the same answer on every process:
 * every process registers the same tables). */
static int any_program_master(const acc_model *m) {
  for (size_t i = 0; i < acc_model_num_parameters(m); i++)
    if (acc__typed_program_master(m, i)) return 1;
  return 0;
}

acc_result acc__zero_gather_pass(acc_state *st, acc__devctx *d, acc_model *m, int pass, void *buffer, size_t chunk,
                                 int origin_index) {
  const int rank = acc_state_process_index(st), n = acc_state_num_processes(st);
  const size_t es = pass == 0 ? sizeof(float) : sizeof(uint16_t);
  char *buf = buffer;
  size_t t, lo, hi;
  layout(m, rank, n, &t, &lo, &hi);
  size_t shard = t ? (t + (size_t)n - 1) / (size_t)n : 1;
  if (chunk == 0 || chunk > shard) chunk = shard;
  acc_result rc = ACC_OK;
  for (size_t c = 0; c < shard && rc == ACC_OK; c += chunk) {
    size_t len = shard - c < chunk ? shard - c : chunk;
    char *mine = buf + (size_t)rank * len * es;
    memset(mine, 0, len * es); /* the padding past the last element */
    size_t a = lo + c < hi ? lo + c : hi, b = lo + c + len < hi ? lo + c + len : hi;
    rc = move(d, m, pass, es, a, b, mine, 1);
    acc__comm_origin(ACC__ORIGIN_ZERO, origin_index);
    if (rc == ACC_OK) rc = acc_all_gather(st, mine, buf, len, pass == 0 ? ACC_F32 : ACC_BF16);
    for (int r = 0; r < n && rc == ACC_OK; r++) {
      size_t s = (size_t)r * shard + c, e = s + len;
      if (r == rank || s >= t) continue;
      rc = move(d, m, pass, es, s, e < t ? e : t, buf + (size_t)r * len * es, 0);
    }
    /* the host buffer is rewritten by the next chunk: its copies to the device must be done */
    if (rc == ACC_OK && d) rc = acc__dstream_sync(d->dev, d->stream);
  }
  return rc;
}

static acc_result gather(acc_accelerator *acc, acc_model *m, int pass) {
  acc__devctx *d = acc__devctx_offhost(acc->dev) ? acc->dev : NULL;
  const size_t n = (size_t)acc_state_num_processes(acc->st), es = pass == 0 ? sizeof(float) : sizeof(uint16_t);
  size_t t, lo, hi;
  layout(m, 0, (int)n, &t, &lo, &hi);
  size_t shard = t ? (t + n - 1) / n : 1;
  size_t chunk = shard < GATHER_CHUNK ? shard : GATHER_CHUNK;
  char *buf = acc__calloc(chunk * n, es);
  if (!buf) return ACC_ERR_NOMEM;
  acc_result rc = acc__zero_gather_pass(acc->st, d, m, pass, buf, chunk, 6 + pass);
  acc__free(buf);
  return rc;
}

acc_result acc_accelerator_zero_gather(acc_accelerator *acc, acc_model *model) {
  static const char fn[] = "acc_accelerator_zero_gather";
  acc__pmodel *pm;
  ACC_CHECK(find(acc, model, fn, &pm));
  if (acc_state_num_processes(acc->st) == 1) return ACC_OK; /* one process updated everything */
  ACC_CHECK(acc__dev_prog_enter(acc->dev));
  ACC_CHECK(gather(acc, pm->model, 0));
  if (any_program_master(pm->model)) ACC_CHECK(gather(acc, pm->model, 1));
  /* bf16/fp16 tables with the library's master: rounded into the program's buffer */
  ACC_CHECK(acc__typed_params_out_library(pm->model));
  return acc__dev_prog_leave(acc->dev);
}
