/* Fashion-MNIST training with NO libaccelerate: the reference for the library-overhead benchmark.
 *
 * One process, MLP 784-256-10, SGD with momentum 0.9 and lr 0.1 (PyTorch's update rule),
 * batch 64, reshuffled every epoch, last partial batch kept. Prints the training throughput
 * (samples/s over the training loop only: data loading and evaluation are excluded), the test
 * accuracy over the 10,000 test images, and the peak RSS.
 *
 *   train_baseline [--epochs N] [--data DIR] [--batch B] [--lr X] [--momentum X] [--hidden H]
 *                  [--layers L] [--seed S] [--quiet]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "idx.h"
#include "mlp.h"

typedef struct options {
  int epochs, batch, hidden, layers, quiet, normalize;
  double lr, momentum;
  uint64_t seed;
  const char *data;
} options;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void shuffle(int32_t *perm, int32_t n, uint64_t *rng) {
  for (int32_t i = n - 1; i > 0; i--) {
    int32_t j = (int32_t)(rng_next(rng) % (uint64_t)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){1, 64, 256, 1, 0, 0, 0.1, 0.9, 42, NULL};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quiet")) {
      o->quiet = 1;
      continue;
    }
    if (!strcmp(a, "--normalize")) {
      o->normalize = 1;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: %s [--epochs N] [--data DIR] [--batch B] [--lr X] [--momentum X] "
             "[--hidden H] [--layers L] [--seed S] [--quiet]\n",
             argv[0]);
      exit(0);
    }
    if (!v) {
      fprintf(stderr, "train_baseline: %s needs a value (see --help)\n", a);
      return -1;
    }
    char *end = NULL;
    if (!strcmp(a, "--epochs")) o->epochs = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--batch")) o->batch = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--hidden")) o->hidden = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--layers")) o->layers = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, &end, 10);
    else if (!strcmp(a, "--lr")) o->lr = strtod(v, &end);
    else if (!strcmp(a, "--momentum")) o->momentum = strtod(v, &end);
    else if (!strcmp(a, "--data")) end = (char *)v + strlen(v);
    else {
      fprintf(stderr, "train_baseline: unknown option %s (see --help)\n", a);
      return -1;
    }
    if (end == v || *end != '\0') {
      fprintf(stderr, "train_baseline: bad value for %s: \"%s\"\n", a, v);
      return -1;
    }
    if (!strcmp(a, "--data")) o->data = v;
    i++;
  }
  if (o->epochs < 1 || o->batch < 1 || o->hidden < 1 || o->layers < 0 || o->lr <= 0) {
    fprintf(stderr, "train_baseline: --epochs, --batch, --hidden must be >= 1, --layers >= 0, "
                    "--lr > 0\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse_args(argc, argv, &o)) return 2;
  idx_dataset train, test;
  if (idx_load_fashion_mnist(o.data, 1, &train)) {
    fprintf(stderr, "train_baseline: %s\n", idx_last_error());
    return 1;
  }
  if (idx_load_fashion_mnist(o.data, 0, &test)) {
    fprintf(stderr, "train_baseline: %s\n", idx_last_error());
    idx_dataset_free(&train);
    return 1;
  }
  if (o.normalize) {
    idx_normalize(&train.images, IDX_FASHION_MNIST_MEAN, IDX_FASHION_MNIST_STD);
    idx_normalize(&test.images, IDX_FASHION_MNIST_MEAN, IDX_FASHION_MNIST_STD);
  }
  const int D = train.images.rows * train.images.cols, N = train.images.count;
  const int eval_batch = 1000;
  mlp_config cfg = {D, o.hidden, o.layers, 10, o.batch > eval_batch ? o.batch : eval_batch};
  mlp *m = NULL;
  if (mlp_create(&m, &cfg)) {
    fprintf(stderr, "train_baseline: %s\n", mlp_last_error());
    return 1;
  }
  mlp_init(m, o.seed);
  size_t P = mlp_num_params(m);
  float *params = mlp_params(m), *grads = mlp_grads(m);
  float *momentum_buf = calloc(P, sizeof *momentum_buf);
  float *xb = malloc((size_t)o.batch * D * sizeof *xb);
  int32_t *yb = malloc((size_t)o.batch * sizeof *yb), *perm = malloc((size_t)N * sizeof *perm);
  if (!momentum_buf || !xb || !yb || !perm) {
    fprintf(stderr, "train_baseline: out of memory\n");
    return 1;
  }
  for (int32_t i = 0; i < N; i++) perm[i] = i;
  printf("train_baseline: MLP %d-%dx%d-10 (%zu parameters), SGD lr %g momentum %g, batch %d, "
         "%d epoch(s), %d training images\n",
         D, o.hidden, o.layers, P, o.lr, o.momentum, o.batch, o.epochs, N);

  uint64_t rng = o.seed ^ 0x5eedull;
  const float lr = (float)o.lr, mu = (float)o.momentum;
  const int steps = (N + o.batch - 1) / o.batch;
  double train_s = 0.0;
  long long samples = 0;
  int first_step = 1;
  for (int epoch = 0; epoch < o.epochs; epoch++) {
    double t0 = now_s(), loss_sum = 0.0;
    shuffle(perm, N, &rng);
    for (int s = 0; s < steps; s++) {
      int b0 = s * o.batch, B = N - b0 < o.batch ? N - b0 : o.batch;
      for (int i = 0; i < B; i++) {
        memcpy(xb + (size_t)i * D, train.images.pixels + (size_t)perm[b0 + i] * D,
               (size_t)D * sizeof *xb);
        yb[i] = train.labels[perm[b0 + i]];
      }
      float loss;
      mlp_zero_grad(m);
      if (mlp_forward(m, xb, B) || mlp_loss(m, yb, B, &loss) || mlp_backward(m, xb, yb, B, 1.0f)) {
        fprintf(stderr, "train_baseline: %s\n", mlp_last_error());
        return 1;
      }
      loss_sum += loss;
      /* torch.optim.SGD: buf = g on the first step, then buf = mu*buf + g; p -= lr*buf. */
      if (first_step) {
        memcpy(momentum_buf, grads, P * sizeof *grads);
        first_step = 0;
      } else {
        for (size_t k = 0; k < P; k++) momentum_buf[k] = mu * momentum_buf[k] + grads[k];
      }
      for (size_t k = 0; k < P; k++) params[k] -= lr * momentum_buf[k];
      samples += B;
    }
    train_s += now_s() - t0;
    if (!o.quiet) printf("epoch %d/%d: %d steps in %.1f s\n", epoch + 1, o.epochs, steps, now_s() - t0);
    printf("epoch %d: mean training loss %.4f\n", epoch + 1, loss_sum / steps);
  }

  int correct = 0;
  const int T = test.images.count;
  for (int b0 = 0; b0 < T; b0 += eval_batch) {
    int B = T - b0 < eval_batch ? T - b0 : eval_batch;
    if (mlp_forward(m, test.images.pixels + (size_t)b0 * D, B)) {
      fprintf(stderr, "train_baseline: %s\n", mlp_last_error());
      return 1;
    }
    correct += mlp_count_correct(m, test.labels + b0, B);
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("train samples/s: %.0f (%lld samples in %.3f s)\n", (double)samples / train_s, samples,
         train_s);
  printf("test accuracy: %.4f (%d/%d)\n", (double)correct / T, correct, T);
  printf("peak RSS: %.1f MiB\n", (double)ru.ru_maxrss / 1024.0);
  free(momentum_buf);
  free(xb);
  free(yb);
  free(perm);
  mlp_destroy(m);
  idx_dataset_free(&train);
  idx_dataset_free(&test);
  return 0;
}
