#!/bin/sh
# The GPU benchmark: one training step of the Fashion-MNIST MLP (784-256-10, AdamW, fp32, TF32 off,
# the data set preloaded on the GPU) at batch 64, 1024 and 8192, three ways:
#   accelerate-c     bench_gpu_lib (the acc_accelerator calls around the example's CUDA kernels)
#   cuda-baseline    baseline.cu (the same kernels and a hand-written AdamW, no library)
#   torch+accelerate train_torch.py (PyTorch 2.x + Accelerate 1.x), when python3 has both
# Reported: the median step time (each step ends with a stream synchronization), samples/s at that
# median, and the most device memory in use during the run beyond what was in use before it
# (cudaMemGetInfo / torch.cuda.mem_get_info, sampled after every step). Each configuration runs
# RUNS times (default 3) round-robin; the table shows the median of the runs' medians.
# Usage: bench/gpu/run.sh [build_dir] [out_dir]   (env: RUNS, STEPS, WARMUP, BATCHES)
# Needs a GPU and a build with CUDA (cmake -DACC_WITH_CUDA=ON); exits 77 without a GPU.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=${2:-$build/bench-gpu}
runs=${RUNS:-3}
steps=${STEPS:-200}
warmup=${WARMUP:-20}
batches=${BATCHES:-"64 1024 8192"}
py=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "bench/gpu: no GPU (nvidia-smi -L lists none): nothing measured" >&2
  exit 77
fi
lib=$build/bench/gpu/bench_gpu_lib
base=$build/bench/gpu/bench_gpu_baseline
for b in "$lib" "$base"; do
  [ -x "$b" ] || { echo "bench/gpu: $b is missing: build with CUDA first" >&2; exit 1; }
done
mkdir -p "$out"
# the library finds its CUDA module in the build tree
export ACCELERATE_MODULE_DIR="$build"
have_torch=0
if "$py" -c 'import torch, accelerate; assert torch.cuda.is_available()' 2>/dev/null; then
  have_torch=1
else
  echo "bench/gpu: $py lacks torch with CUDA or accelerate: the PyTorch column is skipped" >&2
fi

raw=$out/raw.txt
: >"$raw"
nvidia-smi -L >"$out/gpu.txt" 2>&1 || true
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "runs=$runs steps=$steps warmup=$warmup batches=$batches"
  [ "$have_torch" = 1 ] && "$py" -c 'import torch, accelerate; print("torch", torch.__version__, "accelerate", accelerate.__version__)'
} >"$out/meta.txt" 2>&1

args() { echo "--batch $1 --steps $steps --warmup $warmup"; }
r=1
while [ "$r" -le "$runs" ]; do
  for bs in $batches; do
    # shellcheck disable=SC2046 # word splitting of the argument list is intended
    "$base" $(args "$bs") | tee -a "$raw"
    # shellcheck disable=SC2046
    "$lib" $(args "$bs") | tee -a "$raw"
    if [ "$have_torch" = 1 ]; then
      # shellcheck disable=SC2046
      PYTHONUNBUFFERED=1 "$py" "$root/bench/gpu/train_torch.py" $(args "$bs") | tee -a "$raw"
    fi
  done
  r=$((r + 1))
done

# The table: per implementation and batch, the median over the runs of each field.
awk '
  /^RESULT / {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    k = f["impl"] SUBSEP f["batch"]
    n[k]++; ms[k, n[k]] = f["median_ms"]; sps[k, n[k]] = f["samples_per_s"]; mem[k, n[k]] = f["peak_mib"]
    keys[k] = 1
  }
  function med(arr, k, c,   i, j, t, v) {
    for (i = 1; i <= c; i++) v[i] = arr[k, i] + 0
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
  }
  END {
    print "| implementation | batch | median step (ms) | samples/s | peak device memory (MiB) |"
    print "|---|---:|---:|---:|---:|"
    for (k in keys) {
      split(k, p, SUBSEP)
      printf "| %s | %s | %.3f | %.0f | %.1f |\n", p[1], p[2], med(ms, k, n[k]), med(sps, k, n[k]), med(mem, k, n[k])
    }
  }' "$raw" | { IFS= read -r h1; IFS= read -r h2; echo "$h1"; echo "$h2"; sort -t'|' -k3,3n -k2,2; } >"$out/results.md"
cat "$out/results.md"
