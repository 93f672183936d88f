/* accelerate-c: which process does what (Accelerate's "Execution process" guide).
 * Threads: call these from the thread that drives the processes (they are collective or read
 * the process state). */
#ifndef ACCELERATE_CONTROL_H
#define ACCELERATE_CONTROL_H

#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Barrier. Collective: every process must call it. No-op with one process. @since 0.1 */
ACC_EXTERN acc_result acc_wait_for_everyone(acc_state *st);

/**
 * main_process_first as a begin/end pair: the main process runs the block first, the others
 * enter only after it called _end. Collective (one barrier per process). Prefer the block macro
 * ACC_MAIN_PROCESS_FIRST, which cannot forget the _end.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_main_process_first_begin(acc_state *st);
/** @since 0.1 */
ACC_EXTERN acc_result acc_main_process_first_end(acc_state *st);
/** Same with the local main process of each machine first (still a global barrier). @since 0.1 */
ACC_EXTERN acc_result acc_local_main_process_first_begin(acc_state *st);
/** @since 0.1 */
ACC_EXTERN acc_result acc_local_main_process_first_end(acc_state *st);

/*
 * ACC_MAIN_PROCESS_FIRST(st, rc) { ...body... }
 * Runs the body once per process, main process first; rc (an acc_result lvalue) receives the
 * first failure of the begin/end barriers. Do not `break`/`return`/`goto` out of the body: that
 * would skip the closing barrier (use a flag instead).
 */
#define ACC_MAIN_PROCESS_FIRST(st, rc)                                                         \
  for (int acc__mpf_once = ((rc) = acc_main_process_first_begin(st), (rc) == ACC_OK);        \
       acc__mpf_once; acc__mpf_once = 0, (rc) = acc_main_process_first_end(st))
#define ACC_LOCAL_MAIN_PROCESS_FIRST(st, rc)                                                   \
  for (int acc__lmpf_once = ((rc) = acc_local_main_process_first_begin(st), (rc) == ACC_OK); \
       acc__lmpf_once; acc__lmpf_once = 0, (rc) = acc_local_main_process_first_end(st))

/** A deferred function for the on_* helpers. */
typedef void (*acc_fn)(void *payload);

/*
 * Run fn(payload) on the chosen process only (or always when not distributed).
 * Return 1 if fn ran here, 0 if not. Not collective. st may be NULL: then fn runs (one process).
 */
/** @since 0.1 */
ACC_EXTERN int acc_on_main_process(const acc_state *st, acc_fn fn, void *payload);
/** @since 0.1 */
ACC_EXTERN int acc_on_local_main_process(const acc_state *st, acc_fn fn, void *payload);
/** @since 0.1 */
ACC_EXTERN int acc_on_last_process(const acc_state *st, acc_fn fn, void *payload);
/** @since 0.1 */
ACC_EXTERN int acc_on_process(const acc_state *st, int process_index, acc_fn fn, void *payload);
/** @since 0.1 */
ACC_EXTERN int acc_on_local_process(const acc_state *st, int local_process_index, acc_fn fn, void *payload);

/** printf on the main process only, once overall (flushes stdout). Returns printf's count, 0
 * @since 0.1
 *  elsewhere. Accelerate's print is once per machine: see acc_print_local. */
ACC_EXTERN int acc_print(const acc_state *st, const char *fmt, ...) ACC_PRINTF(2, 3);
/**
 * printf on the local main process of every machine (local process index 0), i.e. once per
 * machine: what Accelerate's accelerator.print does. Flushes stdout. Returns printf's count, 0
 * on the other processes.
 * @since 0.1
 */
ACC_EXTERN int acc_print_local(const acc_state *st, const char *fmt, ...) ACC_PRINTF(2, 3);

/**
 * This process's share of n items (Accelerate's split_between_processes): a contiguous
 * range [start, start+count); the first n % num_processes processes get one extra item.
 * With apply_padding (and more than one process) the share is padded to ceil(n/num_processes)
 * items with copies of the LAST item of the whole input (index n-1): padded_count says how many.
 */
typedef struct acc_split {
  size_t start;        /* first item of this process */
  size_t count;        /* real items of this process */
  size_t padded_count; /* count plus padding items (== count without apply_padding) */
  size_t total;        /* n */
} acc_split;

/** Not collective. @since 0.1 */
ACC_EXTERN acc_result acc_split_between_processes(const acc_state *st, size_t n, int apply_padding,
                                                  acc_split *out);
/** Input index of the i-th item of a split (i < padded_count): start+i, or n-1 for padding. @since 0.1 */
ACC_EXTERN size_t acc_split_item(const acc_split *split, size_t i);

/** Sets this process's trigger flag (no communication). @since 0.1 */
ACC_EXTERN acc_result acc_set_trigger(acc_state *st);
/**
 * Collective: *out = 1 if any process set its trigger since the last check (then every process's
 * flag is reset), else 0.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_check_trigger(acc_state *st, int *out);

#ifdef __cplusplus
}
#endif
#endif
