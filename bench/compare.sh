#!/usr/bin/env bash
# compare.sh NAME UNIT — ringgrad vs PyTorch on one benchmark, at 1 and 2 threads, in
# one go; each side's best thread setting counts. Runs build/bin/bench_NAME and
# bench/torch_<name>.py (Debian's python3-torch), reads UNIT_per_s from their RESULT lines.
#   bench/compare.sh mlp samples        (what bench/compare_mlp.sh runs)
# Ends with: RESULT bench=NAME ours_UNIT_per_s=… torch_UNIT_per_s=… ratio=…
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 unit=$2
python=/usr/bin/python3  # Debian's python3-torch lives with the system Python
"$python" -c "import torch" 2>/dev/null || {
  echo "compare_$name: needs PyTorch for the comparison: apt-get install python3-torch" >&2; exit 2; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
ours_best=0; torch_best=0
for t in 1 2; do
  line=$(build/bin/bench_"$name" --threads "$t"); echo "$line"
  ours=$(echo "$line" | field "${unit}_per_s")
  line=$("$python" bench/torch_"$name".py --threads "$t" 2>/dev/null); echo "$line"
  torch=$(echo "$line" | field "${unit}_per_s")
  ours_best=$(python3 -c "print(max($ours_best, $ours))")
  torch_best=$(python3 -c "print(max($torch_best, $torch))")
done
ratio=$(python3 -c "print(f'{$ours_best / $torch_best:.2f}')")
echo "RESULT bench=$name ours_${unit}_per_s=$ours_best torch_${unit}_per_s=$torch_best ratio=$ratio"
