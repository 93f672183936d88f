/* Files, for every layer: paths, regular-file opens, durable writes, directories. Not API. */
#ifndef ACC_CORE_FS_H
#define ACC_CORE_FS_H

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

/* Descriptors 0, 1 and 2 that are closed are opened on /dev/null, so that nothing the
 * library or the launcher creates afterwards (a segment, the launcher's board, a tracker file)
 * becomes a process's standard input, output or error. Called before creating anything. */
void acc__reserve_std_fds(void);

/* Test hook: when non-NULL, called with a short phase name at each durable step of a commit
 * and of acc__write_fd_atomic ("tmp-written", "renamed", ...). Not thread-safe; tests only. */
extern void (*acc__fs_progress_hook)(const char *phase);

#endif
