#!/bin/sh
# The core library and the CLI link no CUDA, NCCL or cuBLAS library (CPU users need none of them
# to build or run); the CUDA module, when built, does link the CUDA runtime, which shows that this
# check sees such a dependency when there is one.
#   test_no_cuda_in_core.sh <libaccelerate.so> <accelerate> [<libaccelerate-cuda.so>]
fail=0
for f in "$1" "$2"; do
  needed=$(readelf -d "$f" | grep NEEDED) || { echo "FAIL: readelf -d $f"; exit 1; }
  bad=$(echo "$needed" | grep -E 'libcuda|libcudart|libnccl|libcublas')
  if [ -n "$bad" ]; then
    echo "FAIL: $f needs a CUDA library:"
    echo "$bad"
    fail=1
  fi
done
if [ -n "$3" ]; then
  if ! readelf -d "$3" | grep NEEDED | grep -q libcudart; then
    echo "FAIL: $3 (the CUDA module) does not need libcudart: is the check broken?"
    fail=1
  fi
fi
[ $fail -eq 0 ] && echo PASS
exit $fail
