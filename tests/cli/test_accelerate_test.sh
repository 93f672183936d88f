#!/bin/sh
# `accelerate test --config_file` with N processes through the real launcher.
ACC=$1; N=$2
T=$(mktemp -d /tmp/acc-cli-test-XXXXXX)
trap 'rm -rf "$T"' EXIT
printf 'distributed_type: MULTI_CPU\nnum_processes: %s\nuse_cpu: true\n' "$N" > "$T/c.yaml"
out=$("$ACC" test --config_file "$T/c.yaml" 2>&1); rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "FAIL: accelerate test exited $rc"; exit 1; }
printf '%s' "$out" | grep -qF "All checks passed on $N process(es)" || { echo "FAIL: not run on $N processes"; exit 1; }
printf '%s' "$out" | grep -qF "Test is a success! You are ready for your distributed training!" || exit 1
