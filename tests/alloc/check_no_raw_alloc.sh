#!/bin/sh
# usage: check_no_raw_alloc.sh SOURCE_DIR
# The checkpoint and config paths allocate only through the acc__ wrappers (src/core/alloc.c), so
# that the allocation-failure test reaches every allocation. Lists any raw call.
set -eu
cd "$1"
files="src/ckpt/accel_state.c src/ckpt/save_state.c src/ckpt/load_state.c src/ckpt/load_snapshot.c src/core/fs.c src/ckpt/ckpt_dir.c src/ckpt/safetensors.c src/ckpt/save_model.c src/cli/config_file.c
src/core/json_util.c src/core/options.c src/backend/module.c src/core/handle.c src/train/train_sync.c
src/train/train_optim.c src/train/train_ckpt.c src/train/train_cpu.c src/train/train_device.c src/device/devctx.c"
# A listed file that moved would make grep fail and the check pass without looking: refuse.
for f in $files; do
  [ -f "$f" ] || { echo "FAIL: $f does not exist (moved? update this list)"; exit 1; }
done
if grep -nE '(^|[^_[:alnum:]])(malloc|calloc|realloc|strdup|strndup|free)\(' $files; then
  echo "FAIL: raw allocation calls above; use acc__malloc/calloc/realloc/strdup/free"
  exit 1
fi
echo "no raw allocation calls in: $(echo $files)"
