#define _GNU_SOURCE
/* spin_count.so: an LD_PRELOAD counter of epoll_wait calls (how many returned events) and of
 * pthread_mutex_trylock calls (how many found the lock taken), printed to stderr at exit. gloo's
 * TCP I/O thread polls with epoll_wait and then try-locks the connection it was woken for; a
 * failed try-lock means it returns to epoll_wait at once, which reports the same event again: the
 * two counts together show how often it spun (docs/PERFORMANCE.md, session 15). Diagnostic only:
 * bench/multinode/phases.sh SPIN=1. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>

static atomic_long polls, polls_ev, tries, tries_busy;

int epoll_wait(int fd, struct epoll_event *ev, int max, int timeout) {
  static int (*real)(int, struct epoll_event *, int, int);
  if (!real) real = (int (*)(int, struct epoll_event *, int, int))dlsym(RTLD_NEXT, "epoll_wait");
  int r = real(fd, ev, max, timeout);
  polls++;
  if (r > 0) polls_ev++;
  return r;
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
  static int (*real)(pthread_mutex_t *);
  if (!real) real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
  int r = real(m);
  tries++;
  if (r == EBUSY) tries_busy++;
  return r;
}

__attribute__((destructor)) static void report(void) {
  if (polls)
    fprintf(stderr, "spin_count: epoll_wait %ld (with events %ld), trylock %ld (busy %ld)\n",
            (long)polls, (long)polls_ev, (long)tries, (long)tries_busy);
}
