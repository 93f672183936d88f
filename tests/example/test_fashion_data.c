/* The real Fashion-MNIST files from Debian's dataset-fashion-mnist: counts, sizes, labels. */
#include <unistd.h>

#include "acc_test.h"
#include "idx.h"

static void check_split(int train, int32_t expected_count) {
  idx_dataset ds;
  int rc = idx_load_fashion_mnist(NULL, train, &ds);
  CHECK(rc == 0, "load %s split: %s", train ? "train" : "test", idx_last_error());
  if (rc) return;
  CHECK(ds.images.count == expected_count, "count %d, expected %d", ds.images.count, expected_count);
  CHECK(ds.images.rows == 28 && ds.images.cols == 28, "size %dx%d", ds.images.rows, ds.images.cols);
  int32_t per_class[10] = {0};
  int in_range = 1;
  for (int32_t i = 0; i < ds.images.count; i++) {
    if (ds.labels[i] < 0 || ds.labels[i] > 9) in_range = 0;
    else per_class[ds.labels[i]]++;
  }
  CHECK(in_range, "labels in 0..9");
  /* Fashion-MNIST is balanced: 6000 (train) / 1000 (test) images of every class. */
  for (int c = 0; c < 10; c++)
    CHECK(per_class[c] == expected_count / 10, "class %d has %d images", c, per_class[c]);
  float lo = 1.0f, hi = 0.0f;
  size_t n = (size_t)ds.images.count * 784;
  for (size_t i = 0; i < n; i++) {
    lo = ds.images.pixels[i] < lo ? ds.images.pixels[i] : lo;
    hi = ds.images.pixels[i] > hi ? ds.images.pixels[i] : hi;
  }
  CHECK(lo == 0.0f && hi == 1.0f, "pixels span [0,1]: [%g, %g]", lo, hi);
  /* The first training image is an ankle boot (label 9), the first test image too. */
  CHECK(ds.labels[0] == 9, "first label %d, expected 9 (ankle boot)", ds.labels[0]);
  idx_dataset_free(&ds);
}

int main(void) {
  if (access(IDX_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
    printf("SKIPPED: %s/train-images-idx3-ubyte.gz is absent (apt-get install "
           "dataset-fashion-mnist)\n", IDX_FASHION_MNIST_DIR);
    return 77; /* ctest SKIP_RETURN_CODE */
  }
  check_split(1, 60000);
  check_split(0, 10000);
  return acc_test_finish("example_fashion_data");
}
