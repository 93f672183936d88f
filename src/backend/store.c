/* The rendezvous store's client and wire helpers (src/backend/store.h). Blocking requests with
 * poll-bounded waits; one request in flight per connection. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/store.h"
#include "backend/store_wire.h"
#include "core/env.h"

struct acc__store {
  int fd;
  int broken; /* a timed-out request left a reply in flight */
  int pending; /* a GET sent by acc__store_get_start whose reply was not read */
  char where[300];
  char prefix[32]; /* prepended to every key (acc__store_set_prefix) */
  int machine;     /* the machine rank the store gave a launcher without one, else -1 */
};

int acc__store_machine(const acc__store *s) { return s ? s->machine : -1; }

void acc__store_failed_key(int generation, char *buf, size_t cap) {
  if (generation <= 0) snprintf(buf, cap, "%s", ACC_STORE_FAILED_KEY);
  else snprintf(buf, cap, "%s/%d", ACC_STORE_FAILED_KEY, generation);
}

acc_result acc__store_set_prefix(acc__store *s, const char *prefix) {
  if (prefix && strlen(prefix) >= sizeof s->prefix)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: key prefix '%s' too long", prefix);
  snprintf(s->prefix, sizeof s->prefix, "%s", prefix ? prefix : "");
  return ACC_OK;
}

/* key with the connection's prefix (into buf, ACC_STORE_MAX_KEY + 1 + sizeof prefix) */
static const char *prefixed(const acc__store *s, const char *key, char *buf, size_t cap) {
  if (!key || !s->prefix[0]) return key;
  snprintf(buf, cap, "%s%s", s->prefix, key);
  return buf;
}

/* ---- wire ---------------------------------------------------------------------------------- */

int acc__store_io(int fd, void *buf, size_t n, int writing, double deadline) {
  char *p = buf;
  while (n > 0) {
    int wait_ms = -1;
    if (deadline > 0) {
      double left = deadline - acc__now();
      if (left <= 0) return -2;
      wait_ms = (int)(left * 1000.0) + 1;
    }
    struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
    int r = poll(&pfd, 1, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return -2;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int acc__store_send_frame(int fd, uint8_t head, const char *key, size_t klen, const void *val,
                          size_t vlen, double deadline) {
  size_t hdr = key ? 1 + 2 + klen : 1;
  uint8_t *b = malloc(4 + hdr + vlen);
  if (!b) return -1;
  uint32_t len = (uint32_t)(hdr + vlen);
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(len >> (8 * i));
  b[4] = head;
  size_t o = 5;
  if (key) {
    b[o++] = (uint8_t)(klen & 0xff);
    b[o++] = (uint8_t)(klen >> 8);
    memcpy(b + o, key, klen);
    o += klen;
  }
  if (vlen) memcpy(b + o, val, vlen);
  int r = acc__store_io(fd, b, 4 + hdr + vlen, 1, deadline);
  free(b);
  return r;
}

void acc__store_keepalive(int fd, double t) {
  if (t <= 0) return;
  int idle = (int)(t / 3), intvl = (int)(t / 6), cnt = 6;
  if (idle < 1) idle = 1;
  if (intvl < 1) intvl = 1;
  unsigned ut = (unsigned)(t * 1000.0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
}

acc_result acc__store_partition_timeout(double *out) {
  *out = 30.0;
  int set = 0;
  return acc__env_double("ACCELERATE_PARTITION_TIMEOUT", out, &set);
}

void acc__store_peer_name(const struct sockaddr_storage *ss, unsigned len, char *buf, size_t cap) {
  char h[INET6_ADDRSTRLEN + 8] = "?", p[16] = "?";
  getnameinfo((const struct sockaddr *)ss, (socklen_t)len, h, sizeof h, p, sizeof p,
              NI_NUMERICHOST | NI_NUMERICSERV);
  if (strncmp(h, "::ffff:", 7) == 0 && strchr(h + 7, '.')) snprintf(buf, cap, "%s:%s", h + 7, p);
  else if (strchr(h, ':')) snprintf(buf, cap, "[%s]:%s", h, p);
  else snprintf(buf, cap, "%s:%s", h, p);
}

void acc__store_printable(char *buf, size_t cap, const char *src, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)src;
  size_t o = 0;
  if (!cap) return;
  for (size_t i = 0; i < n && o + 1 < cap;) {
    unsigned c = u[i];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    int ok = len > 0 && i + len <= n && (c >= 0x20 || len > 1) && c != 0x7f;
    for (size_t j = 1; ok && j < len; j++) ok = (u[i + j] & 0xc0) == 0x80;
    if (ok && len == 2 && c == 0xc2 && u[i + 1] < 0xa0) ok = 0; /* C1 controls */
    if (ok && len == 2 && c < 0xc2) ok = 0;                     /* overlong */
    if (ok) {
      if (o + len >= cap) break;
      memcpy(buf + o, u + i, len);
      o += len;
      i += len;
    } else {
      if (o + 4 >= cap) break;
      buf[o++] = '\\';
      buf[o++] = 'x';
      buf[o++] = hex[c >> 4];
      buf[o++] = hex[c & 15];
      i++;
    }
  }
  buf[o] = 0;
}

/* ---- client -------------------------------------------------------------------------------- */

void acc__store_lost_message(char *buf, size_t cap, const char *where) {
  time_t t = time(NULL);
  struct tm tm;
  char ts[32];
  gmtime_r(&t, &tm);
  strftime(ts, sizeof ts, "%H:%M:%S UTC", &tm);
  snprintf(buf, cap,
           "lost the rendezvous store at %s at %s (its host, machine 0's launcher or rank 0, "
           "exited or was killed, or the network between the machines failed)",
           where, ts);
}

static acc_result broken_error(acc__store *s, const char *what, int r) {
  s->broken = 1;
  if (r == -2)
    return acc__error(ACC_ERR_TIMEOUT, "rendezvous store at %s: %s timed out", s->where, what);
  char lost[512];
  acc__store_lost_message(lost, sizeof lost, s->where);
  return acc__error(ACC_ERR_REMOTE, "%s during %s", lost, what);
}

/* One request and its reply. *val (malloc'd by the library allocator, NUL-terminated) when
 * val is non-NULL. */
static acc_result request(acc__store *s, uint8_t op, const char *key, const void *v, size_t vn,
                          uint8_t *status, void **val, size_t *n, double timeout_s,
                          const char *what) {
  char pk[ACC_STORE_MAX_KEY + 64];
  if (op != ACC_STORE_OP_HELLO && op != ACC_STORE_OP_BYE) key = prefixed(s, key, pk, sizeof pk);
  if (s->broken)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "rendezvous store at %s: the connection is unusable after an earlier "
                      "timeout or loss",
                      s->where);
  size_t klen = key ? strlen(key) : 0;
  if (klen > ACC_STORE_MAX_KEY)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: key of %zu bytes (at most %d)",
                      klen, ACC_STORE_MAX_KEY);
  if (vn > ACC_STORE_MAX_VALUE)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "rendezvous store: value of %zu bytes for key '%s' (at most %u)", vn,
                      key ? key : "", ACC_STORE_MAX_VALUE);
  double deadline = timeout_s >= 0 ? acc__now() + timeout_s : 0;
  int r = acc__store_send_frame(s->fd, op, key ? key : "", klen, v, vn, deadline);
  if (r) return broken_error(s, what, r);
  uint8_t lb[4];
  if ((r = acc__store_io(s->fd, lb, 4, 0, deadline))) return broken_error(s, what, r);
  uint32_t len = (uint32_t)lb[0] | (uint32_t)lb[1] << 8 | (uint32_t)lb[2] << 16 | (uint32_t)lb[3] << 24;
  if (len < 1 || len > ACC_STORE_MAX_VALUE + 1) {
    s->broken = 1;
    return acc__error(ACC_ERR_FORMAT,
                      "rendezvous store at %s: malformed reply (%u bytes) to %s: is this port "
                      "another program's?",
                      s->where, len, what);
  }
  uint8_t *b = acc__malloc((size_t)len + 1);
  if (!b) return ACC_ERR_NOMEM;
  if ((r = acc__store_io(s->fd, b, len, 0, deadline))) {
    acc__free(b);
    return broken_error(s, what, r);
  }
  *status = b[0];
  size_t vl = len - 1;
  if (*status == ACC_STORE_ST_ERR) {
    char msg[1024];
    acc__store_printable(msg, sizeof msg, (char *)b + 1, vl);
    acc__free(b);
    return acc__error(ACC_ERR_MISMATCH, "rendezvous store at %s refused %s: %s", s->where,
                      what, msg);
  }
  if (val) {
    memmove(b, b + 1, vl);
    b[vl] = 0;
    *val = b;
    if (n) *n = vl;
  } else {
    acc__free(b);
  }
  return ACC_OK;
}

/* *err: an errno, or (*gai set) a getaddrinfo code. */
static int connect_once(const char *host, int port, int *err, int *gai, double deadline) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(host, ps, &hints, &res);
  *gai = 0;
  if (g != 0) {
    *err = g;
    *gai = 1;
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      *err = errno;
      continue;
    }
    int c = connect(fd, a->ai_addr, a->ai_addrlen);
    if (c < 0 && errno == EINPROGRESS) {
      double left = deadline - acc__now();
      int ms = left > 1.0 ? 1000 : (left > 0 ? (int)(left * 1000) + 1 : 1);
      struct pollfd pfd = {fd, POLLOUT, 0};
      int pr;
      do pr = poll(&pfd, 1, ms);
      while (pr < 0 && errno == EINTR);
      if (pr == 1) {
        int so = 0;
        socklen_t sl = sizeof so;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
        c = so ? -1 : 0;
        errno = so;
      } else {
        c = -1;
        errno = ETIMEDOUT;
      }
    }
    if (c == 0) break;
    *err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

acc_result acc__store_connect(acc__store **out, const char *host, int port,
                              const acc__store_hello *h, double timeout_s) {
  *out = NULL;
  if (!host || !*host || port <= 0 || port > 65535)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: invalid address '%s:%d'",
                      host ? host : "", port);
  double part = 0;
  ACC_CHECK(acc__store_partition_timeout(&part));
  /* "[::1]" (a bracketed IPv6 address, as in URLs) is "::1" */
  char bare[256];
  size_t hl = strlen(host);
  if (host[0] == '[' && hl > 2 && host[hl - 1] == ']' && hl - 2 < sizeof bare) {
    snprintf(bare, sizeof bare, "%.*s", (int)(hl - 2), host + 1);
  } else {
    snprintf(bare, sizeof bare, "%s", host);
  }
  double t0 = acc__now(), deadline = t0 + timeout_s;
  int err = 0, gai = 0, fd = -1;
  double pause = 0.005;
  for (;;) {
    fd = connect_once(bare, port, &err, &gai, deadline);
    if (fd >= 0 || acc__now() >= deadline) break;
    /* The server may not listen yet (the other machines' launchers start in any order): retry
     * with a growing pause, bounded by the deadline. */
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, NULL);
    if (pause < 0.2) pause *= 2;
  }
  if (fd < 0)
    return acc__error(ACC_ERR_TIMEOUT,
                      "cannot reach the rendezvous store at %s:%d after %.1f s (%s): is machine "
                      "0's `accelerate launch` (or rank 0) running, and are --main_process_ip / "
                      "--main_process_port (MASTER_ADDR / MASTER_PORT) right?",
                      host, port, acc__now() - t0, gai ? gai_strerror(err) : strerror(err));
  acc__store_keepalive(fd, part);
  acc__store *s = acc__calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return ACC_ERR_NOMEM;
  }
  s->fd = fd;
  snprintf(s->where, sizeof s->where, "%s:%d", host, port);
  char hello[1024];
  int hn = snprintf(hello, sizeof hello, "%s\n%s\n%s\n%s\n%d %d %d %d %d %d %d", ACC_STORE_PROTO,
                    ACC_VERSION_STRING, h->run_id ? h->run_id : "default",
                    h->secret ? h->secret : "", h->kind, h->machine_rank, h->num_machines,
                    h->world_size, h->rank, h->generation, h->max_restarts);
  if (hn < 0 || (size_t)hn >= sizeof hello) {
    acc__store_close(s);
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: run id or secret too long");
  }
  uint8_t st = 0;
  double left = deadline - acc__now();
  void *given = NULL;
  size_t gn = 0;
  s->machine = -1;
  acc_result rc = request(s, ACC_STORE_OP_HELLO, "", hello, (size_t)hn, &st, &given, &gn,
                          left > 5 ? left : 5, "this client (HELLO)");
  if (rc != ACC_OK) {
    acc__store_close(s);
    return rc;
  }
  if (gn > 0) s->machine = atoi(given);
  acc__free(given);
  *out = s;
  return ACC_OK;
}

acc_result acc__store_set(acc__store *s, const char *key, const void *val, size_t n) {
  uint8_t st;
  return request(s, ACC_STORE_OP_SET, key, val, n, &st, NULL, NULL, 60, "set");
}

acc_result acc__store_get(acc__store *s, const char *key, void **val, size_t *n, double timeout_s) {
  uint8_t st;
  char what[ACC_STORE_MAX_KEY + 32];
  snprintf(what, sizeof what, "the wait for key '%s'", key);
  return request(s, ACC_STORE_OP_GET, key, NULL, 0, &st, val, n, timeout_s, what);
}

acc_result acc__store_add(acc__store *s, const char *key, int64_t delta, int64_t *out) {
  char d[32];
  int dn = snprintf(d, sizeof d, "%lld", (long long)delta);
  uint8_t st;
  void *v = NULL;
  ACC_CHECK(request(s, ACC_STORE_OP_ADD, key, d, (size_t)dn, &st, &v, NULL, 60, "add"));
  if (out) *out = strtoll(v, NULL, 10);
  acc__free(v);
  return ACC_OK;
}

acc_result acc__store_check(acc__store *s, const char *key, int *exists) {
  uint8_t st;
  ACC_CHECK(request(s, ACC_STORE_OP_CHECK, key, NULL, 0, &st, NULL, NULL, 60, "check"));
  *exists = st == ACC_STORE_ST_OK;
  return ACC_OK;
}

/* Reads one reply frame: 0 with the status and the value (malloc, NUL-terminated), or an io error. */
static int read_reply(acc__store *s, uint8_t *status, char **val, size_t *n, double deadline) {
  uint8_t lb[4];
  int r = acc__store_io(s->fd, lb, 4, 0, deadline);
  if (r) return r;
  uint32_t len = (uint32_t)lb[0] | (uint32_t)lb[1] << 8 | (uint32_t)lb[2] << 16 | (uint32_t)lb[3] << 24;
  if (len < 1 || len > ACC_STORE_MAX_VALUE + 1) return -1;
  char *b = malloc((size_t)len + 1);
  if (!b) return -1;
  if ((r = acc__store_io(s->fd, b, len, 0, deadline))) {
    free(b);
    return r;
  }
  *status = (uint8_t)b[0];
  memmove(b, b + 1, len - 1);
  b[len - 1] = 0;
  *val = b;
  *n = len - 1;
  return 0;
}

acc_result acc__store_get_start(acc__store *s, const char *key) {
  if (s->broken || s->pending)
    return acc__error(ACC_ERR_INVALID_USAGE, "rendezvous store at %s: a request is in flight",
                      s->where);
  char pk[ACC_STORE_MAX_KEY + 64];
  key = prefixed(s, key, pk, sizeof pk);
  int r = acc__store_send_frame(s->fd, ACC_STORE_OP_GET, key, strlen(key), NULL, 0,
                                acc__now() + 10);
  if (r) return broken_error(s, "a watch", r);
  s->pending = 1;
  return ACC_OK;
}

int acc__store_get_finish(acc__store *s, char *msg, size_t cap) {
  uint8_t st = 0;
  char *v = NULL;
  size_t n = 0;
  int r = read_reply(s, &st, &v, &n, acc__now() + 5);
  s->pending = 0;
  if (r) {
    s->broken = 1;
    return -1;
  }
  acc__store_printable(msg, cap, v, n);
  free(v);
  return st == ACC_STORE_ST_OK ? 1 : -1;
}

acc_result acc__store_bye(acc__store *s) {
  uint8_t st;
  if (!s->pending) return request(s, ACC_STORE_OP_BYE, "", NULL, 0, &st, NULL, NULL, 10, "bye");
  /* A watch is parked on the server: its reply, if it comes, is a non-empty value; BYE's is
   * empty. */
  double deadline = acc__now() + 10;
  int r = acc__store_send_frame(s->fd, ACC_STORE_OP_BYE, "", 0, NULL, 0, deadline);
  if (r) return broken_error(s, "bye", r);
  for (int i = 0; i < 2; i++) {
    char *v = NULL;
    size_t n = 0;
    if ((r = read_reply(s, &st, &v, &n, deadline))) return broken_error(s, "bye", r);
    free(v);
    if (n == 0) return ACC_OK;
    s->pending = 0;
  }
  return ACC_OK;
}

int acc__store_fd(const acc__store *s) { return s ? s->fd : -1; }

int acc__store_local_addr(acc__store *s, char *buf, size_t cap) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (!s || getsockname(s->fd, (struct sockaddr *)&ss, &sl) != 0) return -1;
  return getnameinfo((struct sockaddr *)&ss, sl, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) ? -1 : 0;
}

void acc__store_close(acc__store *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  acc__free(s);
}

/* ---- the secret ---------------------------------------------------------------------------- */

acc_result acc__store_secret(char *out, size_t cap) {
  out[0] = 0;
  const char *v = acc__env_str(ACC_STORE_SECRET_ENV);
  if (v && *v) {
    if (strlen(v) >= cap || strchr(v, '\n'))
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: the secret must be one line of at most %zu characters",
                        ACC_STORE_SECRET_ENV, cap - 1);
    snprintf(out, cap, "%s", v);
    return ACC_OK;
  }
  const char *path = acc__env_str(ACC_STORE_SECRET_FILE_ENV);
  if (!path || !*path) return ACC_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return acc__error(ACC_ERR_IO, "%s=%s: cannot read the secret file: %s",
                      ACC_STORE_SECRET_FILE_ENV, path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode) || (sb.st_mode & 077)) {
    close(fd);
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s=%s: the secret file must be a regular file readable only by its owner "
                      "(chmod 600)",
                      ACC_STORE_SECRET_FILE_ENV, path);
  }
  ssize_t k = read(fd, out, cap - 1);
  close(fd);
  if (k < 0) k = 0;
  out[k] = 0;
  char *nl = strchr(out, '\n');
  if (nl) *nl = 0;
  if (!out[0])
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s=%s: the secret file is empty",
                      ACC_STORE_SECRET_FILE_ENV, path);
  return ACC_OK;
}
