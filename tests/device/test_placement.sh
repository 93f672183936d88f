#!/bin/sh
# Which GPU each process trains on, through `accelerate launch` with real processes on a machine
# of fake GPUs (ACCELERATE_TEST_FAKE_GPUS, bus numbers from ACCELERATE_TEST_FAKE_GPU_BUS_IDS):
# GPU <local rank>, --gpu_ids / CUDA_VISIBLE_DEVICES, ACCELERATE_TORCH_DEVICE, processes that
# outnumber GPUs (an error on every process naming who would share, or --gpu_sharing), two ids of
# one GPU caught by PCI bus id, --cpu, the state's report, --multi_gpu's process count and the
# --gpu_ids checks. usage: test_placement.sh ACCELERATE PROGRAM
ACC=$1
PROG=$2
T=$(mktemp -d /tmp/acc-placement-XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
export HF_HOME="$T/hf" # no default config file
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE ACCELERATE_RUN_ID CUDA_VISIBLE_DEVICES
unset ACCELERATE_USE_CPU ACCELERATE_TEST_DEVICE ACCELERATE_TEST_FAKE_GPUS ACCELERATE_GPU_SHARING
unset ACCELERATE_TEST_FAKE_GPU_BUS_IDS ACCELERATE_TORCH_DEVICE
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || { fail "$1: expected '$2' in:"; cat "$1"; }; }
hasnt() { grep -qF -- "$2" "$1" && { fail "$1: did not expect '$2' in:"; cat "$1"; }; }
# run NAME ENV... -- LAUNCH-ARGS: launches PROG; output in $T/NAME, status in $T/NAME.rc
run() {
  name=$1
  shift
  envs=""
  while [ "$1" != "--" ]; do
    envs="$envs $1"
    shift
  done
  shift
  env $envs "$ACC" launch "$@" >"$T/$name" 2>&1
  echo $? >"$T/$name.rc"
}
ok() { [ "$(cat "$T/$1.rc")" = 0 ] || { fail "$1 exited $(cat "$T/$1.rc"):"; cat "$T/$1"; }; }
failed() { [ "$(cat "$T/$1.rc")" != 0 ] || { fail "$1 exited 0:"; cat "$T/$1"; }; }

# 1. one GPU per local rank; the state reports it, MULTI_GPU
run each ACCELERATE_TEST_FAKE_GPUS=3 -- --num_processes 3 "$PROG"
ok each
has "$T/each" "rank 0 local 0 device=fake:0 state=fake:0 type=MULTI_GPU describe=Device: fake:0 (PCI 00000000:01:00.0)"
has "$T/each" "rank 1 local 1 device=fake:1 state=fake:1 type=MULTI_GPU"
has "$T/each" "rank 2 local 2 device=fake:2 state=fake:2 type=MULTI_GPU describe=Device: fake:2 (PCI 00000000:03:00.0)"

# 2. one process, no launcher: GPU 0, distributed type NO
ACCELERATE_TEST_FAKE_GPUS=2 "$PROG" >"$T/one" 2>&1 || fail "one process exited $?"
has "$T/one" "rank 0 local 0 device=fake:0 state=fake:0 type=NO"

# 3. --gpu_ids: CUDA_VISIBLE_DEVICES renumbers; the messages name the physical GPU
run ids ACCELERATE_TEST_FAKE_GPUS=4 -- --num_processes 2 --gpu_ids 3,1 "$PROG"
ok ids
has "$T/ids" "rank 0 local 0 device=fake:0 state=fake:0 type=MULTI_GPU describe=Device: fake:0 (PCI 00000000:04:00.0, CUDA_VISIBLE_DEVICES=3,1)"
has "$T/ids" "rank 1 local 1 device=fake:1 state=fake:1 type=MULTI_GPU describe=Device: fake:1 (PCI 00000000:02:00.0, CUDA_VISIBLE_DEVICES=3,1)"

# 4. processes outnumber GPUs: every process stops before training, naming who would share what
run over ACCELERATE_TEST_FAKE_GPUS=4 -- --num_processes 3 --gpu_ids 0,2 "$PROG"
failed over
has "$T/over" "3 processes on this machine but 2 GPU(s) visible (CUDA_VISIBLE_DEVICES=0,2): local ranks 0, 2 would share cuda:0 (PCI 00000000:01:00.0)"
has "$T/over" "--gpu_sharing"
hasnt "$T/over" "device="

# 5. ... unless sharing was asked for: GPU local_rank % count, one warning, "shared"
run share ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 3 --gpu_sharing "$PROG"
ok share
has "$T/share" "rank 2 local 2 device=fake:0 state=fake:0 type=MULTI_GPU describe=Device: fake:0 (PCI 00000000:01:00.0, shared)"
has "$T/share" "rank 1 local 1 device=fake:1 state=fake:1 type=MULTI_GPU describe=Device: fake:1 (PCI 00000000:02:00.0, shared)"
[ "$(grep -c 'GPU sharing (--gpu_sharing): 3 processes train on 2 GPU(s)' "$T/share")" = 1 ] ||
  { fail "share: expected one sharing warning:"; cat "$T/share"; }
run share_env ACCELERATE_TEST_FAKE_GPUS=1 ACCELERATE_GPU_SHARING=1 -- --num_processes 2 "$PROG"
ok share_env
has "$T/share_env" "rank 1 local 1 device=fake:0"

# 6. two GPU ids naming one physical GPU (same PCI bus id): caught before any training
run bus ACCELERATE_TEST_FAKE_GPUS=2 ACCELERATE_TEST_FAKE_GPU_BUS_IDS=7,7 -- --num_processes 2 "$PROG"
failed bus
has "$T/bus" "processes 0 and 1 would share one GPU: PCI 00000000:07:00.0 on host"
hasnt "$T/bus" "device="
# with sharing asked for, the same machine trains (shared)
run bus_share ACCELERATE_TEST_FAKE_GPUS=2 ACCELERATE_TEST_FAKE_GPU_BUS_IDS=7,7 -- --num_processes 2 --gpu_sharing "$PROG"
ok bus_share
has "$T/bus_share" "describe=Device: fake:1 (PCI 00000000:07:00.0, shared)"

# different CUDA_VISIBLE_DEVICES orders per process (0,1 and 1,0): cuda:0 of process 0 and cuda:1
# of process 1 are both physical GPU 0
run order ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 2 sh -c \
  'if [ "$LOCAL_RANK" = 0 ]; then CUDA_VISIBLE_DEVICES=0,1; else CUDA_VISIBLE_DEVICES=1,0; fi; export CUDA_VISIBLE_DEVICES; exec "$0"' "$PROG"
failed order
has "$T/order" "processes 0 and 1 would share one GPU: PCI 00000000:01:00.0 on host"
has "$T/order" "(process 0: fake:0, PCI 00000000:01:00.0, CUDA_VISIBLE_DEVICES=0,1; process 1: fake:1, PCI 00000000:01:00.0, CUDA_VISIBLE_DEVICES=1,0)"

# each process pinned to one GPU by a CUDA_VISIBLE_DEVICES of its own: cuda:0 everywhere, accepted
# when the bus ids differ, refused naming both when they are one GPU
run pinned ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 2 sh -c \
  'CUDA_VISIBLE_DEVICES=$LOCAL_RANK; export CUDA_VISIBLE_DEVICES; exec "$0"' "$PROG"
ok pinned
has "$T/pinned" "rank 0 local 0 device=fake:0 state=fake:0 type=MULTI_GPU describe=Device: fake:0 (PCI 00000000:01:00.0, CUDA_VISIBLE_DEVICES=0)"
has "$T/pinned" "rank 1 local 1 device=fake:0 state=fake:0 type=MULTI_GPU describe=Device: fake:0 (PCI 00000000:02:00.0, CUDA_VISIBLE_DEVICES=1)"
run pinned_same ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 2 sh -c \
  'CUDA_VISIBLE_DEVICES=1; export CUDA_VISIBLE_DEVICES; exec "$0"' "$PROG"
failed pinned_same
has "$T/pinned_same" "processes 0 and 1 would share one GPU: PCI 00000000:02:00.0 on host"

# 7. ACCELERATE_TORCH_DEVICE: cuda:N for every process is one GPU twice; cpu; a bad value
run td ACCELERATE_TEST_FAKE_GPUS=4 ACCELERATE_TORCH_DEVICE=cuda:2 -- --num_processes 2 "$PROG"
failed td
has "$T/td" "processes 0 and 1 would share one GPU: PCI 00000000:03:00.0"
ACCELERATE_TEST_FAKE_GPUS=4 ACCELERATE_TORCH_DEVICE=cuda:2 "$PROG" >"$T/td1" 2>&1 || fail "td1 exited $?"
has "$T/td1" "device=fake:2 state=fake:2 type=NO describe=Device: fake:2 (PCI 00000000:03:00.0)"
ACCELERATE_TEST_FAKE_GPUS=2 ACCELERATE_TORCH_DEVICE=cuda:2 "$PROG" >"$T/td2" 2>&1 && fail "cuda:2 of 2 GPUs accepted"
has "$T/td2" "ACCELERATE_TORCH_DEVICE=cuda:2, but this process sees 2 GPU(s)"
run tdcpu ACCELERATE_TEST_FAKE_GPUS=2 ACCELERATE_TORCH_DEVICE=cpu -- --num_processes 2 "$PROG"
ok tdcpu
has "$T/tdcpu" "rank 1 local 1 device=cpu state=cpu type=MULTI_CPU describe=Device: cpu"
run tdbad ACCELERATE_TEST_FAKE_GPUS=2 ACCELERATE_TORCH_DEVICE=gpu0 -- --num_processes 2 "$PROG"
failed tdbad
has "$T/tdbad" 'ACCELERATE_TORCH_DEVICE="gpu0": expected cuda, cuda:N (N a GPU number) or cpu'

# 8. --cpu wins: the CPU, MULTI_CPU
run cpu ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 2 --cpu "$PROG"
ok cpu
has "$T/cpu" "rank 0 local 0 device=cpu state=cpu type=MULTI_CPU"

# the state's cpu option is the same rule as --cpu
run statecpu ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 2 "$PROG" statecpu
ok statecpu
has "$T/statecpu" "rank 1 local 1 device=cpu state=cpu type=MULTI_CPU"

# 9. no GPU visible: AUTO trains on the CPU, CUDA is an error on every process
run none ACCELERATE_TEST_FAKE_GPUS=2 CUDA_VISIBLE_DEVICES= -- --num_processes 2 "$PROG"
ok none
has "$T/none" "rank 1 local 1 device=cpu state=cpu type=MULTI_CPU"
run nonecuda ACCELERATE_TEST_FAKE_GPUS=2 CUDA_VISIBLE_DEVICES= -- --num_processes 2 "$PROG" cuda
failed nonecuda
has "$T/nonecuda" "the program asked for a GPU (ACC_DEVICE_CUDA) but none can be used: no CUDA GPU"

# 10. --multi_gpu without --num_processes: one process per GPU (or per --gpu_ids entry)
run mg ACCELERATE_TEST_FAKE_GPUS=3 -- --multi_gpu "$PROG"
ok mg
has "$T/mg" "--num_processes not given: 3, one per GPU of this machine"
has "$T/mg" "rank 2 local 2 device=fake:2"
run mgids ACCELERATE_TEST_FAKE_GPUS=4 -- --multi_gpu --gpu_ids 0,3 "$PROG"
ok mgids
has "$T/mgids" "--num_processes not given: 2, one per GPU of --gpu_ids"
has "$T/mgids" "describe=Device: fake:1 (PCI 00000000:04:00.0, CUDA_VISIBLE_DEVICES=0,3)"
run mg1 ACCELERATE_TEST_FAKE_GPUS=4 -- --multi_gpu --gpu_ids 2 "$PROG"
failed mg1
has "$T/mg1" "Less than two GPU ids were configured"
run mgnone ACCELERATE_TEST_FAKE_GPUS=2 CUDA_VISIBLE_DEVICES= -- --multi_gpu "$PROG"
failed mgnone
has "$T/mgnone" "--multi_gpu without --num_processes: no GPU found on this machine"

# 11. --gpu_ids checks: integers, no duplicates, within the GPU count
run dup ACCELERATE_TEST_FAKE_GPUS=4 -- --num_processes 2 --gpu_ids 1,1 "$PROG"
[ "$(cat "$T/dup.rc")" = 2 ] || fail "duplicate ids: exit $(cat "$T/dup.rc")"
has "$T/dup" '--gpu_ids "1,1": GPU id 1 is listed twice'
run range ACCELERATE_TEST_FAKE_GPUS=4 -- --num_processes 2 --gpu_ids 0,4 "$PROG"
[ "$(cat "$T/range.rc")" = 2 ] || fail "id out of range: exit $(cat "$T/range.rc")"
has "$T/range" "GPU id 4 does not exist: this machine has 4 GPU(s) (ids 0..3)"
run word ACCELERATE_TEST_FAKE_GPUS=4 -- --num_processes 2 --gpu_ids 0,x "$PROG"
has "$T/word" "'x' is not a GPU id"
run empty ACCELERATE_TEST_FAKE_GPUS=4 -- --num_processes 2 --gpu_ids 0, "$PROG"
has "$T/empty" "an entry is empty"

# 12. the config file's distributed_type MULTI_GPU and gpu_ids reach the processes; a bad
#     gpu_ids names the file
cat >"$T/mg.yaml" <<'EOF'
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
gpu_ids: 2,0
mixed_precision: 'no'
num_machines: 1
num_processes: 2
use_cpu: false
EOF
run cfg ACCELERATE_TEST_FAKE_GPUS=3 -- --config_file "$T/mg.yaml" "$PROG"
ok cfg
has "$T/cfg" "rank 0 local 0 device=fake:0 state=fake:0 type=MULTI_GPU describe=Device: fake:0 (PCI 00000000:03:00.0, CUDA_VISIBLE_DEVICES=2,0)"
sed 's/gpu_ids: 2,0/gpu_ids: 2,2/' "$T/mg.yaml" >"$T/bad.yaml"
run cfgbad ACCELERATE_TEST_FAKE_GPUS=3 -- --config_file "$T/bad.yaml" "$PROG"
failed cfgbad
has "$T/cfgbad" "GPU id 2 is listed twice"
has "$T/cfgbad" "the value is key gpu_ids of the config file $T/bad.yaml"

# 13. debug mode: the placement collective is the library's own, matched on every process
run dbg ACCELERATE_TEST_FAKE_GPUS=2 -- --num_processes 2 --debug "$PROG"
ok dbg

if [ $fails -eq 0 ]; then echo PASS; else echo "$fails failure(s)"; exit 1; fi
