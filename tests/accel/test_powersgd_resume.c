/* Exact resume under PowerSGD (src/ckpt/psgd_state.c), with real processes through the launcher,
 * on the CPU and on the strict fake device (parameters and gradients in device memory, reached
 * only through acc_accelerator_memcpy).
 *
 * The model: a 16x12 matrix and an 4x3x6 tensor (compressed at rank 1), a bias of 5 (exact), in
 * buckets of their own; SGD with momentum; the gradient depends on the parameters, the process
 * and the step, so every bit of the state shows in the end. PowerSGD compresses from step 2
 * (ACCELERATE_POWERSGD_START_ITER=2, set by CMake); 8 steps, a checkpoint after step 5.
 *
 * Usage (through accelerate launch; <dev> is cpu or fake):
 *   straight <dir> <dev>  the 8 steps without interruption; writes dir/straight_<rank>.bin
 *   save <dir> <dev>      5 steps, save_state(dir/ckpt), then a corrupt copy dir/bad (process
 *                         N-1's error feedback of the matrix saved transposed), one more step,
 *                         load_state(dir/bad) fails on every process with a message naming the
 *                         file, and the run goes on to step 8: it must end as the straight one
 *                         (the failed load left the hook's state as it was); then exits
 *   resume <dir> <dev>    a new process group: load_state(dir/ckpt), steps 6..8, bit for bit
 *                         the straight run's parameters
 *   other <dir> <dev>     at another number of processes: the load succeeds, process 0 logs that
 *                         PowerSGD starts fresh (ACCELERATE_LOG_FILE), the run ends finite
 * Without the saved state (before psgd_state.c) `resume` ends elsewhere: the error feedback and
 * the warm-started Q of steps 2..5 are gone. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "acc_test.h"

enum { NP = 3, STEPS = 8, SAVE_AT = 5 };
static const int64_t shapes[NP][3] = {{16, 12, 0}, {5, 0, 0}, {4, 3, 6}};
static const int ndims[NP] = {2, 1, 3};
static const size_t numel[NP] = {192, 5, 72};
#define TOTAL (192 + 5 + 72)

static int rank, nprocs, fake;
static const char *dir;

typedef struct run {
  acc_accelerator *acc;
  acc_model *m;
  acc_optimizer *opt;
  float *data, *grad;     /* the model's (device memory on the fake device) */
  float hd[TOTAL], hg[TOTAL]; /* the host's copies */
  int step;
} run;

static float hval(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 1) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86CD8B5ADull;
  x ^= x >> 29;
  return (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void run_open(run *r) {
  memset(r, 0, sizeof *r);
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.comm_hook = ACC_COMM_HOOK_POWERSGD;
  ao.device = fake ? ACC_DEVICE_AUTO : ACC_DEVICE_CPU;
  ao.bucket_cap_bytes = 200 * sizeof(float); /* one bucket per tensor */
  REQUIRE_OK(acc_accelerator_create(&r->acc, &ao));
  rank = acc_state_process_index(acc_accelerator_state(r->acc));
  nprocs = acc_state_num_processes(acc_accelerator_state(r->acc));
  acc_test_rank = nprocs > 1 ? rank : -1;
  if (fake && acc_accelerator_device_type(r->acc) != ACC_DEVICE_FAKE) {
    fprintf(stderr, "FATAL: the fake device is not in use (ACCELERATE_TEST_DEVICE=fake)\n");
    exit(1);
  }
  REQUIRE_OK(acc_accelerator_alloc(r->acc, TOTAL * sizeof(float), (void **)&r->data));
  REQUIRE_OK(acc_accelerator_alloc(r->acc, TOTAL * sizeof(float), (void **)&r->grad));
  for (size_t k = 0; k < TOTAL; k++) r->hd[k] = 0.5f * hval(7, 0, k); /* process 0's reach everyone */
  REQUIRE_OK(acc_accelerator_memcpy(r->acc, r->data, r->hd, sizeof r->hd, ACC_COPY_HOST_TO_DEVICE));
  REQUIRE_OK(acc_model_create(&r->m));
  size_t off = 0;
  for (int i = 0; i < NP; i++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", i);
    REQUIRE_OK(acc_model_add_parameter(r->m, name, r->data + off, r->grad + off, ndims[i], shapes[i]));
    off += numel[i];
  }
  REQUIRE_OK(acc_accelerator_prepare_model(r->acc, r->m));
  acc_sgd_options so = ACC_SGD_OPTIONS_INIT;
  so.lr = 0.05;
  so.momentum = 0.9;
  REQUIRE_OK(acc_optimizer_create_sgd(&r->opt, r->m, &so));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(r->acc, r->opt));
}

static void run_close(run *r) {
  acc_optimizer_destroy(r->opt);
  acc_model_destroy(r->m);
  acc_accelerator_free(r->acc, r->data);
  acc_accelerator_free(r->acc, r->grad);
  acc_accelerator_destroy(r->acc);
}

/* One step: the gradient from the parameters (host copy), the process and the step. */
static void run_step(run *r) {
  REQUIRE_OK(acc_accelerator_memcpy(r->acc, r->hd, r->data, sizeof r->hd, ACC_COPY_DEVICE_TO_HOST));
  REQUIRE_OK(acc_accelerator_accumulate(r->acc));
  for (size_t k = 0; k < TOTAL; k++)
    r->hg[k] = (0.3f + 0.2f * (float)rank) * r->hd[k] + hval((uint64_t)rank, (uint64_t)r->step, k);
  REQUIRE_OK(acc_accelerator_memcpy(r->acc, r->grad, r->hg, sizeof r->hg, ACC_COPY_HOST_TO_DEVICE));
  REQUIRE_OK(acc_accelerator_backward(r->acc));
  REQUIRE_OK(acc_accelerator_optimizer_step(r->acc, r->opt));
  r->step++;
}

static void params_host(run *r, float *out) {
  REQUIRE_OK(acc_accelerator_memcpy(r->acc, out, r->data, TOTAL * sizeof(float), ACC_COPY_DEVICE_TO_HOST));
}

static char *path_of(const char *name) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

static void write_params(run *r, const char *what) {
  float p[TOTAL];
  params_host(r, p);
  char name[64];
  snprintf(name, sizeof name, "%s_%d.bin", what, rank);
  FILE *f = fopen(path_of(name), "wb");
  REQUIRE_OK(f && fwrite(p, sizeof p, 1, f) == 1 ? ACC_OK : ACC_ERR_IO);
  fclose(f);
}

static int compare_with_straight(run *r, const char *what) {
  float p[TOTAL], s[TOTAL];
  params_host(r, p);
  char name[64];
  snprintf(name, sizeof name, "straight_%d.bin", rank);
  FILE *f = fopen(path_of(name), "rb");
  CHECK(f && fread(s, sizeof s, 1, f) == 1, "reading %s (run `straight` first)", path_of(name));
  if (f) fclose(f);
  int diff = 0;
  double most = 0;
  for (size_t k = 0; k < TOTAL; k++) {
    if (memcmp(&p[k], &s[k], sizeof(float)) != 0) diff++;
    double d = fabs((double)p[k] - (double)s[k]);
    if (d > most) most = d;
  }
  CHECK(diff == 0, "%s: %d of %d parameters differ from the uninterrupted run (largest difference %.3g)", what,
        diff, TOTAL, most);
  return diff;
}

/* dir/bad: a copy of dir/ckpt whose last process's matrix error feedback is saved transposed
 * (the same bytes, [12, 16] instead of [16, 12]): only the PowerSGD staging can notice. */
static void make_bad_copy(void) {
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/bad' && cp -r '%s/ckpt' '%s/bad'", dir, dir, dir);
  REQUIRE_OK(system(cmd) == 0 ? ACC_OK : ACC_ERR_IO);
  char name[64];
  snprintf(name, sizeof name, "bad/powersgd_%d.safetensors", nprocs - 1);
  char path[4096];
  snprintf(path, sizeof path, "%s", path_of(name));
  acc_safetensors *f = NULL;
  REQUIRE_OK(acc_safetensors_open(&f, path));
  size_t n = acc_safetensors_count(f), nm = acc_safetensors_metadata_count(f);
  acc_tensor_view v[16];
  const char *keys[32], *vals[32];
  REQUIRE_OK(n <= 16 && nm <= 32 ? ACC_OK : ACC_ERR_FORMAT);
  int changed = 0;
  for (size_t i = 0; i < n; i++) {
    REQUIRE_OK(acc_safetensors_tensor(f, i, &v[i]));
    if (!strcmp(v[i].name, "0/p0/error")) {
      int64_t t = v[i].shape[0];
      v[i].shape[0] = v[i].shape[1];
      v[i].shape[1] = t;
      changed = 1;
    }
  }
  for (size_t i = 0; i < nm; i++) REQUIRE_OK(acc_safetensors_metadata_at(f, i, &keys[i], &vals[i]));
  REQUIRE_OK(changed ? ACC_OK : ACC_ERR_FORMAT);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  REQUIRE_OK(acc_safetensors_write(tmp, v, n, keys, vals, nm));
  acc_safetensors_close(f);
  REQUIRE_OK(rename(tmp, path) == 0 ? ACC_OK : ACC_ERR_IO);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s straight|save|resume|other <dir> cpu|fake\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  dir = argv[2];
  fake = !strcmp(argv[3], "fake");
  run r;
  run_open(&r);
  if (!strcmp(mode, "straight")) {
    while (r.step < STEPS) run_step(&r);
    write_params(&r, "straight");
  } else if (!strcmp(mode, "save")) {
    while (r.step < SAVE_AT) run_step(&r);
    REQUIRE_OK(acc_accelerator_save_state(r.acc, path_of("ckpt"), NULL));
    if (rank == 0) make_bad_copy();
    REQUIRE_OK(acc_accelerator_wait_for_everyone(r.acc));
    run_step(&r); /* the state moves on; the failed load must not take it back */
    char want[64];
    snprintf(want, sizeof want, "powersgd_%d.safetensors", nprocs - 1);
    acc_result rc = acc_accelerator_load_state(r.acc, path_of("bad"), NULL);
    CHECK(rc == ACC_ERR_MISMATCH, "load_state of the corrupt copy: %s: %s", acc_result_string(rc), acc_last_error());
    CHECK(rank != nprocs - 1 || strstr(acc_last_error(), want) != NULL, "the message names %s: %s", want,
          acc_last_error());
    while (r.step < STEPS) run_step(&r);
    compare_with_straight(&r, "after a failed load_state");
  } else if (!strcmp(mode, "resume")) {
    REQUIRE_OK(acc_accelerator_load_state(r.acc, path_of("ckpt"), NULL));
    r.step = SAVE_AT;
    while (r.step < STEPS) run_step(&r);
    int diff = compare_with_straight(&r, "resumed");
    if (!diff && rank == 0)
      printf("resumed at step %d under PowerSGD at %d process(es) on %s: bit for bit the uninterrupted run\n",
             SAVE_AT, nprocs, fake ? "the fake device" : "the CPU");
  } else if (!strcmp(mode, "other")) {
    REQUIRE_OK(acc_accelerator_load_state(r.acc, path_of("ckpt"), NULL));
    r.step = SAVE_AT;
    while (r.step < STEPS) run_step(&r);
    float p[TOTAL];
    params_host(&r, p);
    int finite = 1;
    for (size_t k = 0; k < TOTAL; k++) finite &= isfinite(p[k]) != 0;
    CHECK(finite, "the run resumed at %d processes ends with finite parameters", nprocs);
    const char *log = getenv("ACCELERATE_LOG_FILE");
    if (rank == 0 && log) {
      const char *text = acc_test_slurp(log);
      CHECK(text && strstr(text, "PowerSGD of prepared model 0 starts fresh") && strstr(text, "saved by"),
            "the log says the hook starts fresh: %s", text ? text : "(no log)");
    }
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  run_close(&r);
  return acc_test_finish("test_powersgd_resume");
}
