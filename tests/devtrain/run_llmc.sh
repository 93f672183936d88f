#!/bin/sh
# test_llmc's five launches in one fresh directory (test_llmc.c): ref (the uninterrupted run
# without overlap, writing ref.bin), overlap (bit for bit ref.bin), kill (saves at step 5, every
# process kills itself with SIGKILL at step 8: the launch must fail), resume (a new launch loads
# the checkpoint and trains to the end: bit for bit ref.bin), zero (llm.c's -z 1: the program's
# optimizer on its shard, acc_accelerator_zero_gather, its moments' ranges checkpointed as full
# tensors equal to the kill launch's: bit for bit ref.bin, also after loading its checkpoint).
# Usage: run_llmc.sh ACCELERATE_CLI TEST_LLMC DIR fake|cuda [launch arguments...]
set -u
cli=$1 prog=$2 dir=$3 dev=$4
shift 4
cuda=
[ "$dev" = cuda ] && cuda=cuda
rm -rf "$dir" && mkdir -p "$dir" || exit 1
for mode in ref overlap; do
  echo "== $mode"
  "$cli" launch "$@" "$prog" $mode "$dir" $cuda || { echo "llmc: FAIL: the $mode launch failed"; exit 1; }
done
echo "== kill"
"$cli" launch "$@" "$prog" kill "$dir" $cuda
rc=$?
[ "$rc" -ne 0 ] || { echo "llmc: FAIL: the kill launch exited 0 (its processes did not die)"; exit 1; }
[ -f "$dir/killed.0" ] || { echo "llmc: FAIL: the kill launch failed before it killed itself (exit $rc)"; exit 1; }
echo "== resume (the kill launch exited $rc)"
"$cli" launch "$@" "$prog" resume "$dir" $cuda || { echo "llmc: FAIL: the resume launch failed"; exit 1; }
echo "== zero"
"$cli" launch "$@" "$prog" zero "$dir" $cuda || { echo "llmc: FAIL: the zero launch failed"; exit 1; }
echo "llmc: PASS"
