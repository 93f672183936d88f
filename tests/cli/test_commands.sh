#!/bin/sh
# accelerate config (answers on stdin), config default, env and __selftest, checked against
# exact expected output. usage: test_commands.sh ACCELERATE
ACC=$1
T=$(mktemp -d /tmp/acc-cli-test-XXXXXX)
trap 'rm -rf "$T"' EXIT
export HF_HOME="$T/hf"
unset XDG_CACHE_HOME
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect_file() { # expect_file FILE (expected content on stdin)
  cat > "$T/expected"
  if ! diff -u "$T/expected" "$1"; then fail "$1 differs from the expected content"; fi
}
contains() { # contains FILE TEXT
  grep -qF -- "$2" "$1" || fail "output lacks: $2 (see below)"
}
CFG="$HF_HOME/accelerate/default_config.yaml"

# 1. env without a config file
"$ACC" env > "$T/env0" || fail "env exited non-zero without a config"
contains "$T/env0" "Copy-and-paste the text below in your GitHub issue"
contains "$T/env0" "- \`Accelerate\` version: accelerate-c "
contains "$T/env0" "- System RAM: "
contains "$T/env0" "- \`Accelerate\` default config:"
contains "$T/env0" "	Not found"

# 2. questionnaire: multi-CPU, 1 machine, a wrong yes/no answer, mpirun with a hostfile,
#    no FSDP, 4 processes, a bad menu number, bf16.
printf '0\n1\n\nmaybe\nno\nyes\n/etc/hostfile\nno\n4\n7\n2\n' | "$ACC" config > "$T/q1" 2>&1 || fail "config exited non-zero"
contains "$T/q1" "Please enter yes or no."
contains "$T/q1" "Please enter a number between 0 and 2."
contains "$T/q1" "accelerate configuration saved at $CFG"
expect_file "$CFG" <<'YAML'
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: bf16
mpirun_config:
  mpirun_hostfile: /etc/hostfile
num_machines: 1
num_processes: 4
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
YAML

# 3. the file exists: answering no keeps it
cp "$CFG" "$T/before"
printf 'no\n' | "$ACC" config > "$T/q2" 2>&1 || fail "config (keep) exited non-zero"
contains "$T/q2" "A configuration file already exists at $CFG"
cmp -s "$CFG" "$T/before" || fail "the existing config was changed although the answer was no"

# 4. env shows the config file
"$ACC" env > "$T/env1" || fail "env exited non-zero"
contains "$T/env1" "- \`Accelerate\` default config: $CFG"
contains "$T/env1" "	- distributed_type: MULTI_CPU"
contains "$T/env1" "	- num_processes: 4"
contains "$T/env1" "	- mpirun_config.mpirun_hostfile: /etc/hostfile"

# 5. multi-machine, multi-GPU, to an explicit .yaml path in a new directory
printf '\n2\n2\n1\n10.1.2.3\n\nno\n\nyes\n\n8\n0,1\n1\n' | "$ACC" config --config_file "$T/new/dir/c.yaml" > "$T/q3" 2>&1 || fail "config --config_file exited non-zero"
expect_file "$T/new/dir/c.yaml" <<'YAML'
compute_environment: LOCAL_MACHINE
debug: true
distributed_type: MULTI_GPU
downcast_bf16: 'no'
enable_cpu_affinity: false
gpu_ids: 0,1
machine_rank: 1
main_process_ip: 10.1.2.3
main_process_port: 29500
main_training_function: main
mixed_precision: fp16
num_machines: 2
num_processes: 8
rdzv_backend: static
same_network: false
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
YAML

# 6. input that ends early writes nothing
printf '0\n' | "$ACC" config --config_file "$T/early.yaml" > "$T/q4" 2>&1 && fail "config with truncated input exited 0"
[ -e "$T/early.yaml" ] && fail "config with truncated input wrote a file"

# 7. config default: JSON into the .yaml, never overwrites
export HF_HOME="$T/hf2"
"$ACC" config default > "$T/d1" || fail "config default exited non-zero"
contains "$T/d1" "accelerate configuration saved at $T/hf2/accelerate/default_config.yaml"
expect_file "$T/hf2/accelerate/default_config.yaml" <<'JSON'
{
  "compute_environment": "LOCAL_MACHINE",
  "debug": false,
  "distributed_type": "NO",
  "downcast_bf16": false,
  "enable_cpu_affinity": false,
  "machine_rank": 0,
  "main_training_function": "main",
  "mixed_precision": "no",
  "num_machines": 1,
  "num_processes": 1,
  "rdzv_backend": "static",
  "same_network": false,
  "tpu_use_cluster": false,
  "tpu_use_sudo": false,
  "use_cpu": true
}
JSON
"$ACC" config default --mixed-precision bf16 > "$T/d2" || fail "config default (exists) exited non-zero"
contains "$T/d2" "Configuration already exists at $T/hf2/accelerate/default_config.yaml, will not override."
contains "$T/d2" "pass another path with --config_file"   # new user 9: no option that does not exist
grep -q save_location "$T/d2" && fail "config default names save_location, an option it does not have"
grep -q '"mixed_precision": "no"' "$T/hf2/accelerate/default_config.yaml" || fail "config default overwrote the file"
"$ACC" config default --config_file="$T/x.yaml" --mixed_precision bf16 > /dev/null || fail "config default --config_file"
grep -q '"mixed_precision": "bf16"' "$T/x.yaml" || fail "config default --mixed_precision bf16 not written"
"$ACC" config default --config_file "$T/y.yaml" --mixed_precision fp8 > "$T/d3" 2>&1 && fail "fp8 accepted"
contains "$T/d3" "--mixed_precision must be one of no, fp16, bf16 (got 'fp8')"
"$ACC" env --config_file "$T/x.yaml" > "$T/env2" || fail "env --config_file"
contains "$T/env2" "- \`Accelerate\` config passed: $T/x.yaml"
contains "$T/env2" "	- mixed_precision: bf16"
printf 'distributed_type: NO\nnum_processes: abc\n' > "$T/bad.yaml"
"$ACC" env --config_file "$T/bad.yaml" > "$T/env3" 2>&1 && fail "env with a bad config exited 0"
contains "$T/env3" "$T/bad.yaml:2: key 'num_processes' must be an integer, got 'abc'"

# 8. the self-test program on one process
"$ACC" __selftest > "$T/s1" 2>&1 || fail "__selftest failed"
contains "$T/s1" "Testing, testing. 1, 2, 3."
contains "$T/s1" "trigger sequence False/True/False"
contains "$T/s1" "All checks passed on 1 process(es)"

if [ $fails -ne 0 ]; then
  for f in "$T"/q* "$T"/env* "$T"/d* "$T"/s1; do echo "== $f"; cat "$f"; done
  echo "$fails check(s) failed"; exit 1
fi
echo "cli commands: all checks passed"
