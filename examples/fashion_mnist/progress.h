/* A one-line progress bar for training loops: done/total, samples/s and ETA.
 *
 * On a terminal the line is redrawn in place with '\r' (at most 10 times a second); when the
 * stream is not a terminal (a log file, a pipe, CI) it prints a plain line every 10% of the work
 * instead, so logs stay readable. Meant for the local main process only: the caller decides who
 * owns one (e.g. only where acc_state_is_local_main_process). */
#ifndef FMNIST_PROGRESS_H
#define FMNIST_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct progress {
  FILE *out;
  char label[32];
  uint64_t total;     /* steps to do */
  uint64_t done;      /* steps done */
  uint64_t samples;   /* samples processed so far */
  int tty;            /* 1: redraw with \r; 0: plain lines */
  int last_decile;    /* non-TTY: the last 10% mark printed */
  double start_s;     /* time of progress_start */
  double last_draw_s; /* TTY: time of the last redraw */
  int drawn;          /* something is on the current line (TTY) */
} progress;

/**
 * Starts a bar of total steps on out, labelled label (e.g. "epoch 1/5"). tty: 1 or 0 to force
 * the mode, -1 to detect it with isatty(fileno(out)).
 */
void progress_start(progress *p, FILE *out, const char *label, uint64_t total, int tty);
/** Records that done steps and samples samples are complete; redraws when it is time. */
void progress_update(progress *p, uint64_t done, uint64_t samples);
/** Same with an explicit clock (seconds since progress_start), for tests. */
void progress_update_at(progress *p, uint64_t done, uint64_t samples, double elapsed_s);
/** Draws the final state and ends the line. */
void progress_finish(progress *p);
void progress_finish_at(progress *p, double elapsed_s);

/**
 * Formats the line for the given elapsed time into buf, without '\r' or newline:
 *   "epoch 1/5 [#########...........] 469/938 50% 12345 samples/s ETA 0:02"
 * (the bar is 20 characters wide; ETA h:mm:ss past an hour). Returns the snprintf count.
 */
int progress_format(const progress *p, double elapsed_s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
