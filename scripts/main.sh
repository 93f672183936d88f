#!/usr/bin/env bash
# Builds accelerate-c and runs the main job: the Fashion-MNIST example on 2 processes.
# Extra arguments go to the example (e.g. --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
exec build/accelerate launch --num_processes 2 build/examples/fashion_mnist/fashion_mnist "$@"
