#!/bin/sh
# The GPT example under HYBRID_SHARD and HYBRID_SHARD_ZERO2 across two "machines" (network
# namespaces joined by a veth pair, tests/multinode/netns_lib.sh): one `accelerate launch
# --machine_rank R` of 2 processes per machine on the hierarchical backend, joined through the
# rendezvous store, against NO_SHARD on the same 2 x 2 processes (docs/fsdp.md).
#
# usage: gpt_hybrid_netns.sh ACCELERATE GPT TEST_GPT_FSDP_EQUIV
#   For float32, the bf16 table (--param-dtype bf16, bf16 autocast) and fp16 (an fp16 table, the loss
#   scaler from 2^24: the same skipped steps and final scale as NO_SHARD's): NO_SHARD, HYBRID_SHARD and
#   HYBRID_SHARD_ZERO2 train the example 50 steps (accumulation 2, clipping, weight decay on the
#   matrices); the HYBRID runs' validation losses are within 2e-4 of NO_SHARD's at every evaluation
#   and their parameters at step 50 (FULL_STATE_DICT, written by process 0) within 1e-5 of the
#   largest parameter (test_gpt_fsdp_equiv compare).
# Exit 77 (skip) only when the namespaces cannot be created (needs root or CAP_NET_ADMIN).
set -u
ACC=$1
GPT=$2
CMP=$3

. "$(dirname "$0")/../multinode/netns_lib.sh"
netns_up gh

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK ACCELERATE_RUN_ID MASTER_ADDR MASTER_PORT \
  ACCELERATE_STORE_SECRET ACCELERATE_STORE_SECRET_FILE ACCELERATE_RDZV_ID FSDP_SHARDING_STRATEGY \
  FSDP_RESHARD_AFTER_FORWARD FSDP_STATE_DICT_TYPE ACCELERATE_USE_FSDP ACCELERATE_MIXED_PRECISION
export ACCELERATE_BACKEND=hierarchical
M=$(awk -v m="${ACC_TEST_TIMEOUT_MULTIPLIER:-1}" 'BEGIN { print (m < 1 ? 1 : m) }')
PORT=29500

# launch NS MACHINE_RANK OUT STRATEGY DIR -- gpt args
launch() {
  ns=$1 mr=$2 out=$3 strat=$4 dir=$5
  shift 5
  timeout $((150 * M)) ip netns exec "$ns" "$ACC" launch --num_machines 2 --machine_rank "$mr" --num_processes 4 \
    --main_process_ip $IPA --main_process_port $PORT --use_fsdp --fsdp_sharding_strategy "$strat" \
    --fsdp_state_dict_type FULL_STATE_DICT \
    "$GPT" --layers 2 --heads 3 --width 21 --context 32 --batch 4 --grad-accum 2 --max-steps 50 --warmup 5 \
    --lr 3e-3 --val-windows 32 --eval-every 10 --sample-bytes 0 --log-every 10 --prefetch 0 --seed 7 \
    --save-every 50 --output-dir "$dir" "$@" >"$out" 2>&1
}
# run TAG STRATEGY -- gpt args: machine 1 in the background, machine 0 here
run() {
  tag=$1 strat=$2
  shift 2
  launch "$NSB" 1 "$TMP/$tag.1" "$strat" "$TMP/$tag" "$@" &
  j1=$!
  launch "$NSA" 0 "$TMP/$tag.0" "$strat" "$TMP/$tag" "$@"
  rc0=$?
  wait $j1
  rc1=$?
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    echo "--- $tag, machine 0:"; tail -20 "$TMP/$tag.0"; echo "--- $tag, machine 1:"; tail -20 "$TMP/$tag.1"
    fail "$tag ($strat) on 2 machines x 2: the launchers exited with $rc0 and $rc1"
  fi
}
vals() { grep "validation loss" "$1" | sed 's/.*validation loss //'; }

for prec in fp32 bf16 fp16; do
  case $prec in
  bf16) set -- --mixed-precision bf16 --param-dtype bf16 ;;
  fp16) set -- --mixed-precision fp16 --init-scale 16777216 --growth-interval 8 ;; # overflows: skipped steps
  *) set -- --mixed-precision no ;;
  esac
  run "NO_SHARD_$prec" NO_SHARD "$@"
  grep -q "fsdp: NO_SHARD, 4 units" "$TMP/NO_SHARD_$prec.0" || fail "NO_SHARD $prec: no FSDP line"
  [ "$(vals "$TMP/NO_SHARD_$prec.0" | wc -l)" -eq 6 ] || fail "NO_SHARD $prec: not 6 validation losses"
  for strat in HYBRID_SHARD HYBRID_SHARD_ZERO2; do
    tag=${strat}_$prec
    run "$tag" "$strat" "$@"
    grep -q "fsdp: $strat, 4 units" "$TMP/$tag.0" || fail "$tag: the run does not say $strat"
    # 17220 parameters, blocks of 5565 sharded over a machine's 2 processes: 8611 each
    grep -q "this process holds 8611 of 17220 parameters" "$TMP/$tag.0" || fail "$tag: not sharded over the machine's 2"
    [ $prec = fp32 ] || grep -q "parameters gathered as $prec" "$TMP/$tag.0" || fail "$tag: not a $prec table"
    if [ $prec = fp16 ]; then
      want=$(grep "^fp16: " "$TMP/NO_SHARD_$prec.0")
      got=$(grep "^fp16: " "$TMP/$tag.0")
      echo "$tag: $got (NO_SHARD: $want)"
      case $want in "fp16: 0 "*|"") fail "NO_SHARD fp16: no step skipped at a scale of 2^24: $want" ;; esac
      [ "$got" = "$want" ] || fail "$tag: skipped steps and loss scale differ from NO_SHARD's"
    fi
    vals "$TMP/$tag.0" >"$TMP/$tag.val"
    vals "$TMP/NO_SHARD_$prec.0" | paste - "$TMP/$tag.val" | awk -v t="$tag" '
      { d = $1 - $2; if (d < 0) d = -d; printf "%s: validation loss %s (NO_SHARD %s)\n", t, $2, $1
        if (d > 2e-4 || $2 == "") bad = 1 } END { exit bad }' || fail "$tag: validation losses differ from NO_SHARD's"
    "$CMP" compare "$TMP/NO_SHARD_$prec/checkpoints/checkpoint_0/fsdp/model.safetensors" \
      "$TMP/$tag/checkpoints/checkpoint_0/fsdp/model.safetensors" 1e-5 ||
      fail "$tag: parameters at step 50 differ from NO_SHARD's by more than 1e-5 of the largest"
  done
done
echo "PASS: the GPT example under HYBRID_SHARD and HYBRID_SHARD_ZERO2 on 2 machines x 2 (hierarchical backend) matches NO_SHARD, float32, the bf16 table and fp16"
