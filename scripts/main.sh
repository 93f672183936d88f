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
  *) args=(--log-with tensorboard,jsonl "${args[@]}") ;;
esac
exec build/accelerate launch --num_processes 2 build/examples/fashion_mnist/fashion_mnist "${args[@]}"
