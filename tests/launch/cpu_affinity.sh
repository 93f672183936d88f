#!/bin/sh
# `accelerate launch --enable_cpu_affinity` (and `enable_cpu_affinity: true` in a config file)
# pins local process i to the (i mod n)-th of the n CPUs the launcher may run on, as mpirun binds
# ranks to cores; without it the ranks keep the launcher's whole mask. Each rank reports its own
# Cpus_allowed_list from /proc. Usage: cpu_affinity.sh <accelerate cli> <scratch dir>
cli=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" || exit 1
export HF_HOME="$dir/hf"
unset ACCELERATE_CPU_AFFINITY
fail=0
# the first two CPUs this test may run on (a machine with one CPU: the same one twice)
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' '\n' |
  awk -F- '{ hi = NF > 1 ? $2 : $1; for (c = $1; c <= hi; c++) print c }' | head -2)
c0=$(echo "$cpus" | sed -n 1p)
c1=$(echo "$cpus" | sed -n 2p)
[ -n "$c1" ] || c1=$c0
# run NAME MASK NP [launch args]: each rank writes dir/NAME.RANK = its Cpus_allowed_list and
# dir/NAME.env.RANK = its ACCELERATE_CPU_AFFINITY
run() {
  name=$1 mask=$2 np=$3
  shift 3
  taskset -c "$mask" "$cli" launch --num_processes "$np" "$@" sh -c \
    'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status > "$0.$RANK"; echo "${ACCELERATE_CPU_AFFINITY-unset}" > "$0.env.$RANK"' \
    "$dir/$name" 2>"$dir/$name.err" || { echo "FAIL: $name: launch exited $?: $(cat "$dir/$name.err")"; fail=1; }
}
expect() { # expect NAME RANK WANT
  got=$(cat "$dir/$1.$2" 2>/dev/null)
  [ "$got" = "$3" ] || { echo "FAIL: $1: rank $2 may run on CPUs '$got', expected '$3'"; fail=1; }
}

run bound "$c0,$c1" 2 --enable_cpu_affinity
expect bound 0 "$c0"
expect bound 1 "$c1"
[ "$(cat "$dir/bound.env.0" 2>/dev/null)" = 1 ] || { echo "FAIL: bound: ACCELERATE_CPU_AFFINITY is not 1 in rank 0"; fail=1; }

# more processes than CPUs: round-robin over the launcher's CPUs
run wrap "$c0,$c1" 4 --enable_cpu_affinity
expect wrap 0 "$c0"
expect wrap 1 "$c1"
expect wrap 2 "$c0"
expect wrap 3 "$c1"

# one CPU allowed: every rank on it
run single "$c0" 2 --enable_cpu_affinity
expect single 0 "$c0"
expect single 1 "$c0"

# not asked: the launcher's mask, unchanged
if [ "$c0" != "$c1" ]; then
  whole=$(taskset -c "$c0,$c1" sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  run free "$c0,$c1" 2
  expect free 0 "$whole"
  expect free 1 "$whole"
  [ "$(cat "$dir/free.env.0" 2>/dev/null)" = unset ] || { echo "FAIL: free: ACCELERATE_CPU_AFFINITY is set without the flag"; fail=1; }
fi

# from a config file
printf 'distributed_type: MULTI_CPU\nnum_processes: 2\nenable_cpu_affinity: true\n' > "$dir/cfg.yaml"
run cfg "$c0,$c1" 2 --config_file "$dir/cfg.yaml"
expect cfg 0 "$c0"
expect cfg 1 "$c1"

[ $fail -eq 0 ] && echo "cpu affinity: ranks pinned to CPUs $c0 and $c1 (round-robin), unpinned without the flag"
exit $fail
