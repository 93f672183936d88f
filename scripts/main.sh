#!/usr/bin/env bash
# Builds accelerate-c and runs the main job: the Fashion-MNIST example on 2 processes.
# Extra arguments go to the example (e.g. --epochs 5). Unless they choose trackers themselves
# (--log-with), the run logs to TensorBoard and JSON Lines under runs/<run name>/ and draws its
# curves there at the end (curves.svg, and curves.png when rsvg-convert is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
args=("$@")
case " $* " in
  *" --log-with "*) ;;
  *) args=(--log-with tensorboard,jsonl "${args[@]}") ;;
esac
exec build/accelerate launch --num_processes 2 build/examples/fashion_mnist/fashion_mnist "${args[@]}"
