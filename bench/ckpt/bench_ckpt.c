/* Checkpoint throughput: save_state and load_state of a model with `params` float32 parameters
 * (10 tensors) and an AdamW optimizer (two moments per parameter), so one checkpoint holds
 * 12 bytes per parameter, against dd writing the same bytes (rounded up to whole MiB, conv=fsync) and reading them back,
 * and against the same reads without starting a process: the checkpoint's files read in 1 MiB
 * chunks into one buffer (dd's pattern), and read into buffers of their size that already exist
 * (where a load into the program's memory must put the bytes). Medians and bests of the rounds.
 * Usage: acc_bench_ckpt <dir> [params=100000000] [reps=3] */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <accelerate.h>

#include "../bench_machine.h"
#include "ckpt/ckpt_dir.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads every regular file of dir: into one 1 MiB buffer (whole == NULL), or each file into
 * whole (which holds the directory's bytes). Returns 0, or -1 on a read error. */
static int read_dir(const char *dir, char *chunk, char *whole) {
  DIR *d = opendir(dir);
  struct dirent *e;
  size_t at = 0;
  int bad = d == NULL;
  while (!bad && (e = readdir(d)) != NULL) {
    char p[2048];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    int fd = open(p, O_RDONLY);
    if (fd < 0) return -1;
    for (size_t off = 0; off < (size_t)sb.st_size;) {
      size_t want = whole ? (size_t)sb.st_size - off : (size_t)1 << 20;
      ssize_t r = pread(fd, whole ? whole + at + off : chunk, want, (off_t)off);
      if (r <= 0) {
        bad = 1;
        break;
      }
      off += (size_t)r;
    }
    at += (size_t)sb.st_size;
    close(fd);
  }
  if (d) closedir(d);
  return bad ? -1 : 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static long long dir_bytes(const char *dir) {
  DIR *d = opendir(dir);
  long long n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char p[2048];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) n += (long long)sb.st_size;
  }
  if (d) closedir(d);
  return n;
}

#define TRY(call)                                                            \
  do {                                                                       \
    if ((call) != ACC_OK) {                                                  \
      fprintf(stderr, "bench_ckpt: %s: %s\n", #call, acc_last_error());      \
      return 1;                                                              \
    }                                                                        \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [params] [reps]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  size_t params = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000000;
  int reps = argc > 3 ? atoi(argv[3]) : 3;
  const int nt = 10;
  size_t per = params / nt;
  float *w = malloc(per * nt * sizeof(float)), *g = malloc(per * nt * sizeof(float));
  if (!w || !g) return 1;
  for (size_t i = 0; i < per * nt; i++) {
    w[i] = (float)(i % 1000) * 1e-3f;
    g[i] = (float)(i % 7) * 1e-4f;
  }
  acc_accelerator *acc;
  acc_model *m;
  acc_optimizer *opt;
  TRY(acc_accelerator_create(&acc, NULL));
  TRY(acc_model_create(&m));
  for (int t = 0; t < nt; t++) {
    char name[32];
    snprintf(name, sizeof name, "layer%d.weight", t);
    int64_t shape[2] = {(int64_t)(per / 1000), 1000};
    TRY(acc_model_add_parameter(m, name, w + (size_t)t * per, g + (size_t)t * per, per % 1000 ? 1 : 2,
                                per % 1000 ? (int64_t[]){(int64_t)per} : shape));
  }
  TRY(acc_accelerator_prepare_model(acc, m));
  TRY(acc_optimizer_create_adamw(&opt, m, NULL));
  TRY(acc_accelerator_prepare_optimizer(acc, opt));
  TRY(acc_optimizer_step(opt)); /* moments become non-zero */
  TRY(acc__mkdirs(dir));
  char ck[1500];
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  /* Interleaved rounds (save, dd write, load, dd read) so that a busy machine hurts both sides
   * alike; the best of each is reported. dd writes exactly the checkpoint's byte count. */
  enum { NT = 7 };
  if (reps < 1) reps = 1;
  double *all = calloc((size_t)reps * NT, sizeof *all), best[NT], med[NT];
  char *chunk = malloc(1 << 20), *whole = NULL;
  if (!all || !chunk) return 1;
  long long bytes = 0;
  char cmd[4096];
  for (int r = 0; r < reps; r++) {
    TRY(acc__rmtree(ck));
    double t0 = now_s();
    TRY(acc_accelerator_save_state(acc, ck, NULL));
    double *t = all + (size_t)r * NT;
    t[0] = now_s() - t0;
    bytes = dir_bytes(ck);
    if (!whole) { /* once, touched: a program's existing buffers */
      whole = malloc((size_t)bytes);
      if (!whole) return 1;
      memset(whole, 1, (size_t)bytes);
    }
    snprintf(cmd, sizeof cmd, "rm -f '%s/dd.bin' && dd if=/dev/zero of='%s/dd.bin' bs=1M count=%lld conv=fsync "
             "2>/dev/null", dir, dir, (bytes + (1 << 20) - 1) >> 20);
    t0 = now_s();
    if (system(cmd) != 0) return 1;
    t[1] = now_s() - t0;
    t0 = now_s();
    TRY(acc_accelerator_load_state(acc, ck, NULL));
    t[2] = now_s() - t0;
    snprintf(cmd, sizeof cmd, "dd if='%s/dd.bin' of=/dev/null bs=1M 2>/dev/null", dir);
    t0 = now_s();
    if (system(cmd) != 0) return 1;
    t[3] = now_s() - t0;
    /* the same read into one buffer of the checkpoint's size: the bytes land in memory, as a
     * load must put them (the 1 MiB reads above reuse one cache-hot buffer) */
    snprintf(cmd, sizeof cmd, "dd if='%s/dd.bin' of=/dev/null bs=%lld count=1 iflag=fullblock 2>/dev/null", dir,
             (bytes + (1 << 20) - 1) >> 20 << 20);
    t0 = now_s();
    if (system(cmd) != 0) return 1;
    t[4] = now_s() - t0;
    t0 = now_s();
    if (read_dir(ck, chunk, NULL) != 0) return 1;
    t[5] = now_s() - t0;
    t0 = now_s();
    if (read_dir(ck, chunk, whole) != 0) return 1;
    t[6] = now_s() - t0;
  }
  for (int k = 0; k < NT; k++) {
    double v[256];
    int n = reps < 256 ? reps : 256;
    for (int r = 0; r < n; r++) v[r] = all[(size_t)r * NT + (size_t)k];
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    best[k] = v[0];
    med[k] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  static const char *names[NT] = {"save_state", "dd write+fsync", "load_state", "dd read bs=1M", "dd read 1 buf",
                                  "pread 1MiB chunks", "pread into bufs"};
  bench_machine(); /* the machine the figures come from (load at the end of the rounds) */
  printf("params %zu, checkpoint %lld bytes, %d interleaved rounds (dd: started with system(); pread: in this "
         "process, the checkpoint's files)\n", per * nt, bytes, reps);
  printf("%-18s %9s %9s %10s\n", "", "median s", "best s", "MB/s med");
  for (int k = 0; k < NT; k++)
    printf("%-18s %9.4f %9.4f %10.1f\n", names[k], med[k], best[k], (double)bytes / med[k] / 1e6);
  printf("save_state / dd write (medians):          %.2fx\n", med[1] / med[0]);
  printf("load_state / dd read bs=1M (medians):     %.2fx\n", med[3] / med[2]);
  printf("load_state / pread 1MiB chunks (medians): %.2fx\n", med[5] / med[2]);
  printf("load_state / pread into bufs (medians):   %.2fx\n", med[6] / med[2]);
  printf("load_state / dd read 1 buffer (medians):  %.2fx\n", med[4] / med[2]);
  free(all);
  free(chunk);
  free(whole);
  snprintf(cmd, sizeof cmd, "%s/dd.bin", dir);
  remove(cmd);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
  free(w);
  free(g);
  return 0;
}
