#!/bin/sh
# accelerate env says what it found about GPUs on one line, or lists them; it never fails or
# crashes because there is no GPU, driver or module.
#   test_cli_env.sh <accelerate> <ON|OFF: the CUDA module was built>
out=$("$1" env 2>&1) || { echo "FAIL: accelerate env exited with $?"; echo "$out"; exit 1; }
line=$(echo "$out" | grep '^- CUDA:') || { echo "FAIL: no '- CUDA:' line:"; echo "$out"; exit 1; }
echo "$line"
case "$2" in
  ON|on|1|TRUE|true)
    # built: either GPUs are listed, or the reason the module sees none
    echo "$out" | grep -qE '^- CUDA: (module .*: )?(no CUDA driver|no CUDA GPU|the CUDA driver is too old|[0-9]+ GPU)' ||
      { echo "FAIL: unexpected CUDA line"; exit 1; } ;;
  *)
    echo "$line" | grep -q 'built without CUDA' || { echo "FAIL: expected 'built without CUDA'"; exit 1; } ;;
esac
# pointing at a file that is not a module: a clear message, still exit 0
out=$(ACCELERATE_CUDA_MODULE=/nonexistent/libaccelerate-cuda.so "$1" env 2>&1) ||
  { echo "FAIL: accelerate env with a bad module path exited with $?"; exit 1; }
echo "$out" | grep -q '^- CUDA: .*cannot load the CUDA module.*/nonexistent/libaccelerate-cuda.so' ||
  { echo "FAIL: bad module path not reported:"; echo "$out" | grep CUDA; exit 1; }
echo PASS
