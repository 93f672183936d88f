/* The environment variable table: parsing of every type against its range (regression for red-team
 * D3: values past INT_MAX, garbage, empty, inf/nan), and the rules every row follows.
 * With --markdown, prints the table as docs/environment.md has it (test_env_table_doc.sh). */
#include <limits.h>
#include <stdlib.h>

#include "acc_test.h"
#include "core/env.h"

static void expect_int_error(const char *name, const char *value, const char *fragment) {
  long v = 12345;
  int set = -1;
  setenv(name, value, 1);
  acc_result rc = acc__env_int(name, &v, &set);
  CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "%s=%s accepted (%ld)", name, value, v);
  CHECK(strstr(acc_last_error(), name) && strstr(acc_last_error(), fragment),
        "%s=%s: message lacks the variable or '%s': %s", name, value, fragment, acc_last_error());
  CHECK(v == 12345 && set == 0, "%s=%s: output touched", name, value);
  unsetenv(name);
}

static void expect_double_error(const char *name, const char *value, const char *fragment) {
  double v = 7.0;
  int set = -1;
  setenv(name, value, 1);
  acc_result rc = acc__env_double(name, &v, &set);
  CHECK(rc == ACC_ERR_INVALID_ARGUMENT, "%s=%s accepted (%g)", name, value, v);
  CHECK(strstr(acc_last_error(), name) && strstr(acc_last_error(), fragment),
        "%s=%s: message lacks the variable or '%s': %s", name, value, fragment, acc_last_error());
  CHECK(v == 7.0 && set == 0, "%s=%s: output touched", name, value);
  unsetenv(name);
}

static void test_int(void) {
  const char *gas = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS";
  long v = 0;
  int set = 0;
  unsetenv(gas);
  CHECK_OK(acc__env_int(gas, &v, &set));
  CHECK(set == 0 && v == 0, "unset: set %d v %ld", set, v);
  setenv(gas, "", 1);
  CHECK_OK(acc__env_int(gas, &v, &set));
  CHECK(set == 0, "empty counts as unset");
  setenv(gas, "4", 1);
  CHECK_OK(acc__env_int(gas, &v, &set));
  CHECK(set == 1 && v == 4, "4: set %d v %ld", set, v);
  setenv(gas, "1048576", 1);
  CHECK_OK(acc__env_int(gas, &v, &set));
  CHECK(v == 1048576, "upper bound accepted");
  unsetenv(gas);
  /* red-team D3: 2^32 (SIGFPE), 2^31 (INT_MIN steps), 2^32+1 (silently 1) */
  expect_int_error(gas, "4294967296", "out of range: expected 1..1048576");
  expect_int_error(gas, "2147483648", "out of range: expected 1..1048576");
  expect_int_error(gas, "4294967297", "out of range: expected 1..1048576");
  expect_int_error(gas, "99999999999999999999999", "out of range");
  expect_int_error(gas, "0", "out of range");
  expect_int_error(gas, "-1", "out of range");
  expect_int_error(gas, "abc", "is not an integer");
  expect_int_error(gas, "4x", "is not an integer");
  expect_int_error(gas, "1.5", "is not an integer");
  expect_int_error(gas, " ", "is not an integer");
  expect_int_error("WORLD_SIZE", "2147483648", "out of range: expected 1..1048576");
  expect_int_error("WORLD_SIZE", "9223372036854775807", "out of range");
  expect_int_error("WORLD_SIZE", "4294967298", "out of range");
  expect_int_error("RANK", "-1", "out of range: expected 0..1048575");
  expect_int_error("MASTER_PORT", "99999", "expected 1..65535");
  expect_int_error("ACCELERATE_SHM_SPIN_US", "100000000", "expected 0..1000000");
  expect_int_error("ACCELERATE_SHM_YIELD_US", "1000001", "expected 0..1000000");
  expect_int_error("ACCELERATE_MPI_CHUNK", "0", "expected 1..1073741824");
  /* a name missing from the table is a bug, reported as such */
  CHECK_ERR(acc__env_int("ACCELERATE_NO_SUCH_VARIABLE", &v, &set), ACC_ERR_INTERNAL, "missing from the table");
  CHECK_ERR(acc__env_int("ACCELERATE_LOG_FILE", &v, &set), ACC_ERR_INTERNAL, "not numeric");
}

static void test_double(void) {
  const char *t = "ACCELERATE_TIMEOUT";
  double v = 0;
  int set = 0;
  setenv(t, "2.5", 1);
  CHECK_OK(acc__env_double(t, &v, &set));
  CHECK(set == 1 && v == 2.5, "2.5: %g", v);
  setenv(t, "1e3", 1);
  CHECK_OK(acc__env_double(t, &v, &set));
  CHECK(v == 1000, "1e3: %g", v);
  unsetenv(t);
  expect_double_error(t, "inf", "out of range: expected 0.001..31536000");
  expect_double_error(t, "-inf", "out of range");
  expect_double_error(t, "1e300", "out of range");
  expect_double_error(t, "1e999", "out of range");
  expect_double_error(t, "nan", "is not a number");
  expect_double_error(t, "NaN", "is not a number");
  expect_double_error(t, "0", "out of range");
  expect_double_error(t, "-5", "out of range");
  expect_double_error(t, "abc", "is not a number");
  expect_double_error(t, "5s", "is not a number");
  expect_double_error("ACCELERATE_LAUNCH_GRACE_PERIOD", "-1", "expected 0..3600");
  /* an integer row read as a number keeps its range */
  setenv("ACCELERATE_SHM_SPIN_US", "10", 1);
  CHECK_OK(acc__env_double("ACCELERATE_SHM_SPIN_US", &v, &set));
  CHECK(v == 10, "int row as double: %g", v);
  unsetenv("ACCELERATE_SHM_SPIN_US");
}

static void test_bool_enum_str(void) {
  int b = -1, set = 0;
  setenv("ACCELERATE_DEBUG_MODE", "Yes", 1);
  CHECK_OK(acc__env_bool("ACCELERATE_DEBUG_MODE", &b, &set));
  CHECK(b == 1 && set == 1, "Yes: %d", b);
  setenv("ACCELERATE_DEBUG_MODE", "off", 1);
  CHECK_OK(acc__env_bool("ACCELERATE_DEBUG_MODE", &b, &set));
  CHECK(b == 0, "off: %d", b);
  setenv("ACCELERATE_DEBUG_MODE", "maybe", 1);
  CHECK_ERR(acc__env_bool("ACCELERATE_DEBUG_MODE", &b, &set), ACC_ERR_INVALID_ARGUMENT,
            "ACCELERATE_DEBUG_MODE=\"maybe\" is not a boolean");
  unsetenv("ACCELERATE_DEBUG_MODE");
  b = 5;
  CHECK_OK(acc__env_bool("ACCELERATE_DEBUG_MODE", &b, &set));
  CHECK(b == 5 && set == 0, "unset bool untouched");

  int idx = -1;
  setenv("ACCELERATE_BACKEND", "SHM", 1);
  CHECK_OK(acc__env_enum("ACCELERATE_BACKEND", &idx, &set));
  CHECK(idx == 2 && set == 1, "SHM: %d", idx);
  setenv("ACCELERATE_BACKEND", "sh", 1);
  CHECK_ERR(acc__env_enum("ACCELERATE_BACKEND", &idx, &set), ACC_ERR_INVALID_ARGUMENT,
            "ACCELERATE_BACKEND=\"sh\" is not one of auto,single,shm,mpi");
  setenv("ACCELERATE_BACKEND", "shmx", 1);
  CHECK_ERR(acc__env_enum("ACCELERATE_BACKEND", &idx, &set), ACC_ERR_INVALID_ARGUMENT, "not one of");
  unsetenv("ACCELERATE_BACKEND");

  setenv("ACCELERATE_LOG_FILE", "/tmp/x-%r.log", 1);
  CHECK(acc__env_str("ACCELERATE_LOG_FILE") && !strcmp(acc__env_str("ACCELERATE_LOG_FILE"), "/tmp/x-%r.log"),
        "string read back");
  unsetenv("ACCELERATE_LOG_FILE");
}

static void test_rows(void) {
  size_t n = 0;
  const acc__env_var *t = acc__env_table(&n);
  CHECK(n >= 60, "table has %zu rows", n);
  for (size_t i = 0; i < n; i++) {
    CHECK(t[i].name && t[i].meaning && t[i].meaning[0] && t[i].def && t[i].who, "row %zu incomplete", i);
    if (t[i].type == ACC__ENV_INT || t[i].type == ACC__ENV_DOUBLE)
      CHECK(t[i].min <= t[i].max && t[i].max <= 9007199254740992.0, "%s: range %g..%g", t[i].name,
            t[i].min, t[i].max);
    if (t[i].type == ACC__ENV_INT) CHECK(t[i].max <= INT_MAX, "%s: int range past INT_MAX", t[i].name);
    if (t[i].type == ACC__ENV_ENUM) CHECK(t[i].choices && strchr(t[i].choices, '|'), "%s: choices", t[i].name);
    for (size_t j = 0; j < i; j++) CHECK(strcmp(t[i].name, t[j].name) != 0, "%s twice", t[i].name);
    CHECK(acc__env_find(t[i].name) == &t[i], "find %s", t[i].name);
  }
  /* the variables other modules read, and those a launcher sets, are all there */
  static const char *must[] = {"ACCELERATE_RENDEZVOUS_TIMEOUT", "ACCELERATE_HANG_REPORT_S",
                               "ACCELERATE_LOG_LEVEL", "ACCELERATE_LOG_FILE", "ACCELERATE_PROFILE",
                               "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                               "SLURM_PROCID", "ACCELERATE_SHM_SPIN_US", NULL};
  for (int i = 0; must[i]; i++) CHECK(acc__env_find(must[i]) != NULL, "%s missing", must[i]);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--markdown")) {
    acc__env_print_markdown(stdout);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--names")) {
    size_t n = 0;
    const acc__env_var *t = acc__env_table(&n);
    for (size_t i = 0; i < n; i++) printf("%s\n", t[i].name);
    return 0;
  }
  test_int();
  test_double();
  test_bool_enum_str();
  test_rows();
  return acc_test_finish("unit_env_table");
}
