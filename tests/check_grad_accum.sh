#!/usr/bin/env bash
# check_grad_accum.sh — --grad-accum takes the same steps as the whole batch at once.
#
#   tests/check_grad_accum.sh RGRUN N PROGRAM [ARGS...]
#
# Runs PROGRAM (mnist_mlp or mnist_ddp) under `RGRUN -n N` for 30 steps three ways:
# --batch-size 64; --batch-size 32 --grad-accum 2; --batch-size 16 --grad-accum 4. The three
# draw the same 64 samples per rank for every step (the loader takes --batch-size × N), so they
# are one training run up to the order of sums: the logged loss at steps 10, 20 and 30 (--log)
# must agree within 1e-4 (relative), and the test accuracy within 0.002.
# ctest runs it as example_mnist_mlp_grad_accum and example_mnist_ddp_grad_accum_2.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 RGRUN N PROGRAM [ARGS...]" >&2; exit 2; }
rgrun=$1 n=$2 program=$3
shift 3
extra=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# "loss10 loss20 loss30 accuracy" of one run
run() {
  local name=$1 out
  shift
  out=$("$rgrun" -n "$n" "$program" --epochs 1 --max-steps 30 --log "$dir/$name.jsonl" --log-every 10 "$@" 2>&1) ||
    { echo "$out" >&2; echo "FAILED: $program $*" >&2; return 1; }
  local acc
  acc=$(echo "$out" | sed -nE 's/^RESULT .* test_acc=([0-9.]+) .*/\1/p')
  echo "$(sed -nE 's/.*"loss":([0-9.e+-]+).*/\1/p' "$dir/$name.jsonl" | head -3 | tr '\n' ' ')$acc"
}

whole=$(run whole --batch-size 64 "${extra[@]}")
echo "--batch-size 64:                 losses and accuracy $whole"
status=0
for split in 32/2 16/4; do
  b=${split%/*} k=${split#*/}
  got=$(run "accum$k" --batch-size "$b" --grad-accum "$k" "${extra[@]}")
  echo "--batch-size $b --grad-accum $k: losses and accuracy $got"
  awk -v a="$whole" -v b="$got" 'BEGIN {
    n = split(a, x, " "); split(b, y, " ")
    if (n != 4) exit 1
    for (i = 1; i <= 3; ++i) { d = (x[i] - y[i]) / x[i]; if (d < 0) d = -d; if (d > 1e-4) exit 1 }
    d = x[4] - y[4]; if (d < 0) d = -d
    exit (d <= 0.002 ? 0 : 1)
  }' || { echo "FAILED: --batch-size $b --grad-accum $k is not --batch-size 64's run" >&2; status=1; }
done
exit $status
