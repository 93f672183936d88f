/* Collective call descriptors, tags and their messages; origins set by internal layers; the
 * all_gather_bytes size validation; the hang-report threshold. See collcheck.h. */
#include "backend/collcheck.h"
#include "core/internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- origins ------------------------------------------------------------------------------ */

_Thread_local int32_t acc__tls_origin __attribute__((tls_model("initial-exec")));
_Thread_local int64_t acc__tls_origin_index __attribute__((tls_model("initial-exec")));

void acc__comm_origin(acc__origin kind, int64_t index) {
  acc__tls_origin = (int32_t)kind;
  acc__tls_origin_index = index;
}

/* ---- the program's call sites (accelerate/call_site.h) ----------------------------------- */

_Thread_local int32_t acc__tls_site_depth __attribute__((tls_model("initial-exec")));
_Thread_local int32_t acc__tls_site_entry __attribute__((tls_model("initial-exec")));
_Thread_local int32_t acc__tls_site_line __attribute__((tls_model("initial-exec")));
_Thread_local const char *acc__tls_site_file __attribute__((tls_model("initial-exec")));

void acc_call_site_begin(int entry, const char *file, int line) {
  if (acc__tls_site_depth++ > 0) return; /* a mark inside another: the outer one stays */
  acc__tls_site_entry = entry > 0 && entry < ACC_ENTRY_COUNT_ ? entry : 0;
  acc__tls_site_file = file;
  acc__tls_site_line = line;
}

acc_result acc_call_site_end(acc_result rc) {
  if (acc__tls_site_depth > 0 && --acc__tls_site_depth == 0) {
    acc__tls_site_entry = 0;
    acc__tls_site_file = NULL;
    acc__tls_site_line = 0;
  }
  return rc;
}

static const char *const entry_names[ACC_ENTRY_COUNT_] = {
    [ACC_ENTRY_NONE] = "?",
    [ACC_ENTRY_ACCELERATOR_CREATE] = "acc_accelerator_create",
    [ACC_ENTRY_ACCELERATOR_WAIT_FOR_EVERYONE] = "acc_accelerator_wait_for_everyone",
    [ACC_ENTRY_ACCELERATOR_MAIN_PROCESS_FIRST_BEGIN] = "acc_accelerator_main_process_first_begin",
    [ACC_ENTRY_ACCELERATOR_MAIN_PROCESS_FIRST_END] = "acc_accelerator_main_process_first_end",
    [ACC_ENTRY_ACCELERATOR_PREPARE_MODEL] = "acc_accelerator_prepare_model",
    [ACC_ENTRY_ACCELERATOR_PREPARE_DATALOADER] = "acc_accelerator_prepare_dataloader",
    [ACC_ENTRY_ACCELERATOR_NEXT_BATCH] = "acc_accelerator_next_batch",
    [ACC_ENTRY_ACCELERATOR_NEXT_BATCH_JOINED] = "acc_accelerator_next_batch_joined",
    [ACC_ENTRY_ACCELERATOR_GRAD_READY] = "acc_accelerator_grad_ready",
    [ACC_ENTRY_ACCELERATOR_GRAD_READY_MODEL] = "acc_accelerator_grad_ready_model",
    [ACC_ENTRY_ACCELERATOR_BACKWARD] = "acc_accelerator_backward",
    [ACC_ENTRY_ACCELERATOR_BACKWARD_MODEL] = "acc_accelerator_backward_model",
    [ACC_ENTRY_ACCELERATOR_UNSCALE_GRADIENTS] = "acc_accelerator_unscale_gradients",
    [ACC_ENTRY_ACCELERATOR_CLIP_GRAD_NORM] = "acc_accelerator_clip_grad_norm",
    [ACC_ENTRY_ACCELERATOR_CLIP_GRAD_NORM_MODEL] = "acc_accelerator_clip_grad_norm_model",
    [ACC_ENTRY_ACCELERATOR_CLIP_GRAD_VALUE] = "acc_accelerator_clip_grad_value",
    [ACC_ENTRY_ACCELERATOR_OPTIMIZER_STEP] = "acc_accelerator_optimizer_step",
    [ACC_ENTRY_ACCELERATOR_ALL_GATHER] = "acc_accelerator_all_gather",
    [ACC_ENTRY_ACCELERATOR_GATHER_FOR_METRICS] = "acc_accelerator_gather_for_metrics",
    [ACC_ENTRY_ACCELERATOR_ALL_REDUCE] = "acc_accelerator_all_reduce",
    [ACC_ENTRY_ACCELERATOR_PAD_ACROSS_PROCESSES] = "acc_accelerator_pad_across_processes",
    [ACC_ENTRY_ACCELERATOR_SAVE_STATE] = "acc_accelerator_save_state",
    [ACC_ENTRY_ACCELERATOR_LOAD_STATE] = "acc_accelerator_load_state",
    [ACC_ENTRY_ACCELERATOR_PREPARE_FLAT] = "acc_accelerator_prepare_flat",
    [ACC_ENTRY_ACCELERATOR_PREPARE_TOKENS] = "acc_accelerator_prepare_tokens",
    [ACC_ENTRY_ACCELERATOR_NEXT_TOKENS] = "acc_accelerator_next_tokens",
    [ACC_ENTRY_WAIT_FOR_EVERYONE] = "acc_wait_for_everyone",
    [ACC_ENTRY_MAIN_PROCESS_FIRST_BEGIN] = "acc_main_process_first_begin",
    [ACC_ENTRY_MAIN_PROCESS_FIRST_END] = "acc_main_process_first_end",
    [ACC_ENTRY_LOCAL_MAIN_PROCESS_FIRST_BEGIN] = "acc_local_main_process_first_begin",
    [ACC_ENTRY_LOCAL_MAIN_PROCESS_FIRST_END] = "acc_local_main_process_first_end",
    [ACC_ENTRY_CHECK_TRIGGER] = "acc_check_trigger",
    [ACC_ENTRY_GATHER_OBJECT] = "acc_gather_object",
    [ACC_ENTRY_BROADCAST_OBJECT] = "acc_broadcast_object",
    [ACC_ENTRY_SAVE_MODEL] = "acc_save_model",
    [ACC_ENTRY_LOG_EX] = "acc_log_ex",
    [ACC_ENTRY_DATALOADER_NEXT] = "acc_dataloader_next",
    [ACC_ENTRY_FSDP_PREPARE] = "acc_fsdp_prepare",
    [ACC_ENTRY_FSDP_UNIT_FORWARD_BEGIN] = "acc_fsdp_unit_forward_begin",
    [ACC_ENTRY_FSDP_UNIT_FORWARD_END] = "acc_fsdp_unit_forward_end",
    [ACC_ENTRY_FSDP_UNIT_BACKWARD_BEGIN] = "acc_fsdp_unit_backward_begin",
    [ACC_ENTRY_FSDP_UNIT_BACKWARD_END] = "acc_fsdp_unit_backward_end",
    [ACC_ENTRY_FSDP_CLIP_GRAD_NORM] = "acc_fsdp_clip_grad_norm",
    [ACC_ENTRY_FSDP_SAVE_STATE] = "acc_fsdp_save_state",
    [ACC_ENTRY_FSDP_LOAD_STATE] = "acc_fsdp_load_state",
    [ACC_ENTRY_FSDP_SAVE_MODEL] = "acc_fsdp_save_model",
};

const char *acc_entry_point_name(int entry) {
  return entry > 0 && entry < ACC_ENTRY_COUNT_ && entry_names[entry] ? entry_names[entry] : "?";
}

/* ---- records and their text -------------------------------------------------------------- */

void acc__call_rec_site(acc__call_rec *r, const char *file) {
  if (!file) {
    r->site[0] = '\0';
    return;
  }
  size_t len = strlen(file);
  if (len < sizeof r->site) {
    memcpy(r->site, file, len + 1);
    return;
  }
  /* keep the end of the path, which names the file */
  size_t keep = sizeof r->site - 4;
  memcpy(r->site, "...", 3);
  memcpy(r->site + 3, file + len - keep, keep + 1);
}

static const char *op_names[ACC__OP_COUNT_] = {"?",          "barrier",    "broadcast",
                                               "all_reduce", "reduce",     "all_gather",
                                               "gather",     "all_gather_bytes",
                                               "reduce_scatter", "alloc_shared"};

const char *acc__op_name(int32_t op) {
  return op > 0 && op < ACC__OP_COUNT_ ? op_names[op] : "unknown collective";
}

void acc__origin_describe(char *buf, size_t cap, int32_t origin, int64_t index) {
  switch (origin) {
    case ACC__ORIGIN_USER: snprintf(buf, cap, "user call"); return;
    case ACC__ORIGIN_GRAD_SYNC:
      snprintf(buf, cap, "gradient sync bucket %lld", (long long)index);
      return;
    case ACC__ORIGIN_STATE_AGREE:
      snprintf(buf, cap, "save_state/load_state agreement: %s",
               index == 0 ? "status exchange" : index == 1 ? "error broadcast" : "path broadcast");
      return;
    case ACC__ORIGIN_GATHER_FOR_METRICS: snprintf(buf, cap, "gather_for_metrics"); return;
    case ACC__ORIGIN_FP16_CHECK:
      snprintf(buf, cap, "fp16 overflow check of optimizer_step");
      return;
    case ACC__ORIGIN_PREPARE:
      if (index >= 0)
        snprintf(buf, cap, "prepare_model: parameter %lld from process 0", (long long)index);
      else if (index <= -10)
        snprintf(buf, cap, "prepare_dataloader: token files compared with process 0's");
      else
        snprintf(buf, cap, "prepare_dataloader: seed from process 0");
      return;
    case ACC__ORIGIN_PAD: snprintf(buf, cap, "pad_across_processes"); return;
    case ACC__ORIGIN_ZERO:
      snprintf(buf, cap, "ZeRO %s",
               index == 0   ? "gradient reduce-scatter"
               : index == 1 ? "parameter all-gather"
               : index == 2 ? "gradient norm"
                            : "optimizer state gather/scatter");
      return;
    case ACC__ORIGIN_PLACEMENT:
      snprintf(buf, cap, "accelerator creation: device choices compared");
      return;
    case ACC__ORIGIN_JOIN:
      snprintf(buf, cap, "next_batch_joined: %s",
               index == 0 ? "batch counts" : index == 1 ? "failing process" : "its error");
      return;
    case ACC__ORIGIN_FSDP: {
      static const char *const kinds[] = {"parameter all-gather", "gradient reduce-scatter", "gradient all-reduce",
                                          "gradient norm", "prepare", "checkpoint", "?", "?"};
      snprintf(buf, cap, "FSDP unit %lld %s", (long long)(index / 8), kinds[index % 8 < 0 ? 6 : index % 8]);
      return;
    }
    default: snprintf(buf, cap, "unknown origin %d", (int)origin); return;
  }
}

void acc__call_rec_describe(char *buf, size_t cap, const acc__call_rec *r) {
  if (cap == 0) return;
  char shape[160], origin[64];
  int op = r->op > 0 && r->op < ACC__OP_COUNT_ ? r->op : 0;
  size_t n = (size_t)snprintf(shape, sizeof shape, "%s(", acc__op_name(r->op));
  if (op == ACC__OP_ALL_GATHER_BYTES) {
    n += (size_t)snprintf(shape + n, sizeof shape - n, "bytes=%lld", (long long)r->count);
  } else if (op != ACC__OP_BARRIER && op != 0) {
    n += (size_t)snprintf(shape + n, sizeof shape - n, "count=%lld, dtype=%s", (long long)r->count,
                          acc_dtype_name((acc_dtype)r->dtype));
    if (op == ACC__OP_ALL_REDUCE || op == ACC__OP_REDUCE || op == ACC__OP_REDUCE_SCATTER)
      n += (size_t)snprintf(shape + n, sizeof shape - n, ", op=%s", acc_op_name((acc_op)r->red));
    if (op == ACC__OP_BROADCAST || op == ACC__OP_REDUCE || op == ACC__OP_GATHER)
      n += (size_t)snprintf(shape + n, sizeof shape - n, ", root=%d", (int)r->root);
  }
  if (n < sizeof shape) snprintf(shape + n, sizeof shape - n, ")");
  acc__origin_describe(origin, sizeof origin, r->origin, r->origin_index);
  char site[ACC__SITE_CHARS];
  memcpy(site, r->site, sizeof site);
  site[sizeof site - 1] = '\0'; /* a record read from another process may be torn */
  char entry[80] = "";
  if (r->entry > 0 && r->entry < ACC_ENTRY_COUNT_)
    snprintf(entry, sizeof entry, " in %s", acc_entry_point_name(r->entry));
  static const char *const groups[] = {"", " over this machine's processes", " over this local rank's rail"};
  const char *grp = r->group > 0 && r->group < ACC__GROUP_COUNT_ ? groups[r->group] : "";
  if (site[0])
    snprintf(buf, cap, "%s%s [%s]%s at %s:%d", shape, grp, origin, entry, site, (int)r->line);
  else
    snprintf(buf, cap, "%s%s [%s]%s at an unknown call site", shape, grp, origin, entry);
}

static int same_call(const acc__call_rec *a, const acc__call_rec *b) {
  return a->seq == b->seq && a->op == b->op && a->dtype == b->dtype && a->red == b->red &&
         a->root == b->root && a->origin == b->origin && a->origin_index == b->origin_index &&
         a->group == b->group &&
         (a->op == ACC__OP_ALL_GATHER_BYTES || a->count == b->count);
}

acc_result acc__mismatch_error(const char *what, int me, const acc__call_rec *mine,
                               const acc__call_rec *recs, int n, int rank_base) {
  char msg[2000];
  size_t len = (size_t)snprintf(
      msg, sizeof msg,
      "%s (collective #%llu) on rank %d: the processes made different collective calls (every "
      "process must make the same collective calls in the same order; they are out of step):",
      what, (unsigned long long)mine->seq, me + rank_base);
  /* in rank order; with many processes, those whose call differs from this one's first */
  int shown = 0, few = n <= 6;
  for (int pass = 0; pass < (few ? 1 : 2); pass++) {
    for (int r = 0; r < n; r++) {
      if (!few && (pass == 0) == (same_call(&recs[r], mine) && r != me)) continue;
      if (len + 260 >= sizeof msg) break;
      char one[400], num[48] = "";
      acc__call_rec_describe(one, sizeof one, &recs[r]);
      if (recs[r].seq != mine->seq)
        snprintf(num, sizeof num, " (at its collective #%llu)", (unsigned long long)recs[r].seq);
      len += (size_t)snprintf(msg + len, sizeof msg - len, "\n  - process %d%s: %s", r + rank_base, num, one);
      shown++;
    }
  }
  if (shown < n && len + 40 < sizeof msg)
    snprintf(msg + len, sizeof msg - len, "\n  - ... and %d more processes", n - shown);
  return acc__error(ACC_ERR_MISMATCH, "%s", msg);
}

/* ---- all_gather_bytes sizes -------------------------------------------------------------- */

acc_result acc__gather_layout(const uint64_t *reported, int n, int me, uint64_t mine,
                              uint64_t limit, size_t *sizes, size_t *disp, size_t *total) {
  if (n < 1 || me < 0 || me >= n)
    return acc__error(ACC_ERR_INTERNAL, "all_gather_bytes: rank %d of %d", me, n);
  if (limit > SIZE_MAX) limit = SIZE_MAX;
  if (reported[me] != mine)
    return acc__error(ACC_ERR_MISMATCH,
                      "all_gather_bytes on rank %d: the size exchange returned %llu bytes for this "
                      "process instead of its %llu; the processes are out of step (run with "
                      "--debug)",
                      me, (unsigned long long)reported[me], (unsigned long long)mine);
  uint64_t sum = 0;
  for (int r = 0; r < n; r++) {
    uint64_t next;
    if (__builtin_add_overflow(sum, reported[r], &next) || next > limit)
      return acc__error(ACC_ERR_MISMATCH,
                        "all_gather_bytes on rank %d: process %d reported %llu bytes, which makes "
                        "the total exceed the %llu bytes this process can hold; the processes are "
                        "out of step (run with --debug) or the sizes are wrong",
                        me, r, (unsigned long long)reported[r], (unsigned long long)limit);
    if (disp) disp[r] = (size_t)sum;
    sizes[r] = (size_t)reported[r];
    sum = next;
  }
  *total = (size_t)sum;
  return ACC_OK;
}

uint64_t acc__gather_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t half = (uint64_t)(SIZE_MAX / 2);
  if (pages <= 0 || page <= 0) return half;
  uint64_t mem = (uint64_t)pages * (uint64_t)page;
  return mem < half ? mem : half;
}

/* ---- hang reports ------------------------------------------------------------------------ */

acc_result acc__hang_report_env(double *seconds) {
  *seconds = ACC__HANG_REPORT_DEFAULT_S;
  double x = 0;
  int set = 0;
  ACC_CHECK(acc__env_double("ACCELERATE_HANG_REPORT_S", &x, &set)); /* range from src/core/env.c */
  if (set) *seconds = x;
  return ACC_OK;
}

void acc__report_line(const char *line) {
  char buf[4096];
  int len = snprintf(buf, sizeof buf, "%s\n", line);
  if (len < 0) return;
  if ((size_t)len >= sizeof buf) {
    len = (int)sizeof buf - 1;
    buf[len - 1] = '\n';
  }
  ssize_t w = write(2, buf, (size_t)len);
  (void)w;
}
