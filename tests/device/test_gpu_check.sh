#!/bin/sh
# scripts/gpu_check.sh --dry-run on a machine without a GPU: lists every step with its time
# limit, finds NCCL in a Python wheel's layout (nvidia/nccl/{include,lib} with only
# libnccl.so.2) and makes the unversioned link in the build folder, and writes nothing outside
# the build and output folders it is given (and its own temporary folder).
# Usage: test_gpu_check.sh <source dir>
set -u
src=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; [ -f "$T/out.txt" ] && cat "$T/out.txt"; exit 1; }
site=$T/py/site-packages
mkdir -p "$site/nvidia/nccl/include" "$site/nvidia/nccl/lib"
printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n' >"$site/nvidia/nccl/include/nccl.h"
: >"$site/nvidia/nccl/lib/libnccl.so.2"
env -u NCCL_ROOT -u NCCL_HOME -u OUT GPU_CHECK_SITE_DIRS="$site" GPU_CHECK_TOOLKIT_DIRS="$T/no-toolkit" \
  TMPDIR="$T" bash "$src/scripts/gpu_check.sh" --dry-run --build "$T/build" --out "$T/out" \
  >"$T/out.txt" 2>&1 || fail "the dry run failed"
grep -q "NCCL: $T/build/nccl-wheel/lib/libnccl.so (headers $T/build/nccl-wheel/include; from the wheel)" "$T/out.txt" ||
  fail "NCCL was not found in the wheel layout"
[ "$(readlink "$T/build/nccl-wheel/lib/libnccl.so")" = "$site/nvidia/nccl/lib/libnccl.so.2" ] ||
  fail "no unversioned libnccl.so link to the wheel's library in the build folder"
[ -f "$T/build/nccl-wheel/include/nccl.h" ] || fail "the headers are not reachable through the link folder"
for s in configure build ctest_gpu llmc fsdp example_gpu example_cpu kill_resume shared_gpu bench; do
  grep -Eq "^\| $s +\| DRY +\| +- +\| +[0-9]+ \|" "$T/out.txt" || fail "step $s is not listed with its limit"
done
grep -q "^| ctest_2gpu .*SKIP.*need two" "$T/out.txt" || fail "the skipped 2-GPU tests are not named with the reason"
[ -f "$T/out/summary.txt" ] || fail "no summary.txt in the output folder"
# nothing but the build and output folders (and the temporary folder, removed) was written in $T
extra=$(find "$T" -mindepth 1 -maxdepth 1 ! -name build ! -name out ! -name py ! -name out.txt)
[ -z "$extra" ] || fail "left behind: $extra"
# the machine's data set is untouched (the old script linked it into /tmp)
[ ! -L /usr/share/datasets/fashion-mnist ] || fail "/usr/share/datasets/fashion-mnist is a link"
# without any NCCL: the run goes on and says so
env -u NCCL_ROOT -u NCCL_HOME -u OUT GPU_CHECK_SITE_DIRS="$T/none" GPU_CHECK_TOOLKIT_DIRS="$T/no-toolkit" \
  PATH=/usr/bin:/bin TMPDIR="$T" bash "$src/scripts/gpu_check.sh" --dry-run --build "$T/build2" --out "$T/out2" \
  >"$T/out.txt" 2>&1 || fail "the dry run without NCCL failed"
grep -q "^| nccl .*SKIP.*no NCCL found" "$T/out.txt" || fail "a missing NCCL is not reported"
echo PASS
