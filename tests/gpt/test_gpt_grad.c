/* The GPT example's backward pass against central finite differences of its forward pass, for
 * every element of every parameter tensor of a tiny model; then the same over a context longer
 * than the attention's row block (sampled elements), gradient accumulation (two backward passes
 * with scale 1/2 equal one with scale 1), the gradient-ready hook (every tensor exactly once,
 * in backward order), the unit-by-unit pieces a sharded trainer runs (bit-identical to the
 * whole passes, over separate unit buffers, and refused out of order), and the data windows.
 * Built with the plain loops and with OpenBLAS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "gemm_dnnl.h"
#include "model.h"

static int failures;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)
#define REQUIRE(cond)                                                              \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, gpt_last_error()); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static uint64_t rng = 12345;
static double urand(void) { /* [0, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) * 0x1.0p-53;
}

static float loss_of(gpt *m, const int32_t *seq, int B, int T) {
  float loss;
  REQUIRE(gpt_forward(m, seq, B, T, (size_t)T + 1) == 0);
  REQUIRE(gpt_loss(m, seq + 1, (size_t)T + 1, &loss, NULL) == 0);
  return loss;
}

/* Checks every `every`-th element of every tensor; returns the worst error seen. */
static double check_grads(gpt_config cfg, int every, const char *what) {
  gpt *m;
  REQUIRE(gpt_create(&m, &cfg) == 0);
  gpt_init(m, 7);
  float *p = gpt_params(m), *g = gpt_grads(m);
  /* larger than the init's 0.02 so that every path carries a gradient worth measuring */
  for (size_t i = 0; i < gpt_num_params(m); i++) p[i] += (float)(0.6 * (urand() - 0.5));
  const int B = cfg.max_batch, T = cfg.block_size;
  int32_t *seq = malloc((size_t)B * (T + 1) * sizeof *seq);
  for (int i = 0; i < B * (T + 1); i++) seq[i] = (int32_t)(urand() * cfg.vocab_size);
  loss_of(m, seq, B, T);
  REQUIRE(gpt_backward(m, 1.0f) == 0);
  double worst = 0;
  const float h = 1e-2f;
  for (int t = 0; t < gpt_num_tensors(m); t++) {
    const gpt_tensor *tn = gpt_tensor_at(m, t);
    double tensor_worst = 0, gmax = 0;
    for (size_t k = 0; k < tn->numel; k += (size_t)every) {
      float *x = p + tn->offset + k, saved = *x;
      *x = saved + h;
      double up = loss_of(m, seq, B, T);
      *x = saved - h;
      double down = loss_of(m, seq, B, T);
      *x = saved;
      double fd = (up - down) / (2.0 * h), an = g[tn->offset + k];
      /* error relative to the tensor's gradient scale, so near-zero entries do not dominate */
      double err = fabs(fd - an);
      if (err > tensor_worst) tensor_worst = err;
      if (fabs(an) > gmax) gmax = fabs(an);
    }
    double rel = tensor_worst / fmax(gmax, 1e-3);
    CHECK(rel < 2e-2, "%s: %s: finite differences differ from the backward pass by %.3g "
                      "(largest gradient %.3g)", what, tn->name, tensor_worst, gmax);
    CHECK(gmax > 0, "%s: %s has no gradient at all", what, tn->name);
    if (rel > worst) worst = rel;
  }
  gpt_destroy(m);
  free(seq);
  return worst;
}

/* bf16 mode (through oneDNN when the library has it, else rounded operands on the float32
 * products) against float32: every tensor's gradient within a few bf16 roundings of the float32
 * one, relative to the tensor's largest; and the bf16 weights given as a copy
 * (gpt_set_bf16_half) give bit-identical gradients to converting the rounded weights. */
static void check_bf16(void) {
  gpt_config cfg = {64, 40, 2, 2, 32, 3};
  gpt *m;
  REQUIRE(gpt_create(&m, &cfg) == 0);
  gpt_init(m, 11);
  const size_t n = gpt_num_params(m);
  float *p = gpt_params(m), *g = gpt_grads(m);
  for (size_t i = 0; i < n; i++) p[i] += (float)(0.2 * (urand() - 0.5));
  float *f32 = malloc(n * sizeof *f32), *conv = malloc(n * sizeof *conv), *rounded = malloc(n * sizeof *rounded);
  uint16_t *half = malloc(n * sizeof *half);
  int32_t seq[3 * 41];
  for (int i = 0; i < 3 * 41; i++) seq[i] = (int32_t)(urand() * 64);
  REQUIRE(f32 && conv && rounded && half);
  gemm_to_bf16(half, p, n);
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)half[i] << 16;
    memcpy(&rounded[i], &u, sizeof u);
  }
  loss_of(m, seq, 3, 40);
  REQUIRE(gpt_backward(m, 1.0f) == 0);
  memcpy(f32, g, n * sizeof *f32);
  gpt_zero_grad(m);
  gpt_set_bf16(m, 1, rounded);
  printf("bf16: %s\n", gpt_bf16_backend(m));
  loss_of(m, seq, 3, 40);
  REQUIRE(gpt_backward(m, 1.0f) == 0);
  memcpy(conv, g, n * sizeof *conv);
  gpt_zero_grad(m);
  gpt_set_bf16_half(m, half);
  loss_of(m, seq, 3, 40);
  REQUIRE(gpt_backward(m, 1.0f) == 0);
  CHECK(memcmp(conv, g, n * sizeof *g) == 0, "bf16 weights given as a copy change the gradients");
  double worst = 0;
  for (int t = 0; t < gpt_num_tensors(m); t++) {
    const gpt_tensor *tn = gpt_tensor_at(m, t);
    double gmax = 0, err = 0;
    for (size_t k = 0; k < tn->numel; k++) {
      gmax = fmax(gmax, fabs(f32[tn->offset + k]));
      err = fmax(err, fabs(f32[tn->offset + k] - conv[tn->offset + k]));
    }
    CHECK(err <= 0.05 * gmax, "bf16: %s differs from float32 by %.3g (largest %.3g)", tn->name, err, gmax);
    CHECK(err > 0 || gmax == 0, "bf16: %s is identical to float32: bf16 mode changed nothing", tn->name);
    worst = fmax(worst, err / fmax(gmax, 1e-30));
  }
  printf("bf16 gradients vs float32: largest difference %.3g of the tensor's largest\n", worst);
  gpt_set_bf16(m, 0, NULL);
  gpt_set_bf16_half(m, NULL);
  gpt_destroy(m);
  free(f32);
  free(conv);
  free(rounded);
  free(half);
}

static int hook_calls[64], hook_order[64], hook_n;
static void hook(int first, int count, void *payload) {
  (void)payload;
  for (int t = first; t < first + count; t++) {
    hook_calls[t]++;
    hook_order[hook_n++] = t;
  }
}

static void check_accumulation_and_hook(void) {
  gpt_config cfg = {32, 6, 2, 2, 8, 3};
  gpt *m;
  REQUIRE(gpt_create(&m, &cfg) == 0);
  gpt_init(m, 3);
  int32_t seq[3 * 7];
  for (size_t i = 0; i < 3 * 7; i++) seq[i] = (int32_t)(urand() * 32);
  size_t n = gpt_num_params(m);
  float *once = malloc(n * sizeof *once);
  loss_of(m, seq, 3, 6);
  REQUIRE(gpt_backward(m, 1.0f) == 0);
  memcpy(once, gpt_grads(m), n * sizeof *once);
  gpt_zero_grad(m);
  gpt_set_grad_hook(m, hook, NULL);
  for (int r = 0; r < 2; r++) {
    loss_of(m, seq, 3, 6);
    REQUIRE(gpt_backward(m, 0.5f) == 0);
  }
  double worst = 0;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(gpt_grads(m)[i] - once[i]) / fmax(fabs(once[i]), 1e-4));
  CHECK(worst < 1e-5, "two backward passes at scale 1/2 differ from one at scale 1 by %.3g (relative)", worst);
  const int nt = gpt_num_tensors(m);
  for (int t = 0; t < nt; t++) CHECK(hook_calls[t] == 2, "tensor %d marked %d times in two backward passes", t, hook_calls[t]);
  CHECK(hook_n == 2 * nt && hook_order[0] == nt - 2 && hook_order[nt - 1] == 1,
        "hook order: ln_f first, the embeddings last (got %d first, %d last)", hook_order[0], hook_order[nt - 1]);
  REQUIRE(gpt_backward(m, 1.0f) != 0); /* a second backward without a forward is refused */
  CHECK(strstr(gpt_last_error(), "gpt_forward") != NULL, "error names the missing call: %s", gpt_last_error());
  free(once);
  gpt_destroy(m);
}

/* gpt_forward_embed / _block / _head and the backward pieces, each over its own copy of a unit's
 * parameters (as FSDP gathers them), against gpt_forward / gpt_backward of the same model: the
 * logits, the loss and every gradient bit for bit; a model of gpt_create_external has no buffers
 * and refuses the whole passes; pieces out of order are refused. */
static void check_pieces(void) {
  gpt_config cfg = {32, 6, 3, 2, 8, 3};
  gpt *m, *x;
  REQUIRE(gpt_create(&m, &cfg) == 0 && gpt_create_external(&x, &cfg) == 0);
  CHECK(gpt_params(x) == NULL && gpt_grads(x) == NULL, "an external model has no parameter buffers");
  gpt_init(m, 11);
  const size_t n = gpt_num_params(m);
  const int L = cfg.n_layer, nt = gpt_num_tensors(m);
  float *init = malloc(n * sizeof *init);
  gpt_init_params(x, 11, init);
  CHECK(memcmp(init, gpt_params(m), n * sizeof *init) == 0, "gpt_init_params writes gpt_init's values");
  int32_t seq[3 * 7];
  for (size_t i = 0; i < 3 * 7; i++) seq[i] = (int32_t)(urand() * 32);
  float loss_whole, loss_pieces;
  REQUIRE(gpt_forward(m, seq, 3, 6, 7) == 0);
  float *logits = malloc((size_t)3 * 6 * 32 * sizeof *logits); /* before gpt_loss overwrites them */
  memcpy(logits, gpt_logits(m), (size_t)3 * 6 * 32 * sizeof *logits);
  REQUIRE(gpt_loss(m, seq + 1, 7, &loss_whole, NULL) == 0);
  REQUIRE(gpt_backward(m, 0.75f) == 0);
  /* unit buffers: embed (tensors 0-1), each block (12), ln_f (2), copies of the parameters */
  float *unit[16], *grad[16];
  int first[16], count[16], nu = 0;
  first[nu] = 0, count[nu++] = 2;
  for (int l = 0; l < L; l++) first[nu] = 2 + 12 * l, count[nu++] = 12;
  first[nu] = 2 + 12 * L, count[nu++] = 2;
  for (int u = 0; u < nu; u++) {
    const size_t a = gpt_tensor_at(m, first[u])->offset;
    const gpt_tensor *last = gpt_tensor_at(m, first[u] + count[u] - 1);
    const size_t len = last->offset + last->numel - a;
    unit[u] = malloc(len * sizeof(float));
    grad[u] = calloc(len, sizeof(float));
    memcpy(unit[u], init + a, len * sizeof(float));
  }
  CHECK(gpt_forward_block(x, 0, unit[1]) != 0 && strstr(gpt_last_error(), "out of order"), "a block before the embedding: %s",
        gpt_last_error());
  REQUIRE(gpt_forward_embed(x, seq, 3, 6, 7, unit[0]) == 0);
  CHECK(gpt_forward_head(x, unit[nu - 1], unit[0]) != 0, "the head before the blocks is refused");
  for (int l = 0; l < L; l++) REQUIRE(gpt_forward_block(x, l, unit[1 + l]) == 0);
  REQUIRE(gpt_forward_head(x, unit[nu - 1], unit[0]) == 0);
  CHECK(memcmp(logits, gpt_logits(x), (size_t)3 * 6 * 32 * sizeof *logits) == 0, "the pieces' logits equal gpt_forward's");
  REQUIRE(gpt_loss(x, seq + 1, 7, &loss_pieces, NULL) == 0);
  CHECK(loss_pieces == loss_whole, "loss %.9g vs %.9g", loss_pieces, loss_whole);
  CHECK(gpt_backward(x, 1.0f) != 0 && strstr(gpt_last_error(), "gpt_create_external"), "an external model refuses "
        "gpt_backward: %s", gpt_last_error());
  CHECK(gpt_backward_block(x, L - 1, unit[L], grad[L]) != 0, "a block's backward before the head's is refused");
  REQUIRE(gpt_backward_head(x, 0.75f, unit[nu - 1], grad[nu - 1], unit[0], grad[0]) == 0);
  for (int l = L - 1; l >= 0; l--) REQUIRE(gpt_backward_block(x, l, unit[1 + l], grad[1 + l]) == 0);
  REQUIRE(gpt_backward_embed(x, grad[0]) == 0);
  int same = 1;
  for (int u = 0; u < nu; u++)
    for (int t = first[u]; t < first[u] + count[u]; t++) {
      const gpt_tensor *tt = gpt_tensor_at(m, t);
      const size_t at = tt->offset - gpt_tensor_at(m, first[u])->offset;
      if (memcmp(grad[u] + at, gpt_grads(m) + tt->offset, tt->numel * sizeof(float)) != 0) {
        CHECK(0, "tensor %s: the pieces' gradient differs from gpt_backward's", tt->name);
        same = 0;
      }
    }
  CHECK(same && nt == 2 + 12 * L + 2, "every gradient bit-identical (%d tensors)", nt);
  CHECK(gpt_forward(x, seq, 3, 6, 7) != 0 && strstr(gpt_last_error(), "unit by unit"), "an external model refuses "
        "gpt_forward: %s", gpt_last_error());
  for (int u = 0; u < nu; u++) {
    free(unit[u]);
    free(grad[u]);
  }
  free(logits);
  free(init);
  gpt_destroy(m);
  gpt_destroy(x);
}

static void check_data(void) {
  char path[] = "/tmp/gpt_text_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  char text[1000];
  for (int i = 0; i < 1000; i++) text[i] = (char)('a' + i % 26);
  REQUIRE(write(fd, text, sizeof text) == (ssize_t)sizeof text);
  close(fd);
  text_corpus c;
  REQUIRE(text_load(path, 10, 9, &c) == 0);
  CHECK(c.len == 1000 && c.train_len == 900, "split: %zu bytes, %zu training", c.len, c.train_len);
  text_windows w = text_windows_of(&c, 0, c.train_len, 9, 0);
  CHECK(w.count == 899 / 8, "training windows: %lld", (long long)w.count);
  uint8_t a[9], b[9];
  void *fa[1] = {a}, *fb[1] = {b};
  for (int64_t i = 0; i + 1 < w.count; i++) {
    REQUIRE(text_window_fetch(i, fa, &w) == 0 && text_window_fetch(i + 1, fb, &w) == 0);
    CHECK(a[8] == b[0] && a[0] == (uint8_t)text[i * 8], "window %lld: each window's last byte starts the next", (long long)i);
  }
  /* the training part as an llm.c shard: header (magic, version, count), then uint16 bytes */
  char shard[] = "/tmp/gpt_shard_XXXXXX";
  int sfd = mkstemp(shard);
  REQUIRE(sfd >= 0);
  close(sfd);
  REQUIRE(text_write_shard(&c, 0, c.train_len, 0, shard) == 0);
  FILE *sf = fopen(shard, "rb");
  REQUIRE(sf != NULL);
  unsigned char *raw = malloc(1024 + 2 * 1000);
  size_t got = fread(raw, 1, 1024 + 2 * 1000, sf);
  fclose(sf);
  CHECK(got == 1024 + 2 * 900, "shard size %zu, expected %d", got, 1024 + 2 * 900);
  CHECK(raw[0] == 0x88 && raw[1] == 0xd8 && raw[2] == 0x34 && raw[3] == 0x01 && raw[4] == 1 && raw[8] == (900 & 255) &&
            raw[9] == (900 >> 8), "llm.c header: magic 20240520, version 1, 900 tokens");
  int same = 1;
  for (size_t i = 0; i < 900 && got == 1024 + 2 * 900; i++) same &= raw[1024 + 2 * i] == (unsigned char)text[i] && raw[1025 + 2 * i] == 0;
  CHECK(same, "the shard's tokens are the text's bytes");
  REQUIRE(text_write_shard(&c, c.train_len, c.len, 19, shard) == 0);
  sf = fopen(shard, "rb");
  REQUIRE(sf != NULL);
  got = fread(raw, 1, 1024 + 2 * 1000, sf);
  fclose(sf);
  CHECK(got == 1024 + 2 * 19 && raw[8] == 19 && raw[1024] == (unsigned char)text[900], "max_tokens keeps the first 19 tokens (%zu bytes)", got);
  CHECK(text_write_shard(&c, 0, 10, 0, "/nonexistent-dir/x.bin") != 0 && strstr(text_last_error(), "/nonexistent-dir/x.bin"),
        "unwritable shard names the path: %s", text_last_error());
  free(raw);
  unlink(shard);
  text_windows v = text_windows_of(&c, c.train_len, c.len, 9, 5);
  CHECK(v.count == 5 && (size_t)(v.count - 1) * v.step + 9 <= 100, "5 validation windows fit: step %zu", v.step);
  CHECK(text_window_fetch(v.count, fa, &v) != 0, "a window past the end is an error");
  text_corpus_free(&c);
  CHECK(text_load(path, 10, 200, &c) != 0 && strstr(text_last_error(), "too short"), "short text: %s", text_last_error());
  unlink(path);
  CHECK(text_load(path, 10, 9, &c) != 0 && strstr(text_last_error(), "jargon-text") &&
        strstr(text_last_error(), path), "missing file names the file and the package: %s", text_last_error());
}

int main(void) {
  gpt_config tiny = {16, 5, 2, 2, 8, 2};
  double w1 = check_grads(tiny, 1, "tiny model, every element");
  gpt_config longer = {16, 70, 1, 2, 8, 1}; /* more rows than one attention block */
  double w2 = check_grads(longer, 3, "context 70, every third element");
  printf("worst relative gradient error: %.3g (tiny), %.3g (context 70)\n", w1, w2);
  check_accumulation_and_hook();
  check_pieces();
  check_bf16();
  check_data();
  gpt_config bad = {16, 5, 2, 3, 8, 2};
  gpt *m = NULL;
  CHECK(gpt_create(&m, &bad) != 0 && strstr(gpt_last_error(), "n_head") && !m, "width not divisible by heads: %s", gpt_last_error());
#ifdef GPT_EXPECT_OPENBLAS /* the build found OpenBLAS: the library must use it */
  CHECK(strncmp(gpt_matmul_backend(), "OpenBLAS", 8) == 0,
        "OpenBLAS was found at configure time but the products run on: %s", gpt_matmul_backend());
#endif
  printf("matrix products: %s\n", gpt_matmul_backend());
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
