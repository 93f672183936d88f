#!/bin/sh
# usage: check_lib.sh LIBACCELERATE_SO
# libaccelerate.so must not need libmpi (the MPI backend is a module) and must export only the
# public acc_* functions.
set -eu
lib=$1
fail=0
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(echo $needed)"
case "$needed" in *mpi*|*open-rte*|*open-pal*) echo "FAIL: $lib needs MPI"; fail=1;; esac
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^acc_' || true)
if [ -n "$others" ]; then
  echo "FAIL: $lib exports symbols outside acc_*:"; echo "$others"; fail=1
fi
echo "exported: $(nm -D --defined-only "$lib" | grep -c ' acc_') acc_* symbols"
exit $fail
