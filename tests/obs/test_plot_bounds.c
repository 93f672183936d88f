/* accelerate plot on hostile inputs (red-team 3, N1 and N9; new user 3):
 *   - two records at steps 2^51 and 2^51 + 1 (and 2^60, 2^60 + 3): the drawing finishes with a
 *     small SVG (it looped, writing hundreds of MB, when ticks were stepped by adding a spacing
 *     below the values' precision);
 *   - one record with 20,000 metric names: at most 64 panels are drawn (the rest are named in a
 *     warning), and names are found through a hash;
 *   - two runs named alike (a/run, b/run): the legend tells them apart by their paths.
 * A SIGALRM is the hang guard only. Usage: test_obs_plot_bounds <scratch dir> */
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"

static char base[1024];

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

static char *slurp(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)*len + 1);
  if (b && fread(b, 1, (size_t)*len, f) != (size_t)*len) *len = 0;
  if (b) b[*len] = 0;
  fclose(f);
  return b;
}

static size_t count(const char *s, const char *needle) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: accelerate plot did not finish within 60 s (hang guard)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  signal(SIGALRM, on_alarm);
  alarm(60);
  snprintf(base, sizeof base, "%s/plot_bounds", argv[1]);
  char cmd[8000], dir[1100], svg[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/big' '%s/big2' '%s/names' '%s/a/run' '%s/b/run'", base,
           base, base, base, base, base);
  if (system(cmd) != 0) return 1;

  /* N1 */
  const char *bigs[2][2] = {{"big", "{\"step\":2251799813685248,\"loss\":1}\n{\"step\":2251799813685249,\"loss\":2}\n"},
                            {"big2", "{\"step\":1152921504606846976,\"loss\":1}\n{\"step\":1152921504606846979,\"loss\":1}\n"}};
  for (int i = 0; i < 2; i++) {
    snprintf(dir, sizeof dir, "%s/%s", base, bigs[i][0]);
    snprintf(cmd, sizeof cmd, "%s/run.jsonl", dir);
    write_text(cmd, bigs[i][1]);
    snprintf(svg, sizeof svg, "%s/c.svg", dir);
    const char *runs[] = {dir};
    CHECK_OK(acc_plot_runs(runs, 1, svg, NULL, NULL));
    struct stat sb;
    CHECK(stat(svg, &sb) == 0 && sb.st_size < 200000, "%s: the SVG is %lld bytes (expected a small file)", bigs[i][0],
          (long long)sb.st_size);
  }

  /* N9 */
  snprintf(dir, sizeof dir, "%s/names", base);
  snprintf(cmd, sizeof cmd, "%s/run.jsonl", dir);
  FILE *f = fopen(cmd, "w");
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_IO);
  fputs("{\"step\":1", f);
  for (int i = 0; i < 20000; i++) fprintf(f, ",\"m%05d\":%d.5", i, i);
  fputs("}\n{\"step\":2,\"m00001\":3.0}\n", f);
  fclose(f);
  snprintf(svg, sizeof svg, "%s/c.svg", dir);
  const char *nruns[] = {dir};
  CHECK_OK(acc_plot_runs(nruns, 1, svg, NULL, NULL));
  long len = 0;
  char *text = slurp(svg, &len);
  CHECK(text && count(text, "<g>") == 64, "names: %zu panels drawn (expected the cap, 64)", text ? count(text, "<g>") : 0);
  CHECK(text && strstr(text, ">m00000<") && strstr(text, ">m00063<") && !strstr(text, ">m00064<"),
        "names: the first 64 metrics in order are drawn");
  free(text);

  /* new user 3 */
  char a[1100], b[1100];
  snprintf(a, sizeof a, "%s/a/run", base);
  snprintf(b, sizeof b, "%s/b/run", base);
  snprintf(cmd, sizeof cmd, "%s/run.jsonl", a);
  write_text(cmd, "{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":0.5}\n");
  snprintf(cmd, sizeof cmd, "%s/run.jsonl", b);
  write_text(cmd, "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1.5}\n");
  snprintf(svg, sizeof svg, "%s/ab.svg", base);
  const char *abruns[] = {a, b};
  CHECK_OK(acc_plot_runs(abruns, 2, svg, NULL, NULL));
  text = slurp(svg, &len);
  char la[1200], lb[1200];
  snprintf(la, sizeof la, ">%s<", a);
  snprintf(lb, sizeof lb, ">%s<", b);
  CHECK(text && strstr(text, la) && strstr(text, lb), "the legend names both runs by path (%s, %s)", a, b);
  free(text);
  return acc_test_finish("obs_plot_bounds");
}
