#!/bin/sh
# Builds and runs the collective benchmarks on 2 processes: accelerate-c (shm backend, through
# `accelerate launch`) and Open MPI (mpirun), then prints busbw per op and size and the ratio.
# Usage: bench/comm/run.sh [build_dir] [max_bytes]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
max=${2:-67108864}
np=${NP:-2}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target acc_bench_comm accelerate_cli >/dev/null
cmake --build "$build" -j2 --target mpi_bench_comm >/dev/null 2>&1 || true
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/accelerate" launch --num_processes "$np" "$build/bench/comm/acc_bench_comm" "$max" | tee "$out/acc.txt"
if [ -x "$build/bench/comm/mpi_bench_comm" ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np "$np" \
    "$build/bench/comm/mpi_bench_comm" "$max" | tee "$out/mpi.txt"
  echo "# ratio accelerate-c / Open MPI (busbw; for barrier: MPI time / acc time)"
  printf '%-11s %12s %12s %12s %8s\n' op "size(B)" "acc" "mpi" ratio
  awk 'FNR==NR { if ($1 !~ /^#/ && $1 != "op") { t[$1" "$2]=$4; b[$1" "$2]=$6 } next }
       $1 !~ /^#/ && $1 != "op" { k=$1" "$2; if (!(k in t)) next;
         if ($1 == "barrier") printf "%-11s %12s %10.2fus %10.2fus %8.2f\n", $1, $2, t[k], $4, $4/t[k];
         else printf "%-11s %12s %12.3f %12.3f %8.2f\n", $1, $2, b[k], $6, ($6 > 0 ? b[k]/$6 : 0) }' \
    "$out/acc.txt" "$out/mpi.txt"
else
  echo "# mpi_bench_comm not built (no MPI found): no comparison"
fi
