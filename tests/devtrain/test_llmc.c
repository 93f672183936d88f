/* A trainer in the shape of llm.c's CUDA trainer (train_gpt2.cu) on the library (issue 33, "Done
 * when"): one flat bf16 parameter block and one bf16 gradient block in device memory
 * (acc_accelerator_alloc), the program's float32 master weights and AdamW moments in device
 * memory too, its own stream handed to the library, its own AdamW with stochastic rounding into
 * the bf16 parameters; the library only averages the gradients (overlapped with the backward
 * pass through grad_ready) and checkpoints.
 *
 * The model is a small residual MLP language model over a vocabulary of V tokens (llm.c-style
 * names: wte, h.<l>.fc.w/b, lm_head.w/b; 3368 values): h = wte[x]; h += tanh(W_l h + b_l) for each
 * block; logits = lm_head.w h + lm_head.b; cross-entropy against the next token. Its forward and
 * backward passes are host code (the program's "kernels"): the bf16 weights and the batch are
 * read back from the device with copies on the program's stream, and each layer's bf16 gradients
 * are uploaded with acc_accelerator_memcpy_async on that stream as soon as the layer's backward
 * is done, in reverse layer order, each parameter then marked with acc_accelerator_grad_ready
 * (overlap). No host synchronization between the backward and acc_accelerator_backward: the
 * library's averaging is ordered after the uploads by the program's stream alone. The optimizer
 * (llm.c's AdamW: decoupled weight decay on 2-D tensors only, bias correction, a per-step seed
 * drawn from the program's RNG for stochastic rounding) stages master, moments and averaged
 * gradients to host memory, updates them and writes them back on the stream. The moments (device
 * memory), the step count, the RNG state and the last step's seed are registered with
 * acc_accelerator_register_buffers, so save_state / load_state carry them; the master weights
 * are the model's parameters (acc_accelerator_prepare_flat_typed with the program's master).
 *
 * Modes (through accelerate launch; the driver run_llmc.sh runs them in this order in one DIR):
 *   ref     the uninterrupted run without grad_ready: writes DIR/ref.bin (final master, bf16
 *           parameters, moments, step, RNG); no bucket may have started before backward
 *   overlap the same run with grad_ready after each layer's upload: bit for bit ref.bin; at
 *           several processes buckets started early (acc__accelerator_early_buckets > 0)
 *   kill    overlap run that saves its state at step SAVE_AT, trains on to KILL_AT and kills
 *           itself with SIGKILL on every process (after writing DIR/killed.<rank>)
 *   resume  a new launch: load_state of the killed run's checkpoint (the library rounds the
 *           master to nearest even; the program re-rounds with its saved seed), trains to the
 *           end with overlap: bit for bit ref.bin
 *   zero    llm.c's `-z 1`: zero_stage 1, the program's AdamW updates (and rounds) only its range
 *           of the table (acc_accelerator_zero_shard), acc_accelerator_zero_gather hands every
 *           process the others' ranges: master and bf16 parameters bit for bit ref.bin, and the
 *           moments on the process's range. Its moments (its range only) are a
 *           register_zero_buffers group: saved at step SAVE_AT, the file holds the same full
 *           tensors as the kill launch's checkpoint of that step (run after kill); loaded back
 *           and trained to the end again: bit for bit ref.bin once more
 * Every mode that trains to the end checks that acc_save_model writes the program's master
 * weights exactly, and that the library's extra memory for the table is at most its float32
 * gradients (printed). A last argument `cuda` runs on a GPU (the fake device under
 * ACCELERATE_TEST_DEVICE=fake).
 *
 * Usage: test_llmc ref|overlap|kill|resume|zero DIR [cuda] */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>

#include "acc_test.h"
#include "core/internal.h"
#include "train/accel.h"

#define V 32         /* vocabulary */
#define C 24         /* channels */
#define NL 3         /* blocks */
#define T 4          /* positions per sample */
#define GB 8         /* samples per global batch */
#define NT (1 + 2 * NL + 2)
#define STEPS 12
#define SAVE_AT 5
#define KILL_AT 8
#define BUCKET_CAP 4096 /* bytes: 1024 float32 gradients, so the table makes 5 buckets */

static const acc_param_spec table[NT] = {
    {"wte", 2, {V, C}},           {"h.0.fc.w", 2, {C, C}}, {"h.0.fc.b", 1, {C}}, {"h.1.fc.w", 2, {C, C}},
    {"h.1.fc.b", 1, {C}},         {"h.2.fc.w", 2, {C, C}}, {"h.2.fc.b", 1, {C}}, {"lm_head.w", 2, {V, C}},
    {"lm_head.b", 1, {V}},
};
enum { P_WTE = 0, P_HEAD_W = NT - 2, P_HEAD_B = NT - 1 };
#define P_FC_W(l) (1 + 2 * (l))
#define P_FC_B(l) (2 + 2 * (l))
#define NW (V * C + NL * (C * C + C) + V * C + V)

static int rank, nprocs, cuda_mode, overlap;
static size_t zlo = 0, zhi = (size_t)-1; /* the elements this process updates (zero: its shard) */
static acc_accelerator *acc;
static void *stream; /* the program's ("main_stream") */
static size_t off[NT + 1];

/* the program's device memory, and host mirrors for its host "kernels" */
static uint16_t *params, *grads;
static float *master, *mom, *vel;
static int32_t *dtok;
static uint16_t hw[NW], hg[NW], hga[NW];
static float hm[NW], hmm[NW], hv[NW];

/* the optimizer's host state, checkpointed with the moments */
static struct {
  int64_t step;
  uint64_t rng;  /* xorshift64* state (llm.c's rng_state) */
  uint64_t seed; /* the last step's rounding seed */
} os;

typedef struct result {
  float master[NW];
  uint16_t params[NW];
  float m[NW], v[NW];
  int64_t step;
  uint64_t rng, seed;
} result;

static void h2d(void *dst, const void *src, size_t bytes) {
  REQUIRE_OK(acc_accelerator_memcpy_async(acc, dst, src, bytes, ACC_COPY_HOST_TO_DEVICE, stream));
}
static void d2h(void *dst, const void *src, size_t bytes) {
  REQUIRE_OK(acc_accelerator_memcpy_async(acc, dst, src, bytes, ACC_COPY_DEVICE_TO_HOST, stream));
}
static void sync_stream(void) { REQUIRE_OK(acc_accelerator_stream_synchronize(acc, stream)); }
static void *dalloc(size_t bytes) {
  void *p = NULL;
  REQUIRE_OK(acc_accelerator_alloc(acc, bytes, &p));
  return p;
}

static uint32_t rng_u32(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}
static uint32_t noise(uint64_t seed, size_t idx) { /* a counter-based hash: the same for any order */
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(idx + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)(z ^ (z >> 31));
}
/* float32 to bf16 by stochastic rounding: add 16 random low bits, truncate (Inf/NaN to nearest) */
static uint16_t round_sr(float f, uint64_t seed, size_t idx) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  if ((b & 0x7f800000u) == 0x7f800000u) return acc__f32_to_bf16(f);
  b += noise(seed, idx) & 0xffffu;
  return (uint16_t)(b >> 16);
}
static void round_params(uint64_t seed, int nearest) {
  for (size_t k = 0; k < NW; k++) hw[k] = nearest ? acc__f32_to_bf16(hm[k]) : round_sr(hm[k], seed, k);
}

/* token k of sample s of global batch t: a noisy affine chain the model can learn */
static int token(int t, int s, int k) {
  int x = (int)(noise(7919u * (uint64_t)t + (uint64_t)s, 0) % V);
  for (int j = 0; j < k; j++) x = (5 * x + 3 + (noise((uint64_t)(t * GB + s), (size_t)j + 1) % 4 == 0)) % V;
  return x;
}

/* ---- the program's forward and backward "kernels" (host code on staged copies) -------------- */

#define PER_MAX (GB * T)
static float act[NL + 1][PER_MAX][C], th[NL][PER_MAX][C], prob[PER_MAX][V], dh[PER_MAX][C];
static float gw[NW];
static int32_t htok[GB][T + 1], htok_dev[GB][T + 1];

/* uploads rows [first, last] of the gradients in bf16 and marks them ready, last row first */
static void upload_grads(int first, int last) {
  for (size_t k = off[first]; k < off[last + 1]; k++) hg[k] = acc__f32_to_bf16(gw[k]);
  h2d(grads + off[first], hg + off[first], (off[last + 1] - off[first]) * sizeof(uint16_t));
  if (overlap)
    for (int i = last; i >= first; i--) REQUIRE_OK(acc_accelerator_grad_ready(acc, (size_t)i));
}

/* One training step's forward and backward on this process's share of batch t; returns its
 * mean loss. Reads the weights and batch from the device, writes the bf16 gradients there. */
static float forward_backward(int t) {
  const int per = GB / nprocs, n = per * T;
  for (int s = 0; s < per; s++)
    for (int k = 0; k <= T; k++) htok[s][k] = token(t, rank * per + s, k);
  h2d(dtok, htok, sizeof htok); /* the batch to the device, as llm.c's loader does */
  d2h(htok_dev, dtok, sizeof htok_dev);
  d2h(hw, params, sizeof hw);
  sync_stream(); /* before the program's host "kernels" read them */
  float w[NW];
  for (size_t k = 0; k < NW; k++) w[k] = acc__bf16_to_f32(hw[k]);
  const float *wte = w + off[P_WTE], *hwt = w + off[P_HEAD_W], *hb = w + off[P_HEAD_B];
  float loss = 0.0f;
  for (int p = 0; p < n; p++) {
    const int x = htok_dev[p / T][p % T];
    memcpy(act[0][p], wte + x * C, C * sizeof(float));
    for (int l = 0; l < NL; l++) {
      const float *fw = w + off[P_FC_W(l)], *fb = w + off[P_FC_B(l)];
      for (int o = 0; o < C; o++) {
        float a = fb[o];
        for (int i = 0; i < C; i++) a += fw[o * C + i] * act[l][p][i];
        th[l][p][o] = tanhf(a);
        act[l + 1][p][o] = act[l][p][o] + th[l][p][o];
      }
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int v = 0; v < V; v++) {
      float z = hb[v];
      for (int i = 0; i < C; i++) z += hwt[v * C + i] * act[NL][p][i];
      prob[p][v] = z;
      mx = z > mx ? z : mx;
    }
    for (int v = 0; v < V; v++) sum += (prob[p][v] = expf(prob[p][v] - mx));
    for (int v = 0; v < V; v++) prob[p][v] /= sum;
    loss -= logf(prob[p][htok_dev[p / T][p % T + 1]]) / (float)n;
  }
  /* backward, layer by layer from the head; each layer's gradients leave as soon as they exist */
  memset(gw, 0, sizeof gw);
  memset(dh, 0, sizeof dh);
  float *ghw = gw + off[P_HEAD_W], *ghb = gw + off[P_HEAD_B];
  for (int p = 0; p < n; p++)
    for (int v = 0; v < V; v++) {
      const float d = (prob[p][v] - (v == htok_dev[p / T][p % T + 1])) / (float)n;
      ghb[v] += d;
      for (int i = 0; i < C; i++) {
        ghw[v * C + i] += d * act[NL][p][i];
        dh[p][i] += d * hwt[v * C + i];
      }
    }
  upload_grads(P_HEAD_W, P_HEAD_B);
  for (int l = NL - 1; l >= 0; l--) {
    const float *fw = w + off[P_FC_W(l)];
    float *gfw = gw + off[P_FC_W(l)], *gfb = gw + off[P_FC_B(l)];
    for (int p = 0; p < n; p++) {
      float da[C];
      for (int o = 0; o < C; o++) {
        da[o] = dh[p][o] * (1.0f - th[l][p][o] * th[l][p][o]);
        gfb[o] += da[o];
        for (int i = 0; i < C; i++) gfw[o * C + i] += da[o] * act[l][p][i];
      }
      for (int i = 0; i < C; i++)
        for (int o = 0; o < C; o++) dh[p][i] += fw[o * C + i] * da[o]; /* the residual keeps dh */
    }
    upload_grads(P_FC_W(l), P_FC_B(l));
  }
  float *gwte = gw + off[P_WTE];
  for (int p = 0; p < n; p++)
    for (int i = 0; i < C; i++) gwte[htok_dev[p / T][p % T] * C + i] += dh[p][i];
  upload_grads(P_WTE, P_WTE);
  return loss;
}

/* The program's AdamW on its master weights and moments (staged through host memory), then the
 * master rounded stochastically into the bf16 parameters. */
static void adamw_step(void) {
  const float lr = 3e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  d2h(hga, grads, sizeof hga); /* the library's average, rounded into the program's gradients */
  d2h(hm, master, sizeof hm);
  d2h(hmm, mom, sizeof hmm);
  d2h(hv, vel, sizeof hv);
  sync_stream();
  os.step++;
  os.seed = rng_u32(&os.rng);
  const float c1 = 1.0f - powf(b1, (float)os.step), c2 = 1.0f - powf(b2, (float)os.step);
  for (int r = 0; r < NT; r++) {
    const float decay = table[r].ndim == 2 ? wd : 0.0f;
    for (size_t k = off[r] > zlo ? off[r] : zlo; k < off[r + 1] && k < zhi; k++) {
      const float g = acc__bf16_to_f32(hga[k]);
      hmm[k] = b1 * hmm[k] + (1.0f - b1) * g;
      hv[k] = b2 * hv[k] + (1.0f - b2) * g * g;
      hm[k] -= lr * ((hmm[k] / c1) / (sqrtf(hv[k] / c2) + eps) + decay * hm[k]);
    }
  }
  round_params(os.seed, 0);
  h2d(master, hm, sizeof hm);
  h2d(mom, hmm, sizeof hmm);
  h2d(vel, hv, sizeof hv);
  h2d(params, hw, sizeof hw);
}

static float train(int from, int to) {
  float loss = 0.0f;
  for (int t = from; t < to; t++) {
    loss = forward_backward(t);
    REQUIRE_OK(acc_accelerator_backward(acc)); /* ordered after the uploads by the stream alone */
    adamw_step();
    if (zhi != (size_t)-1) REQUIRE_OK(acc_accelerator_zero_gather(acc, NULL)); /* the others' ranges */
    if (rank == 0 && (t == 0 || t == STEPS - 1)) printf("llmc: step %d: loss %.5f (process 0's share)\n", t, loss);
  }
  return loss;
}

/* ---- results, files ------------------------------------------------------------------------- */

static void take(result *r) {
  d2h(r->master, master, sizeof r->master);
  d2h(r->params, params, sizeof r->params);
  d2h(r->m, mom, sizeof r->m);
  d2h(r->v, vel, sizeof r->v);
  sync_stream();
  r->step = os.step;
  r->rng = os.rng;
  r->seed = os.seed;
}

static void compare(const char *what, const result *a, const result *b) {
  size_t at = 0;
  CHECK(acc_test_same_f32_n(a->master, b->master, NW, &at), "%s: master weight %zu differs (%a vs %a)", what, at,
        (double)a->master[at], (double)b->master[at]);
  CHECK(acc_test_same_half(a->params, b->params, NW, 1), "%s: the bf16 parameters differ", what);
  CHECK(acc_test_same_f32_n(a->m, b->m, NW, &at), "%s: first moment %zu differs", what, at);
  CHECK(acc_test_same_f32_n(a->v, b->v, NW, &at), "%s: second moment %zu differs", what, at);
  CHECK(a->step == b->step && a->rng == b->rng && a->seed == b->seed,
        "%s: step/rng/seed %lld/%llx/%llx vs %lld/%llx/%llx", what, (long long)a->step,
        (unsigned long long)a->rng, (unsigned long long)a->seed, (long long)b->step, (unsigned long long)b->rng,
        (unsigned long long)b->seed);
}

static void read_ref(const char *dir, result *r) {
  char path[1100];
  snprintf(path, sizeof path, "%s/ref.bin", dir);
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(r, sizeof *r, 1, f) : 0;
  if (f) fclose(f);
  if (n != 1) {
    fprintf(stderr, "llmc: cannot read %s (%s): run mode ref first\n", path, f ? "short" : strerror(errno));
    exit(1);
  }
}

static void write_ref(const char *dir, const result *r) {
  if (rank != 0) return;
  char path[1100], tmp[1100];
  snprintf(path, sizeof path, "%s/ref.bin", dir);
  snprintf(tmp, sizeof tmp, "%s/ref.bin.tmp", dir);
  FILE *f = fopen(tmp, "wb");
  REQUIRE_OK(f && fwrite(r, sizeof *r, 1, f) == 1 && fclose(f) == 0 && rename(tmp, path) == 0 ? ACC_OK
                                                                                                 : ACC_ERR_IO);
}

/* acc_save_model writes the weights the program trained: its master, exactly */
static void check_save_model(acc_model *m, const char *dir, const char *mode, const result *r) {
  char md[1100], file[1200];
  snprintf(md, sizeof md, "%s/model_%s", dir, mode);
  sync_stream();
  REQUIRE_OK(acc_save_model(acc_accelerator_state(acc), m, md, 0, ACC_F32));
  if (rank != 0) return;
  snprintf(file, sizeof file, "%s/model.safetensors", md);
  acc_safetensors *f = NULL;
  REQUIRE_OK(acc_safetensors_open(&f, file));
  for (int i = 0; i < NT; i++) {
    acc_tensor_view tv;
    REQUIRE_OK(acc_safetensors_find(f, table[i].name, &tv));
    const size_t bytes = (off[i + 1] - off[i]) * sizeof(float);
    CHECK(tv.dtype == ACC_F32 && tv.nbytes == bytes && memcmp(tv.data, r->master + off[i], bytes) == 0,
          "save_model: %s holds %s, not the program's trained master weights", file, table[i].name);
  }
  acc_safetensors_close(f);
}

/* the initial master weights of process r */
static void init_weights(float *out, int r) {
  for (int i = 0; i < NT; i++) {
    const float scale = i == P_WTE ? 0.5f : table[i].ndim == 2 ? 0.3f : 0.02f;
    for (size_t k = off[i]; k < off[i + 1]; k++) out[k] = scale * sinf(1.7f * (float)k + 0.5f * (float)i + (float)r) + 1e-5f;
  }
}

static void marker(const char *dir, int r, char *out, size_t n) { snprintf(out, n, "%s/killed.%d", dir, r); }

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "cuda"))) {
    fprintf(stderr, "usage: test_llmc ref|overlap|kill|resume DIR [cuda]\n");
    return 2;
  }
  const char *mode = argv[1], *dir = argv[2];
  const int zero = !strcmp(mode, "zero");
  if (strcmp(mode, "ref") && strcmp(mode, "overlap") && strcmp(mode, "kill") && strcmp(mode, "resume") && !zero) {
    fprintf(stderr, "test_llmc: unknown mode %s\n", mode);
    return 2;
  }
  cuda_mode = argc == 4;
  overlap = strcmp(mode, "ref") != 0;
  const char *td = getenv("ACCELERATE_TEST_DEVICE");
  const int fake = td && !strcmp(td, "fake");
  for (int i = 0; i < NT; i++) {
    size_t n = 1;
    for (int d = 0; d < table[i].ndim; d++) n *= (size_t)table[i].shape[d];
    off[i + 1] = off[i] + n;
  }
  REQUIRE_OK(off[NT] == NW ? ACC_OK : ACC_ERR_INTERNAL);

  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = cuda_mode && !fake ? ACC_DEVICE_CUDA : ACC_DEVICE_AUTO;
  o.bucket_cap_bytes = BUCKET_CAP;
  o.overlap_grad_sync = 1; /* ref: on too, but nothing is marked ready before backward */
  o.zero_stage = zero ? 1 : 0;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = nprocs > 1 ? rank : -1;
  if (GB % nprocs) {
    fprintf(stderr, "test_llmc: the global batch %d must divide by %d processes\n", GB, nprocs);
    return 2;
  }
  const acc_device_type want = cuda_mode && !fake ? ACC_DEVICE_CUDA : ACC_DEVICE_FAKE;
  if (acc_accelerator_device_type(acc) != want) {
    fprintf(stderr, "test_llmc: the accelerator is not on the %s (ACCELERATE_TEST_DEVICE=fake for the fake device)\n",
            want == ACC_DEVICE_CUDA ? "GPU" : "fake device");
    return 2;
  }
  mkdir(dir, 0755);

  /* the program's buffers (llm.c: params_memory, grads_memory, master_weights, m_memory, v_memory) */
  params = dalloc(NW * sizeof(uint16_t));
  grads = dalloc(NW * sizeof(uint16_t));
  master = dalloc(NW * sizeof(float));
  mom = dalloc(NW * sizeof(float));
  vel = dalloc(NW * sizeof(float));
  dtok = dalloc(sizeof htok);
  REQUIRE_OK(acc_accelerator_stream_create(acc, &stream));
  REQUIRE_OK(acc_accelerator_set_program_stream(acc, stream));

  /* initial weights: differ by process (prepare broadcasts process 0's), not bf16 values */
  init_weights(hm, rank);
  round_params(0, 1);
  memset(hmm, 0, sizeof hmm);
  h2d(master, hm, sizeof hm);
  h2d(params, hw, sizeof hw);
  h2d(mom, hmm, sizeof hmm);
  h2d(vel, hmm, sizeof hmm);
  sync_stream(); /* prepare synchronizes only the library's stream */
  acc_model *m = NULL;
  REQUIRE_OK(acc_accelerator_prepare_flat_typed(acc, table, NT, ACC_BF16, params, grads, master, &m));
  CHECK(acc_model_parameter(m, 0)->data == master, "the model's parameters are the program's master block");
  const size_t lib_bytes = acc_model_typed_library_bytes(m);
  CHECK(lib_bytes > 0 && lib_bytes <= NW * sizeof(float),
        "the library holds %zu bytes for the table, more than its float32 gradients (%zu): a master copy?", lib_bytes,
        (size_t)(NW * sizeof(float)));
  if (rank == 0 && !strcmp(mode, "ref"))
    printf("llmc: the library's extra %s memory for the %d-value bf16 table: %zu bytes (its float32 gradients, "
           "4 per value; no master copy: the program's %zu-byte master block is the model's parameters)\n",
           cuda_mode && !fake ? "GPU" : "device", NW, lib_bytes, (size_t)(NW * sizeof(float)));

  const size_t nbuckets = acc__grad_sync_num_buckets(acc->models[0].gs);
  CHECK(nbuckets >= 3, "the table makes %zu gradient buckets of at most %d bytes, want at least 3", nbuckets,
        BUCKET_CAP);

  os.rng = 1337;
  const acc_named_buffer bufs[] = {
      {"m", ACC_F32, (void **)&mom, NW, NULL},     {"v", ACC_F32, (void **)&vel, NW, NULL},
      {"step", ACC_I64, NULL, 1, &os.step},        {"rng", ACC_U64, NULL, 1, &os.rng},
      {"seed", ACC_U64, NULL, 1, &os.seed},
  };
  if (zero) {
    size_t first = 0, count = 0;
    REQUIRE_OK(acc_accelerator_zero_shard(acc, m, &first, &count));
    CHECK(first == (size_t)rank * ((NW + nprocs - 1) / nprocs) && first + count <= NW && count > 0,
          "zero_shard: process %d owns [%zu, %zu) of %d values", rank, first, first + count, NW);
    zlo = first;
    zhi = first + count;
    /* the moments of its range (llm.c keeps only those), as full tensors in the checkpoint */
    static void *zm, *zv;
    zm = (char *)mom + zlo * sizeof(float);
    zv = (char *)vel + zlo * sizeof(float);
    const acc_named_buffer zb[] = {{"m", ACC_F32, &zm, count, NULL}, {"v", ACC_F32, &zv, count, NULL}};
    const acc_named_buffer bad[] = {{"m", ACC_F32, &zm, NW + 1, NULL}};
    acc_result rc = acc_accelerator_register_zero_buffers(acc, "bad", m, bad, 1);
    CHECK(rc == ACC_ERR_INVALID_ARGUMENT && strstr(acc_last_error(), "this process's range of the model is"),
          "a sharded buffer of another length than the range is refused naming it: %s", acc_last_error());
    REQUIRE_OK(acc_accelerator_register_zero_buffers(acc, "adamw", m, zb, 2));
    REQUIRE_OK(acc_accelerator_register_buffers(acc, "adamw_scalars", bufs + 2, 3)); /* replicated */
    rc = acc_accelerator_register_buffers(acc, "adamw", bufs + 2, 3);
    CHECK(rc == ACC_ERR_INVALID_ARGUMENT && strstr(acc_last_error(), "'adamw' is already registered"),
          "a stem of both kinds (one file) is refused: %s", acc_last_error());
  } else {
    REQUIRE_OK(acc_accelerator_register_buffers(acc, "adamw", bufs, sizeof bufs / sizeof bufs[0]));
  }

  char ckpt[1100], mk[1100];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  static result got, want_r;
  const size_t early0 = acc__accelerator_early_buckets(acc);
  if (!strcmp(mode, "kill")) {
    train(0, SAVE_AT);
    sync_stream(); /* save_state synchronizes only the library's stream */
    REQUIRE_OK(acc_accelerator_save_state(acc, ckpt, NULL));
    train(SAVE_AT, KILL_AT);
    sync_stream();
    if (nprocs > 1)
      CHECK(acc__accelerator_early_buckets(acc) > early0, "no bucket's averaging started before backward");
    marker(dir, rank, mk, sizeof mk);
    FILE *f = acc_test_failures == 0 ? fopen(mk, "w") : NULL;
    if (f) fclose(f);
    REQUIRE_OK(acc_accelerator_wait_for_everyone(acc)); /* every marker is written */
    printf("llmc: process %d kills itself at step %d (checkpoint of step %d)\n", rank, KILL_AT, SAVE_AT);
    fflush(stdout);
    raise(SIGKILL);
    return 1;
  }
  int from = 0;
  if (!strcmp(mode, "resume")) {
    for (int r = 0; r < nprocs; r++) {
      struct stat sb;
      marker(dir, r, mk, sizeof mk);
      REQUIRE_OK(stat(mk, &sb) == 0 ? ACC_OK : ACC_ERR_NOT_FOUND); /* the killed run passed its checks */
    }
    REQUIRE_OK(acc_accelerator_load_state(acc, ckpt, NULL));
    CHECK(os.step == SAVE_AT, "load_state restored step %lld, want %d", (long long)os.step, SAVE_AT);
    d2h(hm, master, sizeof hm);
    d2h(hga, params, sizeof hga);
    sync_stream();
    round_params(0, 1);
    CHECK(memcmp(hga, hw, sizeof hw) == 0, "load_state rounds the loaded master into the bf16 parameters");
    /* the program's rounding of that step was stochastic: redo it with the saved seed */
    round_params(os.seed, 0);
    h2d(params, hw, sizeof hw);
    from = (int)os.step;
  }
  char zckpt[1100];
  snprintf(zckpt, sizeof zckpt, "%s/ckpt_zero", dir);
  if (zero) {
    train(0, SAVE_AT);
    sync_stream();
    REQUIRE_OK(acc_accelerator_save_state(acc, zckpt, NULL));
    from = SAVE_AT;
  }
  train(from, STEPS);
  take(&got);
  const size_t early = acc__accelerator_early_buckets(acc) - early0;
  if (rank == 0)
    printf("llmc %s at %d process(es): %zu of %zu gradient buckets started by grad_ready before backward\n", mode,
           nprocs, early, nbuckets * (size_t)(STEPS - (zero ? 0 : from)));
  if (!overlap) CHECK(early == 0, "ref: %zu buckets started before backward without grad_ready", early);
  else if (nprocs > 1) CHECK(early > 0, "%s: no bucket's averaging started before backward", mode);
  static float init0[NW];
  init_weights(init0, 0);
  int moved = 0;
  for (int k = 0; k < NW; k++) moved += got.params[k] != acc__f32_to_bf16(init0[k]);
  CHECK(moved > NW / 2, "training moved only %d of %d weights", moved, NW);
  if (!overlap) write_ref(dir, &got);
  else if (zero) { /* the moments of the range this process stepped */
    read_ref(dir, &want_r);
    memcpy(got.m, want_r.m, zlo * sizeof(float));
    memcpy(got.m + zhi, want_r.m + zhi, (NW - zhi) * sizeof(float));
    memcpy(got.v, want_r.v, zlo * sizeof(float));
    memcpy(got.v + zhi, want_r.v + zhi, (NW - zhi) * sizeof(float));
    compare("zero_stage 1 with the program's optimizer on its shard vs without ZeRO", &got, &want_r);
    if (rank == 0) { /* the gathered moments: the unsharded kill launch's tensors of the same step */
      char p1[1200], p2[1200];
      snprintf(p1, sizeof p1, "%s/adamw.safetensors", ckpt);
      snprintf(p2, sizeof p2, "%s/adamw.safetensors", zckpt);
      acc_safetensors *f1 = NULL, *f2 = NULL;
      REQUIRE_OK(acc_safetensors_open(&f1, p1));
      REQUIRE_OK(acc_safetensors_open(&f2, p2));
      for (int k = 0; k < 2; k++) {
        acc_tensor_view a, b;
        REQUIRE_OK(acc_safetensors_find(f1, k ? "v" : "m", &a));
        REQUIRE_OK(acc_safetensors_find(f2, k ? "v" : "m", &b));
        CHECK(a.dtype == b.dtype && a.ndim == 1 && b.ndim == 1 && a.shape[0] == NW && b.shape[0] == NW &&
                  memcmp(a.data, b.data, a.nbytes) == 0,
              "the ZeRO checkpoint's '%s' is not the unsharded run's full tensor of step %d", k ? "v" : "m", SAVE_AT);
      }
      acc_safetensors_close(f1);
      acc_safetensors_close(f2);
    }
    /* the kill launch's checkpoint has no 'adamw_scalars' group: refused, the moments untouched */
    static float before[NW], after[NW];
    d2h(before, mom, sizeof before);
    sync_stream();
    acc_result lr = acc_accelerator_load_state(acc, ckpt, NULL);
    CHECK(lr != ACC_OK && strstr(acc_last_error(), "adamw_scalars"),
          "loading a checkpoint without the scalars' group fails naming it (rc %d: %s)", (int)lr, acc_last_error());
    d2h(after, mom, sizeof after);
    sync_stream();
    CHECK(memcmp(before, after, sizeof before) == 0, "a failed load_state left the sharded moments as they were");
    /* the ZeRO checkpoint loaded back: its ranges into the moments, the run continued again */
    float junk[NW];
    for (int k = 0; k < NW; k++) junk[k] = -1.0f;
    h2d(mom, junk, sizeof junk);
    sync_stream();
    REQUIRE_OK(acc_accelerator_load_state(acc, zckpt, NULL));
    CHECK(os.step == SAVE_AT, "load_state of the ZeRO checkpoint restored step %lld, want %d", (long long)os.step,
          SAVE_AT);
    d2h(hm, master, sizeof hm);
    sync_stream();
    round_params(os.seed, 0); /* the program's stochastic rounding of that step, redone */
    h2d(params, hw, sizeof hw);
    train(SAVE_AT, STEPS);
    take(&got);
    memcpy(got.m, want_r.m, zlo * sizeof(float));
    memcpy(got.m + zhi, want_r.m + zhi, (NW - zhi) * sizeof(float));
    memcpy(got.v, want_r.v, zlo * sizeof(float));
    memcpy(got.v + zhi, want_r.v + zhi, (NW - zhi) * sizeof(float));
    compare("zero_stage 1 resumed from its checkpoint of step 5 vs without ZeRO", &got, &want_r);
  } else {
    read_ref(dir, &want_r);
    compare(!strcmp(mode, "resume") ? "killed at step 8, resumed from step 5 vs uninterrupted"
                                    : "gradients averaged with overlap vs without",
            &got, &want_r);
  }
  check_save_model(m, dir, mode, &got);

  REQUIRE_OK(acc_accelerator_stream_destroy(acc, stream));
  acc_accelerator_free(acc, params);
  acc_accelerator_free(acc, grads);
  acc_accelerator_free(acc, master);
  acc_accelerator_free(acc, mom);
  acc_accelerator_free(acc, vel);
  acc_accelerator_free(acc, dtok);
  acc_accelerator_destroy(acc);
  if (rank == 0) printf("llmc %s at %d process(es): done\n", mode, nprocs);
  return acc_test_finish("llmc");
}
