#!/usr/bin/env bash
# Every GPU check of accelerate-c in one script, for a machine with an NVIDIA GPU:
#   1. unpacks the Debian packages brought along in .gpudeb/ (a GPU machine without a package
#      registry: see `fetch` below) into a private prefix, never into /;
#   2. builds the project with CUDA (ACC_WITH_CUDA=ON);
#   3. runs `ctest -L gpu` (the kernels and the training path on the GPU: tests/devtrain's GPU
#      tests, the *_2gpu ones only with two GPUs), `ctest -L device` (the device layer, the fake
#      device, the loader placement and staged collectives, the CUDA module with a driver), then
#      the whole suite for information;
#   4. trains the Fashion-MNIST example on the GPU (--device cuda) and on the CPU, same arguments;
#   5. runs the GPU benchmark (bench/gpu/run.sh).
# Every log goes under the output directory ($OUT, else build-gpu/gpu-check): summary.txt (one
# line per step with its status), bench-results.md, and every log in logs.tar.gz (a few files:
# the device tool brings back at most 8).
#
# Usage:
#   scripts/gpu_check.sh fetch            where apt-get works: downloads the packages into .gpudeb/
#   scripts/gpu_check.sh [options]        on the GPU machine
# Options:
#   --out DIR         output directory (default: $OUT, else <build>/gpu-check)
#   --build DIR       build directory (default: build-gpu)
#   --arch LIST       CMAKE_CUDA_ARCHITECTURES (default: native GPU via nvidia-smi, else 90)
#   --jobs N          build parallelism (default: nproc)
#   --skip-bench      no benchmark
#   --skip-suite      not the whole test suite (only -L gpu and -L device)
#   --dry-run         parse, unpack and configure/build; print the GPU steps instead of running
#                     them (what can be checked on a machine without a GPU)
# With the device tool (one command at most 10 minutes): copy .gpudeb/ into the repository, name
# it in `carry`, and run `scripts/gpu_check.sh --out $OUT`; if that is too long for one command,
# run it twice on the warm machine, first with --skip-bench --skip-suite, then again (the build
# directory is reused, only what changed is rebuilt).
# Exit status: 0 when every step passed, 1 when one failed, 2 on bad arguments.
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
skip_bench=0
skip_suite=0
dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --arch) arch=${2:?--arch needs a list}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --skip-bench) skip_bench=1; shift ;;
    --skip-suite) skip_suite=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
case $jobs in ''|*[!0-9]*) echo "gpu_check: --jobs '$jobs' is not a number" >&2; exit 2 ;; esac
[ -n "$out" ] || out=$build/gpu-check
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
summary=$out/summary.txt
: >"$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }
# step NAME CMD...: runs CMD with its output in logs/NAME.log, records PASS/FAIL/SKIP (77).
step() {
  local name=$1
  shift
  local t0 rc
  t0=$(date +%s)
  if [ "$dry" = 1 ] && [ "${GPU_STEP:-0}" = 1 ]; then
    note "DRY  $name: $*"
    return 0
  fi
  echo "== $name: $*" >"$logs/$name.log"
  "$@" >>"$logs/$name.log" 2>&1
  rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then note "PASS $name (${dt}s)"
  elif [ $rc -eq 77 ]; then note "SKIP $name (${dt}s): $(tail -n 1 "$logs/$name.log")"
  else
    note "FAIL $name (${dt}s, exit $rc): see logs.tar.gz/$name.log"
    failed=1
  fi
  return $rc
}
gpu_step() { GPU_STEP=1 step "$@"; }

# ---- the machine ------------------------------------------------------------------------
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi -L 2>&1 || echo "nvidia-smi: none"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2 || echo "nvcc: none"
  cmake --version 2>&1 | head -n 1
  gcc --version 2>&1 | head -n 1
  python3 -c 'import torch, accelerate; print("torch", torch.__version__, "cuda", torch.version.cuda, "accelerate", accelerate.__version__)' 2>&1 || true
} >"$logs/machine.log" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
note "gpu_check: $gpus GPU(s); output in $out"
if [ "$gpus" -eq 0 ] && [ "$dry" = 0 ]; then
  note "FAIL no GPU: nvidia-smi -L lists none (use --dry-run on a machine without one)"
  failed=1
fi

# ---- packages brought along (no registry on the GPU machine) -----------------------------
prefix=/tmp/gpudeps
if compgen -G ".gpudeb/*.deb" >/dev/null; then
  mkdir -p "$prefix"
  for f in .gpudeb/*.deb; do dpkg -x "$f" "$prefix" || note "WARN cannot unpack $f"; done
  multi=$prefix/usr/lib/x86_64-linux-gnu
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$multi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$multi/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # the unpacked .pc files name /usr: point them at the prefix (only theirs, not the system's)
  find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$prefix/usr|" {} +
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$multi${LIBRARY_PATH:+:$LIBRARY_PATH}"
  data=/usr/share/datasets/fashion-mnist
  if [ ! -e "$data" ] && [ -d "$prefix$data" ]; then
    mkdir -p "$(dirname "$data")" && ln -s "$prefix$data" "$data" && note "data: $data -> $prefix$data"
  fi
  note "packages: $(find .gpudeb -name '*.deb' | wc -l) unpacked into $prefix"
fi

# ---- build with CUDA ----------------------------------------------------------------------
if [ -z "$arch" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
  arch=${cc:-90}
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ -f "$build/CMakeCache.txt" ]; then gen=(); fi # keep the generator of an existing build
step configure cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DACC_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" || {
  tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null
  exit 1
}
step build cmake --build "$build" -j "$jobs" || {
  tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null
  exit 1
}

# ---- tests ----------------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ct=(ctest --test-dir "$build" --output-on-failure --timeout 900)
# the kernels on the GPU: a skip (no usable GPU) fails this check, which exists to run them
# shellcheck disable=SC2317 # invoked indirectly, through step
gpu_tests() {
  local t rc
  t=$(mktemp)
  local only=()
  # tests named *_2gpu need two GPUs (NCCL between two processes): left out on a 1-GPU machine
  if [ "$gpus" -lt 2 ]; then
    only=(-E '_2gpu$')
    echo "gpu_check: one GPU: the *_2gpu tests (NCCL across two GPUs) are left out"
  fi
  "${ct[@]}" -L gpu "${only[@]}" 2>&1 | tee "$t"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ] && grep -qE 'Skipped|No tests were found' "$t"; then
    echo "gpu_check: a GPU test was skipped or none ran; this check exists to run them"
    rc=1
  fi
  rm -f "$t"
  return "$rc"
}
gpu_step ctest_gpu gpu_tests
[ "$gpus" -lt 2 ] && note "NOTE ctest_gpu: the *_2gpu tests (NCCL across two GPUs) did not run"
gpu_step ctest_device "${ct[@]}" -L device -j 4
[ "$skip_suite" = 1 ] || gpu_step ctest_all "${ct[@]}" -j 8 -LE 'gpu'

# ---- the example on the GPU, then on the CPU with the same arguments ----------------------------
fm=$build/examples/fashion_mnist/fashion_mnist
L=$build/accelerate
ex=(--epochs 1 --quiet --seed 42)
gpu_step example_gpu "$L" launch --num_processes 1 "$fm" "${ex[@]}" --device cuda
gpu_step example_cpu "$L" launch --num_processes 1 "$fm" "${ex[@]}" --device cpu
if [ "$dry" = 0 ] && [ -f "$logs/example_gpu.log" ]; then
  grep -E 'device:|mean training loss|test accuracy|throughput' "$logs/example_gpu.log" | sed 's/^/  gpu: /' | tee -a "$summary"
  grep -E 'mean training loss|test accuracy|throughput' "$logs/example_cpu.log" | sed 's/^/  cpu: /' | tee -a "$summary"
fi

# ---- the benchmark ----------------------------------------------------------------------------
if [ "$skip_bench" = 0 ]; then
  gpu_step bench sh bench/gpu/run.sh "$build" "$logs/bench"
  [ -f "$logs/bench/results.md" ] && cp "$logs/bench/results.md" "$out/bench-results.md"
fi

tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null || note "WARN could not pack the logs"
if [ "$failed" = 0 ]; then note "gpu_check: every step passed"; else note "gpu_check: FAILED (see above)"; fi
exit "$failed"
