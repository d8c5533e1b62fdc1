#!/usr/bin/env bash
# bench_checkpoint.sh — what a checkpoint costs the training it interrupts, written at once
# or in the background (--save-async).
#
#   bench/bench_checkpoint.sh [gpt flags…]
#
# At world 2 (DDP), a GPT of 25.4M parameters (8 layers, d_model 512; its checkpoint is
# 305 MB: weights and AdamW's two moments) trains RINGGRAD_CKPT_STEPS steps (default 30)
# three ways, interleaved over RINGGRAD_CKPT_ROUNDS rounds (default 2): no saves; a save every
# 5 steps, written by the training thread; and the same with --save-async (the state copied,
# then written by a background thread while training goes on). For each, the loop's time
# per step with its saves counted (gpt's step_s, the steps alone, plus save_s, the time
# training stood still for a save, times the saves), the best round of each. The cost of one
# save is the difference from no saves, over the saves made:
#   RESULT bench=checkpoint params=… checkpoint_mb=… saves=… none_step_s=… sync_step_s=…
#     async_step_s=… sync_save_s=… async_save_s=… sync_cost_s=… async_cost_s=… async_over_sync=…
# sync_save_s/async_save_s: the stand-still alone; *_cost_s: the whole difference per save
# (in the background the write still takes a core: on 2 vCPUs, the training's).
# RINGGRAD_CKPT_DIRECTORY=1: the checkpoints are sharded directories (--save DIR/), each rank
# writing its own pieces (under the default DDP rank 0 holds them all; pass --strategy fsdp
# for halves); checkpoint_mb counts the directory's files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gpt=$root/build/bin/gpt rgrun=$root/scripts/rgrun
steps=${RINGGRAD_CKPT_STEPS:-30} rounds=${RINGGRAD_CKPT_ROUNDS:-2} every=5
saves=$(( (steps - 1) / every ))  # at every 5th step but the last (its save is after the loop)
work=$(mktemp -d)
target=$work/run.ckpt
[ "${RINGGRAD_CKPT_DIRECTORY:-0}" = 1 ] && target=$work/run.ckpt/
trap 'rm -rf "$work"' EXIT
model=(--steps "$steps" --layers 8 --d-model 512 --heads 8 --seq 128 --batch-size 4 --eval-every 100000
       --eval-batches 1 --sample-length 0 --log-every 100000 "$@")
field() { sed -nE "s/^RESULT example=gpt .* $1=([0-9.]+).*/\1/p"; }
declare -A best=() stand=()
for ((r = 0; r < rounds; r++)); do
  for mode in none sync async; do
    extra=()
    [ "$mode" = none ] || extra=(--save "$target" --save-every "$every")
    [ "$mode" = async ] && extra+=(--save-async)
    out=$("$rgrun" -n 2 "$gpt" "${model[@]}" "${extra[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
    step=$(echo "$out" | field step_s) save=$(echo "$out" | field save_s)
    # the loop's seconds a step, saves included
    loop=$(awk -v s="$step" -v v="$save" -v n="$steps" -v k="$saves" 'BEGIN { printf "%.5f", s + v * k / n }')
    echo "round $r $mode: step_s $step, save_s $save, loop $loop s a step" >&2
    if [ -z "${best[$mode]:-}" ] || awk -v a="$loop" -v b="${best[$mode]}" 'BEGIN { exit !(a < b) }'; then
      best[$mode]=$loop stand[$mode]=$save
    fi
  done
done
params=$(echo "$out" | sed -nE 's/^gpt: ([0-9]+) parameters.*/\1/p')
size=$(du -sb "$work/run.ckpt" | cut -f1)
awk -v n="$steps" -v k="$saves" -v p="$params" -v mb="$size" -v none="${best[none]}" -v sync="${best[sync]}" \
    -v async="${best[async]}" -v ss="${stand[sync]}" -v as="${stand[async]}" 'BEGIN {
  sc = (sync - none) * n / k; ac = (async - none) * n / k
  printf "RESULT bench=checkpoint params=%d checkpoint_mb=%.1f saves=%d none_step_s=%.4f sync_step_s=%.4f " \
         "async_step_s=%.4f sync_save_s=%.4f async_save_s=%.4f sync_cost_s=%.4f async_cost_s=%.4f " \
         "async_over_sync=%.2f\n", p, mb / 1e6, k, none, sync, async, ss, as, sc, ac, (sc > 0 ? ac / sc : 0)
}'
