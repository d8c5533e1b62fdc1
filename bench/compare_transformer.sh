#!/usr/bin/env bash
# compare_transformer.sh — ringgrad vs PyTorch, one TransformerEncoderLayer forward+backward,
# at 1 and 2 threads, in one go; each side's best thread setting counts.
#
#   bench/compare_transformer.sh          (build/ must be built; needs python3-torch)
# Ends with: RESULT bench=transformer ours_tokens_per_s=… torch_tokens_per_s=… ratio=…
set -euo pipefail
cd "$(dirname "$0")/.."
python=/usr/bin/python3  # Debian's python3-torch lives with the system Python
"$python" -c "import torch" 2>/dev/null || {
  echo "compare_transformer: needs PyTorch: apt-get install python3-torch" >&2; exit 2; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
ours_best=0; torch_best=0
for t in 1 2; do
  line=$(build/bin/bench_transformer --threads "$t"); echo "$line"
  ours=$(echo "$line" | field tokens_per_s)
  line=$("$python" bench/torch_transformer.py --threads "$t" 2>/dev/null); echo "$line"
  torch=$(echo "$line" | field tokens_per_s)
  ours_best=$(python3 -c "print(max($ours_best, $ours))")
  torch_best=$(python3 -c "print(max($torch_best, $torch))")
done
ratio=$(python3 -c "print(f'{$ours_best / $torch_best:.2f}')")
echo "RESULT bench=transformer ours_tokens_per_s=$ours_best torch_tokens_per_s=$torch_best ratio=$ratio"
