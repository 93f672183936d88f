#!/bin/sh
# Regression for red-team 3, N4: jobs of the same user in different PID namespaces share
# /dev/shm; a job started outside must not reclaim the segment of a live job inside another PID
# namespace (whose creator pid means nothing here).
#   1. inside `unshare --pid`: rank 0 of a torchrun-style job creates its segment and waits for
#      rank 1, which starts only when the file GO exists;
#   2. outside: a whole job runs through `accelerate launch` (its rank 0 reclaims stale segments);
#   3. GO is created: the inner rank 1 must still find the segment, and both inner ranks succeed.
# Skipped (77) when PID namespaces cannot be created (not root, no user namespaces).
# Usage: pidns.sh <accelerate cli> <pidns_probe> <scratch dir>
# The scratch directory must belong to this run alone (ctest passes one inside its build
# directory): it is emptied first, so two runs sharing one (say /tmp/pidns from the default and
# a sanitizer build at once) remove each other's GO, logs and result files. The earlier failure
# under ctest ("the inner job's token goes missing") did not reproduce (ctest alone, and -j3
# beside the dist and rdzv tests); a shared scratch directory is one way to get it, not a proven
# cause. On failure the runtime directory is listed to tell the next one apart.
set -u
cli=$1 probe=$2 dir=$3
k=${ACC_TEST_TIMEOUT_MULTIPLIER:-1}
rm -rf "$dir" && mkdir -p "$dir" || exit 1
if ! unshare --pid --fork --mount-proc true 2>/dev/null &&
   ! unshare --user --map-root-user --pid --fork --mount-proc true 2>/dev/null; then
  echo "SKIP: cannot create a PID namespace here (unshare --pid needs root or user namespaces)"
  exit 77
fi
ns="unshare --pid --fork --mount-proc"
unshare --pid --fork --mount-proc true 2>/dev/null || ns="unshare --user --map-root-user --pid --fork --mount-proc"
port=$((20000 + $$ % 20000))
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TORCHELASTIC_RUN_ID="pidns$$"
# generous bounds (hang guards only): on a loaded machine the outer job may take a while
export ACCELERATE_RENDEZVOUS_TIMEOUT=$((150 * k)) ACCELERATE_TIMEOUT=$((150 * k))
# the inner job: rank 1 waits (bounded) for GO
$ns sh -c "RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 '$probe' > '$dir/r0.log' 2>&1 & p0=\$!
  n=0; while [ ! -e '$dir/GO' ] && [ \$n -lt $((1500 * k)) ]; do sleep 0.1; n=\$((n + 1)); done
  RANK=1 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 '$probe' > '$dir/r1.log' 2>&1; r1=\$?
  wait \$p0; r0=\$?; echo \"\$r0 \$r1\" > '$dir/rc'" &
inner=$!
# wait (bounded) until the inner rank 0 has created its segment
n=0
while ! ls /dev/shm 2>/dev/null | grep -q "^acc-torchrun-pidns$$-"; do
  n=$((n + 1))
  if [ $n -gt $((300 * k)) ]; then echo "FAIL: the inner rank 0 never created its segment"; cat "$dir/r0.log"; touch "$dir/GO"; wait $inner; exit 1; fi
  sleep 0.1
done
seg=$(ls /dev/shm | grep "^acc-torchrun-pidns$$-" | head -1)
# the outer job (other variables: its own run)
env -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u TORCHELASTIC_RUN_ID "$cli" launch --num_processes 2 "$probe" \
  > "$dir/outer.log" 2>&1
orc=$?
still=no
[ -e "/dev/shm/$seg" ] && still=yes
touch "$dir/GO"
wait $inner
fail=0
[ $orc -eq 0 ] || { echo "FAIL: the outer job failed ($orc)"; cat "$dir/outer.log"; fail=1; }
[ $still = yes ] || { echo "FAIL: the outer job deleted the live segment /dev/shm/$seg of the job in another PID namespace"; fail=1; }
[ "$(cat "$dir/rc" 2>/dev/null)" = "0 0" ] || {
  echo "FAIL: the inner job failed (rc $(cat "$dir/rc" 2>/dev/null))"; cat "$dir/r0.log" "$dir/r1.log"
  echo "runtime directory ${XDG_RUNTIME_DIR:-/tmp/accelerate-$(id -u)}:"; ls -la "${XDG_RUNTIME_DIR:-/tmp/accelerate-$(id -u)}"
  fail=1; }
# a segment of another namespace is never reclaimed from here: remove what this test left
rm -f /dev/shm/acc-torchrun-pidns$$-* 2>/dev/null
[ $fail -eq 0 ] && echo "pidns: the live segment survived, both jobs succeeded"
exit $fail
