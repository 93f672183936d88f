/* The logger through the launcher. Usage: test_obs_logger MODE BUILD_DIR
 *  files:  ACCELERATE_LOG_FILE=<dir>/log.%r.%h.%p; each process's file holds exactly its lines:
 *          main-process-only lines on rank 0 only, ACC_LOG_ALL_PROCESSES and ACC_LOG_IN_ORDER
 *          lines everywhere, levels filtered, "[RANK r]" prefixes, the library's own messages
 *          (logger "accelerate") in the same place.
 *  order:  every process appends to one file; ACC_LOG_IN_ORDER lines come in rank order, every
 *          time; in debug mode a process making another collective instead is reported.
 *  env:    ACCELERATE_LOG_LEVEL (set by ctest) decides the level unless the program sets one.
 *  badenv: an invalid ACCELERATE_LOG_LEVEL is an error naming the variable.
 *  badfile: an ACCELERATE_LOG_FILE that cannot be created: a message naming it, then stderr.
 *  fullfile: ACCELERATE_LOG_FILE=/dev/full: every write fails; stderr says so once, with the
 *    first lost line (issue 31).
 * Regression for newuser review R10 (no logging facility). */
#include <unistd.h>

#include "acc_test.h"

static int rank, np;

static void files_mode(const char *base) {
  const char *run = getenv("ACCELERATE_RUN_ID");
  char dir[1024], pattern[1200];
  snprintf(dir, sizeof dir, "%s/logger_np%d_%s", base, np, run ? run : "x");
  snprintf(pattern, sizeof pattern, "%s/log.%%r.%%h.%%p", dir);
  setenv("ACCELERATE_LOG_FILE", pattern, 1); /* read at the first line written */
  acc_logger *lg, *again;
  REQUIRE_OK(acc_get_logger("test", ACC_UNSET, &lg));
  REQUIRE_OK(acc_get_logger("test", ACC_UNSET, &again));
  CHECK(lg == again, "same logger for the same name");
  CHECK(acc_logger_level(lg) == ACC_LOG_DEFAULT_LEVEL, "default level %d", acc_logger_level(lg));
  acc_log(lg, ACC_LOG_INFO, "main only %d", 42);
  acc_log(lg, ACC_LOG_DEBUG, "hidden debug line");
  CHECK_OK(acc_log_ex(lg, ACC_LOG_WARNING, ACC_LOG_ALL_PROCESSES, "from every process: %d", rank));
  CHECK_OK(acc_log_ex(lg, ACC_LOG_INFO, ACC_LOG_IN_ORDER, "in order: %d", rank));
  CHECK_OK(acc_logger_set_level(lg, ACC_LOG_DEBUG));
  acc_log(lg, ACC_LOG_DEBUG, "debug now shown\n"); /* one newline, not two */
  CHECK_ERR(acc_logger_set_level(lg, 500), ACC_ERR_INVALID_ARGUMENT, "500");
  CHECK_ERR(acc_log_ex(lg, ACC_LOG_INFO, 8, "x"), ACC_ERR_INVALID_ARGUMENT, "flags");
  /* the library's own diagnostics go through the logger: the tensorboard tracker says where */
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = dir;
  acc_project_config *pc;
  REQUIRE_OK(acc_project_config_create(&pc, &po));
  acc_trackers *tr;
  REQUIRE_OK(acc_trackers_create(&tr, acc_state_get(), "tensorboard", pc));
  CHECK_OK(acc_init_trackers(tr, "r", NULL, 0));
  acc_trackers_destroy(tr);
  acc_project_config_destroy(pc);

  char host[256], path[1500];
  gethostname(host, sizeof host);
  snprintf(path, sizeof path, "%s/log.%d.%s.%ld", dir, rank, host, (long)getpid());
  const char *text = acc_test_slurp(path);
  CHECK(text != NULL, "no log file %s", path);
  if (!text) return;
  char want[128];
  snprintf(want, sizeof want, "WARNING test: from every process: %d\n", rank);
  CHECK(acc_test_count(text, want) == 1, "all-processes line in %s:\n%s", path, text);
  snprintf(want, sizeof want, "INFO test: in order: %d\n", rank);
  CHECK(acc_test_count(text, want) == 1, "in-order line in %s:\n%s", path, text);
  CHECK(strstr(text, "hidden debug line") == NULL, "DEBUG filtered at INFO");
  snprintf(want, sizeof want, "[RANK %d] ", rank);
  CHECK(acc_test_count(text, want) == acc_test_count(text, "\n"), "every line starts with %s:\n%s",
        want, text);
  CHECK(strstr(text, "\n\n") == NULL, "no blank lines:\n%s", text);
  if (rank == 0) {
    CHECK(acc_test_count(text, "INFO test: main only 42\n") == 1, "main-only line on rank 0:\n%s",
          text);
    CHECK(acc_test_count(text, "DEBUG test: debug now shown\n") == 1,
          "debug line after set_level:\n%s", text);
    CHECK(strstr(text, "INFO accelerate: tensorboard tracker: writing ") != NULL,
          "library message:\n%s", text);
    CHECK(acc_test_count(text, "\n") == 5, "5 lines on rank 0:\n%s", text);
  } else {
    CHECK(acc_test_count(text, "\n") == 2, "2 lines on rank %d (no main-only lines):\n%s", rank,
          text);
  }
}

static void order_mode(const char *base) {
  const char *run = getenv("ACCELERATE_RUN_ID");
  char path[1200];
  snprintf(path, sizeof path, "%s/logger_order_np%d_%s.log", base, np, run ? run : "x");
  setenv("ACCELERATE_LOG_FILE", path, 1); /* one file for every process (appended to) */
  acc_logger *lg;
  REQUIRE_OK(acc_get_logger("order", ACC_LOG_INFO, &lg));
  enum { ROUNDS = 20 };
  for (int k = 0; k < ROUNDS; k++)
    CHECK_OK(acc_log_ex(lg, ACC_LOG_INFO, ACC_LOG_IN_ORDER, "round %d rank %d", k, rank));
  REQUIRE_OK(acc_wait_for_everyone(acc_state_get()));
  if (rank == 0) {
    const char *text = acc_test_slurp(path);
    CHECK(text != NULL, "no shared log %s", path);
    const char *p = text;
    for (int k = 0; text && k < ROUNDS; k++)
      for (int r = 0; r < np; r++) {
        char want[64];
        snprintf(want, sizeof want, "INFO order: round %d rank %d\n", k, r);
        const char *at = strstr(p, want);
        CHECK(at != NULL, "\"%s\" missing or out of order in:\n%s", want, text);
        if (at) p = at + strlen(want);
      }
  }
  /* Debug mode: process 1 makes an all_gather of its own instead of the in-order log. */
  if (np > 1 && acc_state_debug(acc_state_get())) {
    if (rank == 1) {
      int64_t mine = 7, all[64];
      CHECK_OK(acc_all_gather(acc_state_get(), &mine, all, 1, ACC_I64));
    } else {
      CHECK_ERR(acc_log_ex(lg, ACC_LOG_INFO, ACC_LOG_IN_ORDER, "misused"), ACC_ERR_MISMATCH,
                "process 1 made a different collective call");
    }
    REQUIRE_OK(acc_wait_for_everyone(acc_state_get()));
  }
}

int main(int argc, char **argv) {
  REQUIRE_OK(argc >= 2 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  const char *mode = argv[1];
  if (strcmp(mode, "fullfile") == 0) { /* every write to the log file fails (ENOSPC): said once */
    char tmpl[] = "/tmp/acc_logger_stderr_XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE_OK(fd >= 0 && dup2(fd, 2) == 2 ? ACC_OK : ACC_ERR_SYSTEM); /* capture stderr */
    setenv("ACCELERATE_LOG_FILE", "/dev/full", 1);
    acc_logger *lg;
    REQUIRE_OK(acc_get_logger("f", ACC_LOG_INFO, &lg));
    acc_log(lg, ACC_LOG_INFO, "first lost line");
    acc_log(lg, ACC_LOG_INFO, "second lost line");
    CHECK_OK(acc_log_ex(lg, ACC_LOG_WARNING, ACC_LOG_ALL_PROCESSES, "third lost line"));
    FILE *f = fopen(tmpl, "r");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    unlink(tmpl);
    const char *say = "cannot write to ACCELERATE_LOG_FILE \"/dev/full\": No space left on device; log lines of "
                      "this process are being lost (said once)";
    const char *at = strstr(buf, say);
    CHECK(at != NULL, "no notice on stderr: '%s'", buf);
    CHECK(at && strstr(at + 1, say) == NULL, "the notice is repeated: '%s'", buf);
    CHECK(strstr(buf, "INFO f: first lost line\n") != NULL, "the first lost line is not shown: '%s'", buf);
    CHECK(strstr(buf, "second lost line") == NULL && strstr(buf, "third lost line") == NULL,
          "later lost lines reached stderr: '%s'", buf);
    return acc_test_finish("obs_logger_fullfile");
  }
  if (strcmp(mode, "badfile") == 0) {
    char tmpl[] = "/tmp/acc_logger_stderr_XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE_OK(fd >= 0 && dup2(fd, 2) == 2 ? ACC_OK : ACC_ERR_SYSTEM); /* capture stderr */
    setenv("ACCELERATE_LOG_FILE", "/proc/acc-no-such-dir/log.%r", 1);
    acc_logger *lg;
    REQUIRE_OK(acc_get_logger("f", ACC_LOG_INFO, &lg));
    acc_log(lg, ACC_LOG_INFO, "still logged");
    FILE *f = fopen(tmpl, "r");
    char buf[2048] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    unlink(tmpl);
    CHECK(strstr(buf, "cannot open ACCELERATE_LOG_FILE \"/proc/acc-no-such-dir/log.0\"") != NULL,
          "message naming the file: %s", buf);
    CHECK(strstr(buf, "INFO f: still logged\n") != NULL, "the line went to stderr: %s", buf);
    return acc_test_finish("obs_logger_badfile");
  }
  if (strcmp(mode, "env") == 0 || strcmp(mode, "badenv") == 0) {
    acc_logger *lg = NULL;
    if (strcmp(mode, "badenv") == 0) {
      CHECK_ERR(acc_get_logger("x", ACC_UNSET, &lg), ACC_ERR_INVALID_ARGUMENT,
                "ACCELERATE_LOG_LEVEL=\"loud\"");
      CHECK_OK(acc_get_logger("x", ACC_LOG_ERROR, &lg)); /* a level from the program needs no env */
      CHECK(acc_logger_level(lg) == ACC_LOG_ERROR, "explicit level");
    } else {
      REQUIRE_OK(acc_get_logger("x", ACC_UNSET, &lg));
      CHECK(acc_logger_level(lg) == ACC_LOG_WARNING, "ACCELERATE_LOG_LEVEL=warning: %d",
            acc_logger_level(lg));
      CHECK(!acc_logger_enabled(lg, ACC_LOG_INFO) && acc_logger_enabled(lg, ACC_LOG_ERROR),
            "enabled");
      acc_logger *y;
      REQUIRE_OK(acc_get_logger("y", ACC_LOG_DEBUG, &y));
      CHECK(acc_logger_level(y) == ACC_LOG_DEBUG, "the program's level wins over the environment");
      int lv;
      CHECK_OK(acc_log_level_parse("Critical", &lv));
      CHECK(lv == ACC_LOG_CRITICAL, "parse");
      CHECK_ERR(acc_log_level_parse("verbose", &lv), ACC_ERR_INVALID_ARGUMENT, "\"verbose\"");
    }
    return acc_test_finish("obs_logger_env");
  }
  REQUIRE_OK(argc == 3 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  unsetenv("ACCELERATE_LOG_LEVEL");
  if (strcmp(mode, "order") == 0) setenv("ACCELERATE_DEBUG_MODE", "1", 1);
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  np = acc_state_num_processes(st);
  acc_test_rank = rank;
  if (strcmp(mode, "files") == 0)
    files_mode(argv[2]);
  else
    order_mode(argv[2]);
  /* passed: leave nothing behind (each run writes under its own run id) */
  REQUIRE_OK(acc_wait_for_everyone(st));
  const char *run = getenv("ACCELERATE_RUN_ID");
  if (rank == 0 && acc_test_failures == 0 && run) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/logger_np%d_%s '%s'/logger_order_np%d_%s.log", argv[2],
             np, run, argv[2], np, run);
    CHECK(system(cmd) == 0, "cleanup");
  }
  acc_state_destroy(st);
  return acc_test_finish("obs_logger");
}
