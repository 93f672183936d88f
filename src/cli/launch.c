/* `accelerate launch`: minimal version (spawn N processes, fail fast). Extended by the launcher work. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static void remove_segments(const char *run_id) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "acc-", 4) == 0 && strstr(e->d_name, run_id)) {
      char path[512];
      snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
      unlink(path);
    }
  }
  closedir(d);
}

int acc_cli_launch(int argc, char **argv) {
  int n = 1, i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--num_processes") == 0 || strcmp(a, "--num-processes") == 0) {
      if (++i >= argc) {
        fprintf(stderr, "accelerate launch: --num_processes needs a value\n");
        return 2;
      }
      n = atoi(argv[i]);
    } else if (strncmp(a, "--num_processes=", 16) == 0) {
      n = atoi(a + 16);
    } else if (strcmp(a, "--") == 0) {
      i++;
      break;
    } else if (a[0] == '-') {
      fprintf(stderr, "accelerate launch: unknown option '%s'\n", a);
      return 2;
    } else {
      break;
    }
  }
  if (i >= argc) {
    fprintf(stderr, "accelerate launch: missing the program to run\n");
    return 2;
  }
  if (n < 1) {
    fprintf(stderr, "accelerate launch: --num_processes must be >= 1\n");
    return 2;
  }
  char run_id[64];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(run_id, sizeof run_id, "%ld%09ld", (long)getpid(), (long)ts.tv_nsec);
  pid_t pids[n];
  char buf[32];
  for (int r = 0; r < n; r++) {
    pid_t p = fork();
    if (p == 0) {
      setenv("ACCELERATE_RUN_ID", run_id, 1);
      snprintf(buf, sizeof buf, "%d", r);
      setenv("RANK", buf, 1);
      setenv("LOCAL_RANK", buf, 1);
      snprintf(buf, sizeof buf, "%d", n);
      setenv("WORLD_SIZE", buf, 1);
      setenv("LOCAL_WORLD_SIZE", buf, 1);
      setenv("MASTER_ADDR", "127.0.0.1", 0);
      setenv("MASTER_PORT", "29500", 0);
      if (n > 1) setenv("OMP_NUM_THREADS", "1", 0);
      execvp(argv[i], argv + i);
      fprintf(stderr, "accelerate launch: cannot run '%s': %s\n", argv[i], strerror(errno));
      _exit(127);
    }
    pids[r] = p;
  }
  int status_out = 0, alive = n;
  while (alive > 0) {
    int st;
    pid_t p = wait(&st);
    if (p < 0) break;
    alive--;
    int r = 0;
    while (r < n && pids[r] != p) r++;
    if (r < n) pids[r] = 0;
    int failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (failed && status_out == 0) {
      if (WIFSIGNALED(st)) {
        fprintf(stderr, "accelerate launch: rank %d (pid %d) was killed by signal %d (%s)\n", r, (int)p,
                WTERMSIG(st), strsignal(WTERMSIG(st)));
        status_out = 128 + WTERMSIG(st);
      } else {
        fprintf(stderr, "accelerate launch: rank %d (pid %d) exited with status %d\n", r, (int)p,
                WEXITSTATUS(st));
        status_out = WEXITSTATUS(st);
      }
      for (int k = 0; k < n; k++)
        if (pids[k] > 0) kill(pids[k], SIGTERM);
    }
  }
  remove_segments(run_id);
  return status_out;
}
