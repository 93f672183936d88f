/* Collectives on device buffers, on the fake device through accelerate launch (2 processes): every
 * collective of comm.h and the accelerator's all_gather / all_reduce / gather_for_metrics /
 * pad_across_processes give the same bytes with device buffers as with host buffers, in-place
 * forms and a host buffer mixed with a device one included.
 *
 * Ordering: the device inputs are written by copies queued on the compute stream without any host
 * wait (as a program's kernels would write them), and the results are read by a copy queued on the
 * compute stream; the fake device refuses a staging copy that is not ordered after the first and
 * before the second, and the 0xff poisoning of its device-to-host copies makes a read of a staging
 * buffer before its copy has run visible as wrong bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accelerate.h"
#include "acc_test.h"
#include "train/accel_device.h"
#include "device/device.h"

#define C 13 /* elements per process */

static acc_accelerator *acc;
static acc_state *st;
static int R, P;

/* Device copy of host data, written by an operation queued on the compute stream (no wait). */
static void *dev_from(const void *h, size_t bytes) {
  void *d = NULL;
  REQUIRE_OK(acc_accelerator_alloc(acc, bytes, &d));
  acc__devctx *ad = acc__accelerator_dev(acc);
  REQUIRE_OK(acc__device_copy(ad->dev, d, h, bytes, ACC__COPY_H2D, ad->stream));
  return d;
}

/* The device buffer's bytes, read by an operation queued on the compute stream. */
static void to_host(void *h, const void *d, size_t bytes) {
  memset(h, 0x5a, bytes);
  CHECK_OK(acc_accelerator_memcpy(acc, h, d, bytes, ACC_COPY_DEVICE_TO_HOST));
}

static void same(const void *a, const void *b, size_t bytes, const char *what) {
  CHECK(memcmp(a, b, bytes) == 0, "%s: device result differs from the host result", what);
}

static void fill(float *v, size_t n, int salt) {
  for (size_t i = 0; i < n; i++) v[i] = (float)(R + 1) * 0.37f + (float)i * 1.25f + (float)salt;
}

static void check_all_reduce(acc_op op, const char *name) {
  float in[C], want[C], got[C];
  fill(in, C, (int)op);
  CHECK_OK(acc_all_reduce(st, in, want, C, ACC_F32, op));
  float *ds = dev_from(in, sizeof in), *dr = dev_from(in, sizeof in);
  CHECK_OK(acc_all_reduce(st, ds, dr, C, ACC_F32, op));
  to_host(got, dr, sizeof got);
  same(want, got, sizeof got, name);
  /* in place, through the accelerator */
  CHECK_OK(acc_accelerator_all_reduce(acc, ds, ds, C, ACC_F32, op));
  to_host(got, ds, sizeof got);
  same(want, got, sizeof got, "accelerator all_reduce in place");
  /* a host send and a device recv */
  float *dz = dev_from(want, sizeof want);
  CHECK_OK(acc_all_reduce(st, in, dz, C, ACC_F32, op));
  to_host(got, dz, sizeof got);
  same(want, got, sizeof got, "all_reduce host -> device");
  CHECK_OK(acc_accelerator_free(acc, ds));
  CHECK_OK(acc_accelerator_free(acc, dr));
  CHECK_OK(acc_accelerator_free(acc, dz));
}

int main(void) {
  acc_accelerator_options ao = ACC_ACCELERATOR_OPTIONS_INIT;
  ao.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&acc, &ao));
  st = acc_accelerator_state(acc);
  R = acc_accelerator_process_index(acc);
  P = acc_accelerator_num_processes(acc);
  acc_test_rank = R;
  CHECK(P == 2, "2 processes (accelerate launch)");
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE, "fake device, got %s",
        acc_accelerator_device_name(acc));

  check_all_reduce(ACC_SUM, "all_reduce sum");
  check_all_reduce(ACC_MEAN, "all_reduce mean");
  check_all_reduce(ACC_MAX, "all_reduce max");

  float in[C], out[C * 4], want[C * 4], junk[C * 8];
  for (int i = 0; i < C * 8; i++) junk[i] = -1.0f - (float)i;
  int64_t iv[3] = {R * 7 + 1, -R, 42};

  { /* broadcast from process 1, i64 */
    int64_t w[3], g[3];
    memcpy(w, iv, sizeof w);
    CHECK_OK(acc_broadcast(st, w, 3, ACC_I64, 1));
    int64_t *d = dev_from(iv, sizeof iv);
    CHECK_OK(acc_broadcast(st, d, 3, ACC_I64, 1));
    to_host(g, d, sizeof g);
    same(w, g, sizeof g, "broadcast");
    CHECK(g[0] == 8, "broadcast carries process 1's value: %lld", (long long)g[0]);
    CHECK_OK(acc_accelerator_free(acc, d));
  }
  { /* reduce to process 0 */
    fill(in, C, 3);
    CHECK_OK(acc_reduce(st, in, want, C, ACC_F32, ACC_SUM, 0));
    float *ds = dev_from(in, sizeof in), *dr = dev_from(in, sizeof in);
    CHECK_OK(acc_reduce(st, ds, R == 0 ? dr : NULL, C, ACC_F32, ACC_SUM, 0));
    if (R == 0) {
      to_host(out, dr, C * sizeof(float));
      same(want, out, C * sizeof(float), "reduce");
    }
    CHECK_OK(acc_accelerator_free(acc, ds));
    CHECK_OK(acc_accelerator_free(acc, dr));
  }
  { /* reduce_scatter, then its in-place form (recv = send + rank * count) */
    float big[C * 2];
    fill(big, C * 2, 4);
    CHECK_OK(acc_reduce_scatter(st, big, want, C, ACC_F32, ACC_SUM));
    float *ds = dev_from(big, sizeof big), *dr = dev_from(in, C * sizeof(float));
    CHECK_OK(acc_reduce_scatter(st, ds, dr, C, ACC_F32, ACC_SUM));
    to_host(out, dr, C * sizeof(float));
    same(want, out, C * sizeof(float), "reduce_scatter");
    CHECK_OK(acc_reduce_scatter(st, ds, ds + (size_t)R * C, C, ACC_F32, ACC_SUM));
    to_host(out, ds + (size_t)R * C, C * sizeof(float));
    same(want, out, C * sizeof(float), "reduce_scatter in place");
    CHECK_OK(acc_accelerator_free(acc, ds));
    CHECK_OK(acc_accelerator_free(acc, dr));
  }
  { /* all_gather (and through the accelerator), its in-place form, gather to process 1 */
    fill(in, C, 5);
    CHECK_OK(acc_all_gather(st, in, want, C, ACC_F32));
    float *ds = dev_from(in, sizeof in), *dr = dev_from(junk, sizeof(float) * C * 2);
    CHECK_OK(acc_accelerator_all_gather(acc, ds, dr, C, ACC_F32));
    to_host(out, dr, sizeof(float) * C * 2);
    same(want, out, sizeof(float) * C * 2, "all_gather");
    float mixed[C * 2]; /* own block in place, the other's block junk */
    memcpy(mixed, junk, sizeof mixed);
    memcpy(mixed + (size_t)R * C, in, sizeof in);
    float *dip = dev_from(mixed, sizeof mixed);
    CHECK_OK(acc_all_gather(st, dip + (size_t)R * C, dip, C, ACC_F32));
    to_host(out, dip, sizeof(float) * C * 2);
    same(want, out, sizeof(float) * C * 2, "all_gather in place");
    CHECK_OK(acc_gather(st, in, R == 1 ? want : NULL, C, ACC_F32, 1));
    CHECK_OK(acc_gather(st, ds, R == 1 ? dr : NULL, C, ACC_F32, 1));
    if (R == 1) {
      to_host(out, dr, sizeof(float) * C * 2);
      same(want, out, sizeof(float) * C * 2, "gather");
    }
    void *gb = NULL;
    size_t *sizes = NULL;
    CHECK_OK(acc_all_gather_bytes(st, ds, sizeof(float) * (size_t)(C - R), &gb, &sizes));
    CHECK(gb && sizes && sizes[0] == sizeof(float) * C && sizes[1] == sizeof(float) * (C - 1),
          "all_gather_bytes sizes");
    if (gb && sizes) {
      float first[C];
      fill(first, C, 5);
      if (R == 0) same(first, gb, sizeof first, "all_gather_bytes (own part)");
    }
    free(gb);
    free(sizes);
    CHECK_OK(acc_accelerator_free(acc, ds));
    CHECK_OK(acc_accelerator_free(acc, dr));
    CHECK_OK(acc_accelerator_free(acc, dip));
  }
  { /* gather_for_metrics: process 0 has 3 samples of 2 floats, process 1 has 2 */
    int n = R == 0 ? 3 : 2;
    float s[6];
    fill(s, 6, 6);
    int64_t nw = 0, ng = 0;
    CHECK_OK(acc_accelerator_gather_for_metrics(acc, s, n, 2, ACC_F32, want, 8, &nw));
    float *ds = dev_from(s, sizeof s), *dr = dev_from(junk, sizeof(float) * 16);
    CHECK_OK(acc_accelerator_gather_for_metrics(acc, ds, n, 2, ACC_F32, dr, 8, &ng));
    CHECK(nw == 5 && ng == nw, "gather_for_metrics keeps %lld and %lld samples", (long long)nw,
          (long long)ng);
    to_host(out, dr, sizeof(float) * 2 * (size_t)ng);
    same(want, out, sizeof(float) * 2 * (size_t)nw, "gather_for_metrics");
    /* pad_across_processes, padding first */
    float p[8];
    fill(p, 8, 7);
    float hp[8];
    memcpy(hp, p, sizeof p);
    int64_t pw = 0, pg = 0;
    CHECK_OK(acc_accelerator_pad_across_processes(acc, hp, n, 2, ACC_F32, -3.5, 1, 4, &pw));
    float *dp = dev_from(p, sizeof p);
    CHECK_OK(acc_accelerator_pad_across_processes(acc, dp, n, 2, ACC_F32, -3.5, 1, 4, &pg));
    CHECK(pw == 3 && pg == 3, "padded to %lld / %lld samples", (long long)pw, (long long)pg);
    to_host(out, dp, sizeof p);
    same(hp, out, sizeof(float) * 2 * (size_t)pw, "pad_across_processes");
    CHECK_OK(acc_accelerator_free(acc, ds));
    CHECK_OK(acc_accelerator_free(acc, dr));
    CHECK_OK(acc_accelerator_free(acc, dp));
  }
  CHECK_OK(acc_barrier(st));
  acc_accelerator_destroy(acc);
  return acc_test_finish("devio_comm");
}
