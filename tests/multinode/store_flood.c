/* A hostile client of the rendezvous store for tests (red team 4, R4-1): opens N connections to
 * HOST:PORT that never say HELLO and holds them for S seconds. Mode "idle" sends nothing; mode
 * "big" announces a 1 MiB frame on each and sends up to 1 MiB - 1 of it (what the store must not
 * buffer before HELLO). Reconnects what the store closes, while time is left (bounded: at most
 * 20 * N connections in all). Prints how many connections it opened and how many the store
 * closed. Loopback or test network namespaces only.
 *
 * usage: store_flood idle|big HOST PORT N SECONDS */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int open_one(const struct addrinfo *a, int big) {
  int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  if (big) {
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 2000) != 1) return fd;
    unsigned char hdr[4] = {0x00, 0x00, 0x10, 0x00}; /* 1 MiB */
    if (send(fd, hdr, 4, MSG_NOSIGNAL) != 4) return fd;
    static char junk[65536];
    for (int i = 0; i < 15; i++) /* as much as the socket takes, up to ~1 MiB */
      if (send(fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT) <= 0) break;
  }
  return fd;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: store_flood idle|big HOST PORT N SECONDS\n");
    return 2;
  }
  int big = strcmp(argv[1], "big") == 0, n = atoi(argv[4]);
  double secs = atof(argv[5]);
  if (n < 1 || n > 5000 || secs <= 0 || secs > 600) return 2;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(argv[2], argv[3], &hints, &res);
  if (g) {
    fprintf(stderr, "store_flood: %s: %s\n", argv[2], gai_strerror(g));
    return 1;
  }
  int *fd = malloc((size_t)n * sizeof *fd);
  struct pollfd *p = malloc((size_t)n * sizeof *p);
  long opened = 0, closed = 0, budget = 20L * n;
  for (int i = 0; i < n; i++) {
    fd[i] = open_one(res, big);
    if (fd[i] >= 0) opened++;
  }
  double end = now() + secs;
  while (now() < end) {
    for (int i = 0; i < n; i++) p[i] = (struct pollfd){fd[i], POLLIN, 0};
    int r = poll(p, (nfds_t)n, 200);
    if (r <= 0) continue;
    for (int i = 0; i < n; i++) {
      if (fd[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char b[512];
      ssize_t k = recv(fd[i], b, sizeof b, MSG_DONTWAIT);
      if (k > 0) continue;
      close(fd[i]);
      closed++;
      fd[i] = opened < budget ? open_one(res, big) : -1;
      if (fd[i] >= 0) opened++;
    }
  }
  printf("store_flood %s: opened %ld connections, the store closed %ld\n", argv[1], opened, closed);
  for (int i = 0; i < n; i++)
    if (fd[i] >= 0) close(fd[i]);
  freeaddrinfo(res);
  free(fd);
  free(p);
  return 0;
}
