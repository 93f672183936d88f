/* Checkpoint directories: transactions (write into a temporary directory, commit by rename),
 * listing and removal of checkpoint_<n> directories. Not API. Files in general: core/fs.h. */
#ifndef ACC_CKPT_DIR_H
#define ACC_CKPT_DIR_H

#include <stddef.h>
#include <stdio.h>

#include "core/fs.h"

/* Low-level checkpoint transaction (the public acc_checkpoint_* wrap it).
 * Multi-process hook: the lead will call begin on the main process, broadcast/barrier, let every
 * process write into tmp_dir, barrier, then commit on the main process, barrier. */
typedef struct acc__ckpt_txn {
  char *final_dir; /* target */
  char *tmp_dir;   /* "<final_dir>.tmp-writing" */
} acc__ckpt_txn;

#define ACC__CKPT_TMP_SUFFIX ".tmp-writing"

/* Creates tmp_dir (removing a stale one). A complete final_dir is an error; an incomplete
 * leftover final_dir is removed. */
acc_result acc__ckpt_begin(acc__ckpt_txn *txn, const char *final_dir);
/* fsync tmp files + dir, rename to final, fsync parent, write + fsync the marker. Frees txn's
 * strings in every case. */
acc_result acc__ckpt_commit(acc__ckpt_txn *txn);
/* rm -rf tmp_dir and free the strings. */
void acc__ckpt_abort(acc__ckpt_txn *txn);

/* checkpoint_<n> directories directly under base (exactly "checkpoint_" + digits), sorted by n
 * ascending; only complete ones unless include_incomplete. A missing base is an empty list.
 * Free with acc__ckpt_entries_free. */
typedef struct acc__ckpt_entry {
  long num;
  char *path;
  int complete;
} acc__ckpt_entry;
acc_result acc__ckpt_list(const char *base, int include_incomplete, acc__ckpt_entry **out, size_t *count);
void acc__ckpt_entries_free(acc__ckpt_entry *e, size_t n);
/* Deletes a checkpoint so that a crash half-way never leaves a "complete" one with files
 * missing: the COMPLETE marker goes first (durably), then the rest. */
acc_result acc__ckpt_remove(const char *dir);

#endif
