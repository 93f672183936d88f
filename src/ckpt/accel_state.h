/* The checkpoint state inside an accelerator and what save_state and load_state share. Not API.
 *   accel_state.c  the per-accelerator state (project configuration, objects registered for
 *                  checkpointing, save/load pre-hooks), the agreement between processes, file names;
 *   save_state.c   acc_accelerator_save_state: writing a checkpoint, rotation;
 *   load_state.c   acc_accelerator_load_state: checking and restoring a checkpoint.
 * save_state.c and load_state.c use accel_state.c, never each other. The accelerator hands its
 * prepared objects over as acc__accel_parts (train/accel.h). */
#ifndef ACC_ACCEL_STATE_H
#define ACC_ACCEL_STATE_H

#include <stdint.h>

#include "train/accel.h"

#define ACC__STATE_FORMAT "accelerate-c-state" /* checkpoint.json's "format" */
#define ACC__STATE_VERSION 1
#define ACC__STATE_PATH_BUF 4096 /* the checkpoint paths broadcast to every process */

/* An object registered for checkpointing (custom_checkpoint_<i>.bin). */
typedef struct acc__custom_obj {
  void *obj;
  acc_checkpoint_save_fn save;
  acc_checkpoint_load_fn load;
  uint64_t max_bytes; /* a larger custom_checkpoint_<i>.bin is refused before it is read */
} acc__custom_obj;

typedef struct acc__state_hook acc__state_hook; /* a save/load pre-hook (accel_state.c) */

struct acc__accel_ckpt {
  acc_project_config *project;
  acc__state_hook *hooks; /* in registration order */
  int nhooks, hooks_cap;
  uint64_t next_hook_id; /* the last id issued */
  int in_hook;           /* a hook is running: registering or removing hooks is refused */
  int automatic;   /* the project uses automatic checkpoint naming */
  int total_limit; /* > 0: keep this many checkpoints; pruned after a commit, not before */
  acc__custom_obj *custom;
  int ncustom, cap;
  int strict_processes; /* refuse a checkpoint saved by another number of processes */
  void *own;                   /* the program's buffers and per-process objects (own_state.c) */
  void (*own_free)(void *own); /* set with own, called by acc__accel_ckpt_free */
  void *zbufs;                     /* the program's sharded buffers under ZeRO (zero_bufs.c) */
  char **stems;                    /* the stems of both kinds of buffer groups */
  size_t nstems;
  void (*zbufs_free)(void *zbufs); /* set with zbufs */
};

void acc__accel_ckpt_free(acc__accel_ckpt *c);

/* The project configuration; a default one (project_dir ".", explicit directories) when unset.
 * Creates the accelerator's checkpoint state (*p->ckpt) when there is none. */
acc_result acc__accel_ckpt_project(acc__accel_parts *p, acc_project_config **out);

/* This process's save (load 0) or load (load 1) pre-hooks, in order; not collective (c may be NULL:
 * no hooks). */
acc_result acc__accel_ckpt_run_hooks(acc_accelerator *acc, acc__accel_ckpt *c, int load, const char *dir);

/* Every process returns the same result: ACC_OK when no process failed, else the error of the
 * failing process (the highest-numbered one when several fail). Collective. */
acc_result acc__state_agree(acc_state *st, acc_result local, const char *what);

/* Process 0's string (a path) to every process. Collective. */
acc_result acc__state_bcast_path(acc_state *st, char buf[ACC__STATE_PATH_BUF]);

/* <dir>/<stem><ext> for i 0, <dir>/<stem>_<i><ext> after it; NULL when out of memory. */
char *acc__state_file_name(const char *dir, const char *stem, int i, const char *ext);

/* own_state.c: the program's buffers and per-process objects, staged by load_state's pre-hook.
 * commit allocates the buffers the program left NULL and calls the objects' load callbacks (on
 * its own failure it puts back what it changed); rollback puts back a successful commit when a
 * later check fails; read_in reads the buffers' bytes in once every process agreed (ACC_ERR_IO
 * only when a file changed in place meanwhile); release drops the staging. No-ops when nothing
 * is registered. */
acc_result acc__own_state_commit(acc__accel_ckpt *c);
acc_result acc__own_state_read_in(acc__accel_ckpt *c);
void acc__own_state_rollback(acc__accel_ckpt *c);
void acc__own_state_release(acc__accel_ckpt *c);
/* Tests: the chunks of device buffers staged through host memory by save_state / load_state (in
 * this process, since the last reset) and the largest host staging buffer they used; reset: zero
 * both after reading. */
void acc__own_state_stage_stats(uint64_t *chunks, size_t *peak_bytes, int reset);
/* An acc__st_source_fn (load_defer.h): host memory written as it is, device memory of a registered
 * device (devio.h) staged through one host buffer of at most ACCELERATE_CKPT_STAGE_BYTES (counted
 * in the stats above). what: a const char * naming the buffer in a message. */
acc_result acc__ckpt_write_staged(void *what, const acc_tensor_view *v, size_t nbytes, int fd, const char *path);

/* zero_bufs.c: the program's sharded buffers (acc_accelerator_register_zero_buffers). save:
 * every process's range gathered to process 0, which writes the full tensors (collective: call
 * it on every process once the pre-hooks agreed). commit: the ranges its load pre-hook staged
 * written into the program's buffers (after every process agreed; nothing to put back).
 * release: the staging dropped. No-ops when nothing is registered. */
acc_result acc__zero_bufs_save(acc_state *st, acc__accel_ckpt *c, const char *dir);
acc_result acc__zero_bufs_commit(acc__accel_ckpt *c);
void acc__zero_bufs_release(acc__accel_ckpt *c);

/* The arguments of a buffer group's registration (fn: the caller): the stem a file name, at least
 * one buffer, each with a name, data or fixed, a known dtype and (unless allow_empty) count >= 1,
 * no name twice. */
acc_result acc__ckpt_check_group(const char *fn, const char *stem, const acc_named_buffer *bufs, size_t count,
                                 int allow_empty);
/* The stem taken for a group of c: own_state.c's and zero_bufs.c's groups both write
 * <stem>.safetensors, so a stem names one group of either kind (refused when taken). */
acc_result acc__ckpt_claim_stem(acc__accel_ckpt *c, const char *fn, const char *stem);


#endif
