/* FSDP on a device (docs/fsdp.md, "On a device") through the real launcher. The program's forward
 * and backward are host code staged through acc_accelerator_memcpy (parameters copied out of the
 * gathered buffer, gradients added into the device gradient buffer through a host copy), so the
 * same program runs on the CPU, the strict fake device (ACCELERATE_TEST_DEVICE=fake) and a GPU.
 *
 *   test_fsdp_device train STRATEGY DEVICE OUT
 *       the MLP of test_fsdp.c (3 layers, 4 units, one smaller than 4 elements) trained 50 steps
 *       with AdamW (weight decay), clipping and 2 accumulation micro-steps (the first under
 *       no_sync) under STRATEGY and, side by side, NO_SHARD, on DEVICE (cpu, fake or cuda): the
 *       parameters must agree to 1e-5 relative, the clip norms too; the library's optimizer steps
 *       the device shards. Process 0 writes the STRATEGY run's final parameters and clip norms to
 *       OUT (a CPU run's file and a fake-device run's must be byte-identical: `same`).
 *   test_fsdp_device same A B [TOL]       the files are identical (TOL: within TOL relative).
 *   test_fsdp_device save STRATEGY DEVICE DIR [FULL]
 *       25 steps, acc_fsdp_save_state (SHARDED_STATE_DICT; FULL: FULL_STATE_DICT) into DIR/ckpt, 25
 *       more; process 0 writes the final parameters to DIR/expected.
 *   test_fsdp_device resume STRATEGY DEVICE DIR
 *       a new run takes one step of its own (so that the device optimizer state exists and differs),
 *       loads DIR/ckpt, trains steps 25-49: its parameters must be DIR/expected bit for bit (on
 *       the saving process count; DEVICE may differ from the saving run's).
 *   test_fsdp_device fault              (fake device, one process) the pointers the begin calls
 *       return and the shards under acc_fsdp_model are device memory: a host read or write dies by
 *       SIGSEGV; a released buffer reads back NaN through a device copy, and a write into it (a
 *       device copy) is reported by the next begin call; prepare from init_params in device
 *       memory gives the shards prepare from host memory gives.
 *   test_fsdp_device probe              exit 77 unless a CUDA GPU is usable.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "accelerate.h"
#include "device/device.h" /* the CUDA probe; also ACC_CHECK (return on error) */

enum { D = 7, H = 13, O = 3, G = 12, STEPS = 50, HALF = 25, MICRO = 2 };

static const acc_param_spec table[] = {
    {"l1.w", 2, {H, D}}, {"l1.b", 1, {H}}, {"l2.w", 2, {H, H}}, {"l2.b", 1, {H}}, {"l3.w", 2, {O, H}}, {"l3.b", 1, {O}},
};
enum { NROWS = 6, NUMEL = H * D + H + H * H + H + O * H + O };

static acc_accelerator *acc;
static int rank, world;

static float sample(size_t g, int k, int step) { return (float)sin(0.7 * (double)g + 1.3 * k + 0.17 * step); }

typedef struct run {
  acc_fsdp *f;
  acc_optimizer *opt;
  size_t u[4];
} run;

static int sdt = ACC_FSDP_SHARDED_STATE_DICT; /* save / resume: the last argument FULL: FULL_STATE_DICT */

static int dev_init; /* fault: init_params in device memory */

static acc_result make_run(run *r, int strategy) {
  acc_fsdp_plugin pl = ACC_FSDP_PLUGIN_INIT;
  pl.sharding_strategy = strategy;
  pl.state_dict_type = sdt;
  ACC_CHECK(acc_fsdp_create(acc, table, NROWS, ACC_F32, &pl, &r->f));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer1", 0, 2, &r->u[0]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "layer2", 2, 2, &r->u[1]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head", 4, 1, &r->u[2]));
  ACC_CHECK(acc_fsdp_add_unit(r->f, "head_bias", 5, 1, &r->u[3]));
  float *p = malloc(NUMEL * sizeof *p); /* host memory: the library copies its ranges to the device */
  for (size_t i = 0; i < NUMEL; i++) p[i] = 0.4f * (float)cos(0.91 * (double)i);
  float *d = NULL;
  acc_result rc = ACC_OK;
  if (dev_init) {
    rc = acc_accelerator_alloc(acc, NUMEL * sizeof *p, (void **)&d);
    if (rc == ACC_OK) rc = acc_accelerator_memcpy(acc, d, p, NUMEL * sizeof *p, ACC_COPY_HOST_TO_DEVICE);
  }
  if (rc == ACC_OK) rc = acc_fsdp_prepare(r->f, dev_init ? d : p);
  acc_accelerator_free(acc, d);
  free(p);
  ACC_CHECK(rc);
  acc_adamw_options ao;
  acc_adamw_options_init(&ao, ACC_ADAMW_OPTIONS_VERSION);
  ao.lr = 0.01;
  ao.weight_decay = 0.05;
  return acc_optimizer_create_adamw(&r->opt, acc_fsdp_model(r->f), &ao);
}

static void free_run(run *r) {
  acc_optimizer_destroy(r->opt);
  acc_fsdp_destroy(r->f);
}

/* the staging of a host program on a device */
static acc_result fetch(float *h, const float *d, size_t n) {
  return acc_accelerator_memcpy(acc, h, d, n * sizeof(float), ACC_COPY_DEVICE_TO_HOST);
}

/* d += h, through a host copy of d */
static acc_result add_into(float *d, const float *h, size_t n) {
  float tmp[H * H + H];
  ACC_CHECK(fetch(tmp, d, n));
  for (size_t i = 0; i < n; i++) tmp[i] += h[i];
  return acc_accelerator_memcpy(acc, d, tmp, n * sizeof(float), ACC_COPY_HOST_TO_DEVICE);
}

static void affine(const float *w, const float *b, const float *x, float *y, int out, int in) {
  for (int o = 0; o < out; o++) {
    float s = b[o];
    for (int i = 0; i < in; i++) s += w[o * in + i] * x[i];
    y[o] = s;
  }
}

/* One micro-step of test_fsdp.c's MLP, staged. */
static acc_result micro_step(run *r, int step, int micro) {
  int per = G / world;
  float x[G][D], h1[G][H], h2[G][H], y[G][O];
  float w1[H * D + H], w2[H * H + H], w3[O * H], w3b[O];
  const float *p;
  for (int s = 0; s < per; s++)
    for (int k = 0; k < D; k++) x[s][k] = sample((size_t)(rank * per + s), k, step * MICRO + micro);
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[0], &p));
  ACC_CHECK(fetch(w1, p, H * D + H));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[0]));
  for (int s = 0; s < per; s++) {
    affine(w1, w1 + H * D, x[s], h1[s], H, D);
    for (int k = 0; k < H; k++) h1[s][k] = tanhf(h1[s][k]);
  }
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[1], &p));
  ACC_CHECK(fetch(w2, p, H * H + H));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[1]));
  for (int s = 0; s < per; s++) {
    affine(w2, w2 + H * H, h1[s], h2[s], H, H);
    for (int k = 0; k < H; k++) h2[s][k] = tanhf(h2[s][k]);
  }
  const float *p3, *p3b;
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[2], &p3)); /* two units gathered at once */
  ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[3], &p3b));
  ACC_CHECK(fetch(w3, p3, O * H));
  ACC_CHECK(fetch(w3b, p3b, O));
  for (int s = 0; s < per; s++) affine(w3, w3b, h2[s], y[s], O, H);
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[2]));
  const float scale = (float)world / (float)(G * MICRO);
  float dy[G][O], dh2[G][H], dh1[G][H];
  for (int s = 0; s < per; s++)
    for (int o = 0; o < O; o++) dy[s][o] = (y[s][o] - sample((size_t)(rank * per + s), 100 + o, step)) * scale;
  float *g, *gb;
  float hg[H * H + H], hgb[O];
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[3], &p3b, &gb));
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[2], &p3, &g));
  ACC_CHECK(fetch(w3, p3, O * H));
  memset(hg, 0, sizeof hg);
  memset(hgb, 0, sizeof hgb);
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh2[s][k] = 0;
    for (int o = 0; o < O; o++) {
      for (int k = 0; k < H; k++) {
        hg[o * H + k] += dy[s][o] * h2[s][k];
        dh2[s][k] += w3[o * H + k] * dy[s][o];
      }
      hgb[o] += dy[s][o];
    }
    for (int k = 0; k < H; k++) dh2[s][k] *= 1 - h2[s][k] * h2[s][k];
  }
  ACC_CHECK(add_into(g, hg, O * H));
  ACC_CHECK(add_into(gb, hgb, O));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[2]));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[3]));
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[1], &p, &g));
  ACC_CHECK(fetch(w2, p, H * H + H));
  memset(hg, 0, sizeof hg);
  for (int s = 0; s < per; s++) {
    for (int k = 0; k < H; k++) dh1[s][k] = 0;
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < H; k++) {
        hg[o * H + k] += dh2[s][o] * h1[s][k];
        dh1[s][k] += w2[o * H + k] * dh2[s][o];
      }
      hg[H * H + o] += dh2[s][o];
    }
    for (int k = 0; k < H; k++) dh1[s][k] *= 1 - h1[s][k] * h1[s][k];
  }
  ACC_CHECK(add_into(g, hg, H * H + H));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[1]));
  ACC_CHECK(acc_fsdp_unit_backward_begin(r->f, r->u[0], &p, &g));
  memset(hg, 0, sizeof hg);
  for (int s = 0; s < per; s++)
    for (int o = 0; o < H; o++) {
      for (int k = 0; k < D; k++) hg[o * D + k] += dh1[s][o] * x[s][k];
      hg[H * D + o] += dh1[s][o];
    }
  ACC_CHECK(add_into(g, hg, H * D + H));
  ACC_CHECK(acc_fsdp_unit_backward_end(r->f, r->u[0]));
  return ACC_OK;
}

static acc_result train_step(run *r, int step, float *norm) {
  for (int m = 0; m < MICRO; m++) {
    ACC_CHECK(acc_fsdp_set_no_sync(r->f, m < MICRO - 1)); /* the first micro-step under no_sync */
    ACC_CHECK(micro_step(r, step, m));
  }
  ACC_CHECK(acc_fsdp_clip_grad_norm(r->f, 0.5f, 2.0, norm));
  ACC_CHECK(acc_optimizer_step(r->opt));
  return acc_optimizer_zero_grad(r->opt);
}

/* The full parameters, gathered as a forward does (every process). */
static acc_result full_params(run *r, float *out) {
  size_t off = 0;
  for (int k = 0; k < 4; k++) {
    const float *p;
    size_t n;
    ACC_CHECK(acc_fsdp_unit_info(r->f, r->u[k], NULL, NULL, NULL, &n));
    ACC_CHECK(acc_fsdp_unit_forward_begin(r->f, r->u[k], &p));
    ACC_CHECK(fetch(out + off, p, n));
    ACC_CHECK(acc_fsdp_unit_forward_end(r->f, r->u[k]));
    off += n;
  }
  return acc_fsdp_reshard(r->f);
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-6);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
  }
  return worst;
}

static int parse_strategy(const char *s) {
  return !strcmp(s, "FULL_SHARD") ? ACC_FSDP_FULL_SHARD : !strcmp(s, "SHARD_GRAD_OP") ? ACC_FSDP_SHARD_GRAD_OP
         : !strcmp(s, "NO_SHARD") ? ACC_FSDP_NO_SHARD : ACC_UNSET;
}

static void open_acc(const char *device) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  acc_device_type want = !strcmp(device, "cpu") ? ACC_DEVICE_CPU : !strcmp(device, "cuda") ? ACC_DEVICE_CUDA
                                                                                           : ACC_DEVICE_FAKE;
  o.device = want == ACC_DEVICE_FAKE ? ACC_DEVICE_AUTO : want; /* AUTO + ACCELERATE_TEST_DEVICE=fake */
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  rank = acc_state_process_index(acc_accelerator_state(acc));
  world = acc_state_num_processes(acc_accelerator_state(acc));
  acc_test_rank = world > 1 ? rank : -1;
  if (acc_accelerator_device_type(acc) != want) {
    fprintf(stderr, "FATAL: the accelerator trains on %s, not %s (ACCELERATE_TEST_DEVICE=fake for the fake device)\n",
            acc_accelerator_device_name(acc), device);
    exit(1);
  }
}

static int write_file(const char *path, const void *a, size_t an, const void *b, size_t bn) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return 0;
  int ok = fwrite(a, 1, an, fp) == an && (!bn || fwrite(b, 1, bn, fp) == bn);
  return fclose(fp) == 0 && ok;
}

static size_t read_file(const char *path, void *buf, size_t cap) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return 0;
  size_t n = fread(buf, 1, cap, fp);
  fclose(fp);
  return n;
}

static void test_train(int strategy, const char *out) {
  run a = {0}, ref = {0};
  REQUIRE_OK(make_run(&a, strategy));
  REQUIRE_OK(make_run(&ref, ACC_FSDP_NO_SHARD));
  float norms[STEPS], pa[NUMEL], pr[NUMEL];
  double worst_norm = 0;
  for (int s = 0; s < STEPS; s++) {
    float nr = 0;
    REQUIRE_OK(train_step(&a, s, &norms[s]));
    REQUIRE_OK(train_step(&ref, s, &nr));
    double d = fabs((double)norms[s] - nr) / (fabs((double)nr) + 1e-12);
    if (d > worst_norm) worst_norm = d;
  }
  CHECK(worst_norm <= 1e-5, "clip norms differ by %g relative", worst_norm);
  REQUIRE_OK(full_params(&a, pa));
  REQUIRE_OK(full_params(&ref, pr));
  double d = rel_diff(pa, pr, NUMEL);
  CHECK(d <= 1e-5, "parameters differ from NO_SHARD by %g relative", d);
  int moved = 0;
  for (size_t i = 0; i < NUMEL; i++) moved |= pa[i] != 0.4f * (float)cos(0.91 * (double)i);
  CHECK(moved, "the parameters were trained");
  acc_fsdp_memory m;
  REQUIRE_OK(acc_fsdp_memory_stats(a.f, &m));
  CHECK(m.pool_buffers > 0 || strategy == ACC_FSDP_NO_SHARD, "unit buffers were used");
  if (rank == 0) CHECK(write_file(out, pa, sizeof pa, norms, sizeof norms), "wrote %s", out);
  printf("train: %s on %s, %d processes: parameters within %.3g of NO_SHARD, clip norms within %.3g\n",
         acc_fsdp_strategy(a.f) == ACC_FSDP_FULL_SHARD ? "FULL_SHARD" : "SHARD_GRAD_OP",
         acc_accelerator_device_name(acc), world, d, worst_norm);
  free_run(&a);
  free_run(&ref);
}

static int test_same(const char *pa, const char *pb, double tol) {
  static unsigned char a[1 << 16], b[1 << 16];
  size_t na = read_file(pa, a, sizeof a), nb = read_file(pb, b, sizeof b);
  CHECK(na > 0 && na == nb, "%s (%zu bytes) and %s (%zu bytes) exist with the same size", pa, na, pb, nb);
  if (na != nb || !na) return acc_test_finish("same");
  if (tol == 0) {
    CHECK(memcmp(a, b, na) == 0, "%s and %s are byte-identical", pa, pb);
  } else {
    double d = rel_diff((const float *)(void *)a, (const float *)(void *)b, NUMEL);
    CHECK(d <= tol, "%s and %s agree to %g relative (%g)", pa, pb, tol, d);
  }
  return acc_test_finish("same");
}

static char *join(const char *dir, const char *name) {
  static char buf[2][4096];
  static int k;
  k ^= 1;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static void test_save(int strategy, const char *dir) {
  run r = {0};
  REQUIRE_OK(make_run(&r, strategy));
  float norm, p[NUMEL];
  for (int s = 0; s < HALF; s++) REQUIRE_OK(train_step(&r, s, &norm));
  CHECK_OK(acc_fsdp_save_state(r.f, r.opt, join(dir, "ckpt")));
  for (int s = HALF; s < STEPS; s++) REQUIRE_OK(train_step(&r, s, &norm));
  REQUIRE_OK(full_params(&r, p));
  if (rank == 0) CHECK(write_file(join(dir, "expected"), p, sizeof p, NULL, 0), "wrote the expected parameters");
  free_run(&r);
}

static void test_resume(int strategy, const char *dir) {
  run r = {0};
  REQUIRE_OK(make_run(&r, strategy));
  float norm, p[NUMEL], want[NUMEL];
  /* a step of its own first: the device optimizer state exists, and the load must replace it */
  REQUIRE_OK(train_step(&r, 7, &norm));
  CHECK_OK(acc_fsdp_load_state(r.f, r.opt, join(dir, "ckpt")));
  for (int s = HALF; s < STEPS; s++) REQUIRE_OK(train_step(&r, s, &norm));
  REQUIRE_OK(full_params(&r, p));
  CHECK(read_file(join(dir, "expected"), want, sizeof want) == sizeof want, "read the expected parameters");
  CHECK(memcmp(p, want, sizeof p) == 0, "the resumed run ends bit for bit where the uninterrupted one did "
        "(largest difference %g relative)", rel_diff(p, want, NUMEL));
  free_run(&r);
}

/* ---- fault ---------------------------------------------------------------------------------- */

static const float *touch_p;
static volatile float sink;

/* 1 when touch (read or write of touch_p) died by SIGSEGV (or ASan's SEGV report) in a child */
static int faults(int write) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    if (write) ((volatile float *)(uintptr_t)touch_p)[0] = 1.0f;
    else sink = touch_p[0];
    _exit(0);
  }
  close(fds[1]);
  char err[8192];
  size_t got = 0;
  ssize_t n;
  while ((n = read(fds[0], err + got, sizeof err - 1 - got)) > 0) got += (size_t)n;
  err[got] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return 1;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(err, "SEGV")) return 1;
  return 0;
}

static void test_fault(void) {
  run r = {0};
  REQUIRE_OK(make_run(&r, ACC_FSDP_FULL_SHARD));
  const float *p;
  float *g;
  REQUIRE_OK(acc_fsdp_unit_forward_begin(r.f, r.u[1], &p));
  touch_p = p;
  CHECK(faults(0) == 1, "a host read of the gathered parameters dies");
  CHECK(faults(1) == 1, "a host write into the gathered parameters dies");
  CHECK(acc_accelerator_is_device_pointer(acc, p), "the gathered parameters are device memory");
  REQUIRE_OK(acc_fsdp_unit_forward_end(r.f, r.u[1]));
  const acc_param *shard = acc_model_parameter(acc_fsdp_model(r.f), 1);
  touch_p = shard->data;
  CHECK(faults(0) == 1, "a host read of the parameter shard dies");
  touch_p = shard->grad;
  CHECK(faults(1) == 1, "a host write into the gradient shard dies");
  REQUIRE_OK(acc_fsdp_unit_backward_begin(r.f, r.u[1], &p, &g));
  touch_p = g;
  CHECK(faults(1) == 1, "a host write into the gradient buffer dies");
  REQUIRE_OK(acc_fsdp_unit_backward_end(r.f, r.u[1]));
  /* released: NaN through a device copy; a device write into it is reported by the next begin */
  float v[4] = {0};
  REQUIRE_OK(fetch(v, p, 4));
  CHECK(isnan(v[0]) && isnan(v[3]), "a released parameter buffer reads NaN (%g %g)", (double)v[0], (double)v[3]);
  float one = 1.0f;
  REQUIRE_OK(acc_accelerator_memcpy(acc, (float *)(uintptr_t)p + 2, &one, sizeof one, ACC_COPY_HOST_TO_DEVICE));
  CHECK_ERR(acc_fsdp_unit_forward_begin(r.f, r.u[0], &p), ACC_ERR_INVALID_USAGE,
            "buffer of unit 'layer2' was written after the unit ended (element 2)");
  /* a 16-bit table is refused on a device, with a sentence (its conversions are host loops) */
  acc_fsdp *f16 = NULL;
  CHECK_ERR(acc_fsdp_create(acc, table, NROWS, ACC_BF16, NULL, &f16), ACC_ERR_NOT_SUPPORTED,
            "16-bit FSDP runs on the CPU");
  CHECK(f16 == NULL, "a refused create returns no state");
  /* the library's optimizer runs on the device shards (a host loop would die here) */
  CHECK_OK(acc_optimizer_step(r.opt));
  CHECK_OK(acc_optimizer_zero_grad(r.opt));
  float clip = 0;
  CHECK_OK(acc_fsdp_clip_grad_norm(r.f, 1.0f, INFINITY, &clip));
  CHECK(clip == 0.0f, "the max norm of zero gradients is 0 (%g)", (double)clip);
  free_run(&r);
  /* init_params in device memory: the same shards as from host memory */
  run h = {0}, dv = {0};
  float ph[NUMEL], pd[NUMEL];
  REQUIRE_OK(make_run(&h, ACC_FSDP_FULL_SHARD));
  dev_init = 1;
  REQUIRE_OK(make_run(&dv, ACC_FSDP_FULL_SHARD));
  dev_init = 0;
  REQUIRE_OK(full_params(&h, ph));
  REQUIRE_OK(full_params(&dv, pd));
  CHECK(memcmp(ph, pd, sizeof ph) == 0 && ph[5] != 0.0f, "prepare from device memory gives the same parameters");
  free_run(&h);
  free_run(&dv);
}

static int probe(void) {
  acc__device_probe_info info;
  memset(&info, 0, sizeof info);
  if (acc__device_cuda_probe(&info) != ACC_OK) {
    printf("SKIP: no usable CUDA GPU here: %s\n", acc_last_error());
    return 77;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "probe")) return probe();
  if (argc >= 4 && !strcmp(argv[1], "same")) return test_same(argv[2], argv[3], argc > 4 ? atof(argv[4]) : 0);
  if (argc >= 2 && !strcmp(argv[1], "fault")) {
    open_acc("fake");
    test_fault();
  } else if (argc >= 5) {
    int strategy = parse_strategy(argv[2]);
    if (strategy == ACC_UNSET) {
      fprintf(stderr, "unknown strategy %s\n", argv[2]);
      return 2;
    }
    if (argc > 5 && !strcmp(argv[5], "FULL")) sdt = ACC_FSDP_FULL_STATE_DICT;
    open_acc(argv[3]);
    if (!strcmp(argv[1], "train")) test_train(strategy, argv[4]);
    else if (!strcmp(argv[1], "save")) test_save(strategy, argv[4]);
    else if (!strcmp(argv[1], "resume")) test_resume(strategy, argv[4]);
    else return 2;
  } else {
    fprintf(stderr, "usage: test_fsdp_device train|save|resume STRATEGY cpu|fake|cuda OUT | same A B [TOL] | "
                    "fault | probe\n");
    return 2;
  }
  int rc = acc_test_finish(argv[1]);
  acc_accelerator_destroy(acc);
  return rc;
}
