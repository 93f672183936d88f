/* Placement (placement.h): the device of this process from the program's wish, the launcher's
 * environment and the GPUs the CUDA module sees. */
#include <stdio.h>
#include <string.h>

#include "../env.h"
#include "accelerate/device.h"
#include "placement.h"

const char *acc_device_type_name(acc_device_type t) {
  switch (t) {
    case ACC_DEVICE_CPU: return "cpu";
    case ACC_DEVICE_CUDA: return "cuda";
    case ACC_DEVICE_AUTO: return "auto";
    case ACC_DEVICE_FAKE: return "fake";
  }
  return "unknown";
}

acc_result acc__placement_resolve(acc_state *st, int want, acc__placement *out) {
  memset(out, 0, sizeof *out);
  out->kind = ACC__DEVICE_CPU;
  out->ordinal = -1;
  if (want == ACC_UNSET || want == ACC_DEVICE_CPU) return ACC_OK;
  if (want != ACC_DEVICE_AUTO && want != ACC_DEVICE_CUDA)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "device is %d; choose ACC_DEVICE_CPU, ACC_DEVICE_AUTO or ACC_DEVICE_CUDA "
                      "(ACC_DEVICE_FAKE comes only from ACCELERATE_TEST_DEVICE=fake)",
                      want);
  int cpu = 0;
  ACC_CHECK(acc__env_bool("ACCELERATE_USE_CPU", &cpu, NULL));
  if (cpu) {
    snprintf(out->why, sizeof out->why, "ACCELERATE_USE_CPU is set (--cpu)");
    return ACC_OK;
  }
  const int local = acc_state_local_process_index(st);
  int test = 0, test_set = 0;
  ACC_CHECK(acc__env_enum("ACCELERATE_TEST_DEVICE", &test, &test_set));
  if (test_set && test == 1) {
    out->kind = ACC__DEVICE_FAKE;
    out->ordinal = local;
    return ACC_OK;
  }
  acc__device_probe_info info;
  acc_result rc = acc__device_cuda_probe(&info);
  if (rc != ACC_OK) {
    if (want == ACC_DEVICE_CUDA)
      return acc__error(rc, "the program asked for a GPU (ACC_DEVICE_CUDA) but none can be used: %s",
                        acc_last_error());
    snprintf(out->why, sizeof out->why, "%s", acc_last_error());
    acc_clear_error();
    return ACC_OK;
  }
  if (local >= info.device_count)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "process %d (local rank %d) has no GPU of its own: this machine shows %d "
                      "GPU(s) to the job; start at most %d process(es) per machine "
                      "(--num_processes), or pass --cpu",
                      acc_state_process_index(st), local, info.device_count, info.device_count);
  out->kind = ACC__DEVICE_CUDA;
  out->ordinal = local;
  return ACC_OK;
}
