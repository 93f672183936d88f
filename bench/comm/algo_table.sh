#!/bin/sh
# Re-derives the shm backend's algorithm table (src/backend/shm_algo.c) on this machine and
# compares the default (the table) with Open MPI: for each process count in NPS, ROUNDS rounds,
# each round one run of every algorithm forced (all_reduce: onestep, blocks; all_gather: slots,
# stream), one of the default, and one of `mpirun -np N` (interleaved). Prints per op and size
# the median time of each, the fastest algorithm, the ratio default / Open MPI (> 1: ours
# faster), then per op the measured limit of the cheap algorithm (the largest size up to which
# onestep / slots was never slower) beside the compiled table (acc_bench_comm --table). Above
# the chunk (512 KiB) a forced onestep all_reduce runs by blocks (its message no longer fits a
# slot): those rows say "same".
# Usage: bench/comm/algo_table.sh [build_dir]
#   NPS ("4 8 16"), ROUNDS (1), MAX (67108864: largest size in bytes), ACC_BENCH_BIND (1: rank r on
#   CPU r, like mpirun's --bind-to core).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
nps=${NPS:-4 8 16}
rounds=${ROUNDS:-1}
max=${MAX:-67108864}
export ACC_BENCH_BIND=${ACC_BENCH_BIND:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
acc() { # np file [env...]: one run of acc_bench_comm appended to file
  np=$1 f=$2
  shift 2
  env "$@" "$build/accelerate" launch --num_processes "$np" "$build/bench/comm/acc_bench_comm" "$max" >>"$f"
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs; rounds $rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/comm/acc_bench_comm" --table
for np in $nps; do
  d=$out/np$np
  mkdir -p "$d"
  i=0
  while [ "$i" -lt "$rounds" ]; do
    acc "$np" "$d/onestep" ACC_BENCH_OPS=all_reduce ACCELERATE_SHM_ALGO_ALL_REDUCE=onestep
    acc "$np" "$d/blocks" ACC_BENCH_OPS=all_reduce ACCELERATE_SHM_ALGO_ALL_REDUCE=blocks
    acc "$np" "$d/slots" ACC_BENCH_OPS=all_gather ACCELERATE_SHM_ALGO_ALL_GATHER=slots
    acc "$np" "$d/stream" ACC_BENCH_OPS=all_gather ACCELERATE_SHM_ALGO_ALL_GATHER=stream
    acc "$np" "$d/auto" ACC_BENCH_OPS=all_reduce,all_gather
    if [ -x "$build/bench/comm/mpi_bench_comm" ]; then
      ACC_BENCH_OPS=all_reduce,all_gather OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe --bind-to core -np "$np" "$build/bench/comm/mpi_bench_comm" "$max" \
        >>"$d/mpi" 2>/dev/null || ACC_BENCH_OPS=all_reduce,all_gather OMPI_ALLOW_RUN_AS_ROOT=1 \
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np "$np" \
        "$build/bench/comm/mpi_bench_comm" "$max" >>"$d/mpi" 2>/dev/null || true
    fi
    i=$((i + 1))
  done
  touch "$d/mpi"
  echo "# $np processes: median time per call (us); best: fastest forced algorithm; auto/mpi = MPI time / our time (> 1: ours faster)"
  printf '%-11s %10s %10s %10s %10s %10s %-8s %8s\n' op "size(B)" alg1 alg2 auto mpi best auto/mpi
  for op in all_reduce all_gather; do
    if [ "$op" = all_reduce ]; then a1=onestep a2=blocks; else a1=slots a2=stream; fi
    awk -v op="$op" -v a1="$a1" -v a2="$a2" -v np="$np" -v chunk="${ACCELERATE_SHM_CHUNK_BYTES:-524288}" '
      function med(k,   n, i, j, t, v) { n = cnt[k]; if (!n) return 0
        for (i = 1; i <= n; i++) v[i] = val[k, i]
        for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
        return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
      FNR == 1 { n = split(FILENAME, p, "/"); arm = p[n] }
      $1 == op { k = arm " " $2; val[k, ++cnt[k]] = $4; sz[$2] = 1 }
      END {
        m = 0; for (s in sz) list[++m] = s + 0
        for (i = 2; i <= m; i++) { t = list[i]; for (j = i - 1; j >= 1 && list[j] > t; j--) list[j + 1] = list[j]; list[j + 1] = t }
        limit = -1; broken = 0
        for (i = 1; i <= m; i++) { s = list[i]
          x = med(a1 " " s); y = med(a2 " " s); au = med("auto " s); mp = med("mpi " s)
          best = (x <= y) ? a1 : a2
          if (op == "all_reduce" && s > chunk) best = "same" # onestep needs the message in a slot
          else if (!broken && x <= y) limit = s; else broken = 1
          printf "%-11s %10d %10.3f %10.3f %10.3f %10.3f %-8s %7.2fx\n", op, s, x, y, au, mp, best, (au > 0 ? mp / au : 0) }
        printf "measured %-10s max_procs %-4d: %s up to %s bytes, then %s\n", op, np, a1, (limit < 0 ? "none" : limit), a2 }
    ' "$d/$a1" "$d/$a2" "$d/auto" "$d/mpi"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
