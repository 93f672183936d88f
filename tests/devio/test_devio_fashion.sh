#!/bin/sh
# The Fashion-MNIST example's device path on the fake device, 2 processes through the launcher:
# parameters, gradients and batches in (fake) device memory, the CPU kernels run on it after
# acc_accelerator_synchronize. The mean training loss and the test accuracy must be exactly those
# of the CPU run with the same arguments.
# Usage: test_devio_fashion.sh <accelerate> <fashion_mnist>
set -u
acc=$1
fm=$2
args="--quiet --max-steps 120 --batch 64 --seed 7"
out_cpu=$("$acc" launch --num_processes 2 "$fm" $args 2>&1) || {
  echo "FAIL: CPU run failed:"; echo "$out_cpu"; exit 1; }
out_dev=$(ACCELERATE_TEST_DEVICE=fake "$acc" launch --num_processes 2 "$fm" $args --device auto 2>&1) || {
  echo "FAIL: device run failed:"; echo "$out_dev"; exit 1; }
pick() { printf '%s\n' "$1" | grep -E '^(epoch [0-9]+: mean training loss|test accuracy:)'; }
cpu=$(pick "$out_cpu")
dev=$(pick "$out_dev")
case $out_dev in
  *"device: fake:0 (parameters, gradients and batches in device memory)"*) ;;
  *) echo "FAIL: the device run did not train on the fake device:"; echo "$out_dev"; exit 1 ;;
esac
case $out_cpu in
  *"device: "*) echo "FAIL: the CPU run reports a device:"; echo "$out_cpu"; exit 1 ;;
esac
if [ -z "$cpu" ] || [ "$(printf '%s\n' "$cpu" | wc -l)" -ne 2 ]; then
  echo "FAIL: no loss/accuracy lines in the CPU run:"; echo "$out_cpu"; exit 1
fi
if [ "$cpu" != "$dev" ]; then
  echo "FAIL: the device run differs from the CPU run"
  echo "CPU:"; echo "$cpu"; echo "device:"; echo "$dev"; exit 1
fi
echo "$dev"
echo PASS
