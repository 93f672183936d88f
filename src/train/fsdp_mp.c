/* FSDP's mixed precision (docs/fsdp.md, "Precision"): the conversions between the float32 master
 * shards and the 16-bit buffers the program reads and writes (round to nearest even, widening
 * exact: the accelerator's typed tables' rounding), and the fp16 loss scaler over the shards
 * (unscale with one all-reduce of the overflow flag, the step skipped on overflow). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "accelerate.h"
#include "accelerate/fsdp.h"
#include "backend/collcheck.h"
#include "train/accel.h"
#include "train/fsdp.h"
#include "train/fsdp_mem.h"
#include "train/train.h"

const char *acc__fsdp_dtype_word(acc_dtype d) {
  return d == ACC_BF16 ? "bf16" : d == ACC_F16 ? "fp16" : d == ACC_F32 ? "float32" : acc_dtype_name(d);
}

acc_dtype acc_fsdp_dtype(const acc_fsdp *f) {
  return acc__fsdp_check(f, "acc_fsdp_dtype") == ACC_OK ? f->dtype : ACC_F32;
}

/* The accelerator's loss scaler when it runs fp16 mixed precision, else NULL. */
static acc_grad_scaler *scaler_of(const acc_fsdp *f) {
  acc_grad_scaler *s = acc_accelerator_grad_scaler(f->acc);
  return acc_grad_scaler_enabled(s) ? s : NULL;
}

acc_result acc__fsdp_unscale(acc_fsdp *f, const char *fn) {
  acc_grad_scaler *s = scaler_of(f);
  if (!s || f->unscaled) return ACC_OK;
  for (size_t k = 0; k < f->nunits; k++)
    if (f->units[k].phase == ACC__FSDP_BWD)
      return acc__error(ACC_ERR_INVALID_USAGE, "%s: unit '%s' is still in backward: end every unit's backward before "
                        "unscaling the gradients", fn, f->units[k].name);
  /* the shards divided as the scaler does (torch's inv_scale = float(1 / double(scale)), the check
   * before the multiplication; fsdp_mem.c: a host loop or the device's unscale kernel); padding is
   * zero and stays zero */
  int local = 0;
  const float inv = (float)(1.0 / (double)acc_grad_scaler_scale(s));
  ACC_CHECK(acc__fsdp_mem_unscale(f, f->gshard, f->shard_total, inv, &local));
  f->unscaled = 1; /* divided: never twice, even when the agreement below fails */
  f->found_inf = 1;
  int32_t mine = local, any = mine;
  if (f->world > 1) {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(0, 6));
    ACC_CHECK(acc_all_reduce(f->st, &mine, &any, 1, ACC_I32, ACC_MAX));
  }
  acc__grad_scaler_mark_unscaled(s, any != 0);
  f->unscaled = 1;
  f->found_inf = any != 0;
  return ACC_OK;
}

acc_result acc_fsdp_unscale_gradients(acc_fsdp *f, int *found_inf) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_unscale_gradients"));
  ACC_CHECK(acc__fsdp_settle(f)); /* a reduction in flight lands in the shards first */
  ACC_CHECK(acc__fsdp_unscale(f, "acc_fsdp_unscale_gradients"));
  if (found_inf) *found_inf = f->unscaled && f->found_inf;
  return ACC_OK;
}

acc_result acc_fsdp_optimizer_step(acc_fsdp *f, acc_optimizer *opt) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_optimizer_step"));
  ACC_CHECK(acc__fsdp_settle(f)); /* no prefetch in flight past the step */
  if (!opt) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_optimizer_step: opt is NULL");
  ACC_CHECK(acc__fsdp_unscale(f, "acc_fsdp_optimizer_step"));
  acc_grad_scaler *s = scaler_of(f);
  int skip = s && f->found_inf;
  if (!skip) ACC_CHECK(acc_optimizer_step(opt));
  if (s) ACC_CHECK(acc_grad_scaler_update(s, f->found_inf));
  f->unscaled = f->found_inf = 0;
  f->skipped = skip;
  f->acc->step_was_skipped = skip; /* the accelerator's scheduler step skips with it */
  return ACC_OK;
}

int acc_fsdp_optimizer_step_was_skipped(const acc_fsdp *f) {
  return acc__fsdp_check(f, "acc_fsdp_optimizer_step_was_skipped") == ACC_OK && f->skipped;
}
