/* Internal file-system helpers for checkpoints: durable writes and directory transactions.
 * Not API. Used by safetensors.c, save_model.c and (later) save_state. */
#ifndef ACC_CKPT_DIR_H
#define ACC_CKPT_DIR_H

#include <stddef.h>
#include <stdio.h>

#include "core/internal.h"

/* Writes len bytes to path atomically: "<path>.tmp-<pid>-<n>" in the same directory, fsync,
 * rename, fsync of the directory. On failure the temporary file is removed and path untouched. */
acc_result acc__write_file_atomic(const char *path, const void *data, size_t len);

/* Same, but the content comes from a writer callback that receives a FILE-less sink:
 * write_fn(payload, fd) must write everything to fd and return ACC_OK. */
acc_result acc__write_fd_atomic(const char *path, acc_result (*write_fn)(void *payload, int fd), void *payload);

/* write(2) until done (EINTR-safe); error names what. */
acc_result acc__write_all(int fd, const void *data, size_t len, const char *what);

/* fsync of a directory (to make a rename or a new entry durable). */
acc_result acc__fsync_dir(const char *dir);
/* fsync of every regular file directly inside dir, then of dir itself. */
acc_result acc__fsync_tree(const char *dir);
/* mkdir -p (mode 0755). Error names the component that failed. */
acc_result acc__mkdirs(const char *dir);
/* rm -rf; a missing path is not an error. Never follows symlinks. */
acc_result acc__rmtree(const char *path);
/* 1 if path exists as a directory / regular file. */
int acc__is_dir(const char *path);
int acc__is_file(const char *path);
/* Opens path for reading when it is a regular file. The open itself uses O_NONBLOCK (cleared
 * afterwards), so a FIFO, a terminal or a device where a file is expected cannot block; anything
 * but a regular file is refused with ACC_ERR_IO naming what ("<what> '<path>' is a FIFO, not a
 * regular file"). Open errors are ACC_ERR_IO with strerror; errno is kept for the caller. st
 * (may be NULL) receives the fstat. */
struct stat;
acc_result acc__open_regular(const char *path, const char *what, int *fd, struct stat *st);
/* The same as a FILE* ("rb"). */
acc_result acc__fopen_regular(const char *path, const char *what, FILE **out);
/* jansson's json_load_file through acc__open_regular. A file that is not regular is an error
 * (ACC_ERR_IO); a missing file, an open failure or invalid JSON return ACC_OK with *out NULL
 * and err filled, for the caller's own message. */
struct json_t;
struct json_error_t;
acc_result acc__json_load_regular(const char *path, const char *what, size_t flags,
                                  struct json_t **out, struct json_error_t *err);
/* malloc'd "a/b" (or "b" when a is empty). NULL + ACC_ERR_NOMEM on failure. */
char *acc__path_join(const char *a, const char *b);
/* The directory part of path ("." when none). malloc'd. */
char *acc__path_dirname(const char *path);

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

/* Test hook: when non-NULL, called with a short phase name at each durable step of a commit
 * and of acc__write_fd_atomic ("tmp-written", "renamed", ...). Not thread-safe; tests only. */
extern void (*acc__ckpt_progress_hook)(const char *phase);

#endif
