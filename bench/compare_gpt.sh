#!/usr/bin/env bash
# compare_gpt.sh — the GPT's training speed, ringgrad against PyTorch 2.x written as nanoGPT
# writes it (bench/torch_gpt.py: fused qkv, scaled_dot_product_attention(is_causal=True),
# tied head), the same model, batch and optimizer; 1 and 2 threads each side, and ringgrad
# at world 2 (two processes of one thread, DDP, the same global batch). Each side's best
# setting counts.
#
#   bench/compare_gpt.sh                   (build/ must be built; RINGGRAD_BUILD_DIR picks another)
#   RINGGRAD_COMPARE_ROUNDS=3 bench/compare_gpt.sh     (rounds interleaved; the best of each)
#   bench/compare_gpt.sh --d-model 256 --heads 8 --layers 6   (flags go to both sides)
#
# MFU, for both sides against one yardstick: the model's training FLOPs per token (nanoGPT's
# count, examples/gpt/budget.h) × tokens/s per process, over the fastest float32 GEMM this
# machine ran in this comparison at that thread count — each side measures its own
# (rg::matmul, torch.mm: the fastest of three large products) and the larger of the two is
# the machine's rate.
# PyTorch: $RINGGRAD_TORCH_PYTHON, else bench/.venv, made on first use (bench/torch_python.sh).
# Ends with: RESULT bench=gpt ours_tokens_per_s=… torch_tokens_per_s=… ratio=…
#            ours_world2_tokens_per_s=… world2_ratio=… ours_mfu=… torch_mfu=… ours_threads=…
#            torch=… blas=… onednn=… threads=… interop=… isa=…  (PyTorch's best run)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_python.sh
ringgrad_program bench_gpt  # sets $ringgrad_bin
find_torch_python           # sets $torch_python

field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p"; }  # the number after " KEY=" on a line
bigger() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 >= b + 0) ? 1 : 0 }'; }
rounds=${RINGGRAD_COMPARE_ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare_gpt: RINGGRAD_COMPARE_ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }

declare -A gemm=([1]=0 [2]=0)  # the fastest GEMM seen at each thread count (GFLOP/s)
ours_best=0 ours_t=1 ours_model=0 torch_best=0 torch_t=1 torch_model=0 torch_settings=""
world2_best=0 world2_model=0
take() {  # RESULT line: check it has tokens_per_s, note its GEMM rate
  local line=$1 t=$2
  [ -n "$(echo "$line" | field tokens_per_s)" ] || { echo "compare_gpt: no tokens_per_s in: $line" >&2; exit 1; }
  local g; g=$(echo "$line" | field gemm_gflops)
  [ "$(bigger "$g" "${gemm[$t]}")" = 1 ] && gemm[$t]=$g
  return 0
}
for round in $(seq "$rounds"); do
  for t in 1 2; do
    line=$("$ringgrad_bin" --threads "$t" "$@" | grep '^RESULT'); echo "$line"; take "$line" "$t"
    if [ "$(bigger "$(echo "$line" | field tokens_per_s)" "$ours_best")" = 1 ]; then
      ours_best=$(echo "$line" | field tokens_per_s) ours_t=$t ours_model=$(echo "$line" | field model_gflops)
    fi
    line=$("$torch_python" bench/torch_gpt.py --threads "$t" "$@" | grep '^RESULT'); echo "$line"; take "$line" "$t"
    if [ "$(bigger "$(echo "$line" | field tokens_per_s)" "$torch_best")" = 1 ]; then
      torch_best=$(echo "$line" | field tokens_per_s) torch_t=$t torch_model=$(echo "$line" | field model_gflops)
      torch_settings=$(echo "$line" | grep -o ' torch=.*')
    fi
  done
  line=$(scripts/rgrun -n 2 "$ringgrad_bin" --threads 1 "$@" | grep '^RESULT'); echo "$line"; take "$line" 1
  if [ "$(bigger "$(echo "$line" | field tokens_per_s)" "$world2_best")" = 1 ]; then
    world2_best=$(echo "$line" | field tokens_per_s) world2_model=$(echo "$line" | field model_gflops)
  fi
done
div() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, a / b }'; }
echo "GEMM yardstick (the faster side's best large product): ${gemm[1]} GFLOP/s on 1 thread, ${gemm[2]} on 2"
echo "RESULT bench=gpt ours_tokens_per_s=$ours_best torch_tokens_per_s=$torch_best" \
     "ratio=$(div "$ours_best" "$torch_best" %.2f) ours_world2_tokens_per_s=$world2_best" \
     "world2_ratio=$(div "$world2_best" "$torch_best" %.2f)" \
     "ours_mfu=$(div "$ours_model" "${gemm[$ours_t]}" %.3f) torch_mfu=$(div "$torch_model" "${gemm[$torch_t]}" %.3f)" \
     "world2_mfu=$(div "$world2_model" "${gemm[1]}" %.3f) ours_threads=$ours_t${torch_settings}"
