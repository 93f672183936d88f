#!/bin/sh
# The environment variable table of src/core/env.c against docs/environment.md, and every read of the
# environment in src/ against the table.
#   test_env_table_doc.sh <test_unit_env_table> <source dir>
# To regenerate the doc table: build/tests/unit/test_unit_env_table --markdown, and paste it between
# the env-table markers of docs/environment.md.
bin=$1
src=$2
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --markdown >"$tmp/code.md" || { echo "FAIL: $bin --markdown"; exit 1; }
sed -n '/<!-- env-table:begin -->/,/<!-- env-table:end -->/p' "$src/docs/environment.md" |
  sed '1d;$d' >"$tmp/doc.md"
if ! diff -u "$tmp/doc.md" "$tmp/code.md"; then
  echo "FAIL: the table of docs/environment.md differs from src/core/env.c (- doc, + code):"
  echo "      regenerate it with: $bin --markdown"
  fail=1
fi
# No raw getenv outside src/core/env.c.
raw=$(grep -rn 'getenv *(' "$src/src" | grep -v "^$src/src/core/env.c:")
if [ -n "$raw" ]; then
  echo "FAIL: getenv outside src/core/env.c (use acc__env_str / acc__env_int / ...):"
  echo "$raw"
  fail=1
fi
# Every literal name read through the table readers is a row of the table.
"$bin" --names >"$tmp/names"
grep -rhoE 'acc__env_(str|int|double|bool|enum) *\( *"[A-Za-z0-9_]+"' "$src/src" |
  sed -E 's/.*"([A-Za-z0-9_]+)"/\1/' | sort -u >"$tmp/read"
for n in $(cat "$tmp/read"); do
  if ! grep -qx "$n" "$tmp/names"; then
    echo "FAIL: $n is read in src/ but has no row in the table of src/core/env.c"
    fail=1
  fi
done
[ "$(wc -l <"$tmp/read")" -ge 10 ] || { echo "FAIL: found only $(wc -l <"$tmp/read") reads"; fail=1; }
[ $fail -eq 0 ] && echo PASS
exit $fail
