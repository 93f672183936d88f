/* The NCCL bootstrap (src/device/nccl_boot.c): the unique id made by process 0 and every
 * process's GPU (machine, host, PCI bus id), exchanged through the rendezvous store when the job
 * was joined through it (per-machine `accelerate launch`, torchrun's environment), else over the
 * CPU backend. Not API. */
#ifndef ACC_DEVICE_NCCL_BOOT_H
#define ACC_DEVICE_NCCL_BOOT_H

#include "device/device.h"

/* One process's GPU, as every process learns it. */
typedef struct acc__nccl_peer {
  int32_t rank;
  int32_t machine; /* machine rank (the store's); -1 when the job was not joined through it */
  char host[64];
  char bus[32]; /* PCI bus id */
} acc__nccl_peer;

/* Placement records this process's device (kind and PCI bus id) for the bootstrap. */
void acc__nccl_boot_note_device(acc__device_kind kind, const char *bus_id);

/* A collective (every process calls it, in the same order): process 0 makes the NCCL unique id
 * (the CUDA module's ncclGetUniqueId; on the fake device, random bytes of the same size), every
 * process publishes its GPU; every process gets the id and the table of all processes' GPUs
 * (peers: num_processes entries, or NULL). Two processes of one machine on one bus id fail on
 * every process naming both. *via_store (may be NULL): 1 when the rendezvous store carried it.
 * Process 0's failure reaches every process as the same error. */
acc_result acc__device_nccl_bootstrap(acc_state *st, uint8_t id[ACC__NCCL_ID_BYTES],
                                      acc__nccl_peer *peers, int *via_store);

#endif
