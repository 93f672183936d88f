#!/bin/sh
# usage: kill_rank.sh MPIEXEC PROGRAM
# Kills rank 1 mid all-reduce; the job must end by itself (no hang: the outer `timeout` is only a
# guard), with a non-zero status and a message naming what happened to the rank.
# The guard scales with ACC_TEST_TIMEOUT_MULTIPLIER (set by the test registration).
guard=$((60 * ${ACC_TEST_TIMEOUT_MULTIPLIER:-1}))
out=$(timeout "$guard" "$1" -np 3 --oversubscribe "$2" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -eq 124 ]; then echo "FAIL: the job hung after a rank was killed"; exit 1; fi
if [ $rc -eq 0 ]; then echo "FAIL: the job exited 0 although rank 1 was killed"; exit 1; fi
if printf '%s' "$out" | grep -Eq "signal 9|Killed|rank 1"; then
  echo "PASS: job ended with status $rc and said which rank died"
  exit 0
fi
echo "FAIL: the output does not say that rank 1 was killed"
exit 1
