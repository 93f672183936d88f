/* The building blocks of a load from the page cache, each timed alone on one file that is in the
 * page cache (read once before): what one copy per byte costs on this machine, depending on
 * where the bytes come from and where they go. load_state's cost is a sum of these (docs/
 * PERFORMANCE.md, "load_state at the page-cache limit").
 * Usage: acc_bench_copy FILE [rounds=5]   (FILE: any large file, e.g. a checkpoint's
 * optimizer_0.safetensors). Rounds are interleaved; the median of each step is printed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../bench_machine.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int read_all(int fd, char *dst, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t r = pread(fd, dst + off, n - off, (off_t)off);
    if (r <= 0) return -1;
    off += (size_t)r;
  }
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { STEPS = 8, MAXR = 64 };
static const char *names[STEPS] = {
    "pread 1 MiB chunks into one hot 1 MiB buffer (dd bs=1M)",
    "pread into a touched buffer of the file's size",
    "pread into a fresh mmap buffer (first touch)",
    "mmap + MADV_POPULATE_READ (no copy)",
    "memcpy from the populated mapping into a touched buffer",
    "memcpy from the mapping, no populate (page faults)",
    "memcpy touched -> fresh mmap buffer (a snapshot copy)",
    "memcpy touched -> touched buffer",
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE [rounds]\n", argv[0]);
    return 2;
  }
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 1 || rounds > MAXR) rounds = 5;
  int fd = open(argv[1], O_RDONLY);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size <= 0) {
    fprintf(stderr, "bench_copy: cannot open '%s': %s\n", argv[1], strerror(errno));
    return 1;
  }
  size_t n = (size_t)sb.st_size;
  char *hot = malloc(1 << 20), *dst = malloc(n);
  if (!hot || !dst) return 1;
  memset(dst, 1, n);
  char *dst2 = malloc(n);
  if (!dst2) return 1;
  memset(dst2, 2, n);
  if (read_all(fd, dst, n) != 0) return 1; /* page cache warm, dst touched */
  double t[STEPS][MAXR];
  for (int r = 0; r < rounds; r++) {
    double t0 = now_s();
    for (size_t off = 0; off < n;) {
      ssize_t g = pread(fd, hot, n - off < (1 << 20) ? n - off : (1 << 20), (off_t)off);
      if (g <= 0) return 1;
      off += (size_t)g;
    }
    t[0][r] = now_s() - t0;
    t0 = now_s();
    if (read_all(fd, dst, n)) return 1;
    t[1][r] = now_s() - t0;
    t0 = now_s();
    char *fresh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED || read_all(fd, fresh, n)) return 1;
    t[2][r] = now_s() - t0;
    munmap(fresh, n);
    t0 = now_s();
    char *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return 1;
    int pop = madvise(map, n, MADV_POPULATE_READ);
    t[3][r] = now_s() - t0;
    t0 = now_s();
    memcpy(dst, map, n);
    t[4][r] = now_s() - t0;
    munmap(map, n);
    if (pop != 0) t[3][r] = t[4][r] = -1;
    map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return 1;
    t0 = now_s();
    memcpy(dst, map, n);
    t[5][r] = now_s() - t0;
    munmap(map, n);
    t0 = now_s();
    fresh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) return 1;
    memcpy(fresh, dst, n);
    t[6][r] = now_s() - t0;
    munmap(fresh, n);
    t0 = now_s();
    memcpy(dst2, dst, n);
    t[7][r] = now_s() - t0;
  }
  bench_machine();
  printf("# %s: %zu bytes, median of %d interleaved rounds\n", argv[1], n, rounds);
  for (int s = 0; s < STEPS; s++) {
    qsort(t[s], (size_t)rounds, sizeof(double), cmp_d);
    double m = t[s][rounds / 2];
    if (m < 0) printf("%-58s  (MADV_POPULATE_READ not supported)\n", names[s]);
    else printf("%-58s %8.4f s %8.2f GB/s\n", names[s], m, (double)n / m / 1e9);
  }
  free(hot);
  free(dst);
  free(dst2);
  close(fd);
  return 0;
}
