/* load_state's tensor copies, deferred until every process agreed (load_defer.c). Not API.
 *
 * load_state checks a checkpoint's model and optimizer files (headers, names, shapes, dtypes)
 * and that their bytes can be read (in the page cache, or read into it now), but writes none of
 * them into the model's parameters or the optimizer's buffers: it records where each tensor
 * goes. Only once every process loaded and checked everything else does acc__defer_commit read
 * the bytes, with pread, straight into the parameters and optimizer buffers: one copy per byte,
 * no staging buffer, no copy of the old values to put back (nothing was changed when a load
 * fails). */
#ifndef ACC_LOAD_DEFER_H
#define ACC_LOAD_DEFER_H

#include <stddef.h>

#include "train/train.h"

/* ---- safetensors.c: the reader load_state uses, the writer of staged tensors ---------------- */

/* Writes the nbytes bytes of tensor v (v->data is the caller's: device memory, for example) to
 * fd at the file's current position, with acc__write_all (path names the file in errors). */
typedef acc_result (*acc__st_source_fn)(void *payload, const acc_tensor_view *v, size_t nbytes, int fd,
                                        const char *path);
/* acc_safetensors_write (no metadata) whose tensor bytes come from src, one tensor after the
 * other, instead of from the views' data: the same checks, the same crash-safe write. */
acc_result acc__safetensors_write_src(const char *path, const acc_tensor_view *tensors, size_t count,
                                      acc__st_source_fn src, void *payload);
/* The same with metadata (acc_safetensors_write's keys and values). */
acc_result acc__safetensors_write_src_meta(const char *path, const acc_tensor_view *tensors, size_t count,
                                           const char *const *meta_keys, const char *const *meta_values,
                                           size_t meta_count, acc__st_source_fn src, void *payload);

/* acc_safetensors_open that keeps the file open, for acc__safetensors_pread. */
acc_result acc__safetensors_open_fd(acc_safetensors **out, const char *path);
/* Checks that the bytes of tensor v (a view of f) can be read: pages in the page cache, or read
 * into it now (MADV_POPULATE_READ); ACC_ERR_IO naming the file and the tensor otherwise. */
acc_result acc__safetensors_check_readable(const acc_safetensors *f, const acc_tensor_view *v);
/* Copies tensor v's v->nbytes bytes into dst: pread when f was opened with
 * acc__safetensors_open_fd, else from the mapping. */
acc_result acc__safetensors_pread(const acc_safetensors *f, const acc_tensor_view *v, void *dst);

/* ---- save_model.c --------------------------------------------------------------------------- */

typedef struct acc__defer acc__defer;

/* acc_load_checkpoint_in_model (strict, the same checks and messages) into d: the model is not
 * changed; its parameters are written by acc__defer_commit. The model must be in host memory
 * (acc__defer_model_on_host). */
acc_result acc__load_model_deferred(acc_model *model, const char *path, acc__defer *d);

/* ---- load_defer.c ----------------------------------------------------------------------------- */

acc_result acc__defer_new(acc__defer **out);
/* d keeps f open (and closes it in acc__defer_free). */
acc_result acc__defer_adopt(acc__defer *d, acc_safetensors *f);
/* Tensor v of f (adopted by d) goes to dst (numel f32 elements) at commit; its bytes are checked
 * readable now. With o: buffer b of parameter i of o is marked present at commit. */
acc_result acc__defer_tensor(acc__defer *d, const acc_safetensors *f, const acc_tensor_view *v, float *dst,
                             size_t numel, acc_optimizer *o, size_t i, int b);
/* Optimizer i's state tensors from f (opened with acc__safetensors_open_fd, adopted by d):
 * each checked as acc_optimizer_state_set checks it (a state tensor of o, the parameter's shape,
 * F32), then deferred into o's buffer. */
acc_result acc__defer_optimizer(acc__defer *d, acc_optimizer *o, const acc_safetensors *f, const char *path, int oi);
/* Reads every recorded tensor into its place (in the order recorded) and marks the optimizer
 * buffers present. Fails only when a file can no longer be read (changed in place after the
 * checks): ACC_ERR_IO naming it; the tensors before it are loaded then. */
acc_result acc__defer_commit(acc__defer *d);
void acc__defer_free(acc__defer *d);
/* numel elements of v (F32, F64, F16 or BF16) as f32 into dst (acc_load_checkpoint_in_model too). */
void acc__tensor_to_f32(float *dst, const acc_tensor_view *v, size_t numel);
/* The model's parameters are host memory (not of a registered device): load_state defers them. */
int acc__defer_model_on_host(const acc_model *m);

#endif
