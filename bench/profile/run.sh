#!/bin/sh
# Profiler overhead on the main job: the Fashion-MNIST example on 2 processes, with and without
# ACCELERATE_PROFILE, interleaved (one run of each per round, RUNS rounds, default 7) so that
# drifting load hits both alike; prints the median samples/s of each and the difference.
# Usage: [RUNS=7] [EPOCHS=1] [NPROCS=2] bench/profile/run.sh [build_dir]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
runs=${RUNS:-7}
epochs=${EPOCHS:-1}
nprocs=${NPROCS:-2}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target fashion_mnist accelerate_cli bench_span_cost >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ex="$build/examples/fashion_mnist/fashion_mnist"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
one_run() {
  name=$1; shift
  env "$@" /usr/bin/time -f "cpu %U %S" -o "$tmp/time.txt" "$build/accelerate" launch --num_processes "$nprocs" "$ex" \
    --epochs "$epochs" --quiet > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
  sed -n 's/^throughput: \([0-9.]*\) samples.*/\1/p' "$tmp/out.txt" >> "$tmp/$name.rate"
  awk '/^cpu/ { print $2 + $3 }' "$tmp/time.txt" >> "$tmp/$name.cpu"
}
i=0
while [ $i -lt "$runs" ]; do
  one_run off ACCELERATE_PROFILE=
  one_run on ACCELERATE_PROFILE="$tmp/profile"
  i=$((i + 1))
done
off=$(median < "$tmp/off.rate")
on=$(median < "$tmp/on.rate")
printf "# %d round(s), %d epoch(s), %d process(es), medians\n" "$runs" "$epochs" "$nprocs"
coff=$(median < "$tmp/off.cpu")
con=$(median < "$tmp/on.cpu")
printf '%-14s %12s %14s\n' "" "samples/s" "CPU s (all)"
printf 'profiler off  %12s %14s\nprofiler on   %12s %14s\n' "$off" "$coff" "$on" "$con"
awk -v off="$off" -v on="$on" -v coff="$coff" -v con="$con" 'BEGIN {
  printf "# overhead when on: %+.2f %% per step (throughput), %+.2f %% CPU time\n", (off / on - 1) * 100, (con / coff - 1) * 100 }'
"$build/bench/profile/bench_span_cost"
echo "# one process's summary (profiler on, last run):"
cat "$tmp/profile/summary.rank0.txt"
