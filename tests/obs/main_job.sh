#!/bin/sh
# The main job's observability end to end: the Fashion-MNIST example on 2 processes through the
# launcher with --log-with tensorboard,jsonl leaves a TensorBoard file that independent readers
# accept (check_tfevents.py: python3-crc32c + protoc), a JSON Lines log with loss, accuracy, lr
# and throughput, and its curves as SVG and PNG (check_png.py).
# Usage: main_job.sh ACCELERATE_CLI EXAMPLE WORK_DIR SOURCE_DIR
set -eu
cli=$1 ex=$2 work=$3 src=$4
rm -rf "$work"
mkdir -p "$work"
"$cli" launch --num_processes 2 "$ex" --max-steps 120 --log-every 20 --log-with tensorboard,jsonl \
  --logging-dir "$work" --run-name main > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
cat "$work/out.txt"
run="$work/main"
grep -q "^curves: $run/curves.svg and $run/curves.png" "$work/out.txt"
lines=$(wc -l < "$run/run.jsonl")
[ "$lines" -eq 7 ] || { echo "FAIL run.jsonl has $lines lines, expected 6 logs + the test accuracy"; exit 1; }
for key in loss accuracy lr throughput; do
  grep -q "\"$key\":" "$run/run.jsonl" || { echo "FAIL no $key in run.jsonl"; exit 1; }
done
n=$(ls "$run" | grep -c '^events\.out\.tfevents\.') || true
[ "$n" -eq 1 ] || { echo "FAIL expected one event file in $run, found $n"; exit 1; }
/usr/bin/python3 "$src/check_tfevents.py" "$run"/events.out.tfevents.* "$src" \
  'step: 120.*tag: "loss"\s+simple_value: 0\.' 'tag: "throughput"' 'tag: "lr"\s+simple_value: 0\.01' \
  'key: "num_processes"\s+value \{\s+number_value: 2' 'tag: "_hparams_/session_end_info"'
/usr/bin/python3 "$src/check_png.py" "$run/curves.png" 920 948
echo "main job: all checks passed"
