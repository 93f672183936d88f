#!/bin/sh
# Two "machines" as network namespaces joined by a veth pair (as tests/multinode builds them),
# PPN processes on each, running bench/multinode/phases.c: a sequence of collectives (PHASES, e.g.
# "ag64k,ar64m,ag64k") in the same processes, each timed, N launches. With BASE=<another build
# dir> each launch is followed by one of that build (an A/B, interleaved); with TORCH=1 by one
# of torch_phases.py (the same phases through PyTorch's gloo); with SPIN=1 every process runs
# under spin_count.so (the polls and failed try-locks of gloo's I/O thread).
# Usage (root): bench/multinode/phases.sh [build_dir]   PPN (1), N (3), PHASES, BASE, TORCH, SPIN,
# EXTRA (variables for every process, e.g. "ACCELERATE_GLOO_PAIR_BYTES=2147483647").
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
PPN=${PPN:-1}
N=${N:-3}
export PHASES=${PHASES:-ag64k,ar64m,ag64k} OMP_NUM_THREADS=1
. "$root/tests/multinode/netns_lib.sh"
netns_up ph
PORT=29900
one() { # build_dir label
  b=$1 PORT=$((PORT + 1))
  pre=; [ "${SPIN:-0}" = 1 ] && pre=$b/bench/multinode/spin_count.so
  for m in 1 0; do
    ns=$NSA; [ $m = 1 ] && ns=$NSB
    ip netns exec "$ns" env ACCELERATE_MODULE_DIR="$b" ${pre:+LD_PRELOAD=$pre} ${EXTRA:-} \
      "$b/accelerate" launch --quiet --num_machines 2 --machine_rank $m \
      --num_processes $((2 * PPN)) --main_process_ip $IPA --main_process_port $PORT \
      "$b/bench/multinode/phases" >"$TMP/out.m$m" 2>&1 &
  done
  wait
  echo "== $2"
  grep -v '^spin_count' "$TMP/out.m0"
  [ -n "$pre" ] && grep -h '^spin_count' "$TMP/out.m0" "$TMP/out.m1" | sed 's/^/  /'
  return 0
}
torch_one() { # label: torch_phases.py, PPN processes in each namespace
  PORT=$((PORT + 1)) np=$((2 * PPN)) rk=0
  while [ $rk -lt $np ]; do
    ns=$NSA dev=$VA; [ $rk -ge "$PPN" ] && ns=$NSB dev=$VB
    ip netns exec "$ns" env GLOO_SOCKET_IFNAME=$dev MASTER_ADDR=$IPA MASTER_PORT=$PORT RANK=$rk \
      WORLD_SIZE=$np /usr/bin/python3 "$root/bench/multinode/torch_phases.py" >"$TMP/t.r$rk" 2>&1 &
    rk=$((rk + 1))
  done
  wait
  echo "== $1"
  cat "$TMP/t.r0"
}
r=1
while [ $r -le "$N" ]; do
  one "$build" "launch $r: $build"
  [ -n "${BASE:-}" ] && one "$BASE" "launch $r: $BASE"
  [ "${TORCH:-0}" = 1 ] && torch_one "launch $r: torch"
  r=$((r + 1))
done
