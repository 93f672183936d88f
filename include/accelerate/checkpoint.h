/* accelerate-c: checkpoint files. safetensors files (write / read named tensors), the model
 * weights (Accelerate's save_model / load_checkpoint_in_model) and crash-safe checkpoint
 * directories with automatic naming and rotation (Accelerate's ProjectConfiguration).
 * See docs/checkpointing.md.
 * Threads: a file, checkpoint or project handle is used from one thread at a time; distinct
 * handles may be used from different threads. */
#ifndef ACCELERATE_CHECKPOINT_H
#define ACCELERATE_CHECKPOINT_H

#include "common.h"
#include "model.h"
#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tensors and safetensors files ------------------------------------------------------ */

/**
 * A named tensor in a safetensors file. For writing, the caller fills name, dtype, ndim, shape
 * and data (numel * acc_dtype_size(dtype) bytes, contiguous, little-endian); nbytes is ignored.
 * The reader fills every field; its pointers are borrowed from the open file and may be
 * unaligned (copy with memcpy).
 */
typedef struct acc_tensor_view {
  const char *name;
  acc_dtype dtype;
  int ndim; /* 0 (a scalar) .. ACC_MAX_DIMS */
  int64_t shape[ACC_MAX_DIMS];
  const void *data;
  size_t nbytes; /* set by the reader */
} acc_tensor_view;

/**
 * Writes tensors (in this order) to a safetensors file: an 8-byte little-endian header length,
 * a JSON header padded with spaces to a multiple of 8 bytes, then the data. The header's
 * "__metadata__" holds {"format": "pt"} plus the meta_count key/value string pairs (a key
 * "format" given here replaces "pt"). The file is written atomically: a temporary file in the
 * same directory, fsync, rename over path, fsync of the directory; on failure path is untouched.
 * Names must be unique, non-empty and not "__metadata__".
 * @param meta_keys, meta_values  arrays of meta_count strings (may be NULL when meta_count is 0)
 * Ownership: nothing is kept. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_safetensors_write(const char *path, const acc_tensor_view *tensors, size_t count,
                                            const char *const *meta_keys, const char *const *meta_values,
                                            size_t meta_count);

/** An open, fully validated safetensors file. Opaque. */
typedef struct acc_safetensors acc_safetensors;

/**
 * Opens (maps) a safetensors file and validates all of it: header length, JSON, dtypes, shapes,
 * offsets (inside the data section, matching numel * dtype size, not overlapping), duplicate
 * names. Any problem is an ACC_ERR_FORMAT error naming the file and the tensor.
 * Ownership: release with acc_safetensors_close. Collective: no.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_safetensors_open(acc_safetensors **out, const char *path);

/**
 * Like acc_safetensors_open on size bytes in memory. label names the buffer in error messages
 * (NULL: "<memory>"). Ownership: data is borrowed and must outlive the handle.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_safetensors_open_memory(acc_safetensors **out, const void *data, size_t size,
                                                  const char *label);

/** Unmaps and frees. Accepts NULL. @since 0.1 */
ACC_EXTERN void acc_safetensors_close(acc_safetensors *f);

/** Number of tensors. Tensors are numbered in the order of their data in the file. @since 0.1 */
ACC_EXTERN size_t acc_safetensors_count(const acc_safetensors *f);

/** Tensor i (< count). Ownership: out's pointers are borrowed from f. @since 0.1 */
ACC_EXTERN acc_result acc_safetensors_tensor(const acc_safetensors *f, size_t i, acc_tensor_view *out);

/** The tensor with this name; ACC_ERR_INVALID_ARGUMENT naming it and the file when absent. @since 0.1 */
ACC_EXTERN acc_result acc_safetensors_find(const acc_safetensors *f, const char *name, acc_tensor_view *out);

/** The "__metadata__" value of key, or NULL when absent. Borrowed from f. @since 0.1 */
ACC_EXTERN const char *acc_safetensors_metadata(const acc_safetensors *f, const char *key);

/** Number of "__metadata__" entries, and entry i (< that number). Borrowed from f. @since 0.1 */
ACC_EXTERN size_t acc_safetensors_metadata_count(const acc_safetensors *f);
/** @since 0.1 */
ACC_EXTERN acc_result acc_safetensors_metadata_at(const acc_safetensors *f, size_t i, const char **key,
                                                  const char **value);

/** The file name (or memory label) the handle was opened with. Borrowed. @since 0.1 */
ACC_EXTERN const char *acc_safetensors_path(const acc_safetensors *f);

/** "F32", "F64", "F16", "BF16", "I32", "I64", "U8"; NULL for an unknown dtype. @since 0.1 */
ACC_EXTERN const char *acc_safetensors_dtype_name(acc_dtype dtype);

/* ---- model weights ------------------------------------------------------------------------ */

/** Accelerate's default max_shard_size, "10GB" = 10 * 10^9 bytes. */
#define ACC_DEFAULT_MAX_SHARD_SIZE 10000000000ull

/**
 * Saves the model's parameters (registration order) into directory dir (created if needed):
 * one file model.safetensors when everything fits in max_shard_size bytes, otherwise shards
 * model-00001-of-0000N.safetensors plus model.safetensors.index.json (a tensor
 * larger than the limit gets its own shard). Stale shard files of an earlier save are removed.
 * @param st     NULL: this process writes. Otherwise only the main process writes and every
 *               process waits in a barrier at the end (then the call is collective).
 * @param max_shard_size  bytes; 0 means ACC_DEFAULT_MAX_SHARD_SIZE
 * @param dtype  ACC_F32, or ACC_F16 / ACC_BF16 to convert (round to nearest even)
 * Collective: yes when st is given.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_save_model(acc_state *st, const acc_model *model, const char *dir,
                                     uint64_t max_shard_size, acc_dtype dtype);

#define ACC_LOAD_OPTIONS_VERSION 1
typedef struct acc_load_options {
  size_t size;      /* sizeof(acc_load_options), set by ACC_LOAD_OPTIONS_INIT */
  uint32_t version; /* ACC_LOAD_OPTIONS_VERSION */
  int strict;       /* 1 (default): any missing / unexpected / mismatched tensor is an error and
                       nothing is loaded. 0: load what matches and report the rest. */
} acc_load_options;
#define ACC_LOAD_OPTIONS_INIT { sizeof(acc_load_options), ACC_LOAD_OPTIONS_VERSION, 1 }
/** Fills opts with the defaults of `version` (ACC_LOAD_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_load_options_init(acc_load_options *opts, uint32_t version);

/** What acc_load_checkpoint_in_model did not load (names in model / file order). */
typedef struct acc_load_report {
  char **missing;    /* parameters of the model absent from the checkpoint */
  size_t n_missing;
  char **unexpected; /* tensors of the checkpoint the model does not have */
  size_t n_unexpected;
  char **mismatched; /* present in both but with another shape or a non-float dtype */
  size_t n_mismatched;
  size_t n_loaded;   /* parameters actually loaded */
} acc_load_report;

/** Frees the lists of a report and zeroes it. Accepts NULL. @since 0.1 */
ACC_EXTERN void acc_load_report_clear(acc_load_report *report);

/**
 * Loads parameters from path: a .safetensors file, a .index.json, or a directory holding
 * model.safetensors or exactly one *.index.json. F16 / BF16 / F64 tensors are converted to the
 * f32 parameters. Strict errors (ACC_ERR_MISMATCH) name every offending tensor and both shapes.
 * @param opts   NULL: defaults (strict)
 * @param report NULL, or receives the lists. Ownership: free with acc_load_report_clear.
 * Collective: no (every process reads the files itself).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_load_checkpoint_in_model(acc_model *model, const char *path,
                                                   const acc_load_options *opts, acc_load_report *report);

/* ---- checkpoint directories and project configuration ------------------------------------ */

/** Name of the marker file that makes a checkpoint directory complete. */
#define ACC_CHECKPOINT_MARKER "COMPLETE"

/* 2: logging_dir appended. */
#define ACC_PROJECT_OPTIONS_VERSION 2
typedef struct acc_project_options {
  size_t size;                     /* set by ACC_PROJECT_OPTIONS_INIT */
  uint32_t version;                /* ACC_PROJECT_OPTIONS_VERSION */
  const char *project_dir;         /* NULL: "." */
  int automatic_checkpoint_naming; /* 1: checkpoints go to <project_dir>/checkpoints/checkpoint_<i> */
  int total_limit;                 /* > 0: keep at most this many checkpoints; ACC_UNSET or 0: no limit */
  int64_t iteration;               /* number of the next automatic checkpoint */
  const char *logging_dir;         /* where trackers write (acc_trackers_create); NULL: project_dir */
} acc_project_options;
#define ACC_PROJECT_OPTIONS_INIT { sizeof(acc_project_options), ACC_PROJECT_OPTIONS_VERSION, NULL, 0, -1, 0, NULL }
/** Fills opts with the defaults of `version` (ACC_PROJECT_OPTIONS_VERSION; for FFI). @since 0.1 */
ACC_EXTERN acc_result acc_project_options_init(acc_project_options *opts, uint32_t version);

typedef struct acc_project_config acc_project_config;
/** One checkpoint being written (a transaction). Opaque. */
typedef struct acc_checkpoint acc_checkpoint;

/** Ownership: release with acc_project_config_destroy. The options are copied. @since 0.1 */
ACC_EXTERN acc_result acc_project_config_create(acc_project_config **out, const acc_project_options *opts);
/** @since 0.1 */
ACC_EXTERN void acc_project_config_destroy(acc_project_config *p);
/** Number of the next automatic checkpoint (Accelerate's project_configuration.iteration). @since 0.1 */
ACC_EXTERN int64_t acc_project_config_iteration(const acc_project_config *p);
/** @since 0.1 */
ACC_EXTERN acc_result acc_project_config_set_iteration(acc_project_config *p, int64_t iteration);
/** The project directory. Borrowed. @since 0.1 */
ACC_EXTERN const char *acc_project_config_dir(const acc_project_config *p);
/** The logging directory (logging_dir, else the project directory). Borrowed. @since 0.1 */
ACC_EXTERN const char *acc_project_config_logging_dir(const acc_project_config *p);

/**
 * Starts a checkpoint. With automatic naming the target is checkpoints/checkpoint_<iteration>
 * (output_dir must be NULL) and, with total_limit, the oldest complete checkpoints (by the number
 * in their name) are deleted first to make room. Otherwise the target is output_dir. A complete
 * checkpoint already at the target is an ACC_ERR_INVALID_USAGE error; a leftover incomplete one
 * is removed. Files go into acc_checkpoint_dir(c), a temporary "<target>.tmp-writing" directory,
 * until acc_checkpoint_commit.
 * Ownership: commit or abort c exactly once. Collective: no (single process for now).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_checkpoint_begin(acc_project_config *p, const char *output_dir, acc_checkpoint **out);
/** Directory to write the checkpoint's files into. Borrowed. @since 0.1 */
ACC_EXTERN const char *acc_checkpoint_dir(const acc_checkpoint *c);
/** Final directory the checkpoint will have. Borrowed. @since 0.1 */
ACC_EXTERN const char *acc_checkpoint_target(const acc_checkpoint *c);
/**
 * Makes the checkpoint durable: fsyncs its files and directory, renames it to the target,
 * fsyncs the parent and writes the COMPLETE marker (fsync'd); then the iteration advances by one
 * (as Accelerate's save_state does, with or without automatic naming). Frees c in every case; on failure the partial directory stays
 * behind, ignored by acc_project_latest_checkpoint.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_checkpoint_commit(acc_checkpoint *c);
/** Removes the temporary directory and frees c. Accepts NULL. @since 0.1 */
ACC_EXTERN void acc_checkpoint_abort(acc_checkpoint *c);

/** 1 when dir is a directory holding the COMPLETE marker, else 0. @since 0.1 */
ACC_EXTERN int acc_checkpoint_is_complete(const char *dir);

/**
 * The newest complete checkpoints/checkpoint_<i> (largest i). ACC_ERR_INVALID_USAGE when there
 * is none. Ownership: *out is freed with acc_free.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_project_latest_checkpoint(const acc_project_config *p, char **out);

/**
 * The directory to load: input_dir when given (it must be a complete checkpoint: a directory
 * still being written or without the COMPLETE marker is an ACC_ERR_INVALID_USAGE error saying
 * so), else the latest complete checkpoint (automatic naming only). Ownership: acc_free(*out).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_project_resolve_load(const acc_project_config *p, const char *input_dir, char **out);

/**
 * Records that the checkpoint at dir was loaded: when its name is checkpoint_<k> the next
 * automatic checkpoint is k + 1 (Accelerate leaves the iteration unchanged, so the next save
 * fails with "already exists"; see docs/checkpointing.md).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_project_checkpoint_loaded(acc_project_config *p, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
