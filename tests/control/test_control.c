/* Process control through the real launcher: state attributes, main_process_first ordering,
 * on_* helpers, split_between_processes, triggers, acc_print. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"

static acc_state *st;
static int n, rank;
static char dir[256];

static void append_line(const char *path, const char *line) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  REQUIRE_OK(fd >= 0 ? ACC_OK : ACC_ERR_IO);
  ssize_t w = write(fd, line, strlen(line));
  (void)w;
  close(fd);
}

static size_t read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t r = read(fd, buf, cap - 1);
  close(fd);
  buf[r > 0 ? r : 0] = '\0';
  return r > 0 ? (size_t)r : 0;
}

static void test_attributes(void) {
  CHECK(acc_state_num_processes(st) == n, "num_processes %d", acc_state_num_processes(st));
  CHECK(acc_state_process_index(st) == atoi(getenv("RANK")), "rank from RANK");
  CHECK(acc_state_is_main_process(st) == (rank == 0), "is_main");
  CHECK(acc_state_is_last_process(st) == (rank == n - 1), "is_last");
  CHECK(acc_state_distributed_type(st) == (n > 1 ? ACC_DISTRIBUTED_MULTI_CPU : ACC_DISTRIBUTED_NO), "type");
  CHECK(strcmp(acc_state_launcher(st), "accelerate") == 0, "launcher %s", acc_state_launcher(st));
  /* every rank index appears exactly once */
  int32_t mine = rank, all[64];
  CHECK_OK(acc_all_gather(st, &mine, all, 1, ACC_I32));
  for (int r = 0; r < n; r++) CHECK(all[r] == r, "gathered rank %d at %d", all[r], r);
}

static void test_main_process_first(void) {
  char path[300], buf[4096], line[64];
  snprintf(path, sizeof path, "%s/order.txt", dir);
  acc_result rc = ACC_OK;
  ACC_MAIN_PROCESS_FIRST(st, rc) {
    if (rank == 0) {
      append_line(path, "main-begin\n");
      /* widen the window in which a wrongly ordered peer would show up */
      volatile double x = 0;
      for (int i = 0; i < 2000000; i++) x += i;
      read_file(path, buf, sizeof buf);
      CHECK(strcmp(buf, "main-begin\n") == 0, "another process entered before main finished: %s", buf);
      append_line(path, "main-end\n");
    } else {
      read_file(path, buf, sizeof buf);
      CHECK(strncmp(buf, "main-begin\nmain-end\n", 20) == 0, "entered before main left: %s", buf);
      snprintf(line, sizeof line, "rank %d\n", rank);
      append_line(path, line);
    }
  }
  CHECK_OK(rc);
  CHECK_OK(acc_wait_for_everyone(st));
  size_t len = read_file(path, buf, sizeof buf);
  int lines = 0;
  for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
  CHECK(lines == n + 1, "expected %d lines, got %d: %s", n + 1, lines, buf);
}

static int ran_main, ran_local, ran_last, ran_on;
static void on_main(void *p) { (void)p; ran_main++; }
static void on_local(void *p) { (void)p; ran_local++; }
static void on_last(void *p) { (void)p; ran_last++; }
static void on_proc(void *p) { (void)p; ran_on++; }

static void test_on_helpers(void) {
  acc_on_main_process(st, on_main, NULL);
  acc_on_local_main_process(st, on_local, NULL);
  acc_on_last_process(st, on_last, NULL);
  acc_on_process(st, n - 1 > 1 ? 1 : n - 1, on_proc, NULL);
  int32_t counts[4] = {ran_main, ran_local, ran_last, ran_on}, sums[4];
  CHECK_OK(acc_all_reduce(st, counts, sums, 4, ACC_I32, ACC_SUM));
  CHECK(sums[0] == 1 && sums[1] == 1 && sums[2] == 1 && sums[3] == 1,
        "each helper must run on exactly one process: %d %d %d %d", sums[0], sums[1], sums[2], sums[3]);
  CHECK(ran_main == (rank == 0) && ran_last == (rank == n - 1), "helpers ran on the wrong process");
  int printed = acc_print(st, "acc_print: printed once, by the main process of %d\n", n);
  CHECK((printed > 0) == (rank == 0), "acc_print returned %d on rank %d", printed, rank);
}

static void check_split(size_t items, int pad, const size_t *expect_counts) {
  acc_split s;
  CHECK_OK(acc_split_between_processes(st, items, pad, &s));
  size_t start = 0;
  for (int r = 0; r < rank; r++) start += expect_counts[r];
  size_t count = n == 1 ? items : expect_counts[rank];
  CHECK(s.start == (n == 1 ? 0 : start) && s.count == count, "split %zu/%d: start %zu count %zu, expected %zu %zu",
        items, pad, s.start, s.count, start, count);
  if (pad && n > 1) {
    size_t ceil_ = (items + (size_t)n - 1) / (size_t)n;
    CHECK(s.padded_count == ceil_, "padded_count %zu expected %zu", s.padded_count, ceil_);
    for (size_t i = s.count; i < s.padded_count; i++)
      CHECK(acc_split_item(&s, i) == items - 1, "padding must repeat the last item");
  } else {
    CHECK(s.padded_count == s.count, "no padding expected");
  }
  /* the union of all shares is exactly 0..items-1, in order */
  int64_t lo = (int64_t)s.start, cnt = (int64_t)s.count, all[2 * 64];
  int64_t mine[2] = {lo, cnt};
  CHECK_OK(acc_all_gather(st, mine, all, 2, ACC_I64));
  int64_t next = 0;
  for (int r = 0; r < n; r++) {
    CHECK(all[2 * r] == next, "share of rank %d starts at %lld, expected %lld", r, (long long)all[2 * r], (long long)next);
    next += all[2 * r + 1];
  }
  CHECK(next == (int64_t)items, "shares cover %lld of %zu items", (long long)next, items);
}

static void test_split(void) {
  /* Accelerate's documented examples: 17 items on 2 -> 9/8, 4 -> 5/4/4/4, 8 -> 3 then seven 2s; 3 on 2 -> 2/1. */
  size_t c[8];
  for (int r = 0; r < n; r++) c[r] = 17 / (size_t)n + ((size_t)r < 17 % (size_t)n ? 1 : 0);
  if (n == 2) CHECK(c[0] == 9 && c[1] == 8, "17 on 2");
  if (n == 4) CHECK(c[0] == 5 && c[3] == 4, "17 on 4");
  if (n == 8) CHECK(c[0] == 3 && c[1] == 2 && c[7] == 2, "17 on 8");
  check_split(17, 0, c);
  check_split(17, 1, c);
  for (int r = 0; r < n; r++) c[r] = 3 / (size_t)n + ((size_t)r < 3 % (size_t)n ? 1 : 0);
  check_split(3, 1, c); /* with padding on 2 processes: [A,B] and [C,C] */
  if (n == 2 && rank == 1) {
    acc_split s;
    CHECK_OK(acc_split_between_processes(st, 3, 1, &s));
    CHECK(s.count == 1 && s.padded_count == 2 && acc_split_item(&s, 0) == 2 && acc_split_item(&s, 1) == 2,
          "['A','B','C'] padded on rank 1 must be ['C','C']");
  }
  for (int r = 0; r < n; r++) c[r] = 0;
  check_split(0, 1, c);
}

static void test_triggers(void) {
  int t = -1;
  CHECK_OK(acc_check_trigger(st, &t));
  CHECK(t == 0, "trigger starts clear");
  if (rank == n - 1) CHECK_OK(acc_set_trigger(st));
  CHECK_OK(acc_check_trigger(st, &t));
  CHECK(t == 1, "every process sees the trigger set by the last one");
  CHECK_OK(acc_check_trigger(st, &t));
  CHECK(t == 0, "trigger is reset after a check");
  /* early stop at the same step everywhere */
  int stop_step = -1;
  for (int step = 0; step < 10; step++) {
    if (rank == (n > 1 ? 1 : 0) && step == 3) CHECK_OK(acc_set_trigger(st));
    CHECK_OK(acc_check_trigger(st, &t));
    if (t) {
      stop_step = step;
      break;
    }
  }
  CHECK(stop_step == 3, "stopped at step %d", stop_step);
}

int main(void) {
  REQUIRE_OK(acc_state_create(&st, NULL));
  n = acc_state_num_processes(st);
  rank = acc_state_process_index(st);
  acc_test_rank = rank;
  snprintf(dir, sizeof dir, "/tmp/acc-test-control-%s", getenv("ACCELERATE_RUN_ID") ? getenv("ACCELERATE_RUN_ID") : "solo");
  if (rank == 0) mkdir(dir, 0755);
  REQUIRE_OK(acc_wait_for_everyone(st));
  test_attributes();
  test_main_process_first();
  test_on_helpers();
  test_split();
  test_triggers();
  REQUIRE_OK(acc_wait_for_everyone(st));
  if (rank == 0) {
    char path[300];
    snprintf(path, sizeof path, "%s/order.txt", dir);
    unlink(path);
    rmdir(dir);
  }
  acc_state_destroy(st);
  return acc_test_finish("control");
}
