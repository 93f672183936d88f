#!/bin/sh
# usage: no_cuda_maps.sh FASHION_MNIST
# The Fashion-MNIST example built with CUDA neither links nor loads a CUDA library when it trains
# on the CPU (its CUDA part is a dlopened module): no libcuda / libcudart / libcublas among its
# DT_NEEDED entries, none among the libraries the dynamic loader initializes during a short CPU
# run (LD_DEBUG=libs also reports dlopen), while libc is (the check can see libraries at all).
set -eu
exe=$1
if readelf -d "$exe" | grep -E 'NEEDED.*(libcuda|libcudart|libcublas)'; then
  echo "FAIL: $exe links a CUDA library"
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! LD_DEBUG=libs "$exe" --quiet --max-steps 3 >/dev/null 2>"$log"; then
  tail -20 "$log"
  echo "FAIL: the CPU run failed"
  exit 1
fi
if ! grep -q 'calling init: .*libc\.so' "$log"; then
  echo "FAIL: LD_DEBUG=libs reported no libc: the check cannot see loaded libraries"
  exit 1
fi
if grep -E 'calling init: .*(libcuda|libcudart|libcublas)' "$log"; then
  echo "FAIL: a CPU run loaded a CUDA library"
  exit 1
fi
echo "PASS: no CUDA library linked or loaded by a CPU run"
