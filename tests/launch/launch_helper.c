/* A program started by `accelerate launch` in the launcher tests. argv[1] selects what it does:
 *   env DIR            write DIR/env.<RANK> (O_EXCL: a rank seen twice fails) with the launch
 *                      variables and what the library detects from them
 *   fail R CODE        rank R exits CODE; the others block in pause()
 *   signal R SIG       rank R kills itself with SIG; the others block in pause()
 *   ignore_term R DIR  the others ignore SIGTERM, write DIR/ignoring.<RANK> and block; rank R
 *                      then exits 5
 *   marker DIR         write DIR/ready.<RANK> (with the pid), block; on SIGINT/SIGTERM write
 *                      DIR/marker.<RANK>.<sig> and exit 0
 *   restart DIR        on attempt 0 rank 1 exits 7; everyone appends "<attempt> <run id>" to
 *                      DIR/attempts.<RANK>
 *   print              "hello from R" on stdout, "warn R" on stderr, then a line without '\n'
 *   shm DIR            create /dev/shm/acc-test-<RUN_ID>-<RANK>, write DIR/runid, exit 0
 *   orphan DIR         rank 0 forks a grandchild (pid in DIR/grandchild) that blocks; rank 1 exits 9
 *   blame              the last rank's fetch fails inside next_batch_joined: every rank prints its
 *                      error and exits 1; the others fail because of it (ACC_ERR_REMOTE) and exit
 *                      first: the last rank exits only once the launcher's board shows every other
 *                      rank gone (polled, hang guard 30 s), the order in which the launcher used to
 *                      blame the wrong rank (issue 20 N6) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/rdzv.h"
#include "state/state.h"
#include "accelerate.h"

static const char *dir;
static int rank;

static const char *env(const char *k) {
  const char *v = getenv(k);
  return v ? v : "<unset>";
}

static void on_sig(int sig) {
  char path[512];
  snprintf(path, sizeof path, "%s/marker.%d.%d", dir, rank, sig);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
  _exit(0);
}

static void write_file(const char *name, const char *text, int excl) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, excl ? "wx" : "a");
  if (!f) {
    fprintf(stderr, "launch_helper: cannot create %s: %s\n", path, strerror(errno));
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

static void block(void) {
  for (;;) pause();
}

static int blame_fetch(int64_t index, void *const *fields, void *payload) {
  int n = *(int *)payload;
  if (rank == n - 1 && index >= 4 * (n - 1)) return -1;
  *(float *)fields[0] = (float)index;
  return 0;
}

static int blame(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.even_batches = 0;
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, &ao) != ACC_OK) return 3;
  int n = acc_accelerator_num_processes(acc);
  acc_field_desc f[1] = {{ACC_F32, 1}};
  acc_dataset *ds = NULL;
  acc_dataloader *dl = NULL;
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 4;
  if (acc_dataset_create_map(&ds, 25, f, 1, blame_fetch, &n) != ACC_OK ||
      acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl) != ACC_OK)
    return 3;
  acc_result rc = ACC_OK;
  for (int i = 0; i < 20 && rc == ACC_OK; i++) {
    const acc_batch *b = NULL;
    int more = 0;
    rc = acc_accelerator_next_batch_joined(acc, dl, &b, &more);
    if (rc == ACC_OK && !more) break;
  }
  if (rc == ACC_OK) return 4; /* the fetch did not fail: the test's premise is broken */
  fprintf(stderr, "rank %d: %s: %s\n", rank, acc_result_name(rc), acc_last_error());
  if (rank == n - 1) {
    int board = acc__board_open();
    for (int k = 0; board >= 0 && k < 3000; k++) {
      int gone = 0;
      for (int r = 0; r < n - 1; r++) gone += acc__board_find_dead(board, rank, r, NULL) == r;
      if (gone == n - 1) break;
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  return 1; /* exits with the error as this thread's last: the launcher reads it from the board */
}

int main(int argc, char **argv) {
  if (argc < 2) return 64;
  rank = atoi(getenv("RANK") ? env("RANK") : env("OMPI_COMM_WORLD_RANK"));
  const char *mode = argv[1];
  if (strcmp(mode, "blame") == 0) return blame();
  dir = argc > 2 ? argv[2] : ".";
  if (strcmp(mode, "env") == 0) {
    static const char *keys[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                 "MASTER_PORT", "ACCELERATE_RUN_ID", "ACCELERATE_USE_CPU",
                                 "ACCELERATE_MIXED_PRECISION", "ACCELERATE_DEBUG_MODE",
                                 "ACCELERATE_NUM_MACHINES", "ACCELERATE_MACHINE_RANK",
                                 "ACCELERATE_RESTART_COUNT", "OMP_NUM_THREADS",
                                 "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "USER_VAR"};
    char text[4096];
    size_t n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
      n += (size_t)snprintf(text + n, sizeof text - n, "%s=%s\n", keys[i], env(keys[i]));
    acc__env_info e;
    if (acc__detect_env(&e) == ACC_OK)
      n += (size_t)snprintf(text + n, sizeof text - n, "detected=%s %d/%d local %d/%d machines %d\n",
                            e.launcher, e.rank, e.size, e.local_rank, e.local_size, e.num_machines);
    else
      n += (size_t)snprintf(text + n, sizeof text - n, "detected=error %s\n", acc_last_error());
    char name[64];
    snprintf(name, sizeof name, "env.%d", rank);
    write_file(name, text, 1);
    return 0;
  }
  if (strcmp(mode, "fail") == 0 && argc > 3) {
    if (rank == atoi(argv[2])) return atoi(argv[3]);
    block();
  }
  if (strcmp(mode, "signal") == 0 && argc > 3) {
    if (rank == atoi(argv[2])) {
      signal(atoi(argv[3]), SIG_DFL);
      raise(atoi(argv[3]));
      return 99;
    }
    block();
  }
  if (strcmp(mode, "ignore_term") == 0 && argc > 3) {
    dir = argv[3];
    int world = atoi(env("WORLD_SIZE"));
    if (rank != atoi(argv[2])) {
      signal(SIGTERM, SIG_IGN);
      char name[64];
      snprintf(name, sizeof name, "ignoring.%d", rank);
      write_file(name, "", 1);
      block();
    }
    /* fail only once every other rank ignores SIGTERM */
    for (;;) { /* polled; the test's own time guard catches a hang */
      int ready = 0;
      for (int k = 0; k < world; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/ignoring.%d", dir, k);
        ready += access(path, F_OK) == 0;
      }
      if (ready == world - 1) break;
      usleep(1000);
    }
    return 5;
  }
  if (strcmp(mode, "marker") == 0) {
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    char name[64], text[64];
    snprintf(name, sizeof name, "ready.%d", rank);
    snprintf(text, sizeof text, "%ld\n", (long)getpid());
    write_file(name, text, 1);
    block();
  }
  if (strcmp(mode, "restart") == 0) {
    char name[64], text[128];
    snprintf(name, sizeof name, "attempts.%d", rank);
    snprintf(text, sizeof text, "%s %s\n", env("ACCELERATE_RESTART_COUNT"), env("ACCELERATE_RUN_ID"));
    write_file(name, text, 0);
    if (rank == 1 && strcmp(env("ACCELERATE_RESTART_COUNT"), "0") == 0) return 7;
    return 0;
  }
  if (strcmp(mode, "quiet") == 0) { /* acc_state_silence_non_main_stdout */
    acc_state *st;
    if (acc_state_create(&st, NULL) != ACC_OK) return 3;
    printf("before %d\n", rank);
    if (acc_state_silence_non_main_stdout(st) != ACC_OK) return 4;
    printf("after %d\n", rank);
    fflush(stdout);
    fprintf(stderr, "err %d\n", rank);
    return 0;
  }
  if (strcmp(mode, "print") == 0) {
    printf("hello from %d\n", rank);
    fflush(stdout);
    fprintf(stderr, "warn %d\n", rank);
    printf("tail %d", rank);
    return 0;
  }
  if (strcmp(mode, "shm") == 0) {
    char path[256];
    snprintf(path, sizeof path, "/dev/shm/acc-test-%s-%d", env("ACCELERATE_RUN_ID"), rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 1;
    close(fd);
    if (rank == 0) {
      char text[128];
      snprintf(text, sizeof text, "%s", env("ACCELERATE_RUN_ID"));
      write_file("runid", text, 1);
    }
    return 0;
  }
  if (strcmp(mode, "orphan") == 0) {
    if (rank == 0) {
      pid_t p = fork();
      if (p == 0) block();
      char text[64];
      snprintf(text, sizeof text, "%ld\n", (long)p);
      /* written whole under another name, then renamed: rank 1 waits for the name, and must
       * not see an empty file (it exits, and the launcher kills this rank mid-write) */
      write_file("grandchild.tmp", text, 1);
      char from[512], to[512];
      snprintf(from, sizeof from, "%s/grandchild.tmp", dir);
      snprintf(to, sizeof to, "%s/grandchild", dir);
      if (rename(from, to) != 0) {
        fprintf(stderr, "launch_helper: cannot rename %s: %s\n", from, strerror(errno));
        exit(1);
      }
      block();
    }
    /* wait until rank 0 has recorded its grandchild */
    char path[512];
    snprintf(path, sizeof path, "%s/grandchild", dir);
    while (access(path, F_OK) != 0) usleep(1000); /* polled; the test's time guard bounds it */
    return 9;
  }
  fprintf(stderr, "launch_helper: unknown mode %s\n", mode);
  return 64;
}
