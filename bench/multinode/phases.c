#define _POSIX_C_SOURCE 200809L
/* phases: a sequence of collectives in one set of processes, each timed on its own, to see
 * whether one collective runs slower after others ran (the spread between launches and within
 * a launch; docs/PERFORMANCE.md, session 15). PHASES (default "ag64k,ar64m,ag64k") lists the
 * phases: an op (ag all_gather of a block of this size, ar all_reduce, bc broadcast from rank 0)
 * and a size with an optional k or m (KiB, MiB). Each phase: 3 warm-up calls, then 300 calls
 * (5 from 16 MiB) timed one by one; every call's time is the slowest rank's; rank 0 prints
 * "phase size med p10 p90" in us. Run by bench/multinode/phases.sh. */
#include "../comm/bench_common.h"
#include "accelerate.h"

static acc_state *st;
static float *buf, *big;

/* A phase's size: digits, then k (KiB) or m (MiB) or nothing; *end after it. */
static size_t phase_bytes(const char *s, char **end) {
  size_t b = strtoull(s, end, 10);
  return b * (**end == 'k' ? 1024 : **end == 'm' ? 1048576 : 1);
}

static acc_result call(int op, size_t count) {
  if (op == 'g') return acc_all_gather(st, buf, big, count, ACC_F32);
  if (op == 'r') return acc_all_reduce(st, buf, buf, count, ACC_F32, ACC_SUM);
  return acc_broadcast(st, buf, count, ACC_F32, 0);
}

int main(void) {
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "phases: %s\n", acc_last_error());
    return 1;
  }
  const int n = acc_state_num_processes(st), rank = acc_state_process_index(st);
  const char *spec = getenv("PHASES");
  if (!spec || !*spec) spec = "ag64k,ar64m,ag64k";
  char list[1024];
  snprintf(list, sizeof list, "%s", spec);
  size_t most = 4; /* the largest phase, to size the buffers */
  for (const char *p = list; *p;) {
    char *end;
    size_t b = phase_bytes(p + 2, &end);
    if (b > most) most = b;
    p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
  }
  buf = calloc(most / 4 + 1, 4);
  big = calloc((most / 4 + 1) * (size_t)n, 4);
  static double t[300];
  int rc = buf && big ? 0 : 1;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !rc;
       tok = strtok_r(NULL, ",", &save)) {
    int op = tok[0] == 'a' && tok[1] == 'g' ? 'g' : tok[0] == 'a' && tok[1] == 'r' ? 'r'
             : tok[0] == 'b' && tok[1] == 'c' ? 'b' : 0;
    char *end;
    size_t bytes = phase_bytes(tok + 2, &end);
    if (!op || bytes < 4) {
      if (rank == 0)
        fprintf(stderr, "phases: cannot read phase '%s' (ag|ar|bc, then a size)\n", tok);
      rc = 2;
      break;
    }
    const int it = bytes >= (16u << 20) ? 5 : 300;
    for (int w = 0; w < 3 && !rc; w++) rc = call(op, bytes / 4) != ACC_OK;
    for (int i = 0; i < it && !rc; i++) {
      double t0 = bench_now();
      rc = call(op, bytes / 4) != ACC_OK;
      t[i] = (bench_now() - t0) * 1e6;
    }
    if (rc || (rc = acc_all_reduce(st, t, t, (size_t)it, ACC_F64, ACC_MAX) != ACC_OK)) break;
    qsort(t, (size_t)it, sizeof *t, bench_cmp);
    if (rank == 0) printf("%-10s %10zu med %9.1f p10 %9.1f p90 %9.1f\n", tok, bytes, t[it / 2],
                          t[it / 10], t[it * 9 / 10]);
    fflush(stdout);
  }
  if (rc == 1) fprintf(stderr, "phases: rank %d: %s\n", rank, acc_last_error());
  acc_state_destroy(st);
  free(buf);
  free(big);
  return rc;
}
