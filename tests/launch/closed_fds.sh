#!/bin/sh
# `accelerate launch` started with stdout closed (red-team 3, N8): the ranks' descriptor 1 must be
# /dev/null, not the launcher's status board (a memfd) or any other file the launcher created.
# Usage: closed_fds.sh <accelerate cli> <scratch dir>
cli=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" || exit 1
"$cli" launch --num_processes 2 sh -c 'x=$(readlink /proc/$$/fd/1); echo "$x" > "$0/fd1.$RANK"; echo "hello from rank $RANK"' "$dir" \
  >&- 2>"$dir/err"
rc=$?
fail=0
[ $rc -eq 0 ] || { echo "FAIL: launch exited $rc"; cat "$dir/err"; fail=1; }
for r in 0 1; do
  got=$(cat "$dir/fd1.$r" 2>/dev/null)
  [ "$got" = /dev/null ] || { echo "FAIL: rank $r's stdout is '$got' (expected /dev/null)"; fail=1; }
done
[ $fail -eq 0 ] && echo "closed fds: the ranks' stdout is /dev/null"
exit $fail
