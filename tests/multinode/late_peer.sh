#!/bin/sh
# usage: late_peer.sh MPIEXEC PROGRAM  (see late_peer.c)
out=$(ACCELERATE_TIMEOUT=1 timeout 60 "$1" -np 2 --oversubscribe "$2" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -eq 124 ]; then echo "FAIL: the job hung"; exit 1; fi
if printf '%s\n' "$out" | grep -q "^late_peer: PASS$"; then echo "PASS"; exit 0; fi
echo "FAIL: rank 0 did not report the timeout as expected"
exit 1
