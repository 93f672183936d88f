/* Rendezvous helpers of the shared-memory backend: token, private runtime directory, reclaim of
 * stale segments, launch board (see rdzv.h). Linux. */
#include "backend/rdzv.h"

#include "core/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/shm.h"

/* ---- processes ---------------------------------------------------------------------------- */

uint64_t acc__proc_start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* "pid (comm) S ppid ...": comm may hold spaces and parentheses, so parse after the last ')' */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return 0;
  p += 2;
  if (*p == 'Z' || *p == 'X') return 0; /* zombie or dead: gone for our purpose */
  /* field 3 is the state; the start time is field 22 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return 0;
    p++;
  }
  return strtoull(p, NULL, 10);
}

int acc__proc_alive(pid_t pid, uint64_t start) {
  if (pid <= 0) return 0;
  uint64_t now = acc__proc_start_time(pid);
  if (now == 0) return 0;
  return start == 0 || now == start;
}

uint64_t acc__pid_namespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* ---- tokens ------------------------------------------------------------------------------- */

acc_result acc__random_hex(char *buf, size_t nbytes) {
  unsigned char raw[64];
  if (nbytes > sizeof raw) nbytes = sizeof raw;
  size_t got = 0;
  while (got < nbytes) {
    ssize_t r = getrandom(raw + got, nbytes - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return acc__error(ACC_ERR_SYSTEM, "cannot draw random bytes (getrandom): %s",
                        strerror(errno));
    got += (size_t)r;
  }
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < nbytes; i++) {
    buf[2 * i] = hex[raw[i] >> 4];
    buf[2 * i + 1] = hex[raw[i] & 15];
  }
  buf[2 * nbytes] = '\0';
  return ACC_OK;
}

static int token_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

acc_result acc__rdzv_env_token(char *out, size_t cap, int *set) {
  *set = 0;
  const char *v = acc__env_str(ACC_RDZV_TOKEN_ENV);
  if (!v || !*v) return ACC_OK;
  size_t n = strlen(v);
  int ok = n >= 16 && n <= 64 && n < cap;
  for (size_t i = 0; ok && i < n; i++) ok = token_char_ok(v[i]);
  if (!ok)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s must be 16 to 64 characters of [0-9A-Za-z_-] (a random value shared by "
                      "the ranks of one job), got %zu characters",
                      ACC_RDZV_TOKEN_ENV, n);
  memcpy(out, v, n + 1);
  *set = 1;
  return ACC_OK;
}

/* ---- runtime directory -------------------------------------------------------------------- */

/* Checks that path is a real directory (not a symlink) owned by the euid with no group or other
 * permission; why gets the reason otherwise. */
static int private_dir_ok(const char *path, char *why, size_t cap) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    snprintf(why, cap, "%s: %s", path, strerror(errno));
    return 0;
  }
  if (S_ISLNK(st.st_mode)) {
    snprintf(why, cap, "%s is a symbolic link", path);
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, cap, "%s is not a directory", path);
    return 0;
  }
  if (st.st_uid != geteuid()) {
    snprintf(why, cap, "%s is owned by uid %u, not by uid %u", path, (unsigned)st.st_uid,
             (unsigned)geteuid());
    return 0;
  }
  if ((st.st_mode & 077) != 0) {
    snprintf(why, cap, "%s has mode %04o, expected 0700", path, (unsigned)(st.st_mode & 07777));
    return 0;
  }
  return 1;
}

static int make_private_dir(const char *path, char *why, size_t cap) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    snprintf(why, cap, "cannot create %s: %s", path, strerror(errno));
    return 0;
  }
  return private_dir_ok(path, why, cap);
}

acc_result acc__rdzv_runtime_dir(char *out, size_t cap) {
  char why[3][PATH_MAX + 64] = {"", "", ""};
  const char *x = acc__env_str("XDG_RUNTIME_DIR");
  if (x && *x) {
    if (private_dir_ok(x, why[0], sizeof why[0]) && strlen(x) < cap) {
      snprintf(out, cap, "%s", x);
      return ACC_OK;
    }
  } else {
    snprintf(why[0], sizeof why[0], "XDG_RUNTIME_DIR is not set");
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/tmp/accelerate-%u", (unsigned)geteuid());
  if (make_private_dir(path, why[1], sizeof why[1]) && strlen(path) < cap) {
    snprintf(out, cap, "%s", path);
    return ACC_OK;
  }
  const char *home = acc__env_str("HOME");
  if (home && *home) {
    char cache[PATH_MAX];
    snprintf(cache, sizeof cache, "%s/.cache", home);
    mkdir(cache, 0700); /* may exist, with any mode: only the directory below must be private */
    snprintf(path, sizeof path, "%s/.cache/accelerate-run", home);
    if (make_private_dir(path, why[2], sizeof why[2]) && strlen(path) < cap) {
      snprintf(out, cap, "%s", path);
      return ACC_OK;
    }
  } else {
    snprintf(why[2], sizeof why[2], "HOME is not set");
  }
  return acc__error(ACC_ERR_SYSTEM,
                    "no private runtime directory for the rendezvous token: %s; %s; %s (set "
                    "XDG_RUNTIME_DIR to a directory of yours with mode 0700, or export %s with a "
                    "random value common to the job's ranks)",
                    why[0], why[1], why[2], ACC_RDZV_TOKEN_ENV);
}

void acc__rdzv_token_path(char *out, size_t cap, const char *dir, const char *job_id) {
  snprintf(out, cap, "%s/acc-rdzv-%s", dir, job_id);
}

/* ---- token file --------------------------------------------------------------------------- */

/* File content: "<token> <creator pid> <creator start time> <creator PID namespace>\n". */
acc_result acc__rdzv_publish_token(const char *path, char *token, size_t cap) {
  if (cap < ACC_RDZV_TOKEN_LEN + 1) return acc__error(ACC_ERR_INTERNAL, "token buffer too small");
  ACC_CHECK(acc__random_hex(token, ACC_RDZV_TOKEN_LEN / 2));
  char tmp[PATH_MAX + 64], suffix[17];
  ACC_CHECK(acc__random_hex(suffix, 8));
  snprintf(tmp, sizeof tmp, "%s.tmp-%s", path, suffix);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot create the rendezvous token file %s: %s", tmp,
                      strerror(errno));
  char line[128];
  int n = snprintf(line, sizeof line, "%s %ld %llu %llu\n", token, (long)getpid(),
                   (unsigned long long)acc__proc_start_time(getpid()), (unsigned long long)acc__pid_namespace());
  int err = 0;
  if (fchmod(fd, 0600) != 0 || write(fd, line, (size_t)n) != n) err = errno ? errno : EIO;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot write the rendezvous token file %s: %s", path,
                      strerror(err));
  }
  return ACC_OK;
}

/* Reads and checks a token file; 1 ok, 0 absent, -1 error (message set when rank >= 0). */
static int read_token_file(const char *path, int rank, char *token, size_t cap, long *pid,
                           unsigned long long *start, unsigned long long *pidns) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    if (rank >= 0)
      acc__error(ACC_ERR_SYSTEM, "rank %d: cannot open the rendezvous token file %s: %s", rank,
                 path, strerror(errno));
    return -1;
  }
  struct stat st;
  char buf[256];
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      (st.st_mode & 07777) == 0600)
    n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) {
    if (rank >= 0)
      acc__error(ACC_ERR_SYSTEM,
                 "rank %d: refusing the rendezvous token file %s: expected a regular file owned "
                 "by uid %u with mode 0600 (got uid %u, mode %04o)",
                 rank, path, (unsigned)geteuid(), (unsigned)st.st_uid,
                 (unsigned)(st.st_mode & 07777));
    return -1;
  }
  buf[n] = '\0';
  char tok[80];
  long p = 0;
  unsigned long long s = 0, ns = 0; /* no namespace (an older file): unknown */
  if (sscanf(buf, "%79s %ld %llu %llu", tok, &p, &s, &ns) < 3 || strlen(tok) != ACC_RDZV_TOKEN_LEN ||
      (token && strlen(tok) >= cap)) {
    if (rank >= 0)
      acc__error(ACC_ERR_SYSTEM, "rank %d: the rendezvous token file %s is malformed", rank, path);
    return -1;
  }
  for (size_t i = 0; tok[i]; i++)
    if (!token_char_ok(tok[i])) {
      if (rank >= 0)
        acc__error(ACC_ERR_SYSTEM, "rank %d: the rendezvous token file %s is malformed", rank,
                   path);
      return -1;
    }
  if (token) snprintf(token, cap, "%s", tok);
  if (pid) *pid = p;
  if (start) *start = s;
  if (pidns) *pidns = ns;
  return 1;
}

int acc__rdzv_read_token(const char *path, int rank, char *token, size_t cap) {
  return read_token_file(path, rank, token, cap, NULL, NULL, NULL);
}

void acc__rdzv_remove_token(const char *path, const char *token) {
  char cur[80];
  if (read_token_file(path, -1, cur, sizeof cur, NULL, NULL, NULL) == 1 && strcmp(cur, token) == 0)
    unlink(path);
}

/* ---- reclaim ------------------------------------------------------------------------------ */

/* A creator recorded in our PID namespace that is dead. A pid from another namespace (or an
 * unknown one) says nothing here: the segment or file is left alone. */
static int creator_dead(pid_t pid, uint64_t start, uint64_t pidns) {
  const uint64_t mine = acc__pid_namespace();
  return mine != 0 && pidns == mine && !acc__proc_alive(pid, start);
}

/* A segment of ours whose header names a creator that is dead. */
static int segment_is_stale(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  struct stat st;
  acc__shm_header h;
  int stale = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      (size_t)st.st_size >= sizeof h && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
      h.magic == ACC_SHM_MAGIC && h.version == ACC_SHM_VERSION && h.creator_pid > 0)
    stale = creator_dead((pid_t)h.creator_pid, h.creator_start, h.creator_pidns);
  close(fd);
  return stale;
}

/* A registered buffer's file of ours ("...-a<k>-r<rank>", shm_reg.c) whose creator is dead. */
static int reg_file_is_stale(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  struct stat st;
  acc__shm_reg_owner o;
  int stale = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      (size_t)st.st_size >= sizeof o && pread(fd, &o, sizeof o, 0) == (ssize_t)sizeof o &&
      o.magic == ACC_SHM_REG_MAGIC && o.pid > 0)
    stale = creator_dead((pid_t)o.pid, o.start, o.pidns);
  close(fd);
  return stale;
}

int acc__rdzv_reclaim(const char *runtime_dir) {
  int n = 0;
  DIR *d = opendir("/dev/shm");
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, "acc-", 4) != 0) continue;
      char path[PATH_MAX];
      snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
      if ((segment_is_stale(path) || reg_file_is_stale(path)) && unlink(path) == 0) n++;
    }
    closedir(d);
  }
  if (runtime_dir && (d = opendir(runtime_dir))) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, "acc-rdzv-", 9) != 0) continue;
      char path[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", runtime_dir, e->d_name);
      long pid = 0;
      unsigned long long start = 0, pidns = 0;
      int r = strstr(e->d_name, ".tmp-") ? 0 : read_token_file(path, -1, NULL, 0, &pid, &start, &pidns);
      if (r == 1 && creator_dead((pid_t)pid, start, pidns) && unlink(path) == 0) n++;
    }
    closedir(d);
  }
  return n;
}

/* ---- launch board ------------------------------------------------------------------------- */

int acc__board_create(int nprocs, const int *ranks, const char *run_id) {
  if (nprocs < 1) return -1;
  int fd = memfd_create("accelerate-launch-board", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t bytes = sizeof(acc__board_header) +
                 (size_t)nprocs * (sizeof(acc__board_entry) + sizeof(acc__board_note));
  uint8_t *buf = calloc(1, bytes);
  if (!buf) {
    close(fd);
    return -1;
  }
  acc__board_header *h = (acc__board_header *)buf;
  h->magic = ACC_BOARD_MAGIC;
  h->nprocs = nprocs;
  snprintf(h->run_id, sizeof h->run_id, "%s", run_id ? run_id : "");
  acc__board_entry *e = (acc__board_entry *)(buf + sizeof *h);
  for (int i = 0; i < nprocs; i++) e[i] = (acc__board_entry){ranks[i], 0, ACC_BOARD_RUNNING, 0};
  ssize_t w = pwrite(fd, buf, bytes, 0);
  free(buf);
  if (w != (ssize_t)bytes) {
    close(fd);
    return -1;
  }
  return fd;
}

void acc__board_record(int fd, int i, pid_t pid, int st) {
  if (fd < 0 || i < 0) return;
  off_t off = (off_t)(sizeof(acc__board_header) + (size_t)i * sizeof(acc__board_entry));
  acc__board_entry e;
  if (pread(fd, &e, sizeof e, off) != (ssize_t)sizeof e) return;
  e.pid = (int32_t)pid;
  e.state = WIFSIGNALED(st) ? ACC_BOARD_SIGNALED : ACC_BOARD_EXITED;
  e.detail = WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st);
  /* pid and detail first, then the state: a reader that sees the state sees the rest (one
   * pwrite of 16 bytes into a memfd page is not torn in practice; readers re-read anyway) */
  if (pwrite(fd, &e, sizeof e, off) != (ssize_t)sizeof e) return;
}

static off_t note_off(int nprocs, int i) {
  return (off_t)(sizeof(acc__board_header) + (size_t)nprocs * sizeof(acc__board_entry) +
                 (size_t)i * sizeof(acc__board_note));
}

void acc__board_write_note(int fd, int rank, int rc, const char *msg) {
  acc__board_header h;
  if (fd < 0 || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.nprocs < 1 || h.nprocs > 65536)
    return;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < note_off(h.nprocs, h.nprocs)) return; /* no notes */
  for (int i = 0; i < h.nprocs; i++) {
    acc__board_entry e;
    off_t off = (off_t)(sizeof h + (size_t)i * sizeof e);
    if (pread(fd, &e, sizeof e, off) != (ssize_t)sizeof e) return;
    if (e.rank != rank) continue;
    acc__board_note n;
    memset(&n, 0, sizeof n);
    n.rc = rc;
    snprintf(n.msg, sizeof n.msg, "%s", msg ? msg : "");
    if (pwrite(fd, &n, sizeof n, note_off(h.nprocs, i)) != (ssize_t)sizeof n) return;
    return;
  }
}

int acc__board_read_note(int fd, int i, int *rc, char *msg, size_t cap) {
  *rc = 0;
  if (cap) msg[0] = 0;
  acc__board_header h;
  if (fd < 0 || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || i < 0 || i >= h.nprocs) return 0;
  acc__board_note n;
  if (pread(fd, &n, sizeof n, note_off(h.nprocs, i)) != (ssize_t)sizeof n || n.rc == 0) return 0;
  n.msg[sizeof n.msg - 1] = 0;
  *rc = n.rc;
  if (cap) snprintf(msg, cap, "%s", n.msg);
  return 1;
}

int acc__board_open(void) {
  long v = 0;
  int set = 0;
  if (acc__env_int(ACC_RDZV_BOARD_ENV, &v, &set) != ACC_OK || !set || v > INT_MAX) return -1;
  int fd = (int)v;
  struct stat st;
  acc__board_header h;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size < sizeof h ||
      pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != ACC_BOARD_MAGIC ||
      h.nprocs < 1 || (size_t)st.st_size < sizeof h + (size_t)h.nprocs * sizeof(acc__board_entry))
    return -1;
  const char *run = acc__env_str("ACCELERATE_RUN_ID");
  h.run_id[sizeof h.run_id - 1] = '\0';
  if (!run || strcmp(run, h.run_id) != 0) return -1; /* inherited from an outer job */
  return fd;
}

int acc__board_find_dead(int fd, int me, int rank, acc__board_entry *out) {
  if (fd < 0) return -1;
  acc__board_header h;
  if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.nprocs < 1 || h.nprocs > 65536)
    return -1;
  acc__board_entry e[64];
  for (int base = 0; base < h.nprocs; base += 64) {
    int k = h.nprocs - base < 64 ? h.nprocs - base : 64;
    off_t off = (off_t)(sizeof h + (size_t)base * sizeof *e);
    if (pread(fd, e, (size_t)k * sizeof *e, off) != (ssize_t)((size_t)k * sizeof *e)) return -1;
    for (int i = 0; i < k; i++) {
      if (e[i].state == ACC_BOARD_RUNNING || e[i].rank == me) continue;
      if (rank >= 0 && e[i].rank != rank) continue;
      if (out) *out = e[i];
      return e[i].rank;
    }
  }
  return -1;
}

void acc__board_describe(const acc__board_entry *e, char *buf, size_t cap) {
  if (e->state == ACC_BOARD_SIGNALED)
    snprintf(buf, cap, "was killed by %s", acc__signal_name(e->detail));
  else
    snprintf(buf, cap, "exited with status %d", e->detail);
}
