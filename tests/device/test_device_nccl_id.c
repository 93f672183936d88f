/* The NCCL unique id: made by process 0's CUDA module (ncclGetUniqueId needs no GPU or driver)
 * and broadcast over the CPU backend; every process must hold the same 128 bytes. Then each
 * process opens its GPU: on a machine without one this must fail cleanly with the reason.
 * With the argument "missing" (ACCELERATE_CUDA_MODULE names no file), process 0 cannot make the
 * id: every process must get that error, none may wait. */
#include <stdint.h>
#include <string.h>

#include "acc_test.h"
#include "device/device.h"

int main(int argc, char **argv) {
  acc_state *st;
  acc_state_options so;
  REQUIRE_OK(acc_state_options_init(&so, ACC_STATE_OPTIONS_VERSION));
  REQUIRE_OK(acc_state_create(&st, &so));
  acc_test_rank = acc_state_process_index(st);
  uint8_t id[ACC__NCCL_ID_BYTES];
  memset(id, 0, sizeof id);
  if (argc > 1 && !strcmp(argv[1], "missing")) {
    CHECK_ERR(acc__device_nccl_bootstrap_id(st, id), ACC_ERR_NOT_SUPPORTED,
              "process 0 could not make the NCCL unique id: cannot load the CUDA module");
    CHECK(strstr(acc_last_error(), "/nonexistent/libaccelerate-cuda.so") != NULL, "message: %s",
          acc_last_error());
    CHECK_OK(acc_barrier(st)); /* the group is still usable */
    int rc = acc_test_finish("device_nccl_id missing");
    acc_state_destroy(st);
    return rc;
  }
  REQUIRE_OK(acc__device_nccl_bootstrap_id(st, id));
  int nonzero = 0;
  for (size_t i = 0; i < sizeof id; i++) nonzero |= id[i];
  CHECK(nonzero, "the NCCL unique id is all zeros");
  /* every process holds process 0's bytes: the max and the min of each byte agree */
  uint8_t mx[ACC__NCCL_ID_BYTES], mn[ACC__NCCL_ID_BYTES];
  CHECK_OK(acc_all_reduce(st, id, mx, sizeof id, ACC_U8, ACC_MAX));
  CHECK_OK(acc_all_reduce(st, id, mn, sizeof id, ACC_U8, ACC_MIN));
  CHECK(memcmp(mx, mn, sizeof id) == 0, "processes hold different NCCL ids");

  const acc__device_ops *ops;
  REQUIRE_OK(acc__device_module_load("cuda", &ops));
  acc__device_probe_info info;
  if (acc__device_cuda_probe(&info) != ACC_OK) {
    /* no GPU here: opening cuda:N fails with the reason, nothing hangs */
    acc__device *d = NULL;
    CHECK(acc__device_open(&d, ACC__DEVICE_CUDA, 0) == ACC_ERR_NOT_SUPPORTED,
          "opening cuda:0 without a GPU: %s", acc_last_error());
    printf("no GPU, communicator not tried: %s\n", acc_last_error());
  }
  int rc = acc_test_finish("device_nccl_id");
  acc_state_destroy(st);
  return rc;
}
