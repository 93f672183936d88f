/* PowerSGD (comm_hook ACC_COMM_HOOK_POWERSGD, src/train/powersgd.c), run by the launcher at 1..3
 * processes, on a model of a bias (7), a 3x4 matrix (too small to compress at rank 1), a 64x50
 * matrix and an 8x6x5 tensor (an 8x30 matrix):
 *  - before ACCELERATE_POWERSGD_START_ITER steps, and always for the bias and the 3x4 matrix, the
 *    gradients are bit for bit those of the uncompressed average;
 *  - when every process's 64x50 gradient has rank 1 and the rank is the number of processes,
 *    the compressed average is the mean (the mean has that rank: PowerSGD is exact there);
 *  - rank 1 on full-rank gradients loses on one step, and with error feedback the mean of the
 *    applied gradients over steps of constant gradients approaches the mean like 1/steps (the
 *    error stays bounded): within 5 % after 400 steps, 4x closer than after 50;
 *  - every process gets the same bits; gradients attached after prepare_model are compressed
 *    the same; at 1 process nothing changes;
 *  - ACCELERATE_COMM_HOOK=power_sgd selects it; a rank of 0 and zero_stage 1 are errors naming
 *    the setting. */
#include <math.h>

#include "acc_test.h"

#define NP 4
static const int64_t shapes[NP][3] = {{7, 0, 0}, {3, 4, 0}, {64, 50, 0}, {8, 6, 5}};
static const int ndims[NP] = {1, 2, 2, 3};
static const size_t numel[NP] = {7, 12, 3200, 240};
#define TOTAL (7 + 12 + 3200 + 240)

static int rank, nprocs;
static acc_state *st;

typedef struct net {
  float data[TOTAL], *buf, *grad[NP];
  acc_model *m;
  acc_accelerator *acc;
} net;

/* Rank r's gradient: full rank (kind 0) or, for the 64x50 matrix, u_r v_r^T (kind 1). */
static float gval(int r, int i, size_t k, int kind) {
  if (kind == 1 && i == 2) {
    size_t row = k / 50, col = k % 50;
    return (0.5f + 0.01f * (float)((row * 7 + (size_t)r * 3) % 13)) * (0.2f - 0.03f * (float)((col + (size_t)r) % 11));
  }
  return 0.1f * (float)(r + 1) + 0.37f * (float)i - 0.013f * (float)(k % 61) + 0.002f * (float)((k * 7919) % 101);
}

static void net_init(net *n, int hook, int late) {
  memset(n, 0, sizeof *n);
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.comm_hook = hook;
  REQUIRE_OK(acc_accelerator_create(&n->acc, &ao));
  n->buf = calloc(TOTAL, sizeof(float));
  REQUIRE_OK(acc_model_create(&n->m));
  size_t off = 0;
  for (int i = 0; i < NP; i++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", i);
    n->grad[i] = n->buf + off;
    REQUIRE_OK(acc_model_add_parameter(n->m, name, n->data + off, late ? NULL : n->grad[i], ndims[i], shapes[i]));
    off += numel[i];
  }
  REQUIRE_OK(acc_accelerator_prepare_model(n->acc, n->m));
  if (late)
    for (int i = 0; i < NP; i++) REQUIRE_OK(acc_model_set_grad(n->m, (size_t)i, n->grad[i]));
}

static void net_free(net *n) {
  acc_accelerator_destroy(n->acc);
  acc_model_destroy(n->m);
  free(n->buf);
}

static void step(net *n, int kind) {
  REQUIRE_OK(acc_accelerator_accumulate(n->acc));
  for (int i = 0; i < NP; i++)
    for (size_t k = 0; k < numel[i]; k++) n->grad[i][k] = gval(rank, i, k, kind);
  REQUIRE_OK(acc_accelerator_backward(n->acc));
}

static double mean_of(int i, size_t k, int kind) {
  double s = 0;
  for (int r = 0; r < nprocs; r++) s += gval(r, i, k, kind);
  return s / nprocs;
}

/* relative L2 distance of parameter i's gradient (or of x) from the mean */
static double rel_err(const float *x, int i, int kind) {
  double d = 0, nn = 0;
  for (size_t k = 0; k < numel[i]; k++) {
    double m = mean_of(i, k, kind);
    d += (x[k] - m) * (x[k] - m);
    nn += m * m;
  }
  return sqrt(d / nn);
}

static void test_start_iter_and_small(void) {
  setenv("ACCELERATE_POWERSGD_START_ITER", "2", 1);
  setenv("ACCELERATE_POWERSGD_RANK", "1", 1);
  net a, b;
  net_init(&a, ACC_COMM_HOOK_POWERSGD, 0);
  net_init(&b, ACC_COMM_HOOK_NONE, 0);
  for (int s = 0; s < 3; s++) {
    step(&a, 0);
    step(&b, 0);
    for (int i = 0; i < NP; i++) {
      int same = memcmp(a.grad[i], b.grad[i], numel[i] * sizeof(float)) == 0;
      if (s < 2 || i < 2 || nprocs == 1)
        CHECK(same, "step %d, parameter %d: differs from the uncompressed average", s, i);
      else
        CHECK(!same, "step %d, parameter %d: not compressed", s, i);
    }
  }
  if (nprocs > 1) CHECK(rel_err(a.grad[2], 2, 0) > 0.05, "rank 1 of a full-rank mean should lose");
  float all[TOTAL * 8];
  REQUIRE_OK(acc_all_gather(st, a.buf, all, TOTAL, ACC_F32));
  for (int r = 1; r < nprocs; r++)
    CHECK(memcmp(all, all + (size_t)r * TOTAL, TOTAL * sizeof(float)) == 0, "rank %d's gradients differ", r);
  net_free(&a);
  net_free(&b);
}

static void test_exact_low_rank(void) {
  char r[8];
  snprintf(r, sizeof r, "%d", nprocs);
  setenv("ACCELERATE_POWERSGD_START_ITER", "0", 1);
  setenv("ACCELERATE_POWERSGD_RANK", r, 1);
  for (int late = 0; late <= 1; late++) {
    net a;
    net_init(&a, ACC_COMM_HOOK_POWERSGD, late);
    for (int s = 0; s < 2; s++) {
      step(&a, 1);
      double e = rel_err(a.grad[2], 2, 1);
      CHECK(e < 1e-4, "late %d, step %d: rank-%d means approximated at rank %d: error %.3g", late, s, nprocs,
            nprocs, e);
    }
    net_free(&a);
  }
}

static void test_error_feedback(void) {
  setenv("ACCELERATE_POWERSGD_START_ITER", "0", 1);
  setenv("ACCELERATE_POWERSGD_RANK", "1", 1);
  net a;
  net_init(&a, ACC_COMM_HOOK_POWERSGD, 0);
  static float sum[3200], avg[3200];
  memset(sum, 0, sizeof sum);
  enum { T1 = 50, T2 = 400 };
  double first = 0, at1 = 0, at2 = 0;
  for (int s = 1; s <= T2; s++) {
    step(&a, 0);
    if (s == 1) first = rel_err(a.grad[2], 2, 0);
    for (size_t k = 0; k < numel[2]; k++) sum[k] += a.grad[2][k];
    if (s == T1 || s == T2) {
      for (size_t k = 0; k < numel[2]; k++) avg[k] = sum[k] / (float)s;
      *(s == T1 ? &at1 : &at2) = rel_err(avg, 2, 0);
    }
  }
  if (nprocs > 1) { /* the mean of the applied gradients is the mean minus the error / steps */
    CHECK(first > 0.05, "one step at rank 1 should lose (error %.3g)", first);
    CHECK(at1 < first && at2 < at1 / 4 && at2 < 0.05,
          "error feedback: the mean of the applied gradients is %.3g from the mean after %d steps, "
          "%.3g after %d (one step: %.3g); expected it to shrink like 1/steps", at1, T1, at2, T2, first);
  }
  net_free(&a);
}

static void test_settings(void) {
  setenv("ACCELERATE_COMM_HOOK", "power_sgd", 1);
  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  CHECK(acc_accelerator_comm_hook(acc) == ACC_COMM_HOOK_POWERSGD, "ACCELERATE_COMM_HOOK=power_sgd gave %d",
        acc_accelerator_comm_hook(acc));
  acc_accelerator_destroy(acc);
  setenv("ACCELERATE_POWERSGD_RANK", "0", 1);
  acc_result rc = acc_accelerator_create(&acc, NULL);
  CHECK(rc != ACC_OK && strstr(acc_last_error(), "ACCELERATE_POWERSGD_RANK"), "rank 0: %s", acc_last_error());
  if (rc == ACC_OK) acc_accelerator_destroy(acc);
  setenv("ACCELERATE_POWERSGD_RANK", "1", 1);
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.zero_stage = 1;
  rc = acc_accelerator_create(&acc, &ao);
  CHECK(rc != ACC_OK && strstr(acc_last_error(), "power_sgd"), "zero 1: %s", acc_last_error());
  if (rc == ACC_OK) acc_accelerator_destroy(acc);
  unsetenv("ACCELERATE_COMM_HOOK");
}

int main(void) {
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  test_start_iter_and_small();
  test_exact_low_rank();
  test_error_feedback();
  test_settings();
  acc_state_destroy(st);
  return acc_test_finish("accel_powersgd");
}
