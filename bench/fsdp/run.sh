#!/bin/sh
# FSDP vs NO_SHARD on NP processes (default 2): peak resident memory of the largest process and the
# median step time of an MLP of LAYERS x WIDTH^2 parameters with AdamW, runs interleaved REPS times.
# Usage: bench/fsdp/run.sh [build_dir] [layers] [width] [batch] [steps] [reps]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
layers=${2:-8}; width=${3:-512}; batch=${4:-16}; steps=${5:-20}; reps=${6:-3}
np=${NP:-2}
cmake --build "$build" -j2 --target fsdp_bench accelerate_cli >/dev/null
r=0
while [ "$r" -lt "$reps" ]; do
  for s in NO_SHARD FULL_SHARD SHARD_GRAD_OP; do
    "$build/accelerate" launch --num_processes "$np" --use_fsdp --fsdp_sharding_strategy "$s" \
      "$build/bench/fsdp/fsdp_bench" "$layers" "$width" "$batch" "$steps"
  done
  r=$((r + 1))
done
