#!/usr/bin/env bash
# check_gpt_memory.sh — the GPT's memory tools change what a step keeps, not what it computes.
#
#   tests/check_gpt_memory.sh RGRUN GPT [ARGS...]
#
# At world 2 the small GPT of check_gpt_strategies.sh trains 20 steps, and:
#   --recompute selective and full under ddp give the plain run's losses to the last printed
#     digit (the recomputation replays the same kernels: the gradients are bit-identical),
#     and full recomputation holds less tensor memory at its peak (RESULT's peak_mb);
#   --batch-size 2 --grad-accum 2 (ddp) and --batch-size 1 --grad-accum 4 (zero2) give
#     --batch-size 4's losses within 1e-4 (the same sequences, summed in another order);
#   both at once under fsdp, fsdp with context parallelism (--dp 1 --cp 2), tensor
#     parallelism (--tp 2) and, at world 4, pipeline x tensor parallelism, within 1e-4.
# ctest runs it as example_gpt_memory_2.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RGRUN GPT [ARGS...]" >&2; exit 2; }
rgrun=$1 gpt=$2
shift 2
small=(--steps 20 --layers 2 --d-model 64 --heads 4 --seq 64 --batch-size 4 --eval-every 20
       --eval-batches 2 --log-every 10 --sample-length 0 "$@")
# losses (one run's "train val") and close (within 1e-4 of the reference)
source "$(dirname "$0")/gpt_losses.sh"

peak() {  # peak_mb of one world-2 run
  "$rgrun" -n 2 "$gpt" "${small[@]}" "$@" 2>&1 | sed -nE 's/^RESULT example=gpt .* peak_mb=([0-9.]+).*/\1/p'
}

reference=$(losses --strategy ddp)
echo "ddp                          train ${reference% *}  val ${reference#* }"
status=0
for r in selective full; do
  got=$(losses --strategy ddp --recompute "$r")
  echo "ddp, --recompute $r        train ${got% *}  val ${got#* }"
  [ "$got" = "$reference" ] || { echo "FAILED: --recompute $r changed the losses" >&2; status=1; }
done
none_mb=$(peak --strategy ddp) full_mb=$(peak --strategy ddp --recompute full)
echo "peak tensor memory: ${none_mb} MB plain, ${full_mb} MB with --recompute full"
awk -v a="$none_mb" -v b="$full_mb" 'BEGIN { exit !(b > 0 && b < a) }' ||
  { echo "FAILED: --recompute full did not lower the peak" >&2; status=1; }
close "ddp, 2 x batch 2" "$reference" "$(losses --strategy ddp --batch-size 2 --grad-accum 2)" || status=1
close "zero2, 4 x batch 1" "$reference" "$(losses --strategy zero2 --batch-size 1 --grad-accum 4)" || status=1
close "fsdp, 2 x 2, selective" "$reference" \
  "$(losses --strategy fsdp --batch-size 2 --grad-accum 2 --recompute selective)" || status=1
close "fsdp, cp 2, 2 x 4, full" "$reference" \
  "$(losses --strategy fsdp --dp 1 --cp 2 --batch-size 4 --grad-accum 2 --recompute full)" || status=1
close "ddp, tp 2, 2 x 4, full" "$reference" \
  "$(losses --dp 1 --tp 2 --batch-size 4 --grad-accum 2 --recompute full)" || status=1
close "pp 2 x tp 2, 2 x 4, selective" "$reference" \
  "$(losses -n 4 --dp 1 --pp 2 --tp 2 --batch-size 4 --micro-batches 2 --grad-accum 2 --recompute selective)" || status=1
[ $status -eq 0 ] || echo "FAILED: a memory tool changed the training run" >&2
exit $status
