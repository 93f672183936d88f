#!/bin/sh
# The 16-process table of docs/PERFORMANCE.md, for a machine with at least 16 cores (at most about
# 3 minutes there): builds Release, then bench/comm/algo_table.sh at 4, 8 and 16 processes, every
# algorithm of the shm table forced, the default, and `mpirun -np N` (Open MPI), sizes 4 B..64 MiB.
# Paste its output into docs/PERFORMANCE.md ("16 processes on one machine") with the CPU line it
# prints; a "measured" line that disagrees with the compiled table is a row of
# src/backend/shm_algo.c to change.
# Usage: bench/comm/cpu16.sh [build_dir]   (NPS, ROUNDS, MAX as algo_table.sh; LIMIT_S: 180)
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-cpu16}
[ "$(nproc)" -ge 16 ] || echo "# warning: $(nproc) CPUs: 16 processes will share them; the figures are not the 16-core table"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target acc_bench_comm accelerate_cli >/dev/null
cmake --build "$build" -j"$(nproc)" --target mpi_bench_comm >/dev/null 2>&1 || echo "# no MPI: no comparison"
NPS=${NPS:-4 8 16} timeout "${LIMIT_S:-180}" sh "$root/bench/comm/algo_table.sh" "$build"
