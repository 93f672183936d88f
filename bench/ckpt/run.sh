#!/bin/sh
# save_state / load_state of a 100 M-parameter model + AdamW (1.2 GB) against dd writing the
# same number of bytes with conv=fsync and reading them back, in one run, best of REPS.
# Usage: bench/ckpt/run.sh [build_dir] [dir] [params]
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/acc_bench_ckpt.XXXXXX")}
params=${3:-100000000}
reps=${REPS:-3}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target acc_bench_ckpt >/dev/null
trap 'rm -rf "$dir"' EXIT
"$build/bench/ckpt/acc_bench_ckpt" "$dir" "$params" "$reps" | tee "$dir/acc.txt"
bytes=$(awk '/^params/ { print $4 }' "$dir/acc.txt")
mib=$(( (bytes + 1048575) / 1048576 ))
best() { sort -n | head -1; }
i=0; : > "$dir/w.txt"; : > "$dir/r.txt"
while [ $i -lt "$reps" ]; do
  rm -f "$dir/dd.bin"
  s=$(date +%s.%N); dd if=/dev/zero of="$dir/dd.bin" bs=1M count="$mib" conv=fsync 2>/dev/null; e=$(date +%s.%N)
  echo "$s $e" | awk '{ print $2 - $1 }' >> "$dir/w.txt"
  s=$(date +%s.%N); dd if="$dir/dd.bin" of=/dev/null bs=1M 2>/dev/null; e=$(date +%s.%N)
  echo "$s $e" | awk '{ print $2 - $1 }' >> "$dir/r.txt"
  i=$((i + 1))
done
w=$(best < "$dir/w.txt"); r=$(best < "$dir/r.txt")
ddbytes=$((mib * 1048576))
awk -v w="$w" -v r="$r" -v b="$ddbytes" '
  /^save_state/ { s = $4 } /^load_state/ { l = $4 }
  END {
    printf "dd write+fsync %.3f s %.1f MB/s\n", w, b / w / 1e6
    printf "dd read        %.3f s %.1f MB/s\n", r, b / r / 1e6
    printf "save_state / dd write: %.0f %%\n", 100 * s / (b / w / 1e6)
    printf "load_state / dd read:  %.0f %%\n", 100 * l / (b / r / 1e6)
  }' "$dir/acc.txt"
