/* Reading IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or not.
 *
 * Independent of libaccelerate: functions return 0 on success and -1 on failure, with the
 * reason in idx_last_error() (thread-local, valid until the next idx_* call on the thread). */
#ifndef FMNIST_IDX_H
#define FMNIST_IDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Where Debian's dataset-fashion-mnist package puts the files. */
#define IDX_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/** Images as float32 in [0,1] (pixel / 255), row-major [count][rows][cols]. */
typedef struct idx_images {
  int32_t count;
  int32_t rows;
  int32_t cols;
  float *pixels; /* count*rows*cols floats. Ownership: free with idx_images_free */
  unsigned char *bytes; /* the raw pixels instead (idx_load_*_u8): 4x less memory */
} idx_images;

/** One split of a data set: images plus one int32 label per image. */
typedef struct idx_dataset {
  idx_images images;
  int32_t *labels; /* images.count labels. Ownership: free with idx_dataset_free */
} idx_dataset;

/**
 * Reads an IDX3 image file (magic 0x00000803, unsigned bytes). Validates the magic number, that
 * the dimensions are positive and that the file holds exactly count*rows*cols pixels.
 * Ownership: *out is the caller's; release with idx_images_free. On failure *out is zeroed.
 */
int idx_load_images(const char *path, idx_images *out);

/**
 * Reads an IDX1 label file (magic 0x00000801, unsigned bytes) into int32 labels.
 * Ownership: *labels is the caller's; free() it. On failure *labels is NULL and *count 0.
 */
/* The same, keeping the raw 0..255 bytes in out->bytes (pixels stays NULL). */
int idx_load_images_u8(const char *path, idx_images *out);
int idx_load_labels(const char *path, int32_t **labels, int32_t *count);

/**
 * Loads Fashion-MNIST's training split (train != 0: train-*-ubyte.gz, 60000 images) or test
 * split (t10k-*-ubyte.gz, 10000 images) from dir (NULL: IDX_FASHION_MNIST_DIR). Checks that
 * image and label counts agree, that images are 28x28, and that labels are in 0..9.
 * A missing file is reported with its path and how to install the package.
 * Ownership: release with idx_dataset_free.
 */
int idx_load_fashion_mnist(const char *dir, int train, idx_dataset *out);

/** Fashion-MNIST's pixel mean and standard deviation over the training split (in [0,1] units). */
#define IDX_FASHION_MNIST_MEAN 0.2860f
#define IDX_FASHION_MNIST_STD 0.3530f

/** In place: pixel = (pixel - mean) / std, like torchvision's Normalize. std must be > 0. */
/* The same with raw bytes (images.bytes). */
int idx_load_fashion_mnist_u8(const char *dir, int train, idx_dataset *out);
void idx_normalize(idx_images *im, float mean, float std);

void idx_images_free(idx_images *im);
void idx_dataset_free(idx_dataset *ds);

/** Why the last idx_* call on this thread failed. Never NULL. */
const char *idx_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
