# Sourced by the multi-machine tests (netns.sh, rdzv.sh): two "machines" as network namespaces
# joined by a veth pair. Defines skip/fail, then netns_up PREFIX makes the namespaces and sets
#   NSA NSB   the namespaces (machine 0 and machine 1)
#   IPA IPB   their addresses ($NET.1 and $NET.2, a /24 that exists only inside them)
#   NET       the subnet's first three octets (for "$NET.0/24")
#   TMP       a private temporary directory
# and a trap that kills what runs inside them and deletes them on exit. Exits 77 (skip) only when
# the namespaces cannot be created. Names and the subnet are unique per run (parallel runs,
# several worktrees); interface names stay within 15 characters.
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

netns_cleanup() {
  for ns in "$NSA" "$NSB"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$VA" 2>/dev/null
  rm -rf "$TMP"
}

netns_up() {
  command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
  ID=$(( $$ % 100000 ))$(od -An -N1 -tu1 /dev/urandom | tr -d " ")
  NET=10.$(( 100 + $$ % 100 )).$(od -An -N1 -tu1 /dev/urandom | tr -d " ")
  IPA=$NET.1
  IPB=$NET.2
  NSA=acc-$1-$ID-a
  NSB=acc-$1-$ID-b
  VA=acc$1a$ID
  VB=acc$1b$ID
  TMP=$(mktemp -d /tmp/acc-$1.XXXXXX) || fail "mktemp"
  trap netns_cleanup EXIT
  trap 'exit 130' INT TERM HUP
  if ! ip netns add "$NSA" 2>"$TMP/err"; then
    skip "cannot create a network namespace ($(cat "$TMP/err")); needs root or CAP_NET_ADMIN"
  fi
  ip netns add "$NSB" || fail "ip netns add $NSB"
  ip link add "$VA" type veth peer name "$VB" || fail "cannot create the veth pair"
  ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" || fail "cannot move the veth ends"
  ip -n "$NSA" addr add $IPA/24 dev "$VA" && ip -n "$NSB" addr add $IPB/24 dev "$VB" ||
    fail "cannot set the addresses"
  for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up || fail "lo up in $ns"; done
  ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up || fail "veth up"
}

# netns_up_hub PREFIX N: N "machines" (N >= 2) joined by a bridge in a hub namespace, for the
# tests of more than two machines. Sets NS1..NSN (machine 0 .. N-1), IP1..IPN ($NET.1 ..),
# NSH (the hub), NET and TMP, with the same cleanup trap as netns_up. Exits 77 (skip) when the
# namespaces cannot be created, fails when the bridge cannot (the kernel lacks it).
netns_hub_cleanup() {
  i=1
  while [ "$i" -le "$HUB_N" ]; do
    eval ns=\$NS$i
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    i=$((i + 1))
  done
  ip netns del "$NSH" 2>/dev/null
  rm -rf "$TMP"
}

netns_up_hub() {
  command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
  HUB_N=$2
  ID=$(( $$ % 100000 ))$(od -An -N1 -tu1 /dev/urandom | tr -d " ")
  NET=10.$(( 100 + $$ % 100 )).$(od -An -N1 -tu1 /dev/urandom | tr -d " ")
  NSH=acc-$1-$ID-hub
  TMP=$(mktemp -d /tmp/acc-$1.XXXXXX) || fail "mktemp"
  i=1
  while [ "$i" -le "$HUB_N" ]; do eval NS$i=acc-$1-$ID-m$i; eval IP$i=$NET.$i; i=$((i + 1)); done
  trap netns_hub_cleanup EXIT
  trap 'exit 130' INT TERM HUP
  if ! ip netns add "$NSH" 2>"$TMP/err"; then
    skip "cannot create a network namespace ($(cat "$TMP/err")); needs root or CAP_NET_ADMIN"
  fi
  ip -n "$NSH" link add br0 type bridge || fail "cannot create a bridge in $NSH (the kernel's bridge support)"
  ip -n "$NSH" link set br0 up || fail "br0 up"
  i=1
  while [ "$i" -le "$HUB_N" ]; do
    eval ns=\$NS$i ip=\$IP$i
    ip netns add "$ns" || fail "ip netns add $ns"
    # the pair is made inside the hub, then one end moves to the machine (names are per namespace)
    ip -n "$NSH" link add "p$i" type veth peer name eth0 netns "$ns" || fail "cannot create the veth pair of $ns"
    ip -n "$NSH" link set "p$i" master br0 && ip -n "$NSH" link set "p$i" up || fail "cannot attach p$i to br0"
    ip -n "$ns" addr add "$ip/24" dev eth0 && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up ||
      fail "cannot set up $ns"
    i=$((i + 1))
  done
}

# hub_launch TAG NP PORT program args...: one `$ACC launch` per machine of netns_up_hub (machine
# ranks HUB_N-1 .. 0, NP processes in all, the store on machine 0's PORT), each bounded by
# 240 x M seconds, output in $TMP/TAG.<machine rank>; waits for every one and sets rc0 ..
# rc<HUB_N-1> to their exit statuses. Needs ACC (the accelerate CLI) and M (the multiplier).
hub_launch() {
  tag=$1 np=$2 port=$3
  shift 3
  mr=$((HUB_N - 1))
  while [ "$mr" -ge 0 ]; do
    eval ns=\$NS$((mr + 1))
    timeout $((240 * M)) ip netns exec "$ns" "$ACC" launch --num_machines "$HUB_N" --machine_rank "$mr" \
      --num_processes "$np" --main_process_ip "$IP1" --main_process_port "$port" "$@" >"$TMP/$tag.$mr" 2>&1 &
    eval j$mr=$!
    mr=$((mr - 1))
  done
  mr=0
  while [ "$mr" -lt "$HUB_N" ]; do
    eval wait \$j$mr
    eval rc$mr=$?
    mr=$((mr + 1))
  done
}
