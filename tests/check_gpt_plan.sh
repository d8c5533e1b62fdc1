#!/usr/bin/env bash
# check_gpt_plan.sh — the planner's predictions against what the run holds.
#
#   tests/check_gpt_plan.sh RGRUN GPT [ARGS...]
#
# For each layout below (strategies, tensor, pipeline and context parallelism, recomputation,
# precision, accumulation, a 16-bit comm hook, sequence parallelism, the pipeline's schedules), `gpt --plan --world N` predicts, and a 3-step run under
# `RGRUN -n N` measures, the largest rank's parameters, gradients and optimizer state and the
# bytes it sends in a step, in all and by kind of collective with the number of operations
# of each (which must agree to the byte), and its peak tensor memory (within
# 10%; Llama's blocks too, in float32 and under autocast, and split by tp and pp). Prints one line per
# layout with the measured/predicted ratio of the peak. ctest runs it as example_gpt_plan.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RGRUN GPT [ARGS...]" >&2; exit 2; }
rgrun=$1 gpt=$2
shift 2
model=(--layers 4 --d-model 64 --heads 4 --seq 128 --batch-size 8 --steps 3 --eval-batches 1
       --sample-length 0 "$@")
field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p"; }
status=0
check() {  # N, then the layout's flags
  local n=$1 plan run
  shift
  plan=$("$gpt" "${model[@]}" "$@" --plan --world "$n" 2>&1 | grep '^RESULT plan') ||
    { echo "FAILED: no plan for $*" >&2; status=1; return; }
  run=$("$rgrun" -n "$n" "$gpt" "${model[@]}" "$@" 2>&1 | grep '^RESULT example=gpt') ||
    { echo "FAILED: no run for -n $n $*" >&2; status=1; return; }
  local ok=1 q
  for q in params_mb grads_mb optim_mb comm_mb; do
    [ "$(echo "$plan" | field $q)" = "$(echo "$run" | field $q)" ] ||
      { echo "FAILED: -n $n $*: $q predicted $(echo "$plan" | field $q), measured $(echo "$run" | field $q)" >&2; ok=0; }
  done
  local sp sr  # the bytes sent by kind of collective, and how many operations of each
  sp=$(echo "$plan" | sed -nE 's/.* sent=([^ ]+).*/\1/p') sr=$(echo "$run" | sed -nE 's/.* sent=([^ ]+).*/\1/p')
  [ -n "$sp" ] && [ "$sp" = "$sr" ] ||
    { echo "FAILED: -n $n $*: sent by kind predicted '$sp', measured '$sr'" >&2; ok=0; }
  local p r
  p=$(echo "$plan" | field peak_mb) r=$(echo "$run" | field peak_mb)
  [ -n "$p" ] || { echo "FAILED: -n $n $*: no peak planned" >&2; status=1; return; }
  awk -v p="$p" -v r="$r" -v what="-n $n $*" 'BEGIN {
    printf "%-62s peak predicted %8.3f MB, measured %8.3f MB (%.3f)\n", what, p, r, r / p
    exit (r / p >= 0.9 && r / p <= 1.1 ? 0 : 1)
  }' || { echo "FAILED: -n $n $*: the peak is not within 10% of the plan" >&2; ok=0; }
  [ $ok = 1 ] || status=1
}
check 1 --strategy ddp
check 2 --strategy ddp
check 2 --strategy zero1
check 2 --strategy zero2
check 2 --strategy fsdp
check 4 --strategy fsdp
check 2 --strategy fsdp --layers 16 --d-model 256 --seq 16 --batch-size 1  # the gradients, not the activations, set the peak
check 4 --strategy fsdp --layers 16 --d-model 256 --seq 16 --batch-size 1
check 2 --strategy ddp --recompute full
check 2 --strategy ddp --recompute selective
check 2 --strategy ddp --grad-accum 2 --batch-size 4
check 2 --strategy zero2 --grad-accum 2 --batch-size 4 --recompute full
check 2 --strategy ddp --precision bf16
check 2 --strategy fsdp --dp 1 --cp 2
check 2 --strategy ddp --dp 1 --cp 2 --recompute full
check 2 --strategy zero1 --comm-hook bf16
check 2 --dp 1 --tp 2
check 2 --dp 1 --pp 2 --micro-batches 4
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 --recompute selective
llama=(--norm rmsnorm --pos rope --mlp swiglu --kv-heads 2)
check 2 --strategy zero2 "${llama[@]}"
check 4 --strategy fsdp "${llama[@]}" --grad-accum 2 --batch-size 4
check 2 --strategy ddp "${llama[@]}" --recompute selective
check 2 --strategy zero1 "${llama[@]}" --ff 96
check 2 --strategy ddp "${llama[@]}" --precision bf16
check 2 --strategy fsdp "${llama[@]}" --precision bf16 --recompute full
check 2 --strategy zero2 "${llama[@]}" --precision bf16 --recompute selective --grad-accum 2 --batch-size 4
# Llama's blocks split: the query and K/V heads and SwiGLU's hidden units over tp, blocks over pp.
check 2 --dp 1 --tp 2 "${llama[@]}"
check 2 --dp 1 --pp 2 --micro-batches 4 "${llama[@]}"
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 "${llama[@]}" --recompute selective
check 4 --dp 1 --tp 4 --heads 8 --norm rmsnorm --pos rope --mlp swiglu --kv-heads 4
# Autocast inside tp and pp: g's all-reduces carry 16-bit GEMM outputs; a first stage's peak
# is a block's backward.
check 2 --dp 1 --tp 2 --precision bf16
check 2 --dp 1 --pp 2 --micro-batches 4 --precision bf16
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 "${llama[@]}" --precision bf16
# zero1 under 4D: each data-parallel rank steps (and holds AdamW's state for) its share of
# its stage's parameters, then broadcasts them.
check 4 --strategy zero1 --dp 2 --pp 2 --micro-batches 2
check 4 --strategy zero1 --dp 2 --tp 2 --precision bf16
# Sequence parallelism: between the split layers 1/tp of the positions (the norms, residuals,
# sends and a recomputed block's input), each split layer's all-reduce an all-gather and a
# reduce-scatter.
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 --recompute selective --sequence-parallel
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 "${llama[@]}" --recompute selective --sequence-parallel
check 2 --dp 1 --tp 2 --recompute full --sequence-parallel
check 4 --dp 1 --cp 2 --tp 2 --recompute full --sequence-parallel
check 2 --dp 1 --tp 2 "${llama[@]}" --sequence-parallel
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 "${llama[@]}" --precision bf16 --sequence-parallel
check 4 --strategy zero1 --dp 2 --tp 2 --precision bf16 --sequence-parallel
# The other pipeline schedules, each run on paper for what it holds: GPipe every micro-batch,
# interleaved the longer warm-up over v chunks, each sending its output on. ZB-H1's first
# stage holds 1F1B's; its later stages hold more or less as the W's fall (plan.h), so its
# layouts here are ones where the first stage holds the most.
check 2 --dp 1 --pp 2 --micro-batches 4 --schedule gpipe
check 4 --dp 1 --pp 2 --tp 2 --layers 8 --micro-batches 4 --schedule zb-h1 "${llama[@]}" --precision bf16
check 4 --strategy zero1 --dp 2 --pp 2 --micro-batches 2 --schedule zb-h1 "${llama[@]}"
check 4 --dp 1 --pp 4 --layers 8 --micro-batches 4 --schedule interleaved
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 4 --schedule interleaved "${llama[@]}" --recompute selective --sequence-parallel
check 4 --dp 1 --pp 2 --tp 2 --micro-batches 2 --schedule interleaved --precision bf16 --recompute full
[ $status -eq 0 ] || echo "FAILED: a prediction missed" >&2
exit $status
