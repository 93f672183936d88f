#!/bin/sh
# GPT benchmark: first the matrix products alone (gemm_bench: OpenBLAS sgemm against the
# example's hand-written bf16 kernels and oneDNN's bf16 products), one step of the model alone
# (step_bench: f32, bf16 on sgemm, bf16 through oneDNN), then the example (examples/gpt) at 1 and 2 processes (f32, ZeRO stage 1,
# --overlap, bf16) and the same model trained by PyTorch (bench/gpt/train_torch.py: DDP over
# gloo, started with torchrun) at 1 and 2 processes, f32 and bf16 autocast, one thread per
# process, same sizes, same optimizer, same global batch in tokens; then the loss curves of both
# over the first steps, from the same initial parameters on the same batches.
# Configurations run round-robin RUNS times (default 5) so drifting load hits them alike. The
# table shows medians and the best run (the least disturbed: other jobs only ever slow a run
# down); ratios are taken within each round (same load) and their median printed. The 1-minute
# load average is sampled every 10 s during the runs.
# BASELINE=path/to/another/gpt adds that binary at 1 and 2 processes (f32) to the round-robin:
# an earlier build of the example, measured under the same load as the current one.
# ONLY="c_2proc torch_2proc ..." runs those configurations only (names as in the table);
# CURVE_STEPS=0 skips the loss curves.
# Usage: bench/gpt/run.sh [build_dir]   (env: RUNS, STEPS, BATCH_TOKENS, CURVE_STEPS, BASELINE, ONLY)
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
runs=${RUNS:-5}
steps=${STEPS:-4}
tokens=${BATCH_TOKENS:-8192}
curve_steps=${CURVE_STEPS:-20}
py=/usr/bin/python3
# PyTorch from Debian (python3-torch), installed by scripts/deps.sh --bench when missing
$py -c 'import torch' 2>/dev/null || "$root/scripts/deps.sh" --bench ||
  { echo "bench/gpt: needs Debian's python3-torch (scripts/deps.sh --bench, as root)" >&2; exit 1; }
$py -c 'import torch' 2>/dev/null || { echo "bench/gpt: python3-torch is installed but 'import torch' fails" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target gpt accelerate_cli gemm_bench step_bench >/dev/null
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
sampler=
trap '[ -z "$sampler" ] || kill "$sampler" 2>/dev/null; rm -rf "$tmp"' EXIT
common="--max-steps $steps --warmup 2 --log-every 1"
cargs="$common --batch-tokens $tokens --eval-every 0 --val-windows 8 --sample-bytes 0"
# torch has no --batch-tokens: the same global batch through --grad-accum (batch 4 x 256 bytes)
accum() { echo $(( tokens / (1024 * $1) )); }

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

one_run() {
  name=$1; shift
  case " $configs " in *" $name "*) ;; *) return 0 ;; esac
  "$@" > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; exit 1; }
  sed -n 's/^\(\[default0\]:\)\{0,1\}throughput: \([0-9.]*\) tokens.*/\2/p' "$tmp/out.txt" >> "$tmp/$name.rate"
  sed -n 's/.*, \([0-9.]*\) MiB peak resident.*/\1/p' "$tmp/out.txt" >> "$tmp/$name.rss"
  sed -n 's/^\(\[default0\]:\)\{0,1\}cpu: \([0-9.]*\) tokens.*/\2/p' "$tmp/out.txt" >> "$tmp/$name.cpu"
  sed -n 's/^time per step: model \([0-9.]*\)%, gradient sync \([0-9.]*\)%, optimizer+clip+schedule \([0-9.]*\)%, data \([0-9.]*\)%.*/\1 \2 \3 \4/p' \
    "$tmp/out.txt" >> "$tmp/$name.share"
}

configs="c_1proc c_2proc c_2proc_private c_2proc_zero1 c_2proc_overlap c_1proc_bf16 c_2proc_bf16 torch_1proc torch_2proc torch_1proc_bf16 torch_2proc_bf16"
baseline=${BASELINE:-}
[ -z "$baseline" ] || [ -x "$baseline" ] || { echo "bench/gpt: BASELINE=$baseline is not an executable" >&2; exit 1; }
[ -z "$baseline" ] || configs="$configs base_1proc base_2proc"
[ -z "${ONLY:-}" ] || configs=$ONLY

"$build/bench/gpt/gemm_bench" 20
echo
"$build/bench/gpt/step_bench" 10
echo

(while :; do cut -d' ' -f1 /proc/loadavg; sleep 10; done) > "$tmp/load" &
sampler=$!
started=$(date -u '+%Y-%m-%d %H:%M:%S')
i=0
while [ $i -lt "$runs" ]; do
  one_run c_1proc $L --num_processes 1 "$gpt" $cargs --mixed-precision no
  one_run c_2proc $L --num_processes 2 "$gpt" $cargs --mixed-precision no
  one_run c_2proc_private $L --num_processes 2 "$gpt" $cargs --mixed-precision no --private-grads
  one_run c_2proc_zero1 $L --num_processes 2 --zero_stage 1 "$gpt" $cargs --mixed-precision no
  one_run c_2proc_overlap $L --num_processes 2 "$gpt" $cargs --mixed-precision no --overlap --bucket-kb 2048
  one_run c_1proc_bf16 $L --num_processes 1 "$gpt" $cargs --mixed-precision bf16
  one_run c_2proc_bf16 $L --num_processes 2 "$gpt" $cargs --mixed-precision bf16
  one_run torch_1proc $torchrun --nproc_per_node 1 "$root/bench/gpt/train_torch.py" $common --grad-accum "$(accum 1)"
  one_run torch_2proc $torchrun --nproc_per_node 2 "$root/bench/gpt/train_torch.py" $common --grad-accum "$(accum 2)"
  one_run torch_1proc_bf16 $torchrun --nproc_per_node 1 "$root/bench/gpt/train_torch.py" $common --grad-accum "$(accum 1)" --bf16
  one_run torch_2proc_bf16 $torchrun --nproc_per_node 2 "$root/bench/gpt/train_torch.py" $common --grad-accum "$(accum 2)" --bf16
  if [ -n "$baseline" ]; then
    one_run base_1proc $L --num_processes 1 "$baseline" $cargs --mixed-precision no
    one_run base_2proc $L --num_processes 2 "$baseline" $cargs --mixed-precision no
  fi
  i=$((i + 1))
done
kill "$sampler"
sampler=
finished=$(date -u '+%H:%M:%S')

printf '# %s-%s UTC, %d run(s) each, round-robin, %d steps of %d tokens (4 x 256 bytes per forward); OPENBLAS_CORETYPE=%s\n' \
  "$started" "$finished" "$runs" "$steps" "$tokens" "${OPENBLAS_CORETYPE:-auto}"
printf '# CPU: %s, %s CPUs online\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(getconf _NPROCESSORS_ONLN)"
sort -n "$tmp/load" | awk '{ v[NR] = $1 } END { printf "# load average (1 minute) during the runs: min %s, median %s, max %s (%d samples)\n", v[1], v[int((NR + 1) / 2)], v[NR], NR }'
printf '%-18s %9s %9s %14s %14s %9s   %s\n' config "tokens/s" "best" "tok/CPU-s/proc" "best/CPU-s" "RSS(MiB)" "share of the step: model / grad sync / optimizer / data (%)"
best() { sort -n | tail -n 1; }
for name in $configs; do
  share=$(awk '{ for (k = 1; k <= 4; k++) s[k] += $k } END { if (NR) printf "%.1f / %.1f / %.1f / %.1f", s[1] / NR, s[2] / NR, s[3] / NR, s[4] / NR }' "$tmp/$name.share" 2>/dev/null)
  printf '%-18s %9s %9s %14s %14s %9s   %s\n' "$name" "$(median < "$tmp/$name.rate")" "$(best < "$tmp/$name.rate")" \
    "$(median < "$tmp/$name.cpu")" "$(best < "$tmp/$name.cpu")" "$(median < "$tmp/$name.rss")" "$share"
done
# ratio NAME A B FILE-SUFFIX: per round A / B, then the median and the range of those ratios
ratio() {
  [ -s "$tmp/$2.$4" ] && [ -s "$tmp/$3.$4" ] || return 0
  paste "$tmp/$2.$4" "$tmp/$3.$4" | awk '{ print $1 / $2 }' | sort -n |
    awk -v what="$1" '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "#   %-48s %.2fx (rounds: %.2f-%.2f)\n", what, m, v[1], v[NR] }'
}
echo "# ratios within each round, median (range):"
ratio "C 2 processes / 1 process, tokens/s" c_2proc c_1proc rate
ratio "C 2 processes ZeRO-1 / 1 process, tokens/s" c_2proc_zero1 c_1proc rate
ratio "C 2 processes --overlap / 1 process, tokens/s" c_2proc_overlap c_1proc rate
ratio "C 2 / 1 process, per CPU-second" c_2proc c_1proc cpu
ratio "C / PyTorch f32, 2 processes, tokens/s" c_2proc torch_2proc rate
ratio "C / PyTorch f32, 2 processes, per CPU-second" c_2proc torch_2proc cpu
ratio "C / PyTorch bf16, 2 processes, tokens/s" c_2proc_bf16 torch_2proc_bf16 rate
ratio "C / PyTorch bf16, 2 processes, per CPU-second" c_2proc_bf16 torch_2proc_bf16 cpu
ratio "C / PyTorch f32, 1 process, per CPU-second" c_1proc torch_1proc cpu
ratio "PyTorch 2 processes / 1 process, tokens/s" torch_2proc torch_1proc rate
ratio "C memory per process / PyTorch's, 2 processes" c_2proc torch_2proc rss
if [ -n "$baseline" ]; then
  ratio "current / baseline, 1 process, tokens/s" c_1proc base_1proc rate
  ratio "current / baseline, 1 process, per CPU-second" c_1proc base_1proc cpu
  ratio "current / baseline, 2 processes, tokens/s" c_2proc base_2proc rate
  ratio "current / baseline, 2 processes, per CPU-second" c_2proc base_2proc cpu
fi

[ "$curve_steps" -gt 0 ] || exit 0
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
