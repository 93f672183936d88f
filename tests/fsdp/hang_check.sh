#!/bin/sh
# A process that stops inside an FSDP unit (alive, in no collective): the others must print a hang
# report naming the FSDP collective they wait in and the program's call (acc_fsdp_unit_forward_begin
# at test_fsdp_zero.c:LINE), say what the stopped process did last, and fail at ACCELERATE_TIMEOUT
# naming the unit; the launcher then ends the group. Never a silent hang.
# Usage: hang_check.sh ACCELERATE TEST_FSDP_ZERO
acc=$1 prog=$2
out=$(ACCELERATE_HANG_REPORT_S=0.5 ACCELERATE_TIMEOUT=5 "$acc" launch --num_processes 3 "$prog" hang FULL_SHARD 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "hang_check: FAIL: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the launcher exited 0 although process 1 stopped"
printf '%s\n' "$out" | grep -q "hang report: rank 0 .*\[FSDP unit 2 parameter all-gather\] in acc_fsdp_unit_forward_begin at .*test_fsdp_zero\.c:[0-9]" ||
  fail "no hang report of rank 0 naming FSDP unit 2's all-gather and the program's call site"
printf '%s\n' "$out" | grep -q "rank 1 (pid [0-9]*) is not in a collective, its last was .*\[FSDP unit 1 parameter all-gather\]" ||
  fail "the report does not say what process 1 did last"
printf '%s\n' "$out" | grep -q "gathering the parameters of unit 'layer3'.*timed out after 5 s" ||
  fail "no timeout error naming the unit"
echo "hang_check: ok"
