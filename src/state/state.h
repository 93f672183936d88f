/* The acc_state structure, shared by state.c, comm.c and control.c. */
#ifndef ACC_STATE_INTERNAL_H
#define ACC_STATE_INTERNAL_H

#include "backend/backend.h"

struct acc_state {
  uint32_t magic;
  int refs;
  int rank, size, local_rank, local_size, num_machines;
  acc_distributed_type type;
  acc_mixed_precision mixed_precision;
  int mp_explicit; /* mixed_precision came from acc_state_options (not the environment or the default) */
  int debug;
  int cpu;
  int backend_kind;
  double timeout_s;
  char launcher[16];
  char job_id[160];
  char device[16];
  char device_detail[200]; /* GPU: "PCI ..., CUDA_VISIBLE_DEVICES=..., shared" (describe) */
  char describe[512];
  acc__backend *be;
  int broken;          /* a collective failed for a remote reason: the group is unusable */
  char broken_msg[512];
  int32_t trigger;
  /* the comm worker thread and its queue of submitted collectives (comm/comm_async.c, owned by
   * comm), NULL until the first submit; async_stop joins it (acc_state_destroy) */
  struct acc__comm_async *async;
  void (*async_stop)(acc_state *st);
};

/* The device the accelerator placed this process on (src/device/placement.c): kind "cpu", "cuda"
 * or "fake", the GPU ordinal (-1 on the CPU), a detail for acc_state_describe, gpu = 1 for a
 * GPU (the fake one included): then the distributed type is MULTI_GPU with several processes. */
void acc__state_set_device(acc_state *st, const char *kind, int ordinal, const char *detail,
                           int gpu);

/* The accelerator's mixed precision becomes the state's, so both report one value: allowed when
 * the state's own came from the environment or the default; a contradicting explicit setting
 * of acc_state_create is ACC_ERR_INVALID_USAGE naming both. */
acc_result acc__state_adopt_mixed_precision(acc_state *st, acc_mixed_precision mp);

/* Marks the group broken (later collectives fail at once with msg); the first reason stays.
 * The thread that uses the state only. */
void acc__state_mark_broken(acc_state *st, const char *msg);
/* Peer liveness from the CPU backend (shm: the robust mutex of each rank; other backends: no
 * check, 0): 1 with the rank, pid and how when a peer is dead or left. Any thread. */
int acc__state_peer_gone(acc_state *st, int *rank, int *pid, char *how, size_t cap);

/* Validates a state handle at API entry. */
acc_result acc__state_check(const acc_state *st, const char *fn);

/* Detected launch environment (exposed for tests through acc__detect_env). */
typedef struct acc__env_info {
  int rank, size, local_rank, local_size, num_machines;
  int local_known;  /* 0: the launcher gave no local ids (PMI without MPI_LOCALRANKID): local_rank
                     * and local_size are placeholders, the tasks may span machines */
  char launcher[16]; /* accelerate, torchrun, openmpi, mpich, mvapich, slurm, slurm-batch, none */
  char pmi[8];       /* under srun: the PMI its mpi plugin set up (pmix, pmi2, none) */
  char job_id[160];
  char warning[320]; /* logged once by acc_state_create when not empty */
} acc__env_info;

acc_result acc__detect_env(acc__env_info *out);

#endif
