#!/bin/sh
# The cost of adoption, counted instead of timed: valgrind's cachegrind runs the plain and the
# ported trainer (AVX2 builds, bench/adopt/CMakeLists.txt) for S1 and S2 steps; the difference
# divided by S2 - S1 is what one steady-state step costs, without the start-up: instructions
# executed (Ir), data reads and writes, first-level and last-level cache misses of the simulated
# caches. These do not move with the load of the machine, unlike the times of run.sh.
# Valgrind replaces malloc: blocks land where its allocator puts them, not glibc's, so run.sh's
# plain_heap has no counterpart here, and placement effects are not the machine's.
# Usage: bench/adopt/count.sh [BUILD_DIR]   (default build; S1=2 S2=6 B=8; VARIANTS as in run.sh:
#        plain ported plain_early plain_shiftN)
set -e
bld=${1:-build}
s1=${S1:-2} s2=${S2:-6} batch=${B:-8}
dir=$bld/bench/adopt
command -v valgrind > /dev/null || { echo "$0: valgrind is not installed" >&2; exit 2; }
for p in "$dir/adopt_plain_avx2" "$dir/adopt_ported_avx2"; do
  [ -x "$p" ] || { echo "$0: $p is missing (cmake --build --preset default)" >&2; exit 2; }
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dir/adopt_plain_avx2" --make-shard "$tmp/shard.bin" 2000000
# a variant: the environment of the run (or "-") and the program
cmd() {
  case $1 in
    plain) echo "- $dir/adopt_plain_avx2" ;;
    ported) echo "- $dir/adopt_ported_avx2" ;;
    plain_early) echo "ADOPT_EARLY_GRADS=1 $dir/adopt_plain_avx2" ;;
    plain_shift*) echo "ADOPT_GRADS_SHIFT=${1#plain_shift} $dir/adopt_plain_avx2" ;;
    *) echo "$0: unknown variant $1" >&2; return 1 ;;
  esac
}
# the totals of a cachegrind run: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
totals() {
  c=$(cmd "$1") || exit 2
  set -- $c "$2"
  e=$1; [ "$e" != - ] || e=ADOPT_NOTHING=0
  env "$e" valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file="$tmp/cg.out" \
    "$2" "$tmp/shard.bin" "$3" "$batch" > "$tmp/run.txt" 2>&1 || { cat "$tmp/run.txt" >&2; exit 1; }
  sed -n 's/^summary: //p' "$tmp/cg.out"
}
echo "# cachegrind ($(valgrind --version)), $(lscpu | sed -n 's/^Model name: *//p'); B=$batch, per step = (run of $s2 steps - run of $s1) / $((s2 - s1))"
printf '%-14s %14s %12s %12s %12s %12s %10s\n' variant "Ir/step" "Dr/step" "Dw/step" "D1 miss/st" "LL miss/st" "Ir x"
base=""
for v in ${VARIANTS:-plain ported plain_early plain_shift4 plain_shift12}; do
  a=$(totals "$v" "$s1") || exit 1
  b=$(totals "$v" "$s2") || exit 1
  line=$(echo "$a $b" | awk -v n=$((s2 - s1)) '{ # fields 1-9: run 1, 10-18: run 2
    printf "%.0f %.0f %.0f %.0f %.0f", ($10 - $1) / n, ($13 - $4) / n, ($16 - $7) / n, \
      ($14 + $17 - $5 - $8) / n, ($15 + $18 - $6 - $9) / n }')
  [ -n "$base" ] || base=$(echo "$line" | cut -d' ' -f1)
  echo "$line" | awk -v v="$v" -v b="$base" '{ printf "%-14s %14.0f %12.0f %12.0f %12.0f %12.0f %10.5f\n", v, $1, $2, $3, $4, $5, $1 / b }'
done
