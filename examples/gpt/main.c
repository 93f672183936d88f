/* A small GPT trained on bytes of text with accelerate-c: the README's second main job.
 *
 *   accelerate launch --num_processes 2 build/examples/gpt/gpt [--max-steps 300] [...]
 *
 * The model (model.c) and the data (data.c) know nothing of processes. This file is the training
 * loop, with every acc_* call a real trainer makes: prepare of model, optimizer, loaders and
 * scheduler; AdamW with parameter groups; cosine schedule with warmup; gradient accumulation to
 * a global batch given in tokens; gradient clipping; bf16; validation loss over exactly the
 * validation windows with gather_for_metrics; checkpoints and --resume; and a few lines of text
 * sampled by the main process at the end. --help lists the options.
 *
 * Data: the library's token-stream dataset (acc_dataset_create_tokens) over llm.c-style shards,
 * sharded over processes, shuffled by the library's seeded sampler and resumed mid-epoch by
 * load_state. Given a text (the default), each process writes it as two private shards (one
 * uint16 token per byte) and trains on those; --train-tokens / --val-tokens train on existing
 * token files instead (--write-tokens DIR writes the text's shards to keep). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <accelerate.h>

#include "data.h"
#include "fsdp.h"
#include "model.h"

typedef struct options {
  int layers, heads, width, context, batch, grad_accum, prefetch, overlap, bucket_kb, quiet;
  int private_grads; /* gradients in the model's own memory, not memory the processes share */
  long batch_tokens, max_steps, warmup, eval_every, val_windows, save_every, log_every;
  double lr, weight_decay, clip, beta2, init_scale;
  long growth_interval;
  int sample_bytes;
  double temperature;
  const char *data, *mixed_precision, *output_dir, *save_init, *param_dtype;
  const char *train_tokens, *val_tokens, *token_format, *write_tokens;
  int vocab;
  int resume;
  uint64_t seed;
} options;

static void usage(FILE *f) {
  fprintf(f,
          "usage: gpt [options]\n"
          "model:\n"
          "  --layers N          transformer blocks (4)\n"
          "  --heads N           attention heads (4)\n"
          "  --width N           embedding width (256)\n"
          "  --context N         context length in bytes (256)\n"
          "training:\n"
          "  --batch N           sequences per process per forward pass (4)\n"
          "  --batch-tokens N    target global batch in tokens per optimizer step (8192);\n"
          "                      reached by gradient accumulation\n"
          "  --grad-accum K      accumulation steps (overrides --batch-tokens)\n"
          "  --max-steps N       optimizer steps (100)\n"
          "  --lr X              peak learning rate (2e-3)\n"
          "  --warmup N          warmup steps of the cosine schedule (10)\n"
          "  --weight-decay X    AdamW weight decay of the matrices (0.1)\n"
          "  --beta2 X           AdamW beta2 (0.95)\n"
          "  --clip X            clip the global gradient norm to X (1.0; 0: off)\n"
          "  --mixed-precision no|bf16|fp16   (default: what accelerate launch set)\n"
          "  --init-scale X      fp16: the loss scaler's initial scale (65536)\n"
          "  --growth-interval N fp16: good steps before the scale doubles (2000)\n"
          "  --param-dtype fp32|bf16|fp16  under --use_fsdp: the dtype the units are gathered in\n"
          "                      (float32 master shards; default fp16 under fp16 mixed precision,\n"
          "                      else fp32)\n"
          "  --seed N            initialization and shuffling seed (1337)\n"
          "  --data FILE         training text (" TEXT_DEFAULT_PATH "), one token per byte\n"
          "  --train-tokens F[,F...]  train on these token files instead of a text (llm.c shards:\n"
          "                      256 x int32 header, magic 20240520; or raw, see --token-format)\n"
          "  --val-tokens F      validation token file (needed with --train-tokens; all its windows)\n"
          "  --token-format llmc|u16|u32   format of the token files (llmc)\n"
          "  --vocab N           vocabulary size of the token files (256: bytes; sampling needs 256)\n"
          "  --write-tokens DIR  write the text as DIR/train.bin and DIR/val.bin (llm.c shards) and exit\n"
          "evaluation, checkpoints, output:\n"
          "  --eval-every N      validation loss every N steps (25; 0: only at the start and end)\n"
          "  --val-windows N     validation windows used (128; 0: all)\n"
          "  --output-dir DIR    where checkpoints go: DIR/checkpoints/checkpoint_<i> (3 kept)\n"
          "  --save-every N      save the whole training state every N optimizer steps\n"
          "  --resume            continue from the latest checkpoint in --output-dir (none yet: start afresh)\n"
          "  --sample-bytes N    bytes of text sampled at the end by the main process (300)\n"
          "  --temperature X     sampling temperature (0.8)\n"
          "  --log-every N       print the training loss every N steps (10)\n"
          "  --quiet             only the summary lines\n"
          "performance:\n"
          "  --prefetch N        batches prepared ahead by a loader thread (default 2 when a spare\n"
          "                      core exists for the thread, else 0)\n"
          "  --overlap           reduce gradient buckets during the backward pass\n"
          "  --bucket-kb N       gradient bucket size in KiB (25 MB)\n"
          "  --private-grads     keep the gradients in the model's own memory (default: memory\n"
          "                      the processes of this machine share, reduced in place)\n"
          "  --save-init FILE    (benchmark) write the initial parameters, raw float32, and the\n"
          "                      first epoch's window order, FILE.order as int64\n");
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){.layers = 4, .heads = 4, .width = 256, .context = 256, .batch = 4,
                 .grad_accum = 0, .prefetch = -1, .batch_tokens = 8192, .max_steps = 100,
                 .warmup = 10, .eval_every = 25, .val_windows = 128, .log_every = 10,
                 .lr = 2e-3, .weight_decay = 0.1, .clip = 1.0, .beta2 = 0.95,
                 .sample_bytes = 300, .temperature = 0.8, .seed = 1337, .vocab = 256};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (ARG("--layers")) o->layers = atoi(v);
    else if (ARG("--heads")) o->heads = atoi(v);
    else if (ARG("--width")) o->width = atoi(v);
    else if (ARG("--context")) o->context = atoi(v);
    else if (ARG("--batch")) o->batch = atoi(v);
    else if (ARG("--batch-tokens")) o->batch_tokens = atol(v);
    else if (ARG("--grad-accum")) o->grad_accum = atoi(v);
    else if (ARG("--max-steps")) o->max_steps = atol(v);
    else if (ARG("--lr")) o->lr = atof(v);
    else if (ARG("--warmup")) o->warmup = atol(v);
    else if (ARG("--weight-decay")) o->weight_decay = atof(v);
    else if (ARG("--beta2")) o->beta2 = atof(v);
    else if (ARG("--clip")) o->clip = atof(v);
    else if (ARG("--mixed-precision")) o->mixed_precision = v;
    else if (ARG("--param-dtype")) o->param_dtype = v;
    else if (ARG("--init-scale")) o->init_scale = atof(v);
    else if (ARG("--growth-interval")) o->growth_interval = atol(v);
    else if (ARG("--seed")) o->seed = strtoull(v, NULL, 10);
    else if (ARG("--data")) o->data = v;
    else if (ARG("--train-tokens")) o->train_tokens = v;
    else if (ARG("--val-tokens")) o->val_tokens = v;
    else if (ARG("--token-format")) o->token_format = v;
    else if (ARG("--vocab")) o->vocab = atoi(v);
    else if (ARG("--write-tokens")) o->write_tokens = v;
    else if (ARG("--eval-every")) o->eval_every = atol(v);
    else if (ARG("--val-windows")) o->val_windows = atol(v);
    else if (ARG("--output-dir")) o->output_dir = v;
    else if (ARG("--save-every")) o->save_every = atol(v);
    else if (ARG("--sample-bytes")) o->sample_bytes = atoi(v);
    else if (ARG("--temperature")) o->temperature = atof(v);
    else if (ARG("--log-every")) o->log_every = atol(v);
    else if (ARG("--prefetch")) o->prefetch = atoi(v);
    else if (ARG("--bucket-kb")) o->bucket_kb = atoi(v);
    else if (ARG("--save-init")) o->save_init = v;
    else if (strcmp(a, "--resume") == 0) o->resume = 1;
    else if (strcmp(a, "--overlap") == 0) o->overlap = 1;
    else if (strcmp(a, "--private-grads") == 0) o->private_grads = 1;
    else if (strcmp(a, "--quiet") == 0) o->quiet = 1;
    else {
      fprintf(stderr, "gpt: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return -1;
    }
#undef ARG
  }
  if (o->layers < 1 || o->heads < 1 || o->width < 1 || o->width % o->heads || o->context < 1 ||
      o->batch < 1 || o->batch_tokens < 1 || o->grad_accum < 0 || o->max_steps < 1 || !(o->lr > 0) ||
      o->warmup < 0 || o->weight_decay < 0 || o->init_scale < 0 || o->growth_interval < 0 ||
      !(o->beta2 >= 0 && o->beta2 < 1) || o->clip < 0 ||
      o->eval_every < 0 || o->val_windows < 0 || o->save_every < 0 || o->sample_bytes < 0 ||
      !(o->temperature > 0) || o->log_every < 0 || ((o->save_every > 0 || o->resume) && !o->output_dir) ||
      o->vocab < 2 || !o->train_tokens != !o->val_tokens || (o->train_tokens && o->data)) {
    fprintf(stderr, "gpt: invalid option value (see --help; --width must be a multiple of --heads, "
                    "--save-every and --resume need --output-dir, --train-tokens and --val-tokens go "
                    "together and replace --data, --vocab is at least 2)\n");
    return -1;
  }
  if (o->token_format && strcmp(o->token_format, "llmc") && strcmp(o->token_format, "u16") &&
      strcmp(o->token_format, "u32")) {
    fprintf(stderr, "gpt: --token-format '%s': expected llmc, u16 or u32\n", o->token_format);
    return -1;
  }
  if (o->param_dtype && strcmp(o->param_dtype, "fp32") && strcmp(o->param_dtype, "bf16") &&
      strcmp(o->param_dtype, "fp16")) {
    fprintf(stderr, "gpt: --param-dtype '%s': expected fp32, bf16 or fp16\n", o->param_dtype);
    return -1;
  }
  if (!o->train_tokens && o->vocab != 256) {
    fprintf(stderr, "gpt: --vocab %d: a text is read as bytes (vocabulary 256); other sizes need "
                    "--train-tokens\n", o->vocab);
    return -1;
  }
  return 0;
}

#define TRY(call)                                                          \
  do {                                                                     \
    if ((call) != ACC_OK) {                                                \
      fprintf(stderr, "gpt: %s failed: %s\n", #call, acc_last_error());    \
      return 1;                                                            \
    }                                                                      \
  } while (0)

#define TRY_MODEL(call)                                        \
  do {                                                         \
    if ((call) != 0) {                                         \
      fprintf(stderr, "gpt: %s\n", gpt_last_error());          \
      return 1;                                                \
    }                                                          \
  } while (0)

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

/* The training loop's own counters, saved with the checkpoint (register_for_checkpointing). */
typedef struct run_counters {
  int64_t steps;  /* optimizer steps taken */
  int64_t tokens; /* tokens trained on, over all processes (nominal: full batches) */
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

/* --overlap: tell the accelerator as each block's gradients become final. */
static void grad_ready(int first, int count, void *payload) {
  for (int t = first; t < first + count; t++)
    if (acc_accelerator_grad_ready(payload, (size_t)t) != ACC_OK)
      fprintf(stderr, "gpt: grad_ready: %s\n", acc_last_error());
}

/* bf16: the model reads its matrices from a copy of the parameters rounded to bf16, refreshed
 * after every change of the float32 master weights (start, resume, each optimizer step). */
typedef struct bf16_weights {
  uint16_t *half;
  float *rounded;
} bf16_weights;

static int refresh_bf16(bf16_weights *w, const acc_model *model) {
  if (!w->half) return 0;
  size_t n = acc_model_numel(model);
  return acc_precision_copy_params(model, ACC_BF16, w->half, n) != ACC_OK ||
         acc_bf16_to_f32(w->rounded, w->half, n) != ACC_OK;
}

static int save_init(const char *path, const float *params, size_t nparams, int64_t nwindows, uint64_t seed);

/* Mean loss over the validation windows: every process evaluates its shard, and
 * gather_for_metrics drops the padding the last batch may carry, so each window counts once. */
static int evaluate(acc_accelerator *acc, acc_dataloader *val_dl, gpt *net, fsdp_run *fr, int T, float *row_loss,
                    float *gathered, int64_t gathered_cap, double *mean) {
  double sum = 0;
  int64_t seen = 0;
  const acc_batch *b;
  for (;;) {
    TRY(acc_accelerator_next_batch(acc, val_dl, &b));
    if (!b) break;
    float loss;
    if (fr) {
      if (fsdp_forward(net, b->fields[0], (int)b->size, T, (size_t)T, fr)) return 1;
    } else {
      TRY_MODEL(gpt_forward(net, b->fields[0], (int)b->size, T, (size_t)T));
    }
    TRY_MODEL(gpt_loss(net, b->fields[1], (size_t)T, &loss, row_loss));
    int64_t kept = 0;
    TRY(acc_accelerator_gather_for_metrics(acc, row_loss, b->size, 1, ACC_F32, gathered, gathered_cap, &kept));
    for (int64_t i = 0; i < kept; i++) sum += gathered[i];
    seen += kept;
  }
  *mean = seen ? sum / (double)seen : NAN;
  if (fr) TRY(acc_fsdp_reshard(fr->f)); /* SHARD_GRAD_OP keeps units after a forward without backward */
  return 0;
}

/* --save-init: the initial parameters and the first epoch's window order, for a PyTorch run of
 * the same model on the same batches (bench/gpt). */
static int save_init(const char *path, const float *params, size_t nparams, int64_t nwindows, uint64_t seed) {
  char order_path[4096];
  snprintf(order_path, sizeof order_path, "%s.order", path);
  int64_t *order = malloc((size_t)nwindows * sizeof *order);
  FILE *f = fopen(path, "wb"), *g = fopen(order_path, "wb");
  int bad = !order || !f || !g || acc_sampler_order(order, nwindows, 1, seed, 0) != ACC_OK ||
            fwrite(params, sizeof(float), nparams, f) != nparams ||
            fwrite(order, sizeof *order, (size_t)nwindows, g) != (size_t)nwindows;
  bad |= (f && fclose(f) != 0) | (g && fclose(g) != 0);
  free(order);
  if (bad) fprintf(stderr, "gpt: cannot write %s / %s\n", path, order_path);
  return bad;
}

/* --save-init under FSDP: called by fsdp_setup while the full initial parameters exist. */
typedef struct save_init_args {
  const char *path;
  int64_t nwindows;
  uint64_t seed;
} save_init_args;

static int save_init_cb(const float *init, size_t n, void *arg) {
  const save_init_args *a = arg;
  return save_init(a->path, init, n, a->nwindows, a->seed);
}

/* The text as two llm.c shards: training bytes and the first val_windows validation windows. */
static int write_text_shards(const options *o, const char *train_path, const char *val_path) {
  text_corpus text;
  const size_t T = (size_t)o->context;
  if (text_load(o->data, 10, T + 1, &text) ||
      text_write_shard(&text, 0, text.train_len, 0, train_path) ||
      text_write_shard(&text, text.train_len, text.len, o->val_windows > 0 ? (size_t)o->val_windows * T + 1 : 0,
                       val_path)) {
    fprintf(stderr, "gpt: %s\n", text_last_error());
    text_corpus_free(&text);
    return 1;
  }
  text_corpus_free(&text);
  return 0;
}

static int tokens_dataset(acc_dataset **ds, const char *const *paths, int n, const options *o) {
  acc_token_options to = ACC_TOKEN_OPTIONS_INIT;
  to.seq_len = o->context;
  to.vocab_size = o->vocab;
  to.format = !o->token_format || !strcmp(o->token_format, "llmc") ? ACC_TOKENS_LLMC
              : !strcmp(o->token_format, "u16")                   ? ACC_TOKENS_U16
                                                                  : ACC_TOKENS_U32;
  if (acc_dataset_create_tokens(ds, paths, n, &to) != ACC_OK) {
    fprintf(stderr, "gpt: %s\n", acc_last_error());
    return 1;
  }
  return 0;
}

/* The training and validation token datasets: from --train-tokens / --val-tokens, or from the
 * text through two shards in a private directory, removed once the dataset holds them open. */
static int make_datasets(const options *o, int rank, acc_dataset **train, acc_dataset **val, char *source,
                         size_t cap) {
  if (o->train_tokens) {
    char *list = strdup(o->train_tokens);
    const char *paths[256];
    int n = 0, too_many = 0;
    if (!list) {
      fprintf(stderr, "gpt: out of memory\n");
      return 1;
    }
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
      if (n == 256) too_many = 1;
      else paths[n++] = p;
    }
    if (too_many) fprintf(stderr, "gpt: --train-tokens names more than 256 files; concatenate some of them\n");
    int bad = !n || too_many || tokens_dataset(train, paths, n, o) || tokens_dataset(val, &o->val_tokens, 1, o);
    snprintf(source, cap, "%d token file(s) %.200s%s", n, n ? paths[0] : "", n > 1 ? ",..." : "");
    free(list);
    if (!n) fprintf(stderr, "gpt: --train-tokens names no file\n");
    return bad;
  }
  const char *tmp = getenv("TMPDIR");
  char dir[4096], train_path[4200], val_path[4200];
  snprintf(dir, sizeof dir, "%s/gpt-tokens-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "gpt (process %d): cannot create a directory for the token shards under %s: %s\n", rank,
            tmp && *tmp ? tmp : "/tmp", strerror(errno));
    return 1;
  }
  snprintf(train_path, sizeof train_path, "%s/train.bin", dir);
  snprintf(val_path, sizeof val_path, "%s/val.bin", dir);
  const char *tp = train_path, *vp = val_path;
  int bad = write_text_shards(o, train_path, val_path) || tokens_dataset(train, &tp, 1, o) ||
            tokens_dataset(val, &vp, 1, o);
  unlink(train_path);
  unlink(val_path);
  rmdir(dir);
  snprintf(source, cap, "%s as bytes", o->data ? o->data : TEXT_DEFAULT_PATH);
  return bad;
}

/* --write-tokens DIR: the text's shards, each written under a temporary name and renamed, so
 * several processes doing it at once leave whole files. */
static int write_tokens(const options *o) {
  char train_path[4200], val_path[4200], tmp_train[4300], tmp_val[4300];
  snprintf(train_path, sizeof train_path, "%s/train.bin", o->write_tokens);
  snprintf(val_path, sizeof val_path, "%s/val.bin", o->write_tokens);
  snprintf(tmp_train, sizeof tmp_train, "%s.%ld", train_path, (long)getpid());
  snprintf(tmp_val, sizeof tmp_val, "%s.%ld", val_path, (long)getpid());
  if (write_text_shards(o, tmp_train, tmp_val)) return 1;
  if (rename(tmp_train, train_path) || rename(tmp_val, val_path)) {
    fprintf(stderr, "gpt: cannot rename the shards into %s: %s\n", o->write_tokens, strerror(errno));
    return 1;
  }
  printf("wrote %s and %s\n", train_path, val_path);
  return 0;
}

/* GPT_MEMORY_REPORT=1: the largest process's peak resident memory (VmHWM) and what the parameters,
 * gradients and AdamW state take per process: all of them unsharded; under FSDP the library's own
 * accounting (acc_fsdp_memory_stats: its shards, and the unit buffers it gathers into). */
static double vm_hwm_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kb = atof(line + 6);
  if (f) fclose(f);
  if (kb < 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    kb = (double)ru.ru_maxrss;
  }
  return kb / 1024.0;
}

static int memory_report(acc_accelerator *acc, acc_fsdp *f, size_t nparams) {
  acc_state *st = acc_accelerator_state(acc);
  const double MiB = 1024.0 * 1024.0;
  double hwm[2] = {vm_hwm_mib(), 0};
  hwm[1] = hwm[0];
  TRY(acc_accelerator_all_reduce(acc, &hwm[0], &hwm[0], 1, ACC_F64, ACC_MAX));
  TRY(acc_accelerator_all_reduce(acc, &hwm[1], &hwm[1], 1, ACC_F64, ACC_MIN));
  acc_print(st, "memory: peak resident (VmHWM) %.1f MiB on the largest process, %.1f on the smallest\n", hwm[0], hwm[1]);
  if (!f) {
    const double p = (double)nparams * sizeof(float) / MiB;
    acc_print(st, "memory: per process: parameters %.2f + gradients %.2f + AdamW state %.2f = %.2f MiB (unsharded)\n", p,
              p, 2 * p, 4 * p);
    return 0;
  }
  acc_fsdp_memory m;
  TRY(acc_fsdp_memory_stats(f, &m));
  /* the largest process's shards (they differ by padding only) */
  double sh = (double)m.shard_params;
  TRY(acc_accelerator_all_reduce(acc, &sh, &sh, 1, ACC_F64, ACC_MAX));
  const double shard = sh / MiB, state = shard + shard + 2 * shard;
  acc_print(st, "memory: per process: parameter shard %.2f + gradient shard %.2f + AdamW state %.2f = %.2f MiB "
                "(unsharded: %.2f MiB, over %d processes); unit buffers: %zu allocated (%.2f MiB), at most %zu = %.2f "
                "MiB in use at once; no_sync buffers %.2f MiB; library total %.2f MiB\n",
            shard, shard, 2 * shard, state, 4.0 * (double)m.total_params * sizeof(float) / MiB,
            acc_state_num_processes(st), m.pool_buffers, (double)m.pool_bytes / MiB, m.pool_peak_in_use,
            (double)m.pool_peak_bytes / MiB, (double)m.no_sync_bytes / MiB,
            state + (double)m.pool_bytes / MiB + (double)m.no_sync_bytes / MiB);
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o)) return 2;
  if (o.write_tokens) return write_tokens(&o);
  const int T = o.context;

  /* 1. The accelerator: reads what `accelerate launch` put in the environment. */
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.overlap_grad_sync = o.overlap;
  ao.bucket_cap_bytes = (size_t)o.bucket_kb * 1024;
  acc_grad_scaler_options so_scaler = ACC_GRAD_SCALER_OPTIONS_INIT; /* torch's defaults unless given */
  if (o.init_scale > 0) so_scaler.init_scale = (float)o.init_scale;
  if (o.growth_interval > 0) so_scaler.growth_interval = o.growth_interval;
  ao.scaler = &so_scaler;
  if (o.mixed_precision) {
    acc_mixed_precision mp;
    TRY(acc_mixed_precision_parse(o.mixed_precision, &mp));
    ao.mixed_precision = (int)mp;
  }
  /* Accumulation reaches the global batch in tokens: processes x batch x context per forward.
   * The number of processes is known once the process state exists; the accelerator then
   * shares that state (a second reference to the same process group). */
  acc_state *st;
  TRY(acc_state_create(&st, NULL));
  const int nprocs = acc_state_num_processes(st);
  const long per_forward = (long)nprocs * o.batch * T;
  ao.gradient_accumulation_steps = o.grad_accum > 0 ? o.grad_accum
                                                    : (int)((o.batch_tokens + per_forward - 1) / per_forward);
  acc_accelerator *acc;
  TRY(acc_accelerator_create(&acc, &ao));
  acc_state_destroy(st); /* our reference; the accelerator keeps its own */
  st = acc_accelerator_state(acc);
  const int rank = acc_state_process_index(st);
  const int accum = acc_accelerator_gradient_accumulation_steps(acc);

  /* 2. Data: the library's token dataset, windows of T + 1 tokens (int32 inputs and targets). */
  acc_dataset *train_ds, *val_ds;
  char source[600];
  if (make_datasets(&o, rank, &train_ds, &val_ds, source, sizeof source)) return 1;
  acc_dataloader_options lo = ACC_DATALOADER_OPTIONS_INIT;
  lo.batch_size = o.batch;
  lo.shuffle = 1;
  lo.seed = o.seed;
  /* A loader thread pays off only when it has a core of its own. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  lo.prefetch = o.prefetch >= 0 ? o.prefetch : (acc_state_local_num_processes(st) < cores ? 2 : 0);
  acc_dataloader *train_dl, *val_dl;
  TRY(acc_accelerator_prepare_dataloader(acc, train_ds, &lo, &train_dl));
  lo.shuffle = 0;
  TRY(acc_accelerator_prepare_dataloader(acc, val_ds, &lo, &val_dl));

  /* 3. The model: registered tensor by tensor, then prepared (every process gets process 0's
   *    initial parameters). Under `accelerate launch --use_fsdp` the library holds the parameters
   *    in shards instead, and the model none of its own (fsdp.c). */
  fsdp_run fr = {0};
  const int use_fsdp = fsdp_wanted();
  const int fp16 = acc_accelerator_mixed_precision(acc) == ACC_PRECISION_FP16;
  if (!use_fsdp && o.param_dtype && strcmp(o.param_dtype, "fp32")) {
    fprintf(stderr, "gpt: --param-dtype %s is for --use_fsdp (the units gathered in 16 bits over float32 master "
                    "shards); the unsharded example keeps float32 parameters (--mixed-precision bf16|fp16 for "
                    "16-bit compute)\n", o.param_dtype);
    return 2;
  }
  /* under FSDP: the table's dtype (fp16 mixed precision gathers fp16 unless told otherwise) */
  const acc_dtype param_dtype = !o.param_dtype ? (use_fsdp && fp16 ? ACC_F16 : ACC_F32)
                                : !strcmp(o.param_dtype, "bf16") ? ACC_BF16
                                : !strcmp(o.param_dtype, "fp16") ? ACC_F16
                                                                 : ACC_F32;
  if (use_fsdp && o.overlap) {
    fprintf(stderr, "gpt: --use_fsdp reduces each unit's gradients as its backward ends (reduce-scatter): drop "
                    "--overlap, which is for the unsharded gradient buckets\n");
    return 2;
  }
  gpt_config mc = {o.vocab, T, o.layers, o.heads, o.width, o.batch};
  gpt *net;
  TRY_MODEL(use_fsdp ? gpt_create_external(&net, &mc) : gpt_create(&net, &mc));
  float *shared_grads = NULL; /* the all-reduce after backward reads the others' in place */
  acc_model *model = NULL;
  acc_optimizer *opt;
  const char **names = NULL; /* kept while the optimizer lives */
  const int ntensors = gpt_num_tensors(net);
  acc_adamw_options aw = ACC_ADAMW_OPTIONS_INIT;
  aw.lr = o.lr;
  aw.beta2 = o.beta2;
  aw.weight_decay = o.weight_decay;
  if (use_fsdp) {
    /* process 0's initial parameters (seed + 0) on every process, as prepare gives them below */
    save_init_args sa = {o.save_init, acc_dataset_length(train_ds), o.seed};
    const fsdp_init_fn on_init = o.save_init && acc_state_is_main_process(st) ? save_init_cb : NULL;
    if (fsdp_setup(acc, &fr, net, o.seed, param_dtype, on_init, &sa))
      return 1;
    aw.weight_decay = 0.0; /* the matrices' decay: fsdp_decay before each step */
    TRY(acc_optimizer_create_adamw(&opt, fr.shards, &aw));
  } else {
    gpt_init(net, o.seed + (uint64_t)rank); /* deliberately different: prepare makes it process 0's */
    if (!o.private_grads) {
      TRY(acc_accelerator_alloc_shared(acc, gpt_num_params(net) * sizeof(float), (void **)&shared_grads));
      if (gpt_use_grads(net, shared_grads)) return 1;
    }
    TRY(acc_model_create(&model));
    for (int i = 0; i < ntensors; i++) {
      const gpt_tensor *t = gpt_tensor_at(net, i);
      TRY(acc_model_add_parameter(model, t->name, gpt_params(net) + t->offset, gpt_grads(net) + t->offset,
                                  t->ndim, t->shape));
    }
    TRY(acc_accelerator_prepare_model(acc, model));
    if (o.save_init && acc_state_is_main_process(st) &&
        save_init(o.save_init, gpt_params(net), gpt_num_params(net), acc_dataset_length(train_ds), o.seed))
      return 1;

    /* 4. AdamW with two parameter groups: weight decay on the matrices of the linear layers only,
     *    none on biases, norms and embeddings. */
    names = malloc((size_t)ntensors * sizeof *names);
    if (!names) return 1;
    size_t n_decay = 0, n_plain = 0;
    for (int i = 0; i < ntensors; i++) /* matrices first, the rest from the end */
      if (gpt_tensor_at(net, i)->is_matrix) names[n_decay++] = gpt_tensor_at(net, i)->name;
    for (int i = 0; i < ntensors; i++)
      if (!gpt_tensor_at(net, i)->is_matrix) names[n_decay + n_plain++] = gpt_tensor_at(net, i)->name;
    acc_param_group groups[2] = {{names, n_decay, -1.0, -1.0}, {names + n_decay, n_plain, -1.0, 0.0}};
    TRY(acc_optimizer_create_adamw_groups(&opt, model, groups, 2, &aw));
    TRY(acc_accelerator_prepare_optimizer(acc, opt));
  }

  /* 5. Cosine schedule with warmup. The accelerator steps a prepared scheduler once per process
   *    at each optimizer step (Accelerate's rule for per-process batches), so the schedule's
   *    lengths are counted in optimizer steps x processes. */
  acc_scheduler_options so = ACC_SCHEDULER_OPTIONS_INIT;
  so.kind = ACC_SCHEDULER_COSINE_WITH_WARMUP;
  so.num_warmup_steps = (int64_t)o.warmup * nprocs;
  so.num_training_steps = (int64_t)o.max_steps * nprocs;
  acc_scheduler *sched;
  TRY(acc_scheduler_create(&sched, opt, &so));
  TRY(acc_accelerator_prepare_scheduler(acc, sched));
  if (o.overlap) gpt_set_grad_hook(net, grad_ready, acc);

  /* 6. Checkpoints: the whole training state (model, optimizer, scheduler, loader positions,
   *    RNG, and the loop's own counters) under <output-dir>/checkpoints/checkpoint_<i>. */
  run_counters counters = {0, 0};
  TRY(acc_accelerator_register_for_checkpointing(acc, &counters, counters_save, counters_load));
  fsdp_ckpt fck = {&fr, opt};
  if (use_fsdp) {
    TRY(acc_accelerator_register_save_state_pre_hook(acc, fsdp_save_hook, &fck, "fsdp shards", NULL));
    TRY(acc_accelerator_register_load_state_pre_hook(acc, fsdp_load_hook, &fck, "fsdp shards", NULL));
  }
  if (o.output_dir) {
    acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
    po.project_dir = o.output_dir;
    po.automatic_checkpoint_naming = 1;
    po.total_limit = 3;
    TRY(acc_accelerator_set_project_config(acc, &po));
  }
  int resumed = 0;
  if (o.resume) {
    /* No checkpoint yet (a first attempt under --max_restarts, killed before its first save):
     * start from the beginning and say so. */
    char *from = NULL;
    const acc_result lr = acc_accelerator_load_state(acc, NULL, &from);
    if (lr == ACC_ERR_NOT_FOUND) {
      acc_print(st, "--resume: no checkpoint in %s/checkpoints yet; starting from the beginning\n", o.output_dir);
    } else {
      if (lr != ACC_OK) {
        fprintf(stderr, "gpt: acc_accelerator_load_state(acc, NULL, &from) failed: %s\n", acc_last_error());
        return 1;
      }
      resumed = 1;
      acc_print(st, "resumed from %s at step %lld\n", from, (long long)counters.steps);
    }
    acc_free(from);
  }

  /* 7. bf16: the model's matrix products see bf16-rounded weights and activations. */
  bf16_weights bw = {NULL, NULL};
  if (use_fsdp && acc_accelerator_autocast_dtype(acc) == ACC_BF16) {
    /* under FSDP the float32 master weights exist only per unit, gathered: each unit-by-unit piece
     * rounds its unit's matrices to bf16 itself (the same values as the rounded copy below) */
    gpt_set_bf16(net, 1, NULL);
  } else if (acc_accelerator_autocast_dtype(acc) == ACC_BF16) {
    bw.half = malloc(gpt_num_params(net) * sizeof *bw.half);
    bw.rounded = malloc(gpt_num_params(net) * sizeof *bw.rounded);
    if (!bw.half || !bw.rounded || refresh_bf16(&bw, model)) {
      fprintf(stderr, "gpt: bf16 weights: out of memory or %s\n", acc_last_error());
      return 1;
    }
    gpt_set_bf16(net, 1, bw.rounded);
    gpt_set_bf16_half(net, bw.half); /* the same weights in bf16: no conversion per product */
  }

  acc_print(st, "%s", acc_state_describe(st));
  if (use_fsdp) {
    acc_fsdp_memory fm;
    TRY(acc_fsdp_memory_stats(fr.f, &fm));
    acc_print(st, "fsdp: %s, %zu units (embed, %d blocks, ln_f); this process holds %zu of %zu parameters\n",
              fsdp_strategy_name(&fr), acc_fsdp_num_units(fr.f), o.layers, fm.shard_params / sizeof(float),
              fm.total_params);
    const char *pd = param_dtype == ACC_BF16 ? "bf16" : "fp16";
    if (param_dtype != ACC_F32)
      acc_print(st, "fsdp: parameters gathered as %s over float32 master shards (gradients added in %s, reduced "
                    "in float32)\n", pd, pd);
  }
  acc_print(st, "model: %d layers, %d heads, width %d, context %d: %zu parameters (%s)\n", o.layers,
            o.heads, o.width, T, gpt_num_params(net), gpt_matmul_backend());
  acc_print(st, "data: %s: %lld training windows, %lld validation windows of %d + 1 tokens (token dataset)\n",
            source, (long long)acc_dataset_length(train_ds), (long long)acc_dataset_length(val_ds), T);
  acc_print(st, "training %ld steps: %d processes x %d sequences x %d bytes x %d accumulation = "
                "%ld tokens per step, AdamW lr %g (cosine, %ld warmup), %s\n",
            o.max_steps, nprocs, o.batch, T, accum, per_forward * accum, o.lr, o.warmup,
            acc_mixed_precision_name(acc_accelerator_mixed_precision(acc)));
  if (bw.half) acc_print(st, "bf16: %s\n", gpt_bf16_backend(net));
  else if (use_fsdp && acc_accelerator_autocast_dtype(acc) == ACC_BF16)
    acc_print(st, "bf16: each unit's matrices rounded to bf16 as it is gathered; %s\n", gpt_bf16_backend(net));

  float *row_loss = malloc((size_t)o.batch * sizeof *row_loss);
  const int64_t gathered_cap = (int64_t)o.batch * nprocs;
  float *gathered = malloc((size_t)gathered_cap * sizeof *gathered);
  if (!row_loss || !gathered) return 1;
  double val;
  if (!resumed) {
    if (evaluate(acc, val_dl, net, fr.f ? &fr : NULL, T, row_loss, gathered, gathered_cap, &val)) return 1;
    acc_print(st, "step 0: validation loss %.4f\n", val);
  }

  /* 8. The training loop: one forward/backward per batch, one optimizer step per `accum`. */
  double t_data = 0, t_model = 0, t_sync = 0, t_opt = 0, train_time = 0;
  int64_t tokens = 0, steps = counters.steps;
  double loss_sum = 0, cpu_time = 0;
  int64_t skipped = 0; /* fp16 under FSDP: optimizer steps skipped on overflow */
  int loss_n = 0;
  while (steps < o.max_steps) {
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    const acc_batch *b;
    double t0 = now_s();
    TRY(acc_accelerator_next_batch(acc, train_dl, &b));
    if (!b) continue; /* end of an epoch: the next call starts the next one */
    double t1 = now_s();
    TRY(acc_accelerator_accumulate(acc));
    float loss;
    float norm = 0;
    const int sync = acc_accelerator_sync_gradients(acc);
    double t2, t3;
    if (use_fsdp) {
      /* unit by unit; each unit's gradients are reduce-scattered as its backward ends */
      if (fsdp_forward(net, b->fields[0], (int)b->size, T, (size_t)T, &fr)) return 1;
      TRY_MODEL(gpt_loss(net, b->fields[1], (size_t)T, &loss, NULL));
      if (fsdp_backward(&fr, acc_accelerator_backward_scale(acc))) return 1;
      t2 = t3 = now_s();
      /* fp16: the clip unscales first (the true gradient's norm); on an overflow on any process the
       * step is skipped everywhere, the decay with it (it is the optimizer's first operation) */
      int found_inf = 0;
      if (sync && o.clip > 0) TRY(acc_fsdp_clip_grad_norm(fr.f, (float)o.clip, 2.0, &norm));
      if (sync) TRY(acc_fsdp_unscale_gradients(fr.f, &found_inf));
      if (sync && !found_inf && fsdp_decay(&fr, acc_optimizer_group_lr(opt, 0), o.weight_decay)) return 1;
      if (sync) TRY(acc_fsdp_optimizer_step(fr.f, opt));
      if (sync && acc_fsdp_optimizer_step_was_skipped(fr.f)) skipped++;
      TRY(acc_accelerator_scheduler_step(acc, sched));
      if (sync) TRY(acc_optimizer_zero_grad(opt));
    } else {
      TRY_MODEL(gpt_forward(net, b->fields[0], (int)b->size, T, (size_t)T));
      TRY_MODEL(gpt_loss(net, b->fields[1], (size_t)T, &loss, NULL));
      TRY_MODEL(gpt_backward(net, acc_accelerator_backward_scale(acc)));
      t2 = now_s();
      TRY(acc_accelerator_backward(acc));
      t3 = now_s();
      if (sync && o.clip > 0) TRY(acc_accelerator_clip_grad_norm(acc, (float)o.clip, 2.0, &norm));
      TRY(acc_accelerator_optimizer_step(acc, opt));
      TRY(acc_accelerator_scheduler_step(acc, sched));
      TRY(acc_accelerator_optimizer_zero_grad(acc, opt));
    }
    if (sync && refresh_bf16(&bw, model)) {
      fprintf(stderr, "gpt: %s\n", acc_last_error());
      return 1;
    }
    double t4 = now_s();
    t_data += t1 - t0;
    t_model += t2 - t1;
    t_sync += t3 - t2;
    t_opt += t4 - t3;
    train_time += t4 - t0;
    cpu_time += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    tokens += b->size * T;
    loss_sum += loss;
    loss_n++;
    if (!sync) continue;
    steps++;
    counters.steps = steps;
    counters.tokens += per_forward * accum;
    if (o.log_every > 0 && (steps % o.log_every == 0 || steps == 1)) {
      float mean = (float)(loss_sum / loss_n);
      TRY(acc_accelerator_all_reduce(acc, &mean, &mean, 1, ACC_F32, ACC_MEAN));
      if (!o.quiet)
        acc_print(st, "step %lld: loss %.4f, lr %.3g, grad norm %.3f\n", (long long)steps, mean,
                  acc_scheduler_get_last_lr(sched), norm);
    }
    loss_sum = 0;
    loss_n = 0;
    if ((o.eval_every > 0 && steps % o.eval_every == 0) || steps == o.max_steps) {
      if (evaluate(acc, val_dl, net, fr.f ? &fr : NULL, T, row_loss, gathered, gathered_cap, &val)) return 1;
      acc_print(st, "step %lld: validation loss %.4f\n", (long long)steps, val);
    }
    if (o.save_every > 0 && steps % o.save_every == 0) TRY(acc_accelerator_save_state(acc, NULL, NULL));
  }

  if (use_fsdp && fp16)
    acc_print(st, "fp16: %lld optimizer step(s) skipped on overflow, loss scale %g\n", (long long)skipped,
              (double)acc_grad_scaler_scale(acc_accelerator_grad_scaler(acc)));
  /* 9. Figures, summed or maxed over processes. */
  /* tokens per second of wall time, summed over processes; and per CPU-second of each process
   * (a figure that time-sharing with other programs does not change much) */
  double rates[2] = {train_time > 0 ? (double)tokens / train_time : 0, cpu_time > 0 ? (double)tokens / cpu_time : 0};
  TRY(acc_accelerator_all_reduce(acc, rates, rates, 2, ACC_F64, ACC_SUM));
  const double total_rate = rates[0];
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double max_rss = (double)ru.ru_maxrss / 1024.0;
  TRY(acc_accelerator_all_reduce(acc, &max_rss, &max_rss, 1, ACC_F64, ACC_MAX));
  double shares[4] = {t_model, t_sync, t_opt, t_data};
  TRY(acc_accelerator_all_reduce(acc, shares, shares, 4, ACC_F64, ACC_MEAN));
  double all = shares[0] + shares[1] + shares[2] + shares[3];
  if (all <= 0) all = 1;
  acc_print(st, "throughput: %.0f tokens/s in total (%d processes), %.1f MiB peak resident per process\n",
            total_rate, nprocs, max_rss);
  acc_print(st, "cpu: %.0f tokens per CPU-second per process\n", rates[1] / nprocs);
  acc_print(st, "time per step: model %.1f%%, gradient sync %.1f%%, optimizer+clip+schedule %.1f%%, data %.1f%%%s\n",
            100 * shares[0] / all, 100 * shares[1] / all, 100 * shares[2] / all, 100 * shares[3] / all,
            use_fsdp ? " (fsdp: the gathers and reduce-scatters count as model time)" : "");
  if (getenv("GPT_MEMORY_REPORT") && memory_report(acc, fr.f, gpt_num_params(net))) return 1;

  /* 10. A few lines of text from the main process. */
  /* under FSDP every process runs the sampling forward (its gathers are collective) */
  if (use_fsdp) gpt_set_forward(net, fsdp_forward, &fr);
  if ((use_fsdp || acc_state_is_main_process(st)) && o.sample_bytes > 0 && o.vocab == 256) {
    const char *prompt = "\n";
    int plen = (int)strlen(prompt);
    uint8_t *out = malloc((size_t)(plen + o.sample_bytes) + 1);
    if (!out) return 1;
    memcpy(out, prompt, (size_t)plen);
    TRY_MODEL(gpt_generate(net, out, plen, o.sample_bytes, (float)o.temperature, o.seed));
    out[plen + o.sample_bytes] = 0;
    if (acc_state_is_main_process(st)) printf("sample:%s\n", (char *)out);
    free(out);
  }

  free(row_loss);
  free(gathered);
  free(bw.half);
  free(bw.rounded);
  acc_dataloader_destroy(train_dl);
  acc_dataloader_destroy(val_dl);
  acc_dataset_destroy(train_ds);
  acc_dataset_destroy(val_ds);
  acc_scheduler_destroy(sched);
  acc_optimizer_destroy(opt);
  fsdp_release(&fr); /* after the optimizer over its shards */
  free(names);
  acc_model_destroy(model);
  gpt_destroy(net);
  TRY(acc_accelerator_free(acc, shared_grads));
  acc_accelerator_destroy(acc);
  return 0;
}
