#!/usr/bin/env bash
# MPICH and Open MPI side by side: with both MPI modules built, Open MPI's mpirun and MPICH's
# mpirun.mpich each run the probe (tests/slurm/probe.c) on the module of their own MPI; with only
# the other flavor's module installed, the MPI backend asked for fails naming the mismatch (no
# abort, no rank-0-of-1 run), and the automatic choice on one machine falls back to shm.
#   mpi_flavors.sh <probe> <module dir>
set -u
probe=$1 moddir=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
T=$(mktemp -d /tmp/acc-mpiflavors.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none ASAN_OPTIONS=detect_leaks=0
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS ACCELERATE_BACKEND ACCELERATE_MPI_FLAVOR

ompi=$(command -v mpirun.openmpi) mpich=$(command -v mpirun.mpich)
have_o=0 have_m=0
[ -n "$ompi" ] && [ -e "$moddir/libaccelerate-mpi-openmpi.so" ] && have_o=1
[ -n "$mpich" ] && [ -e "$moddir/libaccelerate-mpi-mpich.so" ] && have_m=1
if [ $have_o = 0 ] || [ $have_m = 0 ]; then
  echo "SKIP: needs both mpirun.openmpi and mpirun.mpich with both modules in $moddir (scripts/deps.sh: libopenmpi-dev libmpich-dev)"
  exit 77
fi
mkdir -p "$T/only-openmpi" "$T/only-mpich"
cp "$moddir/libaccelerate-mpi-openmpi.so" "$T/only-openmpi/"
cp "$moddir/libaccelerate-mpi-mpich.so" "$T/only-mpich/"

run() { # run <name> <module dir> <env...> -- <command...>
  local name=$1 dir=$2; shift 2
  timeout 120 env ACCELERATE_MODULE_DIR="$dir" "$@" >"$T/$name.out" 2>"$T/$name.err"
  rc=$?
}
expect_lines() {
  local name=$1; shift
  local got want
  got=$(grep '^probe ' "$T/$name.out" | sort)
  want=$(printf '%s\n' "$@" | sort)
  if [ "$rc" != 0 ] || [ "$got" != "$want" ]; then
    fail "$name: status $rc"; echo "--- expected"; echo "$want"; echo "--- got"; cat "$T/$name.out" "$T/$name.err"
  else echo "ok: $name"; fi
}
expect_error() {
  local name=$1 text=$2
  if [ "$rc" = 0 ] || [ "$rc" -ge 124 ] || ! grep -qF -- "$text" "$T/$name.err" ||
     grep -q 'MPI_ABORT\|MPI_ERRORS_ARE_FATAL\|Local abort' "$T/$name.err"; then
    fail "$name: status $rc, expected a clear error naming '$text'"; cat "$T/$name.out" "$T/$name.err"
  else echo "ok: $name"; fi
}
lines() { # lines <launcher> <backend> <module>
  for r in 0 1; do
    echo "probe rank $r of 2 local $r of 2 launcher $1 backend $2 module $3 omp 1 blas 1 sum 3"
  done
}

# Both modules: each launcher gets its own, automatically and when asked for.
run ompi_auto "$moddir" "$ompi" -np 2 "$probe"
expect_lines ompi_auto "$(lines openmpi mpi libaccelerate-mpi-openmpi.so)"
run mpich_auto "$moddir" "$mpich" -np 2 "$probe"
expect_lines mpich_auto "$(lines mpich mpi libaccelerate-mpi-mpich.so)"
run mpich_asked "$moddir" ACCELERATE_BACKEND=mpi "$mpich" -np 2 "$probe"
expect_lines mpich_asked "$(lines mpich mpi libaccelerate-mpi-mpich.so)"

# Only the other flavor's module: asked for, a clear error naming both; automatic, shared memory.
run mpich_only_openmpi "$T/only-openmpi" ACCELERATE_BACKEND=mpi "$mpich" -np 2 "$probe"
expect_error mpich_only_openmpi "which only MPICH can join, but the installed MPI module is Open MPI's"
run ompi_only_mpich "$T/only-mpich" ACCELERATE_BACKEND=mpi "$ompi" -np 2 "$probe"
expect_error ompi_only_mpich "which only Open MPI can join, but the installed MPI module is MPICH's"
run mpich_only_openmpi_auto "$T/only-openmpi" "$mpich" -np 2 "$probe"
expect_lines mpich_only_openmpi_auto "$(lines mpich shm none)"
run ompi_only_mpich_auto "$T/only-mpich" "$ompi" -np 2 "$probe"
expect_lines ompi_only_mpich_auto "$(lines openmpi shm none)"

[ $fails = 0 ] && echo PASS || { echo "FAILED: $fails"; exit 1; }
