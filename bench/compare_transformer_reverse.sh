#!/usr/bin/env bash
# compare_transformer_reverse.sh — ringgrad vs PyTorch 2.x end to end: the whole
# examples/transformer_reverse.cpp recipe (an encoder-decoder Transformer learning to
# reverse digit strings: data, AdamW, warmup+cosine, clipping, greedy test) against the
# same recipe in PyTorch, bench/torch_transformer_reverse.py, at 1 and 2 threads, in one
# go; each side's best thread setting counts. Throughput is the training steps' tokens/s
# as each program times it; exact_match shows both learned the task alike.
#
#   bench/compare_transformer_reverse.sh                 (the full recipe: 1500 steps)
#   bench/compare_transformer_reverse.sh --steps 300     (quicker; any flag below goes to both)
# Flags both sides take: --steps --batch-size --d-model --layers --lr --dropout --clip
# --eval-size --seed. Needs $RINGGRAD_BUILD_DIR/bin/transformer_reverse (default build/).
# PyTorch: $RINGGRAD_TORCH_PYTHON, else bench/.venv, made on first use (bench/torch_python.sh).
# The full recipe takes a few minutes per run on 2 cores, and there are four runs
# (times RINGGRAD_COMPARE_ROUNDS, default 1: on a noisy machine take 3, the best of each counts).
# Ends with: RESULT bench=transformer_reverse ours_tokens_per_s=… torch_tokens_per_s=…
#            ratio=… ours_exact_match=… torch_exact_match=… torch=… blas=… onednn=…
#            threads=… interop=… isa=…   (exact_match and settings: each side's best run)
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [ "$arg" = --threads ]; then
    echo "compare_transformer_reverse: the script sets --threads itself (1, then 2)" >&2; exit 2
  fi
done
source bench/torch_python.sh
ringgrad_program transformer_reverse  # sets $ringgrad_bin
find_torch_python  # sets $torch_python

field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p"; }  # the number after " KEY=" on a line
bigger() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 >= b + 0) ? 1 : 0 }'; }
# Runs one side, shows its held-out and RESULT lines, leaves the RESULT line in $line.
run_side() {
  local who=$1; shift
  echo "-- $who: $*" >&2
  local out
  out=$("$@")  # the progress lines are kept out of the way; the last lines tell the outcome
  echo "$out" | grep -E '^(held-out|RESULT)'
  line=$(echo "$out" | grep '^RESULT' | tail -1)
  if [ -z "$(echo "$line" | field tokens_per_s)" ]; then
    echo "compare_transformer_reverse: no tokens_per_s in $who's output:" >&2
    echo "$out" | tail -5 >&2
    exit 1
  fi
}

ours_best=0 torch_best=0 ours_match="" torch_match="" torch_settings=""
rounds=${RINGGRAD_COMPARE_ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare_transformer_reverse: RINGGRAD_COMPARE_ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
for round in $(seq "$rounds"); do
for t in 1 2; do
  run_side ringgrad "$ringgrad_bin" --threads "$t" "$@"
  tps=$(echo "$line" | field tokens_per_s)
  if [ "$(bigger "$tps" "$ours_best")" = 1 ]; then
    ours_best=$tps ours_match=$(echo "$line" | field exact_match)
  fi
  run_side pytorch "$torch_python" bench/torch_transformer_reverse.py --threads "$t" "$@"
  tps=$(echo "$line" | field tokens_per_s)
  if [ "$(bigger "$tps" "$torch_best")" = 1 ]; then
    torch_best=$tps torch_match=$(echo "$line" | field exact_match)
    torch_settings=$(echo "$line" | grep -o ' torch=.*')  # torch=… blas=… … to the end
  fi
done
done
ratio=$(awk -v a="$ours_best" -v b="$torch_best" 'BEGIN { printf "%.2f", a / b }')
echo "RESULT bench=transformer_reverse ours_tokens_per_s=$ours_best" \
     "torch_tokens_per_s=$torch_best ratio=$ratio ours_exact_match=$ours_match" \
     "torch_exact_match=$torch_match${torch_settings}"
