/* Progress bar: redrawn in place on a terminal, a plain line every N% elsewhere; main process
 * only by default; shares the terminal lock with the logger so lines never interleave. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"

#define PROGRESS_MAGIC 0x41435052u /* "ACPR" */
#define PROGRESS_WIDTH 20
#define PROGRESS_REDRAW_S 0.1

struct acc_progress {
  uint32_t magic;
  FILE *out; /* NULL: this process prints nothing */
  char label[64];
  uint64_t total, done, samples;
  int tty, every, last_mark, finished;
  double start_s, last_draw_s;
  char line[256]; /* TTY: what is on screen now */
  int drawn;      /* TTY: line is on screen without its newline */
  int dumb;       /* TERM=dumb: no escape sequences, the previous line is padded over instead */
  size_t shown_len; /* TTY: length of the line on screen */
};

static acc_progress *on_screen; /* the bar the logger must step around (under the term lock) */

acc_result acc_progress_create(acc_progress **out, acc_state *st, const char *label, uint64_t total,
                               const acc_progress_options *opts) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_progress_create: out is NULL");
  *out = NULL;
  acc_progress_options o = ACC_PROGRESS_OPTIONS_INIT;
  if (opts) {
    if (opts->size < sizeof o || opts->version != ACC_PROGRESS_OPTIONS_VERSION)
      return acc__error(
          ACC_ERR_INVALID_ARGUMENT,
          "acc_progress_create: options not initialized with ACC_PROGRESS_OPTIONS_INIT");
    o = *opts;
  }
  if (o.every_percent < 1 || o.every_percent > 100)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_progress_create: every_percent is %d (expected 1..100)",
                      o.every_percent);
  acc_progress *p = acc__calloc(1, sizeof *p);
  if (!p) return ACC_ERR_NOMEM;
  p->magic = PROGRESS_MAGIC;
  int shown = !o.main_only || !st || acc_state_is_main_process(st);
  p->out = shown ? (o.out ? o.out : stdout) : NULL;
  snprintf(p->label, sizeof p->label, "%s", label ? label : "");
  p->total = total;
  p->every = o.every_percent;
  p->tty = p->out ? (o.tty == ACC_UNSET ? isatty(fileno(p->out)) : o.tty != 0) : 0;
  const char *term = acc__env_str("TERM");
  p->dumb = term && strcmp(term, "dumb") == 0;
  p->start_s = acc__now();
  p->last_draw_s = -1.0;
  *out = p;
  return ACC_OK;
}

static int format_duration(char *buf, size_t len, double s) {
  if (!(s >= 0)) s = 0; /* negative or NaN */
  if (s >= 360000000.0) return snprintf(buf, len, ">100000:00:00"); /* (an unknown total: UINT64_MAX) */
  unsigned long t = (unsigned long)(s + 0.5);
  if (t >= 3600) return snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
  return snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

int acc_progress_format(const acc_progress *p, double elapsed_s, char *buf, size_t len) {
  if (!p || p->magic != PROGRESS_MAGIC || !buf || len == 0) return 0;
  uint64_t done = p->done > p->total ? p->total : p->done;
  int filled = p->total ? (int)(done * PROGRESS_WIDTH / p->total) : PROGRESS_WIDTH;
  char bar[PROGRESS_WIDTH + 1];
  for (int i = 0; i < PROGRESS_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[PROGRESS_WIDTH] = '\0';
  int pct = p->total ? (int)(done * 100 / p->total) : 100;
  const char *unit = p->samples ? "samples/s" : "steps/s";
  char rate[40], eta[32] = "ETA -";
  snprintf(rate, sizeof rate, "- %s", unit);
  if (elapsed_s > 0 && p->done > 0) {
    double count = p->samples ? (double)p->samples : (double)p->done;
    snprintf(rate, sizeof rate, "%.0f %s", count / elapsed_s, unit);
    char d[24];
    format_duration(d, sizeof d, elapsed_s / (double)done * (double)(p->total - done));
    snprintf(eta, sizeof eta, "ETA %s", d);
  }
  const char *sep = p->label[0] ? " " : "";
  return snprintf(buf, len, "%s%s[%s] %llu/%llu %d%% %s %s", p->label, sep, bar,
                  (unsigned long long)done, (unsigned long long)p->total, pct, rate, eta);
}

/* Under the term lock. */
static void put_line(acc_progress *p, int final) {
  if (p->tty) {
    /* "\033[K" clears what a longer previous line left behind; TERM=dumb: spaces do. */
    size_t len = strlen(p->line);
    if (p->dumb)
      fprintf(p->out, "\r%s%*s%s", p->line, p->shown_len > len ? (int)(p->shown_len - len) : 0, "", final ? "\n" : "");
    else
      fprintf(p->out, "\r%s\033[K%s", p->line, final ? "\n" : "");
    p->shown_len = final ? 0 : len;
    p->drawn = !final;
    on_screen = final ? (on_screen == p ? NULL : on_screen) : p;
  } else {
    fprintf(p->out, "%s\n", p->line);
  }
  fflush(p->out);
}

static void progress_hide(void);
static void progress_show(void);

static void draw(acc_progress *p, double elapsed_s, int final) {
  acc__term_lock();
  acc__term_set_overlay(progress_hide, progress_show); /* log lines step around the bar */
  acc_progress_format(p, elapsed_s, p->line, sizeof p->line);
  put_line(p, final);
  acc__term_unlock();
  p->last_draw_s = elapsed_s;
}

static void progress_hide(void) {
  acc_progress *p = on_screen;
  if (p && p->drawn) {
    if (p->dumb)
      fprintf(p->out, "\r%*s\r", (int)p->shown_len, "");
    else
      fputs("\r\033[K", p->out);
    fflush(p->out);
  }
}

static void progress_show(void) {
  acc_progress *p = on_screen;
  if (p && p->drawn) {
    fprintf(p->out, p->dumb ? "\r%s" : "\r%s\033[K", p->line);
    fflush(p->out);
  }
}

void acc_progress_update_at(acc_progress *p, uint64_t done, uint64_t samples, double elapsed_s) {
  if (!p || p->magic != PROGRESS_MAGIC || !p->out || p->finished) return;
  p->done = done;
  p->samples = samples;
  if (p->tty) {
    if (p->last_draw_s < 0 || elapsed_s - p->last_draw_s >= PROGRESS_REDRAW_S)
      draw(p, elapsed_s, 0);
    return;
  }
  uint64_t d = done > p->total ? p->total : done;
  int mark = p->total ? (int)(d * 100 / p->total) / p->every : 100 / p->every;
  /* 100% is printed by finish. */
  if (mark > p->last_mark && mark * p->every < 100) {
    p->last_mark = mark;
    draw(p, elapsed_s, 0);
  }
}

void acc_progress_update(acc_progress *p, uint64_t done, uint64_t samples) {
  if (p && p->magic == PROGRESS_MAGIC && p->out)
    acc_progress_update_at(p, done, samples, acc__now() - p->start_s);
}

void acc_progress_finish_at(acc_progress *p, double elapsed_s) {
  if (!p || p->magic != PROGRESS_MAGIC || !p->out || p->finished) return;
  draw(p, elapsed_s, 1);
  p->finished = 1;
}

void acc_progress_finish(acc_progress *p) {
  if (p && p->magic == PROGRESS_MAGIC && p->out) acc_progress_finish_at(p, acc__now() - p->start_s);
}

void acc_progress_destroy(acc_progress *p) {
  if (!p || p->magic != PROGRESS_MAGIC) return;
  acc_progress_finish(p);
  acc__term_lock();
  if (on_screen == p) on_screen = NULL;
  acc__term_unlock();
  p->magic = 0;
  acc__free(p);
}
