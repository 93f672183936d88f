/* Internal structures of the data module (dataset.c, the loader: loader*.c). Not API. */
#ifndef ACC_DATA_INTERNAL_H
#define ACC_DATA_INTERNAL_H

#include "accelerate/data.h"
#include "core/internal.h"

#define ACC_DATA_MAX_FIELDS 16
/* Sanity bound on batch_size x num_processes (keeps every size computation far from overflow). */
#define ACC_DATA_MAX_GLOBAL_BATCH ((int64_t)1 << 30)

struct acc_dataset {
  uint32_t magic;
  int64_t length; /* -1: unknown (iterable) */
  int num_fields;
  acc_field_desc fields[ACC_DATA_MAX_FIELDS];
  size_t sample_bytes[ACC_DATA_MAX_FIELDS];  /* bytes of one sample's field */
  size_t record_offset[ACC_DATA_MAX_FIELDS]; /* offset of the field in a staged sample record */
  size_t record_bytes;
  acc_dataset_fetch_fn fetch; /* map-style */
  acc_dataset_next_fn next;   /* iterable */
  acc_dataset_reset_fn reset;
  void *payload;
  const void *mem[ACC_DATA_MAX_FIELDS]; /* acc_dataset_create_memory: borrowed arrays */
  void (*free_payload)(void *payload);  /* a dataset that owns its payload (tokens.c) */
  const char *(*fetch_error)(void *payload); /* why the last fetch failed, for the loader's message */
};

/* The loader destroys its dataset with itself (a dataset the library created for the program). */
void acc__dataloader_own_dataset(acc_dataloader *dl);
/* 1 when the program's options ask the loader to take the dataset over (take_dataset, version 4):
 * read without a message, so that a failed create can still honour it. */
int acc__dataloader_opts_take(const acc_dataloader_options *user);
/* The loader's message for a failed fetch: the dataset's own reason when it has one, else "". */
const char *acc__dataset_fetch_error(const acc_dataset *ds);

/* A prepared loader knows its accelerator: destroying the loader first tells the accelerator to
 * forget it (forget(owner, dl)); destroying the accelerator first clears the link (owner NULL),
 * which also ends the loader's device placement (it goes on with host batches from the same
 * position; its device memory is freed while the device is still open). */
void acc__dataloader_set_owner(acc_dataloader *dl, void (*forget)(void *owner, acc_dataloader *dl), void *owner);
/* acc_dataloader_create with device placement: dev (an accelerator's device that is not the CPU,
 * borrowed; NULL: host batches only) gets every batch in its memory, copied one batch ahead on a
 * copy stream of the loader and handed to dev's compute stream through an event (docs/data.md,
 * "Device placement"). Host staging buffers are page-locked where the device has such memory. */
struct acc__devctx;
acc_result acc__dataloader_create_on(acc_dataloader **out, acc_dataset *ds,
                                     const acc_dataloader_options *opts,
                                     struct acc__devctx *dev);
/* Real (non-padding) samples in the last batch of every process together, when every process
 * yields the same number of batches (what gather_for_metrics keeps on the last batch); else -1. */
int64_t acc__batch_shard_last_round_real(const acc_batch_shard *sh);
/* The position units one batch of every process together consumes from the epoch's order:
 * batch_size x num_processes samples (batch_size with split_batches); a loader over a given list
 * of batches counts the list's batches (num_processes, or 1 with split_batches). load_state maps
 * a loader position saved by N processes onto M processes with it. */
int64_t acc__dataloader_round_units(const acc_dataloader *dl);
/* The number of processes the loader shards over (its options' shard.num_processes). */
int acc__dataloader_num_processes(const acc_dataloader *dl);
/* Batches per epoch of this process before any skipping; -1 when unknown (iterable, no length). */
int64_t acc__dataloader_full_len(const acc_dataloader *dl);

/* Token datasets (tokens.c): the number of files after the program's patterns were expanded, in
 * reading order (-1: ds is not a token dataset), and file i's path and tokens (-1: not opened,
 * past max_windows). */
int acc__tokens_num_files(const acc_dataset *ds);
void acc__tokens_file(const acc_dataset *ds, int i, const char **path, int64_t *ntok);
/* tokens_agree.c: every process of st compares its token files (names without directories, in order, and token counts)
 * with process 0's; a difference is ACC_ERR_MISMATCH on every process naming the first process
 * that differs and its first differing file. OK at once for a dataset that is not a token
 * dataset (no collective then). Collective for token datasets. */
struct acc_state;
acc_result acc__tokens_agree(struct acc_state *st, const acc_dataset *ds, const char *fn);

#endif
