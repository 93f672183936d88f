#!/bin/sh
# Several "machines" joined through the rendezvous store, without MPI: two network namespaces
# (10.231.x.1 and 10.231.x.2, joined by a veth pair, as netns.sh makes them), one
# `accelerate launch --machine_rank R` per machine (or processes started with torchrun's
# environment and no launcher), the gloo backend between them.
#
# usage: rdzv.sh MODE ACCELERATE FASHION_MNIST
#   match:    2 machines x 2 processes (per-machine launchers) print the same final loss and
#             accuracy as 4 processes on one machine (shared memory), bit for bit.
#   torchrun: the same with torchrun's environment (MASTER_ADDR, RANK, WORLD_SIZE, LOCAL_RANK,
#             LOCAL_WORLD_SIZE, GROUP_RANK) and no launcher: rank 0 hosts the store.
#   conformance: PROG is tests/dist's conformance program: every collective x dtype x op x root
#             against local references on 2 machines x 2, with ACCELERATE_BACKEND=gloo and
#             =hierarchical (four times: small chunks, the default chunk for the per-rail path,
#             64 KiB and 1 MiB pipeline pieces for the pipelined per-rail path and all_gather).
#   kill:     kill -9 one rank on machine 1 mid-run: machine 0's launcher stops its ranks and
#             exits non-zero naming machine 1 and the rank, within 10 s (hang guard 60 s).
#   nccl:     PROG is mm_prog: the NCCL bootstrap's CPU part on the fake device (2 fake GPUs
#             per machine, bus ids 01,02 on machine 0 and 03,04 on machine 1), twice: every
#             process got the same unique id bytes (process 0's, through the rendezvous store),
#             two bootstraps got two ids, and every process got the same table of GPUs.
#   restart:  PROG is mm_prog: --max_restarts 1 on both machines, rank 3 (machine 1) kills
#             itself before step 5 of attempt 0; both machines restart together, attempt 1
#             resumes from the latest checkpoint and ends with the loss and weights of an
#             uninterrupted run, bit for bit.
#   hang:     PROG is mm_prog: rank 3 (machine 1) blocks before an all_reduce: hang reports on
#             both machines, the collective times out, both launchers stop non-zero.
#   flood:    600 idle connections and 600 announcing 1 MiB frames (ACC_STORE_FLOOD, never a
#             HELLO) against machine 0's store during a 2-machine run: the job runs, machine 0's
#             launcher peaks within the store's 64 MiB budget + 16 MB (red team 4, R4-1).
#   killlauncher: kill -9 of machine 1's launcher: machine 0 names it as the first failure.
#   torchrunkill: torchrun's environment, kill -9 of rank 3: no process calls a live rank
#             "died before arriving" (D9).
#   term:     SIGTERM to machine 1's launcher: both launchers end non-zero and name it as the
#             job's first failure (ecosystem 4, D4).
#   partition: the link cut for good: both launchers end non-zero within 60 s (the default
#             ACCELERATE_PARTITION_TIMEOUT), each naming the lost contact and when; then a
#             10 s flap in another job is survived (D5).
#   joinorder: --rdzv_backend c10d without --machine_rank: the launcher that owns
#             --main_process_ip is machine 0, the other machine 1, result as on one machine (D2).
#   errors:   wrong port, duplicate machine rank, mismatched counts (and --max_restarts),
#             missing secret: the
#             launcher of machine 1 fails with a message naming the problem, within the
#             rendezvous timeout; for a refused launcher of the job, machine 0 stops at once
#             with the same sentence (R4-6).
# Exit 77 (skip) only when the namespaces cannot be created.
set -u
MODE=$1
ACC=$2
PROG=$3

. "$(dirname "$0")/netns_lib.sh"
case "$MODE" in
  nccl | restart | hang) ;;
  *) [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "no Fashion-MNIST data" ;;
esac
netns_up rz

export HF_HOME="$TMP/hf" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ACCELERATE_RUN_ID ACCELERATE_BACKEND \
  MASTER_ADDR MASTER_PORT ACCELERATE_STORE_SECRET ACCELERATE_STORE_SECRET_FILE ACCELERATE_RDZV_ID
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
PORT=29500
ARGS="--max-steps 12 --epochs 1 --quiet"

# launch NS MACHINE_RANK OUT [extra launch flags...] -- program args
launch() {
  ns=$1 mr=$2 out=$3
  shift 3
  timeout $((180 * M)) ip netns exec "$ns" "$ACC" launch --num_machines 2 --machine_rank "$mr" --num_processes 4 \
    --main_process_ip $IPA --main_process_port $PORT "$@" >"$out" 2>&1
}
summary() { grep -E "^(epoch [0-9]+: mean training loss|test accuracy)" "$1"; }

one_machine() {
  timeout $((120 * M)) "$ACC" launch --num_processes 4 "$PROG" $ARGS >"$TMP/shm.out" 2>&1 ||
    { cat "$TMP/shm.out"; fail "the 1-machine run failed"; }
  summary "$TMP/shm.out" >"$TMP/c"
}

compare() {
  summary "$1" >"$TMP/a"
  echo "2 machines x 2:"; cat "$TMP/a"
  echo "1 machine x 4 (shared memory):"; cat "$TMP/c"
  [ "$(wc -l <"$TMP/a")" -eq 2 ] || fail "the 2-machine run did not print its loss and accuracy"
  cmp -s "$TMP/a" "$TMP/c" || fail "2 machines and 1 machine differ"
}

if [ "$MODE" = match ]; then
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" $ARGS &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" $ARGS
  rc0=$?
  wait $j1
  rc1=$?
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the launchers exited with $rc0 and $rc1"
  grep -q "Backend: hierarchical" "$TMP/m0.out" || fail "the default backend across machines is not hierarchical"
  one_machine
  compare "$TMP/m0.out"
  echo "PASS: 2 machines x 2 processes (per-machine launch) match 1 machine x 4 processes"
  exit 0
fi

if [ "$MODE" = torchrun ]; then
  pids=""
  for r in 0 1 2 3; do
    ns=$NSA; g=0
    [ $r -ge 2 ] && { ns=$NSB; g=1; }
    ip netns exec "$ns" env MASTER_ADDR=$IPA MASTER_PORT=$PORT RANK=$r WORLD_SIZE=4 \
      LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 GROUP_RANK=$g \
      timeout $((120 * M)) "$PROG" $ARGS >"$TMP/r$r.out" 2>&1 &
    pids="$pids $!"
  done
  st=0
  for p in $pids; do wait $p || st=1; done
  for r in 0 1 2 3; do echo "--- rank $r:"; cat "$TMP/r$r.out"; done
  [ $st -eq 0 ] || fail "a process exited non-zero"
  one_machine
  compare "$TMP/r0.out"
  echo "PASS: torchrun's environment on 2 machines matches 1 machine x 4 processes"
  exit 0
fi

if [ "$MODE" = conformance ]; then
  export ACC_TEST_NPROCS=4
  # hierarchical four times: with 16 KiB chunks every all_reduce stays under 256 KiB (the
  # leaders' path), with the default chunk the largest counts (about 1 MiB) take the per-rail
  # path, and with 64 KiB pipeline pieces those counts take the pipelined per-rail path (8 to 32
  # pieces of uneven sizes, the rail of each on a thread of its own). The all_gather pieces of
  # the leaders (64 pieces of a 2 MiB machine block) ride in gloo's header exchange; with 1 MiB
  # pipeline pieces they are 4 of about 512 KiB, gloo's direct transfers, landing in place.
  for be in gloo hierarchical hierarchical:default hierarchical:pipelined hierarchical:direct; do
    export ACCELERATE_BACKEND=${be%%:*}
    chunk=16384
    [ "$be" = hierarchical:default ] && chunk=
    unset ACCELERATE_HIER_PIECE_BYTES
    [ "$be" = hierarchical:pipelined ] && chunk= && export ACCELERATE_HIER_PIECE_BYTES=65536
    [ "$be" = hierarchical:direct ] && chunk= && export ACCELERATE_HIER_PIECE_BYTES=1048576
    launch "$NSB" 1 "$TMP/c1.out" "$PROG" $chunk &
    j1=$!
    launch "$NSA" 0 "$TMP/c0.out" "$PROG" $chunk
    rc0=$?
    wait $j1
    rc1=$?
    echo "--- $be, machine 0:"; tail -5 "$TMP/c0.out"; echo "--- $be, machine 1:"; tail -5 "$TMP/c1.out"
    [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "conformance on $be: the launchers exited with $rc0 and $rc1"
  done
  echo "PASS: the gloo and hierarchical backends pass the conformance program on 2 machines x 2"
  exit 0
fi

if [ "$MODE" = kill ]; then
  export ACCELERATE_TIMEOUT=60
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" --epochs 50 --quiet &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" --epochs 50 --quiet &
  j0=$!
  i=0
  while :; do
    n=0
    for p in $(ip netns pids "$NSB"); do
      case "$(cat /proc/$p/comm 2>/dev/null)" in fashion_mnist) n=$((n + 1)); victim=$p ;; esac
    done
    [ $n -ge 2 ] && grep -q "^training" "$TMP/m0.out" && break
    i=$((i + 1))
    [ $i -gt $((600 * M)) ] && { cat "$TMP/m0.out" "$TMP/m1.out"; fail "the job did not start within 60 s"; }
    kill -0 $j0 2>/dev/null || { cat "$TMP/m0.out"; fail "machine 0's job ended before the kill"; }
    sleep 0.1
  done
  t0=$(date +%s%N)
  echo "killing pid $victim (a rank on machine 1)"
  kill -9 "$victim"
  i=0
  while kill -0 $j0 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt $((600 * M)) ] && { cat "$TMP/m0.out"; fail "machine 0 still runs 60 s after the kill"; }
    sleep 0.05
  done
  wait $j0
  rc=$?
  t1=$(date +%s%N)
  wait $j1
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  ms=$(( (t1 - t0) / 1000000 ))
  echo "machine 0's launcher exited with status $rc, $ms ms after the kill"
  [ $rc -ne 0 ] || fail "machine 0 exited 0 although a rank of machine 1 was killed"
  grep -Eq "machine 1 .*rank [23] \(pid [0-9]+\) was killed by SIGKILL" "$TMP/m0.out" ||
    fail "machine 0's launcher does not name machine 1, the rank and its exit"
  [ $ms -le $((10000 * M)) ] || fail "machine 0 took $ms ms to stop (more than 10 s)"
  echo "PASS: a rank killed on machine 1 stopped machine 0, named"
  exit 0
fi

if [ "$MODE" = nccl ]; then
  export ACCELERATE_TEST_DEVICE=fake ACCELERATE_TEST_FAKE_GPUS=2
  mkdir -p "$TMP/nccl"
  (export ACCELERATE_TEST_FAKE_GPU_BUS_IDS=3,4; launch "$NSB" 1 "$TMP/m1.out" "$PROG" nccl "$TMP/nccl") &
  j1=$!
  (export ACCELERATE_TEST_FAKE_GPU_BUS_IDS=1,2; launch "$NSA" 0 "$TMP/m0.out" "$PROG" nccl "$TMP/nccl")
  rc0=$?
  wait $j1
  rc1=$?
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the launchers exited with $rc0 and $rc1"
  for r in 0 1 2 3; do
    [ -s "$TMP/nccl/nccl.$r" ] || fail "rank $r wrote no bootstrap record"
    echo "--- rank $r:"; cat "$TMP/nccl/nccl.$r"
    cmp -s "$TMP/nccl/nccl.0" "$TMP/nccl/nccl.$r" || fail "rank $r got another id or GPU table than rank 0"
  done
  grep -qx "via store" "$TMP/nccl/nccl.0" || fail "the bootstrap did not go through the rendezvous store"
  id0=$(sed -n 's/^id 0 //p' "$TMP/nccl/nccl.0")
  id1=$(sed -n 's/^id 1 //p' "$TMP/nccl/nccl.0")
  [ ${#id0} -eq 256 ] && [ ${#id1} -eq 256 ] || fail "the ids are not 128 bytes"
  case "$id0" in *[1-9a-f]*) ;; *) fail "the id is all zeros" ;; esac
  [ "$id0" != "$id1" ] || fail "two bootstraps got the same id"
  want="0:0:00000000:01:00.0 1:0:00000000:02:00.0 2:1:00000000:03:00.0 3:1:00000000:04:00.0"
  for k in 0 1; do
    got=$(sed -n "s/^gpus $k //p" "$TMP/nccl/nccl.0")
    [ "$got" = "$want" ] || fail "GPU table $k: got '$got', expected '$want'"
  done
  echo "PASS: the NCCL id and the GPU table reached every process on 2 machines through the store"
  exit 0
fi

if [ "$MODE" = restart ]; then
  STEPS=12
  mkdir -p "$TMP/ref" "$TMP/rs"
  launch "$NSB" 1 "$TMP/r1.out" "$PROG" train "$TMP/ref" $STEPS &
  j1=$!
  launch "$NSA" 0 "$TMP/r0.out" "$PROG" train "$TMP/ref" $STEPS
  rc0=$?
  wait $j1
  rc1=$?
  cat "$TMP/r0.out"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { cat "$TMP/r1.out"; fail "the uninterrupted run: launchers exited with $rc0 and $rc1"; }
  grep "^final:" "$TMP/r0.out" >"$TMP/want" || fail "the uninterrupted run printed no final line"
  export ACC_TEST_DIE_RANK=3 ACC_TEST_DIE_STEP=5
  launch "$NSB" 1 "$TMP/m1.out" --max_restarts 1 "$PROG" train "$TMP/rs" $STEPS &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" --max_restarts 1 "$PROG" train "$TMP/rs" $STEPS
  rc0=$?
  wait $j1
  rc1=$?
  unset ACC_TEST_DIE_RANK ACC_TEST_DIE_STEP
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the restarted job: launchers exited with $rc0 and $rc1"
  for f in "$TMP/m0.out" "$TMP/m1.out"; do
    grep -Eq "restarting the group \(restart 1 of 1\) because on machine 1 .*rank 3 \(pid [0-9]+\) was killed by SIGKILL" "$f" ||
      fail "$f: no restart naming machine 1 and rank 3"
  done
  grep -q "resumed from .*checkpoint_4 at step 5" "$TMP/m0.out" || fail "attempt 1 did not resume from step 5's checkpoint"
  grep "^final:" "$TMP/m0.out" >"$TMP/got" || fail "the restarted run printed no final line"
  echo "uninterrupted: $(cat "$TMP/want")"; echo "restarted:     $(cat "$TMP/got")"
  cmp -s "$TMP/want" "$TMP/got" || fail "the restarted run ends differently from the uninterrupted one"
  echo "PASS: --max_restarts across 2 machines: both restarted together and ended bit for bit like the uninterrupted run"
  exit 0
fi

if [ "$MODE" = hang ]; then
  # What a rank hung on machine 1 looks like today: every process of both machines prints a hang
  # report, the collective times out, and both launchers stop with a non-zero status, bounded.
  # The shared-memory group inside machine 1 names the job's ranks and the machine: rank 2 waits
  # for rank 3 (not "local rank 1").
  export ACCELERATE_HANG_REPORT_S=2 ACCELERATE_TIMEOUT=$((8 * M))
  t0=$(date +%s)
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" hang 3 &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" hang 3
  rc0=$?
  wait $j1
  rc1=$?
  t1=$(date +%s)
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  echo "launchers exited with $rc0 and $rc1 after $((t1 - t0)) s"
  [ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || fail "a launcher exited 0 although rank 3 hung"
  for f in "$TMP/m0.out" "$TMP/m1.out"; do
    grep -q "accelerate: hang report: rank " "$f" || fail "$f: no hang report"
    grep -Eq "the job's first failure: on machine [01] .*([Tt]imed out|timed out after)" "$f" ||
      fail "$f: the job's first failure is not the collective's timeout"
  done
  grep -q "hanging before the all_reduce" "$TMP/m1.out" || fail "rank 3 did not hang as planned"
  grep -Eq "hang report: rank 2 on machine 1 \(pid [0-9]+\).* not arrived: \[3\]; rank 3 \(pid" "$TMP/m1.out" ||
    fail "machine 1's hang report does not name rank 2 on machine 1 waiting for rank 3"
  echo "PASS: a rank hung on machine 1: hang reports on both machines, the job stopped at the timeout"
  exit 0
fi

# wait_training OUT0 OUT1: polled, bounded
wait_training() {
  i=0
  until grep -q "^training" "$1" && [ "$(ip netns pids "$NSB" | wc -l)" -ge 3 ]; do
    i=$((i + 1))
    [ $i -gt $((600 * M)) ] && { cat "$1" "$2"; fail "the job did not start within 60 s"; }
    kill -0 $j0 2>/dev/null || { cat "$1" "$2"; fail "machine 0's job ended before it trained"; }
    sleep 0.1
  done
}
# wait_both LIMIT_S: both launchers exit within LIMIT_S seconds (polled); sets rc0 rc1 secs
wait_both() {
  t0=$(date +%s)
  i=0
  while kill -0 $j0 2>/dev/null || kill -0 $j1 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt $(($1 * 10 * M)) ] && { tail -5 "$TMP"/*.out; fail "a launcher still runs $1 s later"; }
    sleep 0.1
  done
  wait $j0; rc0=$?
  wait $j1; rc1=$?
  secs=$(( $(date +%s) - t0 ))
}

if [ "$MODE" = flood ]; then
  # R4-1: 600 idle connections and 600 that announce 1 MiB frames (tests/multinode/store_flood.c,
  # from machine 1's namespace, reconnecting what the store closes) during a real 2-machine run:
  # the job runs, and machine 0's launcher stays within the store's budget (64 MiB) + 16 MB
  [ -x "${ACC_STORE_FLOOD:-}" ] || fail "ACC_STORE_FLOOD (the store_flood program) is not set"
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" $ARGS &
  j0=$!
  lpid=""
  i=0
  while [ -z "$lpid" ]; do
    for p in $(ip netns pids "$NSA"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = accelerate ] && lpid=$p; done
    i=$((i + 1))
    [ $i -gt $((300 * M)) ] && fail "machine 0's launcher did not start"
    [ -z "$lpid" ] && sleep 0.1
  done
  ip netns exec "$NSB" "$ACC_STORE_FLOOD" idle $IPA $PORT 600 $((12 * M)) >"$TMP/fi.out" 2>&1 &
  fi=$!
  ip netns exec "$NSB" "$ACC_STORE_FLOOD" big $IPA $PORT 600 $((12 * M)) >"$TMP/fb.out" 2>&1 &
  fb=$!
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" $ARGS &
  j1=$!
  hwm=0
  while kill -0 $j0 2>/dev/null; do
    h=$(awk '/^VmHWM/ { print $2 }' /proc/$lpid/status 2>/dev/null)
    [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
    sleep 0.1
  done
  wait $j0; rc0=$?
  wait $j1; rc1=$?
  wait $fi $fb
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"; cat "$TMP/fi.out" "$TMP/fb.out"
  echo "machine 0's launcher: peak resident $hwm kB"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the job under the flood: launchers exited with $rc0 and $rc1"
  grep -q "^test accuracy" "$TMP/m0.out" || fail "the job printed no accuracy"
  for f in fi fb; do # the flood really held its connections (the store closed some: deadline, frame)
    grep -Eq "opened ([6-9][0-9][0-9]|[0-9]{4,}) connections, the store closed [1-9]" "$TMP/$f.out" ||
      fail "the flood did not run as planned: $(cat "$TMP/$f.out")"
  done
  [ "$hwm" -gt 0 ] && [ "$hwm" -le $((65536 + 16000)) ] || fail "machine 0's launcher peaked at $hwm kB (budget 64 MiB + 16 MB)"
  echo "PASS: 600 idle and 600 1-MiB-frame connections during a 2-machine run: the job ran, the launcher peaked at $hwm kB"
  exit 0
fi

if [ "$MODE" = killlauncher ]; then
  # item 7: kill -9 of machine 1's launcher: machine 0 names that launcher, not a healthy rank
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" --epochs 50 --quiet &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" --epochs 50 --quiet &
  j0=$!
  wait_training "$TMP/m0.out" "$TMP/m1.out"
  victim=""
  for p in $(ip netns pids "$NSB"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = accelerate ] && victim=$p
  done
  [ -n "$victim" ] || fail "no launcher in machine 1's namespace"
  kill -9 "$victim"
  wait_both 60
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  [ $rc0 -ne 0 ] || fail "machine 0 exited 0 after machine 1's launcher was killed"
  grep -Eq "the job's first failure: the launcher of machine 1 \(.*\) lost its connection to the rendezvous store" "$TMP/m0.out" ||
    fail "machine 0 does not name machine 1's launcher as the first failure"
  echo "PASS: kill -9 of machine 1's launcher is named on machine 0"
  exit 0
fi

if [ "$MODE" = torchrunkill ]; then
  # item 7 (D9): torchrun's environment, no launcher: kill -9 of rank 3 (machine 1); no process
  # blames a live rank (or itself) as "died before arriving"
  pids=""
  for r in 0 1 2 3; do
    ns=$NSA; g=0
    [ $r -ge 2 ] && { ns=$NSB; g=1; }
    ip netns exec "$ns" env MASTER_ADDR=$IPA MASTER_PORT=$PORT RANK=$r WORLD_SIZE=4 \
      LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 GROUP_RANK=$g \
      timeout $((120 * M)) "$PROG" --epochs 50 --quiet >"$TMP/r$r.out" 2>&1 &
    pids="$pids $!"
  done
  i=0
  victim=""
  until [ -n "$victim" ] && grep -q "^training" "$TMP/r0.out"; do
    for p in $(ip netns pids "$NSB"); do
      tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "RANK=3" && victim=$p
    done
    i=$((i + 1))
    [ $i -gt $((600 * M)) ] && { cat "$TMP"/r*.out; fail "the job did not start within 60 s"; }
    sleep 0.1
  done
  kill -9 "$victim"
  r=0
  for p in $pids; do wait $p; echo "rank $r exited with status $?"; r=$((r + 1)); done
  for r in 0 1 2 3; do echo "--- rank $r:"; cat "$TMP/r$r.out"; done
  if grep -Eh "rank [0-2] \(pid [0-9]+\) died before arriving" "$TMP"/r*.out; then
    fail "a live rank was blamed as dead (only rank 3 was killed)"
  fi
  echo "PASS: torchrun's environment, rank 3 killed: no live rank blamed as dead"
  exit 0
fi

if [ "$MODE" = term ]; then
  # D4: SIGTERM to machine 1's launcher (scancel, preemption) is named as such on every machine
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" --epochs 50 --quiet &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" --epochs 50 --quiet &
  j0=$!
  wait_training "$TMP/m0.out" "$TMP/m1.out"
  # machine 1's launcher: the `accelerate` process of namespace B whose parent is not in it
  victim=""
  for p in $(ip netns pids "$NSB"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = accelerate ] && victim=$p
  done
  [ -n "$victim" ] || fail "no launcher in machine 1's namespace"
  kill -TERM "$victim"
  wait_both 60
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  [ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || fail "a launcher exited 0 ($rc0, $rc1)"
  for f in "$TMP/m0.out" "$TMP/m1.out"; do
    grep -Eq "the job's first failure: machine 1's launcher \(.*\) received SIGTERM at [0-9:]+ UTC" "$f" ||
      fail "$f: the job's first failure is not machine 1's SIGTERM"
  done
  echo "PASS: SIGTERM to machine 1's launcher is named on both machines"
  exit 0
fi

if [ "$MODE" = partition ]; then
  # item 6 (D5): a permanent cut ends both launchers non-zero within 60 s by default, each
  # naming the lost contact and its time; a 10 s flap is survived
  launch "$NSB" 1 "$TMP/m1.out" "$PROG" --epochs 50 --quiet &
  j1=$!
  launch "$NSA" 0 "$TMP/m0.out" "$PROG" --epochs 50 --quiet &
  j0=$!
  wait_training "$TMP/m0.out" "$TMP/m1.out"
  ip -n "$NSB" link set "$VB" down
  wait_both 70
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  echo "after the cut: launchers exited with $rc0 and $rc1 within $secs s"
  [ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] || fail "a launcher exited 0 after a permanent cut"
  [ $secs -le $((60 * M)) ] || fail "the launchers needed $secs s (more than 60)"
  grep -Eq "launcher of machine 1 \(.*\) lost its connection to the rendezvous store at [0-9:]+ UTC" "$TMP/m0.out" ||
    fail "machine 0 does not name machine 1's lost connection and its time"
  grep -Eq "lost the rendezvous store at $IPA:$PORT at [0-9:]+ UTC" "$TMP/m1.out" ||
    fail "machine 1 does not say it lost the store (machine 0) and when"
  cut_secs=$secs
  # a 10 s flap: survived
  ip -n "$NSB" link set "$VB" up
  PORT=$((PORT + 1))
  launch "$NSB" 1 "$TMP/f1.out" "$PROG" --epochs 2 --quiet &
  j1=$!
  launch "$NSA" 0 "$TMP/f0.out" "$PROG" --epochs 2 --quiet &
  j0=$!
  wait_training "$TMP/f0.out" "$TMP/f1.out"
  ip -n "$NSB" link set "$VB" down
  sleep 10 # the outage itself, not a synchronization
  ip -n "$NSB" link set "$VB" up
  wait_both 200
  cat "$TMP/f0.out"; echo "--- machine 1:"; cat "$TMP/f1.out"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "a 10 s flap was not survived ($rc0, $rc1)"
  echo "PASS: a permanent cut ended both launchers in $cut_secs s naming the lost contact; a 10 s flap was survived"
  exit 0
fi

if [ "$MODE" = joinorder ]; then
  # D2: no --machine_rank, --rdzv_backend c10d: the launcher on the host that owns
  # --main_process_ip is machine 0, the other joins as machine 1 (it starts first here)
  c10d() {
    timeout $((180 * M)) ip netns exec "$1" "$ACC" launch --num_machines 2 --num_processes 4 \
      --rdzv_backend c10d --main_process_ip $IPA --main_process_port $PORT "$PROG" $ARGS >"$2" 2>&1
  }
  c10d "$NSB" "$TMP/m1.out" &
  j1=$!
  c10d "$NSA" "$TMP/m0.out"
  rc0=$?
  wait $j1
  rc1=$?
  cat "$TMP/m0.out"; echo "--- machine 1:"; cat "$TMP/m1.out"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the launchers exited with $rc0 and $rc1"
  grep -q "this launcher is machine 0 (it hosts the rendezvous store)" "$TMP/m0.out" || fail "machine A is not machine 0"
  grep -q "this launcher is machine 1 (in the order the launchers joined)" "$TMP/m1.out" || fail "machine B is not machine 1"
  one_machine
  compare "$TMP/m0.out"
  echo "PASS: --rdzv_backend c10d without --machine_rank: ranks by host and join order, same result"
  exit 0
fi

if [ "$MODE" = errors ]; then
  export ACCELERATE_RDZV_TIMEOUT=$((30 * M))
  # expect NAME OUTFILE PATTERN: machine 1's launcher failed with a message matching PATTERN
  expect() {
    grep -Eq "$3" "$2" || { cat "$2"; fail "$1: no message matching '$3'"; }
    echo "ok: $1: $(grep -E "$3" "$2" | head -1)"
  }
  # 1. wrong port: nobody listens; bounded retry, then an error naming host:port
  ACCELERATE_RDZV_TIMEOUT=$((3 * M)) timeout $((60 * M)) ip netns exec "$NSB" "$ACC" launch --num_machines 2 --machine_rank 1 --num_processes 4 \
    --main_process_ip $IPA --main_process_port 29555 "$PROG" >"$TMP/e1.out" 2>&1 &&
    fail "machine 1 joined a store that does not exist"
  expect "wrong port" "$TMP/e1.out" "cannot reach the rendezvous store at $IPA:29555 after"

  # machine 0 stays up (its ranks wait for the others, bounded by the rendezvous timeout) while
  # bad launchers of machine 1 try to join.
  start0() {
    launch "$NSA" 0 "$TMP/m0.out" "$@" "$PROG" $ARGS &
    j0=$!
    # machine 0's launcher hosts the store and joins it before it starts a rank: wait (polled,
    # bounded) until its ranks exist, so that a bad launcher never races it to the store
    n=0
    while [ "$(ip netns pids "$NSA" 2>/dev/null | wc -l)" -lt 3 ]; do
      n=$((n + 1))
      [ $n -le $((300 * M)) ] || { cat "$TMP/m0.out"; fail "machine 0's ranks did not start"; }
      sleep 0.1
    done
  }
  stop0() {
    pids=$(ip netns pids "$NSA")
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    wait $j0 2>/dev/null
  }

  # refused NAME OUT PATTERN LAUNCH-ARGS...: with machine 0 up, a launcher on machine B with these
  # arguments must fail at the join with a message matching PATTERN
  refused() {
    name=$1 out=$2 pattern=$3
    shift 3
    start0
    timeout $((60 * M)) ip netns exec "$NSB" "$ACC" launch "$@" --main_process_ip $IPA --main_process_port $PORT \
      "$PROG" >"$out" 2>&1 && fail "$name: the launcher joined"
    expect "$name" "$out" "$pattern"
    # machine 0 stops at once with the same sentence (red team 4, R4-6), not at its rendezvous
    # timeout with a generic reason (polled, bounded)
    n=0
    while kill -0 $j0 2>/dev/null; do
      n=$((n + 1))
      [ $n -le $((100 * M)) ] || { cat "$TMP/m0.out"; fail "$name: machine 0 still runs 10 s after the refusal"; }
      sleep 0.1
    done
    expect "$name (machine 0)" "$TMP/m0.out" "the rendezvous store refused a client \(HELLO\): .*$pattern"
    stop0
  }

  # 2. duplicate machine rank: a second launcher that says machine 0
  refused "duplicate machine rank" "$TMP/e2.out" "two launchers with machine_rank 0" \
    --num_machines 2 --machine_rank 0 --num_processes 4
  # 3. disagreeing counts
  refused "mismatched counts" "$TMP/e3.out" "says num_processes 6, machine 0 says 4" \
    --num_machines 2 --machine_rank 1 --num_processes 6
  refused "mismatched machines" "$TMP/e4.out" "says num_machines 3, machine 0 says 2" \
    --num_machines 3 --machine_rank 1 --num_processes 6
  refused "mismatched max_restarts" "$TMP/e7.out" "says --max_restarts 2, machine 0 says 0" \
    --num_machines 2 --machine_rank 1 --num_processes 4 --max_restarts 2

  # 4. a secret on machine 0, none on machine 1
  export ACCELERATE_STORE_SECRET=correct-horse
  start0
  unset ACCELERATE_STORE_SECRET
  launch "$NSB" 1 "$TMP/e5.out" "$PROG" $ARGS && fail "machine 1 joined without the secret"
  expect "missing secret" "$TMP/e5.out" "wrong or missing shared secret"
  # machine 0 goes on, and logs the stranger once with its address
  launch "$NSB" 1 "$TMP/e5b.out" "$PROG" $ARGS && fail "machine 1 joined without the secret (2nd try)"
  kill -0 $j0 2>/dev/null || { cat "$TMP/m0.out"; fail "a client without the secret ended machine 0's job"; }
  [ "$(grep -c "rendezvous store: refused a client from $IPB:[0-9]* (wrong or missing shared secret); the job goes on" "$TMP/m0.out")" -eq 1 ] ||
    { cat "$TMP/m0.out"; fail "machine 0 did not log the stranger exactly once"; }
  stop0

  # 5. another job (another --rdzv_id) on the same port
  start0 --rdzv_id job-a
  launch "$NSB" 1 "$TMP/e6.out" --rdzv_id job-b "$PROG" $ARGS && fail "another job joined"
  expect "another job" "$TMP/e6.out" "run id 'job-b' but this store belongs to the job with run id 'job-a'"
  stop0
  echo "PASS: wrong port, duplicate machine rank, mismatched counts and --max_restarts, missing secret, another job"
  exit 0
fi
fail "unknown mode $MODE"
