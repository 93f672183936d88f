/* Files: paths, regular-file opens that never block on a FIFO, durable (atomic, fsynced) writes,
 * directory creation and removal (core/fs.h). */
#include "core/fs.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void (*acc__fs_progress_hook)(const char *phase);

static void progress(const char *phase) {
  if (acc__fs_progress_hook) acc__fs_progress_hook(phase);
}

/* ---- paths -------------------------------------------------------------------------------- */

char *acc__path_join(const char *a, const char *b) {
  size_t la = a ? strlen(a) : 0, lb = strlen(b);
  char *s = acc__malloc(la + lb + 2);
  if (!s) return NULL;
  if (la == 0) {
    memcpy(s, b, lb + 1);
  } else {
    memcpy(s, a, la);
    size_t k = la;
    if (a[la - 1] != '/') s[k++] = '/';
    memcpy(s + k, b, lb + 1);
  }
  return s;
}

char *acc__path_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return acc__strdup(".");
  if (slash == path) return acc__strdup("/");
  size_t n = (size_t)(slash - path);
  char *s = acc__malloc(n + 1);
  if (!s) return NULL;
  memcpy(s, path, n);
  s[n] = 0;
  return s;
}

int acc__is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int acc__is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static const char *file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

acc_result acc__open_regular(const char *path, const char *what, int *fd_out, struct stat *st_out) {
  *fd_out = -1;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    acc__error(ACC_ERR_IO, "could not open %s '%s': %s", what, path, strerror(err));
    errno = err;
    return ACC_ERR_IO;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    acc__error(ACC_ERR_IO, "could not stat %s '%s': %s", what, path, strerror(err));
    errno = err;
    return ACC_ERR_IO;
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    errno = EINVAL;
    return acc__error(ACC_ERR_IO, "%s '%s' is %s, not a regular file", what, path,
                      file_kind(sb.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int err = errno;
    close(fd);
    acc__error(ACC_ERR_IO, "could not open %s '%s': %s", what, path, strerror(err));
    errno = err;
    return ACC_ERR_IO;
  }
  if (st_out) *st_out = sb;
  *fd_out = fd;
  return ACC_OK;
}

acc_result acc__fopen_regular(const char *path, const char *what, FILE **out) {
  int fd;
  *out = NULL;
  ACC_CHECK(acc__open_regular(path, what, &fd, NULL));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return acc__error(ACC_ERR_NOMEM, "could not open %s '%s': %s", what, path, strerror(errno));
  }
  *out = f;
  return ACC_OK;
}

acc_result acc__json_load_regular(const char *path, const char *what, size_t flags, json_t **out,
                                  json_error_t *err) {
  int fd;
  *out = NULL;
  memset(err, 0, sizeof *err);
  if (acc__open_regular(path, what, &fd, NULL) != ACC_OK) {
    if (errno == EINVAL) return ACC_ERR_IO; /* exists, not a regular file */
    err->line = -1;
    snprintf(err->text, sizeof err->text, "%s", strerror(errno));
    return ACC_OK;
  }
  *out = json_loadfd(fd, flags, err);
  close(fd);
  return ACC_OK;
}

/* ---- durable writes ------------------------------------------------------------------------ */

acc_result acc__write_all(int fd, const void *data, size_t len, const char *what) {
  const char *p = data;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : len;
    ssize_t w = write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return acc__error(ACC_ERR_IO, "could not write '%s': %s", what, strerror(errno));
    }
    p += w;
    len -= (size_t)w;
  }
  return ACC_OK;
}

acc_result acc__fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return acc__error(ACC_ERR_IO, "could not open directory '%s' to fsync it: %s", dir, strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    return acc__error(ACC_ERR_IO, "could not fsync directory '%s': %s", dir, strerror(err));
  return ACC_OK;
}

static unsigned long tmp_counter;

acc_result acc__write_fd_atomic(const char *path, acc_result (*write_fn)(void *payload, int fd), void *payload) {
  if (!path || !*path) return acc__error(ACC_ERR_INVALID_ARGUMENT, "cannot write a file with an empty path");
  char suffix[64];
  snprintf(suffix, sizeof suffix, ".tmp-%ld-%lu", (long)getpid(), __atomic_add_fetch(&tmp_counter, 1, __ATOMIC_RELAXED));
  size_t lp = strlen(path), ls = strlen(suffix);
  char *tmp = acc__malloc(lp + ls + 1);
  char *dir = acc__path_dirname(path);
  acc_result rc = ACC_OK;
  int fd = -1;
  if (!tmp || !dir) {
    rc = ACC_ERR_NOMEM;
    goto done;
  }
  memcpy(tmp, path, lp);
  memcpy(tmp + lp, suffix, ls + 1);
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = acc__error(ACC_ERR_IO, "could not create '%s' (to write '%s'): %s", tmp, path, strerror(errno));
    goto done;
  }
  rc = write_fn(payload, fd);
  if (rc != ACC_OK) goto fail;
  progress("file-written");
  if (fsync(fd) != 0) {
    rc = acc__error(ACC_ERR_IO, "could not fsync '%s': %s", tmp, strerror(errno));
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    rc = acc__error(ACC_ERR_IO, "could not close '%s': %s", tmp, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = acc__error(ACC_ERR_IO, "could not rename '%s' to '%s': %s", tmp, path, strerror(errno));
    goto fail;
  }
  progress("file-renamed");
  rc = acc__fsync_dir(dir);
  goto done;
fail:
  if (fd >= 0) close(fd);
  unlink(tmp);
done:
  acc__free(tmp);
  acc__free(dir);
  return rc;
}

typedef struct buf_payload {
  const void *data;
  size_t len;
  const char *path;
} buf_payload;

static acc_result write_buf(void *payload, int fd) {
  buf_payload *b = payload;
  return acc__write_all(fd, b->data, b->len, b->path);
}

acc_result acc__write_file_atomic(const char *path, const void *data, size_t len) {
  buf_payload b = {data, len, path};
  return acc__write_fd_atomic(path, write_buf, &b);
}

/* ---- directories ---------------------------------------------------------------------------- */

acc_result acc__mkdirs(const char *dir) {
  if (!dir || !*dir) return acc__error(ACC_ERR_INVALID_ARGUMENT, "cannot create a directory with an empty path");
  char *p = acc__strdup(dir);
  if (!p) return ACC_ERR_NOMEM;
  acc_result rc = ACC_OK;
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == 0) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        rc = acc__error(ACC_ERR_IO, "could not create directory '%s': %s", p, strerror(errno));
        break;
      }
      if (!acc__is_dir(p)) {
        rc = acc__error(ACC_ERR_IO, "'%s' exists but is not a directory", p);
        break;
      }
      *s = c;
      if (c == 0) break;
    }
  }
  acc__free(p);
  return rc;
}

acc_result acc__rmtree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    if (errno == ENOENT) return ACC_OK;
    return acc__error(ACC_ERR_IO, "could not inspect '%s' to remove it: %s", path, strerror(errno));
  }
  if (!S_ISDIR(sb.st_mode)) {
    if (unlink(path) != 0 && errno != ENOENT)
      return acc__error(ACC_ERR_IO, "could not remove '%s': %s", path, strerror(errno));
    return ACC_OK;
  }
  DIR *d = opendir(path);
  if (!d) return acc__error(ACC_ERR_IO, "could not open directory '%s' to remove it: %s", path, strerror(errno));
  acc_result rc = ACC_OK;
  struct dirent *e;
  while (rc == ACC_OK && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *child = acc__path_join(path, e->d_name);
    if (!child) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    rc = acc__rmtree(child);
    acc__free(child);
  }
  closedir(d);
  if (rc == ACC_OK && rmdir(path) != 0 && errno != ENOENT)
    rc = acc__error(ACC_ERR_IO, "could not remove directory '%s': %s", path, strerror(errno));
  return rc;
}

acc_result acc__fsync_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return acc__error(ACC_ERR_IO, "could not open directory '%s': %s", dir, strerror(errno));
  acc_result rc = ACC_OK;
  struct dirent *e;
  while (rc == ACC_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    char *child = acc__path_join(dir, e->d_name);
    if (!child) {
      rc = ACC_ERR_NOMEM;
      break;
    }
    if (acc__is_file(child)) {
      int fd = -1;
      rc = acc__open_regular(child, "checkpoint file", &fd, NULL);
      if (rc == ACC_OK && fsync(fd) != 0)
        rc = acc__error(ACC_ERR_IO, "could not fsync '%s': %s", child, strerror(errno));
      if (fd >= 0) close(fd);
    }
    acc__free(child);
  }
  closedir(d);
  if (rc == ACC_OK) rc = acc__fsync_dir(dir);
  return rc;
}

void acc__reserve_std_fds(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY); /* the lowest free descriptor: fd */
    if (n >= 0 && n != fd) close(n); /* cannot happen (fd is the lowest free one); never keep a stray */
  }
}
