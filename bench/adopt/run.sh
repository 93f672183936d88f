#!/bin/sh
# The cost of adoption (issue 19): the llm.c-style trainer bench/adopt/gpt_mini.c without the
# library (plain) against the same source ported (ported: accelerator, flat table, gradient
# averaging; ported_tokens: also the library's token loader), at 1 process, run directly and under
# `accelerate launch --num_processes 1`; REPS rounds, the order of the variants rotated every round.
# Per run the trainer reports the median wall time and the median CPU time (all threads of the
# process) of its steps after the first, and the page faults and context switches of those steps.
# Figures: per variant the median over the rounds, and the median over the rounds of the ratio to
# the plain program of the same round (> 1: slower than plain). On a machine shared with other work
# the CPU time is the figure to trust; the wall time follows the load.
# Usage: bench/adopt/run.sh [BUILD_DIR]   (default build; REPS=10 STEPS=40 B=8 THREADS=1; PERF=1 adds
#        `perf stat -e page-faults,context-switches,cpu-migrations,task-clock` of every run;
#        VARIANTS="plain ported ..." picks the variants, plain first: also plain_early, plain_shiftN,
#        plain_heap (data placement), plain_a64, ported_a64 (code placement), plain_again (noise))
set -e
bld=${1:-build}
reps=${REPS:-10} steps=${STEPS:-40} batch=${B:-8} threads=${THREADS:-1}
dir=$bld/bench/adopt
for p in "$dir/adopt_plain" "$dir/adopt_ported" "$dir/adopt_ported_tokens" "$bld/accelerate"; do
  [ -x "$p" ] || { echo "$0: $p is missing (cmake --build --preset default)" >&2; exit 2; }
done
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shard=$tmp/shard.bin
"$dir/adopt_plain" --make-shard "$shard" 2000000
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
variants=${VARIANTS:-"plain ported ported_launch plain_launch ported_tokens"}
cmd() {
  case $1 in
    plain | plain_again) echo "$dir/adopt_plain" ;; # plain_again: the noise floor of this machine
    plain_a64) echo "$dir/adopt_plain_a64" ;;         # functions and loops 64-byte aligned
    ported_a64) echo "$dir/adopt_ported_a64" ;;
    ported) echo "$dir/adopt_ported" ;;
    ported_tokens) echo "$dir/adopt_ported_tokens" ;;
    ported_launch) echo "$bld/accelerate launch --num_processes 1 $dir/adopt_ported" ;;
    plain_launch) echo "$bld/accelerate launch --num_processes 1 $dir/adopt_plain" ;;
    # placement experiments on the plain program (docs/PERFORMANCE.md, "The cost of adoption"):
    plain_early) echo "env ADOPT_EARLY_GRADS=1 $dir/adopt_plain" ;;   # gradients before the activations
    plain_shift*) echo "env ADOPT_GRADS_SHIFT=${1#plain_shift} $dir/adopt_plain" ;; # gradients N floats later
    plain_heap) echo "env GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432 $dir/adopt_plain" ;; # no mmap
    *) echo "$0: unknown variant $1" >&2; exit 2 ;;
  esac
}
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores; OMP_NUM_THREADS=$threads"
echo "# start: $(uptime)"
echo "# $reps rounds x $(echo $variants | wc -w) variants, $steps steps of B=$batch, order rotated every round"
r=0
while [ "$r" -lt "$reps" ]; do
  # rotate the order: round r starts at variant r mod 5
  set -- $variants
  k=$((r % $#)); while [ "$k" -gt 0 ]; do v=$1; shift; set -- "$@" "$v"; k=$((k - 1)); done
  for v in "$@"; do
    if [ "${PERF:-0}" = 1 ]; then
      perf stat -x, -o "$tmp/perf.txt" -e page-faults,context-switches,cpu-migrations,task-clock \
        $(cmd "$v") "$shard" "$steps" "$batch" > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
      awk -F, -v v="$v" '$3 ~ /^(page-faults|context-switches|cpu-migrations|task-clock)/ { print v, $3, $1 }' \
        "$tmp/perf.txt" >> "$tmp/perf.all"
    else
      $(cmd "$v") "$shard" "$steps" "$batch" > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
    fi
    awk -v r="$r" -v v="$v" '/^median_step_ms/ { print r, v, $2, $4 } /^steady_minflt/ { print r, v "_faults", $2 + $4, $6 + $8 }' \
      "$tmp/out.txt" >> "$tmp/all"
    sed -n 's/.*final_loss \([0-9.]*\).*/\1/p' "$tmp/out.txt" >> "$tmp/loss.$v"
  done
  r=$((r + 1))
done
echo "# end: $(uptime)"
for v in $variants; do
  [ "$v" = ported_tokens ] && continue # the library's loader shuffles: other windows, other losses
  [ "$(sort -u "$tmp/loss.$v")" = "$(sort -u "$tmp/loss.plain")" ] ||
    echo "# WARNING: $v ends at loss $(sort -u "$tmp/loss.$v" | tr '\n' ' ')vs plain $(sort -u "$tmp/loss.plain" | tr '\n' ' ')"
done
printf '%-14s %9s %9s %9s %9s %12s %10s\n' variant "wall ms" "cpu ms" "wall x" "cpu x" "faults/run" "ctxsw/run"
for v in $variants; do
  w=$(awk -v v="$v" '$2 == v { print $3 }' "$tmp/all" | median)
  c=$(awk -v v="$v" '$2 == v { print $4 }' "$tmp/all" | median)
  wr=$(awk -v v="$v" '$2 == "plain" { p[$1] = $3 } $2 == v { q[$1] = $3 } END { for (r in q) print q[r] / p[r] }' "$tmp/all" | median)
  cr=$(awk -v v="$v" '$2 == "plain" { p[$1] = $4 } $2 == v { q[$1] = $4 } END { for (r in q) print q[r] / p[r] }' "$tmp/all" | median)
  f=$(awk -v v="${v}_faults" '$2 == v { print $3 }' "$tmp/all" | median)
  s=$(awk -v v="${v}_faults" '$2 == v { print $4 }' "$tmp/all" | median)
  printf '%-14s %9.3f %9.3f %9.4f %9.4f %12s %10s\n' "$v" "$w" "$c" "$wr" "$cr" "$f" "$s"
done
echo "# wall/cpu ms: median per step (steps after the first), median over rounds; x: median over rounds of"
echo "# the ratio to plain in the same round; faults, ctxsw: minor+major faults and voluntary+involuntary"
echo "# switches of the steps after the first (median over rounds)"
if [ -f "$tmp/perf.all" ]; then
  echo "# perf stat of the whole run (median over rounds)"
  for v in $variants; do
    for e in page-faults context-switches cpu-migrations task-clock; do
      printf '%-14s %-18s %s\n' "$v" "$e" "$(awk -v v="$v" -v e="$e" '$1 == v && $2 == e { print $3 }' "$tmp/perf.all" | median)"
    done
  done
fi
