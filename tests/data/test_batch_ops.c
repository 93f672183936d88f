/* Accelerate's pad_input_tensors and concatenate on the library's batches, run by the launcher
 * at 1, 2 and 3 processes (num_processes from the process state). The expected sizes are
 * computed by hand from Accelerate's formula (docs/data.md):
 *   per = b // n, last = b - per*n, to_pad = n - b if per == 0 else n - per,
 *   if last > to_pad and to_pad < 1: to_pad = last - to_pad;   result b + to_pad
 * e.g. n=2, b=5: per 2, last 1, to_pad 0 -> 1 > 0 and 0 < 1 -> to_pad 1 -> 6;
 *      n=3, b=4: per 1, last 1, to_pad 2 -> 1 > 2 false -> 6;
 *      n=1, b=4: per 4, last 0, to_pad -3 -> 0 > -3 and -3 < 1 -> to_pad 3 -> 7.
 * Batches come from a real prepared loader (two fields: 3 floats and an int64 label). */
#include "acc_test.h"

#define REQUIRE(cond, ...)                                    \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "FATAL %s:%d: ", __FILE__, __LINE__);   \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
      exit(1);                                                \
    }                                                         \
  } while (0)

/* want[n-1][b] for b = 0..8 (hand-computed, see above) */
static const int64_t want[3][9] = {
    {1, 1, 3, 5, 7, 9, 11, 13, 15},
    {2, 2, 3, 4, 4, 6, 7, 9, 10},
    {3, 3, 3, 5, 6, 7, 7, 8, 9},
};

#define N_SAMPLES 23
static float feats[N_SAMPLES][3];
static int64_t labels[N_SAMPLES];

static void check_sample(const acc_batch *b, int64_t i, int64_t ds_index, const char *what) {
  const float *x = (const float *)b->fields[0] + i * 3;
  const int64_t *y = (const int64_t *)b->fields[1] + i;
  if (ds_index < 0) {
    CHECK(x[0] == 0 && x[1] == 0 && x[2] == 0 && *y == 0 && b->indices[i] == -1,
          "%s: sample %lld is not a zero padding sample (x0 %g, y %lld, index %lld)", what,
          (long long)i, x[0], (long long)*y, (long long)b->indices[i]);
    return;
  }
  CHECK(b->indices[i] == ds_index && x[0] == feats[ds_index][0] && x[2] == feats[ds_index][2] &&
            *y == labels[ds_index],
        "%s: sample %lld: index %lld (want %lld), x0 %g, y %lld", what, (long long)i,
        (long long)b->indices[i], (long long)ds_index, x[0], (long long)*y);
}

int main(void) {
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  const int n = acc_accelerator_num_processes(acc);
  REQUIRE(n >= 1 && n <= 3, "run at 1, 2 or 3 processes (got %d)", n);

  /* the formula itself, every n of the table */
  for (int k = 1; k <= 3; k++)
    for (int64_t b = 0; b <= 8; b++)
      CHECK(acc_pad_input_size(b, k) == want[k - 1][b], "pad_input_size(%lld, %d) = %lld, want %lld",
            (long long)b, k, (long long)acc_pad_input_size(b, k), (long long)want[k - 1][b]);
  CHECK(acc_pad_input_size(-1, 2) == -1 && acc_pad_input_size(4, 0) == -1, "bad arguments");
  CHECK(acc_pad_input_size(INT64_MAX, 1) == -1, "overflow must be refused");

  for (int64_t i = 0; i < N_SAMPLES; i++) {
    feats[i][0] = (float)i + 0.5f;
    feats[i][1] = -(float)i;
    feats[i][2] = (float)(i * i);
    labels[i] = 1000 + i;
  }
  acc_field_desc fd[2] = {{ACC_F32, 3}, {ACC_I64, 1}};
  const void *cols[2] = {feats, labels};
  acc_dataset *ds;
  REQUIRE_OK(acc_dataset_create_memory(&ds, N_SAMPLES, fd, 2, cols));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 5;
  lo.drop_last = 0;
  acc_dataloader *dl;
  REQUIRE_OK(acc_accelerator_prepare_dataloader(acc, ds, &lo, &dl));

  /* pad every batch of this process's epoch (sizes 5, and a short last one at some n) */
  const acc_batch *got[16];
  acc_batch *copies[16];
  int nb = 0;
  int64_t total = 0;
  const acc_batch *b;
  for (;;) {
    REQUIRE_OK(acc_dataloader_next(dl, &b));
    if (!b) break;
    REQUIRE(nb < 16, "too many batches");
    acc_batch *p;
    REQUIRE_OK(acc_batch_pad_input(b, n, &p));
    REQUIRE(b->size <= 8, "batch size %lld", (long long)b->size);
    CHECK(p->size == want[n - 1][b->size], "batch %d of %lld samples padded to %lld, want %lld", nb,
          (long long)b->size, (long long)p->size, (long long)want[n - 1][b->size]);
    CHECK(p->num_fields == 2 && p->field_bytes[0] == (size_t)p->size * 12 &&
              p->field_bytes[1] == (size_t)p->size * 8,
          "padded field bytes %zu %zu for %lld samples", p->field_bytes[0], p->field_bytes[1],
          (long long)p->size);
    CHECK(p->index == b->index && p->epoch == b->epoch &&
              p->end_of_dataloader == b->end_of_dataloader && p->device_fields == NULL,
          "batch metadata not kept");
    for (int64_t i = 0; i < p->size; i++)
      check_sample(p, i, i < b->size ? b->indices[i] : -1, "padded");
    acc_free(p);
    /* keep a copy (the loader's batch is borrowed until the next call) */
    REQUIRE_OK(acc_batch_concatenate(&b, 1, &copies[nb]));
    CHECK(copies[nb]->size == b->size, "a one-batch concatenate is a copy");
    got[nb] = copies[nb];
    total += b->size;
    nb++;
  }
  REQUIRE(nb > 0, "no batches");

  /* concatenate the epoch's batches: every sample in order, as the loader handed them out */
  acc_batch *cat;
  REQUIRE_OK(acc_batch_concatenate(got, (size_t)nb, &cat));
  CHECK(cat->size == total, "concatenated %lld samples, want %lld", (long long)cat->size,
        (long long)total);
  int64_t at = 0;
  for (int k = 0; k < nb; k++)
    for (int64_t i = 0; i < got[k]->size; i++, at++) check_sample(cat, at, got[k]->indices[i], "concatenated");
  CHECK(cat->index == got[0]->index && cat->end_of_dataloader == got[nb - 1]->end_of_dataloader,
        "concatenate metadata");
  /* the padded last batch concatenated after the others: padding stays zero, at the end */
  acc_batch *lastp, *two;
  REQUIRE_OK(acc_batch_pad_input(got[nb - 1], n, &lastp));
  const acc_batch *pair[2] = {got[0], lastp};
  REQUIRE_OK(acc_batch_concatenate(pair, 2, &two));
  CHECK(two->size == got[0]->size + lastp->size, "pair size %lld", (long long)two->size);
  for (int64_t i = 0; i < lastp->size; i++)
    check_sample(two, got[0]->size + i, i < got[nb - 1]->size ? got[nb - 1]->indices[i] : -1, "pair");

  /* bad input: clear errors naming the problem */
  acc_batch *bad = NULL;
  CHECK_ERR(acc_batch_concatenate(NULL, 0, &bad), ACC_ERR_INVALID_ARGUMENT, "no batches");
  CHECK(bad == NULL, "no output on error");
  acc_field_desc fd1[1] = {{ACC_F32, 2}};
  const void *cols1[1] = {feats};
  acc_dataset *ds2;
  REQUIRE_OK(acc_dataset_create_memory(&ds2, 6, fd1, 1, cols1));
  acc_dataloader_options lo2 = ACC_DATALOADER_OPTIONS_INIT;
  lo2.batch_size = 3;
  acc_dataloader *dl2;
  REQUIRE_OK(acc_dataloader_create(&dl2, ds2, &lo2));
  const acc_batch *other;
  REQUIRE_OK(acc_dataloader_next(dl2, &other));
  REQUIRE(other != NULL, "no batch");
  const acc_batch *mixed[2] = {got[0], other};
  CHECK_ERR(acc_batch_concatenate(mixed, 2, &bad), ACC_ERR_INVALID_ARGUMENT,
            "batch 1 has 1 fields but batch 0 has 2");
  acc_batch fake = *other;
  size_t odd_bytes[1] = {other->field_bytes[0] - 1};
  fake.field_bytes = odd_bytes;
  CHECK_ERR(acc_batch_pad_input(&fake, n, &bad), ACC_ERR_INVALID_ARGUMENT,
            "field 0 of batch 0 holds 23 bytes, not a multiple of its 3 samples");
  CHECK_ERR(acc_batch_pad_input(other, 0, &bad), ACC_ERR_INVALID_ARGUMENT, "num_processes is 0");
  acc_dataloader_destroy(dl2);
  acc_dataset_destroy(ds2);

  acc_free(two);
  acc_free(lastp);
  acc_free(cat);
  for (int k = 0; k < nb; k++) acc_free(copies[k]);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
  return acc_test_finish("data_batch_ops");
}
