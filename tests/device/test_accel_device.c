/* The accelerator's device: which device a program that asks for one gets (CPU by default, the
 * fake device under ACCELERATE_TEST_DEVICE=fake, the CPU under --cpu), and the public memory
 * functions on it. Argument "single" runs the one-process checks; "ranks" (through accelerate
 * launch) checks that each process gets the GPU of its local rank. */
#include <stdlib.h>
#include <string.h>

#include "accelerate.h"
#include "acc_test.h"

static acc_accelerator *make(int device) {
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = device;
  acc_accelerator *acc = NULL;
  if (acc_accelerator_create(&acc, &o) != ACC_OK) return NULL;
  return acc;
}

static void memory_roundtrip(acc_accelerator *acc) {
  float host[8], back[8];
  for (int i = 0; i < 8; i++) host[i] = (float)i + 0.5f;
  float *d = NULL;
  CHECK_OK(acc_accelerator_alloc(acc, sizeof host, (void **)&d));
  if (!d) return;
  CHECK(acc_accelerator_is_device_pointer(acc, d) == 1, "alloc gives device memory");
  CHECK_OK(acc_accelerator_memcpy(acc, d, host, sizeof host, ACC_COPY_HOST_TO_DEVICE));
  memset(back, 0, sizeof back);
  CHECK_OK(acc_accelerator_memcpy(acc, back, d, sizeof back, ACC_COPY_DEVICE_TO_HOST));
  CHECK(memcmp(host, back, sizeof host) == 0, "host -> device -> host keeps the bytes");
  CHECK_OK(acc_accelerator_free(acc, d));
}

/* acc_accelerator_cast gives the bits of the CPU conversions, in device memory on a device. */
static void cast_check(acc_accelerator *acc) {
  enum { N = 1000 };
  float host[N];
  uint16_t want_bf[N], want_h[N], got[N];
  for (int i = 0; i < N; i++) host[i] = (float)(i - 500) * 0.37f + (i % 7 == 0 ? 1e-6f : 0.0f);
  host[1] = 1e30f; /* f16 overflow */
  host[2] = -0.0f;
  CHECK_OK(acc_f32_to_bf16(want_bf, host, N));
  CHECK_OK(acc_f32_to_f16(want_h, host, N));
  float *d_src = NULL;
  uint16_t *d_dst = NULL;
  CHECK_OK(acc_accelerator_alloc(acc, sizeof host, (void **)&d_src));
  CHECK_OK(acc_accelerator_alloc(acc, sizeof got, (void **)&d_dst));
  if (!d_src || !d_dst) return;
  CHECK_OK(acc_accelerator_memcpy(acc, d_src, host, sizeof host, ACC_COPY_HOST_TO_DEVICE));
  const acc_dtype dts[2] = {ACC_BF16, ACC_F16};
  const uint16_t *wants[2] = {want_bf, want_h};
  for (int k = 0; k < 2; k++) {
    CHECK_OK(acc_accelerator_cast(acc, d_dst, d_src, N, dts[k]));
    CHECK_OK(acc_accelerator_memcpy(acc, got, d_dst, sizeof got, ACC_COPY_DEVICE_TO_HOST));
    CHECK(memcmp(got, wants[k], sizeof got) == 0, "%s: cast on %s differs from the CPU bits",
          acc_dtype_name(dts[k]), acc_accelerator_device_name(acc));
  }
  CHECK_ERR(acc_accelerator_cast(acc, d_dst, d_src, N, ACC_F32), ACC_ERR_INVALID_ARGUMENT,
            "expected bf16 or f16");
  CHECK_ERR(acc_accelerator_cast(acc, (uint16_t *)d_src, d_src, N, ACC_BF16),
            ACC_ERR_INVALID_ARGUMENT, "overlap");
  if (acc_accelerator_device_type(acc) != ACC_DEVICE_CPU)
    CHECK_ERR(acc_accelerator_cast(acc, got, d_src, N, ACC_BF16), ACC_ERR_INVALID_ARGUMENT,
              "not device memory");
  CHECK_OK(acc_accelerator_free(acc, d_src));
  CHECK_OK(acc_accelerator_free(acc, d_dst));
}

static void single(void) {
  /* default: the CPU whatever the machine has */
  acc_accelerator *acc = make(ACC_UNSET);
  REQUIRE_OK(acc ? ACC_OK : ACC_ERR_INTERNAL);
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_CPU, "default device is the CPU");
  CHECK(strcmp(acc_accelerator_device_name(acc), "cpu") == 0, "name %s",
        acc_accelerator_device_name(acc));
  CHECK(acc_accelerator_device_index(acc) == -1, "no GPU ordinal on the CPU");
  CHECK(acc_accelerator_stream(acc) == NULL, "no stream on the CPU");
  memory_roundtrip(acc);
  cast_check(acc);
  CHECK_OK(acc_accelerator_synchronize(acc));
  acc_accelerator_destroy(acc);

  /* the fake device, as a GPU program gets in CI */
  setenv("ACCELERATE_TEST_DEVICE", "fake", 1);
  acc = make(ACC_DEVICE_AUTO);
  REQUIRE_OK(acc ? ACC_OK : ACC_ERR_INTERNAL);
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE, "fake device under the test knob");
  CHECK(strcmp(acc_accelerator_device_name(acc), "fake:0") == 0, "name %s",
        acc_accelerator_device_name(acc));
  CHECK(acc_accelerator_device_index(acc) == 0, "ordinal = local rank 0");
  CHECK(acc_accelerator_stream(acc) != NULL, "a compute stream");
  memory_roundtrip(acc);
  cast_check(acc);
  float host[4] = {1, 2, 3, 4};
  CHECK(acc_accelerator_is_device_pointer(acc, host) == 0, "a stack array is not device memory");
  CHECK_ERR(acc_accelerator_memcpy(acc, host, host, sizeof host, ACC_COPY_HOST_TO_DEVICE),
            ACC_ERR_INVALID_ARGUMENT, "not device memory");
  CHECK_ERR(acc_accelerator_free(acc, host), ACC_ERR_INVALID_ARGUMENT, "");
  CHECK_ERR(acc_accelerator_memcpy(acc, host, host, 4, (acc_copy_kind)7), ACC_ERR_INVALID_ARGUMENT,
            "unknown copy kind 7");
  acc_accelerator_destroy(acc);

  /* --cpu wins over a program that asks for a GPU */
  setenv("ACCELERATE_USE_CPU", "true", 1);
  acc = make(ACC_DEVICE_CUDA);
  REQUIRE_OK(acc ? ACC_OK : ACC_ERR_INTERNAL);
  CHECK(acc_accelerator_device_type(acc) == ACC_DEVICE_CPU, "--cpu gives the CPU");
  acc_accelerator_destroy(acc);
  unsetenv("ACCELERATE_USE_CPU");
  unsetenv("ACCELERATE_TEST_DEVICE");

  /* a bad device value is refused with the choices */
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = 9;
  acc = NULL;
  CHECK_ERR(acc_accelerator_create(&acc, &o), ACC_ERR_INVALID_ARGUMENT, "device is 9");

  /* no GPU here: AUTO falls back to the CPU, CUDA is an error saying why */
  acc = make(ACC_DEVICE_AUTO);
  REQUIRE_OK(acc ? ACC_OK : ACC_ERR_INTERNAL);
  int have_gpu = acc_accelerator_device_type(acc) == ACC_DEVICE_CUDA;
  CHECK(have_gpu || acc_accelerator_device_type(acc) == ACC_DEVICE_CPU, "auto: CPU or CUDA");
  acc_accelerator_destroy(acc);
  if (!have_gpu) {
    o.device = ACC_DEVICE_CUDA;
    acc = NULL;
    CHECK_ERR(acc_accelerator_create(&acc, &o), ACC_ERR_NOT_SUPPORTED, "asked for a GPU");
  }
}

static void ranks(void) {
  acc_accelerator *acc = make(ACC_DEVICE_AUTO); /* ACCELERATE_TEST_DEVICE=fake from the test */
  REQUIRE_OK(acc ? ACC_OK : ACC_ERR_INTERNAL);
  char want[32];
  snprintf(want, sizeof want, "fake:%d", acc_accelerator_local_process_index(acc));
  CHECK(strcmp(acc_accelerator_device_name(acc), want) == 0, "process %d: %s, expected %s",
        acc_accelerator_process_index(acc), acc_accelerator_device_name(acc), want);
  memory_roundtrip(acc);
  CHECK_OK(acc_accelerator_wait_for_everyone(acc));
  acc_accelerator_destroy(acc);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "ranks") == 0) ranks();
  else single();
  return acc_test_finish("accel_device");
}
