/* IDX reader: hand-made files (gzip and plain) with exact expected values and error texts. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "acc_test.h"
#include "idx.h"

static char dir[64];

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void put_be32(unsigned char *b, uint32_t v) {
  b[0] = (unsigned char)(v >> 24);
  b[1] = (unsigned char)(v >> 16);
  b[2] = (unsigned char)(v >> 8);
  b[3] = (unsigned char)v;
}

/* Writes an IDX file: magic, dims, then ndata bytes of data. gz: gzip-compressed. */
static void write_idx(const char *name, int gz, uint32_t magic, int ndim, const uint32_t *dims,
                      const unsigned char *data, size_t ndata) {
  unsigned char buf[4096];
  size_t n = 0;
  put_be32(buf, magic);
  n += 4;
  for (int i = 0; i < ndim; i++, n += 4) put_be32(buf + n, dims[i]);
  if (ndata) memcpy(buf + n, data, ndata);
  n += ndata;
  char p[128];
  path_of(p, sizeof p, name);
  if (gz) {
    gzFile f = gzopen(p, "wb");
    CHECK(f && gzwrite(f, buf, (unsigned)n) == (int)n && gzclose(f) == Z_OK, "writing %s", p);
  } else {
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "writing %s", p);
  }
}

static long file_bytes(const char *name, unsigned char *buf, size_t len) {
  char p[128];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "rb");
  if (!f) return -1;
  long n = (long)fread(buf, 1, len, f);
  fclose(f);
  return n;
}

static void write_raw(const char *name, const unsigned char *buf, size_t n) {
  char p[128];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  CHECK(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "writing %s", p);
}

static const uint32_t img_dims[3] = {3, 2, 3};
static const unsigned char img_data[18] = {0, 255, 51, 102, 153, 204, 1, 2, 3, 4, 5, 6,
                                           255, 255, 0, 0, 17, 34};

static void test_good(void) {
  write_idx("img.gz", 1, 0x803, 3, img_dims, img_data, 18);
  write_idx("img.raw", 0, 0x803, 3, img_dims, img_data, 18);
  const char *names[] = {"img.gz", "img.raw"};
  for (int k = 0; k < 2; k++) {
    char p[128];
    path_of(p, sizeof p, names[k]);
    idx_images im;
    CHECK(idx_load_images(p, &im) == 0, "load %s: %s", p, idx_last_error());
    CHECK(im.count == 3 && im.rows == 2 && im.cols == 3, "%s dims %d %d %d", p, im.count, im.rows,
          im.cols);
    for (int i = 0; im.pixels && i < 18; i++)
      CHECK(im.pixels[i] == (float)img_data[i] / 255.0f, "%s pixel %d = %g", p, i,
            im.pixels[i]);
    CHECK(im.pixels && im.pixels[1] == 1.0f && im.pixels[0] == 0.0f && im.pixels[2] == 0.2f,
          "0/255/51 map to 0, 1, 0.2");
    idx_images_free(&im);
    CHECK(im.pixels == NULL && im.count == 0, "free zeroes");
  }
  const uint32_t ldims[1] = {4};
  const unsigned char labels[4] = {9, 0, 3, 7};
  write_idx("lab.gz", 1, 0x801, 1, ldims, labels, 4);
  char p[128];
  path_of(p, sizeof p, "lab.gz");
  int32_t *l = NULL, n = 0;
  CHECK(idx_load_labels(p, &l, &n) == 0, "load labels: %s", idx_last_error());
  CHECK(n == 4 && l && l[0] == 9 && l[1] == 0 && l[2] == 3 && l[3] == 7, "labels 9 0 3 7");
  free(l);
}

static void expect_images_error(const char *name, const char *expected_tail) {
  char p[128], msg[1024];
  path_of(p, sizeof p, name);
  idx_images im;
  im.pixels = (float *)&im; /* must be reset on failure */
  CHECK(idx_load_images(p, &im) == -1, "%s should fail", name);
  CHECK(im.pixels == NULL && im.count == 0, "%s: out zeroed on failure", name);
  snprintf(msg, sizeof msg, "%s%s", p, expected_tail);
  CHECK(strcmp(idx_last_error(), msg) == 0, "%s:\n  got      \"%s\"\n  expected \"%s\"", name,
        idx_last_error(), msg);
}

static void test_errors(void) {
  /* Label magic in an image file. */
  write_idx("badmagic.gz", 1, 0x801, 3, img_dims, img_data, 18);
  expect_images_error("badmagic.gz", " is not an IDX file of 3-dimensional unsigned bytes: magic "
                                     "number is 0x00000801, expected 0x00000803");
  /* 3 images of 2x3 announced, 10 pixel bytes present. */
  write_idx("short.raw", 0, 0x803, 3, img_dims, img_data, 10);
  expect_images_error("short.raw", " is truncated: expected 18 bytes of pixel data, got 10 (1 "
                                   "complete images of 3)");
  /* Header cut in the middle. */
  write_idx("hdr.raw", 0, 0x803, 1, img_dims, NULL, 0);
  expect_images_error("hdr.raw", " is truncated: expected 16 bytes of header, got 8");
  /* A zero dimension. */
  const uint32_t zero_dims[3] = {3, 0, 3};
  write_idx("zero.gz", 1, 0x803, 3, zero_dims, img_data, 18);
  expect_images_error("zero.gz", ": dimension 1 is 0, expected 1..65536");
  /* More data than announced. */
  write_idx("long.gz", 1, 0x803, 3, img_dims, img_data, 18);
  {
    const uint32_t d[3] = {2, 2, 3};
    write_idx("long.gz", 1, 0x803, 3, d, img_data, 18);
  }
  expect_images_error("long.gz", " has extra bytes after the data announced by its header");

  /* A gzip stream cut in half: truncated. The CRC trailer damaged: corrupt. */
  unsigned char big[16 + 3 * 28 * 28];
  for (size_t i = 0; i < sizeof big - 16; i++) big[i] = (unsigned char)(i * 7919u >> 3);
  const uint32_t bdims[3] = {3, 28, 28};
  write_idx("big.gz", 1, 0x803, 3, bdims, big, 3 * 28 * 28);
  unsigned char gz[8192];
  long n = file_bytes("big.gz", gz, sizeof gz);
  CHECK(n > 40, "big.gz written (%ld bytes)", n);
  write_raw("cut.gz", gz, (size_t)n / 2);
  char p[128];
  idx_images im;
  path_of(p, sizeof p, "cut.gz");
  CHECK(idx_load_images(p, &im) == -1, "cut gzip fails");
  CHECK(strstr(idx_last_error(), " is truncated: expected 2352 bytes of pixel data, got ") != NULL,
        "cut gzip message: %s", idx_last_error());
  gz[n - 8] ^= 0xff; /* CRC32 of the trailer */
  write_raw("crc.gz", gz, (size_t)n);
  path_of(p, sizeof p, "crc.gz");
  CHECK(idx_load_images(p, &im) == -1, "bad CRC fails");
  CHECK(strncmp(idx_last_error(), p, strlen(p)) == 0 &&
            strstr(idx_last_error(), " is corrupt: incorrect data check") != NULL,
        "bad CRC message: %s", idx_last_error());

  /* Missing file: exact text with the package hint. */
  path_of(p, sizeof p, "missing.gz");
  char expected[512];
  snprintf(expected, sizeof expected,
           "cannot open %s: No such file or directory. Install the data set with `apt-get "
           "install dataset-fashion-mnist`, or pass --data DIR to read the files from another "
           "directory",
           p);
  CHECK(idx_load_images(p, &im) == -1, "missing fails");
  CHECK(strcmp(idx_last_error(), expected) == 0, "missing:\n  got      \"%s\"\n  expected \"%s\"",
        idx_last_error(), expected);
  /* The same file listed by dpkg as a file of the installed package (DPKG_ADMINDIR, as dpkg
   * reads it): plain `apt-get install` would do nothing, so the advice says --reinstall. */
  char admin[1200], list[1300];
  snprintf(admin, sizeof admin, "%s/dpkg", dir);
  snprintf(list, sizeof list, "%s/info", admin);
  mkdir(admin, 0755);
  mkdir(list, 0755);
  snprintf(list, sizeof list, "%s/info/dataset-fashion-mnist.list", admin);
  FILE *lf = fopen(list, "w");
  CHECK(lf != NULL, "cannot write %s", list);
  if (lf) {
    fprintf(lf, "/.\n%s\n", p);
    fclose(lf);
  }
  setenv("DPKG_ADMINDIR", admin, 1);
  CHECK(idx_load_images(p, &im) == -1, "missing fails");
  CHECK(strstr(idx_last_error(), "Install the data set with `apt-get install --reinstall dataset-fashion-mnist` (the "
                "package is installed but this file of it is gone), or pass --data DIR") != NULL,
        "no --reinstall advice for a file of an installed package: %s", idx_last_error());
  unsetenv("DPKG_ADMINDIR");
  unlink(list);
  snprintf(list, sizeof list, "%s/info", admin);
  rmdir(list);
  rmdir(admin);
  int32_t *l = (int32_t *)&im, cnt = 5;
  CHECK(idx_load_labels(p, &l, &cnt) == -1 && l == NULL && cnt == 0, "missing labels");
  CHECK(strcmp(idx_last_error(), expected) == 0, "missing labels text: %s", idx_last_error());
  /* Images where labels are expected. */
  path_of(p, sizeof p, "img.gz");
  CHECK(idx_load_labels(p, &l, &cnt) == -1, "images as labels fails");
  CHECK(strstr(idx_last_error(), "magic number is 0x00000803, expected 0x00000801"),
        "labels magic: %s", idx_last_error());
}

/* idx_load_fashion_mnist on a fake directory: file names, count match, 28x28, label range. */
static void test_fashion_dir(void) {
  static unsigned char px[2 * 28 * 28];
  const uint32_t d2[3] = {2, 28, 28}, l3[1] = {3}, l2[1] = {2};
  const unsigned char lab_ok[3] = {1, 2, 3}, lab_bad[2] = {4, 12};
  idx_dataset ds;
  char expected[512];

  snprintf(expected, sizeof expected, "cannot open %s/t10k-images-idx3-ubyte.gz: No such file", dir);
  CHECK(idx_load_fashion_mnist(dir, 0, &ds) == -1 &&
            strncmp(idx_last_error(), expected, strlen(expected)) == 0 &&
            strstr(idx_last_error(), "apt-get install dataset-fashion-mnist"),
        "missing split: %s", idx_last_error());

  write_idx("train-images-idx3-ubyte.gz", 1, 0x803, 3, d2, px, sizeof px);
  write_idx("train-labels-idx1-ubyte.gz", 1, 0x801, 1, l3, lab_ok, 3);
  snprintf(expected, sizeof expected,
           "%s/train-labels-idx1-ubyte.gz has 3 labels but %s/train-images-idx3-ubyte.gz has 2 "
           "images: the two files must match",
           dir, dir);
  CHECK(idx_load_fashion_mnist(dir, 1, &ds) == -1, "count mismatch fails");
  CHECK(strcmp(idx_last_error(), expected) == 0, "mismatch: %s", idx_last_error());
  CHECK(ds.images.pixels == NULL && ds.labels == NULL, "freed on failure");

  write_idx("train-labels-idx1-ubyte.gz", 1, 0x801, 1, l2, lab_bad, 2);
  snprintf(expected, sizeof expected,
           "%s/train-labels-idx1-ubyte.gz: label 12 of image 1 is out of range 0..9", dir);
  CHECK(idx_load_fashion_mnist(dir, 1, &ds) == -1 && strcmp(idx_last_error(), expected) == 0,
        "label range: %s", idx_last_error());

  write_idx("train-labels-idx1-ubyte.gz", 1, 0x801, 1, l2, lab_ok, 2);
  CHECK(idx_load_fashion_mnist(dir, 1, &ds) == 0, "fake train split loads: %s", idx_last_error());
  CHECK(ds.images.count == 2 && ds.labels && ds.labels[0] == 1 && ds.labels[1] == 2,
        "fake train split contents");
  idx_dataset_free(&ds);

  const uint32_t small[3] = {2, 2, 3};
  write_idx("train-images-idx3-ubyte.gz", 1, 0x803, 3, small, img_data, 12);
  snprintf(expected, sizeof expected,
           "%s/train-images-idx3-ubyte.gz: images are 2x3, expected 28x28 for Fashion-MNIST", dir);
  CHECK(idx_load_fashion_mnist(dir, 1, &ds) == -1 && strcmp(idx_last_error(), expected) == 0,
        "28x28: %s", idx_last_error());
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/acc_idx_test_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_good();
  test_errors();
  test_fashion_dir();
  const char *files[] = {"img.gz", "img.raw", "lab.gz", "badmagic.gz", "short.raw", "hdr.raw",
                         "zero.gz", "long.gz", "big.gz", "cut.gz", "crc.gz",
                         "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char p[128];
    path_of(p, sizeof p, files[i]);
    unlink(p);
  }
  CHECK(rmdir(dir) == 0, "temporary directory %s left files behind", dir);
  return acc_test_finish("example_idx");
}
