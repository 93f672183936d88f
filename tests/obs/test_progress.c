/* Progress bar: exact line format, TTY redraw throttling, plain lines every 10% otherwise. */
#include "acc_test.h"
#include "progress.h"

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

int main(void) {
  progress p;
  char line[256];
  progress_start(&p, stdout, "epoch 1/5", 938, 0);
  p.done = 469;
  p.samples = 30016;
  progress_format(&p, 2.0, line, sizeof line);
  CHECK(strcmp(line, "epoch 1/5 [##########..........] 469/938 50% 15008 samples/s ETA 0:02") == 0,
        "got \"%s\"", line);
  p.done = 0;
  p.samples = 0;
  progress_format(&p, 0.0, line, sizeof line);
  CHECK(strcmp(line, "epoch 1/5 [....................] 0/938 0% - samples/s ETA -") == 0,
        "start: \"%s\"", line);
  progress_start(&p, stdout, "", 10, 0);
  p.done = 1;
  p.samples = 64;
  progress_format(&p, 400.0, line, sizeof line);
  CHECK(strcmp(line, "[##..................] 1/10 10% 0 samples/s ETA 1:00:00") == 0,
        "long ETA: \"%s\"", line);

  /* Not a terminal: one line at each 10% mark, the last from progress_finish. */
  char out[8192];
  FILE *f = tmpfile();
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_SYSTEM);
  progress_start(&p, f, "eval", 100, 0);
  for (int s = 1; s <= 100; s++) progress_update_at(&p, (uint64_t)s, (uint64_t)s * 10, s * 0.01);
  progress_finish_at(&p, 1.0);
  slurp(f, out, sizeof out);
  CHECK(count(out, '\n') == 10 && count(out, '\r') == 0, "10 plain lines, got:\n%s", out);
  const char *first = "eval [##..................] 10/100 10% 1000 samples/s ETA 0:01\n";
  CHECK(strncmp(out, first, strlen(first)) == 0, "first line: %s", out);
  CHECK(strstr(out, "eval [####################] 100/100 100% 1000 samples/s ETA 0:00\n") != NULL,
        "last line");
  fclose(f);

  /* Terminal: redrawn in place at most every 0.1 s, newline at the end. */
  f = tmpfile();
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_SYSTEM);
  progress_start(&p, f, "t", 4, 1);
  progress_update_at(&p, 1, 1, 0.0);  /* drawn */
  progress_update_at(&p, 2, 2, 0.05); /* too soon */
  progress_update_at(&p, 3, 3, 0.15); /* drawn */
  progress_finish_at(&p, 0.2);        /* drawn */
  size_t n = slurp(f, out, sizeof out);
  CHECK(count(out, '\r') == 3 && count(out, '\n') == 1 && n > 0 && out[n - 1] == '\n',
        "3 redraws and one newline, got \"%s\"", out);
  CHECK(strstr(out, "2/4") == NULL && strstr(out, "\rt [###############.....] 3/4 75% 20 samples/s ETA 0:00\033[K"),
        "TTY content: \"%s\"", out);
  fclose(f);
  return acc_test_finish("example_progress");
}
