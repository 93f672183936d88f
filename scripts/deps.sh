#!/usr/bin/env bash
# Installs the Debian packages accelerate-c needs to build, test and run its example.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail

PACKAGES=(
  gcc make cmake pkg-config         # toolchain
  libjansson-dev libyaml-dev zlib1g-dev libdlpack-dev  # library dependencies
  libopenblas-dev                   # fast sgemm for the example (optional at build time)
  libdnnl-dev                       # oneDNN: the GPT example's bf16 products (optional at build time)
  openmpi-bin libopenmpi-dev        # MPI backend (Open MPI module) and the Open MPI comparison benchmark
  mpich libmpich-dev                # the MPICH module beside it (mpirun.mpich, srun --mpi=pmi2); Open MPI stays the default mpirun/mpicc
  slurm-wlm munge                   # tests/slurm starts its own munged/slurmctld/slurmd; the packages' services need no config here
  libgloo-dev g++                   # the gloo module (CPU collectives across machines)
  dataset-fashion-mnist             # the Fashion-MNIST example's data
  jargon-text                       # the GPT example's text (the Jargon File)
  clang libclang-rt-14-dev          # libFuzzer and sanitizer runtimes
  python3 iproute2 procps           # test helpers, network namespaces, ps
  protobuf-compiler python3-crc32c  # independent readers of the TensorBoard files (tests)
  librsvg2-bin                      # rsvg-convert: PNG curves (accelerate plot) and their test
)
# `scripts/deps.sh --bench`: also what the benchmarks compare against (bench/gpt/run.sh: PyTorch)
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(python3-torch)
fi

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

# apt-get, waiting (bounded, with a message) while another apt or dpkg holds its locks, as
# unattended-upgrades or cloud-init often do right after a machine boots.
apt_wait() {
  local limit=${ACC_APT_LOCK_TIMEOUT:-600} retry=${ACC_APT_LOCK_RETRY_S:-5} start=$SECONDS said=0 out rc
  while :; do
    out=$(apt-get -o DPkg::Lock::Timeout=10 "$@" 2>&1) && rc=0 || rc=$?
    if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'Could not get lock\|Unable to acquire the dpkg' &&
       [ $((SECONDS - start)) -lt "$limit" ]; then
      [ $said -eq 0 ] && echo "accelerate-c: another apt-get or dpkg holds the package lock; waiting up to ${limit} s (ACC_APT_LOCK_TIMEOUT)" >&2
      said=1
      sleep "$retry"
      continue
    fi
    [ -n "$out" ] && printf '%s\n' "$out"
    if [ $rc -ne 0 ] && [ $said -eq 1 ]; then
      echo "accelerate-c: gave up after $((SECONDS - start)) s waiting for the package lock; run scripts/deps.sh again when the other apt-get has finished" >&2
    fi
    return $rc
  done
}

echo "accelerate-c: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt_wait update -qq || exit $?
  apt_wait install -y -qq --no-install-recommends "${missing[@]}" || exit $?
else
  echo "accelerate-c: run this first (needs root):" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
