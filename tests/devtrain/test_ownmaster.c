/* A CUDA-style trainer that owns its optimizer and its float32 master weights (issue 33 item 1):
 * a bf16 table in device memory (or host memory on the CPU) registered with the program's master
 * buffer through acc_accelerator_prepare_flat_typed (item 5), the library averaging gradients,
 * the program stepping its own SGD on its master (and rounding it into its bf16 parameters).
 *
 * Checks: the model's parameters are the program's master buffer (no copy: the library's bytes
 * for the table are the float32 gradients only, printed next to the 8 bytes per value of a table
 * with a library master); prepare_model's broadcast writes process 0's master into every
 * process's master exactly (never rounded through bf16) and rounds it into the bf16 parameters;
 * after training, save_model and save_state hold the weights the program trained (not the
 * initial ones), and load_state after further steps writes them back into the program's master
 * and its bf16 parameters; bad registrations are refused with a message.
 *
 * Usage (through accelerate launch): test_ownmaster cpu|dev <dir>  (dev: ACCELERATE_TEST_DEVICE=fake) */
#include <math.h>
#include <sys/stat.h>

#include "acc_test.h"
#include "core/internal.h"

#define NI 8
#define NO 4
#define NW (NO * NI + NO)
#define GB 8
#define STEPS 6

static int rank, nprocs, on_dev;
static acc_accelerator *acc;
static const acc_param_spec table[2] = {{"fc.w", 2, {NO, NI}}, {"fc.b", 1, {NO}}};

static void put(void *dst, const void *src, size_t bytes) {
  if (on_dev) REQUIRE_OK(acc_accelerator_memcpy(acc, dst, src, bytes, ACC_COPY_HOST_TO_DEVICE));
  else memcpy(dst, src, bytes);
}

static void get(void *dst, const void *src, size_t bytes) {
  if (on_dev) REQUIRE_OK(acc_accelerator_memcpy(acc, dst, src, bytes, ACC_COPY_DEVICE_TO_HOST));
  else memcpy(dst, src, bytes);
}

static void *alloc(size_t bytes) {
  void *p = NULL;
  if (on_dev) REQUIRE_OK(acc_accelerator_alloc(acc, bytes, &p));
  else p = calloc(1, bytes);
  REQUIRE_OK(p ? ACC_OK : ACC_ERR_NOMEM);
  return p;
}

static void release(void *p) {
  if (on_dev) acc_accelerator_free(acc, p);
  else free(p);
}

static float xval(int t, int s, int i) { return sinf(0.37f * (float)(t * GB + s) + 0.91f * (float)i); }
static float yval(int t, int s, int o) { return cosf(0.23f * (float)(t * GB + s) + 0.5f * (float)o); }

/* One step: the program's gradient of its share of the batch into its bf16 gradients, backward
 * (the library's average), the program's own SGD on its master, rounded into its parameters. */
static void step(int t, uint16_t *w, uint16_t *g, float *master, float *hm) {
  const int per = GB / nprocs, lo = rank * per;
  uint16_t hw[NW], hg[NW];
  get(hw, w, sizeof hw);
  float gf[NW] = {0};
  for (int s = lo; s < lo + per; s++)
    for (int o = 0; o < NO; o++) {
      float p = acc__bf16_to_f32(hw[NO * NI + o]);
      for (int i = 0; i < NI; i++) p += acc__bf16_to_f32(hw[o * NI + i]) * xval(t, s, i);
      float d = 2.0f * (p - yval(t, s, o)) / (float)per;
      for (int i = 0; i < NI; i++) gf[o * NI + i] += d * xval(t, s, i);
      gf[NO * NI + o] += d;
    }
  for (int k = 0; k < NW; k++) hg[k] = acc__f32_to_bf16(gf[k]);
  put(g, hg, sizeof hg);
  REQUIRE_OK(acc_accelerator_backward(acc));
  get(hg, g, sizeof hg); /* the average, rounded into the program's gradients */
  for (int k = 0; k < NW; k++) {
    hm[k] -= 0.1f * acc__bf16_to_f32(hg[k]);
    hw[k] = acc__f32_to_bf16(hm[k]);
  }
  put(master, hm, NW * sizeof(float));
  put(w, hw, sizeof hw);
  memset(hg, 0, sizeof hg);
  put(g, hg, sizeof hg); /* the program's zero_grad */
}

static void check_master(const char *what, const float *master, const uint16_t *w, const float *want) {
  float m[NW];
  uint16_t hw[NW], ww[NW];
  get(m, master, sizeof m);
  get(hw, w, sizeof hw);
  for (int k = 0; k < NW; k++) ww[k] = acc__f32_to_bf16(want[k]);
  size_t at = 0;
  CHECK(acc_test_same_f32_n(m, want, NW, &at), "%s: the program's master differs at %zu (%g vs %g)", what, at,
        (double)m[at], (double)want[at]);
  CHECK(acc_test_same_half(hw, ww, NW, 1), "%s: the program's bf16 parameters are not its master rounded", what);
}

static void check_file(const char *what, const char *path, const float *want) {
  if (rank != 0) return;
  acc_safetensors *f = NULL;
  acc_tensor_view tw, tb;
  REQUIRE_OK(acc_safetensors_open(&f, path));
  REQUIRE_OK(acc_safetensors_find(f, "fc.w", &tw));
  REQUIRE_OK(acc_safetensors_find(f, "fc.b", &tb));
  CHECK(tw.dtype == ACC_F32 && tw.nbytes == NO * NI * sizeof(float) && memcmp(tw.data, want, tw.nbytes) == 0,
        "%s: %s holds fc.w as the weights the program trained", what, path);
  CHECK(tb.dtype == ACC_F32 && tb.nbytes == NO * sizeof(float) && memcmp(tb.data, want + NO * NI, tb.nbytes) == 0,
        "%s: %s holds fc.b as the weights the program trained", what, path);
  acc_safetensors_close(f);
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "dev"))) {
    fprintf(stderr, "usage: test_ownmaster cpu|dev DIR\n");
    return 2;
  }
  on_dev = !strcmp(argv[1], "dev");
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = on_dev ? ACC_DEVICE_AUTO : ACC_DEVICE_CPU;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  rank = acc_accelerator_process_index(acc);
  nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = nprocs > 1 ? rank : -1;
  REQUIRE_OK(GB % nprocs == 0 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  CHECK((acc_accelerator_device_type(acc) == ACC_DEVICE_CPU) == !on_dev, "the accelerator trains on the %s",
        on_dev ? "fake device" : "CPU");
  mkdir(argv[2], 0755);
  uint16_t *w = alloc(NW * sizeof(uint16_t)), *g = alloc(NW * sizeof(uint16_t));
  float *master = alloc(NW * sizeof(float));

  /* refusals */
  acc_model *bad = NULL;
  REQUIRE_OK(acc_model_create(&bad));
  CHECK_ERR(acc_model_add_flat_typed_master(bad, table, 2, ACC_BF16, w, g, NULL, NULL), ACC_ERR_INVALID_ARGUMENT,
            "master buffer is NULL");
  CHECK_ERR(acc_model_add_flat_typed_master(bad, table, 2, ACC_F32, w, g, master, NULL), ACC_ERR_INVALID_ARGUMENT,
            "ACC_BF16 or ACC_F16");
  if (on_dev) {
    float hostm[NW];
    CHECK_ERR(acc_model_add_flat_typed_master(bad, table, 2, ACC_BF16, w, g, hostm, NULL), ACC_ERR_INVALID_ARGUMENT,
              "put the master weights where the parameters are");
  }
  CHECK(acc_model_num_parameters(bad) == 0, "a refused registration adds no parameter");
  /* a table with the library's master, for the memory comparison */
  REQUIRE_OK(acc_model_add_flat_typed(bad, table, 2, ACC_BF16, w, g, NULL));
  const size_t lib_master_bytes = acc_model_typed_library_bytes(bad);
  acc_model_destroy(bad);

  /* the program's initial weights differ by process (the broadcast of process 0's matters) and
   * are not bf16 values (a widening of the bf16 parameters would show) */
  float hm[NW], init0[NW];
  uint16_t hw[NW];
  for (int k = 0; k < NW; k++) {
    hm[k] = 0.3f * cosf(1.3f * (float)k + (float)rank) + 1e-4f;
    init0[k] = 0.3f * cosf(1.3f * (float)k) + 1e-4f;
    hw[k] = acc__f32_to_bf16(hm[k]);
  }
  put(master, hm, sizeof hm);
  put(w, hw, sizeof hw);
  acc_model *m = NULL;
  REQUIRE_OK(acc_accelerator_prepare_flat_typed(acc, table, 2, ACC_BF16, w, g, master, &m));
  CHECK(acc_model_parameter(m, 0)->data == master && acc_model_parameter(m, 1)->data == master + NO * NI,
        "the model's parameters are the program's master buffer");
  CHECK(acc_model_parameter_storage(m, 1) == (const void *)(w + NO * NI), "parameter storage is the program's bf16");
  const size_t own_bytes = acc_model_typed_library_bytes(m);
  CHECK(own_bytes == NW * sizeof(float), "the library holds %zu bytes for the table, not only its float32 gradients "
        "(%zu)", own_bytes, (size_t)(NW * sizeof(float)));
  CHECK(lib_master_bytes == 2 * NW * sizeof(float), "a library-master table holds %zu bytes", lib_master_bytes);
  if (rank == 0)
    printf("ownmaster (%s): the library's extra %s memory for a %d-value bf16 table: %zu bytes with the program's "
           "master, %zu with a library master copy\n", argv[1], on_dev ? "device" : "host", NW, own_bytes,
           lib_master_bytes);
  memcpy(hm, init0, sizeof hm);
  check_master("after prepare (process 0's master, exact)", master, w, hm);

  char dir[1200], state[1300], model_dir[1300], file[1400];
  snprintf(dir, sizeof dir, "%s/%s_np%d", argv[2], argv[1], nprocs);
  snprintf(state, sizeof state, "%s/state", dir);
  snprintf(model_dir, sizeof model_dir, "%s/model", dir);
  mkdir(dir, 0755);
  int t = 0;
  for (; t < STEPS; t++) step(t, w, g, master, hm);
  int moved = 0;
  for (int k = 0; k < NW; k++) moved += hm[k] != init0[k];
  CHECK(moved > NW / 2, "training moved only %d weights", moved);
  float trained[NW];
  memcpy(trained, hm, sizeof trained);
  REQUIRE_OK(acc_accelerator_synchronize(acc));
  REQUIRE_OK(acc_save_model(acc_accelerator_state(acc), m, model_dir, 0, ACC_F32));
  snprintf(file, sizeof file, "%s/model.safetensors", model_dir);
  check_file("save_model", file, trained);
  REQUIRE_OK(acc_accelerator_save_state(acc, state, NULL));
  snprintf(file, sizeof file, "%s/model.safetensors", state);
  check_file("save_state", file, trained);
  for (; t < STEPS + 2; t++) step(t, w, g, master, hm); /* the program trains on */
  REQUIRE_OK(acc_accelerator_load_state(acc, state, NULL));
  check_master("after load_state", master, w, trained);
  release(w);
  release(g);
  release(master);
  acc_accelerator_destroy(acc); /* destroys m, which it owns */
  if (rank == 0) printf("ownmaster %s at %d process(es): checkpoints hold the program's trained weights\n", argv[1],
                        nprocs);
  return acc_test_finish("ownmaster");
}
