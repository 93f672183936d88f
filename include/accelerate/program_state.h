/* accelerate-c: checkpointing the state a program keeps itself: the buffers of its own optimizer
 * (named arrays saved as safetensors) and objects that differ from process to process.
 * docs/checkpointing.md, "The program's own state"; docs/porting.md. */
#ifndef ACCELERATE_PROGRAM_STATE_H
#define ACCELERATE_PROGRAM_STATE_H

#include "accelerator.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One named array of the program's (e.g. AdamW's first moment). `data` points at the program's
 * pointer, read at every save_state and load_state, so a buffer allocated lazily (or replaced)
 * after registration is found; *data NULL means "not allocated yet". @since 0.2 */
typedef struct acc_named_buffer {
  const char *name;  /* unique within the group; copied */
  acc_dtype dtype;   /* any fixed-size dtype (ACC_F32 moments, ACC_I64 a step counter, ...) */
  void **data;       /* the program's pointer to `count` elements (or NULL: see fixed); borrowed */
  size_t count;      /* elements */
  void *fixed;       /* used when data is NULL: the address of an array that never moves (a step
                        counter inside a struct: {"t", ACC_I64, NULL, 1, &opt.t}) */
} acc_named_buffer;

/**
 * Registers a group of the program's arrays for save_state / load_state: save_state writes them
 * from the main process into `<checkpoint>/<stem>.safetensors` (one tensor per allocated buffer;
 * a NULL buffer is left out); load_state reads that file on every process and copies each tensor
 * into its buffer, allocating a NULL one with malloc-compatible memory the program then owns
 * (release it with free()). A saved tensor whose dtype or size differs, a missing file or tensor
 * of an allocated buffer, or a saved tensor for an unknown name is an error naming file, tensor,
 * expected and found. The buffers must hold the same values on every process (the state of an
 * optimizer that steps the averaged gradients): they are then valid at any process count, and a
 * checkpoint resumes on another number of processes. A buffer may be host memory or memory of
 * the device the accelerator trains on (acc_accelerator_alloc): device buffers are staged
 * in chunks through one host buffer of at most ACCELERATE_CKPT_STAGE_BYTES (64 MiB; rounded down
 * to whole elements) with the device's copies, so a buffer of any size needs no host copy of its
 * size (every dtype, bit for bit). load_state checks every tensor of every group (names, dtypes,
 * sizes, that the bytes can be read) before it writes the first byte of any buffer, so a load
 * that fails leaves host and device buffers as they were. A NULL buffer is allocated in host
 * memory. Under ZeRO the buffers still hold the same values on every process (a step count, an
 * RNG state); a program's moments for its ZeRO range go to acc_accelerator_register_zero_buffers.
 * The stem (a file name without
 * extension: letters, digits, '_', '-', '.') must be unique per accelerator. Not collective;
 * register the same groups on every process. Names and stem are copied.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_register_buffers(acc_accelerator *acc, const char *stem,
                                                       const acc_named_buffer *bufs, size_t count);

/**
 * ZeRO with the program's own optimizer (llm.c's `-z 1`, docs/zero.md): a group of buffers that
 * each hold this process's range of the prepared `model` (NULL: the first), the range of
 * acc_accelerator_zero_shard (so `count` is that range's length, which differs between
 * processes). save_state gathers the ranges to the main process, which writes full tensors of
 * the model's size into `<checkpoint>/<stem>.safetensors`: the file acc_accelerator_register_buffers
 * writes for full-size buffers, so the checkpoint resumes without ZeRO, and under ZeRO on any
 * number of processes. load_state reads each process's range back; a missing tensor or one of
 * another dtype or size is an error naming file, tensor, expected and found, and the buffers are
 * written only once the whole checkpoint loads. Buffers may be host memory or memory of the
 * accelerator's device, and must be allocated when save_state / load_state run. save_state is
 * collective as always. ACC_ERR_INVALID_USAGE at zero_stage 0; a count other than the range's is
 * ACC_ERR_INVALID_ARGUMENT naming the buffer and the range. Not collective.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_register_zero_buffers(acc_accelerator *acc, const char *stem,
                                                            acc_model *model, const acc_named_buffer *bufs,
                                                            size_t count);

/**
 * The per-process variant of acc_accelerator_register_for_checkpointing: every process saves its
 * own object (`process_object_<i>_<process>.bin`, i = registration order among per-process
 * objects) and loads its own file back. A checkpoint saved by another number of processes cannot
 * be mapped (which process would get which object is the program's knowledge) and load_state
 * refuses it naming the object and both counts; objects whose state is the same on every process
 * belong in acc_accelerator_register_for_checkpointing. The size limit is
 * ACC_CHECKPOINT_OBJECT_MAX_BYTES_DEFAULT. Not collective; register the same objects on every
 * process.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_register_for_checkpointing_per_process(acc_accelerator *acc, void *obj,
                                                                             acc_checkpoint_save_fn save,
                                                                             acc_checkpoint_load_fn load);

/* ---- porting an existing trainer in few lines (docs/porting.md) ---------------------------- */

/**
 * acc_model_create + acc_model_add_flat + acc_accelerator_prepare_model in one call: the table of
 * (name, shape) over the program's flat parameter buffer, gradients in `grads` (or NULL: attach
 * them with acc_model_set_flat_grads once allocated, before the first backward). The model
 * belongs to the accelerator (destroyed with it); *out (may be NULL) receives it, borrowed, as does
 * acc_accelerator_model(acc, index in prepare order).
 * Collective (prepare_model broadcasts process 0's parameters).
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_prepare_flat(acc_accelerator *acc, const acc_param_spec *table, size_t count,
                                                   float *params, float *grads, acc_model **out);
/**
 * acc_accelerator_prepare_flat for a bf16/fp16 table (`dtype` ACC_BF16 or ACC_F16): the model of
 * acc_model_add_flat_typed (master NULL: the library keeps a float32 master copy) or of
 * acc_model_add_flat_typed_master (master: the program's float32 master weights, no copy), prepared.
 * Same ownership and placement rules as acc_accelerator_prepare_flat and those calls. Collective.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_prepare_flat_typed(acc_accelerator *acc, const acc_param_spec *table,
                                                         size_t count, acc_dtype dtype, void *params, void *grads,
                                                         float *master, acc_model **out);
/**
 * A prepared loader of token windows over llm.c shards (acc_dataset_create_tokens with format
 * ACC_TOKENS_LLMC and seq_len T): batch_size windows per process, shuffled by the library's
 * sampler (seed 0), full batches only (drop_last), so B x T inputs and targets every step.
 * paths: files, or glob patterns as llm.c's loader takes ("data/fineweb_train_*.bin"), each
 * expanded to its matches sorted in byte order; the files are read as one stream in that order,
 * a window never spanning two files (acc_dataset_create_tokens). Every process must see the same
 * files: prepare compares them (file names and token counts) and fails on every process naming the
 * first process and file that differ. Ownership: acc_dataloader_destroy, which also destroys the
 * dataset. Collective.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_prepare_tokens(acc_accelerator *acc, const char *const *paths, int num_paths,
                                                     int64_t seq_len, int64_t batch_size, acc_dataloader **out);

#define ACC_TOKEN_LOADER_OPTIONS_VERSION 2u
/** How acc_accelerator_prepare_tokens_opts reads token files. Initialize with
 * ACC_TOKEN_LOADER_OPTIONS_INIT, then set what differs: windows in file order are
 * `acc_token_loader_options o = ACC_TOKEN_LOADER_OPTIONS_INIT; o.window = T; o.shuffle = 0;`.
 * @since 0.3 */
typedef struct acc_token_loader_options {
  size_t size;          /* sizeof(acc_token_loader_options), set by the INIT macro */
  uint32_t version;     /* ACC_TOKEN_LOADER_OPTIONS_VERSION */
  int64_t window;       /* T (required, >= 1): a sample is T inputs and the T targets after them */
  int64_t stride;       /* tokens between the starts of consecutive windows; 0 (default): window */
  int shuffle;          /* 1 (default): the library's seeded sampler; 0: windows in file order */
  uint64_t seed;        /* the sampler's seed (process 0's; default 0); epoch e uses seed + e */
  int drop_last;        /* 1 (default): full batches only; 0: the last batch may be short */
  int64_t max_windows;  /* > 0: only the first max_windows windows (a fixed validation set) */
  acc_token_format format; /* ACC_TOKENS_LLMC (default), _U16 or _U32 */
  int64_t vocab_size;   /* > 0: a token >= vocab_size fails the batch naming file and position */
  /* ---- version 2 (@since 0.3) ---- */
  int host_batches;     /* 1: on a device run the batches stay in host memory only (no device
                           buffers, no copies; acc_batch.device_fields NULL), for a trainer that
                           copies its inputs itself (llm.c). 0 (default): a prepared loader also
                           places every batch in device memory (acc_batch.device_fields, docs/data.md
                           "Device placement"). acc_accelerator_next_tokens hands host memory
                           either way. Nothing changes on the CPU. */
} acc_token_loader_options;
#define ACC_TOKEN_LOADER_OPTIONS_INIT \
  { sizeof(acc_token_loader_options), ACC_TOKEN_LOADER_OPTIONS_VERSION, 0, 0, 1, 0, 1, 0, ACC_TOKENS_LLMC, 0, 0 }
/** Fills opts with the defaults of `version` (for FFI). @since 0.3 */
ACC_EXTERN acc_result acc_token_loader_options_init(acc_token_loader_options *opts, uint32_t version);

/**
 * acc_accelerator_prepare_tokens with every choice in opts (window, stride, shuffle, seed,
 * drop_last, max_windows, format, vocab_size, host_batches): batch_size windows per process;
 * paths as there (files or glob patterns, the same files on every process). The loader owns its
 * dataset (acc_dataloader_destroy destroys both). Collective.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_prepare_tokens_opts(acc_accelerator *acc, const char *const *paths,
                                                          int num_paths, int64_t batch_size,
                                                          const acc_token_loader_options *opts,
                                                          acc_dataloader **out);

/**
 * A fixed validation set: the first `windows` windows of seq_len + 1 tokens of the token files,
 * in file order, batch_size per process (the last batch may be short): each process reads its
 * share, and every evaluation (acc_accelerator_evaluate_tokens) reads the same windows again.
 * The loader owns its dataset. Fewer windows in the files than asked is ACC_ERR_INVALID_ARGUMENT
 * naming the first file and both counts. Collective.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_prepare_tokens_eval(acc_accelerator *acc, const char *const *paths,
                                                          int num_paths, int64_t seq_len, int64_t batch_size,
                                                          int64_t windows, acc_dataloader **out);

/** The program's loss of each window of a batch: rows windows of T tokens (inputs, targets, B x T
 * ints as acc_accelerator_next_tokens gives them), one loss per window into losses[0..rows) (the
 * mean over its T positions, as llm.c's mean_loss is over B x T). Not ACC_OK: the pass fails. */
typedef acc_result (*acc_token_eval_fn)(void *ctx, const int *inputs, const int *targets, int64_t rows,
                                        float *losses);

/**
 * One evaluation pass over a token loader (acc_accelerator_prepare_tokens_eval): one epoch of it
 * from its first batch, fn on every batch of this process, the losses of every process gathered
 * with gather_for_metrics semantics (each window exactly once: the duplicates that pad the last
 * round are dropped), and their mean (double sums in window order of each round) in *mean_loss on
 * every process; *count (may be NULL) receives the windows counted. A loader in the middle of an
 * epoch is ACC_ERR_INVALID_USAGE (its position would shift the set). A failing fn fails the call on
 * every process, naming the process. Collective.
 * @since 0.3
 */
ACC_EXTERN acc_result acc_accelerator_evaluate_tokens(acc_accelerator *acc, acc_dataloader *dl,
                                                      acc_token_eval_fn fn, void *ctx, double *mean_loss,
                                                      int64_t *count);

/**
 * The next batch of a token loader as an llm.c-style trainer wants it: *inputs and *targets point
 * at B x T ints in host memory (also on a device run: copy them to the device yourself, or read
 * acc_batch.device_fields of acc_accelerator_next_batch instead), valid until the next call. At
 * the end of an epoch the next epoch starts (the stream never ends). Borrowed pointers.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_accelerator_next_tokens(acc_accelerator *acc, acc_dataloader *dl, int **inputs,
                                                  int **targets);

#ifdef __cplusplus
}
#endif
#endif
