#!/bin/sh
# The scaling tools on the main job: a profiled 2-process run of fashion_mnist (40 optimizer
# steps), then bench/train/breakdown.py on its traces; and the example's "training CPU time"
# line. Checks: 40 training steps found on both ranks, every part present with a positive whole
# step and compute, the all-reduce split into wait and proper on 2 ranks (not on 1), parts that
# do not exceed the step, and a clear error for a directory without traces.
# Usage: step_breakdown.sh <accelerate cli> <fashion_mnist> <breakdown.py> <python3> <scratch>
cli=$1 ex=$2 bd=$3 py=$4 dir=$5
rm -rf "$dir" && mkdir -p "$dir" || exit 1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fail=0
for np in 1 2; do
  ACCELERATE_PROFILE="$dir/p$np" "$cli" launch --num_processes $np "$ex" --quiet --max-steps 40 \
    > "$dir/run$np.out" 2>&1 || { echo "FAIL: the $np-process run exited $?:"; cat "$dir/run$np.out"; exit 1; }
  grep -Eq '^training CPU time: [0-9.]+ s in all processes, [1-9][0-9]* samples per CPU-second' "$dir/run$np.out" ||
    { echo "FAIL: no training CPU time line with a positive rate ($np processes):"; cat "$dir/run$np.out"; fail=1; }
  "$py" "$bd" "$dir/p$np" > "$dir/bd$np.txt" 2>&1 || { echo "FAIL: breakdown.py exited $? ($np processes):"; cat "$dir/bd$np.txt"; fail=1; continue; }
  grep -q "^# 40 training steps, $np rank(s)" "$dir/bd$np.txt" ||
    { echo "FAIL: expected 40 training steps on $np rank(s):"; cat "$dir/bd$np.txt"; fail=1; }
  # every rank's median: whole step > 0, compute > 0, each part <= the whole step
  awk -v np=$np '
    /^whole step/ { for (r = 0; r < np; r++) step[r] = $(3 + 2 * r) }
    /^(data|compute|grad sync|optimizer step)/ {
      n = split($0, f, /  +/); name = f[1]
      for (r = 0; r < np; r++) { split(f[2 + r], v, " "); val[name, r] = v[1] }
      names[name] = 1 }
    END {
      bad = 0
      for (r = 0; r < np; r++) {
        if (!(step[r] > 0)) { print "FAIL: rank " r ": whole step " step[r]; bad = 1 }
        if (!(val["compute (fwd+bwd)", r] > 0)) { print "FAIL: rank " r ": compute " val["compute (fwd+bwd)", r]; bad = 1 }
        for (k in names) if (val[k, r] + 0 > step[r] + 0) { print "FAIL: rank " r ": " k " " val[k, r] " > step " step[r]; bad = 1 }
      }
      exit bad }' "$dir/bd$np.txt" || { cat "$dir/bd$np.txt"; fail=1; }
  if [ $np = 2 ]; then
    grep -q "waiting for the peer" "$dir/bd2.txt" && grep -q "all-reduce proper" "$dir/bd2.txt" ||
      { echo "FAIL: 2 ranks: no wait / all-reduce split"; cat "$dir/bd2.txt"; fail=1; }
  else
    grep -q "all-reduce proper" "$dir/bd1.txt" && { echo "FAIL: 1 rank: an all-reduce split without a peer"; fail=1; }
  fi
done
mkdir -p "$dir/empty"
"$py" "$bd" "$dir/empty" > "$dir/empty.txt" 2>&1 && { echo "FAIL: breakdown.py accepted a directory without traces"; fail=1; }
grep -q "no trace.rank\*.json in $dir/empty" "$dir/empty.txt" ||
  { echo "FAIL: the error does not name the directory: $(cat "$dir/empty.txt")"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: step breakdown of 1 and 2 processes, 40 steps each"
exit $fail
