#!/bin/sh
# HYBRID_SHARD across three "machines": network namespaces on one bridge (netns_up_hub of
# tests/multinode/netns_lib.sh), one `accelerate launch --machine_rank R` of 2 processes per
# machine, joined through the rendezvous store on machine 0.
#
# usage: hybrid3_netns.sh ACCELERATE TEST_FSDP TEST_FSDP_LOWP
#   1. HYBRID_SHARD and HYBRID_SHARD_ZERO2 on the hierarchical backend train test_fsdp's MLP 50
#      steps next to NO_SHARD in the same processes: parameters and every clip norm within 1e-5
#      relative (each machine's 2 processes hold the shards; the 3 machines are replicas, so the
#      rail all-reduce is over 3 processes, not 2).
#   2. The same for a bf16 table (test_fsdp_lowp train bf16 HYBRID_SHARD): 16-bit gathers inside
#      each machine, float32 master shards all-reduced across the three.
# Exit 77 (skip) only when the namespaces cannot be created (needs root or CAP_NET_ADMIN).
set -u
ACC=$1
PROG=$2
LOWP=$3

. "$(dirname "$0")/../multinode/netns_lib.sh"
netns_up_hub hy3 3

export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ACCELERATE_RUN_ID ACCELERATE_BACKEND \
  MASTER_ADDR MASTER_PORT ACCELERATE_STORE_SECRET ACCELERATE_STORE_SECRET_FILE ACCELERATE_RDZV_ID \
  FSDP_SHARDING_STRATEGY FSDP_RESHARD_AFTER_FORWARD ACCELERATE_USE_FSDP
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
export ACCELERATE_BACKEND=hierarchical

# all3 TAG program args: the program on the 3 machines (hub_launch, 6 processes); rc0 rc1 rc2
all3() {
  tag=$1
  shift
  hub_launch "$tag" 6 29500 "$@"
}
show() { for mr in 0 1 2; do echo "--- $1, machine $mr:"; tail -6 "$TMP/$1.$mr"; done; }

for strat in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
  all3 "$strat" "$PROG" train "$strat"
  show "$strat"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] ||
    fail "$strat on 3 machines x 2: the launchers exited with $rc0, $rc1 and $rc2"
  for mr in 0 1 2; do
    [ "$(grep -c "test_fsdp: [0-9]* checks, 0 failed" "$TMP/$strat.$mr")" -eq 2 ] ||
      fail "$strat: machine $mr's two processes did not both report their checks passing"
  done
done

all3 bf16 "$LOWP" train bf16 HYBRID_SHARD
show bf16
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] ||
  fail "bf16 HYBRID_SHARD on 3 machines x 2: the launchers exited with $rc0, $rc1 and $rc2"
for mr in 0 1 2; do
  [ "$(grep -c "checks, 0 failed" "$TMP/bf16.$mr")" -eq 2 ] ||
    fail "bf16: machine $mr's two processes did not both report their checks passing"
done
echo "PASS: HYBRID_SHARD and HYBRID_SHARD_ZERO2 (float32 and bf16) on 3 machines x 2 match NO_SHARD"
