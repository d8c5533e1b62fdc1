#!/usr/bin/env bash
# check_same_accuracy.sh — two training programs, one recipe, the same test accuracy.
#
#   tests/check_same_accuracy.sh RGRUN N PROGRAM_A PROGRAM_B [ARGS...]
#
# Runs each program under `RGRUN -n N` with the same ARGS, reads the
# `RESULT example=… world=N test_acc=…` line each prints, and fails unless both
# are there and their test accuracies differ by at most 0.005. (Not bit for bit:
# DDP divides each gradient by N before summing, the ring sums and then divides,
# so the last bits of the weights differ.) ctest runs it as example_ddp_from_scratch_2.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 RGRUN N PROGRAM_A PROGRAM_B [ARGS...]" >&2; exit 2; }
rgrun=$1 n=$2 a=$3 b=$4
shift 4

result_of() {
  local out
  out=$("$rgrun" -n "$n" "$@" 2>&1) || { echo "$out"; echo "FAILED: $*" >&2; return 1; }
  echo "$out" | grep -E "^RESULT example=[a-z_]+ world=$n test_acc=[0-9.]+ " | tail -1 || true
}

line_a=$(result_of "$a" "$@")
line_b=$(result_of "$b" "$@")
echo "$line_a"
echo "$line_b"
[ -n "$line_a" ] && [ -n "$line_b" ] || { echo "FAILED: a RESULT line is missing" >&2; exit 1; }
acc() { echo "$1" | sed -E 's/.* test_acc=([0-9.]+).*/\1/'; }
awk -v x="$(acc "$line_a")" -v y="$(acc "$line_b")" 'BEGIN {
  d = x - y; if (d < 0) d = -d
  printf "test_acc %s vs %s: difference %.4f (at most 0.005)\n", x, y, d
  exit (d <= 0.005 ? 0 : 1)
}'
