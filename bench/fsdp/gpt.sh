#!/bin/sh
# The GPT example under FSDP against its unsharded run, NP processes (default 2), the issue's size:
# --layers 4 --width 512 --heads 8 --context 64 --batch 4 (12,772,352 parameters, AdamW, fp32).
# Each repetition runs, interleaved: the unsharded example (DDP), NO_SHARD, FULL_SHARD and
# SHARD_GRAD_OP. Printed per run: the largest process's peak resident memory (VmHWM), the library's
# accounting (GPT_MEMORY_REPORT=1: shards, AdamW state, unit buffers) and the time per optimizer
# step, in wall time and in CPU time per process (tokens per CPU-second, which time-sharing with
# other programs changes less); at the end the medians of each configuration and their ratios to
# the first configuration's (memory) and to NO_SHARD's (step times).
# Usage: bench/fsdp/gpt.sh [build_dir] [steps] [reps]
#   MODEL="--layers 4 --width 256 --heads 4 --context 256" (the example's default size) replaces
#   the model flags; CONFIGS="NO_SHARD FULL_SHARD" runs only those. A configuration STRATEGY+noprefetch
#   runs it with --fsdp_backward_prefetch NO_PREFETCH, STRATEGY+fwd with --fsdp_forward_prefetch true
#   (the default is BACKWARD_PRE without forward prefetch), e.g.
#   CONFIGS="NO_SHARD NO_SHARD+noprefetch FULL_SHARD FULL_SHARD+noprefetch FULL_SHARD+fwd".
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${2:-8}; reps=${3:-3}
np=${NP:-2}
cmake --build "$build" -j2 --target gpt accelerate_cli >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=${MODEL:---layers 4 --width 512 --heads 8 --context 64}
configs=${CONFIGS:-unsharded NO_SHARD FULL_SHARD SHARD_GRAD_OP}
args="$model --batch 4 --grad-accum 1 --max-steps $steps --warmup 2
      --eval-every 0 --val-windows 8 --sample-bytes 0 --log-every 0 --prefetch 0 --quiet"
r=0
while [ "$r" -lt "$reps" ]; do
  for s in $configs; do
    if [ "$s" = unsharded ]; then
      flags=""
    else
      flags="--use_fsdp --fsdp_sharding_strategy ${s%%+*}"
      case "$s" in
        *+noprefetch) flags="$flags --fsdp_backward_prefetch NO_PREFETCH" ;;
        *+fwd) flags="$flags --fsdp_forward_prefetch true" ;;
      esac
    fi
    # shellcheck disable=SC2086
    GPT_MEMORY_REPORT=1 "$build/accelerate" launch --num_processes "$np" $flags "$build/examples/gpt/gpt" $args \
      >"$out/$s.$r" 2>&1 || { cat "$out/$s.$r"; exit 1; }
    hwm=$(sed -n 's/^memory: peak resident (VmHWM) \([0-9.]*\) MiB on the largest.*/\1/p' "$out/$s.$r")
    tps=$(sed -n 's/^throughput: \([0-9.]*\) tokens\/s in total.*/\1/p' "$out/$s.$r")
    tok=$(sed -n 's/.* = \([0-9]*\) tokens per step.*/\1/p' "$out/$s.$r")
    cps=$(sed -n 's/^cpu: \([0-9.]*\) tokens per CPU-second per process.*/\1/p' "$out/$s.$r")
    step=$(awk -v t="$tok" -v r="$tps" 'BEGIN { printf "%.3f", t / r }') # global tokens / (summed tokens/s)
    cpu=$(awk -v t="$tok" -v r="$cps" -v n="$np" 'BEGIN { printf "%.3f", t / n / r }') # per process
    echo "$s rep=$r peak_MiB=$hwm step_s=$step step_cpu_s=$cpu"
    echo "$s $hwm $step $cpu" >>"$out/all"
    grep '^memory: per process' "$out/$s.$r" | sed 's/^/  /'
  done
  r=$((r + 1))
done
echo "medians over $reps interleaved runs ($np processes, $steps steps each; $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)):"
for s in $configs; do
  m=$(awk -v s="$s" '$1 == s { print $2 }' "$out/all" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  t=$(awk -v s="$s" '$1 == s { print $3 }' "$out/all" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  c=$(awk -v s="$s" '$1 == s { print $4 }' "$out/all" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  echo "$s $m $t $c" >>"$out/med"
done
base=$(awk 'NR == 1 { print $1 }' "$out/med") # the memory reference: the first configuration run
bm=$(awk 'NR == 1 { print $2 }' "$out/med")
nt=$(awk '$1 == "NO_SHARD" { print $3 }' "$out/med")
nc=$(awk '$1 == "NO_SHARD" { print $4 }' "$out/med")
awk -v bm="$bm" -v nt="$nt" -v nc="$nc" -v base="$base" '{ printf "  %-13s peak %7.1f MiB (%.2fx %s)   step %.3f s (%.2fx NO_SHARD)   CPU %.3f s (%.2fx NO_SHARD)\n", $1, $2, $2 / bm, base, $3, $3 / nt, $4, $4 / nc }' "$out/med"
