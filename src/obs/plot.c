/* Plots of logged scalars: reads the run.jsonl of each run, draws one panel per metric (value
 * against step) with every run overlaid, axes with ticks and a legend, as a self-contained SVG;
 * PNG through rsvg-convert when it is installed. No dependencies beyond libc and jansson. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"

extern char **environ;

typedef struct series {
  char *name;
  double *x, *y;
  size_t n, cap;
} series;

typedef struct run {
  char *label;
  char *path; /* as given: the label when another run has the same name */
  series *s;
  size_t ns;
  json_t *index; /* series name -> position in s (a hash: no quadratic search) */
} run;

#define MAX_PANELS 64 /* more metrics than this: the rest are named in a warning, not drawn */
#define MAX_TICKS 100 /* per axis, whatever the range and its floating-point precision */

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define NCOLORS (sizeof palette / sizeof *palette)

/* Metrics drawn first, in this order; a unit for the axis label. */
static const struct {
  const char *key, *title, *unit;
} known[] = {{"loss", "loss", NULL},
             {"accuracy", "accuracy", "fraction"},
             {"lr", "learning rate", NULL},
             {"throughput", "throughput", "samples/s"}};
#define NKNOWN (sizeof known / sizeof *known)

static int known_index(const char *name) {
  for (size_t i = 0; i < NKNOWN; i++)
    if (strcmp(name, known[i].key) == 0) return (int)i;
  return -1;
}

static void free_runs(run *runs, size_t n) {
  for (size_t r = 0; r < n; r++) {
    for (size_t i = 0; i < runs[r].ns; i++) {
      free(runs[r].s[i].name);
      free(runs[r].s[i].x);
      free(runs[r].s[i].y);
    }
    free(runs[r].s);
    free(runs[r].label);
    free(runs[r].path);
    json_decref(runs[r].index);
  }
  free(runs);
}

static series *find_series(run *r, const char *name) {
  json_t *at = json_object_get(r->index, name);
  if (at) return &r->s[json_integer_value(at)];
  if (r->ns % 64 == 0) { /* grown in blocks */
    series *s = realloc(r->s, (r->ns + 64) * sizeof *s);
    if (!s) return NULL;
    r->s = s;
  }
  series *s = &r->s[r->ns];
  *s = (series){strdup(name), NULL, NULL, 0, 0};
  if (!s->name || json_object_set_new(r->index, name, json_integer((json_int_t)r->ns)) != 0) {
    free(s->name);
    return NULL;
  }
  r->ns++;
  return s;
}

/* The series of `name` in run r, or NULL. */
static series *lookup_series(const run *r, const char *name) {
  json_t *at = json_object_get(r->index, name);
  return at ? &r->s[json_integer_value(at)] : NULL;
}

static int push(series *s, double x, double y) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    double *nx = realloc(s->x, cap * sizeof *nx);
    if (!nx) return -1;
    s->x = nx;
    double *ny = realloc(s->y, cap * sizeof *ny);
    if (!ny) return -1;
    s->y = ny;
    s->cap = cap;
  }
  s->x[s->n] = x;
  s->y[s->n] = y;
  s->n++;
  return 0;
}

static acc_result load_run(const char *dir, run *r) {
  char path[4200];
  struct stat sb;
  size_t len = strlen(dir);
  /* A run directory, or the log file itself (runs/r/run.jsonl, or any other regular file). */
  int is_file = (len > 6 && strcmp(dir + len - 6, ".jsonl") == 0) || (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode));
  if (is_file)
    snprintf(path, sizeof path, "%s", dir);
  else
    snprintf(path, sizeof path, "%s/run.jsonl", dir);
  FILE *f = fopen(path, "r");
  if (!f)
    return acc__error(ACC_ERR_IO, "plot: cannot open \"%s\": %s%s", path, strerror(errno),
                      stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)
                          ? " (is this a run written by the jsonl tracker?)"
                          : "");
  /* the label: the run directory's name (for DIR/run.jsonl too; another file: its name) */
  char label[256];
  snprintf(label, sizeof label, "%s", dir);
  size_t l = strlen(label);
  while (l > 1 && label[l - 1] == '/') label[--l] = '\0';
  if (is_file && l >= 10 && strcmp(label + l - 9, "run.jsonl") == 0 && label[l - 10] == '/') {
    l -= 10;
    while (l > 1 && label[l - 1] == '/') l--;
    label[l] = '\0';
    if (l == 0) snprintf(label, sizeof label, ".");
  }
  const char *slash = strrchr(label, '/');
  r->label = strdup(slash && slash[1] ? slash + 1 : label);
  r->path = strdup(label);
  r->index = json_object();
  if (!r->label || !r->path || !r->index) {
    fclose(f);
    return acc__error(ACC_ERR_NOMEM, "plot: out of memory");
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  long lineno = 0;
  acc_result rc = ACC_OK;
  while (rc == ACC_OK && (got = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if (got <= 1) continue;
    json_error_t err;
    json_t *o = json_loadb(line, (size_t)got, 0, &err);
    if (!o || !json_is_object(o)) {
      rc = acc__error(ACC_ERR_FORMAT, "plot: %s line %ld is not a JSON object: %s", path, lineno,
                      o ? "not an object" : err.text);
      json_decref(o);
      break;
    }
    json_t *step = json_object_get(o, "step");
    if (!json_is_integer(step)) {
      rc = acc__error(ACC_ERR_FORMAT, "plot: %s line %ld has no integer \"step\"", path, lineno);
      json_decref(o);
      break;
    }
    double x = (double)json_integer_value(step);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
      /* bookkeeping keys are not curves */
      if (strcmp(key, "step") == 0 || strcmp(key, "time") == 0 || strcmp(key, "epoch") == 0 ||
          !json_is_number(v))
        continue;
      series *s = find_series(r, key);
      if (!s || push(s, x, json_number_value(v)) != 0) {
        rc = acc__error(ACC_ERR_NOMEM, "plot: out of memory reading %s", path);
        break;
      }
    }
    json_decref(o);
  }
  free(line);
  fclose(f);
  if (rc == ACC_OK && r->ns == 0)
    rc = acc__error(ACC_ERR_FORMAT, "plot: %s holds no numeric values", path);
  return rc;
}

/* ---- axes ------------------------------------------------------------------------------------ */

/* A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about target ticks. */
static double nice_step(double range, int target) {
  double raw = range / target;
  double p = pow(10.0, floor(log10(raw)));
  double m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void fmt_tick(char *buf, size_t len, double v, double step) {
  if (fabs(v) < step * 1e-9) v = 0;
  double a = fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3))
    snprintf(buf, len, "%.2g", v);
  else {
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (decimals > 6) decimals = 6;
    snprintf(buf, len, "%.*f", decimals, v);
  }
}

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '"')
      fputs("&quot;", f);
    else
      fputc(*s, f);
  }
}

#define PW 460.0 /* panel size and plot-area margins */
#define PH 300.0
#define ML 78.0
#define MR 20.0
#define MT 34.0
#define MB 48.0

/* Every panel shares the step axis: the range of all the steps logged. */
static void step_range(run *runs, size_t nr, double *x0, double *x1) {
  *x0 = INFINITY, *x1 = -INFINITY;
  for (size_t r = 0; r < nr; r++)
    for (size_t i = 0; i < runs[r].ns; i++)
      for (size_t k = 0; k < runs[r].s[i].n; k++) {
        *x0 = fmin(*x0, runs[r].s[i].x[k]);
        *x1 = fmax(*x1, runs[r].s[i].x[k]);
      }
}

/* Ticks from lo to hi every st: how many intervals, capped (a range far below the values'
 * precision, e.g. steps 2^51 and 2^51 + 1, must not loop or write gigabytes). */
static int tick_count(double lo, double hi, double st) {
  double n = (hi - lo) / st;
  if (!isfinite(n) || n < 0) return 0;
  return n > MAX_TICKS ? MAX_TICKS : (int)llround(n);
}

static void draw_panel(FILE *f, double ox, double oy, const char *metric, run *runs, size_t nr, double x0,
                       double x1) {
  double y0 = INFINITY, y1 = -INFINITY;
  for (size_t r = 0; r < nr; r++) {
    series *s = lookup_series(&runs[r], metric);
    if (s)
      for (size_t k = 0; k < s->n; k++) {
        if (!isfinite(s->y[k])) continue;
        y0 = fmin(y0, s->y[k]);
        y1 = fmax(y1, s->y[k]);
      }
    }
  if (!(x0 <= x1)) x0 = 0, x1 = 1;
  if (!(y0 <= y1)) y0 = 0, y1 = 1;
  if (x1 - x0 < 1e-12 * fmax(1.0, fabs(x0))) {
    double d = fmax(1.0, fabs(x0) * 1e-9);
    x0 -= d, x1 += d;
  }
  if (y1 - y0 < 1e-12 * fmax(1.0, fabs(y0))) {
    double d = fabs(y0) > 0 ? fabs(y0) * 0.1 : 1;
    y0 -= d, y1 += d;
  }
  double xs = nice_step(x1 - x0, 6), ys = nice_step(y1 - y0, 5);
  x0 = floor(x0 / xs) * xs, x1 = ceil(x1 / xs) * xs;
  y0 = floor(y0 / ys) * ys, y1 = ceil(y1 / ys) * ys;
  const double ax = ox + ML, ay = oy + MT, aw = PW - ML - MR, ah = PH - MT - MB;
#define SX(v) (ax + ((v)-x0) / (x1 - x0) * aw)
#define SY(v) (ay + ah - ((v)-y0) / (y1 - y0) * ah)
  int ki = known_index(metric);
  const char *title = ki >= 0 ? known[ki].title : metric;
  const char *unit = ki >= 0 ? known[ki].unit : NULL;
  fprintf(f,
          "<g>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\" "
          "text-anchor=\"middle\">",
          ax + aw / 2, oy + 22);
  xml_text(f, title);
  fprintf(f, "</text>\n");
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" "
          "stroke=\"#444\"/>\n",
          ax, ay, aw, ah);
  char buf[64];
  for (int t = 0, nt = tick_count(x0, x1, xs); t <= nt; t++) {
    double v = x0 + t * xs, px = SX(v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>", px, ay,
            px, ay + ah);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>", px,
            ay + ah, px, ay + ah + 5);
    fmt_tick(buf, sizeof buf, v, xs);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
            px, ay + ah + 17, buf);
  }
  for (int t = 0, nt = tick_count(y0, y1, ys); t <= nt; t++) {
    double v = y0 + t * ys, py = SY(v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>", ax, py,
            ax + aw, py);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>", ax - 5,
            py, ax, py);
    fmt_tick(buf, sizeof buf, v, ys);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
            ax - 8, py + 4, buf);
  }
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">step (optimizer "
          "steps)</text>\n",
          ax + aw / 2, ay + ah + 36);
  fprintf(f,
          "<text transform=\"translate(%.1f %.1f) rotate(-90)\" font-size=\"12\" "
          "text-anchor=\"middle\">",
          ox + 16, ay + ah / 2);
  xml_text(f, title);
  if (unit) fprintf(f, " (%s)", unit);
  fprintf(f, "</text>\n");
  for (size_t r = 0; r < nr; r++) {
    series *s = lookup_series(&runs[r], metric);
    if (s && s->n) {
      const char *color = palette[r % NCOLORS];
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\" points=\"", color);
      for (size_t k = 0; k < s->n; k++)
        if (isfinite(s->y[k])) fprintf(f, "%.1f,%.1f ", SX(s->x[k]), SY(s->y[k]));
      fprintf(f, "\"/>\n");
      if (s->n == 1)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", SX(s->x[0]),
                SY(s->y[0]), color);
    }
  }
  fprintf(f, "</g>\n");
#undef SX
#undef SY
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static acc_result to_png(const char *svg, const char *png, int *written) {
  const char *path = acc__env_str("PATH");
  char exe[4200];
  int found = 0;
  for (const char *p = path ? path : "/usr/bin:/bin"; *p && !found;) {
    const char *e = strchr(p, ':');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    snprintf(exe, sizeof exe, "%.*s/rsvg-convert", (int)n, p);
    found = access(exe, X_OK) == 0;
    p += n + (e ? 1 : 0);
  }
  if (!found) {
    acc__log(ACC_LOG_INFO,
             "plot: rsvg-convert is not installed (Debian: librsvg2-bin); no PNG written");
    return ACC_OK;
  }
  char *argv[] = {exe, "--background-color", "white", "-o", (char *)png, (char *)svg, NULL};
  pid_t pid;
  int err = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
  if (err) return acc__error(ACC_ERR_SYSTEM, "plot: cannot run %s: %s", exe, strerror(err));
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return acc__error(ACC_ERR_SYSTEM, "plot: waiting for rsvg-convert: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return acc__error(ACC_ERR_SYSTEM, "plot: rsvg-convert failed converting %s to %s (status %d)",
                      svg, png, status);
  *written = 1;
  return ACC_OK;
}

acc_result acc_plot_runs(const char *const *run_dirs, size_t n, const char *svg_path,
                         const char *png_path, int *png_written) {
  if (png_written) *png_written = 0;
  if (!run_dirs || n == 0 || !svg_path)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_plot_runs: give at least one run directory and an SVG path");
  run *runs = calloc(n, sizeof *runs);
  if (!runs) return acc__error(ACC_ERR_NOMEM, "plot: out of memory");
  acc_result rc = ACC_OK;
  for (size_t r = 0; r < n && rc == ACC_OK; r++) {
    if (!run_dirs[r])
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_plot_runs: run %zu is NULL", r);
    else
      rc = load_run(run_dirs[r], &runs[r]);
  }
  /* metric names: the known ones first, then the others sorted */
  char **metrics = NULL;
  size_t nm = 0, total = 0;
  json_t *seen = json_object();
  if (!seen && rc == ACC_OK) rc = acc__error(ACC_ERR_NOMEM, "plot: out of memory");
  for (size_t r = 0; r < n && rc == ACC_OK; r++) total += runs[r].ns;
  if (rc == ACC_OK && !(metrics = malloc((total ? total : 1) * sizeof *metrics)))
    rc = acc__error(ACC_ERR_NOMEM, "plot: out of memory");
  for (size_t r = 0; r < n && rc == ACC_OK; r++)
    for (size_t i = 0; i < runs[r].ns; i++) {
      if (json_object_get(seen, runs[r].s[i].name)) continue;
      json_object_set_new(seen, runs[r].s[i].name, json_true());
      metrics[nm++] = runs[r].s[i].name;
    }
  json_decref(seen);
  /* Runs of the same name (a/run, b/run) are told apart by the path they were given as. */
  char *dup = rc == ACC_OK ? calloc(n, 1) : NULL;
  for (size_t r = 0; dup && r < n; r++)
    for (size_t q = 0; q < n && !dup[r]; q++)
      dup[r] = q != r && !strcmp(runs[q].label, runs[r].label) && strcmp(runs[q].path, runs[r].path);
  for (size_t r = 0; dup && r < n; r++) {
    char *l = dup[r] ? strdup(runs[r].path) : NULL;
    if (l) {
      free(runs[r].label);
      runs[r].label = l;
    }
  }
  free(dup);
  if (rc == ACC_OK) {
    size_t front = 0;
    for (size_t k = 0; k < NKNOWN; k++)
      for (size_t i = front; i < nm; i++)
        if (strcmp(metrics[i], known[k].key) == 0) {
          char *t = metrics[front];
          metrics[front++] = metrics[i];
          metrics[i] = t;
          break;
        }
    if (nm > front) qsort(metrics + front, nm - front, sizeof *metrics, cmp_str);
    if (nm > MAX_PANELS) {
      char names[512] = "";
      for (size_t k = MAX_PANELS; k < nm && k < MAX_PANELS + 8; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s\"%s\"", k > MAX_PANELS ? ", " : "",
                 metrics[k]);
      acc__log(ACC_LOG_WARNING, "plot: %zu metrics, at most %d panels are drawn; not drawn: %s%s", nm, MAX_PANELS,
               names, nm > MAX_PANELS + 8 ? ", ..." : "");
      nm = MAX_PANELS;
    }
  }
  FILE *f = NULL;
  if (rc == ACC_OK) {
    f = fopen(svg_path, "w");
    if (!f)
      rc = acc__error(ACC_ERR_IO, "plot: cannot create \"%s\": %s", svg_path, strerror(errno));
  }
  if (rc == ACC_OK) {
    const int cols = nm > 1 ? 2 : 1;
    const int rows = (int)((nm + (size_t)cols - 1) / (size_t)cols);
    const double legend_h = 30.0 + 18.0 * (double)((n + 3) / 4);
    const double W = cols * PW, H = legend_h + rows * PH;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 "
            "0 %.0f %.0f\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n");
    for (size_t r = 0; r < n; r++) { /* legend: a colored line and the run's name */
      double lx = 20 + (double)(r % 4) * (W - 40) / 4, ly = 22 + 18.0 * (double)(r / 4);
      fprintf(f,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
              "stroke-width=\"3\"/>",
              lx, ly - 4, lx + 24, ly - 4, palette[r % NCOLORS]);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">", lx + 30, ly);
      xml_text(f, runs[r].label);
      fprintf(f, "</text>\n");
    }
    double x0, x1; /* every panel shares the step axis */
    step_range(runs, n, &x0, &x1);
    for (size_t k = 0; k < nm; k++)
      draw_panel(f, (double)(k % (size_t)cols) * PW, legend_h + (double)(k / (size_t)cols) * PH,
                 metrics[k], runs, n, x0, x1);
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) rc = acc__error(ACC_ERR_IO, "plot: writing \"%s\" failed", svg_path);
  }
  free(metrics);
  free_runs(runs, n);
  if (rc == ACC_OK && png_path) {
    int w = 0;
    rc = to_png(svg_path, png_path, &w);
    if (png_written) *png_written = w;
  }
  return rc;
}
