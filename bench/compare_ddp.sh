#!/usr/bin/env bash
# compare_ddp.sh — data-parallel scaling, ours and PyTorch's (gloo), world 1 vs world 2, in one go.
#
#   bench/compare_ddp.sh          (build/ must be built; RINGGRAD_BUILD_DIR picks another)
#
# PyTorch 2.x: $RINGGRAD_TORCH_PYTHON, else bench/.venv, made on first use with
# `pip install torch` from PyPI (bench/torch_python.sh).
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
# Ends with: RESULT bench=ddp speedup_2=… speedup_2_all_cores=… torch_speedup_2=…
#            torch_speedup_2_all_cores=… torch=… blas=… onednn=… interop=… isa=…
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_python.sh
ringgrad_program bench_ddp  # sets $ringgrad_bin
find_torch_python  # sets $torch_python
cores=$(nproc)
field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p"; }  # the number after " KEY=" on a line
best() { printf '%s\n' "$@" | sort -g | tail -1; }

declare -A runs  # "ours 1 1" -> "samples/s samples/s …" (side, world, threads per rank)
for _ in 1 2 3 4 5; do  # five rounds
  for setting in "1 1" "1 $cores" "2 1"; do
    read -r world threads <<<"$setting"
    line=$(RINGGRAD_NUM_THREADS=$threads scripts/rgrun -n "$world" "$ringgrad_bin" |
           grep RESULT)
    echo "$line"
    runs["ours $setting"]+=" $(echo "$line" | field samples_per_s)"
    line=$("$torch_python" bench/torch_ddp.py --world "$world" --threads "$threads" |
           grep RESULT)
    echo "$line"
    runs["torch $setting"]+=" $(echo "$line" | field samples_per_s)"
    # torch=… blas=… onednn=… (threads= varies by setting: dropped) interop=… isa=…
    torch_settings=$(echo "$line" | grep -o ' torch=.*' | sed 's/ threads=[0-9]*//')
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
speedups() {  # side -> "speedup_2 speedup_2_all_cores"
  local one all two
  # Unquoted on purpose: each entry is a space-separated list of runs, one argument each.
  # shellcheck disable=SC2086
  one=$(best ${runs["$1 1 1"]}) all=$(best ${runs["$1 1 $cores"]}) two=$(best ${runs["$1 2 1"]})
  echo "$1: best samples/s world 1 (1 thread) $one, world 1 ($cores threads) $all, world 2 $two" >&2
  echo "$(ratio "$two" "$one") $(ratio "$two" "$all")"
}
read -r ours ours_all <<<"$(speedups ours)"
read -r torch torch_all <<<"$(speedups torch)"
echo "RESULT bench=ddp speedup_2=$ours speedup_2_all_cores=$ours_all torch_speedup_2=$torch" \
     "torch_speedup_2_all_cores=$torch_all$torch_settings"
