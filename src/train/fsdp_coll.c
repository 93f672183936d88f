/* FSDP's collectives on its buffers (fsdp_mem.h): NCCL on device memory when the accelerator's
 * device has it (device/dcomm.h), else the comm layer's collectives (host staging on a device:
 * comm/stage.h). docs/fsdp.md, "On a device". */
#include "backend/collcheck.h"
#include "comm/group.h"
#include "core/env.h"
#include "device/dcomm.h"
#include "train/fsdp_mem.h"
#include "train/train.h"

acc_result acc__fsdp_coll_setup(acc_fsdp *f) {
  int mode = 0, set = 0;
  ACC_CHECK(acc__env_enum("ACCELERATE_FSDP_NCCL", &mode, &set));
  if (!f->dev || mode == 2) {
    if (mode == 1)
      return acc__error(ACC_ERR_NOT_SUPPORTED, "ACCELERATE_FSDP_NCCL=always: FSDP's collectives run on NCCL only "
                                               "when the accelerator trains on a device (it trains on the CPU)");
    return ACC_OK;
  }
  if (f->replicas > 1 || f->shard_group != ACC__GROUP_WORLD) {
    if (mode == 1)
      return acc__error(ACC_ERR_NOT_SUPPORTED, "ACCELERATE_FSDP_NCCL=always: HYBRID_SHARD / HYBRID_SHARD_ZERO2 keep "
                                               "their host-staged collectives (no NCCL communicator per machine and "
                                               "rail yet); unset it or choose FULL_SHARD, SHARD_GRAD_OP or NO_SHARD");
    return ACC_OK;
  }
  acc_result rc = acc__dcomm_create(f->st, f->dev->dev, mode, &f->dcomm);
  if (rc != ACC_OK) return acc__error_context(rc, "acc_fsdp_prepare: FSDP's NCCL communicator");
  return ACC_OK;
}

void acc__fsdp_coll_free(acc_fsdp *f) {
  if (!f->dcomm) return;
  acc__dstream_sync(f->dev->dev, f->dev->stream);
  acc__dcomm_destroy(f->dcomm);
  f->dcomm = NULL;
}

acc_result acc__fsdp_coll_all_gather(acc_fsdp *f, int group, const void *send, void *recv, size_t count,
                                     acc_dtype dtype) {
  if (f->dcomm && group == ACC__GROUP_WORLD)
    return acc__dcomm_all_gather(f->dcomm, send, recv, count, dtype, f->dev->stream);
  return acc__comm_group_all_gather(f->st, group, send, recv, count, dtype);
}

acc_result acc__fsdp_coll_reduce_scatter(acc_fsdp *f, int group, const void *send, void *recv, size_t count,
                                         acc_dtype dtype, acc_op op) {
  if (f->dcomm && group == ACC__GROUP_WORLD)
    return acc__dcomm_reduce_scatter(f->dcomm, send, recv, count, dtype, op, f->dev->stream);
  return acc__comm_group_reduce_scatter(f->st, group, send, recv, count, dtype, op);
}

acc_result acc__fsdp_coll_all_reduce(acc_fsdp *f, int group, const void *send, void *recv, size_t count,
                                     acc_dtype dtype, acc_op op) {
  if (f->dcomm && group == ACC__GROUP_WORLD)
    return acc__dcomm_all_reduce(f->dcomm, send, recv, count, dtype, op, f->dev->stream);
  return acc__comm_group_all_reduce(f->st, group, send, recv, count, dtype, op);
}
