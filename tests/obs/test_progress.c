/* The library's progress bar: exact line format, TTY redraw throttling, plain lines every N%
 * when not a terminal, main process only, and log lines never landing inside a bar. */
#include "acc_test.h"

static size_t slurp(FILE *f, char *buf, size_t len) {
  fflush(f);
  rewind(f);
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  return n;
}

static size_t count(const char *s, char c) {
  size_t n = 0;
  for (; *s; s++) n += *s == c;
  return n;
}

static acc_progress *bar_on(FILE *f, const char *label, uint64_t total, int tty, int every) {
  acc_progress_options o = ACC_PROGRESS_OPTIONS_INIT;
  o.out = f;
  o.tty = tty;
  o.every_percent = every;
  acc_progress *p = NULL;
  REQUIRE_OK(acc_progress_create(&p, NULL, label, total, &o));
  return p;
}

int main(void) {
  char line[256], out[8192];
  FILE *f = tmpfile();
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_SYSTEM);

  acc_progress *p = bar_on(f, "epoch 1/5", 938, 0, 10);
  acc_progress_update_at(p, 469, 30016, 2.0); /* 50%: prints a line, sets the counters */
  acc_progress_format(p, 2.0, line, sizeof line);
  CHECK(strcmp(line, "epoch 1/5 [##########..........] 469/938 50% 15008 samples/s ETA 0:02") == 0,
        "got \"%s\"", line);
  acc_progress_destroy(p);
  p = bar_on(f, "", 10, 0, 10);
  acc_progress_format(p, 0.0, line, sizeof line);
  CHECK(strcmp(line, "[....................] 0/10 0% - steps/s ETA -") == 0, "start: \"%s\"", line);
  acc_progress_update_at(p, 1, 64, 400.0);
  acc_progress_format(p, 400.0, line, sizeof line);
  CHECK(strcmp(line, "[##..................] 1/10 10% 0 samples/s ETA 1:00:00") == 0,
        "long ETA: \"%s\"", line);
  acc_progress_destroy(p);
  fclose(f);

  /* Not a terminal: one line at each 10% mark, the last from finish; every 25%: 4 lines. */
  int every[] = {10, 25};
  size_t lines[] = {10, 4};
  for (int k = 0; k < 2; k++) {
    f = tmpfile();
    p = bar_on(f, "eval", 100, 0, every[k]);
    for (int s = 1; s <= 100; s++)
      acc_progress_update_at(p, (uint64_t)s, (uint64_t)s * 10, s * 0.01);
    acc_progress_finish_at(p, 1.0);
    acc_progress_destroy(p); /* after finish: prints nothing more */
    slurp(f, out, sizeof out);
    CHECK(count(out, '\n') == lines[k] && count(out, '\r') == 0, "%zu plain lines, got:\n%s",
          lines[k], out);
    if (k == 0) {
      const char *first = "eval [##..................] 10/100 10% 1000 samples/s ETA 0:01\n";
      CHECK(strncmp(out, first, strlen(first)) == 0, "first line: %s", out);
    }
    CHECK(strstr(out, "eval [####################] 100/100 100% 1000 samples/s ETA 0:00\n") != NULL,
          "last line");
    fclose(f);
  }

  /* Terminal: redrawn in place at most every 0.1 s, newline at the end. */
  f = tmpfile();
  p = bar_on(f, "t", 4, 1, 10);
  acc_progress_update_at(p, 1, 1, 0.0);  /* drawn */
  acc_progress_update_at(p, 2, 2, 0.05); /* too soon */
  acc_progress_update_at(p, 3, 3, 0.15); /* drawn */
  acc_progress_finish_at(p, 0.2);        /* drawn */
  size_t n = slurp(f, out, sizeof out);
  CHECK(count(out, '\r') == 3 && count(out, '\n') == 1 && n > 0 && out[n - 1] == '\n',
        "3 redraws and one newline, got \"%s\"", out);
  CHECK(strstr(out, "2/4") == NULL &&
            strstr(out, "\rt [###############.....] 3/4 75% 20 samples/s ETA 0:00\033[K"),
        "TTY content: \"%s\"", out);
  acc_progress_destroy(p);
  fclose(f);

  /* A log line while a bar is on screen: the bar's line is cleared first and redrawn after, so
   * the log line never lands inside it. */
  f = tmpfile();
  p = bar_on(f, "b", 10, 1, 10);
  acc_progress_update_at(p, 5, 0, 1.0);
  acc_logger *lg;
  REQUIRE_OK(acc_get_logger("progress-test", ACC_LOG_INFO, &lg));
  acc_log(lg, ACC_LOG_INFO, "a log line");
  n = slurp(f, out, sizeof out);
  const char *bar_line = "b [##########..........] 5/10 50% 5 steps/s ETA 0:01";
  char expect[512];
  snprintf(expect, sizeof expect, "\r%s\033[K\r\033[K\r%s\033[K", bar_line, bar_line);
  CHECK(strcmp(out, expect) == 0, "cleared then redrawn around the log line, got \"%s\"", out);
  acc_progress_finish_at(p, 2.0);
  acc_log(lg, ACC_LOG_INFO, "after the bar");
  size_t n2 = slurp(f, out, sizeof out);
  CHECK(out[n2 - 1] == '\n' && count(out + n, '\r') == 1, "nothing touched after finish: \"%s\"",
        out + n);
  acc_progress_destroy(p);
  fclose(f);

  /* Main process only: with a state of 1 process this process is main; a bar with
   * main_only = 0 always prints. Bad options are refused. */
  acc_progress_options bad = ACC_PROGRESS_OPTIONS_INIT;
  bad.every_percent = 0;
  CHECK_ERR(acc_progress_create(&p, NULL, "x", 1, &bad), ACC_ERR_INVALID_ARGUMENT, "every_percent");
  acc_progress_options zero = {0};
  CHECK_ERR(acc_progress_create(&p, NULL, "x", 1, &zero), ACC_ERR_INVALID_ARGUMENT,
            "ACC_PROGRESS_OPTIONS_INIT");
  return acc_test_finish("obs_progress");
}
