#!/bin/sh
# scripts/deps.sh waits (bounded, with a message) while another apt-get holds the dpkg lock (new
# user 7): a stand-in apt-get fails with apt's lock message twice, then succeeds; a stand-in
# dpkg-query says one package is missing and `id -u` says root. deps.sh must succeed, print the
# waiting message, and have called apt-get four times (update twice refused, then update and
# install). With a limit of 0 s it gives up with a message instead.
# Usage: deps_lock.sh <source dir> <scratch dir>
src=$1 T=$2
rm -rf "$T" && mkdir -p "$T/bin" || exit 1
cat > "$T/bin/apt-get" <<'A'
#!/bin/sh
n=$(cat "$FAKE_DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$FAKE_DIR/count"
echo "$*" >> "$FAKE_DIR/calls"
if [ $n -le 2 ]; then echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 8163 (apt-get)" >&2; exit 100; fi
exit 0
A
printf '#!/bin/sh\nexit 1\n' > "$T/bin/dpkg-query"
printf '#!/bin/sh\necho 0\n' > "$T/bin/id"
chmod +x "$T/bin/"*
fail=0
FAKE_DIR=$T ACC_APT_LOG=$T/apt.log ACC_APT_LOCK_RETRY_S=0.1 PATH="$T/bin:$PATH" bash "$src/scripts/deps.sh" > "$T/out" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: deps.sh exited $rc while the lock was held twice"; cat "$T/out"; fail=1; }
grep -q "holds the package lock; waiting up to" "$T/out" || { echo "FAIL: no waiting message"; cat "$T/out"; fail=1; }
[ "$(cat "$T/count")" = 4 ] || { echo "FAIL: apt-get called $(cat "$T/count") times (expected 4)"; fail=1; }
rm -f "$T/count"
FAKE_DIR=$T ACC_APT_LOG=$T/apt.log ACC_APT_LOCK_TIMEOUT=0 PATH="$T/bin:$PATH" bash "$src/scripts/deps.sh" > "$T/out2" 2>&1 &&
  { echo "FAIL: deps.sh succeeded with a limit of 0 s"; fail=1; }
[ $fail -eq 0 ] && echo "deps lock: all checks passed"
exit $fail
