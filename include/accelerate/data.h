/* accelerate-c: datasets, samplers, per-process sharding exactly as Accelerate's
 * BatchSamplerShard / IterableDatasetShard, and a prefetching dataloader.
 * Everything here is per-process logic parameterized by (num_processes, process_index); only the
 * dispatching loader communicates, through the broadcast callback it is given. See docs/data.md.
 * Threads: a dataset or loader is used from one thread at a time (a loader's own prefetch
 * thread calls the dataset callbacks, one call at a time). */
#ifndef ACCELERATE_DATA_H
#define ACCELERATE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- datasets ------------------------------------------------------------------------------ */

/** One field of a fixed-size sample: count elements of dtype (e.g. 784 x ACC_F32, 1 x ACC_I32). */
typedef struct acc_field_desc {
  acc_dtype dtype;
  size_t count;
} acc_field_desc;

/**
 * Map-style fetch: writes sample `index` into fields[f] (fields[f] has room for field f's
 * count elements). Returns 0 on success, anything else is an error the loader reports.
 * Called on the loader thread when prefetching (one call at a time).
 */
typedef int (*acc_dataset_fetch_fn)(int64_t index, void *const *fields, void *payload);
/** Iterable next: writes the next sample into fields; returns 1 (got one), 0 (end), <0 error. */
typedef int (*acc_dataset_next_fn)(void *const *fields, void *payload);
/** Iterable restart: called at the start of every epoch (Accelerate's set_epoch forwarding). */
typedef int (*acc_dataset_reset_fn)(int64_t epoch, void *payload);

typedef struct acc_dataset acc_dataset;

/**
 * Creates a map-style dataset of `length` samples made of num_fields fixed-size fields.
 * @param out receives the dataset. Ownership: acc_dataset_destroy (after every loader using it).
 * @param payload passed to fetch; borrowed.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_dataset_create_map(acc_dataset **out, int64_t length,
                                             const acc_field_desc *fields, int num_fields,
                                             acc_dataset_fetch_fn fetch, void *payload);
/**
 * Creates an iterable dataset. length is the number of samples per epoch, or -1 when unknown
 * (then the loader's remainder is -1). reset may be NULL (the stream simply continues).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_dataset_create_iterable(acc_dataset **out, int64_t length,
                                                  const acc_field_desc *fields, int num_fields,
                                                  acc_dataset_next_fn next,
                                                  acc_dataset_reset_fn reset, void *payload);
/**
 * Creates a map-style dataset over arrays already in memory: sample i of field f is the
 * fields[f] record at data[f] + i * (record bytes of field f), i.e. data[f] holds `length`
 * records back to back (e.g. data[0]: length x 784 f32 images, data[1]: length x 1 i32 labels).
 * Ownership: data is borrowed and must outlive the dataset and its loaders.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_dataset_create_memory(acc_dataset **out, int64_t length,
                                                const acc_field_desc *fields, int num_fields,
                                                const void *const *data);
/** Number of samples, or -1 when unknown. @since 0.1 */
ACC_EXTERN int64_t acc_dataset_length(const acc_dataset *ds);
/** How the token files of acc_dataset_create_tokens are stored. @since 0.2 */
typedef enum acc_token_format {
  ACC_TOKENS_LLMC = 0, /* llm.c shard: 256 x int32 header (magic 20240520, version 1, token count), uint16 tokens */
  ACC_TOKENS_U16 = 1,  /* raw little-endian uint16 tokens, no header */
  ACC_TOKENS_U32 = 2   /* raw little-endian uint32 tokens, no header */
} acc_token_format;

#define ACC_TOKEN_OPTIONS_VERSION 2u
/** Options of acc_dataset_create_tokens. Initialize with ACC_TOKEN_OPTIONS_INIT. @since 0.2 */
typedef struct acc_token_options {
  size_t size;             /* sizeof(acc_token_options), set by the INIT macro */
  uint32_t version;        /* ACC_TOKEN_OPTIONS_VERSION */
  int64_t seq_len;         /* T (required, >= 1): a sample is a window of T + 1 tokens */
  acc_token_format format;
  int64_t vocab_size;      /* > 0: a token >= vocab_size fails the batch, naming file and position */
  /* ---- version 2 (@since 0.3) ---- */
  int64_t stride;          /* tokens between the starts of consecutive windows; 0: seq_len (windows
                              overlap by one token: window i's last token is window i+1's first) */
  int64_t max_windows;     /* > 0: only the first max_windows windows (a fixed validation set);
                              0: all of them */
} acc_token_options;
#define ACC_TOKEN_OPTIONS_INIT \
  { sizeof(acc_token_options), ACC_TOKEN_OPTIONS_VERSION, 0, ACC_TOKENS_LLMC, 0, 0, 0 }
/** Fills opts with the defaults of `version` (for FFI). @since 0.2 */
ACC_EXTERN acc_result acc_token_options_init(acc_token_options *opts, uint32_t version);

/**
 * A map-style dataset of token windows over one or more token files (a language model's
 * training stream). Sample i is window i: T + 1 consecutive tokens starting at token i x S of
 * the concatenated files (S the stride, T by default), never crossing from one file into the next
 * (each file of n >= T + 1 tokens gives (n - T - 1) / S + 1 windows: (n - 1) / T when S is T);
 * with max_windows only the first max_windows of them. It has two fields of T x ACC_I32 each: `inputs` (tokens 0..T-1 of
 * the window) and `targets` (tokens 1..T), so a batch of B samples is the B x T inputs and the
 * B x T targets of an llm.c-style trainer. Prepared like any map-style dataset, the library's
 * loader shards it over processes, shuffles it with its seeded sampler and resumes it mid-epoch
 * and at another process count: with shuffling on, 1 process x 2B and 2 processes x B see the
 * same windows at every optimizer step. Headers and file sizes are validated at creation
 * (errors name the file and the field); tokens are read with pread on the loader thread.
 * paths[i] is a file, or a glob pattern (an entry that names no existing file and holds '*', '?'
 * or '['; since 0.3) replaced by its matches sorted in byte order; a pattern matching nothing is
 * ACC_ERR_INVALID_ARGUMENT naming it. The files are read in that order as one stream.
 * prepare_dataloader checks that every process sees the same files (file names and token counts).
 * Ownership: acc_dataset_destroy closes the files. docs/data.md, "Token streams".
 * @since 0.2
 */
ACC_EXTERN acc_result acc_dataset_create_tokens(acc_dataset **out, const char *const *paths, int num_paths,
                                                const acc_token_options *opts);
/** @since 0.1 */
ACC_EXTERN void acc_dataset_destroy(acc_dataset *ds);

/* ---- samplers ------------------------------------------------------------------------------ */

/**
 * Writes the sampler order of one epoch into out[0..n): sequential 0..n-1 when shuffle is 0,
 * else the SeedableRandomSampler permutation seeded with seed + epoch (identical on every
 * process for the same seed, without communication).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_sampler_order(int64_t *out, int64_t n, int shuffle, uint64_t seed,
                                        int64_t epoch);
/** len(BatchSampler): ceil(n / batch_size), or floor when drop_last. @since 0.1 */
ACC_EXTERN int64_t acc_batch_sampler_len(int64_t n, int64_t batch_size, int drop_last);

/* ---- sharding ------------------------------------------------------------------------------ */

/** How one process sees the data. Filled by acc_accelerator_prepare_dataloader from the state. */
typedef struct acc_shard_config {
  int num_processes;  /* >= 1 */
  int process_index;  /* 0 .. num_processes-1 */
  int split_batches;  /* 1: batch_size is the global batch, split across processes */
  int even_batches;   /* 1: pad with samples from the start so every process gets full batches */
} acc_shard_config;

#define ACC_SHARD_CONFIG_INIT { 1, 0, 0, 1 }

/** The batches of one process for one epoch (BatchSamplerShard), an index-level iterator. */
typedef struct acc_batch_shard acc_batch_shard;

/**
 * Applies Accelerate's BatchSamplerShard to BatchSampler(order, batch_size,
 * drop_last): every rule of even_batches, split_batches and drop_last, padding from the start
 * of `order`. With num_processes == 1 the batch sampler is used as is (as prepare_data_loader).
 * @param order the epoch's sample order (n indices); copied.
 * Ownership: acc_batch_shard_destroy. Errors: split mode with batch_size % num_processes != 0.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_batch_shard_create(acc_batch_shard **out, const int64_t *order,
                                             int64_t n, int64_t batch_size, int drop_last,
                                             const acc_shard_config *cfg);
/**
 * BatchSamplerShard over a batch sampler given as its list of batches, whose sizes may differ
 * (e.g. length-bucketed batches for sequence models): batch k holds counts[k] indices, the
 * batches stored back to back in `indices`. batch_size is the sampler's batch size: 0 when the
 * batches have no fixed size (every batch then counts as full); else every count must be at most
 * batch_size and a batch counts as full when it holds exactly batch_size. drop_last is the
 * sampler's drop_last (it only turns the end-of-epoch padding off here). The rules are those of
 * acc_batch_shard_create (docs/data.md lists the variable-size cases).
 * Errors: a count < 1 or > batch_size; split_batches with batch_size 0 or not a multiple of
 * num_processes. Ownership: acc_batch_shard_destroy; indices and counts are copied.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_batch_shard_create_from_batches(acc_batch_shard **out,
                                                          const int64_t *indices,
                                                          const int64_t *counts,
                                                          int64_t num_batches, int64_t batch_size,
                                                          int drop_last,
                                                          const acc_shard_config *cfg);
/** BatchSamplerShard.__len__ (Accelerate's formula; in split mode with even_batches off it can
 * @since 0.1
 *  exceed the number of batches actually yielded, as in Accelerate). */
ACC_EXTERN int64_t acc_batch_shard_len(const acc_batch_shard *sh);
/** Number of batches this process actually yields in the epoch. @since 0.1 */
ACC_EXTERN int64_t acc_batch_shard_count(const acc_batch_shard *sh);
/**
 * Batch i (0-based) of this process: *indices (borrowed, valid until destroy) and *count.
 * Returns ACC_ERR_INVALID_ARGUMENT when i is out of range.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_batch_shard_get(const acc_batch_shard *sh, int64_t i,
                                          const int64_t **indices, int64_t *count);
/** @since 0.1 */
ACC_EXTERN void acc_batch_shard_destroy(acc_batch_shard *sh);

/** IterableDatasetShard as a push iterator over int64 items. */
typedef struct acc_iterable_shard acc_iterable_shard;

/**
 * @param batch_size the loader's batch size (global in split mode, per process otherwise).
 * Ownership: acc_iterable_shard_destroy. Errors: split mode with batch_size > 1 not a multiple
 * of num_processes.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_iterable_shard_create(acc_iterable_shard **out, int64_t batch_size,
                                                int drop_last, const acc_shard_config *cfg);
/**
 * Feeds the next item of the stream. Returns 1 when this process's chunk of a completed real
 * batch is ready in *items / *count (borrowed until the next push/finish), else 0.
 * @since 0.1
 */
ACC_EXTERN int acc_iterable_shard_push(acc_iterable_shard *sh, int64_t item,
                                       const int64_t **items, int64_t *count);
/** Ends the stream: returns 1 with the padded last chunk when one is due (not drop_last and a
 * @since 0.1
 *  partial real batch is buffered), else 0. Resets the shard for the next epoch. */
ACC_EXTERN int acc_iterable_shard_finish(acc_iterable_shard *sh, const int64_t **items,
                                         int64_t *count);
/** IterableDatasetShard.__len__: samples per process for a dataset of dataset_len samples. @since 0.1 */
ACC_EXTERN int64_t acc_iterable_shard_len(int64_t dataset_len, int64_t batch_size, int drop_last,
                                          int num_processes);
/** @since 0.1 */
ACC_EXTERN void acc_iterable_shard_destroy(acc_iterable_shard *sh);

/* ---- dataloader ---------------------------------------------------------------------------- */

/**
 * Custom collation for variable-size samples. samples[i * num_fields + f] points to field f of
 * sample i (n samples, laid out as the dataset's fields). Write batch field f into
 * batch_fields[f] (capacity batch_capacity[f] bytes, from acc_dataloader_options) and store the
 * bytes used in batch_bytes[f]. Returns 0 on success.
 */
typedef int (*acc_collate_fn)(const void *const *samples, int64_t n, int num_fields,
                              void *const *batch_fields, const size_t *batch_capacity,
                              size_t *batch_bytes, void *payload);

#define ACC_DATALOADER_OPTIONS_VERSION 4u

/**
 * Broadcast used by a dispatching loader: copies `bytes` bytes of process 0's buf into buf on
 * every process. Collective: every process calls it in the same order. Returns ACC_OK or an error
 * (with acc_last_error set). acc_accelerator_prepare_dataloader supplies one over the process
 * group.
 */
typedef acc_result (*acc_dataloader_broadcast_fn)(void *buf, size_t bytes, void *payload);

/** Options of acc_dataloader_create. Initialize with ACC_DATALOADER_OPTIONS_INIT. */
typedef struct acc_dataloader_options {
  size_t size;                     /* sizeof(acc_dataloader_options), set by the INIT macro */
  uint32_t version;                /* ACC_DATALOADER_OPTIONS_VERSION */
  int64_t batch_size;              /* per process; the global batch when split_batches; with a
                                      batch list: the list's fixed size, 0 = none */
  int shuffle;                     /* map-style: seedable random sampler (batch list: the order
                                      of the batches is shuffled, each batch stays whole) */
  uint64_t seed;                   /* sampler seed; epoch e uses seed + e */
  int drop_last;
  acc_shard_config shard;          /* num_processes, process_index, split_batches, even_batches */
  int prefetch;                    /* batches prepared ahead on a loader thread; 0: no thread */
  acc_collate_fn collate;          /* NULL: stack each field */
  void *collate_payload;
  const size_t *collate_capacity;  /* with collate: bytes per batch field (num_fields values) */
  /* ---- version 2 ---- */
  /* Map-style: the batch sampler as a list of batches (sizes may differ, e.g. length-bucketed):
   * batch k holds batch_counts[k] dataset indices, stored back to back in batch_indices. Both
   * are copied at creation. NULL: BatchSampler(sampler order, batch_size). */
  const int64_t *batch_indices;
  const int64_t *batch_counts;
  int64_t num_batches;
  /* 1: process 0 alone reads the data (any dataset, e.g. a stream that cannot be sharded) and
   * sends every process its slice of each global batch through `broadcast`; all processes must
   * then call acc_dataloader_next together. Runs without the loader thread. */
  int dispatch_batches;
  acc_dataloader_broadcast_fn broadcast;
  void *broadcast_payload;
  /* ---- version 3 ---- */
  /* 1 (default): a loader prepared by an accelerator that trains on a device (a GPU, or the fake
   * device of the tests) also delivers every batch in device memory (acc_batch.device_fields),
   * copied one batch ahead on a copy stream and handed to the accelerator's compute stream.
   * 0: host batches only. Ignored by loaders not prepared by such an accelerator. */
  int device_placement;
  /* ---- version 4 (@since 0.3) ---- */
  /* 1: the loader takes the dataset over from this call on: acc_dataloader_destroy destroys it,
   * and a create/prepare that fails destroys it before returning, so the program never frees it
   * (acc_dataset_create_tokens + prepare_dataloader without a leak on any path). 0 (default): the
   * program destroys the dataset after every loader over it. */
  int take_dataset;
} acc_dataloader_options;

#define ACC_DATALOADER_OPTIONS_INIT                                                           \
  { sizeof(acc_dataloader_options), ACC_DATALOADER_OPTIONS_VERSION, 1, 0, 0, 0,                \
    ACC_SHARD_CONFIG_INIT, 2, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 1, 0 }

/** Fills opts with the defaults (for FFI; C code can use ACC_DATALOADER_OPTIONS_INIT). version 1
 * @since 0.1
 *  fills only the fields of version 1 (the struct an older caller was compiled with). */
ACC_EXTERN acc_result acc_dataloader_options_init(acc_dataloader_options *opts, uint32_t version);

/** A batch handed to the program. Borrowed: valid until the next acc_dataloader_next/destroy. */
typedef struct acc_batch {
  int64_t size;               /* samples in this batch (the last may be short) */
  int num_fields;
  void *const *fields;        /* fields[f]: contiguous batch buffer of field f */
  const size_t *field_bytes;  /* bytes used in fields[f] */
  const int64_t *indices;     /* dataset index (map-style) or stream position of each sample */
  int64_t index;              /* batch number in this epoch, counting skipped batches */
  int64_t epoch;
  int end_of_dataloader;      /* 1 on the last batch of the epoch */
  /* Device placement (acc_dataloader_options.device_placement on a loader prepared by an
   * accelerator that trains on a device): device_fields[f] is field f of this batch in the
   * accelerator's device memory (field_bytes[f] bytes), ready for work queued on the
   * accelerator's compute stream (acc_accelerator_stream) from now on: the copy is ordered before
   * it by an event, no host wait needed. The program must not write it nor keep it past the next
   * acc_dataloader_next/destroy. fields[] keeps the same batch in host memory. NULL when the
   * batch is on the host only (CPU training, placement off, a loader not prepared). */
  void *const *device_fields;
} acc_batch;

typedef struct acc_dataloader acc_dataloader;

/**
 * Creates a loader over ds. Preallocates (and touches) every batch buffer; with prefetch > 0 a
 * loader thread fills them ahead and calls the dataset's callbacks.
 * Ownership: acc_dataloader_destroy; ds is borrowed and must outlive the loader.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_dataloader_create(acc_dataloader **out, acc_dataset *ds,
                                            const acc_dataloader_options *opts);
/**
 * Next batch of the current epoch. At the end of the epoch returns ACC_OK with *out == NULL and
 * moves to the next epoch (the following call starts it). Ownership: *out is borrowed.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_dataloader_next(acc_dataloader *dl, const acc_batch **out);
/** Batches this process yields per epoch (BatchSamplerShard len); -1 when unknown. For an epoch
 *  started with skipped batches (skip_first_batches, state_set) it is the number of batches that
 *  epoch still yields, as the loader Accelerate's skip_first_batches returns; the following
 * @since 0.1
 *  epochs report the whole length again. */
ACC_EXTERN int64_t acc_dataloader_len(const acc_dataloader *dl);
/** Samples in one full batch over all processes: batch_size (split) or batch_size x processes. @since 0.1 */
ACC_EXTERN int64_t acc_dataloader_total_batch_size(const acc_dataloader *dl);
/** 1 while the last batch of the epoch is being processed. @since 0.1 */
ACC_EXTERN int acc_dataloader_end_of_dataloader(const acc_dataloader *dl);
/** total_dataset_length % total_batch_size, or -1 with drop_last or an unknown length. @since 0.1 */
ACC_EXTERN int64_t acc_dataloader_remainder(const acc_dataloader *dl);
/** The epoch being (or about to be) iterated. @since 0.1 */
ACC_EXTERN int64_t acc_dataloader_epoch(const acc_dataloader *dl);
/** Sets the epoch of the next iteration (abandons an epoch in progress). @since 0.1 */
ACC_EXTERN acc_result acc_dataloader_set_epoch(acc_dataloader *dl, int64_t epoch);
/**
 * Accelerate's skip_first_batches on this loader: the next epoch to start yields only its batches
 * after the first n (its acc_dataloader_len becomes the remaining count, 0 when n exceeds it);
 * later epochs are whole again. ACC_ERR_INVALID_USAGE when called mid-epoch.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_dataloader_skip_first_batches(acc_dataloader *dl, int64_t n);

/** Where a loader is, for checkpoints: restore it to continue on exactly the next batch. */
typedef struct acc_dataloader_state {
  uint64_t seed;      /* sampler seed */
  int64_t epoch;      /* current epoch */
  int64_t batches;    /* batches of this epoch already handed out (counting skipped ones) */
} acc_dataloader_state;

/** @since 0.1 */
ACC_EXTERN acc_result acc_dataloader_state_get(const acc_dataloader *dl, acc_dataloader_state *out);
/** Restores a position: the next acc_dataloader_next returns batch `batches` of `epoch`. @since 0.1 */
ACC_EXTERN acc_result acc_dataloader_state_set(acc_dataloader *dl, const acc_dataloader_state *st);

/**
 * gather_for_metrics bookkeeping: given that gathering the current batch over all
 * processes produced `gathered` samples, how many to keep (the padding duplicates sit at the
 * end). On the last batch with remainder > 0 that is min(remainder, gathered); else gathered.
 * @since 0.1
 */
ACC_EXTERN int64_t acc_dataloader_gather_keep(const acc_dataloader *dl, int64_t gathered);

/* ---- join_uneven_inputs' even_batches override --------------------------------------------- */

/**
 * Accelerate's join_uneven_inputs(..., even_batches=...) for loaders: until the matching
 * acc_join_uneven_inputs_end, each of the n loaders yields its epochs with `even_batches` (0 or
 * 1; ACC_UNSET: no override, Accelerate's None) instead of its own setting, typically 0 so that
 * processes get their real, uneven numbers of batches and the loop uses
 * acc_accelerator_next_batch_joined. The override applies to epochs that begin during the join:
 * a loader in the middle of an epoch is refused (ACC_ERR_INVALID_USAGE naming it; call it
 * between epochs). Dispatching and iterable loaders are left as they are, with Accelerate's
 * warning. A loader already inside a join is refused. Nothing changes unless every loader is
 * accepted. Not collective, but make the same call on every process.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_join_uneven_inputs_begin(acc_dataloader *const *loaders, size_t n,
                                                   int even_batches);
/**
 * Ends the join: every loader gets back the even_batches it had before
 * acc_join_uneven_inputs_begin (an epoch in progress finishes with the setting it began with).
 * A loader that is not inside a join is refused and nothing changes.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_join_uneven_inputs_end(acc_dataloader *const *loaders, size_t n);
/** The loader's even_batches for the next epoch (1 or 0, with a join's override); -1 for an
 *  invalid handle. @since 0.2 */
ACC_EXTERN int acc_dataloader_even_batches(const acc_dataloader *dl);

/* ---- batch utilities (Accelerate's pad_input_tensors, concatenate) -------------------------- */

/**
 * Accelerate's pad_input_tensors formula: the number of samples a batch of batch_size samples has
 * after padding for num_processes processes, exactly as Accelerate computes it (its quirks
 * included: the result is not always a multiple of num_processes, and a batch that divides
 * evenly may still be padded; docs/data.md lists examples). -1 when batch_size < 0,
 * num_processes < 1 or the result overflows. Not collective.
 * @since 0.2
 */
ACC_EXTERN int64_t acc_pad_input_size(int64_t batch_size, int num_processes);
/**
 * pad_input_tensors for a batch: a new batch of acc_pad_input_size(in->size, num_processes)
 * samples, in's samples first, then zero samples (Accelerate pads with zeros); the indices of
 * the padding samples are -1. Every field must hold the same number of bytes per sample
 * (field_bytes[f] a multiple of size): a stacked batch, not a custom collate's variable-size
 * one. index, epoch and end_of_dataloader are in's; device_fields is NULL.
 * Ownership: *out is the caller's, free it with acc_free (one allocation). Not collective.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_batch_pad_input(const acc_batch *in, int num_processes, acc_batch **out);
/**
 * Accelerate's concatenate for batches: one batch holding the samples of batches[0..n-1] in
 * order (each field concatenated along the sample dimension, indices likewise; a batch without
 * indices contributes -1s). The batches must have the same fields with the same bytes per
 * sample (an error names the batch and field that differ); empty batches are allowed. index and
 * epoch are the first batch's, end_of_dataloader the last's. With n == 1 a copy.
 * Ownership: *out is the caller's, free it with acc_free. Not collective.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_batch_concatenate(const acc_batch *const *batches, size_t n,
                                            acc_batch **out);

/** Stops the loader thread (even mid-epoch) and frees every buffer. NULL is a no-op. @since 0.1 */
ACC_EXTERN void acc_dataloader_destroy(acc_dataloader *dl);

#ifdef __cplusplus
}
#endif
#endif
