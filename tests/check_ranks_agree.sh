#!/usr/bin/env bash
# check_ranks_agree.sh — ranks started differently stop at once, naming the ranks and values.
#
#   tests/check_ranks_agree.sh RGRUN MNIST_DDP WORKDIR
#
# Each case starts 2 ranks of mnist_ddp with one difference between them
# (tests/per_rank.sh) and expects the whole job to end within 30 s (the watchdog would
# take 300) with a non-zero status and the message given:
#   * one rank with an argument error, or asked for --help: the other says which rank left
#   * different --batch-size / --lr / --max-steps: the option and both values
#   * the same --data path holding a smaller dataset on one rank: the sample counts
# ctest runs it as ranks_agree_2.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 RGRUN MNIST_DDP WORKDIR" >&2; exit 2; }
rgrun=$1 program=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/a/data" "$work/b/data"
# Rank 1's "data" is the test split standing in as a training set: 10,000 samples, not 60,000.
full=/usr/share/datasets/fashion-mnist
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  ln -sf "$full/$f.gz" "$work/a/data/$f.gz"
done
ln -sf "$full/t10k-images-idx3-ubyte.gz" "$work/b/data/train-images-idx3-ubyte.gz"
ln -sf "$full/t10k-labels-idx1-ubyte.gz" "$work/b/data/train-labels-idx1-ubyte.gz"
ln -sf "$full/t10k-images-idx3-ubyte.gz" "$work/b/data/t10k-images-idx3-ubyte.gz"
ln -sf "$full/t10k-labels-idx1-ubyte.gz" "$work/b/data/t10k-labels-idx1-ubyte.gz"

status=0
# expect NAME ARGS0 ARGS1 PATTERN [DIR1]
expect() {
  local name=$1 args0=$2 args1=$3 pattern=$4 dir1=${5:-$work/a}
  local start end out rc=0
  start=$(date +%s.%N)
  out=$(timeout 120 "$rgrun" -n 2 "$here/per_rank.sh" "$work/a" "$dir1" "$args0" "$args1" \
        "$program" --data data --max-steps 3 --epochs 1 --device cpu 2>&1) || rc=$?
  end=$(date +%s.%N)
  local seconds
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE -- "$pattern" <<< "$out" &&
     awk -v s="$seconds" 'BEGIN { exit !(s < 30) }'; then
    printf "ok    %-34s exit %d after %4.1f s: %s\n" "$name" $rc "$seconds" "$(grep -m1 -oE -- "$pattern" <<< "$out")"
  else
    echo "$out" | tail -20
    printf "FAIL  %-34s exit %d after %s s (expected a non-zero exit within 30 s and /%s/)\n" \
      "$name" $rc "$seconds" "$pattern"
    status=1
  fi
}

expect "argument error on rank 1 only" "--batch-size 64" "--batch-size 0" "stopping: rank 1 ended before the start"
expect "--help on rank 1 only" "" "--help" "rank 1 ended before the start \\(it was asked for --help"
expect "different --batch-size" "--batch-size 64" "--batch-size 32" "batch-size is '64' on rank 0 and '32' on rank 1"
expect "different --lr" "--lr 0.001" "--lr 0.01" "lr is '0.001' on rank 0 and '0.01' on rank 1"
expect "different --trace" "" "--trace t.json" "trace is '' on rank 0 and 't.json' on rank 1"
expect "a smaller dataset on rank 1" "" "" "train samples is '60000' on rank 0 and '10000' on rank 1" "$work/b"
[ $status -eq 0 ] && echo "PASSED"
exit $status
