#!/usr/bin/env bash
# Every GPU check of accelerate-c in one script that fits a 15-minute GPU slot (about 6 minutes
# on a 16-core machine with one H200). On a machine with an NVIDIA GPU it:
#   1. unpacks the Debian packages brought along in .gpudeb/ (a GPU machine without a package
#      registry: see `fetch` below) into its own temporary folder;
#   2. finds NCCL wherever it is: NCCL_ROOT / NCCL_HOME, the CUDA toolkit, or a Python wheel
#      (nvidia/nccl/{include,lib} under any site-packages or dist-packages of the machine's
#      Python; the wheel has no unversioned libnccl.so, so the link is made in the build folder);
#   3. configures and builds the project with CUDA (ACC_WITH_CUDA=ON);
#   4. runs `ctest -L gpu` (every test at most 120 s; the *_2gpu tests only with two GPUs), the
#      llm.c-style trainer's tests (devtrain_gpu_llmc_*) and FSDP's (fsdp_gpu_*) as steps of
#      their own;
#   5. trains the Fashion-MNIST example on the GPU and on the CPU with the same arguments;
#   6. saves, kills (SIGKILL) and resumes the example on the GPU: the checkpoint written after the
#      resume must be byte-identical to the one of an uninterrupted run;
#   7. trains with 2 processes sharing the GPU (--gpu_sharing);
#   8. runs the GPU benchmark once (bench/gpu/run.sh, RUNS=1).
# It writes nothing outside the checkout and its own temporary folder; every log goes under one
# output folder ($OUT, else <build>/gpu-check): summary.txt (the table printed at the end),
# bench-results.md, and the logs in logs.tar.gz (the device tool brings back at most 8 files).
# What is skipped, and why, is in the table.
#
# Usage:
#   scripts/gpu_check.sh fetch            where apt-get works: downloads the packages into .gpudeb/
#   scripts/gpu_check.sh [options]        on the GPU machine
# Options:
#   --out DIR         output folder (default: $OUT, else <build>/gpu-check)
#   --build DIR       build folder (default: build-gpu)
#   --arch LIST       CMAKE_CUDA_ARCHITECTURES (default: the GPU's, from nvidia-smi, else 90)
#   --jobs N          build parallelism (default: nproc)
#   --data DIR        Fashion-MNIST folder (default: the packages' copy, else the system's)
#   --skip-bench      no benchmark
#   --suite           also `ctest -L device` and the whole suite (not in the 6-minute budget)
#   --dry-run         lists the steps with their time limits and finds NCCL (making the link
#                     folder), without configuring, building or running anything
# GPU_CHECK_SITE_DIRS (colon-separated) replaces the Python folders searched for NCCL wheels;
# GPU_CHECK_TOOLKIT_DIRS (colon-separated) replaces the toolkit folders searched (nvcc's, then
# /usr/local/cuda and /usr).
# Exit status: 0 when every step ran and passed, 1 when one failed, 2 on bad arguments.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2

PACKAGES=(pkgconf pkgconf-bin libpkgconf3 pkg-config libjansson-dev libjansson4 libyaml-dev
          libyaml-0-2 zlib1g-dev libdlpack-dev dataset-fashion-mnist)

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }

if [ "${1:-}" = "fetch" ]; then
  mkdir -p .gpudeb
  (cd .gpudeb && apt-get download "${PACKAGES[@]}") || { echo "gpu_check: apt-get download failed" >&2; exit 1; }
  du -sh .gpudeb
  echo "gpu_check: name .gpudeb in the device tool's carry list"
  exit 0
fi

out=${OUT:-}
build="build-gpu"
arch=
jobs=$(nproc 2>/dev/null || echo 4)
data=
skip_bench=0
suite=0
dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --arch) arch=${2:?--arch needs a list}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --data) data=${2:?--data needs a folder}; shift 2 ;;
    --skip-bench) skip_bench=1; shift ;;
    --suite) suite=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
case $jobs in ''|*[!0-9]*) echo "gpu_check: --jobs '$jobs' is not a number" >&2; exit 2 ;; esac
[ -n "$out" ] || out=$build/gpu-check
mkdir -p "$out" "$build" || exit 2
out=$(cd "$out" && pwd)
build=$(cd "$build" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 2
logs=$tmp/logs
mkdir -p "$logs"
trap 'rm -rf "$tmp"' EXIT
summary=$out/summary.txt
: >"$summary"
failed=0
t_start=$(date +%s)
rows=()

note() { echo "gpu_check: $*"; echo "$*" >>"$logs/notes.log"; }
row() { rows+=("$(printf '| %-14s | %-4s | %5s | %5s | %s' "$1" "$2" "$3" "$4" "$5")"); }

# step NAME LIMIT CMD...: runs CMD (at most LIMIT seconds) with its output in logs/NAME.log and
# records PASS, FAIL or SKIP (exit 77, the log's last line saying why) in the table.
step() {
  local name=$1 limit=$2
  shift 2
  if [ "$dry" = 1 ]; then
    row "$name" "DRY" "-" "$limit" "$*"
    return 0
  fi
  local t0 rc dt
  t0=$(date +%s)
  echo "== $name (at most ${limit}s): $*" >"$logs/$name.log"
  timeout -k 10 "$limit" "$@" >>"$logs/$name.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then row "$name" PASS "$dt" "$limit" ""
  elif [ $rc -eq 77 ]; then row "$name" SKIP "$dt" "$limit" "$(tail -n 1 "$logs/$name.log")"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    row "$name" FAIL "$dt" "$limit" "timed out: logs.tar.gz/$name.log"
    failed=1
  else
    row "$name" FAIL "$dt" "$limit" "exit $rc: logs.tar.gz/$name.log"
    failed=1
  fi
  echo "gpu_check: $name: $(echo "${rows[-1]}" | awk -F'|' '{print $3}' | tr -d ' ') (${dt}s)"
  return $rc
}
skip() { row "$1" SKIP "-" "-" "$2"; }

finish() {
  {
    echo "| step           | what | secs  | limit | note"
    echo "|----------------|------|-------|-------|-----"
    printf '%s\n' "${rows[@]}"
    echo "total: $(( $(date +%s) - t_start )) s; $( [ "$failed" = 0 ] && echo "no step failed" || echo "FAILED" )"
  } | tee "$summary"
  tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null || echo "gpu_check: could not pack the logs"
  exit "$failed"
}

# ---- the machine ------------------------------------------------------------------------
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi -L 2>&1 || echo "nvidia-smi: none"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2 || echo "nvcc: none"
  lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\))' || true
  cmake --version 2>&1 | head -n 1
} >"$logs/machine.log" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
note "$gpus GPU(s); output in $out"
if [ "$gpus" -eq 0 ] && [ "$dry" = 0 ]; then
  row machine FAIL - - "no GPU: nvidia-smi -L lists none (--dry-run lists the steps without one)"
  failed=1
  finish
fi

# ---- packages brought along (no registry on the GPU machine), into the temporary folder ----
prefix=$tmp/deps
if compgen -G ".gpudeb/*.deb" >/dev/null && [ "$dry" = 0 ]; then
  mkdir -p "$prefix"
  for f in .gpudeb/*.deb; do dpkg -x "$f" "$prefix" || note "cannot unpack $f"; done
  multi=$prefix/usr/lib/x86_64-linux-gnu
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$multi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$multi/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # the unpacked .pc files name /usr: point them at the prefix (only theirs, not the system's)
  find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$prefix/usr|" {} +
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$multi${LIBRARY_PATH:+:$LIBRARY_PATH}"
  note "packages: $(find .gpudeb -name '*.deb' | wc -l) unpacked into $prefix"
fi
if [ -z "$data" ]; then
  data=/usr/share/datasets/fashion-mnist
  [ -d "$prefix$data" ] && data=$prefix$data
fi

# ---- NCCL ---------------------------------------------------------------------------------
# Prints "<include dir> <library file> <where>" of the first NCCL found, or nothing.
site_dirs() {
  if [ -n "${GPU_CHECK_SITE_DIRS:-}" ]; then
    printf '%s\n' "${GPU_CHECK_SITE_DIRS//:/$'\n'}"
    return
  fi
  local py
  for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" -c 'import site, sys
for d in site.getsitepackages() + [site.getusersitepackages()] + sys.path: print(d)' 2>/dev/null
  done
  compgen -G "/usr/lib/python3*/dist-packages" ; compgen -G "/usr/local/lib/python3*/dist-packages"
  compgen -G "/usr/local/lib/python3*/site-packages"
}
find_nccl() {
  local d lib
  for d in "${NCCL_ROOT:-}" "${NCCL_HOME:-}"; do
    [ -n "$d" ] && [ -f "$d/include/nccl.h" ] || continue
    lib=$(compgen -G "$d/lib*/libnccl.so*" | sort | head -n 1)
    [ -n "$lib" ] && { echo "$d/include $lib NCCL_ROOT/NCCL_HOME"; return; }
  done
  local nvcc_dir toolkit
  nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
  toolkit=${GPU_CHECK_TOOLKIT_DIRS:-$nvcc_dir/..:/usr/local/cuda:/usr}
  for d in ${toolkit//:/ }; do
    [ -f "$d/include/nccl.h" ] || continue
    lib=$(compgen -G "$d/lib*/libnccl.so" | head -n 1)
    [ -n "$lib" ] || lib=$(compgen -G "$d/lib*/x86_64-linux-gnu/libnccl.so" | head -n 1)
    [ -n "$lib" ] && { echo "$(cd "$d/include" && pwd) $lib toolkit"; return; }
  done
  while IFS= read -r d; do
    [ -n "$d" ] && [ -f "$d/nvidia/nccl/include/nccl.h" ] || continue
    lib=$(compgen -G "$d/nvidia/nccl/lib/libnccl.so*" | sort | head -n 1)
    [ -n "$lib" ] && { echo "$d/nvidia/nccl/include $lib wheel"; return; }
  done < <(site_dirs)
}
nccl_args=()
read -r nccl_inc nccl_lib nccl_from <<<"$(find_nccl)"
if [ -z "${nccl_inc:-}" ]; then
  note "NCCL: none found (NCCL_ROOT, NCCL_HOME, the CUDA toolkit, Python wheels); the module is built without it"
  skip nccl "no NCCL found: the NCCL tests cannot run"
else
  if [ "$nccl_from" = wheel ]; then
    # the wheel has libnccl.so.2 only: link the names the build and the linker want
    link=$build/nccl-wheel
    mkdir -p "$link/lib"
    ln -sfn "$nccl_inc" "$link/include"
    ln -sf "$nccl_lib" "$link/lib/libnccl.so"
    ln -sf "$nccl_lib" "$link/lib/$(basename "$nccl_lib")"
    export LD_LIBRARY_PATH="$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nccl_inc=$link/include
    nccl_lib=$link/lib/libnccl.so
  fi
  note "NCCL: $nccl_lib (headers $nccl_inc; from the $nccl_from)"
  nccl_args=(-DACC_NCCL_INCLUDE_DIR="$nccl_inc" -DACC_NCCL_LIBRARY="$nccl_lib")
fi

# ---- build with CUDA ----------------------------------------------------------------------
if [ -z "$arch" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
  arch=${cc:-90}
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] && gen=() # keep the generator of an existing build
step configure 90 cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DACC_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" "${nccl_args[@]}" || finish
step build 300 cmake --build "$build" -j "$jobs" || finish

# ---- tests ----------------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ct=(ctest --test-dir "$build" --output-on-failure --timeout 120)
# ctest_ran ARGS...: ctest with ARGS; a skipped test, or none, fails (this check exists to run them)
# shellcheck disable=SC2317 # invoked through step
ctest_ran() {
  local t rc
  t=$(mktemp -p "$tmp")
  "${ct[@]}" "$@" 2>&1 | tee "$t"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ] && grep -qE 'Skipped|No tests were found' "$t"; then
    echo "a GPU test was skipped or none ran; this check exists to run them"
    rc=1
  fi
  return "$rc"
}
# the llm.c-style trainer (test_llmc) has a step of its own, below
llmc_re='^devtrain_gpu_llmc_'
# so do FSDP's GPU tests (tests/fsdp/test_fsdp_device.c)
fsdp_re='^fsdp_gpu_'
# shellcheck disable=SC2317 # invoked through step
gpu_tests() {
  local skip_re="$llmc_re|$fsdp_re"
  [ "$gpus" -lt 2 ] && skip_re="$skip_re|_2gpu\$" # NCCL across two GPUs: needs two
  ctest_ran -j 4 -L gpu -E "$skip_re"
}
step ctest_gpu 240 gpu_tests
# a trainer in the shape of llm.c's train_gpt2.cu (tests/devtrain/test_llmc.c): bf16 table, its own
# stream and AdamW, overlap vs no overlap bit for bit, SIGKILL after save_state and resume bit for
# bit, at 1 process and 2 sharing the GPU
step llmc 120 ctest_ran -j 2 -R "$llmc_re"
# FSDP on the GPU (FULL_SHARD, shards and unit buffers in GPU memory, the library's AdamW on them):
# 1 process and 2 sharing the GPU, each against the CPU run of the same program (1e-5); bf16 and
# fp16 tables (the cast / widen / unscale kernels, an fp16 overflow skipped) on 1 process (1e-3);
# fsdp_gpu_nccl_*: FSDP's collectives through NCCL (ACCELERATE_FSDP_NCCL=always: a one-rank
# communicator; the _2gpu one across two GPUs, skipped with one)
step fsdp 240 ctest_ran -j 2 -R "$fsdp_re"
[ "$gpus" -lt 2 ] && skip ctest_2gpu "one GPU: the *_2gpu tests (NCCL across two GPUs) need two"
if [ "$suite" = 1 ]; then
  step ctest_device 240 "${ct[@]}" -j 8 -L device
  step ctest_all 600 "${ct[@]}" -j 12 -LE gpu
else
  skip ctest_suite "the CPU suite runs in CI (--suite runs it here, beyond the 6-minute budget)"
fi

# ---- the example: GPU vs CPU, kill and resume, two processes on one GPU ------------------------
fm=$build/examples/fashion_mnist/fashion_mnist
L=$build/accelerate
ex=(--epochs 1 --quiet --seed 42 --data "$data")
step example_gpu 60 "$L" launch --num_processes 1 "$fm" "${ex[@]}" --device cuda
step example_cpu 120 "$L" launch --num_processes 1 "$fm" "${ex[@]}" --device cpu
if [ "$dry" = 0 ] && [ -f "$logs/example_gpu.log" ]; then
  grep -E 'mean training loss|test accuracy|throughput' "$logs/example_gpu.log" | sed 's/^/gpu: /' >>"$logs/notes.log"
  grep -E 'mean training loss|test accuracy|throughput' "$logs/example_cpu.log" | sed 's/^/cpu: /' >>"$logs/notes.log"
fi

# save at 150 and 300; the second run is killed (SIGKILL) once its first checkpoint exists and
# resumed: its checkpoint at step 300 must be byte-identical to the straight run's
# shellcheck disable=SC2317 # invoked through step
kill_resume() {
  local a=$tmp/resume_a b=$tmp/resume_b args=(--quiet --seed 42 --data "$data" --device cuda
        --epochs 2 --max-steps 300 --save-every 150)
  rm -rf "$a" "$b"
  "$L" launch --num_processes 1 "$fm" "${args[@]}" --output-dir "$a" || return 1
  setsid "$L" launch --num_processes 1 "$fm" "${args[@]}" --max-steps 100000 --output-dir "$b" &
  local pid=$! waited=0
  while [ ! -f "$b/checkpoints/checkpoint_0/COMPLETE" ] && [ $waited -lt 600 ]; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1; waited=$((waited + 1))
  done
  kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -f "$b/checkpoints/checkpoint_0/COMPLETE" ] || { echo "no complete checkpoint_0 before the kill"; return 1; }
  [ ! -d "$b/checkpoints/checkpoint_1" ] || { echo "killed too late (checkpoint_1 exists)"; return 1; }
  "$L" launch --num_processes 1 "$fm" "${args[@]}" --resume --output-dir "$b" || return 1
  local f n=0
  for f in "$a"/checkpoints/checkpoint_1/*; do
    case $f in *.safetensors|*.bin) ;; *) continue ;; esac
    cmp "$f" "$b/checkpoints/checkpoint_1/$(basename "$f")" || return 1
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { echo "no checkpoint files compared"; return 1; }
  echo "kill/resume: $n checkpoint files byte-identical to the uninterrupted run"
}
step kill_resume 120 kill_resume
step shared_gpu 90 "$L" launch --num_processes 2 --gpu_sharing "$fm" "${ex[@]}" --device cuda

# ---- the benchmark (one repetition) --------------------------------------------------------------
if [ "$skip_bench" = 0 ]; then
  step bench 120 env RUNS=1 sh bench/gpu/run.sh "$build" "$logs/bench"
  [ -f "$logs/bench/results.md" ] && cp "$logs/bench/results.md" "$out/bench-results.md"
else
  skip bench "--skip-bench"
fi
finish
