#!/bin/sh
# Several "machines" as two network namespaces joined by a veth pair (as tests/multinode does),
# 2 processes on each. Measures
#   1. the time from the last `accelerate launch` starting (machine 1's, machine 0's already
#      waiting) to every rank having joined (acc_state_create returned: store + backend), the
#      median of RUNS runs, for the hierarchical backend;
#   2. all_reduce busbw 4 KiB .. 64 MiB: hierarchical vs flat gloo (per-machine launch) vs
#      Open MPI (mpirun across the same namespaces), interleaved, medians of ROUNDS rounds.
# Usage (root): bench/multinode/run.sh [build_dir]     RUNS=5 ROUNDS=3 MAXB=67108864 by default,
# LINK_RATE=1gbit (say) limits the link between the two machines (see below); PIPE_AB=1 adds
# a fourth run per round, the hierarchical backend without its pipeline (ACCELERATE_HIER_PIECE_BYTES=0)
# (RUNS=0: no join time). TRAIN_HOOKS=1: the main job under each comm hook instead (below). The busbw programs are bench/multinode/busbw.c (busbw through the
# library, mpi_busbw through plain Open MPI: the same timed loop).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-3}
ACC=$build/accelerate
export ACCELERATE_MODULE_DIR=$build OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ID=$(( $$ % 100000 ))
NSA=acc-bn-$ID-a NSB=acc-bn-$ID-b VA=accba$ID VB=accbb$ID
IPA=10.250.7.1 IPB=10.250.7.2
TMP=$(mktemp -d)
cleanup() {
  for ns in $NSA $NSB; do
    p=$(ip netns pids $ns 2>/dev/null); [ -n "$p" ] && kill -9 $p 2>/dev/null
    ip netns del $ns 2>/dev/null
  done
  ip link del $VA 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo interrupted; exit 130' INT TERM
ip netns add $NSA && ip netns add $NSB && ip link add $VA type veth peer name $VB &&
  ip link set $VA netns $NSA && ip link set $VB netns $NSB &&
  ip -n $NSA addr add $IPA/24 dev $VA && ip -n $NSB addr add $IPB/24 dev $VB &&
  ip -n $NSA link set lo up && ip -n $NSB link set lo up &&
  ip -n $NSA link set $VA up && ip -n $NSB link set $VB up || { echo "cannot make namespaces"; exit 1; }
# LINK_RATE (e.g. 1gbit, 10gbit): a token-bucket limit on both ends of the veth "wire", so that the
# link between the two machines is slower than memory, as between real machines (unset: no limit;
# the veth pair is then a memory copy by the same cores). Traffic inside a namespace is not limited.
if [ -n "${LINK_RATE:-}" ]; then
  for e in "$NSA $VA" "$NSB $VB"; do
    set -- $e
    ip netns exec $1 tc qdisc add dev $2 root tbf rate "$LINK_RATE" burst 1mb latency 100ms ||
      { echo "cannot limit the link to $LINK_RATE (tc)"; exit 1; }
  done
fi

launch() { # ns machine_rank prog args...
  ns=$1 mr=$2; shift 2
  ip netns exec $ns "$ACC" launch --quiet --num_machines 2 --machine_rank $mr --num_processes 4 \
    --main_process_ip $IPA --main_process_port 29500 "$@"
}

# TRAIN_HOOKS=1: instead of the figures below, the Fashion-MNIST main job with one process per
# machine (gloo between them) under each gradient comm hook (no, bf16, power_sgd from the first
# step), interleaved, ROUNDS rounds: samples/s and test accuracy, medians. Shows what compression
# buys on a link slower than memory (set LINK_RATE).
if [ -n "${TRAIN_HOOKS:-}" ]; then
  ex=$build/examples/fashion_mnist/fashion_mnist
  train() { # hook out
    for m in 1 0; do
      ip netns exec $([ $m = 0 ] && echo $NSA || echo $NSB) env ACCELERATE_POWERSGD_START_ITER=0 \
        "$ACC" launch --quiet --num_machines 2 --machine_rank $m --num_processes 2 \
        --main_process_ip $IPA --main_process_port 29501 --comm_hook "$1" "$ex" --quiet >"$2.m$m" 2>&1 &
    done
    wait
  }
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); link: ${LINK_RATE:-not limited}; main job, 2 machines x 1 process"
  for r in $(seq $ROUNDS); do
    for h in no bf16 power_sgd; do train $h "$TMP/t-$h-$r"; done
  done
  printf '%-10s %12s %10s\n' hook samples/s accuracy
  for h in no bf16 power_sgd; do
    med() { sed -n "$1" "$TMP"/t-$h-*.m0 | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    printf '%-10s %12s %10s\n' $h "$(med 's/^throughput: \([0-9.]*\) samples.*/\1/p')" "$(med 's/^test accuracy: \([0-9.]*\).*/\1/p')"
  done
  echo "# end: load $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

command -v mpirun >/dev/null || { echo "mpirun (Open MPI) not found"; exit 1; }
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); link between the machines: ${LINK_RATE:-not limited}"
echo "# join time: last launcher started -> every rank joined (2 machines x 2, hierarchical)"
[ "$RUNS" -gt 0 ] && for r in $(seq $RUNS); do
  launch $NSA 0 "$build/bench/multinode/join_time" >"$TMP/j0" 2>&1 &
  j0=$!
  # wait (bounded) until machine 0's two ranks run; they then wait in the store for machine 1
  i=0
  while [ "$(for p in $(ip netns pids $NSA); do cat /proc/$p/comm 2>/dev/null; done | grep -c join_time)" -lt 2 ]; do
    i=$((i + 1)); [ $i -gt 200 ] && break; sleep 0.05
  done
  sleep 0.5 # machine 0's ranks started and wait in the store (not part of the measured time)
  t0=$(date +%s%N)
  launch $NSB 1 "$build/bench/multinode/join_time" >"$TMP/j1" 2>&1
  wait $j0
  last=$(cat "$TMP/j0" "$TMP/j1" | awk '/^joined/ { if ($5 > m) m = $5 } END { print m }')
  echo "run $r: $(( (last - t0) / 1000 )) us"
done | tee "$TMP/join.txt"
[ "$RUNS" -gt 0 ] && sort -t: -k2 -n "$TMP/join.txt" | awk -F'[: ]+' '{ v[NR] = $3 } END { print "median join time: " v[int((NR + 1) / 2)] " us" }'

# busbw: rows "all_reduce size count time algbw busbw"
cat >"$TMP/agent" <<EOF2
#!/bin/sh
host=\$1; shift
case "\$host" in $IPA) ns=$NSA ;; $IPB) ns=$NSB ;; esac
# machine 1's own /dev/shm (ip netns exec gives this command a mount namespace of its own):
# Open MPI names its shared-memory (vader) segments by host name, the same in both namespaces
exec ip netns exec "\$ns" sh -c "mount -t tmpfs acc-bench-shm /dev/shm && exec \$*"
EOF2
chmod +x "$TMP/agent"
printf "$IPA slots=2\n$IPB slots=2\n" >"$TMP/hosts"
bench_acc() { # backend out   (backend "hierarchical0": hierarchical without the pipeline)
  export ACCELERATE_BACKEND=$1
  if [ "$1" = hierarchical0 ]; then export ACCELERATE_BACKEND=hierarchical ACCELERATE_HIER_PIECE_BYTES=0; fi
  launch $NSB 1 "$build/bench/multinode/busbw" ${MAXB:-67108864} >"$2.m1" 2>&1 &
  launch $NSA 0 "$build/bench/multinode/busbw" ${MAXB:-67108864} >"$2" 2>&1 ||
    { echo "$1: machine 0 failed:"; tail -5 "$2" "$2.m1"; } >&2
  wait
  unset ACCELERATE_BACKEND ACCELERATE_HIER_PIECE_BYTES
}
bench_mpi() {
  ip netns exec $NSA env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_plm_rsh_agent="$TMP/agent" OMPI_MCA_plm_rsh_no_tree_spawn=1 \
    OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_tcp_if_include=10.250.7.0/24 \
    OMPI_MCA_oob_tcp_if_include=10.250.7.0/24 OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mpi_yield_when_idle=1 \
    mpirun --hostfile "$TMP/hosts" --npernode 2 -n 4 "$build/bench/multinode/mpi_busbw" ${MAXB:-67108864} >"$1" 2>&1 ||
    { echo "openmpi failed:"; tail -${FAILTAIL:-5} "$1"; } >&2
}
for r in $(seq $ROUNDS); do # interleaved, the order rotating from round to round
  case $((r % 3)) in
    1) bench_acc hierarchical "$TMP/h$r"; bench_acc gloo "$TMP/g$r"; bench_mpi "$TMP/m$r" ;;
    2) bench_acc gloo "$TMP/g$r"; bench_mpi "$TMP/m$r"; bench_acc hierarchical "$TMP/h$r" ;;
    0) bench_mpi "$TMP/m$r"; bench_acc hierarchical "$TMP/h$r"; bench_acc gloo "$TMP/g$r" ;;
  esac
  [ -n "${PIPE_AB:-}" ] && bench_acc hierarchical0 "$TMP/z$r"
  echo "# round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
if [ "$ROUNDS" -eq 0 ]; then # join time only
  echo "# end: load $(cut -d' ' -f1-3 /proc/loadavg); $(uptime)"
  exit 0
fi
echo "# all_reduce busbw (GB/s), median of $ROUNDS interleaved rounds; 2 machines x 2 processes"
printf '%12s %12s %12s %12s %10s %10s\n' "size(B)" hierarchical gloo openmpi "hier/gloo" "hier/mpi"
for s in 4096 16384 65536 262144 1048576 4194304 16777216 67108864; do
  [ $s -le ${MAXB:-67108864} ] || continue
  med() { for f in "$@"; do awk -v s=$s '$1 == "all_reduce" && $2 == s { print $6 }' "$f"; done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  h=$(med "$TMP"/h[0-9]*) g=$(med "$TMP"/g[0-9]*) m=$(med "$TMP"/m[0-9]*)
  z=; [ -n "${PIPE_AB:-}" ] && z="  (hierarchical without the pipeline: $(med "$TMP"/z[0-9]*))"
  printf '%12s %12s %12s %12s %10s %10s%s\n' $s "$h" "$g" "$m" \
    "$(awk -v a="$h" -v b="$g" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
    "$(awk -v a="$h" -v b="$m" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" "$z"
done
echo "# end: load $(cut -d' ' -f1-3 /proc/loadavg); $(uptime)"
