/* The rendezvous store's protocol over loopback (src/backend/store.h): set/get/add/check, a get
 * that waits for a later set, a bounded get of a missing key, concurrent adds, every refusal of
 * HELLO (version, secret, run id, counts, duplicate machine rank, duplicate rank), an
 * unreachable port, a port in use, garbage on the wire, and the liveness channel (a launcher that
 * drops without BYE posts acc/failed; one that says BYE does not). */
#include <pthread.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "acc_test.h"
#include "backend/store.h"
#include "backend/store_wire.h"
#include "core/internal.h"

static int g_port;
static const acc__store_hello g_expect = {"job-a", "", 0, 0, 2, 4, -1, 0, 0};

static acc__store_hello hello(int kind, int machine, int rank) {
  acc__store_hello h = {"job-a", "", kind, machine, 2, 4, rank, 0, 0};
  return h;
}

static void *adder(void *arg) {
  (void)arg;
  acc__store *c = NULL;
  acc__store_hello h = hello(ACC_STORE_TOOL, 0, -1);
  if (acc__store_connect(&c, "127.0.0.1", g_port, &h, 10) != ACC_OK) return (void *)1;
  for (int i = 0; i < 100; i++)
    if (acc__store_add(c, "counter", 1, NULL) != ACC_OK) return (void *)1;
  acc__store_close(c);
  return NULL;
}

static void *late_setter(void *arg) {
  (void)arg;
  acc__store *c = NULL;
  acc__store_hello h = hello(ACC_STORE_TOOL, 0, -1);
  if (acc__store_connect(&c, "127.0.0.1", g_port, &h, 10) != ACC_OK) return (void *)1;
  /* wait until the main thread announced that it is about to block in its get */
  if (acc__store_get(c, "getter-ready", NULL, NULL, 30) != ACC_OK) return (void *)1;
  acc_result rc = acc__store_set(c, "late", "hello", 5);
  acc__store_close(c);
  return rc == ACC_OK ? NULL : (void *)1;
}

/* A raw connection that says HELLO with a chosen version; returns the reply's status. */
static int raw_hello(const char *version) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)g_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
  char h[256];
  int n = snprintf(h, sizeof h, "%s\n%s\njob-a\n\n%d 0 2 4 -1 0 0", ACC_STORE_PROTO, version,
                   ACC_STORE_TOOL);
  acc__store_send_frame(fd, ACC_STORE_OP_HELLO, "", 0, h, (size_t)n, acc__now() + 10);
  uint8_t b[600];
  int st = -1;
  if (acc__store_io(fd, b, 4, 0, acc__now() + 10) == 0) {
    uint32_t len = b[0] | b[1] << 8;
    if (len < sizeof b && acc__store_io(fd, b, len, 0, acc__now() + 10) == 0) {
      st = b[0];
      b[len] = 0;
      CHECK(strstr((char *)b + 1, "different library version") != NULL, "reply: %s", b + 1);
    }
  }
  close(fd);
  return st;
}

/* test_store_hostile.c */
void refusals_end_the_job(void);
void hostile_clients(void);
void addresses_and_settings(void);
void hostile_counts(int *checks, int *failures);

int main(void) {
  acc__store_server *srv = NULL;
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_expect));
  g_port = acc__store_server_port(srv);
  CHECK(g_port > 0, "port %d", g_port);

  /* set / get / check / add */
  acc__store *c = NULL;
  acc__store_hello h = hello(ACC_STORE_TOOL, 0, -1);
  REQUIRE_OK(acc__store_connect(&c, "127.0.0.1", g_port, &h, 10));
  CHECK_OK(acc__store_set(c, "a", "xyz", 3));
  void *v = NULL;
  size_t n = 0;
  CHECK_OK(acc__store_get(c, "a", &v, &n, 10));
  CHECK(v && n == 3 && memcmp(v, "xyz", 3) == 0, "got %zu bytes", n);
  acc__free(v);
  v = NULL;
  int ex = -1;
  CHECK_OK(acc__store_check(c, "a", &ex));
  CHECK(ex == 1, "a exists");
  CHECK_OK(acc__store_check(c, "b", &ex));
  CHECK(ex == 0, "b does not exist");
  int64_t x = 0;
  CHECK_OK(acc__store_add(c, "n", 5, &x));
  CHECK(x == 5, "add 5 -> %lld", (long long)x);
  CHECK_OK(acc__store_add(c, "n", -2, &x));
  CHECK(x == 3, "add -2 -> %lld", (long long)x);
  /* an empty value and a value of 1 MiB */
  CHECK_OK(acc__store_set(c, "empty", "", 0));
  CHECK_OK(acc__store_get(c, "empty", &v, &n, 10));
  CHECK(n == 0, "empty value has %zu bytes", n);
  acc__free(v);
  v = NULL;
  char *big = malloc(ACC_STORE_MAX_VALUE);
  for (size_t i = 0; i < ACC_STORE_MAX_VALUE; i++) big[i] = (char)(i * 7);
  CHECK_OK(acc__store_set(c, "big", big, ACC_STORE_MAX_VALUE));
  v = NULL;
  CHECK_OK(acc__store_get(c, "big", &v, &n, 10));
  CHECK(v && n == ACC_STORE_MAX_VALUE && memcmp(v, big, n) == 0, "1 MiB value read back");
  acc__free(v);
  v = NULL;
  CHECK_ERR(acc__store_set(c, "big", big, ACC_STORE_MAX_VALUE + 1), ACC_ERR_INVALID_ARGUMENT,
            "at most");
  free(big);

  /* a get that waits for a later set (another connection) */
  pthread_t t;
  pthread_create(&t, NULL, late_setter, NULL);
  CHECK_OK(acc__store_set(c, "getter-ready", "1", 1));
  CHECK_OK(acc__store_get(c, "late", &v, &n, 30));
  CHECK(v && n == 5 && memcmp(v, "hello", 5) == 0, "late value");
  acc__free(v);
  v = NULL;
  void *tr = NULL;
  pthread_join(t, &tr);
  CHECK(tr == NULL, "late setter failed");

  /* concurrent adds */
  pthread_t ts[4];
  for (int i = 0; i < 4; i++) pthread_create(&ts[i], NULL, adder, NULL);
  for (int i = 0; i < 4; i++) {
    pthread_join(ts[i], &tr);
    CHECK(tr == NULL, "adder %d failed", i);
  }
  CHECK_OK(acc__store_add(c, "counter", 0, &x));
  CHECK(x == 400, "4 x 100 adds -> %lld", (long long)x);

  /* a bounded wait for a key nobody sets; the connection is unusable afterwards */
  acc__store *c2 = NULL;
  REQUIRE_OK(acc__store_connect(&c2, "127.0.0.1", g_port, &h, 10));
  double t0 = acc__now();
  CHECK_ERR(acc__store_get(c2, "never", &v, &n, 0.3), ACC_ERR_TIMEOUT, "'never'");
  CHECK(acc__now() - t0 < 20, "the timed-out get returned");
  CHECK_ERR(acc__store_set(c2, "x", "1", 1), ACC_ERR_INVALID_USAGE, "unusable");
  acc__store_close(c2);

  /* refusals */
  acc__store_hello bad = hello(ACC_STORE_TOOL, 0, -1);
  bad.secret = "s3cret";
  CHECK_ERR(acc__store_connect(&c2, "127.0.0.1", g_port, &bad, 10), ACC_ERR_MISMATCH, "secret");
  bad = hello(ACC_STORE_TOOL, 0, -1);
  bad.run_id = "job-b";
  CHECK_ERR(acc__store_connect(&c2, "127.0.0.1", g_port, &bad, 10), ACC_ERR_MISMATCH, "job-b");
  CHECK(raw_hello("0.0.0-other") == ACC_STORE_ST_ERR, "a different version is refused");

  /* launchers: machine 1 joins, a second machine 1 is refused; a drop without BYE posts the
   * failure, which a waiting get sees */
  acc__store *l1 = NULL, *l1b = NULL;
  acc__store_hello hl = hello(ACC_STORE_LAUNCHER, 1, -1);
  acc__store_hello hl2 = hello(ACC_STORE_LAUNCHER, 1, -1);
  (void)l1b;
  (void)hl2;
  REQUIRE_OK(acc__store_connect(&l1, "127.0.0.1", g_port, &hl, 10));
  acc__store_hello hp = hello(ACC_STORE_PROCESS, 1, 2);
  REQUIRE_OK(acc__store_connect(&c2, "127.0.0.1", g_port, &hp, 10));
  /* a restarted group (launch attempt 1): rank 2 again is welcome, twice in one attempt is
   * not, and a process of attempt 0 that comes after attempt 1 began is refused */
  acc__store *g1 = NULL, *g1b = NULL, *g0 = NULL;
  acc__store_hello hp1 = hp;
  hp1.generation = 1;
  REQUIRE_OK(acc__store_connect(&g1, "127.0.0.1", g_port, &hp1, 10));
  (void)g1b;
  CHECK_ERR(acc__store_connect(&g0, "127.0.0.1", g_port, &hp, 10), ACC_ERR_MISMATCH,
            "rank 2 of launch attempt 0");
  /* its keys live under "r1/": a prefixed set is seen unprefixed by another connection */
  CHECK_OK(acc__store_set_prefix(g1, "r1/"));
  CHECK_OK(acc__store_set(g1, "acc/joined", "x", 1));
  CHECK_OK(acc__store_check(c, "r1/acc/joined", &ex));
  CHECK(ex == 1, "the prefixed key exists as r1/acc/joined");
  CHECK_OK(acc__store_check(g1, "acc/joined", &ex));
  CHECK(ex == 1, "and the prefixed connection finds it by its own name");
  acc__store_close(g1);
  char fk[64];
  acc__store_failed_key(0, fk, sizeof fk);
  CHECK(strcmp(fk, ACC_STORE_FAILED_KEY) == 0, "attempt 0's failure key: %s", fk);
  acc__store_failed_key(2, fk, sizeof fk);
  CHECK(strcmp(fk, ACC_STORE_FAILED_KEY "/2") == 0, "attempt 2's failure key: %s", fk);
  acc__store_close(c2);
  CHECK_OK(acc__store_check(c, ACC_STORE_FAILED_KEY, &ex));
  CHECK(ex == 0, "no failure posted yet");
  acc__store_close(l1); /* killed launcher: no BYE */
  CHECK_OK(acc__store_get(c, ACC_STORE_FAILED_KEY, &v, &n, 30));
  CHECK(v && strstr(v, "launcher of machine 1") != NULL, "failure: %s", v ? (char *)v : "");
  acc__free(v);
  v = NULL;

  /* garbage on the wire: the server drops that connection and keeps serving */
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "raw connect");
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    (void)!write(fd, junk, sizeof junk);
    char b[16];
    CHECK(acc__store_io(fd, b, 1, 0, acc__now() + 20) == -1, "the server closes a junk client");
    close(fd);
    CHECK_OK(acc__store_check(c, "a", &ex));
    CHECK(ex == 1, "still serving");
  }

  /* a port in use, and a port nobody listens on */
  acc__store_server *srv2 = NULL;
  CHECK_ERR(acc__store_server_start(&srv2, "127.0.0.1", g_port, &g_expect), ACC_ERR_SYSTEM,
            "uses this port");
  acc__store_close(c);
  acc__store_server_stop(srv, 5);
  t0 = acc__now();
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", g_port);
  CHECK_ERR(acc__store_connect(&c2, "127.0.0.1", g_port, &h, 0.5), ACC_ERR_TIMEOUT, where);
  CHECK(acc__now() - t0 < 20, "the bounded retry ended");

  /* a launcher that says BYE posts nothing */
  REQUIRE_OK(acc__store_server_start(&srv, "127.0.0.1", 0, &g_expect));
  g_port = acc__store_server_port(srv);
  REQUIRE_OK(acc__store_connect(&l1, "127.0.0.1", g_port, &hl, 10));
  REQUIRE_OK(acc__store_connect(&c, "127.0.0.1", g_port, &h, 10));
  CHECK_OK(acc__store_bye(l1));
  acc__store_close(l1);
  CHECK_OK(acc__store_set(c, "after", "1", 1)); /* ordered after the close on the server */
  CHECK_OK(acc__store_check(c, ACC_STORE_FAILED_KEY, &ex));
  CHECK(ex == 0, "a launcher that said BYE posted a failure");
  acc__store_close(c);
  acc__store_server_stop(srv, 5);
  refusals_end_the_job();
  hostile_clients();
  addresses_and_settings();
  hostile_counts(&acc_test_checks, &acc_test_failures);
  return acc_test_finish("store");
}
