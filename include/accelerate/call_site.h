/* accelerate-c: the program's call sites of the collective entry points.
 *
 * A training loop rarely calls a collective itself: acc_accelerator_backward all-reduces the
 * gradients, acc_accelerator_optimizer_step checks fp16 overflow on every process, save_state
 * agrees on a status. When the processes get out of step, the mismatch error and the hang
 * reports name every process's collective with its internal origin ("gradient sync bucket 0")
 * and, thanks to the macros below, the line of the program that made the public call:
 *
 *   - process 0: all_reduce(count=4, dtype=f32, op=sum) [gradient sync bucket 0]
 *                in acc_accelerator_backward at train.c:57
 *
 * Each macro has the name of its function and passes __FILE__ and __LINE__ around the call
 * (acc_call_site_begin, the function, acc_call_site_end); the functions keep their names and
 * their ABI (take their address, or write `(acc_accelerator_backward)(acc)`, to call one without
 * a site). The comm.h collectives have their own `_at` macros. Define ACC_NO_CALL_SITE_MACROS
 * before including to turn all of them off. Included by accelerate.h (after every declaration:
 * the macros must not rename them). Marks are per thread; nested marks keep the outermost. */
#ifndef ACCELERATE_CALL_SITE_H
#define ACCELERATE_CALL_SITE_H

#include "common.h"
#include "accelerator.h"
#include "checkpoint.h"
#include "comm.h"
#include "control.h"
#include "data.h"
#include "fsdp.h"
#include "obs.h"
#include "program_state.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The entry points the macros mark (values are never renumbered). @since 0.2 */
typedef enum acc_entry_point {
  ACC_ENTRY_NONE = 0,
  ACC_ENTRY_ACCELERATOR_CREATE = 1,
  ACC_ENTRY_ACCELERATOR_WAIT_FOR_EVERYONE = 2,
  ACC_ENTRY_ACCELERATOR_MAIN_PROCESS_FIRST_BEGIN = 3,
  ACC_ENTRY_ACCELERATOR_MAIN_PROCESS_FIRST_END = 4,
  ACC_ENTRY_ACCELERATOR_PREPARE_MODEL = 5,
  ACC_ENTRY_ACCELERATOR_PREPARE_DATALOADER = 6,
  ACC_ENTRY_ACCELERATOR_NEXT_BATCH = 7,
  ACC_ENTRY_ACCELERATOR_NEXT_BATCH_JOINED = 8,
  ACC_ENTRY_ACCELERATOR_GRAD_READY = 9,
  ACC_ENTRY_ACCELERATOR_GRAD_READY_MODEL = 10,
  ACC_ENTRY_ACCELERATOR_BACKWARD = 11,
  ACC_ENTRY_ACCELERATOR_BACKWARD_MODEL = 12,
  ACC_ENTRY_ACCELERATOR_UNSCALE_GRADIENTS = 13,
  ACC_ENTRY_ACCELERATOR_CLIP_GRAD_NORM = 14,
  ACC_ENTRY_ACCELERATOR_CLIP_GRAD_NORM_MODEL = 15,
  ACC_ENTRY_ACCELERATOR_CLIP_GRAD_VALUE = 16,
  ACC_ENTRY_ACCELERATOR_OPTIMIZER_STEP = 17,
  ACC_ENTRY_ACCELERATOR_ALL_GATHER = 18,
  ACC_ENTRY_ACCELERATOR_GATHER_FOR_METRICS = 19,
  ACC_ENTRY_ACCELERATOR_ALL_REDUCE = 20,
  ACC_ENTRY_ACCELERATOR_PAD_ACROSS_PROCESSES = 21,
  ACC_ENTRY_ACCELERATOR_SAVE_STATE = 22,
  ACC_ENTRY_ACCELERATOR_LOAD_STATE = 23,
  ACC_ENTRY_ACCELERATOR_PREPARE_FLAT = 24,
  ACC_ENTRY_ACCELERATOR_PREPARE_TOKENS = 25,
  ACC_ENTRY_ACCELERATOR_NEXT_TOKENS = 26,
  ACC_ENTRY_WAIT_FOR_EVERYONE = 27,
  ACC_ENTRY_MAIN_PROCESS_FIRST_BEGIN = 28,
  ACC_ENTRY_MAIN_PROCESS_FIRST_END = 29,
  ACC_ENTRY_LOCAL_MAIN_PROCESS_FIRST_BEGIN = 30,
  ACC_ENTRY_LOCAL_MAIN_PROCESS_FIRST_END = 31,
  ACC_ENTRY_CHECK_TRIGGER = 32,
  ACC_ENTRY_GATHER_OBJECT = 33,
  ACC_ENTRY_BROADCAST_OBJECT = 34,
  ACC_ENTRY_SAVE_MODEL = 35,
  ACC_ENTRY_LOG_EX = 36,
  ACC_ENTRY_DATALOADER_NEXT = 37,
  ACC_ENTRY_FSDP_PREPARE = 38,
  ACC_ENTRY_FSDP_UNIT_FORWARD_BEGIN = 39,
  ACC_ENTRY_FSDP_UNIT_FORWARD_END = 40,
  ACC_ENTRY_FSDP_UNIT_BACKWARD_BEGIN = 41,
  ACC_ENTRY_FSDP_UNIT_BACKWARD_END = 42,
  ACC_ENTRY_FSDP_CLIP_GRAD_NORM = 43,
  ACC_ENTRY_FSDP_SAVE_STATE = 44,
  ACC_ENTRY_FSDP_LOAD_STATE = 45,
  ACC_ENTRY_FSDP_SAVE_MODEL = 46,
  ACC_ENTRY_COUNT_ /* not an entry point */
} acc_entry_point;

/**
 * Marks the start of a call of `entry` made at file:line on this thread: every collective the
 * library makes until the matching acc_call_site_end is described (mismatch errors, hang
 * reports) with this call site and the entry point's name, besides its internal origin. A mark
 * made inside another keeps the outer one. file must be a string that outlives the call
 * (__FILE__). Normally made by the macros of this header. Not collective.
 * @since 0.2
 */
ACC_EXTERN void acc_call_site_begin(int entry, const char *file, int line);
/** Ends the innermost acc_call_site_begin of this thread and returns rc unchanged. @since 0.2 */
ACC_EXTERN acc_result acc_call_site_end(acc_result rc);
/** The name of an entry point ("acc_accelerator_backward"); "?" for an unknown value. @since 0.2 */
ACC_EXTERN const char *acc_entry_point_name(int entry);

/* (begin, call, end) as one expression of type acc_result; the comma operator orders them. */
#define ACC_CALL_SITE_WRAP(entry, fn, ...) \
  (acc_call_site_begin((entry), __FILE__, __LINE__), acc_call_site_end((fn)(__VA_ARGS__)))

#if !defined(ACC_NO_CALL_SITE_MACROS) && !defined(ACC_BUILDING_LIBRARY)
#define acc_accelerator_create(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_CREATE, acc_accelerator_create, __VA_ARGS__)
#define acc_accelerator_wait_for_everyone(...)                                              \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_WAIT_FOR_EVERYONE, acc_accelerator_wait_for_everyone, \
                     __VA_ARGS__)
#define acc_accelerator_main_process_first_begin(...)                  \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_MAIN_PROCESS_FIRST_BEGIN,    \
                     acc_accelerator_main_process_first_begin, __VA_ARGS__)
#define acc_accelerator_main_process_first_end(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_MAIN_PROCESS_FIRST_END,      \
                     acc_accelerator_main_process_first_end, __VA_ARGS__)
#define acc_accelerator_prepare_model(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_PREPARE_MODEL, acc_accelerator_prepare_model, __VA_ARGS__)
#define acc_accelerator_prepare_dataloader(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_PREPARE_DATALOADER,      \
                     acc_accelerator_prepare_dataloader, __VA_ARGS__)
#define acc_accelerator_next_batch(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_NEXT_BATCH, acc_accelerator_next_batch, __VA_ARGS__)
#define acc_accelerator_next_batch_joined(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_NEXT_BATCH_JOINED,      \
                     acc_accelerator_next_batch_joined, __VA_ARGS__)
#define acc_accelerator_grad_ready(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_GRAD_READY, acc_accelerator_grad_ready, __VA_ARGS__)
#define acc_accelerator_grad_ready_model(...)                                               \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_GRAD_READY_MODEL, acc_accelerator_grad_ready_model, \
                     __VA_ARGS__)
#define acc_accelerator_backward(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_BACKWARD, acc_accelerator_backward, __VA_ARGS__)
#define acc_accelerator_backward_model(...)                                             \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_BACKWARD_MODEL, acc_accelerator_backward_model, \
                     __VA_ARGS__)
#define acc_accelerator_unscale_gradients(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_UNSCALE_GRADIENTS,      \
                     acc_accelerator_unscale_gradients, __VA_ARGS__)
#define acc_accelerator_clip_grad_norm(...)                                             \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_CLIP_GRAD_NORM, acc_accelerator_clip_grad_norm, \
                     __VA_ARGS__)
#define acc_accelerator_clip_grad_norm_model(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_CLIP_GRAD_NORM_MODEL,      \
                     acc_accelerator_clip_grad_norm_model, __VA_ARGS__)
#define acc_accelerator_clip_grad_value(...)                                              \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_CLIP_GRAD_VALUE, acc_accelerator_clip_grad_value, \
                     __VA_ARGS__)
#define acc_accelerator_optimizer_step(...)                                             \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_OPTIMIZER_STEP, acc_accelerator_optimizer_step, \
                     __VA_ARGS__)
#define acc_accelerator_all_gather(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_ALL_GATHER, acc_accelerator_all_gather, __VA_ARGS__)
#define acc_accelerator_gather_for_metrics(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_GATHER_FOR_METRICS,      \
                     acc_accelerator_gather_for_metrics, __VA_ARGS__)
#define acc_accelerator_all_reduce(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_ALL_REDUCE, acc_accelerator_all_reduce, __VA_ARGS__)
#define acc_accelerator_pad_across_processes(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_PAD_ACROSS_PROCESSES,      \
                     acc_accelerator_pad_across_processes, __VA_ARGS__)
#define acc_accelerator_save_state(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_SAVE_STATE, acc_accelerator_save_state, __VA_ARGS__)
#define acc_accelerator_load_state(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_LOAD_STATE, acc_accelerator_load_state, __VA_ARGS__)
#define acc_accelerator_prepare_flat(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_PREPARE_FLAT, acc_accelerator_prepare_flat, __VA_ARGS__)
#define acc_accelerator_prepare_tokens(...)                                             \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_PREPARE_TOKENS, acc_accelerator_prepare_tokens, \
                     __VA_ARGS__)
#define acc_accelerator_next_tokens(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_ACCELERATOR_NEXT_TOKENS, acc_accelerator_next_tokens, __VA_ARGS__)
#define acc_wait_for_everyone(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_WAIT_FOR_EVERYONE, acc_wait_for_everyone, __VA_ARGS__)
#define acc_main_process_first_begin(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_MAIN_PROCESS_FIRST_BEGIN, acc_main_process_first_begin, __VA_ARGS__)
#define acc_main_process_first_end(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_MAIN_PROCESS_FIRST_END, acc_main_process_first_end, __VA_ARGS__)
#define acc_local_main_process_first_begin(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_LOCAL_MAIN_PROCESS_FIRST_BEGIN,      \
                     acc_local_main_process_first_begin, __VA_ARGS__)
#define acc_local_main_process_first_end(...)                    \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_LOCAL_MAIN_PROCESS_FIRST_END,      \
                     acc_local_main_process_first_end, __VA_ARGS__)
#define acc_check_trigger(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_CHECK_TRIGGER, acc_check_trigger, __VA_ARGS__)
#define acc_gather_object(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_GATHER_OBJECT, acc_gather_object, __VA_ARGS__)
#define acc_broadcast_object(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_BROADCAST_OBJECT, acc_broadcast_object, __VA_ARGS__)
#define acc_save_model(...) ACC_CALL_SITE_WRAP(ACC_ENTRY_SAVE_MODEL, acc_save_model, __VA_ARGS__)
#define acc_log_ex(...) ACC_CALL_SITE_WRAP(ACC_ENTRY_LOG_EX, acc_log_ex, __VA_ARGS__)
#define acc_dataloader_next(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_DATALOADER_NEXT, acc_dataloader_next, __VA_ARGS__)
#define acc_fsdp_prepare(...) ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_PREPARE, acc_fsdp_prepare, __VA_ARGS__)
#define acc_fsdp_unit_forward_begin(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_UNIT_FORWARD_BEGIN, acc_fsdp_unit_forward_begin, __VA_ARGS__)
#define acc_fsdp_unit_forward_end(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_UNIT_FORWARD_END, acc_fsdp_unit_forward_end, __VA_ARGS__)
#define acc_fsdp_unit_backward_begin(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_UNIT_BACKWARD_BEGIN, acc_fsdp_unit_backward_begin, __VA_ARGS__)
#define acc_fsdp_unit_backward_end(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_UNIT_BACKWARD_END, acc_fsdp_unit_backward_end, __VA_ARGS__)
#define acc_fsdp_clip_grad_norm(...) \
  ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_CLIP_GRAD_NORM, acc_fsdp_clip_grad_norm, __VA_ARGS__)
#define acc_fsdp_save_state(...) ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_SAVE_STATE, acc_fsdp_save_state, __VA_ARGS__)
#define acc_fsdp_load_state(...) ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_LOAD_STATE, acc_fsdp_load_state, __VA_ARGS__)
#define acc_fsdp_save_model(...) ACC_CALL_SITE_WRAP(ACC_ENTRY_FSDP_SAVE_MODEL, acc_fsdp_save_model, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif

#endif
