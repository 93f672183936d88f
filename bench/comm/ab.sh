#!/bin/sh
# A/B comparison of two acc_bench_comm binaries on a noisy machine: runs them alternately
# (A, B, A, B, ...) RUNS times each at one message size, and prints per op the median over the
# runs of each run's median latency, and B's change against A.
# Usage: bench/comm/ab.sh A_binary B_binary [runs] [bytes]   (accelerate CLI: $ACC or build/)
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
a=$1 b=$2 runs=${3:-31} bytes=${4:-4}
acc=${ACC:-$root/build/accelerate}
np=${NP:-2}
[ -x "$a" ] && [ -x "$b" ] || { echo "usage: $0 A_binary B_binary [runs] [bytes]" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
i=0
while [ "$i" -lt "$runs" ]; do
  for v in a b; do
    eval bin=\$$v
    "$acc" launch --num_processes "$np" "$bin" "$bytes" |
      awk -v v="$v" '$1 !~ /^#/ && $1 != "op" { print $1, $4 }' >>"$out/$v.txt"
  done
  i=$((i + 1))
done
printf '%-11s %10s %10s %8s   (%s runs each, %s B, medians of per-run medians, us)\n' op A B "B/A" "$runs" "$bytes"
for op in barrier all_reduce broadcast all_gather; do
  ma=$(awk -v o="$op" '$1 == o { print $2 }' "$out/a.txt" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  mb=$(awk -v o="$op" '$1 == o { print $2 }' "$out/b.txt" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  awk -v o="$op" -v a="$ma" -v b="$mb" 'BEGIN { printf "%-11s %10.3f %10.3f %+7.1f%%\n", o, a, b, (b / a - 1) * 100 }'
done
