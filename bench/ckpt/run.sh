#!/bin/sh
# save_state / load_state of a 100 M-parameter model + AdamW (1.2 GB checkpoint) against dd
# writing the same number of bytes with conv=fsync and reading them back, interleaved in one run.
# Usage: bench/ckpt/run.sh [build_dir] [dir] [params] [reps]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/acc_bench_ckpt.XXXXXX")}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target acc_bench_ckpt >/dev/null
trap 'rm -rf "$dir"' EXIT
"$build/bench/ckpt/acc_bench_ckpt" "$dir" "${3:-100000000}" "${4:-5}"
