#!/bin/sh
# HYBRID_SHARD across two "machines": network namespaces joined by a veth pair
# (tests/multinode/netns_lib.sh), one `accelerate launch --machine_rank R` of 2 processes per
# machine, joined through the rendezvous store.
#
# usage: hybrid_netns.sh ACCELERATE TEST_FSDP TEST_FSDP_LOWP
#   1. HYBRID_SHARD and HYBRID_SHARD_ZERO2 on the hierarchical backend train test_fsdp's MLP 50
#      steps (AdamW, clipping, accumulation) next to NO_SHARD in the same processes: parameters
#      and every clip norm within 1e-5 relative (test_fsdp train), every process the same values.
#   2. A SHARDED_STATE_DICT saved under HYBRID_SHARD on 2 x 2 holds 2 shard files (the first
#      machine's processes; the second machine's are replicas) that say so (fsdp.files 2), and
#      resumes under FULL_SHARD on 3 processes of one machine within 1e-5 of the uninterrupted
#      run (test_fsdp save / resume).
#   3. Rank 1 (machine 0) runs another unit than its machine's peer: both get ACC_ERR_MISMATCH
#      from the subgroup's gather naming both FSDP units; machine 1's processes, whose gathers
#      agree, get an error from the job's next collective (no hang), and both launchers end.
#   4. Rank 3 exits inside a step: both launchers end non-zero within 60 s (collective timeout
#      120 s); rank 2 names rank 3 as dead, machine 0's processes fail on their rail (or are
#      stopped by their launcher once one of them did).
#   5. 2 machines x 1 process (flat gloo): HYBRID_SHARD trains and matches NO_SHARD (each
#      process's group is itself, the rail is the job).
#   6. ACCELERATE_BACKEND=gloo (flat, no per-machine groups): HYBRID_SHARD is refused with a
#      sentence naming the backend and the way out.
#   7. A bf16 table (test_fsdp_lowp train bf16) under HYBRID_SHARD and HYBRID_SHARD_ZERO2 on
#      2 x 2: the float32 master shards equal NO_SHARD's (1e-5) in the same processes.
# Exit 77 (skip) only when the namespaces cannot be created (needs root or CAP_NET_ADMIN).
set -u
ACC=$1
PROG=$2
LOWP=$3

. "$(dirname "$0")/../multinode/netns_lib.sh"
netns_up hy

export OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ACCELERATE_RUN_ID ACCELERATE_BACKEND \
  MASTER_ADDR MASTER_PORT ACCELERATE_STORE_SECRET ACCELERATE_STORE_SECRET_FILE ACCELERATE_RDZV_ID \
  FSDP_SHARDING_STRATEGY FSDP_RESHARD_AFTER_FORWARD ACCELERATE_USE_FSDP
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
PORT=29500

# launch NS MACHINE_RANK OUT -- program args (NP processes in all, default 4)
launch() {
  ns=$1 mr=$2 out=$3
  shift 3
  timeout $((180 * M)) ip netns exec "$ns" "$ACC" launch --num_machines 2 --machine_rank "$mr" --num_processes "${NP:-4}" \
    --main_process_ip $IPA --main_process_port $PORT "$PROG" "$@" >"$out" 2>&1
}
# both TAG -- program args: machine 1 in the background, machine 0 here; rc0 / rc1
both() {
  tag=$1
  shift
  launch "$NSB" 1 "$TMP/$tag.1" "$@" &
  j1=$!
  launch "$NSA" 0 "$TMP/$tag.0" "$@"
  rc0=$?
  wait $j1
  rc1=$?
}
n=8
[ -n "${HYBRID_NETNS_VERBOSE:-}" ] && n=100000 # the whole output of every run
show() { echo "--- $1, machine 0:"; tail -$n "$TMP/$1.0"; echo "--- $1, machine 1:"; tail -$n "$TMP/$1.1"; }

export ACCELERATE_BACKEND=hierarchical
for strat in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
  both "$strat" train "$strat"
  show "$strat"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "$strat on 2 machines x 2: the launchers exited with $rc0 and $rc1"
  grep -q "test_fsdp: [0-9]* checks, 0 failed" "$TMP/$strat.0" || fail "$strat: machine 0 did not report its checks"
done

both save save HYBRID_SHARD SHARDED_STATE_DICT "$TMP/ck"
show save
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the HYBRID_SHARD save: the launchers exited with $rc0 and $rc1"
n=$(ls "$TMP/ck" | grep -c '^fsdp_shard_rank[0-9]*\.safetensors$')
[ "$n" -eq 2 ] || { ls -l "$TMP/ck"; fail "the HYBRID_SHARD checkpoint holds $n shard files, expected 2 (machine 0's processes)"; }
grep -q '"fsdp.files":"2"' "$TMP/ck/fsdp_shard_rank1.safetensors" ||
  fail "fsdp_shard_rank1.safetensors does not say fsdp.files 2"
grep -q '"fsdp.replicas":"2"' "$TMP/ck/fsdp_shard_rank0.safetensors" ||
  fail "fsdp_shard_rank0.safetensors does not say fsdp.replicas 2"
unset ACCELERATE_BACKEND
timeout $((120 * M)) "$ACC" launch --num_processes 3 "$PROG" resume FULL_SHARD "$TMP/ck" >"$TMP/resume.out" 2>&1 ||
  { cat "$TMP/resume.out"; fail "resuming the HYBRID_SHARD checkpoint under FULL_SHARD on 3 processes failed"; }
tail -3 "$TMP/resume.out"

export ACCELERATE_BACKEND=hierarchical ACCELERATE_TIMEOUT=60
both mismatch mismatch HYBRID_SHARD
show mismatch
# rank 1 (machine 0) gathers another unit than rank 0: both name both calls over their machine's
# group; machine 1's processes (whose gathers agree) get an error from the job's next collective
# once machine 0's broken processes leave, never a hang
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the mismatch run: the launchers exited with $rc0 and $rc1"
[ "$(grep -c "expected error: FSDP: gathering the parameters of unit" "$TMP/mismatch.0")" -eq 2 ] ||
  fail "machine 0's processes did not both report the mismatch"
grep -q "over this machine's processes \[FSDP unit 0 parameter all-gather\]" "$TMP/mismatch.0" &&
  grep -q "over this machine's processes \[FSDP unit 2 parameter all-gather\]" "$TMP/mismatch.0" ||
  fail "machine 0's mismatch does not name both subgroup calls"
[ "$(grep -c "expected error (another machine's mismatch)" "$TMP/mismatch.1")" -eq 2 ] ||
  fail "machine 1's processes did not both fail their next job-wide call"

# a process dies inside a step (rank 3, machine 1, between two units' gathers): every launcher
# ends non-zero well before the collective timeout
export ACCELERATE_TIMEOUT=120
t0=$(date +%s)
both die train HYBRID_SHARD die
t1=$(date +%s)
show die
[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || fail "a dead process: the launchers exited with $rc0 and $rc1"
[ $((t1 - t0)) -lt 60 ] || fail "a dead process: the job took $((t1 - t0)) s to end (hang guard 60 s)"
# each survivor ended on an error of its own (not only the launcher's stop): rank 2 names rank 3,
# machine 0's processes lost their rail peer
grep -q "rank 3 (pid [0-9]*) died" "$TMP/die.1" || fail "rank 2 does not name the dead rank 3"
grep -q "after the death: FSDP\|rank 3" "$TMP/die.0" || fail "machine 0 neither failed on its own nor names rank 3"
unset ACCELERATE_TIMEOUT

# one process per machine (flat gloo, the default there): the machine's group is each process
# alone, the rail is the job: HYBRID_SHARD computes NO_SHARD's arithmetic
unset ACCELERATE_BACKEND
NP=2 both one train HYBRID_SHARD
show one
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "HYBRID_SHARD on 2 machines x 1: the launchers exited with $rc0 and $rc1"

export ACCELERATE_BACKEND=hierarchical
MLP=$PROG
PROG=$LOWP
for strat in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
  both "bf16_$strat" train bf16 "$strat"
  show "bf16_$strat"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "bf16 $strat on 2 machines x 2: the launchers exited with $rc0 and $rc1"
  for mr in 0 1; do
    [ "$(grep -c "checks, 0 failed" "$TMP/bf16_$strat.$mr")" -eq 2 ] ||
      fail "bf16 $strat: machine $mr's two processes did not both report their checks passing"
  done
done
PROG=$MLP

export ACCELERATE_BACKEND=gloo
both gloo train HYBRID_SHARD
show gloo
[ $rc0 -ne 0 ] || fail "HYBRID_SHARD on the flat gloo backend across machines was not refused"
# the first process to reach acc_fsdp_create refuses and exits; its launcher stops its peer, so the
# other machine's processes may fail while still connecting (gloo's "connection closed by peer"):
# the sentence is in one machine's output, not always machine 0's
cat "$TMP/gloo.0" "$TMP/gloo.1" | grep -q "the gloo backend offers no collectives over this machine's processes" ||
  fail "the refusal on gloo does not say why"
echo "PASS: HYBRID_SHARD and HYBRID_SHARD_ZERO2 on 2 machines x 2 match NO_SHARD (float32 and bf16); the HYBRID checkpoint resumes under FULL_SHARD on 3; a subgroup mismatch is named; flat gloo refuses"
