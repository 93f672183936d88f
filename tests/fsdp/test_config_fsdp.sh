#!/bin/sh
# `accelerate config` asks Accelerate's FSDP questions (docs/fsdp.md) and writes the fsdp_config
# section as Accelerate writes it; `accelerate launch` reads that file back into the FSDP_*
# environment, and a real FSDP program on 2 processes trains under the strategy chosen:
#  1. FSDP1: SHARD_GRAD_OP (written into fsdp_reshard_after_forward, as Accelerate does), size-based
#     wrap with 5000 parameters, BACKWARD_POST, the defaults elsewhere;
#  2. FSDP2: resharding after forward off (= SHARD_GRAD_OP), FULL_STATE_DICT; the FSDP1-only
#     questions (backward / forward prefetch) are not asked;
#  3. answering no keeps multi-CPU and writes no fsdp_config.
# Usage: test_config_fsdp.sh ACCELERATE_CLI TEST_FSDP_PROGRAM SCRATCH_DIR
ACC=$1 PROG=$2 T=$3
rm -rf "$T" && mkdir -p "$T" || exit 1
export HF_HOME="$T/hf"
unset ACCELERATE_USE_FSDP FSDP_SHARDING_STRATEGY FSDP_RESHARD_AFTER_FORWARD FSDP_BACKWARD_PREFETCH
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has_line() { grep -qx -- "$2" "$1" || fail "$1 lacks the line '$2': $(cat "$1")"; }

# 1. this machine, multi-CPU, 1 machine, no checks, no mpirun, FSDP yes, version 1 (Enter),
#    SHARD_GRAD_OP, no offload, SIZE_BASED_WRAP, 5000, BACKWARD_POST, state dict (Enter: sharded),
#    no forward prefetch, sync (Enter: yes), 2 processes, no mixed precision
printf '0\n1\n\n\n\nyes\n\n1\n\n1\n5000\n1\n\n\n\n2\n\n' | "$ACC" config --config_file "$T/v1.yaml" >"$T/q1" 2>&1 ||
  fail "config exited non-zero: $(cat "$T/q1")"
grep -q 'Do you want to use FullyShardedDataParallel? \[yes/NO\]' "$T/q1" || fail "no FSDP question: $(cat "$T/q1")"
grep -q "What should be your FSDP's backward prefetch policy?" "$T/q1" || fail "no prefetch question"
for l in 'distributed_type: FSDP' 'fsdp_config:' '  fsdp_auto_wrap_policy: SIZE_BASED_WRAP' \
         '  fsdp_backward_prefetch: BACKWARD_POST' '  fsdp_forward_prefetch: false' '  fsdp_min_num_params: 5000' \
         '  fsdp_offload_params: false' '  fsdp_reshard_after_forward: SHARD_GRAD_OP' \
         '  fsdp_state_dict_type: SHARDED_STATE_DICT' '  fsdp_sync_module_states: true' '  fsdp_version: 1' \
         'num_processes: 2'; do
  has_line "$T/v1.yaml" "$l"
done
grep -q 'fsdp_use_orig_params\|fsdp_cpu_ram_efficient_loading\|fsdp_activation_checkpointing' "$T/v1.yaml" &&
  fail "keys that mean nothing in C were written: $(cat "$T/v1.yaml")"
"$ACC" launch --config_file "$T/v1.yaml" /usr/bin/env >"$T/env1" 2>&1 || fail "launch env: $(cat "$T/env1")"
for v in ACCELERATE_USE_FSDP=true FSDP_RESHARD_AFTER_FORWARD=SHARD_GRAD_OP FSDP_BACKWARD_PREFETCH=BACKWARD_POST \
         FSDP_MIN_NUM_PARAMS=5000 FSDP_AUTO_WRAP_POLICY=SIZE_BASED_WRAP FSDP_STATE_DICT_TYPE=SHARDED_STATE_DICT; do
  [ "$(grep -cx "$v" "$T/env1")" -eq 2 ] || fail "both processes should get $v: $(cat "$T/env1")"
done
"$ACC" launch --config_file "$T/v1.yaml" "$PROG" train_env SHARD_GRAD_OP >"$T/run1" 2>&1 ||
  fail "the FSDP program under the written file: $(cat "$T/run1")"

# 2. FSDP2 (version menu 1 = "2"): resharding after forward no, no offload, NO_WRAP (Enter),
#    FULL_STATE_DICT (0), sync (Enter), 2 processes, no mixed precision
printf '0\n1\n\n\n\nyes\n1\nno\n\n\n0\n\n2\n\n' | "$ACC" config --config_file "$T/v2.yaml" >"$T/q2" 2>&1 ||
  fail "config (FSDP2) exited non-zero: $(cat "$T/q2")"
for l in 'distributed_type: FSDP' '  fsdp_version: 2' '  fsdp_reshard_after_forward: false' \
         '  fsdp_auto_wrap_policy: NO_WRAP' '  fsdp_state_dict_type: FULL_STATE_DICT' 'num_processes: 2'; do
  has_line "$T/v2.yaml" "$l"
done
grep -q 'prefetch' "$T/v2.yaml" "$T/q2" && fail "FSDP2 was asked or given prefetch: $(cat "$T/q2" "$T/v2.yaml")"
"$ACC" launch --config_file "$T/v2.yaml" "$PROG" train_env SHARD_GRAD_OP >"$T/run2" 2>&1 ||
  fail "the FSDP program under the FSDP2 file: $(cat "$T/run2")"

# 3. no FSDP: multi-CPU, nothing of FSDP written
printf '0\n1\n\n\n\nno\n2\n\n' | "$ACC" config --config_file "$T/no.yaml" >"$T/q3" 2>&1 ||
  fail "config (no FSDP) exited non-zero: $(cat "$T/q3")"
has_line "$T/no.yaml" 'distributed_type: MULTI_CPU'
grep -q fsdp "$T/no.yaml" && fail "fsdp keys without FSDP: $(cat "$T/no.yaml")"
if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
