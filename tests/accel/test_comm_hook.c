/* Gradient compression (acc_accelerator_options.comm_hook, torch DDP's fp16/bf16 compress hooks),
 * run by the launcher at 1..4 processes:
 *  - for fp16 and bf16, contiguous (in place) and scattered (staged) gradients, small and large
 *    buckets (a 10,007-element parameter: the backend's chunked path), with and without overlap,
 *    the gradients after backward are bit for bit what compressing by hand gives: each process
 *    casts its gradient to the 16-bit type, divides by the number of processes in that type,
 *    acc_all_reduce sums in that type, the sum is cast back to f32;
 *  - the result is the same on every rank, within the 16-bit type's precision of the f32 mean,
 *    and (at 2+ processes) not the f32 result (the compression happened);
 *  - the same when the gradient buffers are attached after prepare_model (the buckets rebuilt);
 *  - at 1 process the gradients are untouched (no all-reduce, as Accelerate without DDP);
 *  - ACCELERATE_COMM_HOOK selects the hook when the option is unset; acc_accelerator_comm_hook
 *    reports it; an unknown value, an invalid option and a hook with zero_stage 1 are errors
 *    naming the setting. */
#include <math.h>

#include "acc_test.h"
#include "core/internal.h"

#define NP 5
static const size_t numel[NP] = {3, 5, 2, 7, 10007};
#define TOTAL (3 + 5 + 2 + 7 + 10007)

static int rank, nprocs;
static acc_state *st;

/* the casts by hand: the library's f32 <-> f16/bf16 conversions (round to nearest even) */
static uint16_t to_bf16(float f) { return acc__f32_to_bf16(f); }
static float from_bf16(uint16_t h) { return acc__bf16_to_f32(h); }
static uint16_t to_f16(float f) { return acc__f32_to_f16(f); }
static float from_f16(uint16_t h) { return acc__f16_to_f32(h); }

#include "accel/gmodel.h"

/* rank r's gradient element k of parameter i: many magnitudes, signs, some subnormal in f16 */
static float grad_value(int r, int i, size_t k) {
  float v = 0.1f * (float)(r + 1) + 0.37f * (float)i - 0.0131f * (float)(k % 977);
  v *= ldexpf(1.0f, (int)((k * 7 + (size_t)r) % 40) - 28);
  return (k + (size_t)i) % 3 == 0 ? -v : v;
}

static void flat(const gmodel *g, float *out) {
  size_t o = 0;
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < numel[i]; k++) out[o++] = g->grad[i][k];
}

/* Compressing by hand: the expected gradients. */
static void by_hand(int hook, float *out) {
  uint16_t *h = calloc(TOTAL, sizeof *h);
  size_t o = 0;
  float w = (float)nprocs;
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < numel[i]; k++, o++) {
      float g = grad_value(rank, i, k);
      h[o] = hook == ACC_COMM_HOOK_BF16 ? to_bf16(from_bf16(to_bf16(g)) / w) : to_f16(from_f16(to_f16(g)) / w);
    }
  if (nprocs > 1) {
    REQUIRE_OK(acc_all_reduce(st, h, h, TOTAL, hook == ACC_COMM_HOOK_BF16 ? ACC_BF16 : ACC_F16, ACC_SUM));
    for (size_t j = 0; j < TOTAL; j++) out[j] = hook == ACC_COMM_HOOK_BF16 ? from_bf16(h[j]) : from_f16(h[j]);
  } else { /* one process: no all-reduce at all, the gradient stays as it is */
    o = 0;
    for (int i = 0; i < NP; i++)
      for (size_t k = 0; k < numel[i]; k++) out[o++] = grad_value(rank, i, k);
  }
  free(h);
}

/* The gradients after one synchronizing backward with the given hook and layout. late: the
 * gradient buffers are replaced after prepare_model (acc_model_set_grad, as a program that
 * allocates its gradients in its first backward does), so the buckets are rebuilt. */
static void train_step_late(int hook, size_t gap, size_t cap_floats, int overlap, int late, float *out) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.comm_hook = hook;
  ao.overlap_grad_sync = overlap;
  ao.bucket_cap_bytes = cap_floats * sizeof(float);
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_comm_hook(acc) == hook, "comm_hook reported %d, set %d", acc_accelerator_comm_hook(acc), hook);
  gmodel g;
  gmodel_init(&g, gap);
  REQUIRE_OK(acc_accelerator_prepare_model(acc, g.m));
  float *moved = NULL;
  if (late) {
    moved = calloc(TOTAL + NP * gap + 1, sizeof(float));
    size_t off = 0;
    for (int i = 0; i < NP; i++) {
      g.grad[i] = moved + off;
      REQUIRE_OK(acc_model_set_grad(g.m, (size_t)i, g.grad[i]));
      off += numel[i] + gap;
    }
  }
  for (int step = 0; step < 2; step++) { /* the buffers are reused across steps */
    REQUIRE_OK(acc_accelerator_accumulate(acc));
    for (int i = NP - 1; i >= 0; i--) {
      for (size_t k = 0; k < numel[i]; k++) g.grad[i][k] = grad_value(rank, i, k);
      if (overlap) REQUIRE_OK(acc_accelerator_grad_ready(acc, (size_t)i));
    }
    REQUIRE_OK(acc_accelerator_backward(acc));
  }
  flat(&g, out);
  gmodel_free(&g);
  acc_accelerator_destroy(acc);
  free(moved);
}

static void train_step(int hook, size_t gap, size_t cap_floats, int overlap, float *out) {
  train_step_late(hook, gap, cap_floats, overlap, 0, out);
}

static void test_equal_to_by_hand(void) {
  float *want = calloc(TOTAL, sizeof(float)), *got = calloc(TOTAL, sizeof(float));
  float *f32 = calloc(TOTAL, sizeof(float));
  float *all = calloc((size_t)TOTAL * (size_t)nprocs, sizeof(float));
  train_step(ACC_COMM_HOOK_NONE, 0, 1u << 20, 0, f32);
  static const size_t caps[] = {8, 20000, 1u << 20};
  for (int hook = ACC_COMM_HOOK_FP16; hook <= ACC_COMM_HOOK_BF16; hook++) {
    const char *hn = hook == ACC_COMM_HOOK_FP16 ? "fp16" : "bf16";
    by_hand(hook, want);
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++)
      for (size_t gap = 0; gap <= 3; gap += 3)
        for (int overlap = 0; overlap <= 1; overlap++) {
          train_step(hook, gap, caps[c], overlap, got);
          size_t bad = 0, first = 0;
          for (size_t j = 0; j < TOTAL; j++)
            if (memcmp(&got[j], &want[j], 4) != 0 && bad++ == 0) first = j;
          CHECK(bad == 0, "%s, cap %zu floats, gap %zu, overlap %d: %zu of %d elements differ from "
                "compressing by hand, first [%zu] %a vs %a", hn, caps[c], gap, overlap, bad, TOTAL,
                first, (double)got[first], (double)want[first]);
        }
    /* gradients attached after prepare: the hook still applies to the rebuilt buckets */
    train_step_late(hook, 0, caps[0], 0, 1, got);
    CHECK(memcmp(got, want, sizeof(float) * TOTAL) == 0,
          "%s: gradients attached after prepare_model are not compressed as by hand", hn);
    REQUIRE_OK(acc_all_gather(st, got, all, TOTAL, ACC_F32));
    for (int r = 1; r < nprocs; r++)
      CHECK(memcmp(all, all + (size_t)r * TOTAL, TOTAL * sizeof(float)) == 0, "%s: rank %d differs", hn, r);
    /* close to the f32 mean, relative to the largest magnitude of the element's inputs */
    double worst = 0, tol = hook == ACC_COMM_HOOK_BF16 ? 1.6e-2 : 2e-3;
    size_t differ = 0, o = 0;
    for (int i = 0; i < NP; i++)
      for (size_t k = 0; k < numel[i]; k++, o++) {
        double mag = 0;
        for (int r = 0; r < nprocs; r++) mag = fmax(mag, fabs(grad_value(r, i, k)));
        if (mag < 1e-4) continue; /* f16 subnormals: absolute error only */
        worst = fmax(worst, fabs((double)got[o] - f32[o]) / mag);
        differ += memcmp(&got[o], &f32[o], 4) != 0;
      }
    CHECK(worst < tol, "%s: error %g relative to the inputs' magnitude (tolerance %g)", hn, worst, tol);
    if (nprocs > 1)
      CHECK(differ > 0, "%s: every element equals the f32 all-reduce: nothing was compressed", hn);
    else
      CHECK(differ == 0, "%s at 1 process: the gradients must stay untouched", hn);
  }
  free(want), free(got), free(f32), free(all);
}

static void test_settings(void) {
  acc_accelerator *acc = NULL;
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_comm_hook(acc) == ACC_COMM_HOOK_NONE, "default: no hook");
  acc_accelerator_destroy(acc);
  CHECK(acc_accelerator_comm_hook(NULL) == ACC_COMM_HOOK_NONE, "NULL handle");

  setenv("ACCELERATE_COMM_HOOK", "bf16", 1);
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_comm_hook(acc) == ACC_COMM_HOOK_BF16, "ACCELERATE_COMM_HOOK=bf16: got %d",
        acc_accelerator_comm_hook(acc));
  acc_accelerator_destroy(acc);
  ao.comm_hook = ACC_COMM_HOOK_FP16; /* the program's choice wins over the environment */
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  CHECK(acc_accelerator_comm_hook(acc) == ACC_COMM_HOOK_FP16, "option fp16 over env bf16: got %d",
        acc_accelerator_comm_hook(acc));
  acc_accelerator_destroy(acc);
  ao.comm_hook = ACC_UNSET;
  setenv("ACCELERATE_COMM_HOOK", "fp8", 1);
  CHECK_ERR(acc_accelerator_create(&acc, &ao), ACC_ERR_INVALID_ARGUMENT, "ACCELERATE_COMM_HOOK");
  unsetenv("ACCELERATE_COMM_HOOK");

  ao.comm_hook = 7;
  CHECK_ERR(acc_accelerator_create(&acc, &ao), ACC_ERR_INVALID_ARGUMENT, "comm_hook is 7");
  ao.comm_hook = ACC_COMM_HOOK_BF16;
  ao.zero_stage = 1;
  CHECK_ERR(acc_accelerator_create(&acc, &ao), ACC_ERR_INVALID_ARGUMENT, "zero_stage 1");
}

int main(void) {
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  test_settings();
  test_equal_to_by_hand();
  acc_state_destroy(st);
  return acc_test_finish("accel_comm_hook");
}
