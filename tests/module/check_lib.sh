#!/bin/sh
# usage: check_lib.sh needed|exports LIBACCELERATE_SO
#   needed:  libaccelerate.so must not need libmpi (the MPI backend is a module);
#   exports: it must export only the public acc_* functions.
set -eu
mode=$1
lib=$2
case "$mode" in
  needed)
    needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    echo "NEEDED: $(echo $needed)"
    case "$needed" in *mpi*|*open-rte*|*open-pal*) echo "FAIL: $lib needs MPI"; exit 1;; esac
    ;;
  exports)
    others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^acc_' || true)
    if [ -n "$others" ]; then
      echo "FAIL: $lib exports symbols outside acc_*:"; echo "$others"; exit 1
    fi
    echo "exported: $(nm -D --defined-only "$lib" | grep -c ' acc_') acc_* symbols, nothing else"
    ;;
  *) echo "unknown mode $mode"; exit 2;;
esac
