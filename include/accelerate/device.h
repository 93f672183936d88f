/* accelerate-c: the device an accelerator trains on (CPU or a CUDA GPU), and its memory.
 *
 * A C program's kernels decide where it computes, so a program opts in to GPUs: it sets
 * acc_accelerator_options.device to ACC_DEVICE_AUTO (a GPU when one is present and --cpu is not
 * given, else the CPU) or ACC_DEVICE_CUDA (a GPU, or an error), then asks
 * acc_accelerator_device_type() which kernels to run. The default, ACC_DEVICE_CPU, keeps every
 * program written for the CPU as it was. See docs/gpu.md. */
#ifndef ACCELERATE_DEVICE_H
#define ACCELERATE_DEVICE_H

#include <stddef.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum acc_device_type {
  ACC_DEVICE_CPU = 0,  /* host memory; the program's kernels are CPU code */
  ACC_DEVICE_CUDA = 1, /* CUDA GPU cuda:<ordinal> (memory from cudaMalloc or acc_accelerator_alloc) */
  ACC_DEVICE_AUTO = 2, /* option only: CUDA when a GPU is present and --cpu is not given, else CPU */
  ACC_DEVICE_FAKE = 3  /* testing only (ACCELERATE_TEST_DEVICE=fake): a GPU's rules on the host
                          (explicit copies, stream order checked, device memory unreachable from
                          host code: a host access dies by SIGSEGV); the program's CPU kernels
                          reach it only inside acc_accelerator_host_kernel */
} acc_device_type;

typedef enum acc_copy_kind {
  ACC_COPY_HOST_TO_DEVICE = 0,
  ACC_COPY_DEVICE_TO_HOST = 1,
  ACC_COPY_DEVICE_TO_DEVICE = 2
} acc_copy_kind;

/** "cpu", "cuda", "auto", "fake". @since 0.1 */
ACC_EXTERN const char *acc_device_type_name(acc_device_type t);

#ifdef __cplusplus
}
#endif
#endif
