#!/bin/sh
# `accelerate launch -h` (issue 31, newuser-4 findings 9 and 13), like Accelerate's own CLI test
# (test_duplicate_entities: no option's hyphen spelling appears in the help):
#  - every --option token in the help is spelled with underscores, none with a hyphen inside;
#  - every option is listed once;
#  - --main_process_ip shows no plain default that multi-machine runs refuse.
# Usage: test_launch_help.sh ACCELERATE_CLI
ACC=$1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
help=$("$ACC" launch -h) || fail "launch -h exited non-zero"
bad=$(printf '%s\n' "$help" | grep -o -- '--[a-z][a-z0-9_]*-[a-z0-9_-]*' | sort -u)
[ -z "$bad" ] || fail "hyphen spellings in launch -h: $(echo $bad)"
# the option column: lines starting with two spaces and an option (an alias first, maybe)
names=$(printf '%s\n' "$help" | sed -n 's/^  \(-[a-z], \)\{0,1\}\(--[a-z0-9_]*\).*/\2/p')
[ "$(printf '%s\n' "$names" | wc -l)" -ge 30 ] || fail "fewer than 30 options found in launch -h: $names"
dups=$(printf '%s\n' "$names" | sort | uniq -d)
[ -z "$dups" ] || fail "options listed twice: $dups"
for o in --num_processes --num_machines --machine_rank --main_process_ip --local_ranks_filter --rdzv_backend; do
  printf '%s\n' "$names" | grep -qx -- "$o" || fail "$o is not listed"
done
ip=$(printf '%s\n' "$help" | grep -- '^  --main_process_ip')
case "$ip" in
  *"(default: 127.0.0.1)"*) fail "--main_process_ip shows a default multi-machine runs refuse: $ip" ;;
esac
printf '%s\n' "$ip" | grep -q "required with --num_machines > 1" || fail "--main_process_ip does not say it is required: $ip"
if [ $fails -eq 0 ]; then echo "PASS"; exit 0; fi
echo "$fails failure(s)"
exit 1
