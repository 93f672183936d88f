/* A second local user's attack on the shared-memory rendezvous, for tests/rdzv/test_rdzv_users.c.
 * Usage: shm_attacker <segment name> <seconds>
 * Creates the named segment with mode 0666 and a valid header for a world of 2, holds rank 0's
 * liveness lock as a living rank 0 would, prints "ready", then plays rank 0 for the victim's
 * rank 1 step by step: it prints what rank 1 sent and answers with 1000 as rank 0's value. It
 * stops after <seconds>, or when rank 1 leaves. Exit status: 0, or 1 when the setup failed. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/shm.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: shm_attacker <segment name> <seconds>\n");
    return 2;
  }
  double until = now_s() + atof(argv[2]);
  uint64_t chunk = 512 * 1024, total = acc__shm_total(2, chunk);
  int fd = shm_open(argv[1], O_RDWR | O_CREAT | O_EXCL, 0666);
  if (fd < 0 || fchmod(fd, 0666) != 0 || ftruncate(fd, (off_t)total) != 0) {
    perror("shm_attacker: create");
    return 1;
  }
  uint8_t *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    perror("shm_attacker: mmap");
    return 1;
  }
  acc__shm_header *h = (acc__shm_header *)m;
  acc__shm_ctrl *c = (acc__shm_ctrl *)(m + acc__shm_ctrl_off());
  uint8_t *slots = m + acc__shm_slots_off(2);
  h->magic = ACC_SHM_MAGIC;
  h->version = ACC_SHM_VERSION;
  h->world = 2;
  h->chunk = chunk;
  h->total_bytes = total;
  h->creator_pid = (int32_t)getpid();
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int r = 0; r < 2; r++) pthread_mutex_init(&c[r].lock, &a);
  pthread_mutex_lock(&c[0].lock);
  atomic_store(&c[0].pid, (int32_t)getpid());
  atomic_store(&c[0].registered, 1);
  atomic_store(&h->ready, 1);
  printf("ready\n");
  fflush(stdout);
  for (uint64_t s = 1; s < 50; s++) {
    while (atomic_load(&c[1].seq) < s) {
      if (atomic_load(&c[1].departed) || now_s() > until) goto out;
      usleep(200);
    }
    float got, inject = 1000.0f;
    int p = (int)(s & 1);
    memcpy(&got, slots + (size_t)(2 + p) * chunk, sizeof got); /* rank 1's slot */
    printf("step %llu: victim rank 1 sent first float %g\n", (unsigned long long)s, got);
    fflush(stdout);
    memcpy(slots + (size_t)p * chunk, &inject, sizeof inject); /* "rank 0"'s slot */
    atomic_store(&c[0].seq, s);
    atomic_fetch_add(&h->futex_word, 1);
  }
out:
  shm_unlink(argv[1]);
  return 0;
}
