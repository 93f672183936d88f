#!/usr/bin/env bash
# Builds accelerate-c and runs every test: the normal build, then the whole suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the shared-memory and threading tests
# under ThreadSanitizer. Usage: scripts/test.sh [--quick]   (--quick: normal build only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

# Open MPI refuses to start as root unless told it is fine (containers, CI).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
jobs=$(nproc)

run_preset() {
  local preset=$1
  echo "==> [$preset] configure and build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "==> [$preset] tests"
  ctest --preset "$preset" -j "$jobs"
}

run_preset default
if [ "${1:-}" != "--quick" ]; then
  run_preset asan
  run_preset tsan
fi
echo "==> all test runs passed"
