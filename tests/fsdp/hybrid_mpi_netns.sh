#!/bin/sh
# HYBRID_SHARD under MPI across two "machines" (network namespaces, tests/multinode/netns_lib.sh;
# mpirun reaches the second through an rsh agent that enters its namespace, as
# tests/multinode/netns.sh does), 2 processes each: the MPI backend's subgroups
# (MPI_Comm_split_type SHARED and a split by local rank) carry the shard group and the rails.
#   1. HYBRID_SHARD and HYBRID_SHARD_ZERO2 match NO_SHARD to 1e-5 after 50 steps (test_fsdp train).
#   2. Rank 1 runs another unit: machine 0's processes name both subgroup calls
#      (ACC_ERR_MISMATCH through the tag exchange over the group), machine 1's fail their next
#      job-wide call (the MPI backend's collective timeout, 20 s here), nothing hangs.
# usage: hybrid_mpi_netns.sh TEST_FSDP. Exit 77 (skip) without namespaces or mpirun.
set -u
PROG=$1
. "$(dirname "$0")/../multinode/netns_lib.sh"
command -v mpirun >/dev/null 2>&1 || skip "mpirun (openmpi-bin) is not installed"
netns_up hm
cat >"$TMP/agent" <<EOF2
#!/bin/sh
host=\$1
shift
case "\$host" in
  $IPA) ns=$NSA ;;
  $IPB) ns=$NSB ;;
  *) echo "netns agent: unknown host '\$host'" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF2
chmod +x "$TMP/agent"
printf "$IPA slots=2\n$IPB slots=2\n" >"$TMP/hostfile"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent="$TMP/agent" OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=$NET.0/24
export OMPI_MCA_oob_tcp_if_include=$NET.0/24
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
export OMP_NUM_THREADS=1 ACCELERATE_BACKEND=mpi ACCELERATE_TIMEOUT=60
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE ACCELERATE_RUN_ID FSDP_SHARDING_STRATEGY
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
run() { # OUT -- program args
  out=$1
  shift
  timeout $((120 * M)) ip netns exec "$NSA" mpirun --hostfile "$TMP/hostfile" --npernode 2 -n 4 \
    -x ACCELERATE_BACKEND -x ACCELERATE_TIMEOUT -x OMP_NUM_THREADS "$PROG" "$@" >"$out" 2>&1
}
for strat in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
  run "$TMP/$strat" train "$strat" || { cat "$TMP/$strat"; fail "$strat under MPI on 2 machines x 2"; }
  [ "$(grep -c "test_fsdp: [0-9]* checks, 0 failed" "$TMP/$strat")" -eq 4 ] ||
    { cat "$TMP/$strat"; fail "$strat: not every process reported its checks"; }
  grep "^fsdp" "$TMP/$strat"
done
# (the MPI backend leaves MPI unfinalized after a failure, so mpirun ends non-zero: not checked)
t0=$(date +%s)
ACCELERATE_TIMEOUT=20 run "$TMP/mm" mismatch HYBRID_SHARD
t1=$(date +%s)
grep "expected error" "$TMP/mm" | cut -c1-200
[ $((t1 - t0)) -lt $((90 * M)) ] || fail "the mismatch run took $((t1 - t0)) s (collective timeout 20 s)"
grep -q "over this machine's processes \[FSDP unit 2 parameter all-gather\]" "$TMP/mm" ||
  { cat "$TMP/mm"; fail "the subgroup mismatch is not named"; }
[ "$(grep -c "expected error (another machine's mismatch)" "$TMP/mm")" -eq 2 ] ||
  { cat "$TMP/mm"; fail "machine 1's processes did not both fail their next job-wide call"; }
echo "PASS: HYBRID_SHARD and HYBRID_SHARD_ZERO2 under MPI on 2 machines x 2 match NO_SHARD; a subgroup mismatch is named"
