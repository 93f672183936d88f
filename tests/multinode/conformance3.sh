#!/bin/sh
# tests/dist's conformance program on 3 "machines" x 2 processes (network namespaces on one
# bridge, netns_up_hub), one `accelerate launch --machine_rank R` per machine, on the
# hierarchical backend with its pipeline on. With 3 machines the leaders' all_gather of a
# pipeline piece takes the two paths that 2 machines never take: with 64 KiB pieces (pieces of
# about 21 KiB of each 2 MiB machine block) it rides in gloo's header exchange between 3
# processes; with 1 MiB pieces (about 350 KiB) it is gloo's own all_gather, gathered in scratch
# and copied to each machine's place in the output (gloo.cc, all_gather_at).
#
# usage: conformance3.sh ACCELERATE CONFORMANCE
# Exit 77 (skip) only when the namespaces cannot be created (needs root or CAP_NET_ADMIN).
set -u
ACC=$1
PROG=$2

. "$(dirname "$0")/netns_lib.sh"
netns_up_hub cf3 3

export OMP_NUM_THREADS=1 ACC_TEST_NPROCS=6
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ACCELERATE_RUN_ID ACCELERATE_BACKEND \
  MASTER_ADDR MASTER_PORT ACCELERATE_STORE_SECRET ACCELERATE_STORE_SECRET_FILE ACCELERATE_RDZV_ID \
  ACCELERATE_HIER_PIECE_BYTES ACCELERATE_SHM_CHUNK_BYTES
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
PORT=29500

for run in hierarchical:65536 hierarchical:1048576; do
  export ACCELERATE_BACKEND=${run%%:*} ACCELERATE_HIER_PIECE_BYTES=${run#*:}
  PORT=$((PORT + 1))
  hub_launch c 6 $PORT "$PROG"
  for mr in 0 1 2; do echo "--- $run, machine $mr:"; tail -4 "$TMP/c.$mr"; done
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] ||
    fail "conformance on $run (3 machines x 2): the launchers exited with $rc0, $rc1 and $rc2"
  # the program checks that it runs on ACCELERATE_BACKEND and on ACC_TEST_NPROCS processes
  grep -q "conformance: 6 processes, backend $ACCELERATE_BACKEND" "$TMP/c.0" ||
    fail "conformance on $run: machine 0 did not report 6 processes on $ACCELERATE_BACKEND"
done
echo "PASS: the hierarchical backend passes the conformance program on 3 machines x 2 with 64 KiB and 1 MiB pipeline pieces"
