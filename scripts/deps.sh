#!/usr/bin/env bash
# Installs the Debian packages accelerate-c needs to build, test and run its example.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail

PACKAGES=(
  gcc make cmake pkg-config         # toolchain
  libjansson-dev libyaml-dev zlib1g-dev libdlpack-dev  # library dependencies
  libopenblas-dev                   # fast sgemm for the example (optional at build time)
  openmpi-bin libopenmpi-dev        # MPI backend and the Open MPI comparison benchmark
  libgloo-dev g++                   # the gloo module (CPU collectives across machines)
  dataset-fashion-mnist             # the Fashion-MNIST example's data
  jargon-text                       # the GPT example's text (the Jargon File)
  clang libclang-rt-14-dev          # libFuzzer and sanitizer runtimes
  python3 iproute2 procps           # test helpers, network namespaces, ps
  protobuf-compiler python3-crc32c  # independent readers of the TensorBoard files (tests)
  librsvg2-bin                      # rsvg-convert: PNG curves (accelerate plot) and their test
)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "accelerate-c: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "accelerate-c: run this first (needs root):" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
