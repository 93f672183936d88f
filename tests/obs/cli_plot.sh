#!/bin/sh
# `accelerate plot`: writes the SVG (and says so), refuses bad usage (2) and unreadable runs (1)
# with a message naming the file. Usage: cli_plot.sh ACCELERATE_CLI WORK_DIR
set -eu
cli=$1 work=$2
rm -rf "$work"
mkdir -p "$work/a" "$work/b"
i=1
while [ $i -le 20 ]; do
  echo "{\"step\":$i,\"loss\":$(awk -v i=$i 'BEGIN{print 2/i}'),\"lr\":0.01}" >> "$work/a/run.jsonl"
  echo "{\"step\":$i,\"loss\":$(awk -v i=$i 'BEGIN{print 1.5/i}'),\"lr\":0.02}" >> "$work/b/run.jsonl"
  i=$((i + 1))
done
out=$("$cli" plot "$work/a" "$work/b" -o "$work/ab.svg" --no-png)
[ "$out" = "wrote $work/ab.svg" ] || { echo "FAIL output: $out"; exit 1; }
grep -q '>a</text>' "$work/ab.svg" && grep -q '>b</text>' "$work/ab.svg" || { echo "FAIL legend"; exit 1; }
[ "$(grep -c '<polyline' "$work/ab.svg")" -eq 4 ] || { echo "FAIL expected 4 curves"; exit 1; }
"$cli" plot "$work/a" --no-png > /dev/null
[ -s "$work/a/curves.svg" ] || { echo "FAIL default output $work/a/curves.svg"; exit 1; }
# The log file itself (issue 31): plotted, the SVG next to it, labelled with the run's folder.
rm -f "$work/b/curves.svg"
out=$("$cli" plot "$work/b/run.jsonl" --no-png) || { echo "FAIL plot of run.jsonl: $out"; exit 1; }
[ "$out" = "wrote $work/b/curves.svg" ] && [ -s "$work/b/curves.svg" ] || { echo "FAIL run.jsonl output: $out"; exit 1; }
grep -q '>b</text>' "$work/b/curves.svg" || { echo "FAIL run.jsonl legend is not the run's folder"; exit 1; }
cp "$work/a/run.jsonl" "$work/other.log"
out=$(cd "$work" && "$cli" plot other.log --no-png) || { echo "FAIL plot of other.log: $out"; exit 1; }
[ "$out" = "wrote curves.svg" ] && [ -s "$work/curves.svg" ] || { echo "FAIL other.log output: $out"; exit 1; }
set +e
"$cli" plot > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL no run: exit $rc, expected 2"; exit 1; }
"$cli" plot --bogus "$work/a" > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL unknown option: exit $rc, expected 2"; exit 1; }
msg=$("$cli" plot "$work/missing" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$msg" | grep -q "$work/missing/run.jsonl" || { echo "FAIL missing run: $rc $msg"; exit 1; }
echo "cli plot: all checks passed"
