/* Loading the CUDA module with dlopen, and what a user without a GPU sees.
 *   load:            the module (ACCELERATE_CUDA_MODULE, set by ctest) loads and its ops table
 *                    checks; without a driver, probe and open fail with "no CUDA driver" and
 *                    nothing crashes; with a GPU, the GPUs are listed and a buffer round-trips.
 *   badpath:         a path that does not exist: a clear error naming it.
 *   badabi <module>: a module of another ABI version: refused, naming both versions. */
#include <stdlib.h>
#include <string.h>

#include "acc_test.h"
#include "device/device.h"

static void test_load(void) {
#ifndef ACC_HAVE_CUDA_MODULE
  acc__device_probe_info info;
  CHECK_ERR(acc__device_cuda_probe(&info), ACC_ERR_NOT_SUPPORTED, "built without CUDA");
  acc__device *d = NULL;
  CHECK_ERR(acc__device_open(&d, ACC__DEVICE_CUDA, 0), ACC_ERR_NOT_SUPPORTED,
            "cannot load the CUDA module");
  printf("built without the CUDA module: %s\n", acc_last_error());
#else
  const acc__device_ops *ops = NULL;
  REQUIRE_OK(acc__device_module_load("cuda", &ops));
  CHECK(ops->abi_version == ACC__DEVICE_ABI_VERSION && !strcmp(ops->name, "cuda"),
        "ops table: version %u name %s", ops->abi_version, ops->name);
  const acc__device_ops *again = NULL;
  CHECK_OK(acc__device_module_load("cuda", &again));
  CHECK(again == ops, "the module is loaded once");
  acc__device_probe_info info;
  acc_result rc = acc__device_cuda_probe(&info);
  CHECK(strstr(info.module_path, "libaccelerate-cuda.so") != NULL, "module path '%s'",
        info.module_path);
  CHECK(info.runtime_version >= 11000, "CUDA runtime version %d", info.runtime_version);
  printf("module %s, runtime %d, driver %d, NCCL %d: %s\n", info.module_path,
         info.runtime_version, info.driver_version, info.nccl_version,
         rc == ACC_OK ? "GPU present" : acc_last_error());
  acc__device *d = NULL;
  if (rc != ACC_OK) {
    CHECK(rc == ACC_ERR_NOT_SUPPORTED, "probe: %s", acc_result_string(rc));
    if (info.driver_version == 0)
      CHECK(strstr(acc_last_error(), "no CUDA driver") != NULL, "probe message: %s",
            acc_last_error());
    CHECK_ERR(acc__device_open(&d, ACC__DEVICE_CUDA, 0), ACC_ERR_NOT_SUPPORTED, "cuda:0");
    CHECK(d == NULL, "a device handle after a failed open");
    if (info.driver_version == 0)
      CHECK(strstr(acc_last_error(), "driver") != NULL, "open message: %s", acc_last_error());
  } else {
    CHECK(info.device_count > 0 && info.gpus[0].name[0], "GPU list");
    REQUIRE_OK(acc__device_open(&d, ACC__DEVICE_CUDA, 0));
    float h[3] = {1, 2, 3}, back[3] = {0}, *p = NULL;
    REQUIRE_OK(acc__device_alloc(d, sizeof h, (void **)&p));
    int yes = 0;
    CHECK_OK(acc__device_is_device_ptr(d, p, &yes));
    CHECK(yes == 1, "cudaMalloc memory is not a device pointer");
    CHECK_OK(acc__device_is_device_ptr(d, h, &yes));
    CHECK(yes == 0, "a host array is a device pointer");
    CHECK_OK(acc__device_copy(d, p, h, sizeof h, ACC__COPY_H2D, NULL));
    CHECK_OK(acc__device_copy(d, back, p, sizeof h, ACC__COPY_D2H, NULL));
    CHECK_OK(acc__dstream_sync(d, NULL));
    CHECK(back[2] == 3.0f, "round trip %g", (double)back[2]);
    CHECK_ERR(acc__device_open(&(acc__device *){NULL}, ACC__DEVICE_CUDA, info.device_count),
              ACC_ERR_INVALID_ARGUMENT, "does not exist");
    acc__device_free(d, p);
    acc__device_close(d);
  }
  /* NCCL: the version and a unique id work without a driver */
  if (ops->nccl_unique_id) {
    CHECK(info.nccl_version >= 21403, "NCCL version %d", info.nccl_version);
    uint8_t id[ACC__NCCL_ID_BYTES] = {0};
    int r = ops->nccl_unique_id(id);
    CHECK(r == ACC_OK, "ncclGetUniqueId: %s", ops->last_error());
  }
#endif
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "load";
  if (!strcmp(mode, "load")) {
    test_load();
  } else if (!strcmp(mode, "badpath")) {
    setenv("ACCELERATE_CUDA_MODULE", "/nonexistent/dir/libaccelerate-cuda.so", 1);
    const acc__device_ops *ops = (const acc__device_ops *)1;
    CHECK_ERR(acc__device_module_load("cuda", &ops), ACC_ERR_NOT_SUPPORTED,
              "/nonexistent/dir/libaccelerate-cuda.so");
    CHECK(ops == NULL, "ops set after a failed load");
    CHECK_ERR(acc__device_module_load("rocm", &ops), ACC_ERR_NOT_SUPPORTED,
              "no device module named \"rocm\"");
  } else if (!strcmp(mode, "badabi") && argc > 2) {
    setenv("ACCELERATE_CUDA_MODULE", argv[2], 1);
    const acc__device_ops *ops = NULL;
    char got[64], want[64];
    snprintf(got, sizeof got, "device module ABI version %u", ACC__DEVICE_ABI_VERSION + 41u);
    snprintf(want, sizeof want, "expected version %u", ACC__DEVICE_ABI_VERSION);
    CHECK_ERR(acc__device_module_load("cuda", &ops), ACC_ERR_NOT_SUPPORTED, got);
    CHECK(strstr(acc_last_error(), want) != NULL, "message: %s", acc_last_error());
    acc__device *d = NULL;
    CHECK_ERR(acc__device_open(&d, ACC__DEVICE_CUDA, 0), ACC_ERR_NOT_SUPPORTED,
              "rebuild the module");
  } else {
    fprintf(stderr, "usage: test_device_module load | badpath | badabi <module>\n");
    return 2;
  }
  return acc_test_finish("device_module");
}
