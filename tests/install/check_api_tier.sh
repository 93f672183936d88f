#!/bin/sh
# usage: check_api_tier.sh BUILD_DIR TESTS_DIR MPI [MPIEXEC]
#   MPI: 0 no MPI backend, 1 the MPI module, 2 MPI linked into the library
# Installs the build into a scratch prefix, then builds tests of the source tree against the
# installed copy only (find_package, and one with pkg-config) and runs them: single-process ones
# directly, multi-process ones through the INSTALLED `accelerate launch`, the MPI one under
# mpirun with the installed MPI module.
set -eu
build=$1
tests=$2
have_mpi=$3
mpiexec=${4:-}
work=$(mktemp -d /tmp/acc-apitier-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(ls "$prefix"/lib*/libaccelerate.so | head -n1)")
launch="$prefix/bin/accelerate launch"
unset ACCELERATE_MODULE_DIR

# The installed package files ask for no MPI and no jansson for the shared library.
if grep -n 'MPI::\|JANSSON\|jansson' "$libdir/cmake/Accelerate/AccelerateTargets.cmake"; then
  echo "FAIL: the shared target's package file needs MPI or jansson"; exit 1
fi
if grep -n '^Requires' "$libdir/pkgconfig/accelerate.pc"; then
  echo "FAIL: accelerate.pc requires other pkg-config packages"; exit 1
fi
if [ "$have_mpi" = 1 ]; then
  test -f "$libdir/accelerate/libaccelerate-mpi-openmpi.so" || { echo "FAIL: Open MPI module not installed"; exit 1; }
fi

cmake -S "$(dirname "$0")/api" -B "$work/b" -DCMAKE_PREFIX_PATH="$prefix" -DACC_TESTS_DIR="$tests" \
  -DCMAKE_BUILD_TYPE=Release >"$work/cfg.log" 2>&1 || { cat "$work/cfg.log"; exit 1; }
cmake --build "$work/b" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
b=$work/b
run() { echo "== $*"; "$@" || { echo "FAIL: $*"; exit 1; }; }
run "$b/test_options"
run "$b/test_options_static"
run "$b/test_optim"
run "$b/test_sched"
run "$b/test_shard"
run $launch --num_processes 2 "$b/test_control"
run $launch --num_processes 2 "$b/test_prepare"
run $launch --num_processes 3 "$b/test_metrics"
if [ "$have_mpi" != 2 ]; then
  run $launch --num_processes 2 "$b/test_maps" shm
  run env ACCELERATE_BACKEND=mpi ACCELERATE_MPI_FLAVOR=openmpi ACCELERATE_MODULE_DIR=/nonexistent-acc-module-dir \
    $launch --num_processes 2 "$b/test_maps" missing
fi
if [ "$have_mpi" = 1 ]; then
  # the installed CLI (static library) finds the module from its own directory: <prefix>/lib/accelerate
  "$prefix/bin/accelerate" env | grep -q "MPI: yes" || {
    echo "FAIL: the installed accelerate does not find the MPI module"; "$prefix/bin/accelerate" env; exit 1; }
fi
if [ "$have_mpi" = 1 ] && [ -n "$mpiexec" ]; then
  run env ACCELERATE_BACKEND=mpi "$mpiexec" -np 2 --oversubscribe "$b/test_maps" mpi
fi

# pkg-config alone, with no other .pc file visible (no jansson.pc, no MPI).
PKG_CONFIG_LIBDIR="$libdir/pkgconfig" PKG_CONFIG_PATH="" \
  ${CC:-cc} -D_GNU_SOURCE -I"$tests" "$tests/options/test_options.c" \
  $(PKG_CONFIG_LIBDIR="$libdir/pkgconfig" PKG_CONFIG_PATH="" pkg-config --cflags --libs accelerate) \
  -Wl,-rpath,"$libdir" -o "$work/pc_options"
run "$work/pc_options"
echo "public-API tier: all passed against $prefix"
