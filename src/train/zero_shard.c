/* ZeRO for a program that steps its own optimizer (llm.c's `-z 1`, issue 33 item 5): the range
 * of the model's parameters this process updates (acc_accelerator_zero_shard), and the all-gather
 * that hands every process the others' updated ranges afterwards (acc_accelerator_zero_gather,
 * through zero_gather.c's acc__zero_gather_pass, the one the library's own step uses).
 *
 * The layout is the one of the library's ZeRO (accel_models.c, docs/zero.md): the parameters that
 * take a gradient laid end to end in registration order, T elements, cut into N shards of
 * ceil(T / N) (the last one shorter, or empty). For a flat table whose rows all train, an element
 * of the layout is the same element of the table. The float32 values are gathered, and the
 * program's bf16/fp16 values of tables with the program's master (its own rounding kept); the
 * other typed tables are rounded from their gathered master. Host memory with memcpy, device
 * memory through host staging with the device's copies, after the program's queued work on its
 * named stream and before its next. */

#include "accelerate.h"
#include "device/device.h"
#include "train/accel.h"
#include "train/model_internal.h"
#include "train/train.h"

/* elements per process per all-gather: bounds the host staging (N x this x 4 bytes) */
#define GATHER_CHUNK ((size_t)1 << 20)

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
  size_t t, rank = (size_t)acc_state_process_index(acc->st);
  size_t shard = acc__model_zero_span(pm->model, (size_t)acc_state_num_processes(acc->st), &t);
  size_t lo = rank * shard < t ? rank * shard : t, hi = lo + shard < t ? lo + shard : t;
  *first = lo;
  *count = hi - lo;
  return ACC_OK;
}

/* A bf16/fp16 table with the program's master takes pass 1 (the same answer on every process:
 * every process registers the same tables). */
static int any_program_master(const acc_model *m) {
  for (size_t i = 0; i < acc_model_num_parameters(m); i++)
    if (acc__typed_program_master(m, i)) return 1;
  return 0;
}

static acc_result gather(acc_accelerator *acc, acc_model *m, int pass) {
  acc__devctx *d = acc__devctx_offhost(acc->dev) ? acc->dev : NULL;
  const size_t n = (size_t)acc_state_num_processes(acc->st), es = pass == 0 ? sizeof(float) : sizeof(uint16_t);
  size_t t;
  acc__model_zero_span(m, n, &t);
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
