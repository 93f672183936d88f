#!/bin/sh
# Hostile config files and launch arguments: every case is a clear error (status 2) naming the
# file, line and key (or the flag), within a bounded time.
#   regression for red-team D6 (ranges from the file named a flag), D7 (deep nesting took quadratic
#   time), D10 (a FIFO config file blocked), D13 (--monitor_interval inf/nan, --tee 7).
# usage: test_config_hostile.sh ACCELERATE
ACC=$1
T=$(mktemp -d /tmp/acc-config-hostile-XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
export HF_HOME="$T/hf"
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE ACCELERATE_RUN_ID
M=${ACC_TEST_TIMEOUT_MULTIPLIER:-1}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# run SECONDS CMD...: the command under a hang guard; sets out and rc (124: the guard fired)
run() {
  lim=$(($1 * M))
  shift
  out=$(timeout -s KILL "$lim" "$@" 2>&1)
  rc=$?
  [ $rc -eq 137 ] && rc=124
}
# bad NAME CONTENT EXPECTED [extra launch args]: status 2 and EXPECTED in the output
bad() {
  name=$1
  printf "$2" >"$T/$name"
  exp=$3
  shift 3
  run 20 "$ACC" launch --config_file "$T/$name" "$@" true
  [ $rc -eq 2 ] || fail "$name: expected status 2, got $rc ($out)"
  echo "$out" | grep -qF -- "$exp" || fail "$name: expected '$exp' in: $out"
  echo "$out" | grep -q -- "error: --" && fail "$name: the message names a flag: $out"
}

# D6: ranges, with file:line:key and not a flag
bad np0.yaml 'distributed_type: MULTI_CPU\nnum_processes: 0\n' \
  "np0.yaml:2: key 'num_processes' must be 1..65536 (or -1: pass --num_processes), got 0"
bad npbig.yaml 'distributed_type: MULTI_CPU\nmixed_precision: no\nnum_processes: 100000\n' \
  "npbig.yaml:3: key 'num_processes' must be 1..65536"
bad npmax.yaml 'distributed_type: MULTI_CPU\nnum_processes: 9223372036854775807\n' \
  "npmax.yaml:2: key 'num_processes' must be 1..65536 (or -1: pass --num_processes), got 9223372036854775807"
bad port.yaml 'distributed_type: MULTI_CPU\nnum_processes: 1\nmain_process_port: 99999\n' \
  "port.yaml:3: key 'main_process_port' must be 0..65535, got 99999"
bad mach0.yaml 'distributed_type: MULTI_CPU\nnum_machines: 0\n' \
  "mach0.yaml:2: key 'num_machines' must be 1..65536, got 0"
bad mrank.yaml 'distributed_type: MULTI_CPU\nnum_processes: 2\nnum_machines: 2\nmachine_rank: 5\nmain_process_ip: 127.0.0.1\n' \
  "mrank.yaml:4: key 'machine_rank' is 5; with num_machines 2 it must be 0..1"
bad ccl.yaml 'distributed_type: MULTI_CPU\nmpirun_config:\n  mpirun_ccl: 0\n' \
  "ccl.yaml:3: key 'mpirun_config.mpirun_ccl' must be 1..65536, got 0"
# a flag still wins over the file's value (which is then not used)
printf 'distributed_type: MULTI_CPU\nnum_processes: 2\n' >"$T/ok.yaml"
run 30 "$ACC" launch --config_file "$T/ok.yaml" --num_processes 1 true
[ $rc -eq 0 ] || fail "ok.yaml with --num_processes 1: status $rc ($out)"

# D7: 100,000 nested brackets fail at once, naming the file and the line
{
  printf 'distributed_type: NO\nx: '
  awk 'BEGIN { for (i = 0; i < 100000; i++) printf "["; for (i = 0; i < 100000; i++) printf "]"; print "" }'
} >"$T/deep.yaml"
t0=$(date +%s%N)
run 20 "$ACC" launch --config_file "$T/deep.yaml" true
t1=$(date +%s%N)
ms=$(((t1 - t0) / 1000000))
[ $rc -eq 2 ] || fail "deep.yaml: status $rc ($out)"
echo "$out" | grep -qF "deep.yaml:2:" && echo "$out" | grep -qF "nested more than 64 levels" ||
  fail "deep.yaml: message: $out"
# No wall-clock limit here (it failed under ASan on a loaded machine): the 20 s guard of `run`
# bounds it, and the message proves the parser stopped at level 65 instead of descending.
echo "deep.yaml (100000 levels) rejected in $ms ms"
# deep block mappings too, and 64 levels inside an ignored key are still accepted
awk 'BEGIN { print "distributed_type: NO"; s = ""; for (i = 0; i < 200; i++) { printf "%sk%d:\n", s, i; s = s " " } printf "%sv: 1\n", s }' >"$T/deepblock.yaml"
run 20 "$ACC" launch --config_file "$T/deepblock.yaml" true
[ $rc -eq 2 ] && echo "$out" | grep -qF "deepblock.yaml:" && echo "$out" | grep -qF "nested more than 64" ||
  fail "deepblock.yaml: status $rc: $out"
{
  printf 'distributed_type: NO\nnum_processes: 1\nunknown_key: '
  awk 'BEGIN { for (i = 0; i < 63; i++) printf "["; for (i = 0; i < 63; i++) printf "]"; print "" }'
} >"$T/ok64.yaml"
run 20 "$ACC" launch --config_file "$T/ok64.yaml" true
[ $rc -eq 0 ] || fail "ok64.yaml (64 levels): status $rc: $out"
# size cap
awk 'BEGIN { print "distributed_type: NO"; for (i = 0; i < 40000; i++) printf "# padding line %d 0123456789\n", i }' >"$T/big.yaml"
run 20 "$ACC" launch --config_file "$T/big.yaml" true
[ $rc -eq 2 ] && echo "$out" | grep -qF "big.yaml is larger than 1048576 bytes" || fail "big.yaml: $rc: $out"

# D10: a FIFO, a directory or a device as the config file
mkfifo "$T/fifo.yaml"
run 20 "$ACC" launch --config_file "$T/fifo.yaml" true
[ $rc -eq 2 ] && echo "$out" | grep -qF "fifo.yaml' is a FIFO, not a regular file" || fail "FIFO config: status $rc: $out"
run 20 "$ACC" env --config_file "$T/fifo.yaml"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -qF "is a FIFO" || fail "accelerate env with a FIFO: $rc: $out"
mkdir -p "$T/hf/accelerate"
mkfifo "$T/hf/accelerate/default_config.yaml"
run 20 "$ACC" launch true
[ $rc -eq 2 ] && echo "$out" | grep -qF "default_config.yaml' is a FIFO" || fail "FIFO default config: $rc: $out"
rm -f "$T/hf/accelerate/default_config.yaml"
run 20 "$ACC" launch --config_file /dev/zero true
[ $rc -eq 2 ] && echo "$out" | grep -qF "is a character device, not a regular file" || fail "/dev/zero: $rc: $out"
run 20 "$ACC" launch --config_file "$T" true
[ $rc -eq 2 ] && echo "$out" | grep -qF "is a directory, not a regular file" || fail "directory: $rc: $out"

# D13: --monitor_interval range, --tee values
for v in inf -inf 1e300 nan -1 0 3601; do
  run 20 "$ACC" launch --monitor_interval "$v" true
  [ $rc -eq 2 ] && echo "$out" | grep -q -- "monitor_interval.*\(0.001..3600\|finite\)" ||
    fail "--monitor_interval $v: status $rc: $out"
done
run 20 "$ACC" launch --monitor_interval 0.05 true
[ $rc -eq 0 ] || fail "--monitor_interval 0.05: $rc: $out"
run 20 "$ACC" launch --tee 7 true
[ $rc -eq 2 ] && echo "$out" | grep -qF "argument --tee: invalid value '7' (expected 0, 1, 2 or 3" ||
  fail "--tee 7: status $rc: $out"
run 20 "$ACC" launch --tee 0:1,1:2 true
[ $rc -eq 2 ] && echo "$out" | grep -qF "per-rank mappings" || fail "--tee 0:1,1:2: $rc: $out"
run 20 "$ACC" launch --tee 1 sh -c 'echo hello'
[ $rc -eq 0 ] && echo "$out" | grep -qF "[rank 0] hello" || fail "--tee 1: $rc: $out"
run 20 "$ACC" launch --tee sh -c 'echo bare'
[ $rc -eq 0 ] && echo "$out" | grep -qF "[rank 0] bare" || fail "bare --tee: $rc: $out"

# accelerate env lists the table's variables that are set
run 20 env ACCELERATE_TIMEOUT=42 ACCELERATE_SHM_SPIN_US=5 "$ACC" env
echo "$out" | grep -qx "	ACCELERATE_TIMEOUT=42" && echo "$out" | grep -qx "	ACCELERATE_SHM_SPIN_US=5" ||
  fail "accelerate env does not list the set variables: $out"
echo "$out" | grep -q "^	PATH=" && fail "accelerate env prints PATH"
# a bad ACCELERATE_LAUNCH_GRACE_PERIOD is an error before anything starts
run 20 env ACCELERATE_LAUNCH_GRACE_PERIOD=abc "$ACC" launch true
[ $rc -eq 2 ] && echo "$out" | grep -qF 'ACCELERATE_LAUNCH_GRACE_PERIOD="abc" is not a number' ||
  fail "grace period abc: $rc: $out"

if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
