#!/bin/sh
# GPT benchmark: the example (examples/gpt) at 1, 2 and 4 processes and the same model trained by
# PyTorch (bench/gpt/train_torch.py: DDP over gloo, started with torchrun) at 1 and 2 processes,
# one thread per process, same sizes, same optimizer, same global batch in tokens; then the loss
# curves of both over the first steps, from the same initial parameters on the same batches.
# Configurations run round-robin RUNS times (default 3) so drifting load hits them alike; the
# table shows medians.
# BASELINE=path/to/another/gpt adds that binary at 1 and 2 processes (f32) to the round-robin:
# an earlier build of the example, measured under the same load as the current one.
# Usage: bench/gpt/run.sh [build_dir]   (env: RUNS, STEPS, BATCH_TOKENS, CURVE_STEPS, BASELINE)
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
runs=${RUNS:-3}
steps=${STEPS:-4}
tokens=${BATCH_TOKENS:-8192}
curve_steps=${CURVE_STEPS:-20}
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "bench/gpt: needs Debian's python3-torch (apt-get install python3-torch)" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target gpt accelerate_cli >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# as scripts/main.sh: OpenBLAS 0.3.21 does not know the newest Xeons; both programs get the same
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
gpt="$build/examples/gpt/gpt"
L="$build/accelerate launch"
torchrun="$py -m torch.distributed.run --redirects 1 --tee 1 --master_port 29533"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--max-steps $steps --warmup 2 --log-every 1"
cargs="$common --batch-tokens $tokens --eval-every 0 --val-windows 8 --sample-bytes 0"
# torch has no --batch-tokens: the same global batch through --grad-accum (batch 4 x 256 bytes)
accum() { echo $(( tokens / (1024 * $1) )); }

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

one_run() {
  name=$1; shift
  "$@" > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
  sed -n 's/^\(\[default0\]:\)\{0,1\}throughput: \([0-9.]*\) tokens.*/\2/p' "$tmp/out.txt" >> "$tmp/$name.rate"
  sed -n 's/.*, \([0-9.]*\) MiB peak resident.*/\1/p' "$tmp/out.txt" >> "$tmp/$name.rss"
  sed -n 's/^\(\[default0\]:\)\{0,1\}cpu: \([0-9.]*\) tokens.*/\2/p' "$tmp/out.txt" >> "$tmp/$name.cpu"
  sed -n 's/^time per step: model \([0-9.]*\)%, gradient sync \([0-9.]*\)%, optimizer+clip+schedule \([0-9.]*\)%, data \([0-9.]*\)%.*/\1 \2 \3 \4/p' \
    "$tmp/out.txt" >> "$tmp/$name.share"
}

configs="c_1proc c_2proc c_4proc c_2proc_overlap c_2proc_bf16 torch_1proc torch_2proc"
baseline=${BASELINE:-}
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "bench/gpt: BASELINE=$baseline is not an executable" >&2; exit 1; }
[ -z "$baseline" ] || configs="$configs base_1proc base_2proc"
i=0
while [ $i -lt "$runs" ]; do
  one_run c_1proc $L --num_processes 1 "$gpt" $cargs --mixed-precision no
  one_run c_2proc $L --num_processes 2 "$gpt" $cargs --mixed-precision no
  one_run c_4proc $L --num_processes 4 "$gpt" $cargs --mixed-precision no
  one_run c_2proc_overlap $L --num_processes 2 "$gpt" $cargs --mixed-precision no --overlap --bucket-kb 2048
  one_run c_2proc_bf16 $L --num_processes 2 "$gpt" $cargs --mixed-precision bf16
  one_run torch_1proc $torchrun --nproc_per_node 1 "$root/bench/gpt/train_torch.py" $common --grad-accum "$(accum 1)"
  one_run torch_2proc $torchrun --nproc_per_node 2 "$root/bench/gpt/train_torch.py" $common --grad-accum "$(accum 2)"
  if [ -n "$baseline" ]; then
    one_run base_1proc $L --num_processes 1 "$baseline" $cargs --mixed-precision no
    one_run base_2proc $L --num_processes 2 "$baseline" $cargs --mixed-precision no
  fi
  i=$((i + 1))
done

printf '# %d run(s) each, round-robin, %d steps of %d tokens (4 x 256 bytes per forward), medians; OPENBLAS_CORETYPE=%s\n' \
  "$runs" "$steps" "$tokens" "${OPENBLAS_CORETYPE:-auto}"
printf '%-18s %10s %16s %10s   %s\n' config "tokens/s" "tokens/CPU-s/proc" "RSS(MiB)" "share of the step: model / grad sync / optimizer / data (%)"
for name in $configs; do
  share=$(awk '{ for (k = 1; k <= 4; k++) s[k] += $k } END { if (NR) printf "%.1f / %.1f / %.1f / %.1f", s[1] / NR, s[2] / NR, s[3] / NR, s[4] / NR }' "$tmp/$name.share" 2>/dev/null)
  printf '%-18s %10s %16s %10s   %s\n' "$name" "$(median < "$tmp/$name.rate")" "$(median < "$tmp/$name.cpu")" "$(median < "$tmp/$name.rss")" "$share"
done
c1=$(median < "$tmp/c_1proc.rate"); c2=$(median < "$tmp/c_2proc.rate"); t2=$(median < "$tmp/torch_2proc.rate")
cc=$(median < "$tmp/c_2proc.cpu"); tc=$(median < "$tmp/torch_2proc.cpu")
m2=$(median < "$tmp/c_2proc.rss"); tm=$(median < "$tmp/torch_2proc.rss")
awk -v c1="$c1" -v c2="$c2" -v t2="$t2" -v cc="$cc" -v tc="$tc" -v m2="$m2" -v tm="$tm" 'BEGIN {
  printf "# 2 processes: C / PyTorch tokens/s %.2fx (per CPU-second %.2fx), memory per process %.2f of PyTorch'"'"'s\n", c2 / t2, cc / tc, m2 / tm
  printf "# C 2 processes / 1 process: %.2fx\n", c2 / c1 }'
if [ -n "$baseline" ]; then
  b1=$(median < "$tmp/base_1proc.rate"); b2=$(median < "$tmp/base_2proc.rate")
  bc1=$(median < "$tmp/base_1proc.cpu"); bc2=$(median < "$tmp/base_2proc.cpu")
  c1c=$(median < "$tmp/c_1proc.cpu")
  awk -v c1="$c1" -v c2="$c2" -v b1="$b1" -v b2="$b2" -v cc="$cc" -v c1c="$c1c" -v bc1="$bc1" -v bc2="$bc2" -v t2="$t2" -v tc="$tc" 'BEGIN {
    printf "# current / baseline: 1 process %.2fx tokens/s (%.2fx per CPU-second), 2 processes %.2fx (%.2fx)\n", c1 / b1, c1c / bc1, c2 / b2, cc / bc2
    printf "# baseline 2 processes / PyTorch 2 processes: %.2fx tokens/s (%.2fx per CPU-second); baseline 2 / 1 process: %.2fx\n", b2 / t2, bc2 / tc, b2 / b1 }'
fi

# Loss curves: the C program writes its initial parameters and window order; PyTorch starts from
# them and visits the same windows in the same order (2 processes, f32, same global batch).
$L --num_processes 2 "$gpt" --max-steps "$curve_steps" --warmup 5 --log-every 1 --batch-tokens "$tokens" \
  --eval-every 0 --val-windows 8 --sample-bytes 0 --mixed-precision no --save-init "$tmp/init.bin" > "$tmp/c_curve.txt" 2>&1 \
  || { cat "$tmp/c_curve.txt"; exit 1; }
$torchrun --nproc_per_node 2 "$root/bench/gpt/train_torch.py" --max-steps "$curve_steps" --warmup 5 --log-every 1 \
  --grad-accum "$(accum 2)" --init "$tmp/init.bin" > "$tmp/t_curve.txt" 2>&1 || { cat "$tmp/t_curve.txt"; exit 1; }
sed -n 's/^step \([0-9]*\): loss \([0-9.]*\).*/\1 \2/p' "$tmp/c_curve.txt" > "$tmp/c_loss"
sed -n 's/^\[default0\]:step \([0-9]*\): loss \([0-9.]*\).*/\1 \2/p' "$tmp/t_curve.txt" > "$tmp/t_loss"
printf '# training loss, same start and same batches, 2 processes, f32\n%-6s %10s %10s\n' step C PyTorch
join "$tmp/c_loss" "$tmp/t_loss" | awk '{ printf "%-6s %10s %10s\n", $1, $2, $3 }'
