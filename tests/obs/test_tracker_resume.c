/* Trackers across a restart or resume under the same run name (red-team 3, N5 / new user 2), and
 * the metric names the outputs can hold (N7).
 *   - attempt 1 logs steps 0..9, attempt 2 (resumed from step 5) logs 5..7: run.jsonl and
 *     metrics.csv hold steps 0..4 of attempt 1 then 5..7 of attempt 2 (nothing lost, nothing
 *     twice, one CSV header); a line cut by a kill at the end of attempt 1 is dropped;
 *     TensorBoard's second event file starts with a SessionLog START at step 5 (its purge);
 *   - names or string values that are not valid UTF-8 are ACC_ERR_INVALID_ARGUMENT naming the
 *     offset; metrics named "step" or "time" are refused while the JSONL tracker is on.
 * Usage: test_obs_tracker_resume <scratch dir> */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"

static void attempt(int64_t first, int64_t last, int cut_at_end) {
  acc_trackers *tr = NULL;
  REQUIRE_OK(acc_trackers_create(&tr, NULL, "jsonl,csv,tensorboard", NULL));
  acc_kv hp[] = {ACC_KV_NUM("lr", 0.1)};
  REQUIRE_OK(acc_init_trackers(tr, "run", hp, 1));
  for (int64_t s = first; s <= last; s++) {
    acc_kv v[] = {ACC_KV_NUM("loss", 100.0 * (double)(first == 0 ? 1 : 2) + (double)s)};
    CHECK_OK(acc_tracker_log(tr, v, 1, s));
  }
  CHECK_OK(acc_end_training(tr));
  acc_trackers_destroy(tr);
  if (cut_at_end) { /* a record cut in the middle by a kill */
    FILE *f = fopen("run/run.jsonl", "a");
    fputs("{\"step\":10,\"ti", f);
    fclose(f);
    f = fopen("run/metrics.csv", "a");
    fputs("10,123.4", f);
    fclose(f);
  }
}

static int count_tfevents(char *newest, size_t cap) {
  DIR *d = opendir("run");
  int n = 0;
  struct dirent *e;
  char best[512] = "";
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
      n++;
      if (strcmp(e->d_name, best) > 0) snprintf(best, sizeof best, "%s", e->d_name); /* same second: the counter */
    }
  if (d) closedir(d);
  snprintf(newest, cap, "run/%s", best);
  return n;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tracker_resume", argv[1]);
  char cmd[2200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  if (system(cmd) != 0 || chdir(dir) != 0) return 1;

  attempt(0, 9, 1);
  char first_tb[600];
  CHECK(count_tfevents(first_tb, sizeof first_tb) == 1, "one event file after attempt 1");
  attempt(5, 7, 0);

  /* run.jsonl: steps 0..4 (attempt 1), 5..7 (attempt 2) */
  FILE *f = fopen("run/run.jsonl", "r");
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_IO);
  char line[512];
  int64_t want[] = {0, 1, 2, 3, 4, 5, 6, 7};
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    long long st = -1;
    double loss = 0;
    const char *ps = strstr(line, "\"step\":"), *pl = strstr(line, "\"loss\":");
    if (ps) st = atoll(ps + 7);
    if (pl) loss = atof(pl + 7);
    CHECK(n < 8 && st == want[n], "run.jsonl line %d has step %lld (expected %lld): %s", n + 1, st,
          (long long)(n < 8 ? want[n] : -1), line);
    CHECK(loss == (st < 5 ? 100.0 : 200.0) + (double)st, "run.jsonl line %d: loss %g is from the wrong attempt",
          n + 1, loss);
    n++;
  }
  fclose(f);
  CHECK(n == 8, "run.jsonl has %d records (expected 8: 0..4 then 5..7)", n);

  /* metrics.csv: one header, then the same steps */
  f = fopen("run/metrics.csv", "r");
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_IO);
  n = 0;
  int headers = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "step,", 5)) {
      headers++;
      continue;
    }
    CHECK(n < 8 && atoll(line) == want[n], "metrics.csv record %d: %s", n + 1, line);
    n++;
  }
  fclose(f);
  CHECK(headers == 1 && n == 8, "metrics.csv: %d header(s), %d records (expected 1 and 8)", headers, n);

  /* TensorBoard: the second file's first event after file_version is SessionLog START at step 5 */
  char newest[600];
  CHECK(count_tfevents(newest, sizeof newest) == 2, "two event files after attempt 2");
  f = fopen(newest, "rb");
  int found = 0;
  for (int rec = 0; f && rec < 4 && !found; rec++) {
    uint8_t len8[8], crc[4], buf[4096];
    if (fread(len8, 1, 8, f) != 8 || fread(crc, 1, 4, f) != 4) break;
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)len8[i] << (8 * i);
    if (len > sizeof buf || fread(buf, 1, len, f) != len || fread(crc, 1, 4, f) != 4) break;
    /* Event: 1 wall_time (fixed64, 9 bytes), 2 step (0x10 varint), 6 session_log (0x32 len 2: 08 01) */
    for (size_t i = 0; i + 5 < len; i++)
      if (buf[i] == 0x10 && buf[i + 1] == 5 && buf[i + 2] == 0x32 && buf[i + 3] == 2 && buf[i + 4] == 0x08 &&
          buf[i + 5] == 1)
        found = 1;
  }
  if (f) fclose(f);
  CHECK(found, "%s has no SessionLog START at step 5 (TensorBoard would show both attempts' steps 5..7)", newest);

  /* N7: names the outputs can hold */
  acc_trackers *tr = NULL;
  REQUIRE_OK(acc_trackers_create(&tr, NULL, "jsonl,csv,tensorboard", NULL));
  acc_kv bad_hp[] = {ACC_KV_STR("name\xe9", "v")};
  CHECK_ERR(acc_init_trackers(tr, "names", bad_hp, 1), ACC_ERR_INVALID_ARGUMENT, "is not valid UTF-8 (byte 0xe9 at offset 4)");
  acc_kv bad_val[] = {ACC_KV_STR("name", "val\xff\xfe")};
  CHECK_ERR(acc_init_trackers(tr, "names", bad_val, 1), ACC_ERR_INVALID_ARGUMENT, "not valid UTF-8");
  acc_kv good_hp[] = {ACC_KV_STR("caf\xc3\xa9", "\xe2\x82\xac")};
  CHECK_OK(acc_init_trackers(tr, "names", good_hp, 1));
  acc_kv bad_name[] = {ACC_KV_NUM("loss\xe9\x80", 1.5)};
  CHECK_ERR(acc_tracker_log(tr, bad_name, 1, 1), ACC_ERR_INVALID_ARGUMENT, "\"loss...\" is not valid UTF-8");
  acc_kv overlong[] = {ACC_KV_NUM("a\xc0\xaf", 1.5)};
  CHECK_ERR(acc_tracker_log(tr, overlong, 1, 1), ACC_ERR_INVALID_ARGUMENT, "not valid UTF-8");
  acc_kv st[] = {ACC_KV_NUM("step", 2.5)};
  CHECK_ERR(acc_tracker_log(tr, st, 1, 1), ACC_ERR_INVALID_ARGUMENT, "\"step\" is a field of every run.jsonl record");
  acc_kv tm[] = {ACC_KV_NUM("time", 7)};
  CHECK_ERR(acc_tracker_log(tr, tm, 1, 1), ACC_ERR_INVALID_ARGUMENT, "time_per_step");
  acc_kv ok[] = {ACC_KV_NUM("caf\xc3\xa9", 1.0)};
  CHECK_OK(acc_tracker_log(tr, ok, 1, 1));
  CHECK_OK(acc_end_training(tr));
  acc_trackers_destroy(tr);
  f = fopen("names/run.jsonl", "r");
  CHECK(f && fgets(line, sizeof line, f) && strstr(line, "\"step\":1,") && strstr(line, "caf\xc3\xa9"),
        "names/run.jsonl holds the record with the UTF-8 name: %s", f ? line : "(missing)");
  if (f) fclose(f);
  /* without the JSONL tracker, "time" is an ordinary metric */
  REQUIRE_OK(acc_trackers_create(&tr, NULL, "csv", NULL));
  REQUIRE_OK(acc_init_trackers(tr, "csvonly", NULL, 0));
  CHECK_OK(acc_tracker_log(tr, tm, 1, 1));
  acc_trackers_destroy(tr);
  return acc_test_finish("obs_tracker_resume");
}
