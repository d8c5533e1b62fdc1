#!/usr/bin/env bash
# docs/learn/make_figures.sh — remake every chapter's picture from a real run.
#
#   docs/learn/make_figures.sh [NAME ...]      (from anywhere; default: all of them)
#
# Each figure: a short traced run of a program in build/bin (`--trace`), then
# scripts/timeline drawing it into docs/learn/figures/NAME.png. The runs are small (a few
# steps of small models) so that the pictures stay readable; the traces go to a scratch
# folder. Needs the Release build in build/ and matplotlib (scripts/setup installs both).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=docs/learn/figures
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
gpt_small=(--steps 3 --layers 2 --d-model 64 --seq 64 --batch-size 8 --eval-every 100
           --sample-length 0)

# draw NAME TRACE TITLE [timeline options…]
draw() {
  local name=$1 trace=$2 title=$3
  shift 3
  scripts/timeline "$trace" -o "$out/$name.png" --title "$title" "$@"
}

fig_00-one-device() {
  build/bin/gpt "${gpt_small[@]}" --trace "$work/one.json" >/dev/null
  draw 00-one-device "$work/one.json" "one GPT step on one rank: forward, backward, AdamW"
}

fig_01-ddp() {
  scripts/rgrun -n 2 build/bin/mnist_ddp --epochs 1 --max-steps 6 --trace-steps 1 \
    --bucket-cap-mb 0.1 --trace "$work/ddp.json" >/dev/null
  draw 01-ddp "$work/ddp.json" "DDP on 2 ranks, 0.1 MB buckets: all-reduces beside backward"
}

fig_02-sharding() {
  scripts/rgrun -n 2 build/bin/gpt "${gpt_small[@]}" --strategy fsdp --trace "$work/fsdp.json" >/dev/null
  draw 02-sharding "$work/fsdp.json" "FSDP on 2 ranks: each unit all-gathered, used, freed; gradients reduce-scattered"
}

fig_03-tensor-parallel() {
  scripts/rgrun -n 2 build/bin/gpt "${gpt_small[@]}" --tp 2 --trace "$work/tp.json" >/dev/null
  draw 03-tensor-parallel "$work/tp.json" "tensor parallelism on 2 ranks: an all-reduce after every split pair of layers"
}

fig_05-context-parallel() {
  scripts/rgrun -n 2 build/bin/context_parallel --seq 1024 --d-model 64 --nhead 4 --steps 2 \
    --trace "$work/cp.json" >/dev/null
  draw 05-context-parallel "$work/cp.json" "ring attention on 2 ranks: K/V sends and receives beside attention"
}

fig_04-pipeline-parallel() {
  scripts/rgrun -n 2 build/bin/gpt "${gpt_small[@]}" --pp 2 --micro-batches 4 \
    --trace "$work/pp.json" >/dev/null
  draw 04-pipeline-parallel "$work/pp.json" "1F1B on 2 stages, 4 micro-batches"
}

fig_06-experts() {
  scripts/rgrun -n 2 build/bin/gpt "${gpt_small[@]}" --experts 4 --ep 2 --trace "$work/ep.json" >/dev/null
  draw 06-experts "$work/ep.json" "expert parallelism on 2 ranks: each MoE block's dispatch and combine all-to-alls"
}

fig_07-mesh() {
  scripts/rgrun -n 8 build/bin/gpt "${gpt_small[@]}" --dp 2 --pp 2 --tp 2 --trace "$work/mesh.json" >/dev/null
  draw 07-mesh "$work/mesh.json" "dp 2 x pp 2 x tp 2 on 8 ranks: ranks 0-3, one replica's two stages" --ranks 0-3
}

fig_08-mixed-precision() {
  scripts/rgrun -n 2 build/bin/gpt "${gpt_small[@]}" --precision bf16 --comm-hook bf16 \
    --trace "$work/mp.json" >/dev/null
  draw 08-mixed-precision "$work/mp.json" "bfloat16 autocast on 2 ranks, gradients sent as bfloat16 (bf16_compress_hook)"
}

fig_09-hierarchical() {
  RINGGRAD_TEST_RANKS_PER_HOST=2 scripts/rgrun -n 4 build/bin/hierarchical_from_scratch \
    --trace "$work/hier.json" >/dev/null
  draw 09-hierarchical "$work/hier.json" "4 ranks as 2 hosts of 2: the flat ring, the hierarchical all-reduce from scratch, the library's"
}

all=(00-one-device 01-ddp 02-sharding 03-tensor-parallel 04-pipeline-parallel 05-context-parallel 06-experts 07-mesh 08-mixed-precision 09-hierarchical)
for name in "${@:-${all[@]}}"; do
  declare -F "fig_$name" >/dev/null || { echo "make_figures: no figure '$name' (${all[*]})" >&2; exit 2; }
  "fig_$name"
done
