/* Unit checks of the collective call descriptors (src/backend/collcheck.c): tags, messages, the
 * all_gather_bytes size validation (regression for red-team D2: the sum of peer-reported sizes
 * wrapped and gave a small buffer for a large copy) and the hang-report variable. */
#include <stdlib.h>

#include "acc_test.h"
#include "backend/collcheck.h"

static acc__call base_call(void) {
  acc__call c = {.seq = 7, .op = ACC__OP_ALL_REDUCE, .dtype = ACC_F32, .red = ACC_SUM, .root = 0,
                 .count = 100, .origin = ACC__ORIGIN_USER, .origin_index = 0, .file = "a.c", .line = 3};
  return c;
}

static void test_tags(void) {
  acc__call a = base_call(), b = base_call();
  b.file = "elsewhere.c";
  b.line = 99;
  CHECK(acc__call_tag(&a) == acc__call_tag(&b), "the call site must not change the tag");
  acc__call v[8];
  for (int i = 0; i < 8; i++) v[i] = base_call();
  v[0].seq = 8;
  v[1].op = ACC__OP_BROADCAST;
  v[2].dtype = ACC_I32;
  v[3].red = ACC_MAX;
  v[4].root = 1;
  v[5].count = 101;
  v[6].origin = ACC__ORIGIN_GRAD_SYNC;
  v[7].origin_index = 1;
  for (int i = 0; i < 8; i++)
    CHECK(acc__call_tag(&v[i]) != acc__call_tag(&a), "field %d does not change the tag", i);
  acc__call g1 = base_call(), g2 = base_call();
  g1.op = g2.op = ACC__OP_ALL_GATHER_BYTES;
  g2.count = 12345;
  CHECK(acc__call_tag(&g1) == acc__call_tag(&g2), "all_gather_bytes sizes may differ per process");
}

static void test_messages(void) {
  acc__call a = base_call();
  acc__call_rec r[2];
  memset(r, 0, sizeof r);
  acc__call_rec_fields(&r[0], &a);
  acc__call_rec_site(&r[0], a.file);
  a.origin = ACC__ORIGIN_GRAD_SYNC;
  a.origin_index = 3;
  a.file = NULL;
  acc__call_rec_fields(&r[1], &a);
  acc__call_rec_site(&r[1], a.file);
  CHECK_ERR(acc__mismatch_error("all_reduce", 0, &r[0], r, 2, 0), ACC_ERR_MISMATCH,
            "process 0: all_reduce(count=100, dtype=f32, op=sum) [user call] at a.c:3");
  CHECK(strstr(acc_last_error(), "process 1: all_reduce(count=100, dtype=f32, op=sum) [gradient sync "
                                 "bucket 3] at an unknown call site"),
        "%s", acc_last_error());
  /* one machine's group inside the hierarchical backend: the job's ranks (machine 2 of 2 x 2) */
  CHECK_ERR(acc__mismatch_error("all_reduce", 1, &r[1], r, 2, 2), ACC_ERR_MISMATCH, "on rank 3:");
  CHECK(strstr(acc_last_error(), "process 2: all_reduce(count=100") &&
            strstr(acc_last_error(), "process 3: all_reduce(count=100") && !strstr(acc_last_error(), "process 0"),
        "%s", acc_last_error());
  /* a long path keeps its end */
  char path[400];
  memset(path, 'd', sizeof path);
  memcpy(path + sizeof path - 12, "/file_end.c", 12);
  acc__call_rec_site(&r[0], path);
  CHECK(strlen(r[0].site) < sizeof r[0].site && strstr(r[0].site, "/file_end.c") &&
            strncmp(r[0].site, "...", 3) == 0,
        "site %s", r[0].site);
  /* many processes: the message stays bounded and names the one that differs */
  acc__call_rec many[64];
  for (int i = 0; i < 64; i++) many[i] = r[1];
  many[50].count = 7;
  CHECK_ERR(acc__mismatch_error("all_reduce", 0, &many[0], many, 64, 0), ACC_ERR_MISMATCH,
            "process 50: all_reduce(count=7");
  CHECK(strstr(acc_last_error(), "more processes"), "%s", acc_last_error());
}

static void test_gather_layout(void) {
  size_t sizes[4], disp[4], total = 0;
  /* red-team reproduction: 32 bytes here, UINT64_MAX - 15 from the peer: the sum wraps to 16 */
  uint64_t rep[2] = {32, UINT64_MAX - 15};
  CHECK_ERR(acc__gather_layout(rep, 2, 0, 32, UINT64_MAX, sizes, disp, &total), ACC_ERR_MISMATCH,
            "process 1 reported 18446744073709551600 bytes");
  /* beyond what this process can hold (the limit) */
  uint64_t big[2] = {32, (uint64_t)1 << 50};
  CHECK_ERR(acc__gather_layout(big, 2, 0, 32, (uint64_t)1 << 40, sizes, disp, &total),
            ACC_ERR_MISMATCH, "out of step");
  /* own size not echoed back */
  uint64_t own[2] = {31, 5};
  CHECK_ERR(acc__gather_layout(own, 2, 0, 32, UINT64_MAX, sizes, disp, &total), ACC_ERR_MISMATCH,
            "returned 31 bytes for this process instead of its 32");
  /* valid: offsets in rank order, exactly at the limit */
  uint64_t ok[4] = {10, 0, 5, 85};
  CHECK_OK(acc__gather_layout(ok, 4, 2, 5, 100, sizes, disp, &total));
  CHECK(total == 100 && disp[0] == 0 && disp[1] == 10 && disp[2] == 10 && disp[3] == 15 &&
            sizes[3] == 85,
        "total %zu disp %zu %zu %zu %zu", total, disp[0], disp[1], disp[2], disp[3]);
  CHECK(acc__gather_limit() > 0, "limit");
}

static void test_hang_env(void) {
  double s = -1;
  unsetenv("ACCELERATE_HANG_REPORT_S");
  CHECK_OK(acc__hang_report_env(&s));
  CHECK(s == 60.0, "default %g", s);
  setenv("ACCELERATE_HANG_REPORT_S", "0", 1);
  CHECK_OK(acc__hang_report_env(&s));
  CHECK(s == 0.0, "0 turns reports off: %g", s);
  setenv("ACCELERATE_HANG_REPORT_S", "2.5", 1);
  CHECK_OK(acc__hang_report_env(&s));
  CHECK(s == 2.5, "%g", s);
  const char *bad[] = {"-1", "abc", "5s", "nan", "inf", "1e300"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("ACCELERATE_HANG_REPORT_S", bad[i], 1);
    CHECK_ERR(acc__hang_report_env(&s), ACC_ERR_INVALID_ARGUMENT, "ACCELERATE_HANG_REPORT_S");
  }
  /* a bad value is an error of acc_state_create on several processes, not ignored: checked by
   * the backends at creation (here: the message names the variable) */
  unsetenv("ACCELERATE_HANG_REPORT_S");
}

static void test_origin_one_shot(void) {
  int32_t k;
  int64_t i;
  acc__comm_origin(ACC__ORIGIN_GRAD_SYNC, 4);
  acc__comm_take_origin(&k, &i);
  CHECK(k == ACC__ORIGIN_GRAD_SYNC && i == 4, "%d %lld", (int)k, (long long)i);
  acc__comm_take_origin(&k, &i);
  CHECK(k == ACC__ORIGIN_USER && i == 0, "the origin is for one call only: %d", (int)k);
  /* a call that fails its argument checks still consumes it */
  acc__comm_origin(ACC__ORIGIN_PAD, 0);
  CHECK_ERR(acc_barrier(NULL), ACC_ERR_INVALID_ARGUMENT, "barrier");
  acc__comm_take_origin(&k, &i);
  CHECK(k == ACC__ORIGIN_USER, "origin left pending after a failed call: %d", (int)k);
}

int main(void) {
  test_tags();
  test_messages();
  test_gather_layout();
  test_hang_env();
  test_origin_one_shot();
  return acc_test_finish("collcheck");
}
