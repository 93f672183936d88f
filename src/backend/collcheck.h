/* Collective call checks shared by comm.c and the backends: the call descriptor every collective
 * publishes (operation, dtype, count, root, origin, call site), its 64-bit tag, the messages for
 * mismatches and hang reports, the origin that internal layers set for their collectives, and
 * the validation of the sizes exchanged by all_gather_bytes. Internal. */
#ifndef ACC_COLLCHECK_H
#define ACC_COLLCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* Collective operations (the op field of a descriptor). */
enum {
  ACC__OP_NONE = 0,
  ACC__OP_BARRIER,
  ACC__OP_BROADCAST,
  ACC__OP_ALL_REDUCE,
  ACC__OP_REDUCE,
  ACC__OP_ALL_GATHER,
  ACC__OP_GATHER,
  ACC__OP_ALL_GATHER_BYTES,
  ACC__OP_REDUCE_SCATTER,
  ACC__OP_ALLOC_SHARED, /* a collective allocation (comm.h): count bytes of u8 */
  ACC__OP_COUNT_
};

/* Which processes a collective runs over (the group field of a descriptor): the whole job, or
 * one of the two subgroups a backend may offer (backend.h's subgroup op, comm/group.h): the
 * processes of this machine, or the "rail" of this local rank (one process per machine). A
 * subgroup call is numbered by the job's counter, so every process's numbers stay in step. */
enum { ACC__GROUP_WORLD = 0, ACC__GROUP_LOCAL = 1, ACC__GROUP_RAIL = 2, ACC__GROUP_COUNT_ };

/* Who makes a collective call. Library layers name themselves; everything else is a user call.
 * Calls of different origins never pair, even when their shapes agree. */
typedef enum acc__origin {
  ACC__ORIGIN_USER = 0,
  ACC__ORIGIN_GRAD_SYNC,          /* index: the gradient bucket */
  ACC__ORIGIN_STATE_AGREE,        /* save/load_state; index 0 status, 1 error, 2 path */
  ACC__ORIGIN_GATHER_FOR_METRICS,
  ACC__ORIGIN_FP16_CHECK,         /* the fp16 overflow flag of optimizer_step */
  ACC__ORIGIN_PREPARE,            /* index: parameter of prepare_model; -1 loader seed; -10..-12
                                     token files compared (data/tokens_agree.c) */
  ACC__ORIGIN_PAD,                /* pad_across_processes */
  ACC__ORIGIN_ZERO,               /* ZeRO: 0 gradient reduce-scatter, 1 parameter all-gather,
                                     2 norm, 3 state gather/scatter, 4 stage-2 bucket
                                     reduce, 5 stage-2 chunk all-gather, 6 and 7 zero_gather
                                     of float32 and 16-bit values */
  ACC__ORIGIN_PLACEMENT,          /* the device choices compared at accelerator creation */
  ACC__ORIGIN_JOIN,               /* next_batch_joined: 0 batch counts, 1 failing process, 2 its error */
  ACC__ORIGIN_FSDP,               /* FSDP (train/fsdp*.c): index unit * 8 + kind, kind 0 parameter all-gather,
                                     1 gradient reduce-scatter, 2 gradient all-reduce, 3 norm, 4 prepare, 5 checkpoint */
  ACC__ORIGIN_COUNT_
} acc__origin;

/* Names the origin of the NEXT collective this thread calls (one-shot; consumed by it). Internal
 * callers put it on the line before their collective. */
void acc__comm_origin(acc__origin kind, int64_t index);

/* This thread's pending origin (initial-exec: no __tls_get_addr call on the collective path). */
extern _Thread_local int32_t acc__tls_origin __attribute__((tls_model("initial-exec")));
extern _Thread_local int64_t acc__tls_origin_index __attribute__((tls_model("initial-exec")));

/* Takes (and clears) this thread's pending origin; ACC__ORIGIN_USER when none is set. */
static inline void acc__comm_take_origin(int32_t *kind, int64_t *index) {
  *kind = acc__tls_origin;
  *index = acc__tls_origin_index;
  acc__tls_origin = ACC__ORIGIN_USER;
  acc__tls_origin_index = 0;
}

/* The program's call of a public entry point in progress on this thread (acc_call_site_begin,
 * from the macros of accelerate/call_site.h): depth of nested marks, and the outermost's entry
 * point, file and line. enter() (comm.c) gives every collective made meanwhile this site. */
extern _Thread_local int32_t acc__tls_site_depth __attribute__((tls_model("initial-exec")));
extern _Thread_local int32_t acc__tls_site_entry __attribute__((tls_model("initial-exec")));
extern _Thread_local int32_t acc__tls_site_line __attribute__((tls_model("initial-exec")));
extern _Thread_local const char *acc__tls_site_file __attribute__((tls_model("initial-exec")));

/* One collective call, as this process made it. */
typedef struct acc__call {
  uint64_t seq; /* collective number (1, 2, ...), the same on every process when in step */
  int32_t op, dtype, red, root;
  int64_t count;        /* elements; for all_gather_bytes this process's bytes (not compared) */
  int32_t origin;
  int64_t origin_index;
  const char *file;     /* call site; NULL when unknown */
  int line;
  int32_t entry;        /* acc_entry_point whose call (at file:line) made it; 0: none */
  uint64_t tag;         /* acc__call_tag of the above */
  int32_t group;        /* ACC__GROUP_*: the processes it runs over (0: the whole job) */
} acc__call;

/* 64-bit tag of everything every process must agree on: number, operation, dtype, count (not
 * for all_gather_bytes), root, reduction, origin and group. Equal calls give equal tags; calls that
 * differ in one field always differ (the small fields are packed, and the number, the count and
 * the origin index are multiplied by different odd constants, which is injective), in several
 * fields at once they collide with probability ~2^-64. A few instructions: it is computed for
 * every collective. */
static inline uint64_t acc__call_tag(const acc__call *c) {
  uint64_t small = (uint64_t)(uint8_t)c->op | (uint64_t)(uint8_t)c->dtype << 8 |
                   (uint64_t)(uint8_t)c->red << 16 | (uint64_t)(uint8_t)c->origin << 24 |
                   (uint64_t)(uint32_t)c->root << 32;
  uint64_t count = c->op == ACC__OP_ALL_GATHER_BYTES ? 0 : (uint64_t)c->count;
  return small ^ c->seq * 0x9e3779b97f4a7c15ull ^ count * 0xff51afd7ed558ccdull ^
         (uint64_t)c->origin_index * 0xc4ceb9fe1a85ec53ull ^ (uint64_t)c->group * 0x94d049bb133111ebull;
}

/* The same call as plain bytes (shared memory, exchanges): fixed size, no pointers. */
#define ACC__SITE_CHARS 104
typedef struct acc__call_rec {
  uint64_t seq;
  int32_t op, dtype, red, root;
  int64_t count;
  int32_t origin, line;
  int64_t origin_index;
  int32_t entry, group;
  char site[ACC__SITE_CHARS]; /* file of the call site ("" when unknown), NUL-terminated */
} acc__call_rec;

/* Fills everything but the site text. */
static inline void acc__call_rec_fields(acc__call_rec *r, const acc__call *c) {
  r->seq = c->seq;
  r->op = c->op;
  r->dtype = c->dtype;
  r->red = c->red;
  r->root = c->root;
  r->count = c->count;
  r->origin = c->origin;
  r->line = c->line;
  r->origin_index = c->origin_index;
  r->entry = c->entry;
  r->group = c->group;
}
/* Copies the call site's file into r->site (the end of the path when it is too long). */
void acc__call_rec_site(acc__call_rec *r, const char *file);
/* "all_reduce(count=1, dtype=f32, op=sum) [user call] at prog.c:42", or with an entry point
 * "all_reduce(count=4, dtype=f32, op=sum) [gradient sync bucket 0] in acc_accelerator_backward
 * at train.c:57" */
void acc__call_rec_describe(char *buf, size_t cap, const acc__call_rec *r);
/* "gradient sync bucket 3", "a user call", ... */
void acc__origin_describe(char *buf, size_t cap, int32_t origin, int64_t index);
const char *acc__op_name(int32_t op);

/* ACC_ERR_MISMATCH with every process's call. recs[r] may have seq != mine->seq (a process
 * that is a call ahead or behind); it is then named with its own number. */
acc_result acc__mismatch_error(const char *what, int me, const acc__call_rec *mine,
                               const acc__call_rec *recs, int n, int rank_base);

/* Validates the byte counts every process reported for all_gather_bytes (reported[r] from rank
 * r, reported[me] must be `mine`) and computes sizes, displacements and the total. Fails with
 * ACC_ERR_MISMATCH when a count is not this process's own, when the sum overflows, or when it
 * exceeds `limit` (bytes this process can hold). disp may be NULL. */
acc_result acc__gather_layout(const uint64_t *reported, int n, int me, uint64_t mine,
                              uint64_t limit, size_t *sizes, size_t *disp, size_t *total);
/* The largest all_gather_bytes result this process accepts: physical memory (or SIZE_MAX/2). */
uint64_t acc__gather_limit(void);

/* ACCELERATE_HANG_REPORT_S: seconds a collective waits before every waiting process prints one
 * hang report line (default 60; 0 turns reports off). */
#define ACC__HANG_REPORT_DEFAULT_S 60.0
acc_result acc__hang_report_env(double *seconds);
/* Writes one line (adds the newline) to stderr in one write. */
void acc__report_line(const char *line);

#endif
