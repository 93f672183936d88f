#!/bin/sh
# Training benchmark: samples/s of the Fashion-MNIST example at 1 and 2 processes (one thread
# each), against the same loop written without the library (bench/train_baseline.c), in one run.
# Each configuration runs RUNS times (default 5); the table shows medians.
# Usage: bench/train/run.sh [build_dir]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
runs=${RUNS:-5}
epochs=${EPOCHS:-1}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target fashion_mnist train_baseline accelerate_cli >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ex="$build/examples/fashion_mnist/fashion_mnist"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Configurations run round-robin (one run of each, RUNS times) so that drifting load on a shared
# machine hits them alike; each prints "throughput: X samples/s", "test accuracy: A" and
# "MiB peak resident" (the baseline's own format is mapped below).
one_run() {
  name=$1; shift
  "$@" > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
  sed -n 's/^throughput: \([0-9.]*\) samples.*/\1/p; s/^train samples\/s: \([0-9.]*\) .*/\1/p' "$tmp/out.txt" >> "$tmp/$name.rate"
  sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' "$tmp/out.txt" >> "$tmp/$name.acc"
  sed -n 's/.*, \([0-9.]*\) MiB peak resident.*/\1/p; s/^peak RSS: \([0-9.]*\) MiB/\1/p' "$tmp/out.txt" >> "$tmp/$name.rss"
}
L="$build/accelerate launch"
configs="baseline_no_library accelerate_1_process accelerate_2_processes accelerate_2_proc_private_grads accelerate_2_proc_prefetch2 accelerate_2_proc_bucket64k accelerate_2_proc_overlap64k accelerate_2_proc_bf16hook accelerate_2_proc_fp16hook accelerate_2_proc_powersgd"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
i=0
while [ $i -lt "$runs" ]; do
  one_run baseline_no_library "$build/bench/train_baseline" --epochs "$epochs" --lr 0.01 --normalize --quiet
  one_run accelerate_1_process $L --num_processes 1 "$ex" --epochs "$epochs" --quiet
  one_run accelerate_2_processes $L --num_processes 2 "$ex" --epochs "$epochs" --quiet
  one_run accelerate_2_proc_private_grads $L --num_processes 2 "$ex" --epochs "$epochs" --quiet --private-grads
  one_run accelerate_2_proc_prefetch2 $L --num_processes 2 "$ex" --epochs "$epochs" --quiet --prefetch 2
  one_run accelerate_2_proc_bucket64k $L --num_processes 2 "$ex" --epochs "$epochs" --quiet --bucket-kb 64
  one_run accelerate_2_proc_overlap64k $L --num_processes 2 "$ex" --epochs "$epochs" --quiet --bucket-kb 64 --overlap
  one_run accelerate_2_proc_bf16hook $L --num_processes 2 --comm_hook bf16 "$ex" --epochs "$epochs" --quiet
  one_run accelerate_2_proc_fp16hook $L --num_processes 2 --comm_hook fp16 "$ex" --epochs "$epochs" --quiet
  ACCELERATE_POWERSGD_START_ITER=0 one_run accelerate_2_proc_powersgd $L --num_processes 2 --comm_hook power_sgd "$ex" --epochs "$epochs" --quiet
  i=$((i + 1))
done

printf '# CPU: %s, %s cores; load average before / after: %s / %s\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(getconf _NPROCESSORS_ONLN)" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '# %d run(s) each, round-robin, %d epoch(s), batch 64 per process, SGD momentum 0.9 lr 0.01, medians\n' "$runs" "$epochs"
printf '%-32s %12s %10s %10s\n' config "samples/s" accuracy "RSS(MiB)"
for name in $configs; do
  printf '%-32s %12s %10s %10s\n' "$name" "$(median < "$tmp/$name.rate")" "$(median < "$tmp/$name.acc")" "$(median < "$tmp/$name.rss")"
done
b=$(median < "$tmp/baseline_no_library.rate")
one=$(median < "$tmp/accelerate_1_process.rate")
two=$(median < "$tmp/accelerate_2_processes.rate")
priv=$(median < "$tmp/accelerate_2_proc_private_grads.rate")
awk -v b="$b" -v one="$one" -v two="$two" -v priv="$priv" 'BEGIN {
  printf "# 1-process overhead vs no library: %+.1f %% per step\n", (b / one - 1) * 100
  printf "# 2 processes / 1 process: %.2fx (gradients in the model'"'"'s own memory: %.2fx)\n", two / one, priv / one
  printf "# 2 processes / peer (PyTorch 1.13 + Accelerate 0.22, 2 processes: 36,000 samples/s): %.2fx\n", two / 36000 }'
