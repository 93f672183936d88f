#!/bin/sh
# usage: check_no_raw_alloc.sh SOURCE_DIR
# The checkpoint and config paths allocate only through the acc__ wrappers (src/alloc.c), so
# that the allocation-failure test reaches every allocation. Lists any raw call.
set -eu
cd "$1"
files="src/accel_state.c src/ckpt_dir.c src/safetensors.c src/save_model.c src/cli/config_file.c
src/json_util.c src/options.c src/module.c src/handle.c src/device/train_sync.c
src/device/train_optim.c src/device/train_ckpt.c"
if grep -nE '(^|[^_[:alnum:]])(malloc|calloc|realloc|strdup|strndup|free)\(' $files; then
  echo "FAIL: raw allocation calls above; use acc__malloc/calloc/realloc/strdup/free"
  exit 1
fi
echo "no raw allocation calls in: $(echo $files)"
