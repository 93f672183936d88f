#!/bin/sh
# `accelerate config` for several machines never writes a file that `accelerate launch` refuses
# (issue 31, newuser-4 finding 8):
#  1. the newcomer's answers (multi-CPU, 2 machines, Enter at the process count) give 2 processes,
#     and launch accepts the file (it gets as far as looking for the program: exit 127, not 2);
#  2. a process count that is not a multiple of the machines is asked again, with the reason;
#  3. the rendezvous question is asked also when the machines share a network, and only what
#     launch knows (static, c10d) is accepted.
# Usage: test_config_multi.sh ACCELERATE_CLI SCRATCH_DIR
ACC=$1 T=$2
rm -rf "$T" && mkdir -p "$T" || exit 1
export HF_HOME="$T/hf"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. env, multi-CPU, 2 machines, rank 0, IP, port, same network, rdzv, debug, mpirun, FSDP, processes, precision
printf '0\n1\n2\n0\n127.0.0.1\n\n\n\n\n\n\n\n0\n' | "$ACC" config --config_file "$T/mm.yaml" > "$T/q1" 2>&1 ||
  fail "config exited non-zero: $(cat "$T/q1")"
grep -qx 'num_machines: 2' "$T/mm.yaml" && grep -qx 'num_processes: 2' "$T/mm.yaml" ||
  fail "expected 2 machines and 2 processes: $(cat "$T/mm.yaml")"
grep -q 'How many processes should be used for distributed training (in total, over all the machines)? \[2\]' "$T/q1" ||
  fail "the process question does not say total or default to 2: $(cat "$T/q1")"
grep -q 'What rendezvous backend will you use?' "$T/q1" || fail "no rendezvous question on the same network"
out=$("$ACC" launch --config_file "$T/mm.yaml" "$T/no-such-program" 2>&1); rc=$?
[ $rc -eq 127 ] || fail "launch refused the config file (exit $rc, expected 127: the program is missing): $out"

# 2. 3 processes on 2 machines: asked again; rdzv c10d after a refused etcd
printf '0\n1\n2\n1\n10.0.0.1\n\nyes\netcd\nc10d\nno\nno\nno\n3\n4\n0\n' | "$ACC" config --config_file "$T/mm2.yaml" > "$T/q2" 2>&1 ||
  fail "config (2) exited non-zero: $(cat "$T/q2")"
grep -q 'must be a multiple of 2' "$T/q2" || fail "3 processes on 2 machines was not refused: $(cat "$T/q2")"
grep -q 'Please enter static or c10d' "$T/q2" || fail "rendezvous backend etcd was not refused: $(cat "$T/q2")"
grep -qx 'num_processes: 4' "$T/mm2.yaml" && grep -qx 'rdzv_backend: c10d' "$T/mm2.yaml" &&
  grep -qx 'machine_rank: 1' "$T/mm2.yaml" || fail "expected 4 processes, c10d, rank 1: $(cat "$T/mm2.yaml")"
out=$("$ACC" launch --config_file "$T/mm2.yaml" "$T/no-such-program" 2>&1); rc=$?
[ $rc -eq 127 ] || fail "launch refused the second config file (exit $rc): $out"

# 3. multi-GPU on 2 machines of 3 (fake) GPUs each: 6 in total by default
printf '0\n2\n2\n0\n127.0.0.1\n\n\n\n\n\n\n\n0\n' | ACCELERATE_TEST_FAKE_GPUS=3 "$ACC" config --config_file "$T/gpu.yaml" > "$T/q3" 2>&1 ||
  fail "config (3) exited non-zero: $(cat "$T/q3")"
grep -qx 'num_processes: 6' "$T/gpu.yaml" || fail "multi-GPU, 2 machines of 3 GPUs: expected 6: $(cat "$T/gpu.yaml")"
if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
