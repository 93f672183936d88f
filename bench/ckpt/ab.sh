#!/bin/sh
# A/B of two builds of acc_bench_ckpt (e.g. before and after a change to load_state), runs
# interleaved A B A B ... on the same machine and directory, each run `reps` rounds; prints each
# run's table, then `uptime`. Usage: bench/ckpt/ab.sh A_BIN B_BIN [params=25000000] [runs=3] [reps=3]
set -e
a=$1 b=$2 params=${3:-25000000} runs=${4:-3} reps=${5:-3}
[ -x "$a" ] && [ -x "$b" ] || { echo "usage: $0 A_BIN B_BIN [params] [runs] [reps]" >&2; exit 2; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/acc_bench_ab.XXXXXX")
trap 'rm -rf "$dir"' EXIT
uptime
i=0
while [ $i -lt "$runs" ]; do
  for bin in "$a" "$b"; do
    echo "== $bin (run $((i + 1)))"
    "$bin" "$dir" "$params" "$reps"
  done
  i=$((i + 1))
done
uptime
