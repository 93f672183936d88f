#!/bin/sh
# `accelerate launch` with a config file: every key reaches the ranks' environment, flags
# override the file, the default file is used (and skipped with --cpu), mpirun_config drives
# mpirun, and bad files give the file/line/key error. usage: test_launch_config.sh ACCELERATE
ACC=$1
T=$(mktemp -d /tmp/acc-launch-config-XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
export HF_HOME="$T/hf"
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE ACCELERATE_RUN_ID OMP_NUM_THREADS CUDA_VISIBLE_DEVICES
unset ACCELERATE_DEBUG_MODE ACCELERATE_MIXED_PRECISION ACCELERATE_CPU_AFFINITY CCL_WORKER_COUNT
unset ACCELERATE_COMM_HOOK
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect FILE KEY VALUE: FILE has the line KEY=VALUE
expect() {
  grep -qx "$2=$3" "$1" || fail "$1: expected $2=$3, got '$(grep "^$2=" "$1")'"
}
absent() { grep -q "^$2=" "$1" && fail "$1: $2 should not be set, got '$(grep "^$2=" "$1")'"; }
dump() { # dump DIR [launch args...]: every rank writes DIR/env.<RANK>
  d=$1
  shift
  rm -rf "$d"
  mkdir -p "$d"
  "$ACC" launch "$@" sh -c 'env > "$0/env.$RANK"' "$d"
}

# 1. every key that has an effect, from the file
cat >"$T/all.yaml" <<'EOF'
comm_hook: bf16
compute_environment: LOCAL_MACHINE
debug: true
distributed_type: MULTI_CPU
downcast_bf16: 'no'
dynamo_config:
  dynamo_backend: INDUCTOR
  dynamo_mode: max-autotune
  dynamo_use_dynamic: true
  dynamo_use_fullgraph: false
  dynamo_use_regional_compilation: true
enable_cpu_affinity: true
gpu_ids: 0,1
machine_rank: 0
main_process_ip: 127.0.0.2
main_process_port: 29613
main_training_function: main
mixed_precision: fp16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
use_cpu: true
EOF
dump "$T/d1" --config_file "$T/all.yaml" || fail "launch with all.yaml exited $?"
for r in 0 1; do
  f="$T/d1/env.$r"
  [ -f "$f" ] || { fail "rank $r did not run (num_processes: 2 from the file)"; continue; }
  expect "$f" RANK "$r"
  expect "$f" LOCAL_RANK "$r"
  expect "$f" WORLD_SIZE 2
  expect "$f" LOCAL_WORLD_SIZE 2
  expect "$f" ACCELERATE_DEBUG_MODE true
  expect "$f" ACCELERATE_MIXED_PRECISION fp16
  expect "$f" ACCELERATE_USE_CPU True
  expect "$f" ACCELERATE_CPU_AFFINITY 1
  expect "$f" CUDA_VISIBLE_DEVICES 0,1
  expect "$f" MASTER_ADDR 127.0.0.2
  expect "$f" MASTER_PORT 29613
  expect "$f" ACCELERATE_NUM_MACHINES 1
  expect "$f" ACCELERATE_MACHINE_RANK 0
  expect "$f" ACCELERATE_DYNAMO_BACKEND INDUCTOR
  expect "$f" ACCELERATE_DYNAMO_MODE max-autotune
  expect "$f" ACCELERATE_DYNAMO_USE_DYNAMIC True
  expect "$f" ACCELERATE_DYNAMO_USE_FULLGRAPH False
  expect "$f" ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION True
  expect "$f" OMP_NUM_THREADS 1
  expect "$f" ACCELERATE_COMM_HOOK bf16
done
[ -f "$T/d1/env.2" ] && fail "a third rank ran"

# 2. flags override the file
dump "$T/d2" --config_file "$T/all.yaml" --num_processes 1 --mixed_precision bf16 \
  --main_process_port 29777 --main_process_ip 127.0.0.3 --gpu_ids 1 --comm_hook fp16 ||
  fail "override run exited $?"
f="$T/d2/env.0"
expect "$f" ACCELERATE_COMM_HOOK fp16
expect "$f" WORLD_SIZE 1
expect "$f" ACCELERATE_MIXED_PRECISION bf16
expect "$f" MASTER_PORT 29777
expect "$f" MASTER_ADDR 127.0.0.3
expect "$f" CUDA_VISIBLE_DEVICES 1
expect "$f" ACCELERATE_DEBUG_MODE true # debug = flag or file
[ -f "$T/d2/env.1" ] && fail "--num_processes 1 did not override num_processes: 2"

# 3. no config file at all: defaults
dump "$T/d3" || fail "plain launch exited $?"
f="$T/d3/env.0"
expect "$f" WORLD_SIZE 1
expect "$f" ACCELERATE_MIXED_PRECISION no
expect "$f" ACCELERATE_USE_CPU False
expect "$f" ACCELERATE_DYNAMO_BACKEND NO
expect "$f" MASTER_PORT 29500
absent "$f" ACCELERATE_DEBUG_MODE
absent "$f" CUDA_VISIBLE_DEVICES
absent "$f" ACCELERATE_COMM_HOOK
out=$("$ACC" launch --comm_hook fp8 true 2>&1) && fail "--comm_hook fp8 was accepted"
echo "$out" | grep -q "comm_hook" || fail "--comm_hook fp8: message does not name it: $out"

# 4. the default file ($HF_HOME/accelerate/default_config.yaml) is used without --config_file,
#    and skipped with --cpu; an explicit file is used even with --cpu
mkdir -p "$HF_HOME/accelerate"
printf 'distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: bf16\n' \
  >"$HF_HOME/accelerate/default_config.yaml"
dump "$T/d4"
expect "$T/d4/env.1" ACCELERATE_MIXED_PRECISION bf16
dump "$T/d5" --cpu
[ -f "$T/d5/env.1" ] && fail "--cpu should skip the default config file"
expect "$T/d5/env.0" ACCELERATE_MIXED_PRECISION no
expect "$T/d5/env.0" ACCELERATE_USE_CPU True
dump "$T/d6" --cpu --config_file "$HF_HOME/accelerate/default_config.yaml"
expect "$T/d6/env.1" ACCELERATE_MIXED_PRECISION bf16
rm "$HF_HOME/accelerate/default_config.yaml"

# 5. distributed_type sets the mode only without a mode flag: MULTI_GPU with one process is
#    the --multi_gpu error; with --cpu given the file's type does not apply
printf 'distributed_type: MULTI_GPU\nnum_processes: 1\n' >"$T/gpu.yaml"
out=$("$ACC" launch --config_file "$T/gpu.yaml" true 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "MULTI_GPU with 1 process: expected status 2, got $rc"
echo "$out" | grep -qF 'You need to use at least 2 processes to use `--multi_gpu`.' ||
  fail "MULTI_GPU with 1 process: unexpected message: $out"
"$ACC" launch --config_file "$T/gpu.yaml" --cpu true || fail "--cpu should override distributed_type MULTI_GPU"

# 6. mpirun_config drives mpirun (a stand-in mpirun on PATH records its arguments and env)
mkdir -p "$T/bin"
# (it answers --version with \$FAKE_MPI_VERSION, Open MPI's text unless set)
cat >"$T/bin/mpirun" <<EOF
#!/bin/sh
if [ "\$1" = --version ]; then printf '%s\\n' "\${FAKE_MPI_VERSION:-mpirun (Open MPI) 4.1.4}"; exit 0; fi
echo "\$*" > "$T/mpirun.args"
env > "$T/mpirun.env"
EOF
chmod +x "$T/bin/mpirun"
printf 'host1 slots=2\nhost2 slots=2\n' >"$T/hosts"
cat >"$T/mpi.yaml" <<EOF
distributed_type: MULTI_CPU
num_machines: 2
num_processes: 4
main_process_ip: 10.0.0.1
use_cpu: true
mpirun_config:
  mpirun_hostfile: $T/hosts
  mpirun_ccl: 3
EOF
PATH="$T/bin:$PATH" "$ACC" launch -q --config_file "$T/mpi.yaml" prog a1 || fail "mpirun launch exited $?"
args=$(cat "$T/mpirun.args" 2>/dev/null)
case "$args" in
  "--hostfile $T/hosts --npernode 2 -n 4 "*" prog a1") ;;
  *) fail "mpirun arguments: $args" ;;
esac
echo "$args" | grep -q -- "-x CCL_WORKER_COUNT" || fail "CCL_WORKER_COUNT is not forwarded: $args"
expect "$T/mpirun.env" CCL_WORKER_COUNT 3
expect "$T/mpirun.env" MASTER_ADDR 10.0.0.1
expect "$T/mpirun.env" ACCELERATE_NUM_MACHINES 2
printf 'h slots=1\n' >"$T/hosts2"
PATH="$T/bin:$PATH" "$ACC" launch -q --config_file "$T/mpi.yaml" --mpirun_hostfile "$T/hosts2" \
  --num_processes 2 prog || fail "mpirun override exited $?"
case "$(cat "$T/mpirun.args")" in
  "--hostfile $T/hosts2 --npernode 1 -n 2 "*) ;;
  *) fail "flags should override mpirun_config: $(cat "$T/mpirun.args")" ;;
esac
case "$args" in
  *"-n 4 --bind-to socket "*) ;;
  *) fail "Open MPI with a hostfile binds to sockets: $args" ;;
esac
# Intel MPI / MVAPICH (Hydra): -f H -ppn K -n N, the environment passed on without -x.
for v in "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)" \
         "OSU MVAPICH2 2.3.7-1"; do
  FAKE_MPI_VERSION="$v" PATH="$T/bin:$PATH" "$ACC" launch -q --config_file "$T/mpi.yaml" prog a1 ||
    fail "mpirun ($v) launch exited $?"
  case "$(cat "$T/mpirun.args")" in
    "-f $T/hosts -ppn 2 -n 4 prog a1") ;;
    *) fail "Hydra form for '$v': $(cat "$T/mpirun.args")" ;;
  esac
  expect "$T/mpirun.env" CCL_WORKER_COUNT 3
done

# 7. bad files: status 2 and a message naming the file (and line and key)
bad() { # bad NAME CONTENT EXPECTED-SUBSTRING [extra args]
  printf "$2" >"$T/$1"
  out=$("$ACC" launch --config_file "$T/$1" true 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "$1: expected status 2, got $rc ($out)"
  echo "$out" | grep -qF -- "$3" || fail "$1: expected '$3' in: $out"
}
bad neg.yaml 'distributed_type: MULTI_CPU\nnum_processes: -1\n' \
  "neg.yaml: You need to manually pass in \`--num_processes\` using this config yaml"
bad type.yaml 'distributed_type: MULTI_CPU\nmixed_precision: fp16\nnum_processes: many\n' \
  "type.yaml:3: key 'num_processes'"
bad syntax.yaml 'distributed_type: MULTI_CPU\nnum_processes: [1, 2\n' "syntax.yaml"
bad nodt.yaml 'num_processes: 2\n' "distributed_type"
bad ccl.yaml 'distributed_type: MULTI_CPU\nmpirun_config:\n  mpirun_ccl: 0\n' "mpirun_ccl"
out=$("$ACC" launch --config_file "$T/missing.yaml" true 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -qF "missing.yaml" || fail "missing file: $out"
# num_processes: -1 is fine when the flag gives the number
"$ACC" launch --config_file "$T/neg.yaml" --num_processes 1 true || fail "--num_processes should override -1"

# 8. -h lists every option with its default, the config file among them
help=$("$ACC" launch -h)
for opt in --config_file --num_processes --mixed_precision --mpirun_hostfile --mpirun_ccl --main_process_port; do
  echo "$help" | grep -q -- "$opt.*(default: " || fail "-h does not list $opt with its default"
done

# 9. `accelerate env --config_file` on 1, 2 and 4 processes
for n in 1 2 4; do
  printf 'distributed_type: MULTI_CPU\nnum_processes: %s\nuse_cpu: true\n' $n >"$T/env$n.yaml"
  "$ACC" env --config_file "$T/env$n.yaml" | grep -qx "	- num_processes: $n" ||
    fail "accelerate env does not show num_processes: $n"
done

if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
