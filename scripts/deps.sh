#!/usr/bin/env bash
# Installs the Debian packages accelerate-c needs. As root it runs apt-get; otherwise it prints
# the exact command and fails.
#   scripts/deps.sh            everything: build, run the examples, run every test (scripts/test.sh, CI)
#   scripts/deps.sh main       what scripts/main.sh needs: the library, the accelerate CLI, the
#                              examples and their data, the gloo and Open MPI modules
#   scripts/deps.sh --bench    everything, and what the benchmarks compare against (PyTorch)
# A data package (the examples' data sets) counts as installed only when its files are there:
# one that dpkg lists as installed but whose files are gone is reinstalled (--reinstall).
# apt's output goes to a log file (ACC_APT_LOG, default a new ${TMPDIR:-/tmp}/accelerate-c-apt.*
# file): a few lines on the console, and the end of the log when apt-get fails.
set -euo pipefail

profile=test
for a in "$@"; do
  case "$a" in
    main | test) profile=$a ;;
    --bench) profile=bench ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scripts/deps.sh: unknown argument '$a' (expected main, test or --bench)" >&2; exit 2 ;;
  esac
done

MAIN_PACKAGES=(
  gcc g++ make cmake pkg-config     # toolchain (g++: the gloo module)
  libjansson-dev libyaml-dev zlib1g-dev libdlpack-dev  # library dependencies
  libopenblas-dev                   # fast sgemm for the example (optional at build time)
  libdnnl-dev                       # oneDNN: the GPT example's bf16 products (optional at build time)
  libgloo-dev                       # the gloo module (CPU collectives across machines)
  openmpi-bin libopenmpi-dev        # the MPI backend (Open MPI module)
  dataset-fashion-mnist             # the Fashion-MNIST example's data
  jargon-text                       # the GPT example's text (the Jargon File)
  librsvg2-bin                      # rsvg-convert: PNG curves (accelerate plot)
  python3                           # configuring the build (the test directories read it)
)
TEST_PACKAGES=(
  mpich libmpich-dev                # the MPICH module beside it (mpirun.mpich, srun --mpi=pmi2); Open MPI stays the default mpirun/mpicc
  slurm-wlm munge                   # tests/slurm starts its own munged/slurmctld/slurmd; the packages' services need no config here
  clang libclang-rt-14-dev          # libFuzzer and sanitizer runtimes
  iproute2 procps                   # test helpers, network namespaces, ps
  protobuf-compiler python3-crc32c  # independent readers of the TensorBoard files (tests)
)
BENCH_PACKAGES=(python3-torch)      # bench/gpt/run.sh: PyTorch
# Packages that only carry files (data): installed means "its files exist", not the dpkg status.
DATA_PACKAGES=(dataset-fashion-mnist jargon-text)

PACKAGES=("${MAIN_PACKAGES[@]}")
[ "$profile" = main ] || PACKAGES+=("${TEST_PACKAGES[@]}")
[ "$profile" = bench ] && PACKAGES+=("${BENCH_PACKAGES[@]}")

# One dpkg-query for all of them (a second run of main.sh should take a few seconds in all).
status=$(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
installed() { grep -qx "$1 install ok installed" <<< "$status"; }  # not a pipe: -q and pipefail

# The first file of an installed package that is missing (nothing when all are there).
missing_file() {
  local f
  while IFS= read -r f; do
    case "$f" in /*) ;; *) continue ;; esac     # skip "diverted by" and similar notes
    if [ ! -e "$f" ]; then printf '%s\n' "$f"; return; fi
  done < <(dpkg-query -L "$1" 2>/dev/null)
}

missing=() reinstall=()
for p in "${PACKAGES[@]}"; do
  if ! installed "$p"; then
    missing+=("$p")
    continue
  fi
  for d in "${DATA_PACKAGES[@]}"; do
    if [ "$p" = "$d" ]; then
      gone=$(missing_file "$p")
      if [ -n "$gone" ]; then
        echo "accelerate-c: $p is installed but its files are gone (no $gone); reinstalling it" >&2
        reinstall+=("$p")
      fi
    fi
  done
done

if [ ${#missing[@]} -eq 0 ] && [ ${#reinstall[@]} -eq 0 ]; then
  exit 0
fi

# A fresh file (mktemp: never a name someone else could have planted a link at), removed after
# a success.
log=${ACC_APT_LOG:-}
[ -n "$log" ] || log=$(mktemp -t accelerate-c-apt.XXXXXX) || exit 1

# apt-get, waiting (bounded, with a message) while another apt or dpkg holds its locks, as
# unattended-upgrades or cloud-init often do right after a machine boots. Its output goes to the
# log; on a failure the last lines are printed.
apt_wait() {
  local limit=${ACC_APT_LOCK_TIMEOUT:-600} retry=${ACC_APT_LOCK_RETRY_S:-5} start=$SECONDS said=0 rc
  while :; do
    apt-get -o DPkg::Lock::Timeout=10 -o Dpkg::Use-Pty=0 "$@" >> "$log" 2>&1 && rc=0 || rc=$?
    if [ $rc -ne 0 ] && tail -n 5 "$log" | grep -q 'Could not get lock\|Unable to acquire the dpkg' &&
       [ $((SECONDS - start)) -lt "$limit" ]; then
      [ $said -eq 0 ] && echo "accelerate-c: another apt-get or dpkg holds the package lock; waiting up to ${limit} s (ACC_APT_LOCK_TIMEOUT)" >&2
      said=1
      sleep "$retry"
      continue
    fi
    if [ $rc -ne 0 ]; then
      echo "accelerate-c: apt-get $* failed (exit $rc); the end of $log:" >&2
      tail -n 25 "$log" >&2
      [ $said -eq 1 ] && echo "accelerate-c: gave up after $((SECONDS - start)) s waiting for the package lock; run scripts/deps.sh again when the other apt-get has finished" >&2
    fi
    return $rc
  done
}

if [ "$(id -u)" -ne 0 ]; then
  echo "accelerate-c: run this first (needs root):" >&2
  [ ${#missing[@]} -eq 0 ] || echo "  sudo apt-get install -y ${missing[*]}" >&2
  [ ${#reinstall[@]} -eq 0 ] || echo "  sudo apt-get install -y --reinstall ${reinstall[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
what=()
[ ${#missing[@]} -eq 0 ] || what+=("installing ${missing[*]}")
[ ${#reinstall[@]} -eq 0 ] || what+=("reinstalling ${reinstall[*]}")
echo "accelerate-c: ${what[*]} (apt's output: $log)"
apt_wait update -qq || exit $?
if [ ${#missing[@]} -gt 0 ]; then
  apt_wait install -y -qq --no-install-recommends "${missing[@]}" || exit $?
fi
if [ ${#reinstall[@]} -gt 0 ]; then
  apt_wait install -y -qq --no-install-recommends --reinstall "${reinstall[@]}" || exit $?
  for p in "${reinstall[@]}"; do
    gone=$(missing_file "$p")
    if [ -n "$gone" ]; then
      echo "accelerate-c: $p was reinstalled but $gone is still missing (is a folder on its path a broken symbolic link?)" >&2
      exit 1
    fi
  done
fi
[ -n "${ACC_APT_LOG:-}" ] || rm -f "$log"
echo "accelerate-c: packages installed"
