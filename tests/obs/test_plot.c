/* Plots: two runs written by the jsonl tracker, overlaid in one SVG (a panel per metric, the
 * known ones first, legend with both run names, ticks), rendered to PNG by rsvg-convert and
 * checked for its size and that it is not blank (check_png.py); bad input gives clear errors.
 * Usage: test_obs_plot BUILD_DIR SOURCE_DIR */
#include <math.h>
#include <unistd.h>

#include "acc_test.h"

static void write_run(const char *logdir, const char *name, double scale) {
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = logdir;
  acc_project_config *pc;
  REQUIRE_OK(acc_project_config_create(&pc, &po));
  acc_trackers *tr;
  REQUIRE_OK(acc_trackers_create(&tr, NULL, "jsonl", pc));
  REQUIRE_OK(acc_init_trackers(tr, name, NULL, 0));
  for (int s = 1; s <= 40; s++) {
    acc_kv v[] = {ACC_KV_NUM("throughput", 9000 + 300 * sin(s)),
                  ACC_KV_NUM("loss", scale * 2.3 / sqrt(s)),
                  ACC_KV_NUM("lr", 0.01 * (1 - s / 50.0)),
                  ACC_KV_NUM("accuracy", 0.9 - 0.5 / s),
                  ACC_KV_NUM("grad_norm", 1.0 / s),
                  ACC_KV_INT("epoch", 1)};
    REQUIRE_OK(acc_tracker_log(tr, v, 6, s * 10));
  }
  acc_trackers_destroy(tr);
  acc_project_config_destroy(pc);
}

int main(int argc, char **argv) {
  REQUIRE_OK(argc == 3 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  char logdir[1024], a[1100], b[1100], svg[1100], png[1100], cmd[4000];
  snprintf(logdir, sizeof logdir, "%s/plot_runs", argv[1]);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", logdir);
  REQUIRE_OK(system(cmd) == 0 ? ACC_OK : ACC_ERR_SYSTEM);
  write_run(logdir, "baseline", 1.0);
  write_run(logdir, "bigger-lr", 0.7);
  snprintf(a, sizeof a, "%s/baseline", logdir);
  snprintf(b, sizeof b, "%s/bigger-lr", logdir);
  snprintf(svg, sizeof svg, "%s/curves.svg", logdir);
  snprintf(png, sizeof png, "%s/curves.png", logdir);
  const char *runs[] = {a, b};
  int written = -1;
  CHECK_OK(acc_plot_runs(runs, 2, svg, png, &written));
  const char *text = acc_test_slurp(svg);
  CHECK(text && strncmp(text, "<?xml", 5) == 0 && strstr(text, "</svg>\n"), "an SVG document");
  if (text) {
    /* 5 metrics (epoch is bookkeeping), 2 runs each: 10 curves */
    CHECK(acc_test_count(text, "<polyline") == 10, "10 curves, got %d",
          acc_test_count(text, "<polyline"));
    CHECK(strstr(text, ">baseline</text>") && strstr(text, ">bigger-lr</text>"),
          "legend names both runs");
    const char *order[] = {">loss</text>", ">accuracy</text>", ">learning rate</text>",
                           ">throughput</text>", ">grad_norm</text>"};
    const char *p = text;
    for (int i = 0; i < 5; i++) {
      const char *at = strstr(p, order[i]);
      CHECK(at != NULL, "panel %s in order", order[i]);
      if (at) p = at;
    }
    CHECK(strstr(text, "throughput (samples/s)") && strstr(text, "step (optimizer steps)"),
          "axis units");
    CHECK(strstr(text, ">400</text>") && strstr(text, ">0.010</text>"), "tick labels");
    CHECK(strstr(text, "epoch") == NULL, "epoch is not drawn");
  }
  CHECK(access("/usr/bin/rsvg-convert", X_OK) == 0,
        "rsvg-convert (Debian librsvg2-bin) is needed: scripts/deps.sh");
  CHECK(written == 1, "PNG written");
  /* 2 columns of 460 px; legend 48 px + 3 rows of 300 px */
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/check_png.py '%s' 920 948", argv[2], png);
  CHECK(system(cmd) == 0, "PNG check failed: %s", png);

  /* bad input */
  const char *missing[] = {"/nonexistent/run"};
  CHECK_ERR(acc_plot_runs(missing, 1, svg, NULL, NULL), ACC_ERR_IO, "/nonexistent/run/run.jsonl");
  char bad[1100];
  snprintf(bad, sizeof bad, "%s/bad.jsonl", logdir);
  FILE *f = fopen(bad, "w");
  fprintf(f, "{\"step\": 1, \"loss\": 1}\n{not json\n");
  fclose(f);
  const char *bads[] = {bad};
  CHECK_ERR(acc_plot_runs(bads, 1, svg, NULL, NULL), ACC_ERR_FORMAT, "line 2");
  f = fopen(bad, "w");
  fprintf(f, "{\"loss\": 1}\n");
  fclose(f);
  CHECK_ERR(acc_plot_runs(bads, 1, svg, NULL, NULL), ACC_ERR_FORMAT, "no integer \"step\"");
  CHECK_ERR(acc_plot_runs(runs, 0, svg, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "at least one run");
  return acc_test_finish("obs_plot");
}
