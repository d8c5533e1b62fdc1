#!/usr/bin/env bash
# check_gpt_plan.sh — the planner's predictions against what the run holds.
#
#   tests/check_gpt_plan.sh RGRUN GPT [dense|experts] [ARGS...]
#
# For each layout below (strategies, tensor, pipeline and context parallelism, recomputation,
# precision, accumulation, a 16-bit comm hook, sequence parallelism, the pipeline's schedules), `gpt --plan --world N` predicts, and a 3-step run under
# `RGRUN -n N` measures, the largest rank's parameters, gradients and optimizer state and the
# bytes it sends in a step, in all and by kind of collective with the number of operations
# of each (which must agree to the byte), and its peak tensor memory (within
# 10%; Llama's blocks too, in float32 and under autocast, and split by tp and pp). Prints one line per
# layout with the measured/predicted ratio of the peak. ctest runs it as example_gpt_plan.
#
# `experts` checks instead MoE blocks (--experts) under each parallelism, expert parallelism's
# included. Where the all-to-alls run, their bytes follow the router's choices, which the plan
# takes as even: those bytes (and the step's total) are held within 10%, their operations and
# every other kind's bytes to the byte. ctest runs it as example_gpt_plan_experts.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RGRUN GPT [dense|experts] [ARGS...]" >&2; exit 2; }
rgrun=$1 gpt=$2 set=dense
shift 2
case ${1:-} in dense | experts) set=$1 && shift ;; esac
model=(--layers 4 --d-model 64 --heads 4 --seq 128 --batch-size 8 --steps 3 --eval-batches 1
       --sample-length 0 "$@")
field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p"; }
status=0
experts() {  # MoE blocks: 4 experts, 2 a token, under each parallelism
  local moe=(--experts 4) llama=(--norm rmsnorm --pos rope --mlp swiglu --kv-heads 2)
  check 1 "${moe[@]}" --recompute full
  check 2 "${moe[@]}" --strategy zero2 --shared-experts 1
  check 2 "${moe[@]}" --strategy fsdp
  check 2 "${moe[@]}" --precision bf16 --mlp swiglu --recompute selective
  check 2 "${moe[@]}" --dp 1 --cp 2 --capacity-factor 1.25
  check 2 "${moe[@]}" --dp 1 --tp 2 --recompute full
  check 4 "${moe[@]}" --dp 1 --cp 2 --tp 2 --sequence-parallel --capacity-factor 1
  check 4 "${moe[@]}" --dp 1 --pp 2 --tp 2 --micro-batches 2 --sequence-parallel
  check 2 "${moe[@]}" --dp 1 --pp 2 --micro-batches 4 --schedule interleaved --layers 8 --moe-every 2
  # Expert parallelism: the rows a rank's experts run follow the routing.
  check 2 "${moe[@]}" --ep 2
  check 2 "${moe[@]}" --ep 2 --precision bf16
  check 2 "${moe[@]}" --ep 2 --recompute full --moe-every 2
  check 2 "${moe[@]}" --ep 2 "${llama[@]}" --precision bf16
  check 4 "${moe[@]}" --dp 2 --ep 2 --pp 2 --micro-batches 2
  check 4 "${moe[@]}" --dp 2 --ep 2 --tp 2 --sequence-parallel --recompute selective
}
check() {  # N, then the layout's flags
  local n=$1 plan run
  shift
  plan=$("$gpt" "${model[@]}" "$@" --plan --world "$n" 2>&1 | grep '^RESULT plan') ||
    { echo "FAILED: no plan for $*" >&2; status=1; return; }
  run=$("$rgrun" -n "$n" "$gpt" "${model[@]}" "$@" 2>&1 | grep '^RESULT example=gpt') ||
    { echo "FAILED: no run for -n $n $*" >&2; status=1; return; }
  local ok=1 q
  for q in params_mb grads_mb optim_mb comm_mb; do
    [ $q = comm_mb ] && [[ $plan == *all_to_all:* ]] && continue  # (below: the routing's share within 10%)
    [ "$(echo "$plan" | field $q)" = "$(echo "$run" | field $q)" ] ||
      { echo "FAILED: -n $n $*: $q predicted $(echo "$plan" | field $q), measured $(echo "$run" | field $q)" >&2; ok=0; }
  done
  local sp sr  # the bytes sent by kind of collective, and how many operations of each
  sp=$(echo "$plan" | sed -nE 's/.* sent=([^ ]+).*/\1/p') sr=$(echo "$run" | sed -nE 's/.* sent=([^ ]+).*/\1/p')
  # Each kind to the byte, but the all-to-alls' bytes within 10%, and then the total too.
  awk -v p="$sp" -v r="$sr" -v pc="$(echo "$plan" | field comm_mb)" -v rc="$(echo "$run" | field comm_mb)" 'BEGIN {
    np = split(p, a, ","); nr = split(r, b, ",")
    if (p == "" || np != nr) exit 1
    for (i = 1; i <= np; ++i) {
      split(a[i], x, "[:/]"); split(b[i], y, "[:/]")
      if (x[1] != y[1] || x[3] != y[3]) exit 1
      if (x[1] == "all_to_all") {
        if (y[2] < 0.9 * x[2] || y[2] > 1.1 * x[2] || rc < 0.9 * pc || rc > 1.1 * pc) exit 1
      } else if (x[2] != y[2]) exit 1
    }
  }' || { echo "FAILED: -n $n $*: sent by kind predicted '$sp', measured '$sr'" >&2; ok=0; }
  local p r b
  p=$(echo "$plan" | field peak_mb) r=$(echo "$run" | field peak_mb)
  # Under --ep the rows a rank's experts run follow the routing: between the even share's
  # peak and the most a rank can be sent (peak_bound_mb).
  b=$(echo "$plan" | field peak_bound_mb)
  [ -n "$p" ] || { echo "FAILED: -n $n $*: no peak planned" >&2; status=1; return; }
  awk -v p="$p" -v r="$r" -v b="${b:-$p}" -v what="-n $n $*" 'BEGIN {
    printf "%-62s peak predicted %8.3f MB, measured %8.3f MB (%.3f)", what, p, r, r / p
    if (b != p) printf ", at most %.3f MB", b
    printf "\n"
    exit (r / p >= 0.9 && r / b <= 1.1 ? 0 : 1)
  }' || { echo "FAILED: -n $n $*: the peak is not within 10% of the plan" >&2; ok=0; }
  [ $ok = 1 ] || status=1
}
if [ $set = experts ]; then
  experts
  [ $status -eq 0 ] || echo "FAILED: a prediction missed" >&2
  exit $status
fi
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
