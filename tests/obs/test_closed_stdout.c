/* Started with descriptor 1 closed (red-team 3, N8): the library must not hand descriptor 1 to a
 * file it creates. The program closes 1, creates the state and a JSONL tracker, logs, prints a
 * line on stdout; the line must not be in run.jsonl and descriptor 1 must be /dev/null.
 * Usage: test_obs_closed_stdout <scratch dir> */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "acc_test.h"

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char cmd[2200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/closed_stdout' && mkdir -p '%s/closed_stdout'", argv[1], argv[1]);
  if (system(cmd) != 0) return 1;
  snprintf(cmd, sizeof cmd, "%s/closed_stdout", argv[1]);
  if (chdir(cmd) != 0) return 1;
  fflush(stdout);
  close(1);
  acc_state *st = NULL;
  REQUIRE_OK(acc_state_create(&st, NULL));
  acc_trackers *tr = NULL;
  REQUIRE_OK(acc_trackers_create(&tr, st, "jsonl", NULL));
  REQUIRE_OK(acc_init_trackers(tr, "r", NULL, 0));
  acc_kv v[] = {ACC_KV_NUM("loss", 1.5)};
  CHECK_OK(acc_tracker_log(tr, v, 1, 1));
  printf("PRINTED ON STDOUT\n");
  fflush(stdout);
  CHECK_OK(acc_end_training(tr));
  acc_trackers_destroy(tr);
  char link[256] = "";
  ssize_t n = readlink("/proc/self/fd/1", link, sizeof link - 1);
  if (n > 0) link[n] = 0;
  CHECK(strcmp(link, "/dev/null") == 0, "descriptor 1 is \"%s\" (expected /dev/null)", link);
  FILE *f = fopen("r/run.jsonl", "r");
  char buf[4096] = "";
  size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[got] = 0;
  if (f) fclose(f);
  CHECK(strstr(buf, "\"loss\":1.5") != NULL, "run.jsonl holds the record: %s", buf);
  CHECK(strstr(buf, "PRINTED") == NULL, "the program's stdout went into run.jsonl: %s", buf);
  acc_state_destroy(st);
  return acc_test_finish("obs_closed_stdout");
}
