#!/usr/bin/env bash
# Builds what the main jobs need and runs one on 2 processes:
#   scripts/main.sh [args]       the Fashion-MNIST example (e.g. --epochs 5)
#   scripts/main.sh gpt [args]   the small GPT trained on the Jargon File (e.g. --max-steps 600)
# Extra arguments go to the example. Unless the Fashion-MNIST arguments choose trackers themselves
# (--log-with), that run logs to TensorBoard and JSON Lines under runs/<run name>/ and draws its
# curves there at the end (curves.svg, and curves.png when rsvg-convert is installed).
# It installs the main job's packages only (scripts/deps.sh main) and builds the `main_job`
# target of the default preset: the accelerate command, the examples and the modules (gloo, MPI,
# CUDA when a toolkit is present), not the tests or benchmarks (scripts/test.sh builds those).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh main
# Configure when the build folder is new, the presets changed since, or it was configured
# without the examples or the CLI; otherwise the build step itself reconfigures when a
# CMakeLists.txt changed, and a second run stays a few seconds.
if [ ! -f build/CMakeCache.txt ] || [ CMakePresets.json -nt build/CMakeCache.txt ] ||
   ! grep -q '^ACC_BUILD_EXAMPLES:BOOL=ON$' build/CMakeCache.txt || ! grep -q '^ACC_BUILD_CLI:BOOL=ON$' build/CMakeCache.txt; then
  echo "main.sh: configuring build/ (cmake --preset default)" >&2
  cfg_log=$(mktemp)
  cmake --preset default > "$cfg_log" 2>&1 || { cat "$cfg_log" >&2; rm -f "$cfg_log"; exit 1; }
  rm -f "$cfg_log"
fi
# The build's progress without the "Built target" line of every target already up to date.
set +e +o pipefail
cmake --build --preset default --target main_job -j "$(nproc)" 2>&1 | grep -v '^\[ *[0-9]*%\] Built target '
rc=${PIPESTATUS[0]}
set -e -o pipefail
[ "$rc" -eq 0 ] || { echo "main.sh: the build failed (exit $rc)" >&2; exit "$rc"; }
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
