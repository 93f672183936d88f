#!/bin/sh
# The comm hooks on HYBRID_SHARD's two collectives across two "machines" (network namespaces,
# tests/multinode/netns_lib.sh; 2 processes per machine, the hierarchical backend): one backward of
# known gradients (test_fsdp_device hookgrad) under ACCELERATE_COMM_HOOK=bf16 and fp16; every
# process's gradient shard must be the hook's 16-bit arithmetic (reduce-scatter over the machine's
# processes, all-reduce over the rail, both summed in the hook's type; divided by 2 before and 2
# after) within one 16-bit step, and differ from the float32 mean.
#
# usage: hook_netns.sh ACCELERATE TEST_FSDP_DEVICE
# Exit 77 (skip) only when the namespaces cannot be created (needs root or CAP_NET_ADMIN).
set -u
ACC=$1
PROG=$2

. "$(dirname "$0")/../multinode/netns_lib.sh"
netns_up hk

export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ACCELERATE_RUN_ID MASTER_ADDR MASTER_PORT \
  ACCELERATE_STORE_SECRET ACCELERATE_STORE_SECRET_FILE ACCELERATE_RDZV_ID ACCELERATE_TEST_DEVICE \
  FSDP_SHARDING_STRATEGY FSDP_RESHARD_AFTER_FORWARD ACCELERATE_USE_FSDP
export ACCELERATE_BACKEND=hierarchical
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
PORT=29520

launch() {
  ns=$1 mr=$2 out=$3
  shift 3
  timeout $((120 * M)) ip netns exec "$ns" "$ACC" launch --num_machines 2 --machine_rank "$mr" --num_processes 4 \
    --main_process_ip $IPA --main_process_port $PORT "$PROG" "$@" >"$out" 2>&1
}

for hook in bf16 fp16; do
  for strat in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
    tag=${hook}_$strat
    ACCELERATE_COMM_HOOK=$hook launch "$NSB" 1 "$TMP/$tag.1" hookgrad "$strat" cpu - &
    j1=$!
    ACCELERATE_COMM_HOOK=$hook launch "$NSA" 0 "$TMP/$tag.0" hookgrad "$strat" cpu -
    rc0=$?
    wait $j1
    rc1=$?
    for mr in 0 1; do
      echo "--- $tag, machine $mr:"
      tail -6 "$TMP/$tag.$mr"
    done
    [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "$tag on 2 machines x 2: the launchers exited with $rc0 and $rc1"
    for mr in 0 1; do
      [ "$(grep -c "hookgrad: [0-9]* checks, 0 failed" "$TMP/$tag.$mr")" -eq 2 ] ||
        fail "$tag: machine $mr's two processes did not both report their checks passing"
    done
  done
done
echo "PASS: the bf16 and fp16 comm hooks on HYBRID_SHARD / HYBRID_SHARD_ZERO2 across 2 machines x 2 give the hook's 16-bit arithmetic"
