/* Fashion-MNIST classifier trained with accelerate-c: the README's main job.
 *
 * An ordinary training loop (MLP, SGD or AdamW, cross-entropy) plus the acc_accelerator calls
 * that make it run unchanged on 1 or N processes:
 *   accelerate launch --num_processes 2 build/examples/fashion_mnist [--epochs 5] [...]
 * Every process reads the data set, trains on its shard, and gradients are averaged across
 * processes; the test accuracy is computed over exactly the 10,000 test images with
 * gather_for_metrics. --help lists the options. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <accelerate.h>

#include "idx.h"
#include "mlp.h"
#ifdef FMNIST_HAVE_CUDA
#include "mlp_cuda.h"
#endif

#define MEAN 0.2860f /* Fashion-MNIST training-set pixel mean and std (on [0,1] pixels) */
#define STD 0.3530f

typedef struct options {
  int epochs, batch, hidden, layers, grad_accum, prefetch, quiet, overlap, bucket_kb;
  long max_steps;
  double lr, momentum, weight_decay, clip;
  const char *optimizer, *data, *mixed_precision;
  const char *device;     /* cpu (default), auto (a GPU when there is one), cuda */
  uint64_t seed;
  long save_every;        /* checkpoint every N optimizer steps (0: never) */
  int resume;             /* load the latest checkpoint of output_dir first */
  const char *output_dir; /* project directory: checkpoints/checkpoint_<i> */
  const char *log_with;    /* trackers: tensorboard,jsonl,csv (NULL: none) */
  const char *logging_dir; /* where runs go (default: runs) */
  const char *run_name;    /* the run's directory under logging_dir (default: fashion_mnist-<time>) */
  long log_every;          /* log the scalars every N optimizer steps */
  int private_grads;       /* on the CPU: gradients in the model's own memory, not shared */
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: fashion_mnist [options]\n"
          "  --epochs N            training epochs (1)\n"
          "  --batch N             batch size per process (64)\n"
          "  --lr X                learning rate (0.01)\n"
          "  --momentum X          SGD momentum (0.9)\n"
          "  --weight-decay X      weight decay (0; AdamW: 0.01)\n"
          "  --optimizer sgd|adamw (sgd)\n"
          "  --mixed-precision no|fp16|bf16   (default: what accelerate launch set)\n"
          "  --device cpu|auto|cuda  where to train: the CPU (default), a GPU when there is\n"
          "                        one, or a GPU or fail; on a GPU the parameters, gradients\n"
          "                        and batches live in device memory (fp32 only)\n"
          "  --grad-accum K        gradient accumulation steps (1)\n"
          "  --clip X              clip the gradient norm to X (off)\n"
          "  --hidden N            hidden width (256)\n"
          "  --layers N            hidden layers (1)\n"
          "  --seed N              initialization and shuffling seed (42)\n"
          "  --data DIR            data directory (" IDX_FASHION_MNIST_DIR ")\n"
          "  --prefetch N          batches prepared ahead by a loader thread (0: none; default 2\n"
          "                        when a spare core exists for the thread, else 0)\n"
          "  --overlap             reduce gradient buckets during the backward pass\n"
          "  --bucket-kb N         gradient bucket size in KiB (25 MB)\n"
          "  --private-grads       on the CPU, keep the gradients in the model's own memory\n"
          "                        (default: memory the processes share, reduced in place)\n"
          "  --max-steps N         stop after N optimizer steps (for quick runs)\n"
          "  --output-dir DIR      where checkpoints go: DIR/checkpoints/checkpoint_<i> (3 kept)\n"
          "  --save-every N        save the whole training state every N optimizer steps\n"
          "  --resume              continue from the latest checkpoint in --output-dir (none yet: start afresh)\n"
          "  --log-with LIST       trackers, comma-separated: tensorboard, jsonl, csv, all (none)\n"
          "  --logging-dir DIR     where runs are written (runs)\n"
          "  --run-name NAME       the run's directory under --logging-dir (fashion_mnist-<time>)\n"
          "  --log-every N         log loss, accuracy, lr and throughput every N steps (50)\n"
          "  --quiet               no progress bar\n");
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){1, 64, 256, 1, 1, -1, 0, 0, 0, -1, 0.01, 0.9, -1.0, 0.0, "sgd", NULL, NULL,
                 "cpu", 42, 0, 0, NULL, NULL, "runs", NULL, 50, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (ARG("--epochs")) o->epochs = atoi(v);
    else if (ARG("--batch")) o->batch = atoi(v);
    else if (ARG("--lr")) o->lr = atof(v);
    else if (ARG("--momentum")) o->momentum = atof(v);
    else if (ARG("--weight-decay")) o->weight_decay = atof(v);
    else if (ARG("--optimizer")) o->optimizer = v;
    else if (ARG("--mixed-precision")) o->mixed_precision = v;
    else if (ARG("--device")) o->device = v;
    else if (ARG("--grad-accum")) o->grad_accum = atoi(v);
    else if (ARG("--clip")) o->clip = atof(v);
    else if (ARG("--hidden")) o->hidden = atoi(v);
    else if (ARG("--layers")) o->layers = atoi(v);
    else if (ARG("--seed")) o->seed = strtoull(v, NULL, 10);
    else if (ARG("--data")) o->data = v;
    else if (ARG("--prefetch")) o->prefetch = atoi(v);
    else if (ARG("--max-steps")) o->max_steps = atol(v);
    else if (ARG("--bucket-kb")) o->bucket_kb = atoi(v);
    else if (ARG("--save-every")) o->save_every = atol(v);
    else if (ARG("--output-dir")) o->output_dir = v;
    else if (ARG("--log-with")) o->log_with = v;
    else if (ARG("--logging-dir")) o->logging_dir = v;
    else if (ARG("--run-name")) o->run_name = v;
    else if (ARG("--log-every")) o->log_every = atol(v);
    else if (strcmp(a, "--resume") == 0) o->resume = 1;
    else if (strcmp(a, "--overlap") == 0) o->overlap = 1;
    else if (strcmp(a, "--private-grads") == 0) o->private_grads = 1;
    else if (strcmp(a, "--quiet") == 0) o->quiet = 1;
    else {
      fprintf(stderr, "fashion_mnist: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return -1;
    }
#undef ARG
  }
  if (o->epochs < 1 || o->batch < 1 || o->hidden < 1 || o->layers < 0 || o->grad_accum < 1 || !(o->lr > 0) ||
      (strcmp(o->optimizer, "sgd") != 0 && strcmp(o->optimizer, "adamw") != 0) || o->save_every < 0 || o->log_every < 1 ||
      (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "auto") != 0 &&
       strcmp(o->device, "cuda") != 0) ||
      ((o->save_every > 0 || o->resume) && !o->output_dir)) {
    fprintf(stderr, "fashion_mnist: invalid option value (see --help)\n");
    return -1;
  }
  return 0;
}

/* ---- the data set: raw bytes in memory, normalized floats per batch -------------------------- */

static float byte_to_input[256];

static int fetch(int64_t i, void *const *fields, void *payload) {
  const idx_dataset *d = payload;
  const unsigned char *px = d->images.bytes + (size_t)i * 784;
  float *x = fields[0];
  for (int k = 0; k < 784; k++) x[k] = byte_to_input[px[k]];
  *(int32_t *)fields[1] = d->labels[i];
  return 0;
}

/* The training loop's own counters, saved with the checkpoint (register_for_checkpointing). */
typedef struct run_counters {
  int64_t steps, reserved;
} run_counters;

static acc_result counters_save(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(run_counters);
  if (buf && cap >= sizeof(run_counters)) memcpy(buf, obj, sizeof(run_counters));
  return ACC_OK;
}

static acc_result counters_load(void *obj, const void *data, size_t len) {
  if (len != sizeof(run_counters)) return ACC_ERR_FORMAT;
  memcpy(obj, data, sizeof(run_counters));
  return ACC_OK;
}

#define TRY(call)                                                                   \
  do {                                                                              \
    if ((call) != ACC_OK) {                                                         \
      fprintf(stderr, "fashion_mnist: %s failed: %s\n", #call, acc_last_error());   \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of the whole process (every thread: the loader's and the reducer's too). */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --overlap: tell the accelerator as each layer's gradients become final. */
static void grad_ready(int first, int count, void *payload) {
  for (int t = first; t < first + count; t++)
    if (acc_accelerator_grad_ready(payload, (size_t)t) != ACC_OK)
      fprintf(stderr, "fashion_mnist: grad_ready: %s\n", acc_last_error());
}

/* Rounds a batch to the autocast dtype in place (what a half-precision input would hold),
 * through a scratch buffer allocated once. */
static int round_to(float *x, size_t n, acc_dtype dt, uint16_t *scratch) {
  if (dt == ACC_F16)
    return acc_f32_to_f16(scratch, x, n) != ACC_OK || acc_f16_to_f32(x, scratch, n) != ACC_OK;
  if (dt == ACC_BF16)
    return acc_f32_to_bf16(scratch, x, n) != ACC_OK || acc_bf16_to_f32(x, scratch, n) != ACC_OK;
  return 0;
}

/* One training micro-step of the CPU kernels (forward, loss, backward; the hits when logging),
 * run by acc_accelerator_host_kernel: a plain call on the CPU, the fake twin of a kernel launch
 * on the tests' fake device, whose memory host code reaches only there. */
typedef struct cpu_step {
  mlp *net;
  const float *x;
  const int32_t *y;
  int bs;
  float scale;
  int count;
  float loss;
  int64_t correct;
  int failed;
} cpu_step;

static void train_kernel(void *arg) {
  cpu_step *k = arg;
  k->failed = mlp_forward(k->net, k->x, k->bs) || mlp_loss(k->net, k->y, k->bs, &k->loss) ||
              mlp_backward(k->net, k->x, k->y, k->bs, k->scale);
  if (!k->failed && k->count) k->correct = mlp_count_correct(k->net, k->y, k->bs);
}

/* One evaluation batch: which predictions hit. */
typedef struct eval_step {
  mlp *net;
  const float *x;
  const int32_t *y;
  int bs;
  uint8_t *hit;
  int failed;
} eval_step;

static void eval_kernel(void *arg) {
  eval_step *k = arg;
  int32_t pred[256];
  if ((k->failed = mlp_forward(k->net, k->x, k->bs) != 0)) return;
  mlp_predict(k->net, k->bs, pred);
  for (int i = 0; i < k->bs; i++) k->hit[i] = pred[i] == k->y[i];
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o)) return 2;
  for (int v = 0; v < 256; v++) byte_to_input[v] = ((float)v / 255.0f - MEAN) / STD;

  /* 1. The accelerator: reads what `accelerate launch` put in the environment. */
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.gradient_accumulation_steps = o.grad_accum;
  ao.overlap_grad_sync = o.overlap;
  ao.bucket_cap_bytes = (size_t)o.bucket_kb * 1024;
  if (o.mixed_precision) {
    acc_mixed_precision mp;
    TRY(acc_mixed_precision_parse(o.mixed_precision, &mp));
    ao.mixed_precision = (int)mp;
  }
  /* A GPU program opts in: its kernels decide where it computes (the CPU stays the default). */
  if (strcmp(o.device, "auto") == 0) ao.device = ACC_DEVICE_AUTO;
  else if (strcmp(o.device, "cuda") == 0) ao.device = ACC_DEVICE_CUDA;
  acc_accelerator *acc;
  TRY(acc_accelerator_create(&acc, &ao));
  /* On a device: parameters, gradients and batches in device memory. On CUDA our kernels and
   * cuBLAS run on the accelerator's stream; on the fake device of the tests (memory host code
   * cannot touch, like a GPU's) the CPU kernels run inside acc_accelerator_host_kernel, the fake
   * twin of a kernel launch. */
  const acc_device_type dev = acc_accelerator_device_type(acc);
  const int on_dev = dev != ACC_DEVICE_CPU;
#ifndef FMNIST_HAVE_CUDA
  if (dev == ACC_DEVICE_CUDA) {
    fprintf(stderr, "fashion_mnist: this build has no CUDA kernels (built without CUDA); use "
                    "--device cpu\n");
    return 1;
  }
#endif
  acc_state *st = acc_accelerator_state(acc);
  const int rank = acc_state_process_index(st), nprocs = acc_state_num_processes(st);
  const int show = acc_state_is_local_main_process(st) && !o.quiet;

  /* 2. Data: every process reads the files (raw bytes: 47 MB for the training set). */
  idx_dataset train, test;
  if (idx_load_fashion_mnist_u8(o.data, 1, &train) || idx_load_fashion_mnist_u8(o.data, 0, &test)) {
    fprintf(stderr, "fashion_mnist (process %d): %s\n", rank, idx_last_error());
    return 1;
  }
  acc_field_desc fields[2] = {{ACC_F32, 784}, {ACC_I32, 1}};
  acc_dataset *train_ds, *test_ds;
  TRY(acc_dataset_create_map(&train_ds, train.images.count, fields, 2, fetch, &train));
  TRY(acc_dataset_create_map(&test_ds, test.images.count, fields, 2, fetch, &test));
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = o.batch;
  lo.shuffle = 1;
  lo.seed = o.seed;
  /* A loader thread pays off only when it has a core of its own (measured: docs/PERFORMANCE.md). */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  lo.prefetch = o.prefetch >= 0 ? o.prefetch : (acc_state_local_num_processes(st) < cores ? 2 : 0);
  acc_dataloader *train_dl, *test_dl;
  TRY(acc_accelerator_prepare_dataloader(acc, train_ds, &lo, &train_dl));
  lo.shuffle = 0;
  lo.batch_size = 256;
  TRY(acc_accelerator_prepare_dataloader(acc, test_ds, &lo, &test_dl));

  /* 3. Model and optimizer: registered with the library, then prepared. */
  mlp_config mc = {784, o.hidden, o.layers, 10, o.batch > 256 ? o.batch : 256};
  mlp *net;
  if (mlp_create(&net, &mc)) {
    fprintf(stderr, "fashion_mnist: %s\n", mlp_last_error());
    return 1;
  }
  mlp_init(net, o.seed + (uint64_t)rank); /* deliberately different: prepare makes it process 0's */
  float *params = mlp_params(net), *grads = mlp_grads(net);
  if (on_dev) { /* device copies of the initial parameters, zero gradients */
    size_t nbytes = mlp_num_params(net) * sizeof(float);
    TRY(acc_accelerator_alloc(acc, nbytes, (void **)&params));
    TRY(acc_accelerator_alloc(acc, nbytes, (void **)&grads));
    TRY(acc_accelerator_memcpy(acc, params, mlp_params(net), nbytes, ACC_COPY_HOST_TO_DEVICE));
    if (dev != ACC_DEVICE_CUDA && mlp_use_buffers(net, params, grads)) return 1;
  } else if (!o.private_grads) {
    /* gradients in memory the processes of this machine share: the all-reduce after backward
     * then reads the others' gradients where they lie (acc_accelerator_alloc_shared) */
    TRY(acc_accelerator_alloc_shared(acc, mlp_num_params(net) * sizeof(float), (void **)&grads));
    if (mlp_use_buffers(net, params, grads)) return 1;
  }
#ifdef FMNIST_HAVE_CUDA
  mlp_cuda *gnet = NULL;
  uint8_t *d_hits = NULL;
  if (dev == ACC_DEVICE_CUDA) {
    if (mlp_cuda_create(&gnet, net, params, grads, acc_accelerator_stream(acc))) {
      fprintf(stderr, "fashion_mnist: %s\n", mlp_cuda_last_error());
      return 1;
    }
    TRY(acc_accelerator_alloc(acc, 256, (void **)&d_hits));
  }
#endif
  acc_model *model;
  TRY(acc_model_create(&model));
  for (int t = 0; t < mlp_num_tensors(net); t++) {
    const mlp_tensor *mt = mlp_tensor_at(net, t);
    TRY(acc_model_add_parameter(model, mt->name, params + mt->offset, grads + mt->offset, mt->ndim,
                                mt->shape));
  }
  TRY(acc_accelerator_prepare_model(acc, model));
  acc_optimizer *opt;
  if (strcmp(o.optimizer, "adamw") == 0) {
    acc_adamw_options a = ACC_ADAMW_OPTIONS_INIT;
    a.lr = o.lr;
    if (o.weight_decay >= 0) a.weight_decay = o.weight_decay;
    TRY(acc_optimizer_create_adamw(&opt, model, &a));
  } else {
    acc_sgd_options s = ACC_SGD_OPTIONS_INIT;
    s.lr = o.lr;
    s.momentum = o.momentum;
    if (o.weight_decay >= 0) s.weight_decay = o.weight_decay;
    TRY(acc_optimizer_create_sgd(&opt, model, &s));
  }
  TRY(acc_accelerator_prepare_optimizer(acc, opt));
  if (o.overlap) mlp_set_grad_hook(net, grad_ready, acc);

  /* Checkpoints: the whole training state (model, optimizer, loader position, RNG, and the
   * loop's own counters, registered below) under <output-dir>/checkpoints/checkpoint_<i>. */
  run_counters counters = {0, 0};
  TRY(acc_accelerator_register_for_checkpointing(acc, &counters, counters_save, counters_load));
  if (o.output_dir) {
    acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
    po.project_dir = o.output_dir;
    po.automatic_checkpoint_naming = 1;
    po.total_limit = 3;
    TRY(acc_accelerator_set_project_config(acc, &po));
  }
  if (o.resume) {
    /* No checkpoint yet (a first attempt under --max_restarts, killed before its first save, or
     * a first run with --resume always on): start from the beginning and say so. */
    char *from = NULL;
    const acc_result lr = acc_accelerator_load_state(acc, NULL, &from);
    if (lr == ACC_ERR_NOT_FOUND) {
      acc_print(st, "--resume: no checkpoint in %s/checkpoints yet; starting from the beginning\n", o.output_dir);
    } else {
      if (lr != ACC_OK) {
        fprintf(stderr, "fashion_mnist: acc_accelerator_load_state(acc, NULL, &from) failed: %s\n", acc_last_error());
        return 1;
      }
      acc_print(st, "resumed from %s (step %lld, epoch %lld)\n", from, (long long)counters.steps,
                (long long)acc_dataloader_epoch(train_dl) + 1);
    }
    acc_free(from);
  }
  const acc_dtype compute = acc_accelerator_autocast_dtype(acc);
  if (on_dev && compute != ACC_F32) {
    fprintf(stderr, "fashion_mnist: --device %s trains in fp32 only (mixed precision %s is not "
                    "supported by the example's device kernels); use --mixed-precision no\n",
            o.device, acc_mixed_precision_name(acc_accelerator_mixed_precision(acc)));
    return 1;
  }

  acc_print(st, "%s", acc_state_describe(st));
  if (on_dev)
    acc_print(st, "device: %s (parameters, gradients and batches in device memory)\n",
              acc_accelerator_device_name(acc));
  acc_print(st, "training %d epoch(s): %d processes x batch %d (x%d accumulation), %s lr %g, %s\n", o.epochs,
            nprocs, o.batch, o.grad_accum, o.optimizer, o.lr, acc_mixed_precision_name(acc_accelerator_mixed_precision(acc)));

  /* Trackers (main process only; elsewhere they do nothing): the run's hyperparameters, then
   * loss / accuracy / lr / throughput every --log-every steps. */
  acc_project_options lpo = ACC_PROJECT_OPTIONS_INIT;
  lpo.logging_dir = o.logging_dir;
  acc_project_config *log_project;
  TRY(acc_project_config_create(&log_project, &lpo));
  acc_trackers *trackers;
  TRY(acc_trackers_create(&trackers, st, o.log_with, log_project));
  char run_name[96];
  if (o.run_name) snprintf(run_name, sizeof run_name, "%s", o.run_name);
  else {
    /* every process must agree on the name: process 0's clock */
    int64_t t = (int64_t)time(NULL);
    TRY(acc_broadcast(st, &t, 1, ACC_I64, 0));
    struct tm tm;
    time_t tt = (time_t)t;
    gmtime_r(&tt, &tm);
    strftime(run_name, sizeof run_name, "fashion_mnist-%Y%m%d-%H%M%S", &tm);
  }
  acc_kv hparams[] = {ACC_KV_INT("epochs", o.epochs), ACC_KV_INT("batch_size", o.batch),
                      ACC_KV_INT("num_processes", nprocs), ACC_KV_NUM("lr", o.lr),
                      ACC_KV_STR("optimizer", o.optimizer), ACC_KV_NUM("momentum", o.momentum),
                      ACC_KV_INT("hidden", o.hidden), ACC_KV_INT("layers", o.layers),
                      ACC_KV_INT("gradient_accumulation_steps", o.grad_accum), ACC_KV_INT("seed", (int64_t)o.seed),
                      ACC_KV_STR("mixed_precision", acc_mixed_precision_name(acc_accelerator_mixed_precision(acc)))};
  TRY(acc_init_trackers(trackers, run_name, hparams, sizeof hparams / sizeof *hparams));

  /* 4. The training loop. */
  uint16_t *scratch = compute != ACC_F32 ? malloc((size_t)o.batch * 784 * sizeof *scratch) : NULL;
  if (compute != ACC_F32 && !scratch) {
    fprintf(stderr, "fashion_mnist: out of memory\n");
    return 1;
  }
  double train_time = 0, train_cpu = 0;
  int64_t samples = 0, steps = counters.steps;
  int stop = o.max_steps > 0 && steps >= o.max_steps;
  double win_loss = 0, win_t0 = now_s();
  int64_t win_batches = 0, win_correct = 0, win_samples = 0;
  for (int epoch = (int)acc_dataloader_epoch(train_dl); epoch < o.epochs && !stop; epoch++) {
    acc_progress *bar = NULL;
    char label[32];
    snprintf(label, sizeof label, "epoch %d/%d", epoch + 1, o.epochs);
    if (show) TRY(acc_progress_create(&bar, st, label, (uint64_t)acc_dataloader_len(train_dl), NULL));
    double t0 = now_s(), c0 = cpu_s(), loss_sum = 0;
    int64_t nb = 0, first_index = -1; /* the first batch of this epoch run here: > 0 after a resume */
    const int64_t first_step = steps + 1;
    const acc_batch *b;
    for (;;) {
      TRY(acc_accelerator_next_batch(acc, train_dl, &b));
      if (!b) break;
      if (stop) break; /* the loader may be left mid-epoch: destroying it stops its thread */
      if (first_index < 0) first_index = b->index;
      const int bs = (int)b->size;
      if (dev == ACC_DEVICE_CUDA) {
#ifdef FMNIST_HAVE_CUDA
        TRY(acc_accelerator_accumulate(acc));
        if (mlp_cuda_forward(gnet, b->device_fields[0], bs) ||
            mlp_cuda_loss_backward(gnet, b->device_fields[0], b->device_fields[1], bs,
                                   acc_accelerator_backward_scale(acc))) {
          fprintf(stderr, "fashion_mnist: %s\n", mlp_cuda_last_error());
          return 1;
        }
        TRY(acc_accelerator_backward(acc));
        if (o.clip > 0 && acc_accelerator_sync_gradients(acc))
          TRY(acc_accelerator_clip_grad_norm(acc, (float)o.clip, 2.0, NULL));
        TRY(acc_accelerator_optimizer_step(acc, opt));
        TRY(acc_accelerator_optimizer_zero_grad(acc, opt));
        nb++;
        samples += bs;
        if (acc_accelerator_sync_gradients(acc)) steps++;
        acc_progress_update(bar, (uint64_t)nb, (uint64_t)(nb * o.batch * nprocs));
        if (o.max_steps > 0 && steps >= o.max_steps) stop = 1;
        continue; /* the loss is summed on the device, read at the end of the epoch */
#endif
      }
      const float *x = on_dev ? b->device_fields[0] : b->fields[0];
      const int32_t *y = on_dev ? b->device_fields[1] : b->fields[1];
      if (round_to((float *)b->fields[0], (size_t)bs * 784, compute, scratch)) {
        fprintf(stderr, "fashion_mnist: %s\n", acc_last_error());
        return 1;
      }
      TRY(acc_accelerator_accumulate(acc));
      /* the CPU kernels: a plain call on the CPU, a host kernel on the fake device */
      cpu_step k = {net, x, y, bs, acc_accelerator_backward_scale(acc), o.log_with != NULL, 0, 0,
                    0};
      TRY(acc_accelerator_host_kernel(acc, train_kernel, &k));
      if (k.failed) {
        fprintf(stderr, "fashion_mnist: %s\n", mlp_last_error());
        return 1;
      }
      const float loss = k.loss;
      if (o.log_with) win_correct += k.correct;
      TRY(acc_accelerator_backward(acc));
      if (o.clip > 0 && acc_accelerator_sync_gradients(acc)) TRY(acc_accelerator_clip_grad_norm(acc, (float)o.clip, 2.0, NULL));
      TRY(acc_accelerator_optimizer_step(acc, opt));
      TRY(acc_accelerator_optimizer_zero_grad(acc, opt));
      loss_sum += loss;
      nb++;
      samples += bs;
      win_loss += loss;
      win_batches++;
      win_samples += bs;
      if (acc_accelerator_sync_gradients(acc)) {
        steps++;
        if (o.log_with && steps % o.log_every == 0) {
          double dt = now_s() - win_t0;
          acc_kv v[] = {ACC_KV_NUM("loss", win_loss / (double)win_batches),
                        ACC_KV_NUM("accuracy", (double)win_correct / (double)win_samples),
                        ACC_KV_NUM("lr", acc_optimizer_get_lr(opt)),
                        ACC_KV_NUM("throughput", dt > 0 ? (double)win_samples * nprocs / dt : 0.0),
                        ACC_KV_INT("epoch", epoch + 1)};
          TRY(acc_tracker_log(trackers, v, sizeof v / sizeof *v, steps));
          win_loss = 0, win_batches = win_correct = win_samples = 0, win_t0 = now_s();
        }
        if (o.save_every > 0 && steps % o.save_every == 0) {
          counters.steps = steps;
          TRY(acc_accelerator_save_state(acc, NULL, NULL));
        }
      }
      acc_progress_update(bar, (uint64_t)nb, (uint64_t)(nb * o.batch * nprocs));
      if (o.max_steps > 0 && steps >= o.max_steps) stop = 1;
    }
#ifdef FMNIST_HAVE_CUDA
    if (gnet && mlp_cuda_take_loss(gnet, &loss_sum)) { /* waits for the stream */
      fprintf(stderr, "fashion_mnist: %s\n", mlp_cuda_last_error());
      return 1;
    }
#endif
    if (on_dev) TRY(acc_accelerator_synchronize(acc));
    train_time += now_s() - t0;
    train_cpu += cpu_s() - c0;
    acc_progress_destroy(bar);
    float mean_loss = nb ? (float)(loss_sum / (double)nb) : 0.0f;
    TRY(acc_accelerator_all_reduce(acc, &mean_loss, &mean_loss, 1, ACC_F32, ACC_MEAN));
    if (first_index > 0) /* resumed mid-epoch: the mean is over the steps run since */
      acc_print(st, "epoch %d: mean training loss %.4f (steps %lld-%lld only: the epoch resumed after step %lld)\n",
                epoch + 1, mean_loss, (long long)first_step, (long long)steps, (long long)first_step - 1);
    else
      acc_print(st, "epoch %d: mean training loss %.4f\n", epoch + 1, mean_loss);
  }

  /* 5. Evaluation over exactly the 10,000 test images. */
  int64_t correct = 0, seen = 0;
  uint8_t hit[256], all_hits[256 * 64];
  const acc_batch *b;
  for (;;) {
    TRY(acc_accelerator_next_batch(acc, test_dl, &b));
    if (!b) break;
    const int bs = (int)b->size;
    const void *hits = hit;
#ifdef FMNIST_HAVE_CUDA
    if (gnet) { /* hits computed on the GPU; gather_for_metrics takes device memory */
      if (mlp_cuda_forward(gnet, b->device_fields[0], bs) ||
          mlp_cuda_hits(gnet, b->device_fields[1], bs, d_hits)) {
        fprintf(stderr, "fashion_mnist: %s\n", mlp_cuda_last_error());
        return 1;
      }
      hits = d_hits;
    }
#endif
    if (hits == hit) {
      eval_step k = {net, on_dev ? b->device_fields[0] : b->fields[0],
                     on_dev ? b->device_fields[1] : b->fields[1], bs, hit, 0};
      TRY(acc_accelerator_host_kernel(acc, eval_kernel, &k));
      if (k.failed) return 1;
    }
    int64_t kept = 0;
    TRY(acc_accelerator_gather_for_metrics(acc, hits, bs, 1, ACC_U8, all_hits,
                                           (int64_t)sizeof all_hits, &kept));
    for (int64_t i = 0; i < kept; i++) correct += all_hits[i];
    seen += kept;
  }
  double rate = train_time > 0 ? (double)samples / train_time : 0;
  double total_rate = rate;
  TRY(acc_accelerator_all_reduce(acc, &total_rate, &total_rate, 1, ACC_F64, ACC_SUM));
  /* CPU seconds the training loops took, all processes together: samples per CPU-second does not
   * depend on how much of the machine the job got (bench/train/scale.sh) */
  double cpu_total = train_cpu, samples_total = (double)samples;
  TRY(acc_accelerator_all_reduce(acc, &cpu_total, &cpu_total, 1, ACC_F64, ACC_SUM));
  TRY(acc_accelerator_all_reduce(acc, &samples_total, &samples_total, 1, ACC_F64, ACC_SUM));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss = (double)ru.ru_maxrss / 1024.0, max_rss = rss;
  TRY(acc_accelerator_all_reduce(acc, &max_rss, &max_rss, 1, ACC_F64, ACC_MAX));
  acc_print(st, "test accuracy: %.4f (%lld of %lld images)\n", seen ? (double)correct / (double)seen : 0.0,
            (long long)correct, (long long)seen);
  acc_print(st, "throughput: %.0f samples/s in total (%d processes), %.1f MiB peak resident per process\n",
            total_rate, nprocs, max_rss);
  acc_print(st, "training CPU time: %.3f s in all processes, %.0f samples per CPU-second\n", cpu_total,
            cpu_total > 0 ? samples_total / cpu_total : 0.0);
  acc_kv final[] = {ACC_KV_NUM("test_accuracy", seen ? (double)correct / (double)seen : 0.0)};
  TRY(acc_tracker_log(trackers, final, 1, steps));
  TRY(acc_end_training(trackers));
  const char *run_dir = acc_trackers_run_dir(trackers);
  if (run_dir && o.log_with && (strstr(o.log_with, "jsonl") || strstr(o.log_with, "all"))) {
    /* The curves of this run: loss, accuracy, lr and throughput against the step. */
    char svg[1024], png[1024];
    snprintf(svg, sizeof svg, "%s/curves.svg", run_dir);
    snprintf(png, sizeof png, "%s/curves.png", run_dir);
    int png_written = 0;
    if (acc_plot_runs(&run_dir, 1, svg, png, &png_written) != ACC_OK)
      fprintf(stderr, "fashion_mnist: plot: %s\n", acc_last_error());
    else
      acc_print(st, "curves: %s%s%s\n", svg, png_written ? " and " : "", png_written ? png : "");
  }
  if (run_dir) acc_print(st, "logs: %s\n", run_dir);
  acc_trackers_destroy(trackers);
  acc_project_config_destroy(log_project);

  free(scratch);
#ifdef FMNIST_HAVE_CUDA
  mlp_cuda_destroy(gnet);
  if (d_hits) TRY(acc_accelerator_free(acc, d_hits));
#endif
  if (on_dev) { /* the device buffers go back before the accelerator */
    mlp_use_buffers(net, NULL, NULL);
    TRY(acc_accelerator_free(acc, params));
    TRY(acc_accelerator_free(acc, grads));
  } else if (!o.private_grads) {
    mlp_use_buffers(net, NULL, NULL);
    TRY(acc_accelerator_free(acc, grads));
  }
  /* Teardown: the accelerator first (it refers to what was prepared), then the prepared
   * objects in the reverse order of their creation. */
  acc_accelerator_destroy(acc);
  acc_dataloader_destroy(train_dl);
  acc_dataloader_destroy(test_dl);
  acc_dataset_destroy(train_ds);
  acc_dataset_destroy(test_ds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  mlp_destroy(net);
  idx_dataset_free(&train);
  idx_dataset_free(&test);
  return 0;
}
