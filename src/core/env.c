/* The environment variable table and its typed, range-checked readers (see env.h).
 *
 * To add a variable: add one ROW below, read it with acc__env_int / acc__env_double /
 * acc__env_bool / acc__env_enum / acc__env_str, and regenerate the table of
 * docs/environment.md (`build/tests/unit/env_table_doc`, see docs/testing.md). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/env.h"

#define LIB ACC__ENV_LIB
#define CLI ACC__ENV_CLI
#define SETS ACC__ENV_LAUNCHER
#define EXT ACC__ENV_EXTERNAL
#define RANKS 1048575.0 /* largest rank accepted from any launcher (world sizes up to 2^20) */
#define SIZES 1048576.0

#define ROW(name, type, min, max, choices, def, who, meaning) \
  {name, ACC__ENV_##type, min, max, choices, def, who, meaning},

/* clang-format off */
static const acc__env_var table[] = {
/* ---- process identity: accelerate launch ---- */
ROW("ACCELERATE_RUN_ID", STRING, 0, 0, NULL, "", LIB | SETS, "Identifies the run; its presence selects the accelerate launch environment (RANK, WORLD_SIZE, ...). Part of the shared-memory segment name.")
ROW("RANK", INT, 0, RANKS, NULL, "", LIB | SETS | EXT, "Global rank of this process (accelerate launch, torchrun).")
ROW("WORLD_SIZE", INT, 1, SIZES, NULL, "", LIB | SETS | EXT, "Number of processes of the job.")
ROW("LOCAL_RANK", INT, 0, RANKS, NULL, "RANK on one machine", LIB | SETS | EXT, "Rank of this process on its machine.")
ROW("LOCAL_WORLD_SIZE", INT, 1, SIZES, NULL, "WORLD_SIZE", LIB | SETS | EXT, "Number of processes on this machine.")
ROW("ACCELERATE_NUM_MACHINES", INT, 1, SIZES, NULL, "WORLD_SIZE / LOCAL_WORLD_SIZE", LIB | SETS, "Number of machines of the job.")
ROW("ACCELERATE_MACHINE_RANK", INT, 0, RANKS, NULL, "0", SETS, "Rank of this machine.")
ROW("ACCELERATE_RESTART_COUNT", INT, 0, 2147483647.0, NULL, "0", SETS, "How many times accelerate launch restarted the job (--max_restarts).")
ROW("MASTER_ADDR", STRING, 0, 0, NULL, "127.0.0.1", SETS | EXT, "Address of the main machine (--main_process_ip): IPv4, IPv6 (::1 or [::1]) or a host name; under srun --mpi=none across nodes, unset: the first host of SLURM_STEP_NODELIST.")
ROW("MASTER_PORT", INT, 1, 65535, NULL, "29500", SETS | EXT | LIB, "Port of the main machine (--main_process_port); under torchrun, part of the job id.")
/* ---- several machines: the rendezvous store (docs/multi-machine.md) ---- */
ROW("ACCELERATE_RDZV_ID", STRING, 0, 0, NULL, "default", LIB | SETS | CLI, "Rendezvous id of the job (--rdzv_id): every launcher and process of one job must give the same; a client of another job on the same port is refused.")
ROW("ACCELERATE_RDZV_TIMEOUT", DOUBLE, 0.001, 31536000, NULL, "60", LIB | CLI, "Seconds every join may take: reaching the rendezvous store and every process joining it (several machines), and the processes of a machine meeting in shared memory (ACCELERATE_RENDEZVOUS_TIMEOUT is an alias; both set to different values is an error).")
ROW("ACCELERATE_PARTITION_TIMEOUT", DOUBLE, 0, 86400.0, NULL, "30", LIB | CLI, "Seconds after which a connection to the rendezvous store whose peer stopped answering (a network partition, a machine that vanished) counts as lost, and the job fails naming the machine (TCP keepalive and TCP_USER_TIMEOUT); a shorter outage is survived; 0 turns it off. Independent of ACCELERATE_TIMEOUT.")
ROW("ACCELERATE_STORE_SECRET", STRING, 0, 0, NULL, "", LIB | CLI, "Shared secret of the rendezvous store: the store refuses clients that do not send the same one.")
ROW("ACCELERATE_STORE_SECRET_FILE", STRING, 0, 0, NULL, "", LIB | CLI, "A file (mode 600) whose first line is the store's shared secret, when ACCELERATE_STORE_SECRET is unset.")
ROW("GROUP_RANK", INT, 0, RANKS, NULL, "RANK / LOCAL_WORLD_SIZE", LIB | EXT, "torchrun: rank of this machine (several machines without accelerate launch).")
/* ---- process identity: other launchers ---- */
ROW("TORCHELASTIC_RUN_ID", STRING, 0, 0, NULL, "", LIB | EXT, "torchrun's run id, part of the job id.")
ROW("OMPI_COMM_WORLD_RANK", INT, 0, RANKS, NULL, "", LIB | EXT, "Open MPI (mpirun): global rank.")
ROW("OMPI_COMM_WORLD_SIZE", INT, 1, SIZES, NULL, "", LIB | EXT, "Open MPI: number of processes.")
ROW("OMPI_COMM_WORLD_LOCAL_RANK", INT, 0, RANKS, NULL, "global rank", LIB | EXT, "Open MPI: rank on this machine.")
ROW("OMPI_COMM_WORLD_LOCAL_SIZE", INT, 1, SIZES, NULL, "world size", LIB | EXT, "Open MPI: processes on this machine.")
ROW("OMPI_MCA_ess_base_jobid", STRING, 0, 0, NULL, "", LIB | EXT, "Open MPI: job id, part of the job id.")
ROW("PMIX_NAMESPACE", STRING, 0, 0, NULL, "", LIB | EXT, "Open MPI (PMIx): namespace, part of the job id.")
ROW("PMI_RANK", INT, 0, RANKS, NULL, "", LIB | EXT, "MPICH (Hydra): global rank.")
ROW("PMI_SIZE", INT, 1, SIZES, NULL, "", LIB | EXT, "MPICH: number of processes.")
ROW("MPI_LOCALRANKID", INT, 0, RANKS, NULL, "global rank", LIB | EXT, "MPICH: rank on this machine.")
ROW("MPI_LOCALNRANKS", INT, 1, SIZES, NULL, "world size", LIB | EXT, "MPICH: processes on this machine.")
ROW("PMI_KVSNAME", STRING, 0, 0, NULL, "", LIB | EXT, "MPICH: key-value space name, part of the job id.")
ROW("MV2_COMM_WORLD_RANK", INT, 0, RANKS, NULL, "", LIB | EXT, "MVAPICH: global rank.")
ROW("MV2_COMM_WORLD_SIZE", INT, 1, SIZES, NULL, "", LIB | EXT, "MVAPICH: number of processes.")
ROW("MV2_COMM_WORLD_LOCAL_RANK", INT, 0, RANKS, NULL, "global rank", LIB | EXT, "MVAPICH: rank on this machine.")
ROW("MV2_COMM_WORLD_LOCAL_SIZE", INT, 1, SIZES, NULL, "world size", LIB | EXT, "MVAPICH: processes on this machine.")
ROW("PMIX_RANK", STRING, 0, 0, NULL, "", LIB | EXT, "PMIx (srun --mpi=pmix): its presence picks the Open MPI module under srun.")
ROW("SLURM_PROCID", INT, 0, RANKS, NULL, "", LIB | EXT, "Slurm (srun): global rank; with a SLURM_STEP_ID of an srun step, Slurm's variables win over PMI_RANK/PMI_SIZE; without one (the batch script), the program runs as one process with a warning.")
ROW("SLURM_STEP_NUM_TASKS", INT, 1, SIZES, NULL, "SLURM_NTASKS", LIB | EXT, "Slurm: number of tasks of the srun step (the world size).")
ROW("SLURM_NTASKS", INT, 1, SIZES, NULL, "", LIB | EXT, "Slurm: number of tasks of the job, when the step's count is not set.")
ROW("SLURM_NODEID", INT, 0, RANKS, NULL, "0", LIB | EXT | CLI, "Slurm: index of this node in the step; picks this node's entry of SLURM_STEP_TASKS_PER_NODE; the machine rank under srun --mpi=none across nodes, and of an accelerate launch without --machine_rank that runs as an srun task.")
ROW("SLURM_STEP_NUM_NODES", INT, 1, SIZES, NULL, "length of SLURM_STEP_TASKS_PER_NODE", LIB | EXT, "Slurm: number of nodes of the srun step (the number of machines).")
ROW("SLURM_LOCALID", INT, 0, RANKS, NULL, "global rank", LIB | EXT, "Slurm: rank on this machine.")
ROW("SLURM_NTASKS_PER_NODE", INT, 1, SIZES, NULL, "", LIB | EXT, "Slurm: processes per machine, when neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set.")
ROW("SLURM_STEP_TASKS_PER_NODE", STRING, 0, 0, NULL, "", LIB | EXT, "Slurm: processes per machine of the step, as \"4(x2),3\" (entry SLURM_NODEID is this machine's).")
ROW("SLURM_TASKS_PER_NODE", STRING, 0, 0, NULL, "", LIB | EXT, "Slurm: processes per machine of the job, same format.")
ROW("SLURM_NNODES", INT, 1, SIZES, NULL, "1", LIB | EXT, "Slurm: number of machines, when no per-machine count is set.")
ROW("SLURM_STEP_NODELIST", STRING, 0, 0, NULL, "SLURM_JOB_NODELIST", LIB | EXT, "Slurm: the step's hosts; under srun --mpi=none across nodes without MASTER_ADDR, the first one hosts the rendezvous store (task 0 runs there).")
ROW("SLURM_JOB_NODELIST", STRING, 0, 0, NULL, "SLURM_NODELIST", LIB | EXT, "Slurm: the job's hosts, when the step's are not set.")
ROW("SLURM_NODELIST", STRING, 0, 0, NULL, "", LIB | EXT, "Slurm: the job's hosts (older name).")
ROW("SLURM_JOB_ID", STRING, 0, 0, NULL, "", LIB | EXT, "Slurm: job id, part of the job id.")
ROW("SLURM_STEP_ID", STRING, 0, 0, NULL, "", LIB | EXT, "Slurm: step id, part of the job id; a number below 4294967280 marks an srun task (Slurm's variables win over PMI's), unset or another value the batch script.")
/* ---- behaviour ---- */
ROW("ACCELERATE_USE_CPU", BOOL, 0, 0, NULL, "false", LIB | SETS, "Run on the CPU even when the program asks for a GPU (ACC_DEVICE_AUTO or ACC_DEVICE_CUDA); the state's cpu flag when acc_state_options.cpu is unset (--cpu sets it).")
ROW("ACCELERATE_TORCH_DEVICE", STRING, 0, 0, NULL, "cuda:<local rank>", LIB, "The device of a program that asks for a GPU: cuda (GPU <local rank>), cuda:N (GPU N of those this process sees) or cpu; anything else is an error.")
ROW("ACCELERATE_GPU_SHARING", BOOL, 0, 0, NULL, "false", LIB | SETS, "Let several processes of a machine train on one GPU (--gpu_sharing): GPU <local rank % GPU count> instead of an error, collectives through host memory (no NCCL). Not in Hugging Face Accelerate.")
ROW("ACCELERATE_TEST_DEVICE", ENUM, 0, 0, "none|fake", "none", LIB, "Testing: fake makes a program that asks for a GPU (ACC_DEVICE_AUTO or ACC_DEVICE_CUDA) train on the fake device (host memory behind a GPU's rules) instead, so CI without a GPU runs the device code paths; one fake GPU per local process unless ACCELERATE_TEST_FAKE_GPUS is set.")
ROW("ACCELERATE_CKPT_STAGE_BYTES", INT, 1, 2147483647.0, NULL, "67108864", LIB, "Bytes of host memory that stage a device buffer registered with acc_accelerator_register_buffers in save_state / load_state: the buffer moves chunk by chunk (rounded down to whole elements, at least one). Tests set it small to force many chunks.")
ROW("ACCELERATE_TEST_FAKE_GPUS", INT, 1, 16, NULL, "", LIB | CLI, "Testing: the machine has this many fake GPUs (implies the fake device); the library and the CLI (launch, config, env, test) see them through CUDA_VISIBLE_DEVICES as the CUDA runtime would.")
ROW("ACCELERATE_TEST_FAKE_GPU_BUS_IDS", STRING, 0, 0, NULL, "1,2,3,...", LIB | CLI, "Testing: the PCI bus number (0..255) of each fake GPU, comma-separated; two equal numbers make two GPU ids name one physical GPU.")
ROW("ACCELERATE_MIXED_PRECISION", ENUM, 0, 0, "no|fp16|bf16", "no", LIB | SETS, "Mixed precision mode when the program does not choose one.")
ROW("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", INT, 1, SIZES, NULL, "1", LIB, "Gradient accumulation steps; wins over the accelerator option.")
ROW("ACCELERATE_ZERO_STAGE", INT, 0, 2, NULL, "0", LIB | SETS, "ZeRO stage when the program does not choose one: 0 off, 1 optimizer state sharded across processes, 2 also the averaged gradients.")
/* ---- FSDP (docs/fsdp.md): exported by accelerate launch --use_fsdp --fsdp_*, read by acc_fsdp_create ---- */
ROW("ACCELERATE_USE_FSDP", BOOL, 0, 0, NULL, "false", SETS, "Set by accelerate launch --use_fsdp (and the config file's distributed_type: FSDP): the program's acc_fsdp calls shard; informational for the library, which reads the FSDP_* variables.")
ROW("FSDP_SHARDING_STRATEGY", STRING, 0, 0, NULL, "FULL_SHARD", LIB | SETS, "FSDP sharding strategy when the program's acc_fsdp_plugin leaves it unset: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2 (or torch's numbers 1-5); the HYBRID ones need one machine or the hierarchical backend.")
ROW("FSDP_RESHARD_AFTER_FORWARD", STRING, 0, 0, NULL, "from the strategy", LIB | SETS, "FSDP2's reshard_after_forward: true = FULL_SHARD, false = SHARD_GRAD_OP (or, as FSDP1 configs write it, a strategy name); a value that contradicts an explicit strategy is refused.")
ROW("FSDP_BACKWARD_PREFETCH", ENUM, 0, 0, "BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH", "BACKWARD_PRE", LIB | SETS, "FSDP: when the previous unit's parameters are gathered during backward.")
ROW("FSDP_FORWARD_PREFETCH", BOOL, 0, 0, NULL, "false", LIB | SETS, "FSDP: gather the next unit's parameters when a unit's forward begins.")
ROW("FSDP_STATE_DICT_TYPE", ENUM, 0, 0, "FULL_STATE_DICT|LOCAL_STATE_DICT|SHARDED_STATE_DICT", "SHARDED_STATE_DICT", LIB | SETS, "FSDP: what acc_fsdp_save_state writes (LOCAL_STATE_DICT is refused: a sharded one resumes anywhere).")
ROW("FSDP_OFFLOAD_PARAMS", BOOL, 0, 0, NULL, "false", LIB | SETS, "FSDP: keep the shards in host memory while training on a device (on the CPU they are there already).")
ROW("FSDP_AUTO_WRAP_POLICY", ENUM, 0, 0, "NO_WRAP|SIZE_BASED_WRAP|TRANSFORMER_BASED_WRAP", "NO_WRAP", LIB | SETS, "FSDP: the units of a program that declares none (NO_WRAP: the whole table; SIZE_BASED_WRAP: rows grouped up to FSDP_MIN_NUM_PARAMS; TRANSFORMER_BASED_WRAP is refused: declare the units).")
ROW("FSDP_MIN_NUM_PARAMS", INT, 1, 2147483647.0, NULL, "100000000", LIB | SETS, "FSDP SIZE_BASED_WRAP: elements per unit.")
ROW("ACCELERATE_FSDP_NCCL", ENUM, 0, 0, "auto|always|never", "auto", LIB, "FSDP on a device: auto runs its all-gathers, reduce-scatters and NO_SHARD all-reduces on device memory through NCCL when every process has it (the CUDA module built with NCCL, each process its own GPU, or the strict fake device's stand-in) and the strategy is not HYBRID, else host-staged through the CPU backend; always uses NCCL or fails saying why; never always host-stages (for comparison).")
ROW("FSDP_SYNC_MODULE_STATES", BOOL, 0, 0, NULL, "true", LIB | SETS, "FSDP: every process starts from process 0's parameters.")
ROW("FSDP_VERSION", STRING, 0, 0, NULL, "", SETS, "Hugging Face configs' fsdp_version (1 or 2): accepted, means nothing for a C program (docs/fsdp.md maps FSDP2's reshard_after_forward).")
ROW("FSDP_USE_ORIG_PARAMS", STRING, 0, 0, NULL, "", SETS, "Hugging Face configs' fsdp_use_orig_params: accepted, means nothing for a C program (units are row ranges of its own table).")
ROW("FSDP_CPU_RAM_EFFICIENT_LOADING", STRING, 0, 0, NULL, "", SETS, "Hugging Face configs' fsdp_cpu_ram_efficient_loading: accepted, means nothing for a C program.")
ROW("FSDP_TRANSFORMER_CLS_TO_WRAP", STRING, 0, 0, NULL, "", SETS, "Hugging Face configs' fsdp_transformer_layer_cls_to_wrap: accepted, means nothing for a C program (declare units with acc_fsdp_add_unit).")
ROW("FSDP_ACTIVATION_CHECKPOINTING", STRING, 0, 0, NULL, "", SETS, "Hugging Face configs' fsdp_activation_checkpointing: accepted; activations are the program's.")
ROW("ACCELERATE_COMM_HOOK", ENUM, 0, 0, "no|fp16|bf16|power_sgd", "no", LIB | SETS, "Gradient all-reduce compression when the program does not choose one (torch DDP's communication hooks): fp16/bf16, the buckets travel and are summed in that 16-bit type; power_sgd, matrices travel as low-rank factors (PowerSGD, with error feedback).")
ROW("ACCELERATE_POWERSGD_RANK", INT, 1, 1024, NULL, "1", LIB, "PowerSGD (comm hook power_sgd): the rank of the factors a gradient matrix travels as (torch's matrix_approximation_rank).")
ROW("ACCELERATE_POWERSGD_START_ITER", INT, 0, 2147483647, NULL, "1000", LIB, "PowerSGD (comm hook power_sgd): the first this many synchronizing steps average uncompressed (torch's start_powerSGD_iter).")
ROW("ACCELERATE_DEBUG_MODE", BOOL, 0, 0, NULL, "false", LIB | SETS, "Check that every process makes the same collective calls (--debug).")
ROW("ACCELERATE_MPI_FLAVOR", ENUM, 0, 0, "openmpi|mpich", "from the launcher", LIB, "Which MPI module the MPI backend loads (libaccelerate-mpi-<flavor>.so) when the launch environment does not say: Open MPI's mpirun and srun --mpi=pmix mean openmpi; MPICH's Hydra, MVAPICH and srun --mpi=pmi2 mean mpich.")
ROW("ACCELERATE_BACKEND", ENUM, 0, 0, "auto|single|shm|mpi|gloo|hierarchical", "auto", LIB, "Communication backend when the program does not choose one.")
ROW("ACCELERATE_DEVICE_NCCL", ENUM, 0, 0, "auto|always|never", "auto", LIB, "Gradient averaging of a model trained on a GPU: auto uses NCCL when there are several processes, each with its own GPU, and the CUDA module has NCCL (else the host-staged path through the CPU backend); always uses NCCL or fails saying why, also at one process (a one-rank communicator, for tests), and on the strict fake device takes its NCCL stand-in (tests); never always uses the host-staged path.")
ROW("ACCELERATE_TIMEOUT", DOUBLE, 0.001, 31536000, NULL, "1800", LIB, "Seconds a collective waits for the other processes before it fails; the only bound on a stopped or hung peer.")
ROW("ACCELERATE_RENDEZVOUS_TIMEOUT", DOUBLE, 0.001, 31536000, NULL, "60", LIB | CLI, "Alias of ACCELERATE_RDZV_TIMEOUT (both set to different values is an error).")
ROW("ACCELERATE_HANG_REPORT_S", DOUBLE, 0, 31536000, NULL, "60", LIB, "Seconds a collective waits before every waiting process prints one line naming the processes not arrived and what each is doing; 0: off.")
ROW("ACCELERATE_SHM_CHUNK_BYTES", INT, 4096, 67108864, NULL, "524288", LIB, "Bytes per step of the shared-memory backend (a multiple of 64).")
ROW("ACCELERATE_SHM_STREAM_MIN_BYTES", INT, 0, 2147483647.0, NULL, "0", LIB, "Shared-memory backend: collectives of at least this many bytes write into the shared segment with non-temporal stores (whole cache lines to memory, without first taking them back from the other processes' caches); smaller ones, and any copy under 2 KiB, with ordinary stores. Measured faster at every size from 4 KiB on a 2-vCPU AMD EPYC guest (docs/PERFORMANCE.md), hence 0 (always); 2147483647: never. Each process uses its own value.")
ROW("ACCELERATE_MODULE_DIR", STRING, 0, 0, NULL, "next to libaccelerate, then the install directory", LIB, "Directory searched first for the optional modules (libaccelerate-mpi-openmpi.so, libaccelerate-mpi-mpich.so).")
ROW("ACCELERATE_RENDEZVOUS_TOKEN", STRING, 0, 0, NULL, "", LIB | SETS, "Secret part of the shared-memory segment name (16..64 characters of [0-9A-Za-z_-]), exported by accelerate launch for each attempt; unset: rank 0 writes one to a 0600 file in a private runtime directory.")
ROW("ACCELERATE_LAUNCHER_STATUS_FD", INT, 0, 2147483647.0, NULL, "", LIB | SETS, "Descriptor of the launcher's board of ranks that died; set by accelerate launch only.")
ROW("XDG_RUNTIME_DIR", STRING, 0, 0, NULL, "", LIB | EXT, "First choice of the private directory for the rendezvous token file (must be owned by the user, mode 0700).")
ROW("ACCELERATE_SHM_SPIN_US", INT, 0, 1000000, NULL, "20 (1 when processes outnumber CPUs)", LIB, "Microseconds a waiting process of the shared-memory backend spins before it yields.")
ROW("ACCELERATE_SHM_NUDGE", BOOL, 0, 0, NULL, "false", LIB, "Shared-memory backend, no more processes than CPUs: a process that keeps finding the process it waits for on its own CPU moves itself to another CPU once. Helps collectives on an otherwise idle machine; slowed the 2-process training job under heavy load (docs/PERFORMANCE.md), hence off.")
ROW("ACCELERATE_SHM_YIELD_US", INT, 0, 1000000, NULL, "2000 (200 when processes outnumber CPUs)", LIB, "Microseconds a waiting process yields the CPU before it sleeps.")
ROW("ACCELERATE_HIER_PIECE_BYTES", INT, 0, 2147483647.0, NULL, "4194304", LIB, "Hierarchical backend (several machines): an all_reduce of at least twice this many bytes (an all_gather: its output) is cut into pieces of about this size, and the transfer of one piece between machines overlaps the shared-memory steps of its neighbours inside the machine. 0: no pipelining. Rank 0's value is used.")
ROW("ACCELERATE_GLOO_PAIR_BYTES", INT, 0, 2147483647.0, NULL, "1048576", LIB, "gloo backend between 2 processes (one per machine, or the leaders of two machines): an all_reduce of at least this many bytes (past the header exchange, which carries up to 1 MiB) runs as two halves, each reduced on one process in pieces of about 1 MiB while the next arrives; smaller ones past the exchange run gloo's ring. The default sends every all_reduce past the exchange in halves: on two connections, one per direction, they beat gloo's ring from 2 MiB on a veth link (docs/PERFORMANCE.md, session 15). Must be the same on every process: a difference fails the next collective, naming both values.")
ROW("ACCELERATE_SHM_SINGLE_COPY", ENUM, 0, 0, "off|auto|on", "auto", LIB, "Shared-memory backend: broadcast, all_gather and all_reduce from ACCELERATE_SHM_SINGLE_COPY_MIN_BYTES on copy the bytes once, straight from one process's buffer into another's (process_vm_readv), instead of through the shared segment. auto (the default): single copy only when ACCELERATE_SHM_SINGLE_COPY_MIN_BYTES is set and every process can read its peers (probed at start-up), else the copies, which were faster at every size measured but one tie (docs/PERFORMANCE.md, session 7); off: always the copies; on: required (acc_state_create fails, saying why, when the kernel or its ptrace policy forbids it), from the threshold or else from 65536 bytes for broadcast and the gathers. Rank 0's value is used.")
ROW("ACCELERATE_SHM_SINGLE_COPY_MIN_BYTES", INT, 0, 2147483647.0, NULL, "unset (single copy off; with ACCELERATE_SHM_SINGLE_COPY=on: 65536 for broadcast and the gathers)", LIB, "Shared-memory backend: the smallest message, in bytes, that moves by single copy, for broadcast, the gathers and all_reduce alike; setting it turns single copy on under auto. Rank 0's value is used.")
ROW("ACCELERATE_SHM_ALGO_ALL_REDUCE", ENUM, 0, 0, "auto|onestep|blocks", "auto", LIB, "Shared-memory backend: the all_reduce/reduce algorithm. auto (the default): by process count and size from the table in src/backend/shm_algo.c (bench/comm/algo_table.sh re-derives it); onestep: every process reduces every process's message after one step; blocks: each process reduces its 1/n block, then every process copies the others' blocks (two steps). Every choice gives the same bits. Rank 0's value is used.")
ROW("ACCELERATE_SHM_ALGO_ALL_GATHER", ENUM, 0, 0, "auto|slots|stream", "auto", LIB, "Shared-memory backend: the all_gather/gather algorithm. auto (the default): by process count and size from the table in src/backend/shm_algo.c; slots: copies out of the segment with ordinary stores; stream: with non-temporal stores (for outputs larger than the caches). Rank 0's value is used.")
ROW("ACCELERATE_CUDA_MODULE", STRING, 0, 0, NULL, "next to the library, then the install directory", LIB, "Path of the CUDA device module (libaccelerate-cuda.so) to load instead of searching for it.")
ROW("ACCELERATE_MPI_CHUNK", INT, 1, 1073741824, NULL, "1073741824", LIB, "Largest count (elements, or bytes for byte collectives) passed to one MPI call; larger collectives are split.")
/* ---- logging and profiling ---- */
ROW("ACCELERATE_LOG_LEVEL", STRING, 0, 0, NULL, "info", LIB, "Least severe level of the messages logged (a level name).")
ROW("ACCELERATE_LOG_FILE", STRING, 0, 0, NULL, "standard error", LIB, "File the log goes to; %h is replaced by the host name, %p by the process id, %r by the rank.")
ROW("ACCELERATE_PROFILE", STRING, 0, 0, NULL, "", LIB, "Directory the profiler writes its output to; unset: no profiling.")
/* ---- accelerate launch ---- */
ROW("ACCELERATE_LAUNCH_GRACE_PERIOD", DOUBLE, 0, 3600, NULL, "5", CLI, "Seconds accelerate launch waits after SIGTERM before it sends SIGKILL to the processes.")
ROW("ACCELERATE_CPU_AFFINITY", BOOL, 0, 0, NULL, "", SETS, "Set to 1 by --enable_cpu_affinity.")
ROW("ACCELERATE_DYNAMO_BACKEND", STRING, 0, 0, NULL, "", SETS, "Set from dynamo_config for Python programs; the library does not read it.")
ROW("ACCELERATE_DYNAMO_MODE", STRING, 0, 0, NULL, "", SETS, "Set from dynamo_config; not read.")
ROW("ACCELERATE_DYNAMO_USE_FULLGRAPH", BOOL, 0, 0, NULL, "", SETS, "Set from dynamo_config; not read.")
ROW("ACCELERATE_DYNAMO_USE_DYNAMIC", BOOL, 0, 0, NULL, "", SETS, "Set from dynamo_config; not read.")
ROW("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", BOOL, 0, 0, NULL, "", SETS, "Set from dynamo_config; not read.")
ROW("CCL_WORKER_COUNT", INT, 0, 65536, NULL, "", SETS, "Set from --ipex/--mpirun_ccl settings for oneCCL programs; not read.")
ROW("CUDA_VISIBLE_DEVICES", STRING, 0, 0, NULL, "", LIB | SETS | EXT, "Set from --gpu_ids; the CUDA runtime inside the CUDA module limits and renumbers the GPUs by it; accelerate-c names it in its messages about GPU numbers (and the fake GPUs follow it).")
ROW("OMP_NUM_THREADS", INT, 1, 65536, NULL, "1 when several processes share a machine", LIB | CLI | SETS, "Threads of OpenMP code; accelerate launch keeps a value that is already set, and under other launchers (srun, mpirun, torchrun) the state sets 1 when it is unset and several processes share the machine.")
ROW("OPENBLAS_NUM_THREADS", INT, 1, 65536, NULL, "same as OMP_NUM_THREADS", LIB | CLI | SETS, "Threads of OpenBLAS; same rule (a loaded OpenBLAS is told through openblas_set_num_threads).")
ROW("PATH", STRING, 0, 0, NULL, "", CLI, "Where accelerate launch looks for the program, and accelerate env for nvidia-smi.")
ROW("HF_HOME", STRING, 0, 0, NULL, "", CLI, "The config directory is $HF_HOME/accelerate when set.")
ROW("XDG_CACHE_HOME", STRING, 0, 0, NULL, "", CLI, "Else $XDG_CACHE_HOME/huggingface/accelerate.")
ROW("TERM", STRING, 0, 0, NULL, "", LIB, "dumb: the progress bar redraws with carriage returns and spaces only (no escape sequences).")
ROW("HOME", STRING, 0, 0, NULL, "", CLI | LIB, "Else $HOME/.cache/huggingface/accelerate; the library's last choice for the rendezvous token directory ($HOME/.cache/accelerate-run).")
};
/* clang-format on */

const acc__env_var *acc__env_table(size_t *count) {
  *count = sizeof table / sizeof table[0];
  return table;
}

const acc__env_var *acc__env_find(const char *name) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].name, name) == 0) return &table[i];
  return NULL;
}

static acc_result row_of(const char *name, const acc__env_var **out) {
  *out = acc__env_find(name);
  if (!*out)
    return acc__error(ACC_ERR_INTERNAL,
                      "environment variable %s is read but missing from the table of src/core/env.c",
                      name);
  return ACC_OK;
}

const char *acc__env_str(const char *name) { return getenv(name); }

acc_result acc__env_parse_int(const acc__env_var *v, const char *text, long *out) {
  char *end = NULL;
  errno = 0;
  long long x = strtoll(text, &end, 10);
  long long lo = (long long)v->min, hi = (long long)v->max;
  if (end == text || *end != '\0' || (errno && errno != ERANGE))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "environment variable %s=\"%s\" is not an integer (expected %lld..%lld)",
                      v->name, text, lo, hi);
  if (errno == ERANGE || x < lo || x > hi)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "environment variable %s=%s is out of range: expected %lld..%lld", v->name,
                      text, lo, hi);
  *out = (long)x;
  return ACC_OK;
}

acc_result acc__env_parse_double(const acc__env_var *v, const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double x = strtod(text, &end);
  if (end == text || *end != '\0' || isnan(x))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "environment variable %s=\"%s\" is not a number (expected %.10g..%.10g)",
                      v->name, text, v->min, v->max);
  if (errno == ERANGE || !(x >= v->min && x <= v->max))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "environment variable %s=%s is out of range: expected %.10g..%.10g", v->name,
                      text, v->min, v->max);
  *out = x;
  return ACC_OK;
}

acc_result acc__parse_bool(const char *name, const char *value, int *out) {
  static const char *yes[] = {"y", "yes", "t", "true", "on", "1"};
  static const char *no[] = {"n", "no", "f", "false", "off", "0"};
  for (size_t i = 0; i < 6; i++) {
    if (strcasecmp(value, yes[i]) == 0) {
      *out = 1;
      return ACC_OK;
    }
    if (strcasecmp(value, no[i]) == 0) {
      *out = 0;
      return ACC_OK;
    }
  }
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "%s=\"%s\" is not a boolean: use one of 1/0, true/false, yes/no, on/off", name,
                    value);
}

acc_result acc__env_bool(const char *name, int *out, int *was_set) {
  const acc__env_var *row;
  if (was_set) *was_set = 0;
  ACC_CHECK(row_of(name, &row));
  const char *v = getenv(name);
  if (!v || !*v) return ACC_OK;
  ACC_CHECK(acc__parse_bool(name, v, out));
  if (was_set) *was_set = 1;
  return ACC_OK;
}

/* The row of a numeric variable and its value (*v NULL when unset or empty). */
static acc_result numeric_value(const char *name, const acc__env_var **row, const char **v) {
  ACC_CHECK(row_of(name, row));
  if ((*row)->type != ACC__ENV_INT && (*row)->type != ACC__ENV_DOUBLE)
    return acc__error(ACC_ERR_INTERNAL, "environment variable %s is not numeric in the table",
                      name);
  *v = getenv(name);
  if (*v && !**v) *v = NULL;
  return ACC_OK;
}

acc_result acc__env_int(const char *name, long *out, int *was_set) {
  const acc__env_var *row;
  const char *v;
  *was_set = 0;
  ACC_CHECK(numeric_value(name, &row, &v));
  if (!v) return ACC_OK;
  ACC_CHECK(acc__env_parse_int(row, v, out));
  *was_set = 1;
  return ACC_OK;
}

acc_result acc__env_double(const char *name, double *out, int *was_set) {
  const acc__env_var *row;
  const char *v;
  *was_set = 0;
  ACC_CHECK(numeric_value(name, &row, &v));
  if (!v) return ACC_OK;
  ACC_CHECK(acc__env_parse_double(row, v, out));
  *was_set = 1;
  return ACC_OK;
}

acc_result acc__env_rdzv_timeout(double *out, int *was_set, const char **name) {
  double a = *out, b = *out;
  int sa = 0, sb = 0;
  ACC_CHECK(acc__env_double("ACCELERATE_RDZV_TIMEOUT", &a, &sa));
  ACC_CHECK(acc__env_double("ACCELERATE_RENDEZVOUS_TIMEOUT", &b, &sb));
  if (sa && sb && a != b)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "ACCELERATE_RDZV_TIMEOUT=%s and ACCELERATE_RENDEZVOUS_TIMEOUT=%s are both "
                      "set and differ: they are one setting (the second is an alias), set one",
                      getenv("ACCELERATE_RDZV_TIMEOUT"), getenv("ACCELERATE_RENDEZVOUS_TIMEOUT"));
  *was_set = sa || sb;
  if (name) *name = sb && !sa ? "ACCELERATE_RENDEZVOUS_TIMEOUT" : "ACCELERATE_RDZV_TIMEOUT";
  if (sa) *out = a;
  else if (sb) *out = b;
  return ACC_OK;
}

acc_result acc__env_enum(const char *name, int *index, int *was_set) {
  const acc__env_var *row;
  *was_set = 0;
  ACC_CHECK(row_of(name, &row));
  if (row->type != ACC__ENV_ENUM)
    return acc__error(ACC_ERR_INTERNAL, "environment variable %s is not an enum in the table",
                      name);
  const char *v = getenv(name);
  if (!v || !*v) return ACC_OK;
  const char *c = row->choices;
  size_t len = strlen(v);
  for (int i = 0; *c; i++) {
    size_t n = strcspn(c, "|");
    if (n == len && strncasecmp(c, v, n) == 0) {
      *index = i;
      *was_set = 1;
      return ACC_OK;
    }
    c += n;
    if (*c == '|') c++;
  }
  char list[256];
  snprintf(list, sizeof list, "%s", row->choices);
  for (char *p = list; *p; p++)
    if (*p == '|') *p = ',';
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "environment variable %s=\"%s\" is not one of %s", name, v, list);
}

static void print_who(FILE *out, int who) {
  const char *sep = "";
  if (who & ACC__ENV_LIB) fprintf(out, "%slibrary", sep), sep = ", ";
  if (who & ACC__ENV_CLI) fprintf(out, "%sCLI", sep), sep = ", ";
  if (who & ACC__ENV_LAUNCHER) fprintf(out, "%sset by accelerate launch", sep), sep = ", ";
  if (who & ACC__ENV_EXTERNAL) fprintf(out, "%sset by other launchers", sep);
}

void acc__env_print_markdown(FILE *out) {
  fprintf(out, "| Variable | Type | Range | Default | Read / set by | Meaning |\n");
  fprintf(out, "|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const acc__env_var *v = &table[i];
    fprintf(out, "| `%s` | ", v->name);
    switch (v->type) {
      case ACC__ENV_INT:
        fprintf(out, "integer | %.0f..%.0f", v->min, v->max);
        break;
      case ACC__ENV_DOUBLE:
        fprintf(out, "number | %.10g..%.10g", v->min, v->max);
        break;
      case ACC__ENV_BOOL: fprintf(out, "boolean | 1/0, true/false, yes/no, on/off"); break;
      case ACC__ENV_STRING: fprintf(out, "text | "); break;
      case ACC__ENV_ENUM: {
        fprintf(out, "choice | ");
        for (const char *c = v->choices; *c; c++) {
          if (*c == '|') fprintf(out, ", ");
          else fputc(*c, out);
        }
        break;
      }
    }
    fprintf(out, " | %s | ", v->def[0] ? v->def : "-");
    print_who(out, v->who);
    fprintf(out, " | %s |\n", v->meaning);
  }
}

int acc__env_print_set(FILE *out, const char *prefix) {
  int n = 0;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    /* PATH and HOME are not settings of accelerate, and long or private */
    if (!strcmp(table[i].name, "PATH") || !strcmp(table[i].name, "HOME")) continue;
    const char *v = getenv(table[i].name);
    if (!v) continue;
    fprintf(out, "%s%s=%s\n", prefix, table[i].name, v);
    n++;
  }
  return n;
}
