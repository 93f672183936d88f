#!/bin/sh
# Cluster-trial and new-user items of the third review, through the real CLI:
#   F8  a literal "~" in HF_HOME is the home directory (no directory named "~" is created);
#   F9  a legacy default_config.json is used when there is no default_config.yaml;
#   F10 --dynamo_backend, --downcast_bf16, --main_training_function, --gradient_accumulation_steps
#       are accepted like their config keys (dynamo_backend exported);
#   new user 8: --log_dir DIR is created when missing.
# Usage: test_cluster_items.sh <accelerate cli> <scratch dir>
ACC=$1 T=$2
rm -rf "$T" && mkdir -p "$T/home" "$T/cwd" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cd "$T/cwd" || exit 1

# F8
HOME="$T/home" HF_HOME='~/hf' "$ACC" config default > "$T/f8.out" 2>&1 || fail "config default with HF_HOME=~/hf: $(cat "$T/f8.out")"
[ -f "$T/home/hf/accelerate/default_config.yaml" ] || fail "HF_HOME=~/hf did not write \$HOME/hf/accelerate/default_config.yaml"
[ -e "$T/cwd/~" ] && fail "a directory named '~' was created"

# F9
mkdir -p "$T/hf9/accelerate"
printf '{"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "num_processes": 2, "mixed_precision": "no"}\n' \
  > "$T/hf9/accelerate/default_config.json"
out=$(HF_HOME="$T/hf9" "$ACC" launch sh -c 'echo "ws=$WORLD_SIZE"' 2>&1)
[ "$(printf '%s\n' "$out" | grep -c 'ws=2')" = 2 ] || fail "the legacy default_config.json was not used: $out"

# F10
out=$(HF_HOME="$T/none" "$ACC" launch --dynamo_backend inductor --downcast_bf16 --main_training_function main \
  --gradient_accumulation_steps 4 sh -c 'echo "db=$ACCELERATE_DYNAMO_BACKEND"' 2>&1)
printf '%s' "$out" | grep -q 'db=INDUCTOR' || fail "the Accelerate flags were not accepted: $out"

# new user 8
HF_HOME="$T/none" "$ACC" launch --num_processes 2 --log_dir "$T/logs/a" sh -c 'echo "hello $RANK"' > /dev/null 2>&1 ||
  fail "--log_dir with a missing directory failed"
grep -q 'hello 1' "$T/logs/a/rank1.stdout.log" 2>/dev/null || fail "--log_dir: rank1.stdout.log missing"

[ $fails -eq 0 ] && echo "cluster items: all checks passed"
exit $fails
