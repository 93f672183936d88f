/* The program's own stream (issue 33 item 4) on the strict fake device, whose stream-order checks
 * refuse any unordered use of a buffer by two streams: a bf16 table with the program's master
 * weights; the program writes its gradients with copies queued on its own stream
 * (acc_accelerator_memcpy_async), calls acc_accelerator_backward without synchronizing, and reads
 * the averaged gradients back with a copy queued on its stream right after backward. With the
 * stream named (acc_accelerator_set_program_stream) every step is accepted and the read-back is
 * the exact average of every process's gradients; with the stream unset the same backward is
 * refused naming the stream order violation (the library's work would race the program's copy).
 *
 * Usage (through accelerate launch, ACCELERATE_TEST_DEVICE=fake): test_progstream */
#include <math.h>

#include "acc_test.h"
#include "core/internal.h"

#define NI 8
#define NO 4
#define NW (NO * NI + NO)
#define GB 8
#define STEPS 5

static const acc_param_spec table[2] = {{"fc.w", 2, {NO, NI}}, {"fc.b", 1, {NO}}};

static float xval(int t, int s, int i) { return sinf(0.37f * (float)(t * GB + s) + 0.91f * (float)i); }
static float yval(int t, int s, int o) { return cosf(0.23f * (float)(t * GB + s) + 0.5f * (float)o); }

/* process r's bf16 gradient of its share of micro-batch t at weights w */
static void share_grad(int t, int r, int nprocs, const float *w, uint16_t *out) {
  const int per = GB / nprocs, lo = r * per;
  float g[NW] = {0};
  for (int s = lo; s < lo + per; s++)
    for (int o = 0; o < NO; o++) {
      float p = w[NO * NI + o];
      for (int i = 0; i < NI; i++) p += w[o * NI + i] * xval(t, s, i);
      float d = 2.0f * (p - yval(t, s, o)) / (float)per;
      for (int i = 0; i < NI; i++) g[o * NI + i] += d * xval(t, s, i);
      g[NO * NI + o] += d;
    }
  for (int k = 0; k < NW; k++) out[k] = acc__f32_to_bf16(g[k]);
}

int main(void) {
  acc_accelerator *acc = NULL;
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  const int rank = acc_accelerator_process_index(acc), nprocs = acc_accelerator_num_processes(acc);
  acc_test_rank = nprocs > 1 ? rank : -1;
  REQUIRE_OK(GB % nprocs == 0 ? ACC_OK : ACC_ERR_INVALID_ARGUMENT);
  REQUIRE_OK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE ? ACC_OK : ACC_ERR_NOT_SUPPORTED);
  uint16_t *w, *g;
  float *master;
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), (void **)&w));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(uint16_t), (void **)&g));
  REQUIRE_OK(acc_accelerator_alloc(acc, NW * sizeof(float), (void **)&master));
  static float hm[STEPS + 1][NW];
  static uint16_t hw[STEPS + 1][NW], hg[STEPS + 1][NW], avg[STEPS + 1][NW];
  for (int k = 0; k < NW; k++) {
    hm[0][k] = 0.3f * cosf(1.3f * (float)k);
    hw[0][k] = acc__f32_to_bf16(hm[0][k]);
  }
  REQUIRE_OK(acc_accelerator_memcpy(acc, master, hm[0], sizeof hm[0], ACC_COPY_HOST_TO_DEVICE));
  REQUIRE_OK(acc_accelerator_memcpy(acc, w, hw[0], sizeof hw[0], ACC_COPY_HOST_TO_DEVICE));
  acc_model *m = NULL;
  REQUIRE_OK(acc_accelerator_prepare_flat_typed(acc, table, 2, ACC_BF16, w, g, master, &m));

  void *s = NULL;
  REQUIRE_OK(acc_accelerator_stream_create(acc, &s));
  CHECK(s != NULL, "a stream of the fake device");
  CHECK_ERR(acc_accelerator_set_program_stream(acc, acc_accelerator_stream(acc)), ACC_ERR_INVALID_ARGUMENT,
            "the library's own");
  REQUIRE_OK(acc_accelerator_set_program_stream(acc, s));
  CHECK(acc_accelerator_program_stream(acc) == s, "the program's stream is remembered");
  for (int t = 0; t < STEPS; t++) {
    float wf[NW];
    for (int k = 0; k < NW; k++) wf[k] = acc__bf16_to_f32(hw[t][k]);
    share_grad(t, rank, nprocs, wf, hg[t]);
    /* the program's "backward kernel": its gradients, queued on its stream */
    REQUIRE_OK(acc_accelerator_memcpy_async(acc, g, hg[t], sizeof hg[t], ACC_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(acc_accelerator_backward(acc)); /* no host synchronization of the program's stream */
    /* the program's next work on its stream reads the average */
    REQUIRE_OK(acc_accelerator_memcpy_async(acc, avg[t], g, sizeof avg[t], ACC_COPY_DEVICE_TO_HOST, s));
    REQUIRE_OK(acc_accelerator_stream_synchronize(acc, s));
    float sum[NW] = {0};
    for (int r = 0; r < nprocs; r++) {
      uint16_t gr[NW];
      share_grad(t, r, nprocs, wf, gr);
      for (int k = 0; k < NW; k++) sum[k] += acc__bf16_to_f32(gr[k]);
    }
    int bad = 0;
    for (int k = 0; k < NW; k++) bad += avg[t][k] != acc__f32_to_bf16(sum[k] / (float)nprocs);
    CHECK(bad == 0, "step %d: %d averaged gradients read on the program's stream are not the average", t, bad);
    /* the program's optimizer, on its stream */
    for (int k = 0; k < NW; k++) {
      hm[t + 1][k] = hm[t][k] - 0.1f * acc__bf16_to_f32(avg[t][k]);
      hw[t + 1][k] = acc__f32_to_bf16(hm[t + 1][k]);
    }
    REQUIRE_OK(acc_accelerator_memcpy_async(acc, master, hm[t + 1], sizeof hm[t + 1], ACC_COPY_HOST_TO_DEVICE, s));
    REQUIRE_OK(acc_accelerator_memcpy_async(acc, w, hw[t + 1], sizeof hw[t + 1], ACC_COPY_HOST_TO_DEVICE, s));
  }
  REQUIRE_OK(acc_accelerator_stream_synchronize(acc, s));

  /* without the program's stream named, the library's backward would race the program's copy */
  REQUIRE_OK(acc_accelerator_set_program_stream(acc, NULL));
  CHECK(acc_accelerator_program_stream(acc) == NULL, "the program's stream is unset");
  REQUIRE_OK(acc_accelerator_memcpy_async(acc, g, hg[0], sizeof hg[0], ACC_COPY_HOST_TO_DEVICE, s));
  CHECK_ERR(acc_accelerator_backward(acc), ACC_ERR_INVALID_USAGE, "stream order violation");
  REQUIRE_OK(acc_accelerator_stream_synchronize(acc, s));
  REQUIRE_OK(acc_accelerator_stream_destroy(acc, s));
  acc_accelerator_free(acc, w);
  acc_accelerator_free(acc, g);
  acc_accelerator_free(acc, master);
  acc_accelerator_destroy(acc);
  if (rank == 0)
    printf("progstream at %d process(es): %d steps ordered by the program's stream without host "
           "synchronization; unordered use refused\n", nprocs, STEPS);
  return acc_test_finish("progstream");
}
