#!/bin/sh
# Out-of-range launcher options are usage errors (red-team 3, N11): --max_restarts above
# 2^31-1 (ACCELERATE_RESTART_COUNT's range), --num_cpu_threads_per_process above 65536
# (OMP_NUM_THREADS' range). Usage: ranges.sh <accelerate cli>
cli=$1
fail=0
check() { # expected-text args...
  want=$1; shift
  out=$("$cli" launch "$@" true 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! printf '%s' "$out" | grep -q -- "$want"; then
    echo "FAIL: accelerate launch $* -> rc $rc: $out (expected rc 2 and '$want')"; fail=1
  fi
}
check "max_restarts 4294967297 is out of range" --max_restarts 4294967297
check "num_cpu_threads_per_process 99999999999 is out of range" --num_cpu_threads_per_process 99999999999
check "num_cpu_threads_per_process 0 is out of range" --num_cpu_threads_per_process 0
"$cli" launch --max_restarts 2147483647 --num_cpu_threads_per_process 65536 true || { echo "FAIL: the limits themselves are refused"; fail=1; }
[ $fail -eq 0 ] && echo "ranges: all checks passed"
exit $fail
