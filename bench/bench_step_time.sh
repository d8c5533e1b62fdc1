#!/usr/bin/env bash
# bench_step_time.sh — how well `gpt --plan --machine here` predicts a step's time, layout by
# layout, on this machine (examples/gpt/step_time.h).
#
#   bench/bench_step_time.sh                   (build/ must be built; RINGGRAD_BUILD_DIR picks another)
#   RINGGRAD_STEP_TIME_STEPS=20 RINGGRAD_STEP_TIME_ROUNDS=3 bench/bench_step_time.sh
#   bench/bench_step_time.sh --d-model 256 --heads 8   (flags go to every plan and run)
#
# For each layout below (one process; DDP, ZeRO-1, ZeRO-2, FSDP; recomputation; accumulation;
# bf16; tp, pp (1F1B, interleaved, ZB-H1), cp; a 4-rank DDP and a 4-rank pp × tp; Llama's blocks), the plan probes this
# machine on the ranks rgrun starts and predicts the step's seconds; then a run of the same
# layout trains RINGGRAD_STEP_TIME_STEPS steps (default 12; the first is not timed) and reports
# its mean seconds per step. Each layout's plan and run are back to back, so a machine that
# changes speed moves both, RINGGRAD_STEP_TIME_ROUNDS times (default 2); each side's mean
# over the rounds counts. The target: measured/predicted within 0.75–1.25.
# Per layout: RESULT bench=step_time layout="…" predicted_s=… compute_s=… comm_s=… measured_s=… ratio=…
# Then: RESULT bench=step_time_summary layouts=N within_25pct=K worst_ratio=… median_ratio=…
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_python.sh
ringgrad_program gpt  # sets $ringgrad_bin

steps=${RINGGRAD_STEP_TIME_STEPS:-12}
[[ $steps =~ ^[1-9][0-9]*$ ]] && [ "$steps" -ge 3 ] ||
  { echo "bench_step_time: RINGGRAD_STEP_TIME_STEPS must be an integer >= 3, got '$steps'" >&2; exit 2; }
rounds=${RINGGRAD_STEP_TIME_ROUNDS:-2}
[[ $rounds =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench_step_time: RINGGRAD_STEP_TIME_ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
model=(--layers 4 --d-model 128 --heads 4 --seq 128 --batch-size 16 --eval-batches 1 --sample-length 0 "$@")

field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p"; }  # the number after " KEY=" on a line
ratios=()
layout() {  # N, then the layout's flags
  local n=$1 plan run k p=0 c=0 m=0 r=0
  shift
  for ((k = 0; k < rounds; ++k)); do
    plan=$(scripts/rgrun -n "$n" "$ringgrad_bin" "${model[@]}" "$@" --plan --machine here 2>&1 | grep '^RESULT plan') ||
      { echo "bench_step_time: no plan for -n $n $*" >&2; exit 1; }
    run=$(scripts/rgrun -n "$n" "$ringgrad_bin" "${model[@]}" "$@" --steps "$steps" 2>&1 | grep '^RESULT example=gpt') ||
      { echo "bench_step_time: no run for -n $n $*" >&2; exit 1; }
    p=$(awk -v a="$p" -v b="$(echo "$plan" | field step_s)" 'BEGIN { print a + b }')
    c=$(awk -v a="$c" -v b="$(echo "$plan" | field compute_s)" 'BEGIN { print a + b }')
    m=$(awk -v a="$m" -v b="$(echo "$plan" | field comm_s)" 'BEGIN { print a + b }')
    r=$(awk -v a="$r" -v b="$(echo "$run" | field step_s)" 'BEGIN { print a + b }')
  done
  ratios+=("$(awk -v p="$p" -v r="$r" 'BEGIN { printf "%.3f", r / p }')")
  awk -v p="$p" -v c="$c" -v m="$m" -v r="$r" -v k="$rounds" -v what="-n $n $*" -v ratio="${ratios[-1]}" 'BEGIN {
    printf "RESULT bench=step_time layout=\"%s\" predicted_s=%.4f compute_s=%.4f comm_s=%.4f measured_s=%.4f ratio=%s\n",
           what, p / k, c / k, m / k, r / k, ratio }'
}
layout 1
layout 2 --strategy ddp
layout 2 --strategy zero1
layout 2 --strategy zero2
layout 2 --strategy fsdp
layout 2 --strategy ddp --recompute full
layout 2 --strategy ddp --recompute selective
layout 2 --strategy ddp --grad-accum 2 --batch-size 8
layout 2 --strategy ddp --precision bf16
layout 2 --dp 1 --tp 2
layout 2 --dp 1 --pp 2 --micro-batches 4
layout 2 --dp 1 --pp 2 --micro-batches 4 --schedule interleaved
layout 2 --dp 1 --pp 2 --micro-batches 4 --schedule zb-h1
layout 2 --dp 1 --cp 2
layout 4 --strategy ddp
layout 4 --dp 1 --pp 2 --tp 2 --micro-batches 4
layout 2 --strategy ddp --norm rmsnorm --pos rope --mlp swiglu --kv-heads 2
printf '%s\n' "${ratios[@]}" | sort -n | awk '
  { r[NR] = $1; if ($1 >= 0.75 && $1 <= 1.25) ok++; d = $1 > 1 ? $1 : 1 / $1; if (d > worst) { worst = d; w = $1 } }
  END { printf "RESULT bench=step_time_summary layouts=%d within_25pct=%d worst_ratio=%s median_ratio=%s\n",
               NR, ok, w, r[int((NR + 1) / 2)] }'
