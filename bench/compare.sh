#!/usr/bin/env bash
# compare.sh NAME UNIT — ringgrad vs PyTorch 2.x on one benchmark, at 1 and 2 threads, in
# one go; each side's best thread setting counts. Runs $RINGGRAD_BUILD_DIR/bin/bench_NAME
# (default build/bin/bench_NAME) and bench/torch_<name>.py, reads UNIT_per_s from their
# RESULT lines.
#   bench/compare.sh mlp samples        (what bench/compare_mlp.sh runs)
#   RINGGRAD_BUILD_DIR=build-rel bench/compare.sh transformer tokens
#   RINGGRAD_COMPARE_ROUNDS=5 bench/compare_transformer.sh   (5 interleaved rounds, best of
#                                     each side: a shared machine's noise is ±20% run to run)
# PyTorch: $RINGGRAD_TORCH_PYTHON, else bench/.venv (made on first use with
# `pip install torch` from PyPI): see bench/torch_python.sh.
# Ends with: RESULT bench=NAME ours_UNIT_per_s=… torch_UNIT_per_s=… ratio=… torch=… blas=…
#            onednn=… threads=… interop=… isa=…   (the settings of PyTorch's best run)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  echo "usage: bench/compare.sh NAME UNIT   (e.g. mlp samples, transformer tokens)" >&2; exit 2
fi
name=$1 unit=$2
source bench/torch_python.sh
ringgrad_program "bench_$name"  # sets $ringgrad_bin
find_torch_python  # sets $torch_python

field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p"; }  # the number after " KEY=" on a line
bigger() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 >= b + 0) ? 1 : 0 }'; }
ours_best=0 torch_best=0 torch_settings=""
rounds=${RINGGRAD_COMPARE_ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare_$name: RINGGRAD_COMPARE_ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
for round in $(seq "$rounds"); do
for t in 1 2; do
  line=$("$ringgrad_bin" --threads "$t"); echo "$line"
  ours=$(echo "$line" | field "${unit}_per_s")
  line=$("$torch_python" bench/torch_"$name".py --threads "$t" | grep '^RESULT'); echo "$line"
  torch=$(echo "$line" | field "${unit}_per_s")
  if [ -z "$ours" ] || [ -z "$torch" ]; then
    echo "compare_$name: no ${unit}_per_s in a RESULT line above" >&2; exit 1
  fi
  [ "$(bigger "$ours" "$ours_best")" = 1 ] && ours_best=$ours
  if [ "$(bigger "$torch" "$torch_best")" = 1 ]; then
    torch_best=$torch
    torch_settings=$(echo "$line" | grep -o ' torch=.*')  # torch=… blas=… … to the end
  fi
done
done
ratio=$(awk -v a="$ours_best" -v b="$torch_best" 'BEGIN { printf "%.2f", a / b }')
echo "RESULT bench=$name ours_${unit}_per_s=$ours_best torch_${unit}_per_s=$torch_best" \
     "ratio=$ratio${torch_settings}"
