#!/bin/sh
# Interleaved comparison on a noisy machine: accelerate-c (shm backend, as configured by the
# environment), accelerate-c with single copy (ACCELERATE_SHM_SINGLE_COPY=auto), and Open MPI, one run of each per round,
# ROUNDS rounds; prints per op and size the median over the rounds of each run's median time,
# the busbw of those medians, and the ratios against Open MPI.
# Usage: bench/comm/interleave.sh [build_dir] [rounds] [max_bytes]
#   NP (2), ACC_BENCH_OPS (all_reduce,broadcast,all_gather), ACC_BENCH_MIN (4): what to run.
#   B_BUILD: another build directory; its acc_bench_comm, with the default environment, takes the
#   place of the single-copy arm (the "cma" column then compares two builds, e.g. before/after).
#   SHARED_ARM=1: that arm is this build with ACC_BENCH_SHARED=1 (all_reduce of memory the
#   processes share: registered buffers, reduced in place).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
rounds=${2:-5}
max=${3:-67108864}
np=${NP:-2}
export ACC_BENCH_OPS=${ACC_BENCH_OPS:-all_reduce,broadcast,all_gather}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, $np processes, $rounds rounds"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
while [ "$i" -lt "$rounds" ]; do
  "$build/accelerate" launch --num_processes "$np" "$build/bench/comm/acc_bench_comm" "$max" >>"$out/acc.txt"
  if [ "${SHARED_ARM:-0}" = 1 ]; then
    ACC_BENCH_SHARED=1 "$build/accelerate" launch --num_processes "$np" "$build/bench/comm/acc_bench_comm" "$max" >>"$out/cma.txt"
  elif [ -n "$B_BUILD" ]; then
    "$build/accelerate" launch --num_processes "$np" "$B_BUILD/bench/comm/acc_bench_comm" "$max" >>"$out/cma.txt"
  else
    ACCELERATE_SHM_SINGLE_COPY=auto "$build/accelerate" launch --num_processes "$np" \
      "$build/bench/comm/acc_bench_comm" "$max" >>"$out/cma.txt"
  fi
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np "$np" \
    "$build/bench/comm/mpi_bench_comm" "$max" >>"$out/mpi.txt" 2>/dev/null
  i=$((i + 1))
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { # file op size -> median of column 4 (us)
  awk -v o="$2" -v s="$3" '$1 == o && $2 == s { print $4 }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
printf '%-11s %10s %10s %10s %10s %9s %9s %9s\n' op "size(B)" "acc(us)" "cma(us)" "mpi(us)" "acc/mpi" "cma/mpi" "busbw acc"
for op in $(echo "$ACC_BENCH_OPS" | tr ',' ' '); do
  for s in $(awk -v o="$op" '$1 == o { print $2 }' "$out/acc.txt" | sort -gu); do
    a=$(med "$out/acc.txt" "$op" "$s") c=$(med "$out/cma.txt" "$op" "$s") m=$(med "$out/mpi.txt" "$op" "$s")
    awk -v o="$op" -v s="$s" -v a="$a" -v c="$c" -v m="$m" -v np="$np" 'BEGIN {
      f = (o == "all_reduce") ? 2 * (np - 1) / np : (o == "broadcast") ? 1 : (np - 1) / np;
      printf "%-11s %10s %10.3f %10.3f %10.3f %8.2fx %8.2fx %9.3f\n", o, s, a, c, m,
        (a > 0 ? m / a : 0), (c > 0 ? m / c : 0), (a > 0 ? s / a / 1e3 * f : 0) }'
  done
done
