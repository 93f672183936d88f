#!/bin/sh
# A fully static program (-static) under mpirun with the MPI backend (cluster trial F7): loading
# the MPI module into it crashed (a second libc); now every rank fails with a clear message.
# Skipped (77) when a static program cannot be linked here or mpirun / the module is missing.
# Usage: static_mpi.sh <cc> <source dir> <build dir> <scratch dir>
cc=$1 src=$2 build=$3 T=$4
rm -rf "$T" && mkdir -p "$T" || exit 1
command -v mpirun > /dev/null || { echo "SKIP: no mpirun"; exit 77; }
[ -f "$build/libaccelerate-mpi-openmpi.so" ] || { echo "SKIP: no Open MPI module in $build"; exit 77; }
"$cc" -static -O1 -I"$src/include" "$src/tests/rdzv/pidns_probe.c" "$build/libaccelerate.a" -ljansson -lm -lrt -ldl \
  -lpthread -o "$T/static_probe" > "$T/cc.log" 2>&1 || { echo "SKIP: cannot link a -static program here"; tail -3 "$T/cc.log"; exit 77; }
root=""
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
ACCELERATE_MODULE_DIR=$build ACCELERATE_BACKEND=mpi timeout 120 mpirun $root --oversubscribe -x ACCELERATE_BACKEND \
  -x ACCELERATE_MODULE_DIR -n 2 "$T/static_probe" > "$T/out" 2>&1
rc=$?
fail=0
grep -q "Segmentation fault\|signal 11" "$T/out" && { echo "FAIL: the static program crashed"; fail=1; }
[ "$(grep -c 'linked fully statically (-static)' "$T/out")" -ge 1 ] || { echo "FAIL: no clear message (rc $rc)"; fail=1; }
[ $fail -eq 0 ] || tail -20 "$T/out"
[ $fail -eq 0 ] && echo "static mpi: refused with a message"
exit $fail
