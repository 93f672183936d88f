#!/bin/sh
# `accelerate env` (issue 31, ecosystem-4 D7, newuser-4 findings 1 and 13): the Backends line
# names the gloo module (with its path when it is built) and the hierarchical backend; the
# executable's line no longer says "bash location".
# Usage: test_env_backends.sh ACCELERATE_CLI [GLOO_MODULE_PATH]
ACC=$1 GLOO=${2:-}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
out=$(env -u ACCELERATE_MODULE_DIR "$ACC" env) || fail "accelerate env exited non-zero"
line=$(printf '%s\n' "$out" | grep '^- Backends: ')
printf '%s\n' "$out" | grep -q "bash location" && fail "'bash location' is still printed"
printf '%s\n' "$out" | grep -q '^- `accelerate` executable: /' || fail "no executable line: $out"
if [ -n "$GLOO" ]; then
  case "$line" in
    *"gloo: yes ($GLOO)"*"hierarchical (shm + gloo across machines): yes"*) ;;
    *) fail "the Backends line does not name the gloo module $GLOO and the hierarchical backend: $line" ;;
  esac
fi
# without the module (an empty module folder): said, and why it matters
empty=$(mktemp -d)
line=$(ACCELERATE_MODULE_DIR=$empty "$ACC" env | grep '^- Backends: ')
rmdir "$empty"
case "$line" in
  *"gloo: no (module not installed"*"hierarchical (shm + gloo across machines): no (needs the gloo module)"*) ;;
  *) fail "without the module: $line" ;;
esac
if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
