/* The TensorBoard event-file writer behind the "tensorboard" tracker. Not API. */
#ifndef ACC_OBS_TBOARD_H
#define ACC_OBS_TBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* CRC-32C of data, and the masked form TFRecord stores: ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t acc__crc32c(const void *data, size_t n);
uint32_t acc__crc32c_masked(const void *data, size_t n);

typedef struct acc__tb acc__tb;
/* Creates run_dir/events.out.tfevents.<time>.<host>.<pid>.<n> with its file_version record. */
acc_result acc__tb_open(acc__tb **out, const char *run_dir);
/* The hyperparameters as the hparams plugin's session_start_info. */
acc_result acc__tb_hparams(acc__tb *t, const acc_kv *config, size_t n);
/* One event with a simple_value per numeric value (strings skipped). */
acc_result acc__tb_scalars(acc__tb *t, const acc_kv *values, size_t n, int64_t step);
/* A SessionLog START event at step: TensorBoard then drops the events of earlier files of the run
 * at or past this step (a resumed or restarted run continues its curves; torch's purge_step). */
acc_result acc__tb_purge_from(acc__tb *t, int64_t step);
/* Writes the experiment summary (hparams and the metrics seen) and session_end_info (success or
 * failure), closes and frees. */
acc_result acc__tb_close(acc__tb *t, int success);
const char *acc__tb_path(const acc__tb *t);

#endif
