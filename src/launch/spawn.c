/* Process-group spawning and monitoring (see spawn.h). Linux: signalfd, prctl. */
#include "launch/spawn.h"

#include "backend/rdzv.h"

#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- small helpers ------------------------------------------------------------------------ */


void acc__spawn_run_id(char *buf, size_t cap) {
  static unsigned counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(buf, cap, "%ld%ld%09ld%u", (long)getpid(), (long)(ts.tv_sec % 100000), (long)ts.tv_nsec,
           counter++);
}

int acc__spawn_remove_segments(const char *run_id) {
  if (!run_id || !*run_id) return 0;
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "acc-", 4) == 0 && strstr(e->d_name, run_id)) {
      char path[512];
      snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
      if (unlink(path) == 0) n++;
    }
  }
  closedir(d);
  return n;
}

/* ---- per-process bookkeeping -------------------------------------------------------------- */

#define LINE_CAP 65536

typedef struct stream {
  int fd;       /* read end of the pipe, -1 when closed / unused */
  int out_fd;   /* 1 or 2: where prefixed lines go */
  int log_fd;   /* raw copy (tee + log_dir), -1 if none */
  char *buf;    /* partial line */
  size_t len;
} stream;

typedef struct proc {
  pid_t pid;
  int alive;
  int rank;
  int death_fd; /* fork mode: read end that hangs up when the child exits */
  stream s[2];  /* stdout, stderr */
} proc;

typedef struct monitor {
  const acc__spawn_opts *o;
  proc *p;
  int alive;
  pid_t pgid;
  int sigfd;
  sigset_t old_mask;
  int terminating; /* SIGTERM sent to everyone */
  int killed;      /* SIGKILL sent to everyone */
  double deadline; /* when terminating: SIGKILL time */
  acc__spawn_result *res;
  int stop_fd; /* o->stop_fd while watched, else -1 */
  int blame_pending;     /* res holds a rank that failed because of another (ACC_ERR_REMOTE) */
  double blame_deadline; /* until when its cause may still exit */
} monitor;

static void signal_all(monitor *m, int sig) {
  if (m->o->new_pgroup && m->pgid > 0) killpg(m->pgid, sig);
  for (int i = 0; i < m->o->nprocs; i++)
    if (m->p[i].alive && m->p[i].pid > 0) kill(m->p[i].pid, sig);
}

static void emit_line(stream *s, int rank, const char *line, size_t n, int add_newline) {
  if (s->out_fd < 0) return; /* muted on the console: the log file got the bytes */
  char prefix[32];
  int pl = snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
  size_t total = (size_t)pl + n + (add_newline ? 1 : 0);
  char stackbuf[1024];
  char *out = total <= sizeof stackbuf ? stackbuf : malloc(total);
  if (!out) return;
  memcpy(out, prefix, (size_t)pl);
  memcpy(out + pl, line, n);
  if (add_newline) out[total - 1] = '\n';
  size_t off = 0;
  while (off < total) {
    ssize_t w = write(s->out_fd, out + off, total - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  if (out != stackbuf) free(out);
}

static void write_all(int fd, const char *b, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    b += w;
    n -= (size_t)w;
  }
}

/* Reads what is available on s; emits complete lines. Returns 0 at EOF (stream closed). */
static int pump(stream *s, int rank) {
  char tmp[8192];
  ssize_t r = read(s->fd, tmp, sizeof tmp);
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
  if (r <= 0) {
    if (s->len > 0) emit_line(s, rank, s->buf, s->len, 1);
    s->len = 0;
    close(s->fd);
    s->fd = -1;
    return 0;
  }
  if (s->log_fd >= 0) write_all(s->log_fd, tmp, (size_t)r);
  for (ssize_t i = 0; i < r; i++) {
    s->buf[s->len++] = tmp[i];
    if (tmp[i] == '\n' || s->len == LINE_CAP) {
      emit_line(s, rank, s->buf, s->len, tmp[i] != '\n');
      s->len = 0;
    }
  }
  return 1;
}

/* The group's first failure is final: report it, tell the other machines, stop the others. */
static void finalize_failure(monitor *m) {
  acc__spawn_result *res = m->res;
  if (m->o->on_failure)
    m->o->on_failure(m->o->hook_ctx, res->failed_rank, res->term_signal != 0, res->message);
  if (!m->o->quiet) {
    if (m->alive > 0)
      fprintf(stderr, "%s: %s; stopping the other %d rank%s\n", m->o->who, res->message, m->alive,
              m->alive == 1 ? "" : "s");
    else
      fprintf(stderr, "%s: %s\n", m->o->who, res->message);
  }
  if (m->alive > 0) {
    m->terminating = 1;
    m->deadline = acc__now() + m->o->grace_s;
    signal_all(m, SIGTERM);
  }
}

static void record_exit(monitor *m, proc *p, int st) {
  p->alive = 0;
  m->alive--;
  /* first, before any SIGTERM: siblings still rendezvousing learn it from the board */
  if (m->o->has_board) acc__board_record(m->o->board_fd, (int)(p - m->p), p->pid, st);
  int failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  acc__spawn_result *res = m->res;
  if (!failed || res->interrupted || m->terminating) return;
  if (res->failed_rank >= 0 && !m->blame_pending) return;
  /* The rank's last library error (its note on the board, src/state/last_words.c): a rank that
   * exited with ACC_ERR_REMOTE failed because another did. */
  int note_rc = 0;
  char note[ACC_BOARD_NOTE_MSG];
  if (m->o->has_board) acc__board_read_note(m->o->board_fd, (int)(p - m->p), &note_rc, note, sizeof note);
  int consequence = WIFEXITED(st) && note_rc == ACC_ERR_REMOTE;
  if (m->blame_pending && consequence) return; /* the first consequence stays, waiting */
  char first[96] = "";
  if (m->blame_pending) {
    snprintf(first, sizeof first, " (rank %d exited before it, with status %d, because of it)",
             res->failed_rank, res->exit_code);
    m->blame_pending = 0;
  }
  res->failed_rank = p->rank;
  res->term_signal = res->exit_code = 0;
  int k;
  if (WIFSIGNALED(st)) {
    res->term_signal = WTERMSIG(st);
    res->status = 128 + res->term_signal;
    k = snprintf(res->message, sizeof res->message, "rank %d (pid %ld) was killed by %s (%s)", p->rank,
                 (long)p->pid, acc__signal_name(res->term_signal), strsignal(res->term_signal));
  } else {
    res->exit_code = WEXITSTATUS(st);
    res->status = res->exit_code;
    k = snprintf(res->message, sizeof res->message, "rank %d (pid %ld) exited with status %d",
                 p->rank, (long)p->pid, res->exit_code);
  }
  size_t used = k > 0 && (size_t)k < sizeof res->message ? (size_t)k : sizeof res->message - 1;
  /* "its last library error": the program may have handled that error and exited for a reason
   * of its own, so the report does not call it the cause */
  if (note_rc != 0 && !WIFSIGNALED(st))
    used += (size_t)snprintf(res->message + used, sizeof res->message - used, " (its last library error: %s)", note);
  if (used < sizeof res->message) snprintf(res->message + used, sizeof res->message - used, "%s", first);
  if (consequence && m->alive > 0) {
    /* Wait (at most the grace period) for the rank that caused it to exit with its own error;
     * the others are not signalled meanwhile, so that their own exits tell. */
    m->blame_pending = 1;
    m->blame_deadline = acc__now() + m->o->grace_s;
    return;
  }
  finalize_failure(m);
}

static void reap(monitor *m) {
  if (m->o->subreaper) {
    int st;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0)
      for (int i = 0; i < m->o->nprocs; i++)
        if (m->p[i].alive && m->p[i].pid == r) record_exit(m, &m->p[i], st);
    /* anything else was an orphaned descendant: reaped, nothing to record */
    return;
  }
  for (int i = 0; i < m->o->nprocs; i++) {
    proc *p = &m->p[i];
    if (!p->alive) continue;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
      record_exit(m, p, st);
    } else if (r < 0 && errno == ECHILD) { /* reaped elsewhere (SIGCHLD ignored): count as gone */
      p->alive = 0;
      m->alive--;
    }
  }
}

static void on_signal(monitor *m, int sig) {
  if (sig == SIGCHLD || sig == SIGPIPE) return;
  if (m->res->interrupted || m->killed) {
    if (!m->killed) {
      if (!m->o->quiet)
        fprintf(stderr, "%s: received %s again; killing the ranks\n", m->o->who,
                acc__signal_name(sig));
      signal_all(m, SIGKILL);
      m->killed = 1;
    }
    return;
  }
  m->res->interrupted = sig;
  if (m->o->on_interrupt) m->o->on_interrupt(m->o->hook_ctx, sig);
  if (!m->o->quiet)
    fprintf(stderr, "%s: received %s; forwarding it to %d rank%s\n", m->o->who,
            acc__signal_name(sig), m->alive, m->alive == 1 ? "" : "s");
  signal_all(m, sig);
  if (!m->terminating) {
    m->terminating = 1;
    m->deadline = acc__now() + m->o->grace_s;
  }
}

/* ---- starting the children ---------------------------------------------------------------- */

static void close_all_fds(monitor *m) {
  for (int i = 0; i < m->o->nprocs; i++) {
    proc *p = &m->p[i];
    if (p->death_fd >= 0) close(p->death_fd);
    for (int k = 0; k < 2; k++) {
      if (p->s[k].fd >= 0) close(p->s[k].fd);
      if (p->s[k].log_fd >= 0) close(p->s[k].log_fd);
    }
  }
  if (m->sigfd >= 0) close(m->sigfd);
}

/* --enable_cpu_affinity: pins the calling child (local process i) to the (i mod n)-th of the n
 * CPUs in its inherited mask. Only syscalls and bit operations (runs between fork and exec). */
static void bind_cpu(const acc__spawn_opts *o, int i) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int n = CPU_COUNT(&allowed);
  if (n < 1) return;
  int want = i % n, cpu = -1;
  for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed) && k++ == want) {
      cpu = c;
      break;
    }
  if (cpu < 0) return;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    char msg[256];
    int len = snprintf(msg, sizeof msg, "%s: --enable_cpu_affinity: cannot pin rank %d to CPU %d: %s "
                       "(the rank runs unpinned)\n", o->who, o->ranks ? o->ranks[i] : i, cpu,
                       strerror(errno));
    if (len > 0) write_all(2, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
  }
}

/* Runs in the child after fork. Never returns. */
static void child_main(monitor *m, int i, pid_t parent, int out_fd[2], int death_w) {
  const acc__spawn_opts *o = m->o;
  if (o->new_pgroup) setpgid(0, m->pgid > 0 ? m->pgid : 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  if (o->null_stdin) {
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0 && nul != 0) {
      dup2(nul, 0);
      close(nul);
    }
  }
  for (int k = 0; k < 2; k++)
    if (out_fd[k] >= 0 && dup2(out_fd[k], k + 1) < 0) _exit(126);
  for (int k = 0; k < 2; k++)
    if (out_fd[k] >= 0) close(out_fd[k]);
  close_all_fds(m); /* the parent's ends, and other ranks' pipes */
  if (o->has_board) fcntl(o->board_fd, F_SETFD, 0); /* inherited across exec */
  sigprocmask(SIG_SETMASK, &m->old_mask, NULL);
  if (o->bind_cpus) bind_cpu(o, i);
  environ = (char **)o->envs[i];
  if (o->argv) {
    execvp(o->argv[0], o->argv);
    int e = errno;
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s: cannot run '%s': %s\n", o->who, o->argv[0], strerror(e));
    if (n > 0) write_all(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(e == ENOENT ? 127 : 126);
  }
  int rc = o->fn(o->payload);
  fflush(NULL);
  (void)death_w; /* closes on _exit */
  _exit(rc == 0 ? 0 : (rc > 0 && rc < 256 ? rc : 1));
}

static int open_log(const acc__spawn_opts *o, int rank, const char *which, int *out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/rank%d.%s.log", o->log_dir, rank, which);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (o->log_append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) {
    acc__error(ACC_ERR_IO, "cannot open the log file %s for rank %d: %s", path, rank,
               strerror(errno));
    return -1;
  }
  *out = fd;
  return 0;
}

static acc_result start_one(monitor *m, int i) {
  const acc__spawn_opts *o = m->o;
  proc *p = &m->p[i];
  int child_fd[2] = {-1, -1}; /* what becomes the child's stdout / stderr */
  int death[2] = {-1, -1};
  acc_result rc = ACC_OK;
  for (int k = 0; k < 2; k++) {
    int teed = (o->tee & (k == 0 ? ACC__TEE_STDOUT : ACC__TEE_STDERR)) != 0;
    int log_fd = -1;
    if (o->log_dir && open_log(o, p->rank, k == 0 ? "stdout" : "stderr", &log_fd) != 0) {
      rc = ACC_ERR_IO;
      goto fail;
    }
    if (teed) {
      int pf[2];
      if (pipe2(pf, O_CLOEXEC) != 0) {
        if (log_fd >= 0) close(log_fd);
        rc = acc__error(ACC_ERR_SYSTEM, "cannot create an output pipe for rank %d: %s", p->rank,
                        strerror(errno));
        goto fail;
      }
      p->s[k].fd = pf[0];
      p->s[k].log_fd = log_fd;
      p->s[k].out_fd = o->muted && o->muted[i] ? -1 : k + 1;
      p->s[k].buf = malloc(LINE_CAP);
      if (!p->s[k].buf) {
        close(pf[1]);
        rc = acc__error(ACC_ERR_NOMEM, "cannot allocate the output buffer of rank %d", p->rank);
        goto fail;
      }
      child_fd[k] = pf[1];
    } else {
      child_fd[k] = log_fd; /* -1: inherit */
      if (log_fd < 0 && o->muted && o->muted[i]) {
        child_fd[k] = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (child_fd[k] < 0) {
          rc = acc__error(ACC_ERR_SYSTEM, "cannot open /dev/null for rank %d: %s", p->rank, strerror(errno));
          goto fail;
        }
      }
    }
  }
  if (!o->argv) {
    if (pipe2(death, O_CLOEXEC) != 0) {
      rc = acc__error(ACC_ERR_SYSTEM, "cannot create a pipe for rank %d: %s", p->rank,
                      strerror(errno));
      goto fail;
    }
    p->death_fd = death[0];
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    rc = acc__error(ACC_ERR_SYSTEM, "cannot start rank %d: fork failed: %s", p->rank,
                    strerror(errno));
    goto fail;
  }
  if (pid == 0) child_main(m, i, parent, child_fd, death[1]);
  p->pid = pid;
  p->alive = 1;
  m->alive++;
  if (o->new_pgroup) {
    if (m->pgid == 0) m->pgid = pid;
    setpgid(pid, m->pgid); /* also done by the child: whichever runs first wins, no race */
  }
fail:
  for (int k = 0; k < 2; k++)
    if (child_fd[k] >= 0) close(child_fd[k]);
  if (death[1] >= 0) close(death[1]);
  return rc;
}

/* ---- the monitor loop --------------------------------------------------------------------- */

/* The other machines' failure (or the loss of the store): stop this machine's group. */
static void on_stop_fd(monitor *m) {
  char msg[768] = "";
  int stop = m->o->on_stop ? m->o->on_stop(m->o->hook_ctx, msg, sizeof msg) : 0;
  m->stop_fd = -1;
  acc__spawn_result *res = m->res;
  if (!stop || (res->failed_rank >= 0 && !m->blame_pending) || res->interrupted || m->terminating)
    return;
  m->blame_pending = 0; /* a failure on another machine is the cause */
  res->failed_rank = -1;
  res->exit_code = res->term_signal = 0;
  res->remote = 1;
  res->status = 1;
  snprintf(res->message, sizeof res->message, "%s", msg);
  if (!m->o->quiet)
    fprintf(stderr, "%s: %s; stopping the %d rank%s of this machine\n", m->o->who, msg, m->alive,
            m->alive == 1 ? "" : "s");
  if (m->alive > 0) {
    m->terminating = 1;
    m->deadline = acc__now() + m->o->grace_s;
    signal_all(m, SIGTERM);
  }
}

static void run_loop(monitor *m) {
  const acc__spawn_opts *o = m->o;
  int n = o->nprocs;
  struct pollfd *fds = calloc((size_t)(3 * n + 2), sizeof *fds);
  int *owner = calloc((size_t)(3 * n + 2), sizeof *owner); /* proc*4 + kind (0,1 out, 2 death) */
  if (!fds || !owner) { /* fall back to a plain blocking wait */
    free(fds);
    free(owner);
    while (m->alive > 0) {
      int st;
      pid_t r = waitpid(-1, &st, 0);
      if (r < 0 && errno != EINTR) break;
      for (int i = 0; i < n; i++)
        if (m->p[i].alive && m->p[i].pid == r) record_exit(m, &m->p[i], st);
    }
    return;
  }
  int draining_since_set = 0;
  double draining_since = 0;
  for (;;) {
    reap(m);
    if (m->blame_pending && (m->res->interrupted || m->terminating)) {
      m->blame_pending = 0; /* interrupted meanwhile: that is what is reported */
    } else if (m->blame_pending && (m->alive == 0 || acc__now() >= m->blame_deadline)) {
      m->blame_pending = 0;
      finalize_failure(m);
    }
    int open_streams = 0;
    for (int i = 0; i < n; i++)
      for (int k = 0; k < 2; k++) open_streams += m->p[i].s[k].fd >= 0;
    if (m->alive == 0) {
      if (open_streams == 0) break;
      /* Descendants may still hold the pipes: drain for a short while, then stop. */
      if (!draining_since_set) {
        draining_since_set = 1;
        draining_since = acc__now();
      } else if (acc__now() - draining_since > 0.2) {
        break;
      }
    }
    int nf = 0;
    if (m->sigfd >= 0) {
      fds[nf] = (struct pollfd){.fd = m->sigfd, .events = POLLIN};
      owner[nf++] = -1;
    }
    if (m->stop_fd > 0) {
      fds[nf] = (struct pollfd){.fd = m->stop_fd, .events = POLLIN};
      owner[nf++] = -2;
    }
    for (int i = 0; i < n; i++) {
      proc *p = &m->p[i];
      for (int k = 0; k < 2; k++)
        if (p->s[k].fd >= 0) {
          fds[nf] = (struct pollfd){.fd = p->s[k].fd, .events = POLLIN};
          owner[nf++] = i * 4 + k;
        }
      if (p->death_fd >= 0) {
        fds[nf] = (struct pollfd){.fd = p->death_fd, .events = POLLIN};
        owner[nf++] = i * 4 + 2;
      }
    }
    double wait_s = o->monitor_interval_s > 0 ? o->monitor_interval_s : 0.1;
    if (m->terminating && !m->killed) {
      double left = m->deadline - acc__now();
      if (left < wait_s) wait_s = left < 0 ? 0 : left;
    }
    if (m->blame_pending) {
      double left = m->blame_deadline - acc__now();
      if (left < wait_s) wait_s = left < 0 ? 0 : left;
    }
    if (m->alive == 0) wait_s = 0.05;
    /* fork mode: a hung-up death pipe means that child is exiting but may not be reapable yet */
    if (!o->argv)
      for (int i = 0; i < n; i++)
        if (m->p[i].alive && m->p[i].death_fd < 0 && wait_s > 0.001) wait_s = 0.001;
    int timeout_ms = (int)(wait_s * 1000.0 + 0.999);
    int r = poll(fds, (nfds_t)nf, timeout_ms);
    if (r > 0) {
      for (int j = 0; j < nf; j++) {
        if (!fds[j].revents) continue;
        if (owner[j] == -2) {
          on_stop_fd(m);
          continue;
        }
        if (owner[j] < 0) {
          struct signalfd_siginfo si;
          while (read(m->sigfd, &si, sizeof si) == (ssize_t)sizeof si) on_signal(m, (int)si.ssi_signo);
          continue;
        }
        proc *p = &m->p[owner[j] / 4];
        int kind = owner[j] % 4;
        if (kind == 2) {
          close(p->death_fd);
          p->death_fd = -1;
        } else {
          pump(&p->s[kind], p->rank);
        }
      }
    }
    if (m->terminating && !m->killed && m->alive > 0 && acc__now() >= m->deadline) {
      if (!o->quiet)
        fprintf(stderr, "%s: %d rank%s still running %.3g s after SIGTERM; sending SIGKILL\n", o->who,
                m->alive, m->alive == 1 ? "" : "s", o->grace_s);
      signal_all(m, SIGKILL);
      m->killed = 1;
    }
  }
  free(fds);
  free(owner);
}

acc_result acc__spawn_run(const acc__spawn_opts *o, acc__spawn_result *out) {
  if (!o || !out || o->nprocs < 1 || (!o->argv && !o->fn) || !o->envs || !o->ranks)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__spawn_run: incomplete options");
  memset(out, 0, sizeof *out);
  out->failed_rank = -1;
  monitor m = {.o = o, .sigfd = -1, .res = out, .stop_fd = o->stop_fd > 0 ? o->stop_fd : -1};
  m.p = calloc((size_t)o->nprocs, sizeof *m.p);
  if (!m.p) return acc__error(ACC_ERR_NOMEM, "cannot allocate the table of %d processes", o->nprocs);
  for (int i = 0; i < o->nprocs; i++) {
    m.p[i].rank = o->ranks[i];
    m.p[i].death_fd = -1;
    for (int k = 0; k < 2; k++) m.p[i].s[k] = (stream){.fd = -1, .log_fd = -1};
  }
  /* Signals: the CLI reads them from a signalfd (no handler, nothing inherited by the children);
   * the mask is restored in each child before exec. SIGPIPE is blocked so that writing prefixed
   * output to a closed terminal pipe fails with EPIPE instead of killing the launcher. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  if (o->forward_signals) {
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT);
  }
  pthread_sigmask(SIG_BLOCK, &set, &m.old_mask);
  if (o->forward_signals) {
    sigdelset(&set, SIGPIPE);
    m.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  }
  if (o->subreaper) prctl(PR_SET_CHILD_SUBREAPER, 1);
  acc_result rc = ACC_OK;
  for (int i = 0; i < o->nprocs && rc == ACC_OK; i++) rc = start_one(&m, i);
  if (rc != ACC_OK) {
    /* Could not start everyone: stop those already running. */
    m.terminating = 1;
    signal_all(&m, SIGKILL);
    m.killed = 1;
    for (int i = 0; i < o->nprocs; i++)
      if (m.p[i].alive) {
        waitpid(m.p[i].pid, NULL, 0);
        m.p[i].alive = 0;
      }
    m.alive = 0;
  } else {
    run_loop(&m);
  }
  if (rc == ACC_OK && (out->failed_rank >= 0 || out->interrupted) && o->new_pgroup && m.pgid > 0) {
    killpg(m.pgid, SIGKILL); /* descendants left behind by the ranks */
    if (o->subreaper) { /* they were reparented to us: reap them (bounded) */
      double t0 = acc__now();
      while (acc__now() - t0 < 2.0) {
        pid_t r = waitpid(-1, NULL, WNOHANG);
        if (r < 0) break; /* ECHILD: none left */
        if (r == 0) poll(NULL, 0, 1);
      }
    }
  }
  if (o->subreaper)
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
  if (out->interrupted) out->status = 128 + out->interrupted;
  close_all_fds(&m);
  for (int i = 0; i < o->nprocs; i++)
    for (int k = 0; k < 2; k++) free(m.p[i].s[k].buf);
  free(m.p);
  /* Drop what arrived while blocked and must not fire on unblock (SIGCHLD, SIGPIPE). */
  sigset_t drop;
  sigemptyset(&drop);
  sigaddset(&drop, SIGPIPE);
  if (o->forward_signals) sigaddset(&drop, SIGCHLD);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&drop, NULL, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &m.old_mask, NULL);
  return rc;
}
