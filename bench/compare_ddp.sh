#!/usr/bin/env bash
# compare_ddp.sh — data-parallel scaling, ours and PyTorch's (gloo), world 1 vs world 2, in one go.
#
#   bench/compare_ddp.sh          (build/ must be built; the PyTorch part needs python3-torch)
#
# What "speedup" means here. DDP scales by adding devices: on a GPU node, world 1
# is one GPU and world 2 is two. On this CPU machine a rank's device is its share
# of the cores, so world 1 runs on one core (one thread) and world 2 on two
# ranks of one thread each — the same resources per rank:
#   speedup_2           = samples/s at world 2 / samples/s at world 1 on one core
# and, for completeness, against one process that uses every core (threads):
#   speedup_2_all_cores = samples/s at world 2 / samples/s at world 1 on all cores
# (On 2 cores that second one is bounded by GEMM threading, not by DDP: ours
# runs ~1.6x faster on 2 threads than on 1, which caps it near 2/1.6.)
# Each setting runs five times, interleaved, and the best run counts: this
# machine's timings wander by 10-30% from run to run, and interference only
# ever slows a run down.
# Ends with: RESULT bench=ddp speedup_2=… speedup_2_all_cores=… torch_speedup_2=… torch_speedup_2_all_cores=…
set -euo pipefail
cd "$(dirname "$0")/.."
python=/usr/bin/python3  # Debian's python3-torch lives with the system Python
cores=$(nproc)
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
best() { printf '%s\n' "$@" | sort -g | tail -1; }
have_torch=0
"$python" -c "import torch.distributed" 2>/dev/null && have_torch=1

declare -A runs  # "ours 1 1" -> "samples/s samples/s …" (side, world, threads per rank)
for round in 1 2 3 4 5; do
  for setting in "1 1" "1 $cores" "2 1"; do
    read -r world threads <<<"$setting"
    line=$(RINGGRAD_NUM_THREADS=$threads scripts/rgrun -n "$world" build/bin/bench_ddp | grep RESULT)
    echo "$line"
    runs["ours $setting"]+=" $(echo "$line" | field samples_per_s)"
    if [ "$have_torch" = 1 ]; then
      line=$("$python" bench/torch_ddp.py --world "$world" --threads "$threads" | grep RESULT)
      echo "$line"
      runs["torch $setting"]+=" $(echo "$line" | field samples_per_s)"
    fi
  done
done

ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
speedups() {  # side -> "speedup_2 speedup_2_all_cores"
  local one all two
  one=$(best ${runs["$1 1 1"]}) all=$(best ${runs["$1 1 $cores"]}) two=$(best ${runs["$1 2 1"]})
  echo "$1: best samples/s world 1 (1 thread) $one, world 1 ($cores threads) $all, world 2 $two" >&2
  echo "$(ratio "$two" "$one") $(ratio "$two" "$all")"
}
read -r ours ours_all <<<"$(speedups ours)"
torch=none torch_all=none
[ "$have_torch" = 1 ] && read -r torch torch_all <<<"$(speedups torch)"
echo "RESULT bench=ddp speedup_2=$ours speedup_2_all_cores=$ours_all torch_speedup_2=$torch" \
     "torch_speedup_2_all_cores=$torch_all"
