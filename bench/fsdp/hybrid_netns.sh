#!/bin/sh
# HYBRID_SHARD against FULL_SHARD and NO_SHARD across two "machines" (network namespaces joined by a
# veth pair, tests/multinode/netns_lib.sh; needs root), 2 processes each, the hierarchical backend:
# the bytes that cross between the machines per optimizer step (the veth's counters, both
# directions, over the whole run divided by its steps: the store's few bytes included) and the
# median step time of bench/fsdp/fsdp_bench (LAYERS square layers of WIDTH, one unit each, AdamW),
# the strategies interleaved REPS times. Without LINK_RATE the veth is a memory copy by the same
# cores: the step times then say little about a real network; the bytes are what HYBRID saves.
# Usage: [LINK_RATE=1gbit] bench/fsdp/hybrid_netns.sh [build_dir] [layers] [width] [batch] [steps] [reps]
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
layers=${2:-8}; width=${3:-256}; batch=${4:-16}; steps=${5:-20}; reps=${6:-3}
cmake --build "$build" -j2 --target fsdp_bench accelerate_cli accelerate_gloo >/dev/null || exit 1
. "$root/tests/multinode/netns_lib.sh"
netns_up hb
# LINK_RATE (e.g. 1gbit): a token bucket on both ends of the veth (as bench/multinode/run.sh), so
# that the link between the machines is slower than memory; unset: no limit
if [ -n "${LINK_RATE:-}" ]; then
  ip netns exec "$NSA" tc qdisc add dev "$VA" root tbf rate "$LINK_RATE" burst 1mb latency 100ms &&
    ip netns exec "$NSB" tc qdisc add dev "$VB" root tbf rate "$LINK_RATE" burst 1mb latency 100ms ||
    fail "cannot limit the link to $LINK_RATE (tc)"
fi
unset ACCELERATE_RUN_ID MASTER_ADDR MASTER_PORT FSDP_SHARDING_STRATEGY
export ACCELERATE_BACKEND=hierarchical OMP_NUM_THREADS=1
bytes() { ip -n "$NSA" -s -j link show "$VA" | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"] + s["tx"]["bytes"])'; }
run() { # STRATEGY
  b0=$(bytes)
  ip netns exec "$NSB" "$build/accelerate" launch --num_machines 2 --machine_rank 1 --num_processes 4 \
    --main_process_ip $IPA --main_process_port 29500 --use_fsdp --fsdp_sharding_strategy "$1" \
    "$build/bench/fsdp/fsdp_bench" "$layers" "$width" "$batch" "$steps" >"$TMP/b1" 2>&1 &
  j=$!
  ip netns exec "$NSA" "$build/accelerate" launch --num_machines 2 --machine_rank 0 --num_processes 4 \
    --main_process_ip $IPA --main_process_port 29500 --use_fsdp --fsdp_sharding_strategy "$1" \
    "$build/bench/fsdp/fsdp_bench" "$layers" "$width" "$batch" "$steps" >"$TMP/b0" 2>&1 || { cat "$TMP/b0"; fail "$1"; }
  wait $j || { cat "$TMP/b1"; fail "$1 (machine 1)"; }
  b1=$(bytes)
  med=$(sed -n 's/.*median_step_s=\([0-9.]*\).*/\1/p' "$TMP/b0")
  echo "$1 median_step_s=$med cross_machine_MiB_per_step=$(awk -v a="$b0" -v b="$b1" -v s="$steps" 'BEGIN { printf "%.2f", (b - a) / s / 1048576 }')"
}
lscpu | grep "Model name"
echo "layers=$layers width=$width batch=$batch steps=$steps, 2 machines x 2 processes, link ${LINK_RATE:-unlimited}"
r=0
while [ "$r" -lt "$reps" ]; do
  for s in NO_SHARD FULL_SHARD HYBRID_SHARD HYBRID_SHARD_ZERO2; do run "$s"; done
  r=$((r + 1))
done
