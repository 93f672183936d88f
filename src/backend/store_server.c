/* The rendezvous store's server (src/backend/store.h): one thread, poll over the listening
 * socket and every connection, a small key/value table with bounded memory. A GET of a missing
 * key is parked until a SET or ADD creates it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/store.h"
#include "backend/store_wire.h"

#define MAX_CLIENTS 4096
#define MAX_TOTAL_BYTES (64u << 20)

typedef struct kv {
  char *key;
  uint8_t *val;
  size_t n;
} kv;

typedef struct client {
  int fd;
  int hello;  /* HELLO accepted */
  int kind, machine_rank, rank;
  int bye;
  char *wait_key; /* parked GET */
  uint8_t *in;    /* partial frame */
  size_t in_n, in_cap;
  char peer[64];
} client;

struct acc__store_server {
  int lfd, port;
  int wake[2];
  pthread_t thread;
  pthread_mutex_t mu;
  int stopping; /* under mu */
  double stop_deadline;
  int draining; /* the server thread's copy of stopping */
  char run_id[128], secret[256];
  int num_machines, world_size, max_restarts;
  unsigned char *machine_seen;
  int *rank_gen; /* per rank: the newest launch attempt a process of that rank joined, or -1 */
  int gen;       /* the newest launch attempt whose failure key a launcher watches */
  client *cl;
  size_t ncl;
  kv *kv;
  size_t nkv, kv_cap, bytes;
};

static kv *kv_find(acc__store_server *s, const char *key) {
  for (size_t i = 0; i < s->nkv; i++)
    if (strcmp(s->kv[i].key, key) == 0) return &s->kv[i];
  return NULL;
}

static int kv_put(acc__store_server *s, const char *key, const void *v, size_t n) {
  kv *e = kv_find(s, key);
  if (s->bytes + n > MAX_TOTAL_BYTES) return -1;
  uint8_t *copy = malloc(n ? n : 1);
  if (!copy) return -1;
  if (n) memcpy(copy, v, n);
  if (e) {
    s->bytes -= e->n;
    free(e->val);
  } else {
    if (s->nkv == s->kv_cap) {
      size_t cap = s->kv_cap ? 2 * s->kv_cap : 64;
      kv *t = realloc(s->kv, cap * sizeof *t);
      if (!t) {
        free(copy);
        return -1;
      }
      s->kv = t;
      s->kv_cap = cap;
    }
    e = &s->kv[s->nkv];
    e->key = strdup(key);
    if (!e->key) {
      free(copy);
      return -1;
    }
    s->nkv++;
  }
  e->val = copy;
  e->n = n;
  s->bytes += n;
  return 0;
}

static int reply(client *c, uint8_t st, const void *v, size_t n) {
  return acc__store_send_frame(c->fd, st, NULL, 0, v, n, acc__now() + 10.0);
}

static int reply_err(client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reply_err(client *c, const char *fmt, ...) {
  char m[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  return reply(c, ACC_STORE_ST_ERR, m, strlen(m));
}

/* Answers the parked GETs of key. */
static void wake_waiters(acc__store_server *s, const kv *e) {
  for (size_t i = 0; i < s->ncl; i++) {
    client *c = &s->cl[i];
    if (c->fd >= 0 && c->wait_key && strcmp(c->wait_key, e->key) == 0) {
      free(c->wait_key);
      c->wait_key = NULL;
      if (reply(c, ACC_STORE_ST_OK, e->val, e->n)) {
        close(c->fd);
        c->fd = -1;
      }
    }
  }
}

static int is_failed_key(const char *key) {
  size_t n = strlen(ACC_STORE_FAILED_KEY);
  return strncmp(key, ACC_STORE_FAILED_KEY, n) == 0 && (key[n] == 0 || key[n] == '/');
}

static void post_failure(acc__store_server *s, const char *msg) {
  char key[64];
  acc__store_failed_key(s->gen, key, sizeof key);
  if (kv_find(s, key)) return; /* the first failure is the one reported */
  if (kv_put(s, key, msg, strlen(msg)) == 0) wake_waiters(s, kv_find(s, key));
}

static const char *kind_name(int k) {
  return k == ACC_STORE_LAUNCHER ? "launcher" : k == ACC_STORE_PROCESS ? "process" : "tool";
}

/* HELLO: "proto\nversion\nrun_id\nsecret\nkind machine num_machines world rank attempt
 * max_restarts". */
static int on_hello(acc__store_server *s, client *c, char *v) {
  char *f[5] = {0};
  for (int i = 0; i < 5; i++) {
    f[i] = v;
    char *nl = i < 4 ? strchr(v, '\n') : NULL;
    if (i < 4 && !nl) return reply_err(c, "malformed HELLO (is this an accelerate-c client?)");
    if (nl) {
      *nl = 0;
      v = nl + 1;
    }
  }
  if (strcmp(f[0], ACC_STORE_PROTO) != 0)
    return reply_err(c, "protocol '%s', the store speaks '%s'", f[0], ACC_STORE_PROTO);
  int kind = 0, mr = -1, nm = 0, ws = 0, rank = -1, gen = 0, maxr = 0;
  if (sscanf(f[4], "%d %d %d %d %d %d %d", &kind, &mr, &nm, &ws, &rank, &gen, &maxr) != 7 || gen < 0)
    return reply_err(c, "malformed HELLO numbers '%s'", f[4]);
  if (strcmp(f[1], ACC_VERSION_STRING) != 0)
    return reply_err(c,
                     "different library version: this %s (machine %d, %s) runs accelerate-c %s, "
                     "machine 0 runs %s; install the same version on every machine",
                     kind_name(kind), mr, c->peer, f[1], ACC_VERSION_STRING);
  if (strcmp(f[3], s->secret) != 0)
    return reply_err(c, s->secret[0] ? "wrong or missing shared secret (set %s or %s the same on "
                                       "every machine)"
                                     : "this client sends a shared secret but the store has none "
                                       "(set %s or %s the same on every machine)",
                     ACC_STORE_SECRET_ENV, ACC_STORE_SECRET_FILE_ENV);
  if (strcmp(f[2], s->run_id) != 0)
    return reply_err(c,
                     "run id '%s' but this store belongs to the job with run id '%s': another "
                     "job uses this port; give each job its own --main_process_port or --rdzv_id",
                     f[2], s->run_id);
  if (kind == ACC_STORE_LAUNCHER || kind == ACC_STORE_PROCESS) {
    if (nm != s->num_machines)
      return reply_err(c, "the %s of machine %d says num_machines %d, machine 0 says %d",
                       kind_name(kind), mr, nm, s->num_machines);
    if (ws != s->world_size)
      return reply_err(c, "the %s of machine %d says num_processes %d, machine 0 says %d",
                       kind_name(kind), mr, ws, s->world_size);
    if (mr < 0 || mr >= nm) return reply_err(c, "machine rank %d is not in 0..%d", mr, nm - 1);
  }
  if (kind == ACC_STORE_LAUNCHER) {
    if (s->machine_seen[mr])
      return reply_err(c,
                       "two launchers with machine_rank %d: %s is the second; give every "
                       "machine its own --machine_rank 0..%d",
                       mr, c->peer, nm - 1);
    if (maxr != s->max_restarts)
      return reply_err(c,
                       "the launcher of machine %d says --max_restarts %d, machine 0 says %d: "
                       "every machine's launcher must give the same",
                       mr, maxr, s->max_restarts);
    s->machine_seen[mr] = 1;
  } else if (kind == ACC_STORE_PROCESS) {
    if (rank < 0 || rank >= ws) return reply_err(c, "rank %d is not in 0..%d", rank, ws - 1);
    if (s->rank_gen[rank] == gen)
      return reply_err(c, "two processes with rank %d (the second from %s, machine %d)", rank,
                       c->peer, mr);
    if (s->rank_gen[rank] > gen)
      return reply_err(c,
                       "rank %d of launch attempt %d (from %s, machine %d) came after attempt %d "
                       "began: a process of a stopped group outlived it",
                       rank, gen, c->peer, mr, s->rank_gen[rank]);
    s->rank_gen[rank] = gen;
  } else if (kind != ACC_STORE_TOOL) {
    return reply_err(c, "unknown client kind %d", kind);
  }
  c->hello = 1;
  c->kind = kind;
  c->machine_rank = mr;
  c->rank = rank;
  return reply(c, ACC_STORE_ST_OK, NULL, 0);
}

/* One complete frame from c; nonzero: drop the connection. */
static int on_frame(acc__store_server *s, client *c, uint8_t *b, size_t n) {
  if (n < 3) return -1;
  uint8_t op = b[0];
  size_t klen = (size_t)b[1] | (size_t)b[2] << 8;
  if (3 + klen > n || klen > ACC_STORE_MAX_KEY) return -1;
  char key[ACC_STORE_MAX_KEY + 1];
  memcpy(key, b + 3, klen);
  key[klen] = 0;
  uint8_t *v = b + 3 + klen;
  size_t vn = n - 3 - klen;
  if (!c->hello && op != ACC_STORE_OP_HELLO) return -1;
  switch (op) {
    case ACC_STORE_OP_HELLO: {
      if (c->hello) return reply_err(c, "HELLO twice");
      char *t = malloc(vn + 1);
      if (!t) return -1;
      memcpy(t, v, vn);
      t[vn] = 0;
      int r = on_hello(s, c, t);
      free(t);
      return r ? r : (c->hello ? 0 : 1); /* a refused client is dropped after the reply */
    }
    case ACC_STORE_OP_SET:
      if (is_failed_key(key) && kv_find(s, key)) /* the first stays */
        return reply(c, ACC_STORE_ST_OK, NULL, 0);
      if (kv_put(s, key, v, vn)) return reply_err(c, "store full (%u bytes)", MAX_TOTAL_BYTES);
      if (reply(c, ACC_STORE_ST_OK, NULL, 0)) return -1;
      wake_waiters(s, kv_find(s, key));
      return 0;
    case ACC_STORE_OP_GET: {
      if (c->kind == ACC_STORE_LAUNCHER && is_failed_key(key)) { /* a launcher's watch */
        int g = key[strlen(ACC_STORE_FAILED_KEY)] ? atoi(key + strlen(ACC_STORE_FAILED_KEY) + 1) : 0;
        if (g > s->gen) s->gen = g;
      }
      kv *e = kv_find(s, key);
      if (e) return reply(c, ACC_STORE_ST_OK, e->val, e->n);
      free(c->wait_key);
      c->wait_key = strdup(key);
      return c->wait_key ? 0 : -1;
    }
    case ACC_STORE_OP_ADD: {
      char d[32];
      size_t dn = vn < sizeof d - 1 ? vn : sizeof d - 1;
      memcpy(d, v, dn);
      d[dn] = 0;
      long long cur = 0;
      kv *e = kv_find(s, key);
      if (e) {
        char t[32];
        size_t tn = e->n < sizeof t - 1 ? e->n : sizeof t - 1;
        memcpy(t, e->val, tn);
        t[tn] = 0;
        cur = strtoll(t, NULL, 10);
      }
      cur += strtoll(d, NULL, 10);
      char o[32];
      int on = snprintf(o, sizeof o, "%lld", cur);
      if (kv_put(s, key, o, (size_t)on)) return reply_err(c, "store full");
      if (reply(c, ACC_STORE_ST_OK, o, (size_t)on)) return -1;
      wake_waiters(s, kv_find(s, key));
      return 0;
    }
    case ACC_STORE_OP_CHECK:
      return reply(c, kv_find(s, key) ? ACC_STORE_ST_OK : ACC_STORE_ST_MISSING, NULL, 0);
    case ACC_STORE_OP_BYE:
      c->bye = 1;
      return reply(c, ACC_STORE_ST_OK, NULL, 0);
  }
  return reply_err(c, "unknown operation %u", op);
}

static void drop(acc__store_server *s, client *c) {
  if (c->fd < 0) return;
  close(c->fd);
  c->fd = -1;
  if (c->hello && c->kind == ACC_STORE_LAUNCHER && !c->bye && !s->draining) {
    char m[300];
    snprintf(m, sizeof m,
             "the launcher of machine %d (%s) lost its connection to the rendezvous store: it was "
             "killed, or the network between the machines failed",
             c->machine_rank, c->peer);
    post_failure(s, m);
  }
  free(c->wait_key);
  c->wait_key = NULL;
  free(c->in);
  c->in = NULL;
  c->in_n = c->in_cap = 0;
}

/* Reads what c sent; handles every complete frame. */
static void on_readable(acc__store_server *s, client *c) {
  if (c->in_cap - c->in_n < 4096) {
    const size_t most = 4 + 3 + ACC_STORE_MAX_KEY + ACC_STORE_MAX_VALUE + 4096;
    size_t cap = c->in_cap ? 2 * c->in_cap : 8192;
    if (cap > most) cap = most;
    if (cap <= c->in_cap) { /* a frame longer than any valid one */
      drop(s, c);
      return;
    }
    uint8_t *t = realloc(c->in, cap);
    if (!t) {
      drop(s, c);
      return;
    }
    c->in = t;
    c->in_cap = cap;
  }
  ssize_t k = recv(c->fd, c->in + c->in_n, c->in_cap - c->in_n, MSG_DONTWAIT);
  if (k < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (k <= 0) {
    drop(s, c);
    return;
  }
  c->in_n += (size_t)k;
  while (c->fd >= 0 && c->in_n >= 4) {
    uint32_t len = (uint32_t)c->in[0] | (uint32_t)c->in[1] << 8 | (uint32_t)c->in[2] << 16 |
                   (uint32_t)c->in[3] << 24;
    if (len > 3 + ACC_STORE_MAX_KEY + ACC_STORE_MAX_VALUE) {
      drop(s, c);
      return;
    }
    if (c->in_n < 4 + (size_t)len) return;
    if (on_frame(s, c, c->in + 4, len)) {
      drop(s, c);
      return;
    }
    memmove(c->in, c->in + 4 + len, c->in_n - 4 - len);
    c->in_n -= 4 + len;
  }
}

static void on_accept(acc__store_server *s) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
  if (fd < 0) return;
  size_t slot = s->ncl;
  for (size_t i = 0; i < s->ncl; i++)
    if (s->cl[i].fd < 0) {
      slot = i;
      break;
    }
  if (slot == s->ncl) {
    if (s->ncl == MAX_CLIENTS) {
      close(fd);
      return;
    }
    s->ncl++;
  }
  client *c = &s->cl[slot];
  memset(c, 0, sizeof *c);
  c->fd = fd;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char h[INET6_ADDRSTRLEN] = "?", p[16] = "?";
  getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(c->peer, sizeof c->peer, "%s:%s", h, p);
}

static int launchers_left(const acc__store_server *s) {
  int n = 0;
  for (size_t i = 0; i < s->ncl; i++)
    if (s->cl[i].fd >= 0 && s->cl[i].hello && s->cl[i].kind == ACC_STORE_LAUNCHER &&
        s->cl[i].machine_rank != 0 && !s->cl[i].bye)
      n++;
  return n;
}

static void *serve(void *arg) {
  acc__store_server *s = arg;
  struct pollfd *p = calloc(MAX_CLIENTS + 2, sizeof *p);
  size_t *idx = calloc(MAX_CLIENTS + 2, sizeof *idx);
  if (!p || !idx) {
    free(p);
    free(idx);
    return NULL;
  }
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    double dl = s->stop_deadline;
    pthread_mutex_unlock(&s->mu);
    s->draining = stopping;
    if (stopping && (launchers_left(s) == 0 || acc__now() >= dl)) break;
    size_t np = 0;
    p[np++] = (struct pollfd){s->wake[0], POLLIN, 0};
    p[np++] = (struct pollfd){s->lfd, POLLIN, 0};
    for (size_t i = 0; i < s->ncl; i++)
      if (s->cl[i].fd >= 0) {
        idx[np] = i;
        p[np++] = (struct pollfd){s->cl[i].fd, POLLIN, 0};
      }
    int r = poll(p, np, stopping ? 50 : -1);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (p[0].revents) {
      char b[64];
      (void)!read(s->wake[0], b, sizeof b);
    }
    if (p[1].revents & POLLIN) on_accept(s);
    for (size_t j = 2; j < np; j++)
      if (p[j].revents) on_readable(s, &s->cl[idx[j]]);
  }
  free(p);
  free(idx);
  return NULL;
}

acc_result acc__store_server_start(acc__store_server **out, const char *host, int port,
                                   const acc__store_hello *expect) {
  *out = NULL;
  if (expect->num_machines < 1 || expect->world_size < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: invalid job size");
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: cannot resolve '%s': %s",
                      host ? host : "*", gai_strerror(g));
  int fd = -1, err = 0;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 512) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    return acc__error(ACC_ERR_SYSTEM,
                      "cannot host the rendezvous store on %s:%d: %s%s", host ? host : "*", port,
                      strerror(err),
                      err == EADDRINUSE ? " (another job, or another program, uses this port: "
                                          "choose another --main_process_port)"
                                        : "");
  acc__store_server *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return ACC_ERR_NOMEM;
  }
  s->lfd = fd;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
  snprintf(s->run_id, sizeof s->run_id, "%s", expect->run_id ? expect->run_id : "default");
  snprintf(s->secret, sizeof s->secret, "%s", expect->secret ? expect->secret : "");
  s->num_machines = expect->num_machines;
  s->world_size = expect->world_size;
  s->max_restarts = expect->max_restarts;
  s->machine_seen = calloc((size_t)s->num_machines, 1);
  s->rank_gen = malloc((size_t)s->world_size * sizeof *s->rank_gen);
  for (int i = 0; s->rank_gen && i < s->world_size; i++) s->rank_gen[i] = -1;
  s->cl = calloc(MAX_CLIENTS, sizeof *s->cl);
  pthread_mutex_init(&s->mu, NULL);
  if (!s->machine_seen || !s->rank_gen || !s->cl || pipe2(s->wake, O_CLOEXEC) != 0 ||
      pthread_create(&s->thread, NULL, serve, s) != 0) {
    close(fd);
    free(s->machine_seen);
    free(s->rank_gen);
    free(s->cl);
    free(s);
    return acc__error(ACC_ERR_SYSTEM, "rendezvous store: cannot start its thread");
  }
  *out = s;
  return ACC_OK;
}

int acc__store_server_port(const acc__store_server *s) { return s ? s->port : 0; }

void acc__store_server_stop(acc__store_server *s, double timeout_s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  s->stop_deadline = acc__now() + timeout_s;
  pthread_mutex_unlock(&s->mu);
  (void)!write(s->wake[1], "x", 1);
  pthread_join(s->thread, NULL);
  for (size_t i = 0; i < s->ncl; i++) {
    if (s->cl[i].fd >= 0) close(s->cl[i].fd);
    free(s->cl[i].wait_key);
    free(s->cl[i].in);
  }
  for (size_t i = 0; i < s->nkv; i++) {
    free(s->kv[i].key);
    free(s->kv[i].val);
  }
  close(s->lfd);
  close(s->wake[0]);
  close(s->wake[1]);
  pthread_mutex_destroy(&s->mu);
  free(s->kv);
  free(s->cl);
  free(s->machine_seen);
  free(s->rank_gen);
  free(s);
}
