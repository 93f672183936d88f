#!/bin/sh
# acc_print_local prints once per machine, acc_print once overall: 4 processes under mpirun,
# presented as 2 machines x 2 processes (torchrun-style RANK/LOCAL_RANK variables, MPI backend).
# usage: print_local.sh MPIEXEC PROGRAM
mpiexec=$1 prog=$2
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$mpiexec" -np 4 --oversubscribe sh -c 'RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=4 \
  LOCAL_RANK=$((OMPI_COMM_WORLD_RANK % 2)) LOCAL_WORLD_SIZE=2 exec "$0"' "$prog" >"$out" || {
  echo "FAIL: the program failed"; cat "$out"; exit 1; }
overall=$(grep -c '^overall: printed by process 0$' "$out")
machine0=$(grep -c '^per machine: printed by process 0 (machine 0)$' "$out")
machine1=$(grep -c '^per machine: printed by process 2 (machine 1)$' "$out")
lines=$(wc -l <"$out")
if [ "$overall" = 1 ] && [ "$machine0" = 1 ] && [ "$machine1" = 1 ] && [ "$lines" = 3 ]; then
  echo PASS
else
  echo "FAIL: expected one overall line and one line per machine, got:"; cat "$out"; exit 1
fi
