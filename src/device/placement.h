/* Placement: which device a process trains on. Not API.
 * The accelerator asks once, at acc_accelerator_create, with the program's acc_device_type. */
#ifndef ACC_DEVICE_PLACEMENT_H
#define ACC_DEVICE_PLACEMENT_H

#include "device/device.h"

typedef struct acc__placement {
  acc__device_kind kind;
  int ordinal;     /* the GPU (CUDA runtime numbering, after CUDA_VISIBLE_DEVICES); -1 on the CPU */
  int shared;      /* 1: two processes of the job train on one GPU (GPU sharing was asked for).
                      The same on every process of the job, so all of them avoid NCCL together */
  char bus_id[32]; /* PCI bus id of the GPU, "" on the CPU */
  char detail[160]; /* for messages: "PCI 00000000:01:00.0, CUDA_VISIBLE_DEVICES=1,0", "" on CPU */
  char why[160];   /* AUTO resolved to the CPU: the reason (logged), else "" */
} acc__placement;

/* want: an acc_device_type, or ACC_UNSET (the CPU). Rules, in order:
 *  - the CPU unless the program asked for AUTO or CUDA;
 *  - the state's cpu flag (acc_state_options.cpu, else ACCELERATE_USE_CPU, set by --cpu) or
 *    ACCELERATE_TORCH_DEVICE=cpu: the CPU;
 *  - the GPUs this process sees: the fake machine (ACCELERATE_TEST_FAKE_GPUS, or
 *    ACCELERATE_TEST_DEVICE=fake: one fake GPU per local process) or the CUDA module's probe
 *    (AUTO falls back to the CPU when there is none, CUDA fails with the probe's reason);
 *  - GPU <local rank>, or N under ACCELERATE_TORCH_DEVICE=cuda:N; more processes on the machine
 *    than GPUs is an error naming the processes that would share each GPU, unless
 *    ACCELERATE_GPU_SHARING (--gpu_sharing) is set: then GPU <local rank % count>.
 * With several processes, the choices are then compared over the CPU backend (a collective at
 * accelerator creation, every process takes part): any process's error, a mix of CPU and GPU
 * processes, or two processes of one machine on the same PCI bus id without sharing asked for,
 * fail on every process with the same message. On success the state reports the device
 * (acc_state_device, acc_state_distributed_type, acc_state_describe). */
acc_result acc__placement_resolve(acc_state *st, int want, acc__placement *out);

/* The GPUs this process sees, in CUDA runtime order: the fake machine when
 * ACCELERATE_TEST_FAKE_GPUS is set (ACCELERATE_TEST_DEVICE=fake without it: fake_default GPUs,
 * or the CUDA probe when fake_default <= 0), else the CUDA module's probe. *fake = 1 for the fake
 * machine. Returns ACC_OK when at least one GPU is seen, else an error saying why. */
acc_result acc__placement_gpus(acc__device_probe_info *info, int *fake, int fake_default);

/* Checks a --gpu_ids value: "all", or a comma-separated list of distinct integers >= 0, each
 * below gpu_count when gpu_count > 0. *n_ids: the number of ids (0 for "all"). */
acc_result acc__placement_check_gpu_ids(const char *ids, int gpu_count, int *n_ids);

#endif
