#!/bin/sh
# ZeRO stages 0, 1 and 2 at 1..NP processes: optimizer-state and exchange-buffer floats per
# process and the median time of one synchronized step.
# Usage: bench/zero/run.sh [build_dir] [millions_of_params] [bucket_MiB]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
mp=${2:-8}
bucket=${3:-0}
np=${NP:-4}
cmake --build "$build" -j2 --target zero_bench accelerate_cli >/dev/null
n=1
while [ "$n" -le "$np" ]; do
  for stage in 0 1 2; do
    "$build/accelerate" launch --num_processes "$n" --zero_stage "$stage" "$build/bench/zero/zero_bench" "$mp" 20 "$bucket"
  done
  n=$((n + 1))
done
