/* `accelerate plot RUN_DIR... [-o FILE.svg] [--no-png]`: the logged scalars of one or more runs
 * (directories written by the jsonl tracker) as an SVG, and a PNG next to it when rsvg-convert
 * is installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "accelerate.h"
#include "cli/cli.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: accelerate plot RUN_DIR|RUN_DIR/run.jsonl... [-o OUT.svg] [--no-png]\n\n"
      "Draws loss, accuracy, learning rate, throughput and every other number logged by the\n"
      "jsonl tracker (RUN_DIR/run.jsonl) against the step, one panel per metric, the runs\n"
      "overlaid. A run is its directory or its .jsonl file. Writes OUT.svg (default: curves.svg\n"
      "next to the first run's run.jsonl) and OUT.png through\n"
      "rsvg-convert when it is installed (Debian: librsvg2-bin).\n");
}

int acc_cli_plot(int argc, char **argv) {
  const char **runs = calloc((size_t)argc + 1, sizeof *runs);
  if (!runs) return 1;
  size_t n = 0;
  const char *out = NULL;
  int png = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      free(runs);
      return 0;
    } else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
      if (i + 1 == argc) {
        fprintf(stderr, "accelerate plot: %s needs a file name\n", argv[i]);
        free(runs);
        return 2;
      }
      out = argv[++i];
    } else if (strcmp(argv[i], "--no-png") == 0) {
      png = 0;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "accelerate plot: unknown option '%s'\n\n", argv[i]);
      usage(stderr);
      free(runs);
      return 2;
    } else {
      runs[n++] = argv[i];
    }
  }
  if (n == 0) {
    usage(stderr);
    free(runs);
    return 2;
  }
  char svg[4096], pngp[4200];
  if (out)
    snprintf(svg, sizeof svg, "%s", out);
  else { /* next to the log: in RUN_DIR, or in the folder of RUN_DIR/run.jsonl */
    struct stat sb;
    const char *slash = strrchr(runs[0], '/');
    if (stat(runs[0], &sb) == 0 && !S_ISDIR(sb.st_mode))
      snprintf(svg, sizeof svg, "%.*scurves.svg", slash ? (int)(slash - runs[0] + 1) : 0, runs[0]);
    else
      snprintf(svg, sizeof svg, "%s/curves.svg", runs[0]);
  }
  size_t l = strlen(svg);
  if (l > 4 && strcmp(svg + l - 4, ".svg") == 0)
    snprintf(pngp, sizeof pngp, "%.*s.png", (int)(l - 4), svg);
  else
    snprintf(pngp, sizeof pngp, "%s.png", svg);
  int written = 0;
  acc_result rc = acc_plot_runs(runs, n, svg, png ? pngp : NULL, &written);
  free(runs);
  if (rc != ACC_OK) {
    fprintf(stderr, "accelerate plot: %s\n", acc_last_error());
    return 1;
  }
  printf("wrote %s\n", svg);
  if (written) printf("wrote %s\n", pngp);
  return 0;
}
