/* A launcher's part of a job on several machines (src/launch/machines.h). */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/store.h"
#include "launch/machines.h"

struct acc__machines {
  acc__machines_opts o;
  acc__store_server *server; /* machine 0 */
  acc__store *live;          /* the launcher connection: a watch on acc/failed */
  acc__store *post;          /* a second connection, to post and read failures */
  char host[256];
  int posted;
  int gen;           /* the launch attempt (ACCELERATE_RESTART_COUNT) */
  int watch_pending; /* the watch's reply was not read yet */
  char failed[64];   /* the failure key of this attempt */
};

/* 1 when host names an address of this machine (a socket binds to it). */
static int host_is_local(const char *host) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  if (!host || getaddrinfo(host, "0", &hints, &res) != 0) return 0;
  int local = 0;
  for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(res);
  return local;
}

int acc__machines_rank(const acc__machines *m) { return m ? m->o.machine_rank : -1; }

acc_result acc__machines_join(acc__machines **out, const acc__machines_opts *o) {
  *out = NULL;
  char secret[256];
  ACC_CHECK(acc__store_secret(secret, sizeof secret));
  acc__machines *m = acc__calloc(1, sizeof *m);
  if (!m) return ACC_ERR_NOMEM;
  m->o = *o;
  if (gethostname(m->host, sizeof m->host - 1) != 0) snprintf(m->host, sizeof m->host, "?");
  acc__store_hello h = {o->run_id, secret, ACC_STORE_LAUNCHER, o->machine_rank,
                        o->num_machines, o->world_size, -1, 0, o->max_restarts};
  acc_result rc = ACC_OK;
  if (o->machine_rank < 0 && host_is_local(o->host)) {
    /* no --machine_rank: the launcher on the host that owns --main_process_ip hosts the store
     * and is machine 0; when the port is taken, another launcher of this host got there first */
    h.machine_rank = 0;
    rc = acc__store_server_start(&m->server, NULL, o->port, &h);
    if (rc != ACC_OK && strstr(acc_last_error(), strerror(EADDRINUSE))) {
      acc_clear_error();
      rc = ACC_OK;
      h.machine_rank = -1;
    }
  } else if (o->machine_rank == 0) {
    rc = acc__store_server_start(&m->server, NULL, o->port, &h);
  }
  if (rc == ACC_OK) rc = acc__store_connect(&m->live, o->host, o->port, &h, o->timeout_s);
  if (rc == ACC_OK && h.machine_rank < 0) h.machine_rank = acc__store_machine(m->live);
  m->o.machine_rank = h.machine_rank;
  acc__store_hello t = h;
  t.kind = ACC_STORE_TOOL;
  if (rc == ACC_OK) rc = acc__store_connect(&m->post, o->host, o->port, &t, o->timeout_s);
  acc__store_failed_key(0, m->failed, sizeof m->failed);
  if (rc == ACC_OK) rc = acc__store_get_start(m->live, m->failed);
  m->watch_pending = rc == ACC_OK;
  if (rc != ACC_OK) {
    acc__store_close(m->live);
    acc__store_close(m->post);
    if (m->server) acc__store_server_stop(m->server, 0);
    acc__free(m);
    return rc;
  }
  *out = m;
  return ACC_OK;
}

static void on_failure(void *ctx, int rank, int signaled, const char *message) {
  acc__machines *m = ctx;
  (void)rank;
  if (m->posted) return;
  m->posted = 1;
  char msg[1024];
  snprintf(msg, sizeof msg, "on machine %d (%s), %s", m->o.machine_rank, m->host, message);
  /* A rank that exited with an error may only be the consequence of a failure elsewhere (its
   * collective lost a peer on another machine): give that failure up to a second to arrive, so
   * that the job's first failure names the cause. A rank killed by a signal is posted at once.
   * The store keeps the first failure posted. */
  int exists = 0;
  double until = acc__now() + (signaled ? 0.0 : 1.0);
  for (;;) {
    if (acc__store_check(m->post, m->failed, &exists) != ACC_OK || exists) break;
    if (acc__now() >= until) break;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!exists) acc__store_set(m->post, m->failed, msg, strlen(msg));
  acc_clear_error();
}

/* This launcher was told to stop (SIGTERM from scancel, a preemption, Ctrl-C): posted at once,
 * before the signal reaches the ranks, so that every machine names it rather than the ranks
 * whose peers then vanished. */
static void on_interrupt(void *ctx, int sig) {
  acc__machines *m = ctx;
  if (m->posted) return;
  m->posted = 1;
  char msg[512], ts[32];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(ts, sizeof ts, "%H:%M:%S UTC", &tm);
  snprintf(msg, sizeof msg, "machine %d's launcher (%s) received %s at %s and stopped its ranks",
           m->o.machine_rank, m->host, acc__signal_name(sig), ts);
  acc__store_set(m->post, m->failed, msg, strlen(msg));
  acc_clear_error();
}

static void lost(const acc__machines *m, char *msg, size_t cap) {
  char where[300];
  snprintf(where, sizeof where, "%s:%d", m->o.host, m->o.port);
  acc__store_lost_message(msg, cap, where);
}

static int on_stop(void *ctx, char *msg, size_t cap) {
  acc__machines *m = ctx;
  char v[1024];
  int r = acc__store_get_finish(m->live, v, sizeof v);
  m->watch_pending = 0;
  if (r == 1) {
    if (m->posted) return 0; /* our own failure came back */
    snprintf(msg, cap, "another machine failed: %s", v);
    return 1;
  }
  lost(m, msg, cap);
  return 1;
}

void acc__machines_hook(acc__machines *m, acc__spawn_opts *so) {
  m->posted = 0;
  so->on_failure = on_failure;
  so->on_interrupt = on_interrupt;
  so->on_stop = on_stop;
  so->hook_ctx = m;
  so->stop_fd = acc__store_fd(m->live);
}

void acc__machines_first_failure(acc__machines *m, char *buf, size_t cap, double timeout_s) {
  buf[0] = 0;
  void *v = NULL;
  size_t n = 0;
  if (acc__store_get(m->post, m->failed, &v, &n, timeout_s) == ACC_OK)
    acc__store_printable(buf, cap, v, n);
  acc__free(v);
  acc_clear_error();
}

acc_result acc__machines_restart(acc__machines *m, int next, char *why, size_t cap) {
  why[0] = 0;
  /* 1. this attempt's watch: its reply comes (a failure of this attempt was posted, by this
   * launcher or another) unless the store is gone */
  if (m->watch_pending) {
    struct pollfd p = {acc__store_fd(m->live), POLLIN, 0};
    int r = poll(&p, 1, (int)(m->o.timeout_s * 1000.0));
    char v[1024];
    if (r <= 0 || acc__store_get_finish(m->live, v, sizeof v) != 1) {
      lost(m, v, sizeof v);
      return acc__error(ACC_ERR_REMOTE, "cannot restart: %s", v);
    }
    m->watch_pending = 0;
  }
  /* every machine reports the same cause: the attempt's first failure */
  acc__machines_first_failure(m, why, cap, 2.0);
  /* 2. a barrier: no machine starts attempt `next` before every machine stopped this one */
  char key[64], done[64];
  snprintf(key, sizeof key, "acc/restart/%d", next);
  snprintf(done, sizeof done, "acc/restart/%d/all", next);
  int64_t n = 0;
  ACC_CHECK(acc__store_add(m->post, key, 1, &n));
  if (n == m->o.num_machines) ACC_CHECK(acc__store_set(m->post, done, "1", 1));
  acc_result rc = acc__store_get(m->post, done, NULL, NULL, m->o.timeout_s);
  if (rc == ACC_ERR_TIMEOUT)
    return acc__error(ACC_ERR_TIMEOUT,
                      "cannot restart: not every machine's launcher was ready for restart %d "
                      "within %.0f s (ACCELERATE_RDZV_TIMEOUT); one of them gave up (it was "
                      "interrupted, or it has another --max_restarts) or was stopped",
                      next, m->o.timeout_s);
  ACC_CHECK(rc);
  /* 3. watch the new attempt's failure key */
  m->gen = next;
  acc__store_failed_key(next, m->failed, sizeof m->failed);
  ACC_CHECK(acc__store_get_start(m->live, m->failed));
  m->watch_pending = 1;
  m->posted = 0;
  return ACC_OK;
}

void acc__machines_leave(acc__machines *m, double linger_s) {
  if (!m) return;
  acc__store_bye(m->live);
  acc_clear_error();
  acc__store_close(m->live);
  acc__store_close(m->post);
  if (m->server) acc__store_server_stop(m->server, linger_s);
  acc__free(m);
}
