#!/bin/sh
# The Fashion-MNIST example's --resume (issue 31, ecosystem-4 D8, newuser-4 finding 12):
#  1. --resume with no checkpoint yet starts from the beginning and says so (what --max_restarts
#     needs: the same command line for every attempt), and ends as a run without --resume;
#  2. a run resumed mid-epoch labels the epoch's mean loss with the steps it covers.
# Usage: resume.sh ACCELERATE_CLI EXAMPLE WORK_DIR
ACC=$1 EX=$2 T=$3
rm -rf "$T" && mkdir -p "$T" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
common="--epochs 1 --quiet --prefetch 0 --save-every 20"
"$ACC" launch --num_processes 2 "$EX" $common --max-steps 40 --output-dir "$T/fresh" --resume > "$T/o1" 2>&1 ||
  fail "--resume without a checkpoint failed: $(cat "$T/o1")"
grep -q -- "--resume: no checkpoint in $T/fresh/checkpoints yet; starting from the beginning" "$T/o1" ||
  fail "no 'starting from the beginning' line: $(cat "$T/o1")"
"$ACC" launch --num_processes 2 "$EX" $common --max-steps 40 --output-dir "$T/plain" > "$T/o2" 2>&1 ||
  fail "the run without --resume failed: $(cat "$T/o2")"
a=$(grep '^test accuracy' "$T/o1") b=$(grep '^test accuracy' "$T/o2")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "a fresh --resume run ends differently: '$a' vs '$b'"
# 2. resume at step 20 of the 40-step run: the epoch's mean covers steps 21-40
rm -rf "$T/plain/checkpoints/checkpoint_1"
"$ACC" launch --num_processes 2 "$EX" $common --max-steps 40 --output-dir "$T/plain" --resume > "$T/o3" 2>&1 ||
  fail "the resumed run failed: $(cat "$T/o3")"
grep -q "resumed from $T/plain/checkpoints/checkpoint_0 (step 20, epoch 1)" "$T/o3" || fail "not resumed at step 20: $(cat "$T/o3")"
grep -q "^epoch 1: mean training loss [0-9.]* (steps 21-40 only: the epoch resumed after step 20)$" "$T/o3" ||
  fail "the resumed epoch's mean loss does not say which steps it covers: $(grep 'mean training loss' "$T/o3")"
grep -q "^epoch 1: mean training loss [0-9.]*$" "$T/o2" || fail "an epoch run whole is labelled: $(grep 'mean training loss' "$T/o2")"
c=$(grep '^test accuracy' "$T/o3")
[ "$c" = "$b" ] || fail "the resumed run ends differently: '$c' vs '$b'"
if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
