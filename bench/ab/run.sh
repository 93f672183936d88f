#!/bin/sh
# A/B of two builds of the library on this machine, in one run: the Fashion-MNIST main job
# (samples/s at 1 and 2 processes) and the collectives (median time per call of every op and size
# of acc_bench_comm at 2 processes), alternating A and B RUNS times, medians. For a change that must not slow
# anything down (e.g. the layering of issue 17): A = the build before, B = after.
# Usage: bench/ab/run.sh A_build_dir B_build_dir   (each built with fashion_mnist, accelerate_cli
#        and acc_bench_comm in Release; RUNS=5, COMM_MAX=16777216 by default)
set -e
a=$1 b=$2
[ -x "$a/accelerate" ] && [ -x "$b/accelerate" ] || { echo "usage: $0 A_build B_build" >&2; exit 2; }
runs=${RUNS:-5}
max=${COMM_MAX:-16777216}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores, load at start $(cut -d' ' -f1 /proc/loadavg)"
i=0
while [ "$i" -lt "$runs" ]; do
  for v in a b; do
    eval bld=\$$v
    for np in 1 2; do
      "$bld/accelerate" launch --num_processes $np "$bld/examples/fashion_mnist/fashion_mnist" --quiet \
        > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
      sed -n 's/^throughput: \([0-9.]*\) samples.*/\1/p' "$tmp/out.txt" >> "$tmp/$v.train$np"
    done
    "$bld/accelerate" launch --num_processes 2 "$bld/bench/comm/acc_bench_comm" "$max" |
      awk -v f="$tmp/$v" '$1 !~ /^#/ && $1 != "op" { print $4 >> (f "." $1 "." $2) }'
  done
  i=$((i + 1))
done
echo "# $runs runs of each, alternating A and B; medians. Last column: speed of B relative to A (> 1: B faster)"
printf '%-40s %10s %10s %8s\n' what A B "B vs A"
for np in 1 2; do
  ma=$(median < "$tmp/a.train$np"); mb=$(median < "$tmp/b.train$np")
  awk -v w="main job, $np process(es), samples/s" -v a="$ma" -v b="$mb" 'BEGIN { printf "%-40s %10.0f %10.0f %8.3f\n", w, a, b, b / a }'
done
for f in "$tmp"/a.*.*; do
  k=${f#"$tmp"/a.}
  case "$k" in train*) continue ;; esac
  op=${k%%.*}; size=${k#*.}
  ma=$(median < "$f"); mb=$(median < "$tmp/b.$k")
  awk -v w="$op $size B, time us" -v a="$ma" -v b="$mb" 'BEGIN { if (b > 0) printf "%-40s %10.3f %10.3f %8.3f\n", w, a, b, a / b }'
done | sort -t' ' -k1,1 -k2,2n
