#!/usr/bin/env bash
# compare_ddp.sh — data-parallel scaling, ours and PyTorch's (gloo), at world 1 and 2, in one go.
#
#   bench/compare_ddp.sh          (build/ must be built; PyTorch part needs python3-torch)
# Ends with: RESULT bench=ddp speedup_2=… torch_speedup_2=…
set -euo pipefail
cd "$(dirname "$0")/.."
python=/usr/bin/python3
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
declare -A ours theirs
for n in 1 2; do
  line=$(scripts/rgrun -n "$n" build/bin/bench_ddp | grep RESULT); echo "$line"
  ours[$n]=$(echo "$line" | field samples_per_s)
  if "$python" -c "import torch.distributed" 2>/dev/null; then
    line=$("$python" bench/torch_ddp.py --world "$n" | grep RESULT); echo "$line"
    theirs[$n]=$(echo "$line" | field samples_per_s)
  fi
done
speedup=$(python3 -c "print(f'{${ours[2]} / ${ours[1]}:.2f}')")
torch_speedup=none
[ -n "${theirs[2]:-}" ] && torch_speedup=$(python3 -c "print(f'{${theirs[2]} / ${theirs[1]}:.2f}')")
echo "RESULT bench=ddp speedup_2=$speedup torch_speedup_2=$torch_speedup"
