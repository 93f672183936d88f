/* Helpers for the launcher tests: run a command with a hang guard and capture its output. */
#ifndef LAUNCH_UTIL_H
#define LAUNCH_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct run_out {
  int status; /* exit status, 128 + signal if killed, -1 if the hang guard fired */
  double secs;
  char out[65536], err[65536];
} run_out;

static inline double lu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void lu_read_file(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static inline int lu_file_exists(const char *dir, const char *name) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static char lu_capdir[64];

/* The capture directory is the test's own: removed when the test exits (it leaked one per run). */
static inline void lu_cleanup_capdir(void) {
  char path[256];
  if (!lu_capdir[0]) return;
  snprintf(path, sizeof path, "%s/out", lu_capdir);
  unlink(path);
  snprintf(path, sizeof path, "%s/err", lu_capdir);
  unlink(path);
  rmdir(lu_capdir);
}

/* Starts argv with env changes ("K=V" sets, "K" unsets); stdout/stderr go to capture files. */
static inline pid_t lu_start(char *const argv[], const char *const *envmod) {
  if (!lu_capdir[0]) {
    snprintf(lu_capdir, sizeof lu_capdir, "/tmp/acc-launch-test-XXXXXX");
    if (!mkdtemp(lu_capdir)) return -1;
    atexit(lu_cleanup_capdir);
  }
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    for (const char *const *e = envmod; e && *e; e++) {
      const char *eq = strchr(*e, '=');
      if (eq) {
        char k[256];
        snprintf(k, sizeof k, "%.*s", (int)(eq - *e), *e);
        setenv(k, eq + 1, 1);
      } else {
        unsetenv(*e);
      }
    }
    char path[256];
    snprintf(path, sizeof path, "%s/out", lu_capdir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    snprintf(path, sizeof path, "%s/err", lu_capdir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    execv(argv[0], argv);
    _exit(126);
  }
  return p;
}

/* Waits for p (hang guard: timeout_s, then SIGKILL) and fills r. */
static inline void lu_finish(pid_t p, double t0, double timeout_s, run_out *r) {
  int st = 0;
  r->status = -1;
  for (;;) {
    pid_t w = waitpid(p, &st, WNOHANG);
    if (w == p) {
      r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (lu_now() - t0 > timeout_s) {
      kill(p, SIGKILL);
      waitpid(p, &st, 0);
      r->status = -1;
      break;
    }
    usleep(1000);
  }
  r->secs = lu_now() - t0;
  char path[256];
  snprintf(path, sizeof path, "%s/out", lu_capdir);
  lu_read_file(path, r->out, sizeof r->out);
  snprintf(path, sizeof path, "%s/err", lu_capdir);
  lu_read_file(path, r->err, sizeof r->err);
}

static inline void lu_run(run_out *r, char *const argv[], const char *const *envmod) {
  double t0 = lu_now();
  pid_t p = lu_start(argv, envmod);
  lu_finish(p, t0, 20.0, r);
}

/* 1 when this process (a child subreaper) has no child left: nothing was orphaned or left a
 * zombie. Waits up to 5 s for processes that are being killed, reaping them. */
static inline int lu_no_leftovers(void) {
  double t0 = lu_now();
  for (;;) {
    int st;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid > 0) {
      char path[64], cmd[256];
      snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)si.si_pid);
      lu_read_file(path, cmd, sizeof cmd);
      fprintf(stderr, "note: leftover %ld code %d status %d cmd '%s'\n", (long)si.si_pid,
              si.si_code, si.si_status, cmd);
    }
    pid_t w = waitpid(-1, &st, WNOHANG);
    if (w < 0 && errno == ECHILD) return 1;
    if (w > 0) {
      fprintf(stderr, "note: reaped leftover process %ld\n", (long)w);
      return 0;
    }
    if (lu_now() - t0 > 5.0) return 0;
    usleep(1000);
  }
}

static inline void lu_make_dir(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/acc-launch-dir-XXXXXX");
  if (!mkdtemp(buf)) buf[0] = '\0';
}

static inline void lu_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

static inline int lu_count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

#endif
