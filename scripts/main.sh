#!/usr/bin/env bash
# Builds accelerate-c and runs a main job on 2 processes:
#   scripts/main.sh [args]       the Fashion-MNIST example (e.g. --epochs 5)
#   scripts/main.sh gpt [args]   the small GPT trained on the Jargon File (e.g. --max-steps 600)
# Extra arguments go to the example. Unless the Fashion-MNIST arguments choose trackers themselves
# (--log-with), that run logs to TensorBoard and JSON Lines under runs/<run name>/ and draws its
# curves there at the end (curves.svg, and curves.png when rsvg-convert is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
if [ "${1:-}" = "gpt" ]; then
  shift
  # OpenBLAS 0.3.21 does not recognize the newest Xeons and falls back to its slowest kernels:
  # name the best family this CPU supports unless the caller chose one.
  if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
  fi
  exec build/accelerate launch --num_processes 2 build/examples/gpt/gpt --mixed-precision bf16 "$@"
fi
args=("$@")
case " $* " in
  *" --log-with "*) ;;
  *) args=(--log-with "tensorboard,jsonl" "${args[@]}") ;;
esac
# The GPU when `nvidia-smi -L` lists one (one process per GPU, at most 2), else the CPU as
# before. An explicit --device among the arguments wins.
nproc_run=2
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
case " $* " in
  *" --device "*) ;;
  *)
    if [ "$gpus" -gt 0 ]; then
      nproc_run=$((gpus < 2 ? gpus : 2))
      args=(--device cuda "${args[@]}")
      echo "main.sh: $gpus GPU(s) found: training on $nproc_run GPU(s)" >&2
    fi ;;
esac
exec build/accelerate launch --num_processes "$nproc_run" build/examples/fashion_mnist/fashion_mnist "${args[@]}"
