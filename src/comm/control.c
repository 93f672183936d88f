/* Process control: barriers, main-process-first, on_* helpers, print, split, triggers. */
#include <stdarg.h>
#include <stdio.h>

#include "core/log.h"
#include "state/state.h"

acc_result acc_wait_for_everyone(acc_state *st) { return acc_barrier(st); }

/* The (local) main process enters at once and waits after its block; the others wait first.
 * Each process therefore makes exactly one barrier call. */
static acc_result first_begin(acc_state *st, int is_first, const char *fn) {
  ACC_CHECK(acc__state_check(st, fn));
  return is_first ? ACC_OK : acc_barrier(st);
}

static acc_result first_end(acc_state *st, int is_first, const char *fn) {
  ACC_CHECK(acc__state_check(st, fn));
  return is_first ? acc_barrier(st) : ACC_OK;
}

acc_result acc_main_process_first_begin(acc_state *st) {
  return first_begin(st, st && st->rank == 0, "main_process_first_begin");
}
acc_result acc_main_process_first_end(acc_state *st) {
  return first_end(st, st && st->rank == 0, "main_process_first_end");
}
acc_result acc_local_main_process_first_begin(acc_state *st) {
  return first_begin(st, st && st->local_rank == 0, "local_main_process_first_begin");
}
acc_result acc_local_main_process_first_end(acc_state *st) {
  return first_end(st, st && st->local_rank == 0, "local_main_process_first_end");
}

static int run_if(const acc_state *st, int chosen, acc_fn fn, void *payload) {
  if (!fn) return 0;
  if (acc__handle_ok(st, ACC__HANDLE_STATE) && acc_state_use_distributed(st) && !chosen) return 0;
  fn(payload);
  return 1;
}

int acc_on_main_process(const acc_state *st, acc_fn fn, void *payload) {
  return run_if(st, acc_state_is_main_process(st), fn, payload);
}
int acc_on_local_main_process(const acc_state *st, acc_fn fn, void *payload) {
  return run_if(st, acc_state_is_local_main_process(st), fn, payload);
}
int acc_on_last_process(const acc_state *st, acc_fn fn, void *payload) {
  return run_if(st, acc_state_is_last_process(st), fn, payload);
}
int acc_on_process(const acc_state *st, int process_index, acc_fn fn, void *payload) {
  return run_if(st, acc_state_process_index(st) == process_index, fn, payload);
}
int acc_on_local_process(const acc_state *st, int local_process_index, acc_fn fn, void *payload) {
  return run_if(st, acc_state_local_process_index(st) == local_process_index, fn, payload);
}

int acc_print(const acc_state *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = acc__vprint_if(acc_state_is_main_process(st), fmt, ap);
  va_end(ap);
  return n;
}

int acc_print_local(const acc_state *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = acc__vprint_if(acc_state_is_local_main_process(st), fmt, ap);
  va_end(ap);
  return n;
}

acc_result acc_split_between_processes(const acc_state *st, size_t n, int apply_padding, acc_split *out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "split_between_processes: out is NULL");
  size_t p = (size_t)acc_state_num_processes(st), i = (size_t)acc_state_process_index(st);
  out->total = n;
  if (p <= 1) {
    out->start = 0;
    out->count = n;
    out->padded_count = n;
    return ACC_OK;
  }
  size_t q = n / p, r = n % p;
  out->start = i * q + (i < r ? i : r);
  out->count = q + (i < r ? 1 : 0);
  out->padded_count = out->count;
  if (apply_padding && n > 0) out->padded_count = q + (r > 0 ? 1 : 0);
  return ACC_OK;
}

size_t acc_split_item(const acc_split *split, size_t i) {
  if (i < split->count) return split->start + i;
  return split->total ? split->total - 1 : 0;
}

acc_result acc_set_trigger(acc_state *st) {
  ACC_CHECK(acc__state_check(st, "set_trigger"));
  st->trigger = 1;
  return ACC_OK;
}

acc_result acc_check_trigger(acc_state *st, int *out) {
  ACC_CHECK(acc__state_check(st, "check_trigger"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "check_trigger: out is NULL");
  int32_t v = st->trigger;
  ACC_CHECK(acc_all_reduce(st, &v, &v, 1, ACC_I32, ACC_SUM));
  *out = v >= 1;
  if (*out) st->trigger = 0;
  return ACC_OK;
}
