/* Iterating a loader that was never prepared (acc_dataloader_create) with
 * acc_accelerator_next_batch in a run of several processes: every process reads the whole data
 * set. The main process warns once, naming acc_accelerator_prepare_dataloader (newuser-4 finding
 * 4); a prepared loader, a loader sharded by hand, and a 1-process run give no warning. */
#include <unistd.h>

#include "acc_test.h"

static const char *warning = "create it with acc_accelerator_prepare_dataloader instead of acc_dataloader_create";

/* Batches of one epoch; records the first sample's value. */
static int epoch(acc_accelerator *acc, acc_dataloader *dl, float *first) {
  const acc_batch *b = NULL;
  int n = 0;
  for (;;) {
    acc_result rc = acc_accelerator_next_batch(acc, dl, &b);
    CHECK(rc == ACC_OK, "next_batch: %s", acc_last_error());
    if (rc != ACC_OK || !b) break;
    if (n++ == 0) *first = ((const float *)b->fields[0])[0];
  }
  return n;
}

int main(void) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  const int rank = acc_state_process_index(st), np = acc_state_num_processes(st);
  acc_test_rank = rank;
  char tmpl[] = "/tmp/acc_unprepared_XXXXXX";
  int fd = mkstemp(tmpl), saved = dup(2);
  REQUIRE_OK(fd >= 0 && saved >= 0 && dup2(fd, 2) == 2 ? ACC_OK : ACC_ERR_SYSTEM); /* capture stderr */
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  float x[16];
  for (int i = 0; i < 16; i++) x[i] = (float)i;
  acc_field_desc f = {ACC_F32, 1};
  const void *d[1] = {x};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_memory(&ds, 16, &f, 1, d));
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = 2;
  o.prefetch = 0;
  /* prepared: sharded, no warning */
  acc_dataloader *prep, *raw, *hand;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &o, &prep));
  float first = -1;
  CHECK(epoch(acc, prep, &first) == 8 / np, "prepared loader: wrong batch count");
  CHECK(first == (float)(2 * rank), "prepared loader: process %d starts at %g", rank, first);
  /* sharded by hand: every process its part, no warning */
  acc_dataloader_options oh = o;
  oh.shard.num_processes = np;
  oh.shard.process_index = rank;
  REQUIRE_OK(acc_dataloader_create(&hand, ds, &oh));
  CHECK(epoch(acc, hand, &first) == 8 / np, "loader sharded by hand: wrong batch count");
  fflush(stderr);
  char *text = acc_test_slurp(tmpl);
  CHECK(text && !strstr(text, warning), "a warning for a prepared or hand-sharded loader: %s", text ? text : "");
  /* never prepared: every process reads everything; warned once (two epochs, two calls) */
  REQUIRE_OK(acc_dataloader_create(&raw, ds, &o));
  CHECK(epoch(acc, raw, &first) == 8 && first == 0.0f, "unprepared loader: 8 batches from sample 0");
  CHECK(epoch(acc, raw, &first) == 8, "unprepared loader, second epoch");
  fflush(stderr);
  text = acc_test_slurp(tmpl);
  const int want = (np > 1 && rank == 0) ? 1 : 0;
  CHECK(text && acc_test_count(text, warning) == want, "process %d of %d: the warning %d times, expected %d: %s",
        rank, np, text ? acc_test_count(text, warning) : -1, want, text ? text : "");
  if (want) {
    char n[64];
    snprintf(n, sizeof n, "the run has %d processes", np);
    CHECK(strstr(text, n) != NULL, "the warning does not give the process count: %s", text);
  }
  dup2(saved, 2);
  close(saved);
  close(fd);
  unlink(tmpl);
  acc_accelerator_destroy(acc);
  acc_dataloader_destroy(raw);
  acc_dataloader_destroy(hand);
  acc_dataloader_destroy(prep);
  acc_dataset_destroy(ds);
  acc_state_destroy(st);
  return acc_test_finish("accel_unprepared");
}
