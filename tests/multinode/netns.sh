#!/bin/sh
# Several "machines" on this one: two network namespaces joined by a veth pair (netns_lib.sh:
# $NET.1 and $NET.2, addresses that exist only inside them). `accelerate launch` reads a config file
# with mpirun_config.mpirun_hostfile, runs mpirun inside the first namespace, and mpirun reaches
# both "machines" through an rsh agent script that enters the namespace of the host it is given.
#
# usage: netns.sh MODE ACCELERATE FASHION_MNIST
#   MODE match: 2 machines x 2 processes must print the same final loss and accuracy as 4
#               processes on one machine (mpirun -np 4 inside one namespace, same TCP transport)
#               and as `accelerate launch --num_processes 4` (shared-memory backend).
#   MODE kill:  kill every process of the second machine mid-run; the job must stop by itself
#               within a bounded time, with a non-zero status and a message that says so.
# Exit 77 (skip) only when the namespaces cannot be created (no CAP_NET_ADMIN, no `ip`).
set -u
MODE=$1
ACC=$2
PROG=$3

. "$(dirname "$0")/netns_lib.sh"
command -v mpirun >/dev/null 2>&1 || skip "mpirun (openmpi-bin) is not installed"
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "no Fashion-MNIST data"
netns_up mn

# The rsh agent: mpirun runs `agent HOST COMMAND...`; run COMMAND inside HOST's namespace.
cat >"$TMP/agent" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
  $IPA) ns=$NSA ;;
  $IPB) ns=$NSB ;;
  *) echo "netns agent: unknown host '\$host'" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$TMP/agent"
printf "$IPA slots=2\n$IPB slots=2\n" >"$TMP/hostfile"
cat >"$TMP/config.yaml" <<EOF
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_CPU
use_cpu: true
num_machines: 2
num_processes: 4
machine_rank: 0
main_process_ip: $IPA
main_process_port: 29500
mixed_precision: 'no'
mpirun_config:
  mpirun_hostfile: $TMP/hostfile
EOF

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent="$TMP/agent" OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=$NET.0/24
export OMPI_MCA_oob_tcp_if_include=$NET.0/24
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export HF_HOME="$TMP/hf" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE ACCELERATE_RUN_ID ACCELERATE_BACKEND

summary() { grep -E "^(epoch [0-9]+: mean training loss|test accuracy)" "$1"; }

if [ "$MODE" = match ]; then
  ARGS="--max-steps 12 --epochs 1 --quiet"
  timeout 120 ip netns exec "$NSA" "$ACC" launch --config_file "$TMP/config.yaml" "$PROG" $ARGS \
    >"$TMP/multi.out" 2>&1
  rc=$?
  cat "$TMP/multi.out"
  [ $rc -eq 0 ] || fail "the 2-machine run exited with status $rc"
  grep -q "mpirun --hostfile $TMP/hostfile --npernode 2 -n 4" "$TMP/multi.out" ||
    fail "the launcher did not build the mpirun command from the config file's hostfile"
  # rank placement: two ranks on each machine (the program prints nothing per rank, so ask MPI)
  timeout 60 ip netns exec "$NSA" "$ACC" launch --config_file "$TMP/config.yaml" \
    sh -c 'echo "placed rank $OMPI_COMM_WORLD_RANK on $(ip -4 -o addr show | grep -o "'"$NET"'\.[0-9]*")"' \
    >"$TMP/place.out" 2>&1
  sort "$TMP/place.out" | grep placed
  [ "$(grep -c "placed rank [01] on $IPA\$" "$TMP/place.out")" = 2 ] &&
    [ "$(grep -c "placed rank [23] on $IPB\$" "$TMP/place.out")" = 2 ] ||
    fail "ranks 0,1 should run on $IPA and ranks 2,3 on $IPB"
  timeout 120 ip netns exec "$NSA" mpirun -np 4 "$PROG" $ARGS >"$TMP/single.out" 2>&1 ||
    { cat "$TMP/single.out"; fail "the 1-machine mpirun run failed"; }
  timeout 120 "$ACC" launch --num_processes 4 "$PROG" $ARGS >"$TMP/shm.out" 2>&1 ||
    { cat "$TMP/shm.out"; fail "the 1-machine accelerate launch run failed"; }
  summary "$TMP/multi.out" >"$TMP/a"
  summary "$TMP/single.out" >"$TMP/b"
  summary "$TMP/shm.out" >"$TMP/c"
  echo "2 machines x 2:"; cat "$TMP/a"
  echo "1 machine, mpirun -np 4:"; cat "$TMP/b"
  echo "1 machine, accelerate launch (shm):"; cat "$TMP/c"
  [ "$(wc -l <"$TMP/a")" -eq 2 ] || fail "the 2-machine run did not print its loss and accuracy"
  cmp -s "$TMP/a" "$TMP/b" || fail "2 machines and 1 machine (mpirun) differ"
  cmp -s "$TMP/a" "$TMP/c" || fail "2 machines and 1 machine (accelerate launch) differ"
  echo "PASS: 2 machines x 2 processes match 1 machine x 4 processes"
  exit 0
fi

if [ "$MODE" = kill ]; then
  # A run far longer than the test; the second machine is killed once its ranks are training.
  export ACCELERATE_TIMEOUT=20
  ip netns exec "$NSA" "$ACC" launch --config_file "$TMP/config.yaml" "$PROG" --epochs 50 --quiet \
    >"$TMP/kill.out" 2>&1 &
  job=$!
  # Wait (bounded) until the second machine runs two ranks and rank 0 has started training.
  i=0
  while :; do
    n=0
    for p in $(ip netns pids "$NSB"); do
      case "$(cat /proc/$p/comm 2>/dev/null)" in fashion_mnist) n=$((n + 1)) ;; esac
    done
    [ $n -ge 2 ] && grep -q "^training" "$TMP/kill.out" && break
    i=$((i + 1))
    [ $i -gt 600 ] && { cat "$TMP/kill.out"; kill -9 $job; fail "the job did not start within 60 s"; }
    kill -0 $job 2>/dev/null || { cat "$TMP/kill.out"; fail "the job ended before the kill"; }
    sleep 0.1
  done
  t0=$(date +%s.%N)
  echo "killing machine 2 ($NSB): $(ip netns pids "$NSB" | tr '\n' ' ')"
  kill -9 $(ip netns pids "$NSB")
  # The job must end by itself; 60 s is only the guard.
  i=0
  while kill -0 $job 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ]; then
      cat "$TMP/kill.out"
      pids=$(ip netns pids "$NSA")
      [ -n "$pids" ] && kill -9 $pids
      fail "the job still runs 60 s after machine 2 was killed (hang)"
    fi
    sleep 0.1
  done
  wait $job
  rc=$?
  t1=$(date +%s.%N)
  cat "$TMP/kill.out"
  secs=$(echo "$t1 - $t0" | bc 2>/dev/null || echo "?")
  echo "job ended with status $rc, ${secs} s after the kill"
  [ $rc -ne 0 ] || fail "the job exited 0 although a machine was killed"
  grep -Eiq "lost communication|lost connection|timed out|exited on signal|killed|ACC_ERR|failed" \
    "$TMP/kill.out" || fail "no message says what happened"
  echo "PASS: killing one machine stopped the job with a message"
  exit 0
fi
fail "unknown mode $MODE"
