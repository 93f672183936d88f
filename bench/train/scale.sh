#!/bin/sh
# Scaling breakdown of the main job (examples/fashion_mnist): what limits 2 processes / 1 process
# on this machine. Configurations run round-robin (one run of each per round, ROUNDS rounds,
# default 5) and the table gives medians, so drifting load hits them alike:
#   one          accelerate launch --num_processes 1 (default: prefetch thread when a core is spare)
#   one_nopf     the same, --prefetch 0 (no loader thread: one core's worth of work)
#   one_c0, one_c1  one_nopf bound to CPU 0 / CPU 1 (taskset): how fast each CPU is on its own.
#                A 2-process job moves in step with its slower rank, so 2 x the slower CPU's
#                rate / one's rate is its bound even with free communication ("lockstep bound"
#                printed below when both ran)
#   two          accelerate launch --num_processes 2 (the default configuration)
#   two_bound    the same, --enable_cpu_affinity (local rank r on CPU r)
#   two_priv     2 processes, --private-grads (gradients in the model's own memory: the copy
#                path of the all-reduce, as before registered buffers)
#   two_b64      2 processes, 64 KiB gradient buckets (two_b128, two_b256: 128, 256 KiB)
#   two_pf2      2 processes, --prefetch 2 (a loader thread per rank)
#   two_ov64     2 processes, 64 KiB buckets reduced during backward (--overlap)
#   two_sc       2 processes, ACCELERATE_SHM_SINGLE_COPY=auto (the default since session 6)
#   two_chunk1m  2 processes, ACCELERATE_SHM_CHUNK_BYTES=1048576 (the 0.8 MB bucket in one step)
#   two_spin200  2 processes, ACCELERATE_SHM_SPIN_US=200 (spin longer before yielding)
#   two_nudge    2 processes, ACCELERATE_SHM_NUDGE=1
#   two_sc_off   2 processes, ACCELERATE_SHM_SINGLE_COPY=off (copies through the segment only)
#   two_yield0   2 processes, ACCELERATE_SHM_YIELD_US=0 (sleep right after spinning, no yield phase)
#   indep        two independent 1-process jobs started together, no communication at all
#                (--prefetch 0 each, as the 2-process default): the sum of their throughputs is
#                the most 2 processes of this job can get here
#   indep_bound  the same, job i bound to CPU i (taskset)
#   one_b, two_b 1 and 2 processes of another build (B_BUILD=dir, built beforehand, e.g. the
#                commit before a change), for a before/after in the same run
# Besides samples/s (what the job got of the machine), each run reports samples per CPU-second of
# its training loops (example output line "training CPU time"), which does not depend on the load.
# CONFIGS="one two ..." restricts the set. Usage: bench/train/scale.sh [build_dir]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
rounds=${ROUNDS:-5}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target fashion_mnist accelerate_cli >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ex="$build/examples/fashion_mnist/fashion_mnist"
L="$build/accelerate launch"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
configs=${CONFIGS:-"one one_nopf two two_bound two_b64 indep indep_bound"}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
rate() { sed -n 's/^throughput: \([0-9.]*\) samples.*/\1/p' "$1"; }
cpurate() { sed -n 's/^training CPU time: .*, \([0-9.]*\) samples per CPU-second/\1/p' "$1"; }
run() { # name command...: one run, its throughput appended to name.rate, its samples per
  # CPU-second (the training loops' CPU time in all processes) to name.cpu
  name=$1; shift
  "$@" > "$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
  rate "$tmp/out" >> "$tmp/$name.rate"
  cpurate "$tmp/out" >> "$tmp/$name.cpu"
}
indep() { # name bind: two 1-process jobs at once, the sum of their throughputs
  name=$1
  for j in 0 1; do # (not i: the round counter)
    if [ "$2" = 1 ]; then taskset -c $j "$ex" --quiet --prefetch 0 > "$tmp/indep$j" 2>&1 &
    else "$ex" --quiet --prefetch 0 > "$tmp/indep$j" 2>&1 & fi
  done
  wait
  echo $(( $(rate "$tmp/indep0" | cut -d. -f1) + $(rate "$tmp/indep1" | cut -d. -f1) )) >> "$tmp/$name.rate"
  awk -v a="$(cpurate "$tmp/indep0")" -v b="$(cpurate "$tmp/indep1")" 'BEGIN { print 2 / (1 / a + 1 / b) }' >> "$tmp/$name.cpu"
}
one_round() {
  for c in $configs; do
    case $c in
      one) run one $L --num_processes 1 "$ex" --quiet ;;
      one_nopf) run one_nopf $L --num_processes 1 "$ex" --quiet --prefetch 0 ;;
      one_c0) run one_c0 taskset -c 0 $L --num_processes 1 "$ex" --quiet --prefetch 0 ;;
      one_c1) run one_c1 taskset -c 1 $L --num_processes 1 "$ex" --quiet --prefetch 0 ;;
      two) run two $L --num_processes 2 "$ex" --quiet ;;
      two_priv) run two_priv $L --num_processes 2 "$ex" --quiet --private-grads ;;
      two_bound) run two_bound $L --num_processes 2 --enable_cpu_affinity "$ex" --quiet ;;
      two_b64) run two_b64 $L --num_processes 2 "$ex" --quiet --bucket-kb 64 ;;
      two_b128) run two_b128 $L --num_processes 2 "$ex" --quiet --bucket-kb 128 ;;
      two_b256) run two_b256 $L --num_processes 2 "$ex" --quiet --bucket-kb 256 ;;
      two_pf2) run two_pf2 $L --num_processes 2 "$ex" --quiet --prefetch 2 ;;
      two_ov64) run two_ov64 $L --num_processes 2 "$ex" --quiet --bucket-kb 64 --overlap ;;
      two_sc) run two_sc env ACCELERATE_SHM_SINGLE_COPY=auto $L --num_processes 2 "$ex" --quiet ;;
      two_chunk1m) run two_chunk1m env ACCELERATE_SHM_CHUNK_BYTES=1048576 $L --num_processes 2 "$ex" --quiet ;;
      two_spin200) run two_spin200 env ACCELERATE_SHM_SPIN_US=200 $L --num_processes 2 "$ex" --quiet ;;
      two_nudge) run two_nudge env ACCELERATE_SHM_NUDGE=1 $L --num_processes 2 "$ex" --quiet ;;
      two_sc_off) run two_sc_off env ACCELERATE_SHM_SINGLE_COPY=off $L --num_processes 2 "$ex" --quiet ;;
      two_yield0) run two_yield0 env ACCELERATE_SHM_YIELD_US=0 $L --num_processes 2 "$ex" --quiet ;;
      one_b) run one_b "$B_BUILD/accelerate" launch --num_processes 1 "$B_BUILD/examples/fashion_mnist/fashion_mnist" --quiet ;;
      two_b) run two_b "$B_BUILD/accelerate" launch --num_processes 2 "$B_BUILD/examples/fashion_mnist/fashion_mnist" --quiet ;;
      indep) indep indep 0 ;;
      indep_bound) indep indep_bound 1 ;;
      *) echo "scale.sh: unknown configuration '$c' (see the list at the top)" >&2; exit 2 ;;
    esac
  done
}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
round=0
while [ $round -lt "$rounds" ]; do one_round; round=$((round + 1)); done
printf '# CPU: %s, %s cores; load average before / after: %s / %s\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(getconf _NPROCESSORS_ONLN)" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '# %d round(s), round-robin, 1 epoch, batch 64 per process; medians of samples/s (all\n' "$rounds"
printf '# processes) and of samples per CPU-second of the training loops (all processes, all threads)\n'
printf '%-12s %10s %12s   %s\n' config samples/s per-CPU-s "runs (samples/s)"
for c in $configs; do
  printf '%-12s %10s %12s   %s\n' "$c" "$(median < "$tmp/$c.rate")" "$(median < "$tmp/$c.cpu" | cut -d. -f1)" "$(tr '\n' ' ' < "$tmp/$c.rate")"
done
if [ -f "$tmp/one.rate" ]; then
  one=$(median < "$tmp/one.rate")
  for c in $configs; do
    [ "$c" = one ] || awk -v one="$one" -v x="$(median < "$tmp/$c.rate")" -v c="$c" -v r="$(paste "$tmp/$c.rate" "$tmp/one.rate" | awk '{ print $1 / $2 }' | median)" \
      'BEGIN { printf "# %s / one: %.2fx (medians), %.2fx (median of the rounds'"'"' ratios)\n", c, x / one, r }'
  done
  if [ -f "$tmp/one_c0.rate" ] && [ -f "$tmp/one_c1.rate" ]; then
    paste "$tmp/one_c0.rate" "$tmp/one_c1.rate" "$tmp/one.rate" |
      awk '{ m = $1 < $2 ? $1 : $2; print 2 * m / $3 }' | median |
      awk '{ printf "# lockstep bound (2 x the slower CPU / one, median of the rounds): %.2fx\n", $1 }'
  fi
fi
