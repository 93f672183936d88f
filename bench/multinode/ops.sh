#!/bin/sh
# Two "machines" as network namespaces joined by a veth pair (built as tests/multinode builds
# them), P processes on each: all_reduce, broadcast and all_gather, 4 B .. MAXB, through
#   auto          accelerate-c's default backend (gloo with 1 process per machine, hierarchical
#                 with 2)
#   gloo          accelerate-c, flat gloo (ACCELERATE_BACKEND=gloo)
#   hierarchical  accelerate-c, ACCELERATE_BACKEND=hierarchical
#   torch         PyTorch's gloo process group (/usr/bin/python3 torch_busbw.py; Debian's
#                 python3-torch, installed by scripts/deps.sh --bench)
#   openmpi       Open MPI (mpirun across the namespaces, tcp between them)
#   base          the default backend of another build (BASE=<its build dir>, with its busbw):
#                 an A/B of two commits in one run; adds the columns base and torch/base
# one run of each per round, the order rotating, ROUNDS rounds; prints per layout, op and size
# the median over the rounds of each run's median time per call (the slowest rank's), and
# torch's time over ours (> 1: ours faster) for auto, gloo and hierarchical, and Open MPI's over
# auto's.
# Usage (root): bench/multinode/ops.sh [build_dir]
#   ROUNDS (3), MAXB (67108864), PPN ("1 2": processes per machine), IMPLS (the first five above),
#   OPS (all_reduce,broadcast,all_gather), LINK_RATE (e.g. 1gbit: a tc token bucket on both ends
#   of the veth "wire"; unset: no limit).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
ROUNDS=${ROUNDS:-3}
MAXB=${MAXB:-67108864}
PPN=${PPN:-1 2}
IMPLS=${IMPLS:-auto gloo hierarchical torch openmpi}
export BUSBW_OPS=${OPS:-all_reduce,broadcast,all_gather} BUSBW_MIN=4
export ACCELERATE_MODULE_DIR=$build OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
. "$root/tests/multinode/netns_lib.sh"
netns_up bo
if [ -n "${LINK_RATE:-}" ]; then
  ip netns exec "$NSA" tc qdisc add dev "$VA" root tbf rate "$LINK_RATE" burst 1mb latency 100ms &&
    ip netns exec "$NSB" tc qdisc add dev "$VB" root tbf rate "$LINK_RATE" burst 1mb latency 100ms ||
    fail "cannot limit the link to $LINK_RATE (tc)"
fi
cat >"$TMP/agent" <<EOF2
#!/bin/sh
host=\$1; shift
case "\$host" in $IPA) ns=$NSA ;; $IPB) ns=$NSB ;; esac
exec ip netns exec "\$ns" sh -c "mount -t tmpfs acc-bench-shm /dev/shm && exec \$*"
EOF2
chmod +x "$TMP/agent"
PORT=29600
run() { # impl ppn out
  impl=$1 ppn=$2 out=$3 np=$(( 2 * $2 ))
  PORT=$((PORT + 1))
  case $impl in
    torch)
      rk=0
      while [ $rk -lt $np ]; do
        ns=$NSA dev=$VA; [ $rk -ge "$ppn" ] && ns=$NSB dev=$VB
        ip netns exec "$ns" env GLOO_SOCKET_IFNAME=$dev MASTER_ADDR=$IPA MASTER_PORT=$PORT RANK=$rk WORLD_SIZE=$np \
          LOCAL_RANK=$((rk % ppn)) /usr/bin/python3 "$root/bench/multinode/torch_busbw.py" "$MAXB" \
          >"$out.r$rk" 2>&1 &
        rk=$((rk + 1))
      done
      wait
      cp "$out.r0" "$out" ;;
    openmpi)
      printf "$IPA slots=$ppn\n$IPB slots=$ppn\n" >"$TMP/hosts"
      ip netns exec "$NSA" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_plm_rsh_agent="$TMP/agent" OMPI_MCA_plm_rsh_no_tree_spawn=1 \
        OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none \
        OMPI_MCA_btl_tcp_if_include=$NET.0/24 OMPI_MCA_oob_tcp_if_include=$NET.0/24 \
        OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_mpi_yield_when_idle=1 \
        mpirun -x BUSBW_OPS -x BUSBW_MIN --hostfile "$TMP/hosts" --npernode "$ppn" -n $np \
        "$build/bench/multinode/mpi_busbw" "$MAXB" >"$out" 2>&1 ;;
    *)
      be=$impl bd=$build; [ "$impl" = auto ] && be=
      [ "$impl" = base ] && be= bd=${BASE:?"IMPLS has base: set BASE to the other build's directory"}
      for m in 1 0; do
        ns=$NSA; [ $m = 1 ] && ns=$NSB
        ip netns exec "$ns" env ACCELERATE_MODULE_DIR="$bd" ${be:+ACCELERATE_BACKEND=$be} "$bd/accelerate" launch \
          --quiet --num_machines 2 --machine_rank $m --num_processes $np --main_process_ip $IPA \
          --main_process_port $PORT "$bd/bench/multinode/busbw" "$MAXB" >"$out.m$m" 2>&1 &
      done
      wait
      cp "$out.m0" "$out" ;;
  esac
  grep -q '^# busbw' "$out" || { echo "# $impl, $ppn per machine: failed:"; tail -3 "$out"*; } >&2
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); link: ${LINK_RATE:-not limited}; $ROUNDS rounds"
for ppn in $PPN; do
  mkdir -p "$TMP/p$ppn"
  r=1
  while [ $r -le "$ROUNDS" ]; do
    set -- $IMPLS
    k=$(( r % $# )) # rotate the order from round to round
    while [ $k -gt 0 ]; do x=$1; shift; set -- "$@" "$x"; k=$((k - 1)); done
    for impl in "$@"; do run "$impl" "$ppn" "$TMP/p$ppn/$impl.$r"; done # (run keeps r)
    echo "# $ppn per machine, round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
    r=$((r + 1))
  done
done
med() { # dir impl op size -> median time (us) over the rounds
  for f in "$1/$2".[0-9]*; do
    [ -f "$f" ] || continue
    case $f in *.m[01]|*.r[0-9]*) continue ;; esac
    awk -v o="$3" -v s="$4" '$1 == o && $2 == s { print $4 }' "$f"
  done | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
for ppn in $PPN; do
  echo "# 2 machines x $ppn: median time per call (us); torch/x = torch's time over ours (> 1: ours faster); mpi/auto likewise"
  printf '%-10s %9s %10s %10s %10s %10s %10s %8s %8s %8s %8s%s\n' op "size(B)" auto gloo hier torch openmpi \
    torch/auto torch/gloo torch/hier mpi/auto "${BASE:+ $(printf '%10s %10s' base torch/base)}"
  for op in $(echo "$BUSBW_OPS" | tr ',' ' '); do
    s=4
    while [ $s -le "$MAXB" ]; do
      d=$TMP/p$ppn
      a=$(med "$d" auto "$op" $s) g=$(med "$d" gloo "$op" $s) h=$(med "$d" hierarchical "$op" $s)
      t=$(med "$d" torch "$op" $s) m=$(med "$d" openmpi "$op" $s) b=$(med "$d" base "$op" $s)
      awk -v o="$op" -v s=$s -v a="$a" -v g="$g" -v h="$h" -v t="$t" -v m="$m" -v b="$b" \
        -v wb="${BASE:+1}" 'function q(x, y) {
          return (x > 0 && y > 0) ? sprintf("%.2f", x / y) : "-" }
        BEGIN { printf "%-10s %9d %10.1f %10.1f %10.1f %10.1f %10.1f %8s %8s %8s %8s", o, s, a, g, h, t, m,
          q(t, a), q(t, g), q(t, h), q(m, a)
          if (wb) printf " %10.1f %10s", b, q(t, b)
          printf "\n" }'
      s=$((s * 4))
    done
  done
done
echo "# end: load $(cut -d' ' -f1-3 /proc/loadavg)"
