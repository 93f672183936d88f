#!/bin/sh
# The CLI on a machine with GPUs, simulated by fake GPUs (ACCELERATE_TEST_FAKE_GPUS): accelerate
# env lists each GPU, accelerate config shows them, offers their count and checks the ids,
# accelerate config default writes a MULTI_GPU file, accelerate test runs its device checks on
# one GPU per process. usage: test_gpu_cli.sh ACCELERATE
ACC=$1
T=$(mktemp -d /tmp/acc-gpu-cli-XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
export HF_HOME="$T/hf"
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE ACCELERATE_RUN_ID CUDA_VISIBLE_DEVICES
unset ACCELERATE_USE_CPU ACCELERATE_TEST_DEVICE ACCELERATE_TEST_FAKE_GPUS ACCELERATE_GPU_SHARING
unset ACCELERATE_TEST_FAKE_GPU_BUS_IDS ACCELERATE_TORCH_DEVICE
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || { fail "$1: expected '$2' in:"; cat "$1"; }; }

# 1. env: every GPU with its memory, compute capability and PCI bus id; CUDA_VISIBLE_DEVICES shown
ACCELERATE_TEST_FAKE_GPUS=3 CUDA_VISIBLE_DEVICES=2,0 "$ACC" env >"$T/env" 2>&1 || fail "env exited $?"
has "$T/env" "- CUDA: (fake GPUs: ACCELERATE_TEST_FAKE_GPUS): 2 GPUs (CUDA_VISIBLE_DEVICES=2,0)"
has "$T/env" "	cuda:0: fake GPU 2, 16.0 GiB, compute capability 0.0, PCI 00000000:03:00.0"
has "$T/env" "	cuda:1: fake GPU 0, 16.0 GiB, compute capability 0.0, PCI 00000000:01:00.0"
has "$T/env" "- Backends: single, shm, gloo: "
grep -q "training does not use GPUs" "$T/env" && fail "env still says GPUs are not used"

# 2. config: the GPUs are listed, "how many" defaults to their count, a bad id list is asked again
#    (answers: this machine, multi-GPU, 1 machine, no checks, no FSDP, default count, bad ids, ids, no)
printf '0\n2\n\n\n\n\n0,5\n0,1,2\n\n' | ACCELERATE_TEST_FAKE_GPUS=3 "$ACC" config --config_file "$T/q.yaml" >"$T/q" 2>&1 ||
  fail "config exited $?"
has "$T/q" "This machine has 3 GPU(s):"
has "$T/q" "  2) fake GPU 2, 16.0 GiB, PCI 00000000:03:00.0"
has "$T/q" "How many GPU(s) should be used for distributed training? [3]:"
has "$T/q" "GPU id 5 does not exist: this machine has 3 GPU(s) (ids 0..2)"
has "$T/q.yaml" "distributed_type: MULTI_GPU"
has "$T/q.yaml" "num_processes: 3"
has "$T/q.yaml" "gpu_ids: 0,1,2"

# 3. config default: one process per GPU, MULTI_GPU with several, not use_cpu
ACCELERATE_TEST_FAKE_GPUS=2 "$ACC" config default --config_file "$T/d.yaml" >"$T/d" 2>&1 || fail "config default exited $?"
has "$T/d.yaml" '"distributed_type": "MULTI_GPU"'
has "$T/d.yaml" '"num_processes": 2'
has "$T/d.yaml" '"use_cpu": false'
has "$T/d.yaml" '"gpu_ids": "all"'
ACCELERATE_TEST_FAKE_GPUS=1 "$ACC" config default --config_file "$T/d1.yaml" >/dev/null 2>&1 || fail "config default (1 GPU) exited $?"
has "$T/d1.yaml" '"distributed_type": "NO"'
has "$T/d1.yaml" '"use_cpu": false'

# 4. test without a config file: --multi_gpu, one process per GPU, device checks on each GPU
ACCELERATE_TEST_FAKE_GPUS=2 "$ACC" test >"$T/t" 2>&1 || { fail "test exited $?"; cat "$T/t"; }
has "$T/t" "launch --multi_gpu"
has "$T/t" "All checks passed on 2 process(es)"
has "$T/t" "[rank 1] device fake:1: memory and the sum across processes are right"

# 5. test with the MULTI_GPU config file written above (3 processes on 3 GPUs)
ACCELERATE_TEST_FAKE_GPUS=3 "$ACC" test --config_file "$T/q.yaml" >"$T/t3" 2>&1 || { fail "test (config) exited $?"; cat "$T/t3"; }
has "$T/t3" "All checks passed on 3 process(es)"
has "$T/t3" "[rank 2] device fake:2: memory and the sum across processes are right"

if [ $fails -eq 0 ]; then echo PASS; else echo "$fails failure(s)"; exit 1; fi
