#!/bin/sh
# The Fashion-MNIST example's device path on the strict fake device, 2 processes through the launcher:
# parameters, gradients and batches in (fake) device memory, the CPU kernels run on it inside
# acc_accelerator_host_kernel. The mean training loss and the test accuracy must be exactly those
# of the CPU run with the same arguments; the device run's trackers, profiler and checkpoints
# work without touching device memory from the host.
# Usage: test_devio_fashion.sh <accelerate> <fashion_mnist>
set -u
acc=$1
fm=$2
args="--quiet --max-steps 120 --batch 64 --seed 7"
out_cpu=$("$acc" launch --num_processes 2 "$fm" $args 2>&1) || {
  echo "FAIL: CPU run failed:"; echo "$out_cpu"; exit 1; }
# the device run also logs (JSON Lines tracker), profiles (ACCELERATE_PROFILE) and saves its
# state twice: on the strict fake device none of it may touch device memory from the host
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
out_dev=$(cd "$T" && ACCELERATE_TEST_DEVICE=fake ACCELERATE_PROFILE="$T/prof" "$acc" launch --num_processes 2 \
  "$fm" $args --device auto --log-with jsonl --log-every 20 --save-every 60 --output-dir "$T/out" 2>&1) || {
  echo "FAIL: device run failed:"; echo "$out_dev"; exit 1; }
[ -f "$T/out/checkpoints/checkpoint_1/COMPLETE" ] || {
  echo "FAIL: the device run saved no second checkpoint:"; ls -R "$T"; exit 1; }
jl=$(find "$T" -name '*.jsonl' | head -n 1)
[ -n "$jl" ] && grep -q '"loss"' "$jl" || { echo "FAIL: no JSON Lines log with the loss:"; ls -R "$T"; exit 1; }
ls "$T/prof"/trace.rank0.json >/dev/null 2>&1 || { echo "FAIL: no profile of rank 0:"; ls -R "$T"; exit 1; }
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
