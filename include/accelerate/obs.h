/* accelerate-c: observability — logging, experiment trackers, plots, the step profiler and the
 * progress bar (Accelerate's get_logger, log_with / init_trackers / log / end_training,
 * GeneralTracker, profile()). See docs/observability.md. */
#ifndef ACCELERATE_OBS_H
#define ACCELERATE_OBS_H

#include <stdint.h>
#include <stdio.h>

#include "state.h"
#include "checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- logging ------------------------------------------------------------------------------ */

/** Levels, numbered as Python's logging module numbers them. */
typedef enum acc_log_level {
  ACC_LOG_DEBUG = 10,
  ACC_LOG_INFO = 20,
  ACC_LOG_WARNING = 30,
  ACC_LOG_ERROR = 40,
  ACC_LOG_CRITICAL = 50
} acc_log_level;

/** The level used when neither the program nor ACCELERATE_LOG_LEVEL sets one. */
#define ACC_LOG_DEFAULT_LEVEL ACC_LOG_INFO

/** A named logger. Loggers live until the process exits; acc_get_logger never frees one. */
typedef struct acc_logger acc_logger;

/**
 * The logger called name (created on first use; same pointer on later calls). level: an
 * acc_log_level, or ACC_UNSET for ACCELERATE_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR, CRITICAL,
 * any case, or a number), else ACC_LOG_DEFAULT_LEVEL. A level given here overrides the
 * environment. Thread-safe.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_get_logger(const char *name, int level, acc_logger **out);
/** @since 0.1 */
ACC_EXTERN acc_result acc_logger_set_level(acc_logger *lg, int level);
/** @since 0.1 */
ACC_EXTERN int acc_logger_level(const acc_logger *lg);
/** 1 when a message of this level would be written by some process. @since 0.1 */
ACC_EXTERN int acc_logger_enabled(const acc_logger *lg, int level);
/** Parses "debug".."critical" (any case) or a number. @since 0.1 */
ACC_EXTERN acc_result acc_log_level_parse(const char *s, int *out);
/** @since 0.1 */
ACC_EXTERN const char *acc_log_level_name(int level);

/** Flags of acc_log_ex. */
#define ACC_LOG_MAIN_ONLY 0     /* default: only the main process writes (Accelerate's default) */
#define ACC_LOG_ALL_PROCESSES 1 /* main_process_only = False: every process writes */
#define ACC_LOG_IN_ORDER 2      /* every process writes, in rank order. COLLECTIVE. */

/**
 * Writes one line "[RANK r] HH:MM:SS.mmm LEVEL name: message" when level is enabled, on the
 * main process only. To stderr, or to ACCELERATE_LOG_FILE when set (%h: host, %p: pid, %r:
 * rank, %%: '%'; the file is appended to). Never interleaves with acc_progress bars. Lines are
 * written whole (one write per line).
 * @since 0.1
 */
ACC_EXTERN void acc_log(acc_logger *lg, int level, const char *fmt, ...) ACC_PRINTF(3, 4);

/**
 * acc_log with flags. ACC_LOG_IN_ORDER is COLLECTIVE: every process of the group must make the
 * call (with the same flags), or the others wait until the collective timeout. In debug mode
 * (ACCELERATE_DEBUG_MODE) the processes first exchange a marker, so a process that makes a
 * different collective instead is reported as an ACC_ERR_MISMATCH error naming it.
 * Returns the first error of the barriers (ACC_OK otherwise, also when the level is disabled).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_log_ex(acc_logger *lg, int level, int flags, const char *fmt, ...)
    ACC_PRINTF(4, 5);

/* ---- experiment trackers ------------------------------------------------------------------ */

typedef enum acc_value_type {
  ACC_VALUE_NUMBER = 0,
  ACC_VALUE_INT = 1,
  ACC_VALUE_STRING = 2,
  ACC_VALUE_BOOL = 3
} acc_value_type;

/** One key/value: a hyperparameter (init_trackers) or a logged value (acc_tracker_log). */
typedef struct acc_kv {
  const char *key;
  acc_value_type type;
  double number;   /* ACC_VALUE_NUMBER */
  int64_t integer; /* ACC_VALUE_INT, ACC_VALUE_BOOL (0/1) */
  const char *string;
} acc_kv;

#define ACC_KV_NUM(k, v) ((acc_kv){(k), ACC_VALUE_NUMBER, (double)(v), 0, NULL})
#define ACC_KV_INT(k, v) ((acc_kv){(k), ACC_VALUE_INT, 0.0, (int64_t)(v), NULL})
#define ACC_KV_STR(k, v) ((acc_kv){(k), ACC_VALUE_STRING, 0.0, 0, (v)})
#define ACC_KV_BOOL(k, v) ((acc_kv){(k), ACC_VALUE_BOOL, 0.0, (v) ? 1 : 0, NULL})

#define ACC_TRACKER_CALLBACKS_VERSION 1
/**
 * A custom tracker (Accelerate's GeneralTracker): four callbacks, each may be NULL. Called on the
 * main process only. run_dir is <logging_dir>/<project_name>. A callback's error is returned by
 * the call that ran it, with the tracker's name in the message.
 */
typedef struct acc_tracker_callbacks {
  size_t size;      /* sizeof(acc_tracker_callbacks) */
  uint32_t version; /* ACC_TRACKER_CALLBACKS_VERSION */
  const char *name; /* for messages */
  acc_result (*start)(void *user, const char *project_name, const char *run_dir);
  acc_result (*store_init_configuration)(void *user, const acc_kv *config, size_t n);
  acc_result (*log)(void *user, const acc_kv *values, size_t n, int64_t step);
  acc_result (*finish)(void *user);
} acc_tracker_callbacks;
#define ACC_TRACKER_CALLBACKS_INIT \
  { sizeof(acc_tracker_callbacks), ACC_TRACKER_CALLBACKS_VERSION, NULL, NULL, NULL, NULL, NULL }

/** The trackers of a run (Accelerate's accelerator.trackers). Opaque. */
typedef struct acc_trackers acc_trackers;

/**
 * Creates the run's trackers. log_with: comma-separated built-in names, "tensorboard", "jsonl",
 * "csv", or "all" (all three), or NULL/"" for none (custom ones can still be added). project:
 * its logging_dir (default: its project_dir) is where runs go; NULL: the current directory.
 * st: the process state; on non-main processes every tracker call does nothing and returns
 * ACC_OK. An unknown name is an ACC_ERR_INVALID_ARGUMENT error naming it.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_trackers_create(acc_trackers **out, acc_state *st, const char *log_with,
                                          const acc_project_config *project);
/** Adds a custom tracker (before acc_init_trackers). The callbacks are copied; user is kept. @since 0.1 */
ACC_EXTERN acc_result acc_trackers_add(acc_trackers *tr, const acc_tracker_callbacks *cb,
                                       void *user);
/**
 * Starts every tracker under <logging_dir>/<project_name> (created) and stores the run's
 * hyperparameters (config, n; n may be 0). Built-ins: run.jsonl + config.json, metrics.csv +
 * hparams.csv, events.out.tfevents.<time>.<host>.<pid>.<n> with the hparams plugin's summaries.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_init_trackers(acc_trackers *tr, const char *project_name,
                                        const acc_kv *config, size_t n);
/** Logs values at step (step < 0: one more than the last step logged). Numbers only for TensorBoard
 * @since 0.1
 * and CSV (strings are skipped there); JSONL keeps everything. */
ACC_EXTERN acc_result acc_tracker_log(acc_trackers *tr, const acc_kv *values, size_t n,
                                      int64_t step);
/** Finishes every tracker (files flushed and closed). Further logs are errors. @since 0.1 */
ACC_EXTERN acc_result acc_end_training(acc_trackers *tr);
/** The run directory (<logging_dir>/<project_name>); NULL before init, off the main process, or
 * @since 0.1
 * when there is no tracker (then nothing is created). */
ACC_EXTERN const char *acc_trackers_run_dir(const acc_trackers *tr);
/** Finishes (if needed) and frees. Accepts NULL. @since 0.1 */
ACC_EXTERN void acc_trackers_destroy(acc_trackers *tr);

/* ---- plots -------------------------------------------------------------------------------- */

/**
 * Draws the scalars of the runs in run_dirs (each holding run.jsonl, as the jsonl tracker
 * writes it) as an SVG at svg_path: one panel per metric (loss, accuracy, lr, throughput first,
 * then the others), value against step, runs overlaid with a legend. With png_path (may be NULL)
 * it also runs rsvg-convert when it is on PATH; *png_written (may be NULL) says whether it did.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_plot_runs(const char *const *run_dirs, size_t n, const char *svg_path,
                                    const char *png_path, int *png_written);

/* ---- the step profiler -------------------------------------------------------------------- */

/**
 * Starts recording the library's spans (waiting for a batch, gradient sync per bucket, optimizer
 * step, checkpoint writes, each collective) into dir. ACCELERATE_PROFILE=DIR does the same at
 * program start and writes the files at exit. Not collective.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_profile_start(const char *dir);
/**
 * Stops and writes <dir>/trace.rank<R>.json (Chrome trace events, for Perfetto or
 * chrome://tracing) and <dir>/summary.rank<R>.txt (share of time in data / compute /
 * communication / optimizer / checkpoint), and logs the summary at INFO. ACC_OK when not started.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_profile_stop(void);
/** 1 while recording. @since 0.1 */
ACC_EXTERN int acc_profile_active(void);

/* ---- progress bar ------------------------------------------------------------------------- */

typedef struct acc_progress acc_progress;

#define ACC_PROGRESS_OPTIONS_VERSION 1
typedef struct acc_progress_options {
  size_t size;
  uint32_t version;
  FILE *out;         /* NULL: stdout */
  int tty;           /* 1/0: force the mode; ACC_UNSET: isatty(out) */
  int every_percent; /* not a terminal: a line every N% (default 10) */
  int main_only;     /* 1 (default): bars exist on the main process only; 0: on every process */
} acc_progress_options;
#define ACC_PROGRESS_OPTIONS_INIT \
  { sizeof(acc_progress_options), ACC_PROGRESS_OPTIONS_VERSION, NULL, ACC_UNSET, 10, 1 }

/**
 * A progress bar of total steps, "label [#####.....] done/total P% R samples/s ETA m:ss".
 * On a terminal it is redrawn in place (at most 10 times a second); otherwise a line is printed
 * every every_percent of the work. Log lines written while a bar is on screen appear above it.
 * st: with main_only, other processes get a bar that prints nothing (st NULL: always prints).
 * @since 0.1
 */
ACC_EXTERN acc_result acc_progress_create(acc_progress **out, acc_state *st, const char *label,
                                          uint64_t total, const acc_progress_options *opts);
/** done steps and samples complete (samples: for the rate; 0 to show steps/s). @since 0.1 */
ACC_EXTERN void acc_progress_update(acc_progress *p, uint64_t done, uint64_t samples);
/** Same with an explicit clock (seconds since creation), for tests. @since 0.1 */
ACC_EXTERN void acc_progress_update_at(acc_progress *p, uint64_t done, uint64_t samples,
                                       double elapsed_s);
/** Draws the final state and ends the line (also done by destroy). @since 0.1 */
ACC_EXTERN void acc_progress_finish(acc_progress *p);
/** @since 0.1 */
ACC_EXTERN void acc_progress_finish_at(acc_progress *p, double elapsed_s);
/** The line for elapsed_s into buf (no '\r' or newline). Returns the snprintf count. @since 0.1 */
ACC_EXTERN int acc_progress_format(const acc_progress *p, double elapsed_s, char *buf, size_t len);
/** @since 0.1 */
ACC_EXTERN void acc_progress_destroy(acc_progress *p);

#ifdef __cplusplus
}
#endif
#endif
