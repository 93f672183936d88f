/* The rendezvous store's server (src/backend/store.h): one thread, poll over the listening
 * socket and every connection, a hashed key/value table; replies are queued per connection and
 * sent without blocking, so a client that does not read cannot stall the others. Everything it
 * holds counts against one memory budget; a connection that has not said HELLO gets a short
 * deadline and a small frame limit (docs/multi-machine.md, "The rendezvous store's limits"). A
 * GET of a missing key is parked until a SET or ADD creates it. */
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend/store.h"
#include "backend/store_wire.h"

/* Limits (docs/multi-machine.md, "The rendezvous store's limits"). Everything the store holds
 * counts against one budget, STORE_BUDGET: the keys and values (plus ENTRY_OVERHEAD each) and
 * every connection's input and output buffers. */
#define MAX_CLIENTS 4096
#define MAX_UNAUTH 512             /* connections that have not said HELLO yet */
#define HELLO_DEADLINE_S 5.0       /* to send a HELLO, from the accept */
#define HELLO_MAX_FRAME 2048       /* a frame before HELLO (a HELLO is < 1 KiB) */
#define OUT_QUEUE_MAX (4u << 20)   /* replies queued to one client that does not read them */
#define STORE_BUDGET (64u << 20)
#define ENTRY_OVERHEAD 64
#define ACCEPT_PAUSE_S 0.1         /* out of descriptors and nothing to drop: stop accepting */
#define MAX_LOGGED_PEERS 16        /* refused unauthenticated addresses logged once each */

typedef struct kv {
  char *key;
  uint8_t *val;
  size_t n;
  uint64_t h;
} kv;

typedef struct client {
  int fd;
  int hello;  /* HELLO accepted */
  int kind, machine_rank, rank;
  int bye;
  int closing;   /* refused: closed once its reply is out */
  double since;  /* accepted at (acc__now) */
  const char *why; /* why the store dropped it (NULL: the peer closed or failed) */
  char *wait_key; /* parked GET */
  uint8_t *in;    /* partial frame */
  size_t in_n, in_cap;
  uint8_t *out;   /* queued replies, from out_off */
  size_t out_off, out_n, out_cap;
  char peer[80];
} client;

struct acc__store_server {
  int lfd, port;
  int wake[2];
  pthread_t thread;
  pthread_mutex_t mu;
  int stopping; /* under mu */
  double stop_deadline;
  int draining; /* the server thread's copy of stopping */
  double accept_pause_until;
  char run_id[128], secret[256];
  int num_machines, world_size, max_restarts;
  unsigned char *machine_seen;
  int *rank_gen; /* per rank: the newest launch attempt a process of that rank joined, or -1 */
  int gen;       /* the newest launch attempt whose failure key a launcher watches */
  client *cl;
  size_t ncl;
  kv *kv;
  size_t nkv, kv_cap;
  uint32_t *slot; /* open addressing: 0 empty, else index into kv + 1 */
  size_t nslot;
  size_t mem; /* bytes counted against STORE_BUDGET */
  double partition_s; /* ACCELERATE_PARTITION_TIMEOUT, for every accepted connection */
  char logged[MAX_LOGGED_PEERS][80];
  int nlogged;
};

/* ---- the key/value table (hashed; keys are never removed) ------------------------------- */

static uint64_t hash_key(const char *k) {
  uint64_t h = 1469598103934665603ull;
  for (; *k; k++) h = (h ^ (uint8_t)*k) * 1099511628211ull;
  return h;
}

static kv *kv_find(acc__store_server *s, const char *key) {
  if (!s->nslot) return NULL;
  uint64_t h = hash_key(key);
  for (size_t i = h & (s->nslot - 1);; i = (i + 1) & (s->nslot - 1)) {
    uint32_t x = s->slot[i];
    if (!x) return NULL;
    kv *e = &s->kv[x - 1];
    if (e->h == h && strcmp(e->key, key) == 0) return e;
  }
}

static int kv_rehash(acc__store_server *s, size_t nslot) {
  uint32_t *t = calloc(nslot, sizeof *t);
  if (!t) return -1;
  for (size_t j = 0; j < s->nkv; j++) {
    size_t i = s->kv[j].h & (nslot - 1);
    while (t[i]) i = (i + 1) & (nslot - 1);
    t[i] = (uint32_t)(j + 1);
  }
  free(s->slot);
  s->slot = t;
  s->nslot = nslot;
  return 0;
}

/* 0, or -1 when the budget (or memory) does not allow it */
static int kv_put(acc__store_server *s, const char *key, const void *v, size_t n) {
  kv *e = kv_find(s, key);
  size_t klen = strlen(key);
  size_t need = e ? (n > e->n ? n - e->n : 0) : klen + 1 + n + ENTRY_OVERHEAD;
  if (s->mem + need > STORE_BUDGET) return -1;
  uint8_t *copy = malloc(n ? n : 1);
  if (!copy) return -1;
  if (n) memcpy(copy, v, n);
  if (e) {
    s->mem -= e->n;
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
    if (2 * (s->nkv + 1) > s->nslot && kv_rehash(s, s->nslot ? 2 * s->nslot : 128)) {
      free(copy);
      return -1;
    }
    e = &s->kv[s->nkv];
    e->key = strdup(key);
    if (!e->key) {
      free(copy);
      return -1;
    }
    e->h = hash_key(key);
    size_t i = e->h & (s->nslot - 1);
    while (s->slot[i]) i = (i + 1) & (s->nslot - 1);
    s->slot[i] = (uint32_t)(s->nkv + 1);
    s->nkv++;
    s->mem += klen + 1 + ENTRY_OVERHEAD;
  }
  e->val = copy;
  e->n = n;
  s->mem += n;
  return 0;
}

/* ---- connection buffers ---------------------------------------------------------------- */

/* Grows *buf to hold need bytes, within limit and the budget: 0, or -1. */
static int grow(acc__store_server *s, uint8_t **buf, size_t *cap, size_t need, size_t limit) {
  if (need <= *cap) return 0;
  if (need > limit) return -1;
  size_t nc = *cap ? *cap : 4096;
  while (nc < need) nc *= 2;
  if (nc > limit) nc = limit;
  if (s->mem + (nc - *cap) > STORE_BUDGET) return -1;
  uint8_t *t = realloc(*buf, nc);
  if (!t) return -1;
  s->mem += nc - *cap;
  *buf = t;
  *cap = nc;
  return 0;
}

static void release(acc__store_server *s, uint8_t **buf, size_t *cap) {
  free(*buf);
  *buf = NULL;
  s->mem -= *cap;
  *cap = 0;
}

/* Sends what is queued without blocking: 0 (all sent, or the rest waits for POLLOUT), -1 lost. */
static int flush(acc__store_server *s, client *c) {
  while (c->out_off < c->out_n) {
    ssize_t k = send(c->fd, c->out + c->out_off, c->out_n - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (k <= 0) return -1;
    c->out_off += (size_t)k;
  }
  c->out_off = c->out_n = 0;
  if (c->out_cap > 65536) release(s, &c->out, &c->out_cap);
  return 0;
}

/* Queues one reply frame and sends what it can: 0, or -1 (drop the client: lost, or its queue
 * is over OUT_QUEUE_MAX or the budget, c->why says which). */
static int reply(acc__store_server *s, client *c, uint8_t st, const void *v, size_t n) {
  if (c->fd < 0) return -1;
  if (c->out_off) {
    memmove(c->out, c->out + c->out_off, c->out_n - c->out_off);
    c->out_n -= c->out_off;
    c->out_off = 0;
  }
  size_t frame = 5 + n;
  if (grow(s, &c->out, &c->out_cap, c->out_n + frame, OUT_QUEUE_MAX)) {
    c->why = c->out_n + frame > OUT_QUEUE_MAX
                 ? "it did not read its replies (more than 4 MiB queued)"
                 : "the store's memory budget (64 MiB) is used up";
    return -1;
  }
  uint8_t *b = c->out + c->out_n;
  uint32_t len = (uint32_t)(1 + n);
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(len >> (8 * i));
  b[4] = st;
  if (n) memcpy(b + 5, v, n);
  c->out_n += frame;
  return flush(s, c);
}

static int reply_err(acc__store_server *s, client *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int reply_err(acc__store_server *s, client *c, const char *fmt, ...) {
  char m[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  return reply(s, c, ACC_STORE_ST_ERR, m, strlen(m));
}

static void drop(acc__store_server *s, client *c);

/* Answers the parked GETs of key. */
static void wake_waiters(acc__store_server *s, const kv *e) {
  if (!e) return;
  for (size_t i = 0; i < s->ncl; i++) {
    client *c = &s->cl[i];
    if (c->fd >= 0 && c->wait_key && strcmp(c->wait_key, e->key) == 0) {
      free(c->wait_key);
      c->wait_key = NULL;
      if (reply(s, c, ACC_STORE_ST_OK, e->val, e->n)) drop(s, c);
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

/* A refused HELLO: the reply, then the connection closes. post: the client proved it belongs
 * to the job (secret and run id), so its refusal is the job's failure, posted with the same
 * sentence for every launcher (docs/multi-machine.md). */
static int refuse(acc__store_server *s, client *c, int post, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(acc__store_server *s, client *c, int post, const char *fmt, ...) {
  char m[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  c->closing = 1;
  c->since = acc__now();
  if (post) {
    char f[700];
    snprintf(f, sizeof f, "the rendezvous store refused a client (HELLO): %s", m);
    post_failure(s, f);
  }
  return reply(s, c, ACC_STORE_ST_ERR, m, strlen(m));
}

/* A client without the job's secret or run id: logged once per address, then ignored. */
static void log_stranger(acc__store_server *s, const client *c, const char *what) {
  char host[sizeof c->peer];
  snprintf(host, sizeof host, "%s", c->peer);
  char *colon = strrchr(host, ':');
  if (colon) *colon = 0;
  for (int i = 0; i < s->nlogged; i++)
    if (strcmp(s->logged[i], host) == 0) return;
  if (s->nlogged == MAX_LOGGED_PEERS) return;
  snprintf(s->logged[s->nlogged++], sizeof s->logged[0], "%s", host);
  fprintf(stderr,
          "accelerate: rendezvous store: refused a client from %s (%s); the job goes on%s\n",
          c->peer, what,
          s->nlogged == MAX_LOGGED_PEERS ? " (further addresses are not logged)" : "");
}

/* HELLO: "proto\nversion\nrun_id\nsecret\nkind machine num_machines world rank attempt
 * max_restarts". */
static int on_hello(acc__store_server *s, client *c, char *v) {
  char *f[5] = {0};
  for (int i = 0; i < 5; i++) {
    f[i] = v;
    char *nl = i < 4 ? strchr(v, '\n') : NULL;
    if (i < 4 && !nl) return refuse(s, c, 0, "malformed HELLO (is this an accelerate-c client?)");
    if (nl) {
      *nl = 0;
      v = nl + 1;
    }
  }
  if (strcmp(f[0], ACC_STORE_PROTO) != 0)
    return refuse(s, c, 0, "protocol '%.64s', the store speaks '%s'", f[0], ACC_STORE_PROTO);
  int kind = 0, mr = -1, nm = 0, ws = 0, rank = -1, gen = 0, maxr = 0;
  if (sscanf(f[4], "%d %d %d %d %d %d %d", &kind, &mr, &nm, &ws, &rank, &gen, &maxr) != 7 || gen < 0)
    return refuse(s, c, 0, "malformed HELLO numbers '%.64s'", f[4]);
  if (strcmp(f[3], s->secret) != 0) {
    log_stranger(s, c, s->secret[0] ? "wrong or missing shared secret" : "it sends a secret");
    return refuse(s, c, 0,
                  s->secret[0] ? "wrong or missing shared secret (set %s or %s the same on "
                                 "every machine)"
                               : "this client sends a shared secret but the store has none "
                                 "(set %s or %s the same on every machine)",
                  ACC_STORE_SECRET_ENV, ACC_STORE_SECRET_FILE_ENV);
  }
  if (strcmp(f[2], s->run_id) != 0) {
    log_stranger(s, c, "another run id");
    return refuse(s, c, 0,
                  "run id '%.128s' but this store belongs to the job with run id '%s': another "
                  "job uses this port; give each job its own --main_process_port or --rdzv_id",
                  f[2], s->run_id);
  }
  int job = kind == ACC_STORE_LAUNCHER || kind == ACC_STORE_PROCESS;
  int assigned = kind == ACC_STORE_LAUNCHER && mr == -1 && nm == s->num_machines;
  if (assigned) { /* no --machine_rank (--rdzv_backend c10d): the next free rank, in join order */
    for (int k = 1; k < nm && mr < 0; k++)
      if (!s->machine_seen[k]) mr = k;
    if (mr < 0)
      return refuse(s, c, 1,
                    "a launcher without --machine_rank (%s) came after every machine rank "
                    "1..%d was given: more launchers than --num_machines %d",
                    c->peer, nm - 1, nm);
  }
  if (strcmp(f[1], ACC_VERSION_STRING) != 0)
    return refuse(s, c, job,
                  "different library version: this %s (machine %d, %s) runs accelerate-c %.32s, "
                  "machine 0 runs %s; install the same version on every machine",
                  kind_name(kind), mr, c->peer, f[1], ACC_VERSION_STRING);
  if (job) {
    if (nm != s->num_machines)
      return refuse(s, c, 1, "the %s of machine %d says num_machines %d, machine 0 says %d",
                    kind_name(kind), mr, nm, s->num_machines);
    if (ws != s->world_size)
      return refuse(s, c, 1, "the %s of machine %d says num_processes %d, machine 0 says %d",
                    kind_name(kind), mr, ws, s->world_size);
    if (mr < 0 || mr >= nm) return refuse(s, c, 1, "machine rank %d is not in 0..%d", mr, nm - 1);
  }
  if (kind == ACC_STORE_LAUNCHER) {
    if (s->machine_seen[mr])
      return refuse(s, c, 1,
                    "two launchers with machine_rank %d: %s is the second; give every "
                    "machine its own --machine_rank 0..%d",
                    mr, c->peer, nm - 1);
    if (maxr != s->max_restarts)
      return refuse(s, c, 1,
                    "the launcher of machine %d says --max_restarts %d, machine 0 says %d: "
                    "every machine's launcher must give the same",
                    mr, maxr, s->max_restarts);
    s->machine_seen[mr] = 1;
  } else if (kind == ACC_STORE_PROCESS) {
    if (rank < 0 || rank >= ws) return refuse(s, c, 1, "rank %d is not in 0..%d", rank, ws - 1);
    if (s->rank_gen[rank] == gen)
      return refuse(s, c, 1, "two processes with rank %d (the second from %s, machine %d)", rank,
                    c->peer, mr);
    if (s->rank_gen[rank] > gen) /* a straggler of a stopped attempt: not this attempt's failure */
      return refuse(s, c, 0,
                    "rank %d of launch attempt %d (from %s, machine %d) came after attempt %d "
                    "began: a process of a stopped group outlived it",
                    rank, gen, c->peer, mr, s->rank_gen[rank]);
    s->rank_gen[rank] = gen;
  } else if (kind != ACC_STORE_TOOL) {
    return refuse(s, c, 0, "unknown client kind %d", kind);
  }
  c->hello = 1;
  c->kind = kind;
  c->machine_rank = mr;
  c->rank = rank;
  if (assigned) {
    char given[16];
    int gn = snprintf(given, sizeof given, "%d", mr);
    return reply(s, c, ACC_STORE_ST_OK, given, (size_t)gn);
  }
  return reply(s, c, ACC_STORE_ST_OK, NULL, 0);
}

/* A decimal signed 64-bit integer filling b[0..n): 0, or -1. */
static int parse_i64(const uint8_t *b, size_t n, long long *out) {
  char t[32];
  if (n == 0 || n >= sizeof t) return -1;
  memcpy(t, b, n);
  t[n] = 0;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(t, &end, 10);
  if (errno || end != t + n) return -1;
  *out = v;
  return 0;
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
  if (strlen(key) != klen) return reply_err(s, c, "a key holds a NUL byte");
  uint8_t *v = b + 3 + klen;
  size_t vn = n - 3 - klen;
  if (!c->hello && op != ACC_STORE_OP_HELLO) return -1;
  switch (op) {
    case ACC_STORE_OP_HELLO: {
      if (c->hello) return reply_err(s, c, "HELLO twice");
      char t[HELLO_MAX_FRAME + 1];
      memcpy(t, v, vn); /* vn < HELLO_MAX_FRAME: the frame limit before HELLO */
      t[vn] = 0;
      return on_hello(s, c, t);
    }
    case ACC_STORE_OP_SET:
      if (is_failed_key(key) && kv_find(s, key)) /* the first stays */
        return reply(s, c, ACC_STORE_ST_OK, NULL, 0);
      if (kv_put(s, key, v, vn))
        return reply_err(s, c, "store full: key '%s' (%zu bytes) does not fit in its %u bytes",
                         key, vn, STORE_BUDGET);
      if (reply(s, c, ACC_STORE_ST_OK, NULL, 0)) return -1;
      wake_waiters(s, kv_find(s, key));
      return 0;
    case ACC_STORE_OP_GET: {
      if (c->kind == ACC_STORE_LAUNCHER && is_failed_key(key)) { /* a launcher's watch */
        int g = key[strlen(ACC_STORE_FAILED_KEY)] ? atoi(key + strlen(ACC_STORE_FAILED_KEY) + 1) : 0;
        if (g > s->gen) s->gen = g;
      }
      kv *e = kv_find(s, key);
      if (e) return reply(s, c, ACC_STORE_ST_OK, e->val, e->n);
      free(c->wait_key);
      c->wait_key = strdup(key);
      return c->wait_key ? 0 : -1;
    }
    case ACC_STORE_OP_ADD: {
      long long d = 0, cur = 0, sum = 0;
      if (parse_i64(v, vn, &d))
        return reply_err(s, c, "ADD to key '%s': the amount is not a 64-bit integer", key);
      kv *e = kv_find(s, key);
      if (e && parse_i64(e->val, e->n, &cur))
        return reply_err(s, c, "ADD to key '%s': its value is not a 64-bit integer", key);
      if (__builtin_add_overflow(cur, d, &sum))
        return reply_err(s, c, "ADD of %lld to key '%s' (now %lld) overflows a 64-bit integer", d,
                         key, cur);
      char o[32];
      int on = snprintf(o, sizeof o, "%lld", sum);
      if (kv_put(s, key, o, (size_t)on))
        return reply_err(s, c, "store full: key '%s' does not fit in its %u bytes", key,
                         STORE_BUDGET);
      if (reply(s, c, ACC_STORE_ST_OK, o, (size_t)on)) return -1;
      wake_waiters(s, kv_find(s, key));
      return 0;
    }
    case ACC_STORE_OP_CHECK:
      return reply(s, c, kv_find(s, key) ? ACC_STORE_ST_OK : ACC_STORE_ST_MISSING, NULL, 0);
    case ACC_STORE_OP_BYE:
      c->bye = 1;
      return reply(s, c, ACC_STORE_ST_OK, NULL, 0);
  }
  return reply_err(s, c, "unknown operation %u", op);
}

static void utc_now(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%H:%M:%S UTC", &tm);
}

static void drop(acc__store_server *s, client *c) {
  if (c->fd < 0) return;
  close(c->fd);
  c->fd = -1;
  if (c->hello && c->kind == ACC_STORE_LAUNCHER && !c->bye && !s->draining) {
    char m[400], t[32];
    utc_now(t, sizeof t);
    if (c->why)
      snprintf(m, sizeof m,
               "the rendezvous store dropped the launcher of machine %d (%s) at %s: %s",
               c->machine_rank, c->peer, t, c->why);
    else
      snprintf(m, sizeof m,
               "the launcher of machine %d (%s) lost its connection to the rendezvous store at "
               "%s: it was killed, or the network between the machines failed",
               c->machine_rank, c->peer, t);
    post_failure(s, m);
  }
  free(c->wait_key);
  c->wait_key = NULL;
  release(s, &c->in, &c->in_cap);
  release(s, &c->out, &c->out_cap);
  c->in_n = c->out_n = c->out_off = 0;
}

/* Reads what c sent; handles every complete frame. */
static void on_readable(acc__store_server *s, client *c) {
  size_t most = c->hello ? 4 + 3 + ACC_STORE_MAX_KEY + ACC_STORE_MAX_VALUE : 4 + HELLO_MAX_FRAME;
  size_t want = c->in_n + 4096 > most ? most : c->in_n + 4096;
  if (c->in_n >= 4) { /* the announced frame, no more */
    uint32_t len = (uint32_t)c->in[0] | (uint32_t)c->in[1] << 8 | (uint32_t)c->in[2] << 16 |
                   (uint32_t)c->in[3] << 24;
    if ((size_t)len + 4 <= most && (size_t)len + 4 > want) want = (size_t)len + 4;
  }
  if (c->in_n == want || grow(s, &c->in, &c->in_cap, want, most)) {
    c->why = c->in_n == most ? "it sent a frame longer than any valid one"
                             : "the store's memory budget (64 MiB) is used up";
    drop(s, c);
    return;
  }
  ssize_t k = recv(c->fd, c->in + c->in_n, want - c->in_n, MSG_DONTWAIT);
  if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (k <= 0) {
    drop(s, c);
    return;
  }
  c->in_n += (size_t)k;
  size_t off = 0;
  while (c->fd >= 0 && !c->closing && c->in_n - off >= 4) {
    uint8_t *f = c->in + off;
    uint32_t len = (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 24;
    size_t lim = c->hello ? 3 + ACC_STORE_MAX_KEY + ACC_STORE_MAX_VALUE : HELLO_MAX_FRAME - 1;
    if (len > lim) {
      c->why = "it sent a frame longer than any valid one";
      drop(s, c);
      return;
    }
    if (c->in_n - off < 4 + (size_t)len) break;
    if (on_frame(s, c, f + 4, len)) {
      drop(s, c);
      return;
    }
    off += 4 + len;
  }
  if (c->fd < 0) return;
  if (c->closing && c->out_n == c->out_off) { /* refused, and the reply is out */
    drop(s, c);
    return;
  }
  memmove(c->in, c->in + off, c->in_n - off);
  c->in_n -= off;
  if (c->in_n == 0 && c->in_cap > 65536) release(s, &c->in, &c->in_cap);
}

static size_t oldest_unauth(const acc__store_server *s, size_t *count) {
  size_t best = SIZE_MAX;
  *count = 0;
  for (size_t i = 0; i < s->ncl; i++) {
    const client *c = &s->cl[i];
    if (c->fd < 0 || c->hello) continue;
    ++*count;
    if (best == SIZE_MAX || c->since < s->cl[best].since) best = i;
  }
  return best;
}

static void on_accept(acc__store_server *s) {
  for (int round = 0; round < 16; round++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    size_t nun = 0, old = oldest_unauth(s, &nun);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* out of descriptors: make room by dropping the oldest connection that has not said
         * HELLO; with none, stop accepting for a moment instead of spinning */
        if (old != SIZE_MAX) {
          drop(s, &s->cl[old]);
          continue;
        }
        s->accept_pause_until = acc__now() + ACCEPT_PAUSE_S;
      }
      return;
    }
    if (nun >= MAX_UNAUTH && old != SIZE_MAX) drop(s, &s->cl[old]); /* the oldest makes room */
    size_t slot = s->ncl;
    for (size_t i = 0; i < s->ncl; i++)
      if (s->cl[i].fd < 0) {
        slot = i;
        break;
      }
    if (slot == s->ncl) {
      if (s->ncl == MAX_CLIENTS) {
        static const char full[] = "the rendezvous store has 4096 connections, its limit";
        uint8_t b[5 + sizeof full];
        uint32_t len = (uint32_t)sizeof full;
        for (int i = 0; i < 4; i++) b[i] = (uint8_t)(len >> (8 * i));
        b[4] = ACC_STORE_ST_ERR;
        memcpy(b + 5, full, sizeof full - 1);
        (void)!send(fd, b, sizeof b - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
        continue;
      }
      s->ncl++;
    }
    client *c = &s->cl[slot];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->since = acc__now();
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    acc__store_keepalive(fd, s->partition_s);
    acc__store_peer_name(&ss, sl, c->peer, sizeof c->peer);
  }
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
    double now = acc__now();
    if (stopping && (launchers_left(s) == 0 || now >= dl)) break;
    double next = stopping ? now + 0.05 : 0; /* the next deadline to wake for (0: none) */
    size_t np = 0;
    p[np++] = (struct pollfd){s->wake[0], POLLIN, 0};
    int accepting = now >= s->accept_pause_until;
    p[np++] = (struct pollfd){s->lfd, (short)(accepting ? POLLIN : 0), 0};
    if (!accepting && (!next || s->accept_pause_until < next)) next = s->accept_pause_until;
    for (size_t i = 0; i < s->ncl; i++) {
      client *c = &s->cl[i];
      if (c->fd < 0) continue;
      if (!c->hello || c->closing) { /* bounded: a HELLO (or the refusal's delivery) in time */
        double d = c->since + HELLO_DEADLINE_S;
        if (now >= d) {
          drop(s, c);
          continue;
        }
        if (!next || d < next) next = d;
      }
      idx[np] = i;
      short ev = c->closing ? 0 : POLLIN;
      if (c->out_n > c->out_off) ev |= POLLOUT;
      p[np++] = (struct pollfd){c->fd, ev, 0};
    }
    int ms = -1;
    if (next) {
      double left = next - now;
      ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
    }
    int r = poll(p, np, ms);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (p[0].revents) {
      char b[64];
      (void)!read(s->wake[0], b, sizeof b);
    }
    if (p[1].revents & POLLIN) on_accept(s);
    for (size_t j = 2; j < np; j++) {
      client *c = &s->cl[idx[j]];
      if (!p[j].revents || c->fd < 0 || c->fd != p[j].fd) continue;
      if ((p[j].revents & POLLOUT) && flush(s, c)) {
        drop(s, c);
        continue;
      }
      if (c->closing) {
        if (c->out_n == c->out_off || (p[j].revents & (POLLERR | POLLHUP))) drop(s, c);
        continue;
      }
      if (p[j].revents & (POLLIN | POLLERR | POLLHUP)) on_readable(s, c);
    }
  }
  free(p);
  free(idx);
  return NULL;
}

/* The listening socket: host NULL is every address, IPv6 and IPv4 alike (a dual-stack socket
 * on "::", or "0.0.0.0" where the machine has no IPv6). */
static int listen_on(const char *host, int port, int *err) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = host ? AF_UNSPEC : AF_INET6;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g != 0 && !host) {
    hints.ai_family = AF_INET;
    g = getaddrinfo(host, ps, &hints, &res);
  }
  if (g != 0) {
    *err = g; /* negative: a resolver error (gai_strerror) */
    return -1;
  }
  int fd = -1;
  for (int pass = 0; pass < 2 && fd < 0; pass++) {
    for (struct addrinfo *a = res; a; a = a->ai_next) {
      fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) {
        *err = errno;
        continue;
      }
      int one = 1, zero = 0;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (!host && a->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 512) == 0) break;
      *err = errno;
      close(fd);
      fd = -1;
    }
    if (fd < 0 && !host && pass == 0 && *err != EADDRINUSE) { /* no IPv6 here: IPv4 only */
      freeaddrinfo(res);
      res = NULL;
      hints.ai_family = AF_INET;
      if (getaddrinfo(host, ps, &hints, &res) != 0) break;
    } else {
      break;
    }
  }
  if (res) freeaddrinfo(res);
  return fd;
}

/* The store may hold up to MAX_CLIENTS connections: the soft descriptor limit goes up to the
 * hard one (the usual soft limit, 1024, is below; running out anyway is handled in on_accept). */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

acc_result acc__store_server_start(acc__store_server **out, const char *host, int port,
                                   const acc__store_hello *expect) {
  *out = NULL;
  if (expect->num_machines < 1 || expect->world_size < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: invalid job size");
  double part = 0;
  ACC_CHECK(acc__store_partition_timeout(&part));
  raise_nofile();
  int err = 0;
  int fd = listen_on(host, port, &err);
  if (fd < 0 && err < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "rendezvous store: cannot resolve '%s': %s",
                      host ? host : "*", gai_strerror(err));
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
  s->partition_s = part;
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
    free(s->cl[i].out);
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
  free(s->slot);
  free(s->cl);
  free(s->machine_seen);
  free(s->rank_gen);
  free(s);
}
