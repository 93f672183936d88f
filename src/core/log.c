/* Logging: named loggers with levels, main-process-only by default, rank-prefixed lines, an
 * optional per-process log file (ACCELERATE_LOG_FILE with %h/%p/%r), in-order writing. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"
#include "core/fs.h"

#define LOGGER_MAGIC 0x41434c47u             /* "ACLG" */

struct acc_logger {
  uint32_t magic;
  int level; /* ACC_UNSET: from the environment, else the default */
  struct acc_logger *next;
  char name[];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static acc_logger *loggers;
static pthread_mutex_t term_mu = PTHREAD_MUTEX_INITIALIZER;
static int sink_fd = -1;  /* -1: not opened yet */
static char sink_path[4096]; /* the expanded ACCELERATE_LOG_FILE, when sink_fd is that file */
static int sink_lost_said;   /* a failed write to the log file was reported on stderr */
static int env_level = 0; /* 0: not read yet; -1: invalid */

static void (*overlay_hide)(void), (*overlay_show)(void); /* under term_mu */

void acc__term_lock(void) { pthread_mutex_lock(&term_mu); }
void acc__term_unlock(void) { pthread_mutex_unlock(&term_mu); }
void acc__term_set_overlay(void (*hide)(void), void (*show)(void)) {
  overlay_hide = hide;
  overlay_show = show;
}

static int (*rank_source)(void); /* set by the process state (src/state/state.c) */

void acc__log_set_rank_source(int (*fn)(void)) { __atomic_store_n(&rank_source, fn, __ATOMIC_RELEASE); }

int acc__obs_rank(void) {
  int (*fn)(void) = __atomic_load_n(&rank_source, __ATOMIC_ACQUIRE);
  int mine = fn ? fn() : -1;
  if (mine >= 0) return mine;
  static const char *vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                               "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = acc__env_str(vars[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (*end == '\0' && r >= 0 && r < 1 << 24) return (int)r;
    }
  }
  return 0;
}

/* ---- levels ---------------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int level;
} level_names[] = {{"DEBUG", ACC_LOG_DEBUG},     {"INFO", ACC_LOG_INFO},
                   {"WARNING", ACC_LOG_WARNING}, {"WARN", ACC_LOG_WARNING},
                   {"ERROR", ACC_LOG_ERROR},     {"CRITICAL", ACC_LOG_CRITICAL},
                   {"FATAL", ACC_LOG_CRITICAL}};

acc_result acc_log_level_parse(const char *s, int *out) {
  if (!s || !out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_log_level_parse: NULL argument");
  for (size_t i = 0; i < sizeof level_names / sizeof *level_names; i++)
    if (strcasecmp(s, level_names[i].name) == 0) {
      *out = level_names[i].level;
      return ACC_OK;
    }
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s && !errno && end && *end == '\0' && v >= 0 && v <= 100) {
    *out = (int)v;
    return ACC_OK;
  }
  return acc__error(
      ACC_ERR_INVALID_ARGUMENT,
      "log level \"%s\" is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL or a number 0..100", s);
}

const char *acc_log_level_name(int level) {
  if (level >= ACC_LOG_CRITICAL) return "CRITICAL";
  if (level >= ACC_LOG_ERROR) return "ERROR";
  if (level >= ACC_LOG_WARNING) return "WARNING";
  if (level >= ACC_LOG_INFO) return "INFO";
  return "DEBUG";
}

/* ACCELERATE_LOG_LEVEL, read once. */
static acc_result read_env_level(int *out) {
  pthread_mutex_lock(&reg_mu);
  if (env_level == 0) {
    const char *v = acc__env_str("ACCELERATE_LOG_LEVEL");
    int lv = ACC_LOG_DEFAULT_LEVEL;
    if (v && *v && acc_log_level_parse(v, &lv) != ACC_OK) lv = -1;
    env_level = lv;
  }
  int lv = env_level;
  pthread_mutex_unlock(&reg_mu);
  if (lv < 0) {
    *out = ACC_LOG_DEFAULT_LEVEL;
    return acc__error(
        ACC_ERR_INVALID_ARGUMENT,
        "environment variable ACCELERATE_LOG_LEVEL=\"%s\" is not a log level: use DEBUG, "
        "INFO, WARNING, ERROR, CRITICAL or a number",
        acc__env_str("ACCELERATE_LOG_LEVEL"));
  }
  *out = lv;
  return ACC_OK;
}

int acc__logger_effective_level(const acc_logger *lg) {
  if (lg->level != ACC_UNSET) return lg->level;
  int lv;
  (void)read_env_level(&lv); /* an invalid value was reported by acc_get_logger */
  return lv;
}

static int valid_level(int level) { return level >= 0 && level <= 100; }

acc_result acc_get_logger(const char *name, int level, acc_logger **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_get_logger: out is NULL");
  *out = NULL;
  if (!name || !*name)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_get_logger: name is NULL or empty");
  if (level != ACC_UNSET && !valid_level(level))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_get_logger(\"%s\"): level %d is not in 0..100",
                      name, level);
  if (level == ACC_UNSET) {
    int lv;
    ACC_CHECK(read_env_level(&lv));
  }
  pthread_mutex_lock(&reg_mu);
  acc_logger *lg = loggers;
  while (lg && strcmp(lg->name, name) != 0) lg = lg->next;
  if (!lg) {
    size_t len = strlen(name);
    lg = calloc(1, sizeof *lg + len + 1);
    if (!lg) {
      pthread_mutex_unlock(&reg_mu);
      return acc__error(ACC_ERR_NOMEM, "acc_get_logger: out of memory for logger \"%s\"", name);
    }
    lg->magic = LOGGER_MAGIC;
    lg->level = ACC_UNSET;
    memcpy(lg->name, name, len + 1);
    lg->next = loggers;
    loggers = lg;
  }
  if (level != ACC_UNSET) lg->level = level;
  pthread_mutex_unlock(&reg_mu);
  *out = lg;
  return ACC_OK;
}

int acc__logger_ok(const acc_logger *lg) { return lg && lg->magic == LOGGER_MAGIC; }

acc_result acc_logger_set_level(acc_logger *lg, int level) {
  if (!acc__logger_ok(lg))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_logger_set_level: not a logger");
  if (level != ACC_UNSET && !valid_level(level))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_logger_set_level(\"%s\"): level %d is not in 0..100", lg->name, level);
  lg->level = level;
  return ACC_OK;
}

int acc_logger_level(const acc_logger *lg) { return acc__logger_ok(lg) ? acc__logger_effective_level(lg) : -1; }

int acc_logger_enabled(const acc_logger *lg, int level) {
  return acc__logger_ok(lg) && level >= acc__logger_effective_level(lg);
}

/* ---- the sink -------------------------------------------------------------------------------- */

/* Expands %h, %p, %r and %% of ACCELERATE_LOG_FILE. Returns 0, or -1 when it does not fit. */
static int expand_path(const char *pattern, char *out, size_t cap) {
  size_t o = 0;
  char piece[300];
  for (const char *s = pattern; *s; s++) {
    const char *add = piece;
    if (*s == '%' && s[1]) {
      s++;
      if (*s == 'h') {
        if (gethostname(piece, sizeof piece - 1) != 0) strcpy(piece, "localhost");
        piece[sizeof piece - 1] = '\0';
      } else if (*s == 'p') {
        snprintf(piece, sizeof piece, "%ld", (long)getpid());
      } else if (*s == 'r') {
        snprintf(piece, sizeof piece, "%d", acc__obs_rank());
      } else if (*s == '%') {
        strcpy(piece, "%");
      } else {
        snprintf(piece, sizeof piece, "%%%c", *s);
      }
    } else {
      piece[0] = *s;
      piece[1] = '\0';
    }
    size_t n = strlen(add);
    if (o + n >= cap) return -1;
    memcpy(out + o, add, n);
    o += n;
  }
  out[o] = '\0';
  return 0;
}

/* Under term_mu. */
static int sink(void) {
  if (sink_fd >= 0) return sink_fd;
  sink_fd = STDERR_FILENO;
  const char *pattern = acc__env_str("ACCELERATE_LOG_FILE");
  if (!pattern || !*pattern) return sink_fd;
  char path[4096];
  if (expand_path(pattern, path, sizeof path) != 0) {
    fprintf(stderr,
            "accelerate: ACCELERATE_LOG_FILE=\"%s\" expands to a path that is too long; logging to "
            "stderr\n",
            pattern);
    return sink_fd;
  }
  char *slash = strrchr(path, '/');
  if (slash && slash != path) { /* create the file's directory */
    *slash = '\0';
    (void)acc__mkdirs(path);
    *slash = '/';
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "accelerate: cannot open ACCELERATE_LOG_FILE \"%s\": %s; logging to stderr\n",
            path, strerror(errno));
    return sink_fd;
  }
  sink_fd = fd;
  snprintf(sink_path, sizeof sink_path, "%s", path);
  return sink_fd;
}

/* 0, or the errno of the write that failed. */
static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Under term_mu: a line that could not be written to the log file (disk full, /dev/full, an I/O
 * error) is not lost silently: the first such failure of this process is said on stderr, with the
 * line itself. Later failures stay quiet (a full disk would otherwise double every line). */
static void report_lost(int err, const char *line, size_t n) {
  if (sink_lost_said) return;
  sink_lost_said = 1;
  char msg[4400];
  int m = snprintf(msg, sizeof msg, "accelerate: cannot write to ACCELERATE_LOG_FILE \"%s\": %s; log lines of this "
                   "process are being lost (said once). The first lost line:\n", sink_path, strerror(err));
  if (overlay_hide) overlay_hide();
  if (m > 0) (void)write_all(STDERR_FILENO, msg, (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1);
  (void)write_all(STDERR_FILENO, line, n);
  if (overlay_show) overlay_show();
}

void acc__log_emit(const acc_logger *lg, int level, int rank, const char *fmt, va_list ap) {
  char stack[1024], *line = stack;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  time_t secs = tv.tv_sec;
  localtime_r(&secs, &tm);
  int head =
      snprintf(stack, sizeof stack, "[RANK %d] %02d:%02d:%02d.%03d %s %s: ", rank, tm.tm_hour,
               tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000), acc_log_level_name(level), lg->name);
  if (head < 0 || (size_t)head >= sizeof stack) head = 0;
  va_list aq;
  va_copy(aq, ap);
  int body = vsnprintf(stack + head, sizeof stack - (size_t)head, fmt, aq);
  va_end(aq);
  if (body < 0) body = 0;
  size_t total = (size_t)head + (size_t)body;
  if (total + 2 > sizeof stack) {
    line = malloc(total + 2);
    if (line) {
      memcpy(line, stack, (size_t)head);
      vsnprintf(line + head, (size_t)body + 1, fmt, ap);
    } else {
      line = stack;
      total = sizeof stack - 2;
    }
  }
  while (total > 0 && line[total - 1] == '\n') total--; /* one newline, ours */
  line[total++] = '\n';
  acc__term_lock();
  int fd = sink();
  if (fd == STDERR_FILENO && overlay_hide) overlay_hide();
  int err = write_all(fd, line, total);
  if (err && fd != STDERR_FILENO) report_lost(err, line, total);
  if (fd == STDERR_FILENO && overlay_show) overlay_show();
  acc__term_unlock();
  if (line != stack) free(line);
}

void acc_log(acc_logger *lg, int level, const char *fmt, ...) {
  if (!acc__logger_ok(lg) || !fmt || level < acc__logger_effective_level(lg)) return;
  int rank = acc__obs_rank();
  if (rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  acc__log_emit(lg, level, rank, fmt, ap);
  va_end(ap);
}

void acc__log(int level, const char *fmt, ...) {
  static acc_logger *lib;
  if (!lib && acc_get_logger("accelerate", ACC_UNSET, &lib) != ACC_OK) {
    if (acc_get_logger("accelerate", ACC_LOG_DEFAULT_LEVEL, &lib) != ACC_OK) return;
  }
  if (level < acc__logger_effective_level(lib) || acc__obs_rank() != 0) return;
  va_list ap;
  va_start(ap, fmt);
  acc__log_emit(lib, level, 0, fmt, ap);
  va_end(ap);
}

int acc__vprint_if(int cond, const char *fmt, va_list ap) {
  if (!cond) return 0;
  int n = vprintf(fmt, ap);
  fflush(stdout);
  return n;
}
