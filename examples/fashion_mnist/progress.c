/* Progress bar: in-place redraw on a terminal, periodic plain lines elsewhere. */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_WIDTH 20
#define PROGRESS_REDRAW_S 0.1

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_start(progress *p, FILE *out, const char *label, uint64_t total, int tty) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->out = out ? out : stdout;
  snprintf(p->label, sizeof p->label, "%s", label ? label : "");
  p->total = total;
  p->tty = tty >= 0 ? tty != 0 : isatty(fileno(p->out));
  p->last_decile = 0;
  p->start_s = now_s();
  p->last_draw_s = -1.0;
}

static int format_duration(char *buf, size_t len, double s) {
  if (s < 0) s = 0;
  unsigned long t = (unsigned long)(s + 0.5);
  if (t >= 3600) return snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
  return snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

int progress_format(const progress *p, double elapsed_s, char *buf, size_t len) {
  if (!p || !buf || len == 0) return 0;
  uint64_t done = p->done > p->total ? p->total : p->done;
  int filled = p->total ? (int)(done * PROGRESS_WIDTH / p->total) : PROGRESS_WIDTH;
  char bar[PROGRESS_WIDTH + 1];
  for (int i = 0; i < PROGRESS_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[PROGRESS_WIDTH] = '\0';
  int pct = p->total ? (int)(done * 100 / p->total) : 100;
  char rate[32] = "- samples/s", eta[32] = "ETA -";
  if (elapsed_s > 0 && p->done > 0) {
    snprintf(rate, sizeof rate, "%.0f samples/s", (double)p->samples / elapsed_s);
    char d[24];
    format_duration(d, sizeof d, elapsed_s / (double)done * (double)(p->total - done));
    snprintf(eta, sizeof eta, "ETA %s", d);
  }
  const char *sep = p->label[0] ? " " : "";
  return snprintf(buf, len, "%s%s[%s] %llu/%llu %d%% %s %s", p->label, sep, bar,
                  (unsigned long long)done, (unsigned long long)p->total, pct, rate, eta);
}

static void draw(progress *p, double elapsed_s, int final) {
  char line[256];
  progress_format(p, elapsed_s, line, sizeof line);
  if (p->tty) {
    /* "\033[K" clears what a longer previous line left behind. */
    fprintf(p->out, "\r%s\033[K%s", line, final ? "\n" : "");
    p->drawn = !final;
  } else {
    fprintf(p->out, "%s\n", line);
  }
  fflush(p->out);
  p->last_draw_s = elapsed_s;
}

void progress_update_at(progress *p, uint64_t done, uint64_t samples, double elapsed_s) {
  if (!p || !p->out) return;
  p->done = done;
  p->samples = samples;
  if (p->tty) {
    if (p->last_draw_s < 0 || elapsed_s - p->last_draw_s >= PROGRESS_REDRAW_S)
      draw(p, elapsed_s, 0);
    return;
  }
  int decile = p->total ? (int)((done > p->total ? p->total : done) * 10 / p->total) : 10;
  /* The last 10% is printed by progress_finish. */
  if (decile > p->last_decile && decile < 10) {
    p->last_decile = decile;
    draw(p, elapsed_s, 0);
  }
}

void progress_update(progress *p, uint64_t done, uint64_t samples) {
  if (p) progress_update_at(p, done, samples, now_s() - p->start_s);
}

void progress_finish_at(progress *p, double elapsed_s) {
  if (!p || !p->out) return;
  draw(p, elapsed_s, 1);
  p->out = NULL;
}

void progress_finish(progress *p) {
  if (p && p->out) progress_finish_at(p, now_s() - p->start_s);
}
