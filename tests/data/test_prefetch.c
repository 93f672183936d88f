/* Prefetch on and off give identical batches (map-style and iterable, several shard configs);
 * destroying a loader mid-epoch stops its thread cleanly. Runs under ThreadSanitizer (tsan). */
#include "data_fixture.h"

typedef struct cfg {
  int64_t n, bs;
  int shuffle, drop, np, p, split, even;
} cfg;

static acc_dataloader *mk(acc_dataset *ds, const cfg *c, int prefetch) {
  acc_dataloader_options o = ACC_DATALOADER_OPTIONS_INIT;
  o.batch_size = c->bs;
  o.shuffle = c->shuffle;
  o.seed = 99;
  o.drop_last = c->drop;
  o.shard.num_processes = c->np;
  o.shard.process_index = c->p;
  o.shard.split_batches = c->split;
  o.shard.even_batches = c->even;
  o.prefetch = prefetch;
  acc_dataloader *dl = NULL;
  REQUIRE_OK(acc_dataloader_create(&dl, ds, &o));
  return dl;
}

/* Two epochs of batches as one string of "index:indices;" entries with the end flag. */
static void run(acc_dataloader *dl, char *buf, size_t cap, int *consistent) {
  size_t pos = 0;
  const acc_batch *b;
  buf[0] = '\0';
  for (int e = 0; e < 2; e++)
    while (acc_dataloader_next(dl, &b) == ACC_OK && b) {
      char one[256];
      fx_render(b, one, sizeof one);
      pos += (size_t)snprintf(buf + pos, cap - pos, "%lld%s:%s;", (long long)b->index,
                              b->end_of_dataloader ? "E" : "", one);
      if (!fx_batch_consistent(b)) *consistent = 0;
    }
}

int main(void) {
  static const cfg cases[] = {
      {37, 4, 1, 0, 1, 0, 0, 1}, {37, 4, 1, 1, 1, 0, 0, 1}, {37, 3, 1, 0, 2, 1, 0, 1},
      {37, 3, 1, 0, 3, 2, 0, 0}, {37, 4, 1, 0, 2, 0, 1, 1}, {37, 8, 0, 0, 4, 3, 1, 0},
      {5, 4, 1, 0, 4, 3, 0, 1},  {0, 4, 1, 0, 2, 0, 0, 1},
  };
  static char a[16384], b[16384];
  for (int iterable = 0; iterable <= 1; iterable++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      const cfg *c = &cases[i];
      if (iterable && c->shuffle) continue;
      fx_stream s = {c->n, 0, -1, 0};
      acc_dataset *ds = NULL;
      if (iterable)
        REQUIRE_OK(acc_dataset_create_iterable(&ds, c->n, fx_fields, 2, fx_next, fx_reset, &s));
      else
        REQUIRE_OK(acc_dataset_create_map(&ds, c->n, fx_fields, 2, fx_fetch, NULL));
      int ok = 1;
      acc_dataloader *d0 = mk(ds, c, 0);
      run(d0, a, sizeof a, &ok);
      acc_dataloader_destroy(d0);
      for (int prefetch = 1; prefetch <= 4; prefetch += 3) {
        acc_dataloader *d1 = mk(ds, c, prefetch);
        run(d1, b, sizeof b, &ok);
        acc_dataloader_destroy(d1);
        CHECK(strcmp(a, b) == 0, "iterable %d case %zu prefetch %d:\n  sync %s\n  pref %s", iterable, i,
              prefetch, a, b);
      }
      CHECK(ok, "iterable %d case %zu: batch contents match indices", iterable, i);
      if (c->n > 0) CHECK(strlen(a) > 0, "case %zu yielded batches", i);
      acc_dataset_destroy(ds);
    }
  /* Mid-epoch destroy, state_set and set_epoch while the thread is filling the ring. */
  acc_dataset *ds = NULL;
  REQUIRE_OK(acc_dataset_create_map(&ds, 1000, fx_fields, 2, fx_fetch, NULL));
  const cfg big = {1000, 8, 1, 0, 2, 0, 0, 1};
  for (int rep = 0; rep < 20; rep++) {
    acc_dataloader *dl = mk(ds, &big, 3);
    const acc_batch *bt;
    for (int k = 0; k < rep % 5; k++) CHECK_OK(acc_dataloader_next(dl, &bt));
    if (rep % 2) {
      acc_dataloader_state st = {99, 1, 7};
      CHECK_OK(acc_dataloader_state_set(dl, &st));
      CHECK_OK(acc_dataloader_next(dl, &bt));
      CHECK(bt && bt->index == 7 && bt->epoch == 1, "resumed at batch 7 of epoch 1");
      CHECK_OK(acc_dataloader_set_epoch(dl, 3));
      CHECK_OK(acc_dataloader_next(dl, &bt));
      CHECK(bt && bt->index == 0 && bt->epoch == 3, "set_epoch restarts at batch 0");
    }
    acc_dataloader_destroy(dl);
  }
  acc_dataset_destroy(ds);
  return acc_test_finish("data_prefetch");
}
