/* Placement: which device a process trains on. Not API.
 * The accelerator asks once, at acc_accelerator_create, with the program's acc_device_type. */
#ifndef ACC_DEVICE_PLACEMENT_H
#define ACC_DEVICE_PLACEMENT_H

#include "device.h"

typedef struct acc__placement {
  acc__device_kind kind;
  int ordinal; /* the GPU (CUDA runtime numbering); -1 on the CPU */
  int shared;  /* 1: another process of this machine trains on the same GPU */
  char why[160]; /* AUTO resolved to the CPU: the reason (logged), else "" */
} acc__placement;

/* want: an acc_device_type, or ACC_UNSET (the CPU). Rules, in order: the CPU unless the program
 * asked for AUTO or CUDA; ACCELERATE_USE_CPU=true (--cpu) forces the CPU; ACCELERATE_TEST_DEVICE
 * =fake gives the fake device; else the CUDA module's probe: GPU <local rank> (AUTO falls back to
 * the CPU when there is no usable GPU, CUDA fails with the probe's reason). */
acc_result acc__placement_resolve(acc_state *st, int want, acc__placement *out);

#endif
