/* The rendezvous store against hostile and broken clients (red team 4: R4-1, R4-2, R4-3, R4-5,
 * R4-6), over loopback only:
 *  - a refused launcher or process of the job posts the job's failure with the sentence it got;
 *    a client with a wrong secret or run id does not;
 *  - before HELLO: a frame announcing 1 MiB is dropped at once, an idle connection after the
 *    HELLO deadline, and at the bound of unauthenticated connections the oldest goes, so a real
 *    client arriving after 600 idle ones gets in; out of descriptors (EMFILE) the store drops an
 *    unauthenticated connection instead of spinning, and a real client still gets in;
 *  - a client that pipelines 64 GETs of a 1 MiB value and does not read is dropped, and another
 *    client is served meanwhile;
 *  - ADD overflow is an error, the memory budget refuses a SET, text from the store is escaped;
 *  - launchers without a machine rank get one in join order (D2);
 *  - IPv6: the store listens on every address, "::1" and "[::1]" reach it; a resolver failure
 *    names the resolver's reason; ACCELERATE_RDZV_TIMEOUT and its alias. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "acc_test.h"
#include "backend/store.h"
#include "backend/store_wire.h"
#include "core/env.h"
#include "core/internal.h"

void refusals_end_the_job(void);
void hostile_clients(void);
void addresses_and_settings(void);
void hostile_counts(int *checks, int *failures);

void hostile_counts(int *checks, int *failures) {
  *checks += acc_test_checks;
  *failures += acc_test_failures;
}

static void mark(const char *what) {
  if (getenv("ACC_TEST_VERBOSE")) fprintf(stderr, "%.3f %s\n", acc__now(), what);
}

static const acc__store_hello g_job = {"job-h", "", 0, 0, 2, 4, -1, 0, 0};

static acc__store_hello who(int kind, int machine, int rank) {
  acc__store_hello h = {"job-h", "", kind, machine, 2, 4, rank, 0, 0};
  return h;
}

/* rcvbuf > 0: the socket's receive buffer, fixed before connecting (no autotuning: this kernel
 * lets a loopback receive buffer grow to tcp_rmem's maximum, 32 MiB here, which can hold most of
 * what a "client that does not read" is sent). */
static int raw_connect_buf(int port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int raw_connect(int port) { return raw_connect_buf(port, 0); }

/* 1 when the server closed fd within seconds (EOF or reset), 0 when it is still open. */
static int closed_within(int fd, double seconds) {
  char b[64];
  for (;;) {
    int r = acc__store_io(fd, b, 1, 0, acc__now() + seconds);
    if (r == -1) return 1;
    if (r == -2) return 0;
  }
}

/* Each refusal of a client that belongs to the job ends the job with the same sentence. */
static void refused_posts(acc__store_hello bad, const char *sentence) {
  acc__store_server *srv = NULL;
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_job));
  int port = acc__store_server_port(srv);
  acc__store *l1 = NULL, *t = NULL, *x = NULL;
  acc__store_hello ok1 = who(ACC_STORE_LAUNCHER, 1, -1), tool = who(ACC_STORE_TOOL, 0, -1);
  acc__store_hello p2 = who(ACC_STORE_PROCESS, 1, 2);
  REQUIRE_OK(acc__store_connect(&t, "127.0.0.1", port, &tool, 10));
  REQUIRE_OK(acc__store_connect(&l1, "127.0.0.1", port, &ok1, 10));
  REQUIRE_OK(acc__store_connect(&x, "127.0.0.1", port, &p2, 10));
  /* the watch machine 0's launcher keeps */
  REQUIRE_OK(acc__store_get_start(t, ACC_STORE_FAILED_KEY));
  acc__store *c = NULL;
  CHECK_ERR(acc__store_connect(&c, "127.0.0.1", port, &bad, 10), ACC_ERR_MISMATCH, sentence);
  char got[1024];
  CHECK(acc__store_get_finish(t, got, sizeof got) == 1, "the refusal was posted");
  CHECK(strstr(got, "the rendezvous store refused a client (HELLO): ") != NULL &&
            strstr(got, sentence) != NULL,
        "posted: %s", got);
  acc__store_close(t);
  acc__store_close(l1);
  acc__store_close(x);
  acc__store_server_stop(srv, 5);
}

void refusals_end_the_job(void) {
  acc__store_hello b = who(ACC_STORE_LAUNCHER, 1, -1);
  b.num_machines = 3;
  refused_posts(b, "the launcher of machine 1 says num_machines 3, machine 0 says 2");
  b = who(ACC_STORE_LAUNCHER, 1, -1);
  b.world_size = 6;
  refused_posts(b, "the launcher of machine 1 says num_processes 6, machine 0 says 4");
  b = who(ACC_STORE_LAUNCHER, 0, -1);
  b.max_restarts = 3;
  refused_posts(b, "the launcher of machine 0 says --max_restarts 3, machine 0 says 0");
  refused_posts(who(ACC_STORE_LAUNCHER, 1, -1), "two launchers with machine_rank 1");
  refused_posts(who(ACC_STORE_PROCESS, 1, 2), "two processes with rank 2");

  /* D2: a launcher without a machine rank gets the next free one; one too many is refused */
  {
    acc__store_server *srv = NULL;
    REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_job));
    int port = acc__store_server_port(srv);
    acc__store *l0 = NULL, *la = NULL, *lb = NULL;
    acc__store_hello h0 = who(ACC_STORE_LAUNCHER, 0, -1), hx = who(ACC_STORE_LAUNCHER, -1, -1);
    REQUIRE_OK(acc__store_connect(&l0, "127.0.0.1", port, &h0, 10));
    CHECK(acc__store_machine(l0) == -1, "a launcher with a rank is given none");
    REQUIRE_OK(acc__store_connect(&la, "127.0.0.1", port, &hx, 10));
    CHECK(acc__store_machine(la) == 1, "join order: machine %d", acc__store_machine(la));
    CHECK_ERR(acc__store_connect(&lb, "127.0.0.1", port, &hx, 10), ACC_ERR_MISMATCH,
              "more launchers than --num_machines 2");
    acc__store_close(l0);
    acc__store_close(la);
    acc__store_server_stop(srv, 5);
  }

  /* a stranger (wrong secret, other run id) cannot end the job */
  acc__store_server *srv = NULL;
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_job));
  int port = acc__store_server_port(srv);
  acc__store *t = NULL, *c = NULL;
  acc__store_hello tool = who(ACC_STORE_TOOL, 0, -1);
  REQUIRE_OK(acc__store_connect(&t, "127.0.0.1", port, &tool, 10));
  for (int i = 0; i < 3; i++) {
    acc__store_hello s = who(ACC_STORE_LAUNCHER, 1, -1);
    s.secret = "guess";
    CHECK_ERR(acc__store_connect(&c, "127.0.0.1", port, &s, 10), ACC_ERR_MISMATCH, "secret");
    s = who(ACC_STORE_LAUNCHER, 1, -1);
    s.run_id = "other";
    CHECK_ERR(acc__store_connect(&c, "127.0.0.1", port, &s, 10), ACC_ERR_MISMATCH, "other");
  }
  int ex = 1;
  CHECK_OK(acc__store_check(t, ACC_STORE_FAILED_KEY, &ex));
  CHECK(ex == 0, "a client without the secret or run id posted a failure");
  acc__store_close(t);
  acc__store_server_stop(srv, 5);
}

typedef struct {
  int port;
  double worst;
  int fails;
} served;

/* Another client's requests while a slow one sits on the store: each must be answered soon. */
static void *other_client(void *arg) {
  served *o = arg;
  acc__store *c = NULL;
  acc__store_hello tool = who(ACC_STORE_TOOL, 0, -1);
  double t0 = acc__now();
  if (acc__store_connect(&c, "127.0.0.1", o->port, &tool, 20) != ACC_OK) {
    o->fails++;
    return NULL;
  }
  o->worst = acc__now() - t0;
  for (int i = 0; i < 20; i++) {
    t0 = acc__now();
    int64_t x = 0;
    if (acc__store_add(c, "other", 1, &x) != ACC_OK) o->fails++;
    double d = acc__now() - t0;
    if (d > o->worst) o->worst = d;
  }
  acc__store_close(c);
  return NULL;
}

static void send_raw_frame(int fd, uint8_t op, const char *key, const void *v, size_t n) {
  acc__store_send_frame(fd, op, key, strlen(key), v, n, acc__now() + 20);
}

static int raw_hello_ok(int fd) {
  char h[256];
  int n = snprintf(h, sizeof h, "%s\n%s\njob-h\n\n%d 0 2 4 -1 0 0", ACC_STORE_PROTO,
                   ACC_VERSION_STRING, ACC_STORE_TOOL);
  acc__store_send_frame(fd, ACC_STORE_OP_HELLO, "", 0, h, (size_t)n, acc__now() + 10);
  uint8_t b[5];
  return acc__store_io(fd, b, 5, 0, acc__now() + 10) == 0 && b[4] == ACC_STORE_ST_OK;
}

void hostile_clients(void) {
  acc__store_server *srv = NULL;
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_job));
  int port = acc__store_server_port(srv);
  acc__store *c = NULL;
  acc__store_hello tool = who(ACC_STORE_TOOL, 0, -1);
  REQUIRE_OK(acc__store_connect(&c, "127.0.0.1", port, &tool, 10));

  /* R4-3: ADD without signed overflow */
  int64_t x = 0;
  CHECK_OK(acc__store_add(c, "big", INT64_MAX, &x));
  CHECK_ERR(acc__store_add(c, "big", INT64_MAX, &x), ACC_ERR_MISMATCH, "overflows");
  CHECK_ERR(acc__store_add(c, "big", 1, &x), ACC_ERR_MISMATCH, "overflows");
  CHECK_OK(acc__store_add(c, "big", -1, &x));
  CHECK(x == INT64_MAX - 1, "after the refused adds: %lld", (long long)x);
  CHECK_OK(acc__store_set(c, "text", "abc", 3));
  CHECK_ERR(acc__store_add(c, "text", 1, &x), ACC_ERR_MISMATCH, "not a 64-bit integer");

  /* R4-3: a failure text with control bytes reaches the terminal escaped */
  const char esc[] = "\x1b[2J\x1b[31mfake\x1b[0m \x07 caf\xc3\xa9 \xc2\x9b";
  acc__store *w = NULL;
  REQUIRE_OK(acc__store_connect(&w, "127.0.0.1", port, &tool, 10));
  REQUIRE_OK(acc__store_get_start(w, "acc/failed"));
  CHECK_OK(acc__store_set(c, "acc/failed", esc, sizeof esc - 1));
  char got[512];
  CHECK(acc__store_get_finish(w, got, sizeof got) == 1, "the watch fired");
  CHECK(strcmp(got, "\\x1b[2J\\x1b[31mfake\\x1b[0m \\x07 caf\xc3\xa9 \\xc2\\x9b") == 0,
        "escaped: %s", got);
  acc__store_close(w);

  mark("R4-1: a frame bef");
  /* R4-1: a frame before HELLO is small; an announced 1 MiB frame is dropped at once */
  int fd = raw_connect(port);
  CHECK(fd >= 0, "raw connect");
  if (fd < 0) return;
  uint8_t hdr[4] = {0x00, 0x00, 0x10, 0x00}; /* 1 MiB */
  (void)!write(fd, hdr, 4);
  double t0 = acc__now();
  CHECK(closed_within(fd, 3) && acc__now() - t0 < 3, "a 1 MiB frame before HELLO was not dropped");
  close(fd);

  mark("R4-1: an idle con");
  /* R4-1: an idle connection is dropped after the HELLO deadline (5 s) */
  fd = raw_connect(port);
  t0 = acc__now();
  CHECK(closed_within(fd, 20), "an idle connection outlived its HELLO deadline");
  double idle = acc__now() - t0;
  CHECK(idle > 3 && idle < 15, "dropped after %.1f s", idle);
  close(fd);

  mark("R4-1: 600 idle");
  /* R4-1: 600 idle connections (the bound is 512): a real client still gets in, the oldest
   * idle ones were dropped */
  enum { IDLE = 600 };
  int *idle_fd = malloc(IDLE * sizeof *idle_fd);
  int opened = 0;
  for (int i = 0; i < IDLE; i++) {
    idle_fd[i] = raw_connect(port);
    if (idle_fd[i] >= 0) opened++;
  }
  CHECK(opened == IDLE, "opened %d of %d idle connections", opened, IDLE);
  acc__store *late = NULL;
  t0 = acc__now();
  CHECK_OK(acc__store_connect(&late, "127.0.0.1", port, &tool, 10));
  CHECK(acc__now() - t0 < 5, "the late client took %.1f s", acc__now() - t0);
  CHECK(idle_fd[0] < 0 || closed_within(idle_fd[0], 5), "the oldest idle connection was kept");
  if (late) {
    CHECK_OK(acc__store_set(late, "late", "1", 1));
    acc__store_close(late);
  }
  for (int i = 0; i < IDLE; i++)
    if (idle_fd[i] >= 0) close(idle_fd[i]);
  free(idle_fd);

  mark("R4-2: a client th");
  /* R4-2: a client that pipelines GETs of a 1 MiB value and never reads them is dropped,
   * while another client is served on time */
  char *big = malloc(ACC_STORE_MAX_VALUE);
  memset(big, 'v', ACC_STORE_MAX_VALUE);
  CHECK_OK(acc__store_set(c, "mib", big, ACC_STORE_MAX_VALUE));
  fd = raw_connect_buf(port, 64 << 10);
  CHECK(raw_hello_ok(fd), "the slow client's HELLO");
  for (int i = 0; i < 64; i++) send_raw_frame(fd, ACC_STORE_OP_GET, "mib", NULL, 0);
  served o = {port, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, other_client, &o);
  pthread_join(th, NULL);
  CHECK(o.fails == 0 && o.worst < 5, "another client: %d failures, worst %.2f s", o.fails, o.worst);
  /* read what was queued to it: the store either dropped it (the connection ends before the
   * 64 replies arrive: more than 4 MiB queued) or, where the kernel's buffers took the replies
   * while it was not reading (loopback buffering varies: one CI run delivered all 64 MiB), served
   * it whole; never neither: a connection left open with replies missing would be a client the
   * store forgot */
  const size_t all = 64u * (5u + ACC_STORE_MAX_VALUE);
  size_t total = 0;
  char *sink = malloc(1 << 16);
  struct timeval guard = {30, 0}; /* a hang guard: the store must have closed or fed it by then */
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
  int timed_out = 0;
  while (total < all) {
    ssize_t k = recv(fd, sink, 1 << 16, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) timed_out = 1;
    if (k <= 0) break;
    total += (size_t)k;
  }
  free(sink);
  CHECK(!timed_out, "the slow client's connection was neither closed nor fed for 30 s (%zu of %zu bytes read)", total,
        all);
  CHECK(total <= all, "the slow client got %zu bytes, more than its 64 replies (%zu)", total, all);
  close(fd);

  mark("R4-3: the memory ");
  /* R4-3: the memory budget (64 MiB, keys and values and buffers) refuses a SET */
  acc_result rc = ACC_OK;
  int stored = 0;
  for (int i = 0; i < 80 && rc == ACC_OK; i++) {
    char k[32];
    snprintf(k, sizeof k, "fill/%d", i);
    rc = acc__store_set(c, k, big, ACC_STORE_MAX_VALUE);
    if (rc == ACC_OK) stored++;
  }
  CHECK(rc == ACC_ERR_MISMATCH && strstr(acc_last_error(), "store full") != NULL,
        "after %d MiB: %s", stored, acc_last_error());
  CHECK(stored >= 55 && stored < 64, "%d values of 1 MiB fit in the 64 MiB budget", stored);
  free(big);
  int ex = 0;
  CHECK_OK(acc__store_check(c, "late", &ex)); /* still serving */
  CHECK(ex == 1, "the store still serves");
  acc__store_close(c);
  acc__store_server_stop(srv, 5);

  mark("R4-1: out of desc");
  /* R4-1: out of descriptors (EMFILE): the store neither spins nor stops */
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_job));
  port = acc__store_server_port(srv);
  struct rlimit old, low;
  getrlimit(RLIMIT_NOFILE, &old);
  int probe = dup(0);
  low = old;
  low.rlim_cur = (rlim_t)probe + 40;
  close(probe);
  CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit");
  int fds[64], nf = 0;
  for (int i = 0; i < 64; i++) {
    int f = raw_connect(port);
    if (f >= 0) fds[nf++] = f;
  }
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  struct timespec ts = {1, 0};
  nanosleep(&ts, NULL); /* the store at EMFILE for a second: measured, not a synchronization */
  getrusage(RUSAGE_SELF, &r1);
  double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
                        r0.ru_stime.tv_sec) +
               (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
                        r0.ru_stime.tv_usec) * 1e-6;
  CHECK(cpu < 0.5, "the store used %.2f s of CPU in 1 s out of descriptors", cpu);
  for (int i = 0; i < 4 && nf > 0; i++) close(fds[--nf]); /* room for the real client's socket */
  acc__store *real = NULL;
  CHECK_OK(acc__store_connect(&real, "127.0.0.1", port, &tool, 10));
  if (real) {
    CHECK_OK(acc__store_set(real, "k", "v", 1));
    acc__store_close(real);
  }
  while (nf > 0) close(fds[--nf]);
  setrlimit(RLIMIT_NOFILE, &old);
  acc__store_server_stop(srv, 5);
}

void addresses_and_settings(void) {
  /* R4-5: the store on every address answers IPv4 and IPv6 (where the machine has IPv6) */
  acc__store_server *srv = NULL;
  REQUIRE_OK(acc__store_server_start(&srv, NULL, 0, &g_job));
  int port = acc__store_server_port(srv);
  acc__store *c = NULL;
  acc__store_hello tool = who(ACC_STORE_TOOL, 0, -1);
  CHECK_OK(acc__store_connect(&c, "127.0.0.1", port, &tool, 10));
  acc__store_close(c);
  int v6 = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a6 = {0};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  int have6 = v6 >= 0 && bind(v6, (struct sockaddr *)&a6, sizeof a6) == 0;
  if (v6 >= 0) close(v6);
  if (have6) {
    c = NULL;
    CHECK_OK(acc__store_connect(&c, "::1", port, &tool, 10));
    acc__store_close(c);
    c = NULL;
    CHECK_OK(acc__store_connect(&c, "[::1]", port, &tool, 10));
    acc__store_close(c);
  } else {
    printf("# no IPv6 loopback here: the IPv6 connections are not tried\n");
  }
  acc__store_server_stop(srv, 5);

  mark("R4-5: a name that");
  /* R4-5: a name that does not resolve says the resolver's reason */
  c = NULL;
  acc_result rc = acc__store_connect(&c, "no.such.host.invalid", 29999, &tool, 0.3);
  CHECK(rc == ACC_ERR_TIMEOUT && strstr(acc_last_error(), "No such file") == NULL &&
            strstr(acc_last_error(), "no.such.host.invalid") != NULL,
        "resolver failure: %s", acc_last_error());

  /* item 18: one setting bounds every join; the alias; both different is an error */
  double t = 60;
  int set = 0;
  const char *name = NULL;
  setenv("ACCELERATE_RENDEZVOUS_TIMEOUT", "7", 1);
  CHECK_OK(acc__env_rdzv_timeout(&t, &set, &name));
  CHECK(set && t == 7 && strcmp(name, "ACCELERATE_RENDEZVOUS_TIMEOUT") == 0, "alias: %g %s", t, name);
  setenv("ACCELERATE_RDZV_TIMEOUT", "7", 1);
  CHECK_OK(acc__env_rdzv_timeout(&t, &set, &name));
  setenv("ACCELERATE_RDZV_TIMEOUT", "9", 1);
  CHECK_ERR(acc__env_rdzv_timeout(&t, &set, &name), ACC_ERR_INVALID_ARGUMENT,
            "ACCELERATE_RDZV_TIMEOUT=9 and ACCELERATE_RENDEZVOUS_TIMEOUT=7");
  unsetenv("ACCELERATE_RENDEZVOUS_TIMEOUT");
  CHECK_OK(acc__env_rdzv_timeout(&t, &set, &name));
  CHECK(t == 9 && strcmp(name, "ACCELERATE_RDZV_TIMEOUT") == 0, "%g %s", t, name);
  unsetenv("ACCELERATE_RDZV_TIMEOUT");
  setenv("ACCELERATE_PARTITION_TIMEOUT", "-1", 1);
  CHECK_ERR(acc__store_partition_timeout(&t), ACC_ERR_INVALID_ARGUMENT, "ACCELERATE_PARTITION_TIMEOUT");
  unsetenv("ACCELERATE_PARTITION_TIMEOUT");
}
