/* Process control, in C: what Accelerate's "Execution process" guide shows.
 *
 *   build/examples/process_control [--cache DIR]
 *   accelerate launch --num_processes 4 build/examples/process_control
 *
 * Every section checks its own result and the program exits with status 1 (after printing
 * acc_last_error()) when anything is off, so it doubles as a smoke test for any process count.
 * DIR (default: the current directory, which `accelerate launch` gives every process) holds
 * the small files the sections exchange; they are removed at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accelerate.h"

#define FAIL_IF(cond, ...)                                                   \
  do {                                                                       \
    if (cond) {                                                              \
      fprintf(stderr, "[process %d] process_control: ", rank);               \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      return 1;                                                              \
    }                                                                        \
  } while (0)
#define TRY(call) FAIL_IF((call) != ACC_OK, "%s failed: %s", #call, acc_last_error())

static int rank;

/* Payloads for the deferred functions of the on_* helpers. */
typedef struct said {
  const char *what;
  int ran; /* counts how often the function ran in this process */
} said;

static void say(void *payload) {
  said *s = payload;
  s->ran++;
  printf("[process %d] %s\n", rank, s->what);
  fflush(stdout);
}

/* Prints each process's text in rank order: one process at a time, a barrier between turns. */
static acc_result print_in_order(acc_state *st, const char *text) {
  int n = acc_state_num_processes(st);
  for (int r = 0; r < n; r++) {
    if (r == rank) {
      printf("[process %d] %s\n", rank, text);
      fflush(stdout);
    }
    acc_result rc = acc_wait_for_everyone(st);
    if (rc != ACC_OK) return rc;
  }
  return ACC_OK;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int read_text(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = ".";
  if (argc == 3 && strcmp(argv[1], "--cache") == 0) dir = argv[2];
  else if (argc != 1) {
    fprintf(stderr, "usage: %s [--cache DIR]\n", argv[0]);
    return 2;
  }

  acc_state *st = NULL;
  if (acc_state_create(&st, NULL) != ACC_OK) {
    fprintf(stderr, "process_control: %s\n", acc_last_error());
    return 1;
  }
  rank = acc_state_process_index(st);
  const int n = acc_state_num_processes(st);

  /* 1. Every process describes itself, in rank order. */
  TRY(print_in_order(st, acc_state_describe(st)));

  /* 2. Once per machine, once overall, on the last process, on one chosen process. */
  said local = {"on_local_main_process: once per machine", 0};
  said main_only = {"on_main_process: once in the whole job", 0};
  said last = {"on_last_process: only on the last process", 0};
  said chosen = {"on_process(1): only on process 1 (or the only process)", 0};
  acc_on_local_main_process(st, say, &local);
  acc_on_main_process(st, say, &main_only);
  acc_on_last_process(st, say, &last);
  acc_on_process(st, 1, say, &chosen);
  acc_print(st, "acc_print: printed by the main process only (%d process(es) in the job)\n", n);
  int ran[4] = {local.ran, main_only.ran, last.ran, chosen.ran};
  TRY(acc_all_reduce(st, ran, ran, 4, ACC_I32, ACC_SUM));
  FAIL_IF(ran[0] != acc_state_num_machines(st) || ran[1] != 1 || ran[2] != 1 || ran[3] != 1,
          "the on_* helpers ran %d/%d/%d/%d times, expected %d/1/1/1", ran[0], ran[1], ran[2],
          ran[3], acc_state_num_machines(st));
  TRY(acc_wait_for_everyone(st));

  /* 3. main_process_first: the main process prepares the data set and writes a cache; the others
   * start only once it is done, and read the cache instead of preparing it again. */
  char cache[1024], text[256];
  snprintf(cache, sizeof cache, "%s/process_control_cache.txt", dir);
  int prep_failed = 0;
  acc_result rc = ACC_OK;
  ACC_MAIN_PROCESS_FIRST(st, rc) {
    if (acc_state_is_main_process(st)) {
      printf("[process %d] preparing the data set, writing %s\n", rank, cache);
      prep_failed = write_text(cache, "prepared 1000 examples\n") != 0;
    } else {
      prep_failed = read_text(cache, text, sizeof text) != 0 ||
                    strcmp(text, "prepared 1000 examples\n") != 0;
      printf("[process %d] read the cache: %s", rank, prep_failed ? "(missing)\n" : text);
    }
    fflush(stdout);
  }
  TRY(rc);
  FAIL_IF(prep_failed, "the data set cache %s could not be written or read", cache);

  /* 4. Deferred work: every process saves its part, then (after wait_for_everyone) the main
   * process knows all parts are on disk and combines them. */
  char part[1100];
  snprintf(part, sizeof part, "%s/process_control_part%d.txt", dir, rank);
  snprintf(text, sizeof text, "%d\n", (rank + 1) * 10);
  FAIL_IF(write_text(part, text) != 0, "cannot write %s", part);
  TRY(acc_wait_for_everyone(st));
  if (acc_state_is_main_process(st)) {
    int sum = 0;
    for (int r = 0; r < n; r++) {
      snprintf(part, sizeof part, "%s/process_control_part%d.txt", dir, r);
      FAIL_IF(read_text(part, text, sizeof text) != 0, "part %s is missing after the barrier",
              part);
      sum += atoi(text);
    }
    printf("[process %d] after wait_for_everyone: %d parts, sum %d (expected %d)\n", rank, n, sum,
           10 * n * (n + 1) / 2);
    FAIL_IF(sum != 10 * n * (n + 1) / 2, "the parts sum to %d, expected %d", sum,
            10 * n * (n + 1) / 2);
  }

  /* 5. Early stopping: one process (process 1, or the only one) sets the trigger at step 3;
   * check_trigger is collective, so every process stops at the same step. */
  const int trigger_rank = n > 1 ? 1 : 0;
  int stopped_at = -1;
  for (int step = 0; step < 10; step++) {
    if (rank == trigger_rank && step == 3) TRY(acc_set_trigger(st));
    int stop = 0;
    TRY(acc_check_trigger(st, &stop));
    if (stop) {
      stopped_at = step;
      break;
    }
  }
  int range[2] = {stopped_at, -stopped_at}; /* min and -max in one all-reduce */
  TRY(acc_all_reduce(st, range, range, 2, ACC_I32, ACC_MIN));
  FAIL_IF(range[0] != 3 || -range[1] != 3, "processes stopped between steps %d and %d, expected 3",
          range[0], -range[1]);
  acc_print(st, "check_trigger: process %d set the trigger, every process stopped at step 3\n",
            trigger_rank);

  /* 6. split_between_processes over a list of prompts, without and with padding. */
  const char *prompts[] = {"a dog", "a cat", "a chicken", "a cow", "a horse"};
  const size_t np = sizeof prompts / sizeof prompts[0];
  for (int pad = 0; pad <= 1; pad++) {
    acc_split sp;
    TRY(acc_split_between_processes(st, np, pad, &sp));
    char line[512];
    int len = snprintf(line, sizeof line, "split_between_processes(%s):",
                       pad ? "apply_padding" : "no padding");
    for (size_t i = 0; i < sp.padded_count && len < (int)sizeof line; i++)
      len += snprintf(line + len, sizeof line - (size_t)len, " \"%s\"",
                      prompts[acc_split_item(&sp, i)]);
    TRY(print_in_order(st, line));
    /* Without padding the shares cover every prompt exactly once. */
    unsigned long long counts[2] = {sp.count, sp.padded_count};
    TRY(acc_all_reduce(st, counts, counts, 2, ACC_I64, ACC_SUM));
    size_t expect_padded = pad && n > 1 ? (size_t)n * ((np + (size_t)n - 1) / (size_t)n) : np;
    FAIL_IF(counts[0] != np || counts[1] != expect_padded,
            "split gave %llu items (%llu with padding), expected %zu (%zu)", counts[0], counts[1],
            np, expect_padded);
  }

  /* Clean up the exchanged files once nobody reads them any more. */
  TRY(acc_wait_for_everyone(st));
  snprintf(part, sizeof part, "%s/process_control_part%d.txt", dir, rank);
  unlink(part);
  if (acc_state_is_main_process(st)) unlink(cache);
  acc_print(st, "process_control: all sections passed on %d process(es)\n", n);
  acc_state_destroy(st);
  return 0;
}
