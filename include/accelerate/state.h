/* accelerate-c: the process state (Accelerate's PartialState).
 * Threads: create and destroy the process state from one thread (the singleton has no lock);
 * its getters may then be read from any thread. */
#ifndef ACCELERATE_STATE_H
#define ACCELERATE_STATE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The per-process state: who this process is and the process group it belongs to. Opaque. */
typedef struct acc_state acc_state;

typedef enum acc_distributed_type {
  ACC_DISTRIBUTED_NO = 0,        /* one process, no communication */
  ACC_DISTRIBUTED_MULTI_CPU = 1, /* several CPU processes (shared memory or MPI) */
  ACC_DISTRIBUTED_MULTI_GPU = 2  /* reserved: several GPU processes (NCCL) */
} acc_distributed_type;

typedef enum acc_mixed_precision {
  ACC_PRECISION_UNSET = -1, /* in options only: the same as ACC_UNSET (from the environment) */
  ACC_PRECISION_NO = 0,
  ACC_PRECISION_FP16 = 1,
  ACC_PRECISION_BF16 = 2
} acc_mixed_precision;

typedef enum acc_backend_kind {
  ACC_BACKEND_AUTO = 0,   /* shm on one machine; across machines MPI under mpirun, else gloo */
  ACC_BACKEND_SINGLE = 1, /* one process */
  ACC_BACKEND_SHM = 2,    /* built-in shared memory, one machine */
  ACC_BACKEND_MPI = 3,    /* MPI (the module libaccelerate-mpi-<flavor>.so, loaded when needed) */
  ACC_BACKEND_GLOO = 4,   /* gloo across machines (the module libaccelerate-gloo.so), joined
                             through the rendezvous store at MASTER_ADDR:MASTER_PORT */
  ACC_BACKEND_HIERARCHICAL = 5 /* several machines: shm inside each, gloo between one leader
                                  per machine (the default across machines without MPI) */
} acc_backend_kind;

#define ACC_UNSET (-1)
#define ACC_STATE_OPTIONS_VERSION 1

/**
 * Options for acc_state_create. Initialize with ACC_STATE_OPTIONS_INIT (or
 * acc_state_options_init); fields left at ACC_UNSET are taken from the environment that
 * `accelerate launch` (or torchrun, mpirun, srun) set, then from defaults.
 */
typedef struct acc_state_options {
  size_t size;              /* sizeof(acc_state_options), set by the INIT macro */
  uint32_t version;         /* ACC_STATE_OPTIONS_VERSION */
  int cpu;                  /* 1: CPU only, even for accelerators that ask for a GPU.
                               ACC_UNSET: env ACCELERATE_USE_CPU (--cpu), default 0 */
  acc_mixed_precision mixed_precision; /* ACC_UNSET: env ACCELERATE_MIXED_PRECISION */
  int debug;                /* 1: check collectives match. ACC_UNSET: env ACCELERATE_DEBUG_MODE */
  int backend;              /* acc_backend_kind. ACC_UNSET: env ACCELERATE_BACKEND, then AUTO */
  double timeout_s;         /* collective timeout. < 0: env ACCELERATE_TIMEOUT, default 1800 */
} acc_state_options;

#define ACC_STATE_OPTIONS_INIT \
  { sizeof(acc_state_options), ACC_STATE_OPTIONS_VERSION, ACC_UNSET, ACC_PRECISION_UNSET, ACC_UNSET, ACC_UNSET, \
    -1.0 }

/** @since 0.1 */
ACC_EXTERN acc_result acc_state_options_init(acc_state_options *opts, uint32_t version);

/**
 * Creates (or returns) this process's state. The first call detects the environment and joins
 * the process group (collective: every process of the job must call it). Later calls return the
 * same state and take a reference; options that contradict the existing state are an
 * ACC_ERR_INVALID_USAGE error naming the option.
 * @param out  receives the state. Ownership: release with acc_state_destroy.
 * @param opts NULL for all defaults.
 * @since 0.1
 */
ACC_EXTERN acc_result acc_state_create(acc_state **out, const acc_state_options *opts);

/** The existing state, or NULL when none was created. Borrowed. @since 0.1 */
ACC_EXTERN acc_state *acc_state_get(void);

/**
 * Drops one reference; the last one leaves the process group and frees everything (Accelerate's
 * destroy_process_group). Not collective, but peers still waiting for this process in a
 * collective are told it left. Accepts NULL. On the shared-memory backend, small broadcasts
 * are one-sided: when the last ones were not yet compared between processes, it first waits
 * until every process has made as many (or left), and if they differ it prints the mismatch on
 * stderr and ends the process with exit status 1 (docs/backends.md).
 * @since 0.1
 */
ACC_EXTERN void acc_state_destroy(acc_state *st);

/** @since 0.1 */
ACC_EXTERN int acc_state_num_processes(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_process_index(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_local_process_index(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_local_num_processes(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_num_machines(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_is_main_process(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_is_local_main_process(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_is_last_process(const acc_state *st);
/** 1 when the type is not NO and there is more than one process. @since 0.1 */
ACC_EXTERN int acc_state_use_distributed(const acc_state *st);
/** NO with one process; MULTI_CPU with several, MULTI_GPU once an accelerator trains them on
 * @since 0.1
 * GPUs (the fake test device included). */
ACC_EXTERN acc_distributed_type acc_state_distributed_type(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN acc_mixed_precision acc_state_mixed_precision(const acc_state *st);
/** @since 0.1 */
ACC_EXTERN int acc_state_debug(const acc_state *st);
/** Collective timeout in seconds. @since 0.1 */
ACC_EXTERN double acc_state_timeout(const acc_state *st);
/** The device of this process: "cpu" until an accelerator is placed on a GPU, then "cuda:N"
 * @since 0.1
 * ("fake:N" on the test device), as of the last acc_accelerator_create. Borrowed. */
ACC_EXTERN const char *acc_state_device(const acc_state *st);
/** Backend name: "single", "shm" or "mpi". Borrowed. @since 0.1 */
ACC_EXTERN const char *acc_state_backend_name(const acc_state *st);
/** Where the rank came from: "accelerate", "torchrun", "openmpi", "mpich", "mvapich", "slurm",
 * @since 0.1
 * "none". Borrowed. */
ACC_EXTERN const char *acc_state_launcher(const acc_state *st);

/**
 * Multi-line description like Accelerate's repr:
 *   Distributed environment: MULTI_CPU  Backend: shm
 *   Num processes: 2
 *   Process index: 0
 *   Local process index: 0
 *   Device: cpu
 *   Mixed precision type: no
 * Borrowed; lives as long as the state.
 * @since 0.1
 */
ACC_EXTERN const char *acc_state_describe(const acc_state *st);

/**
 * Only the main process prints: on every process but process 0, stdout is flushed and then
 * redirected to /dev/null (file descriptor 1, so printf, puts and write(1, ...) all go quiet).
 * stderr is left alone, so errors and warnings of every rank still show. For programs that print
 * from everywhere (the library's acc_accelerator_print already prints on the main process only);
 * the launcher's --local_ranks_filter does the same from outside. Not collective. Irreversible.
 * @since 0.2
 */
ACC_EXTERN acc_result acc_state_silence_non_main_stdout(acc_state *st);

/** @since 0.1 */
ACC_EXTERN const char *acc_distributed_type_name(acc_distributed_type t);
/** @since 0.1 */
ACC_EXTERN const char *acc_mixed_precision_name(acc_mixed_precision p);
/** Parses "no", "fp16", "bf16" (case-insensitive). @since 0.1 */
ACC_EXTERN acc_result acc_mixed_precision_parse(const char *s, acc_mixed_precision *out);

#ifdef __cplusplus
}
#endif
#endif
