#!/usr/bin/env bash
# bench_memory.sh — what activation recomputation and gradient accumulation save, and cost,
# on a GPT at long contexts where the activations dominate (bench_gpt's memory figures).
#
#   bench/bench_memory.sh                       (build/ must be built; RINGGRAD_BUILD_DIR picks another)
#   RINGGRAD_MEMORY_SEQS="1024 2048" RINGGRAD_MEMORY_ROUNDS=2 bench/bench_memory.sh
#   bench/bench_memory.sh --layers 6 --d-model 256 --heads 8   (flags go to every run)
#
# At each context T (default 1024 2048 4096), one process, batch 4, the same model: the
# plain step, --recompute selective, --recompute full, and --grad-accum 4 (4 micro-batches of
# 1: the same global batch). Rounds interleave the four; each one's best time and its peak
# count. activation_mb is what a step adds to the memory that lives between steps (the
# parameters and AdamW's state): its peak minus that (bench/bench_gpt.cpp).
# The targets: full recomputation cuts activation_mb by >= 60% for <= 40% more step time;
# accumulation 4 cuts it by >= 3x.
# Per T: RESULT bench=memory seq=T none_mb=… selective_mb=… full_mb=… accum4_mb=…
#        full_saving=… full_time_ratio=… selective_saving=… selective_time_ratio=…
#        accum4_factor=… accum4_time_ratio=…
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_python.sh
ringgrad_program bench_gpt  # sets $ringgrad_bin

seqs=${RINGGRAD_MEMORY_SEQS:-1024 2048 4096}
rounds=${RINGGRAD_MEMORY_ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_memory: RINGGRAD_MEMORY_ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
for t in $seqs; do
  [[ $t =~ ^[1-9][0-9]*$ ]] || { echo "bench_memory: RINGGRAD_MEMORY_SEQS must hold positive integers, got '$t'" >&2; exit 2; }
done

field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p"; }  # the number after " KEY=" on a line
declare -A ms mb
configs=(none selective full accum4)
flags_of() {
  case $1 in
    none) echo "--recompute none" ;;
    selective) echo "--recompute selective" ;;
    full) echo "--recompute full" ;;
    accum4) echo "--grad-accum 4" ;;
  esac
}
for t in $seqs; do
  for ((r = 1; r <= rounds; ++r)); do
    for c in "${configs[@]}"; do
      # shellcheck disable=SC2046
      line=$("$ringgrad_bin" --seq "$t" --batch-size 4 --steps 2 --warmup 1 $(flags_of "$c") "$@" | grep '^RESULT')
      echo "T=$t $c: $line"
      m=$(echo "$line" | field ms_per_step) a=$(echo "$line" | field activation_mb)
      [ -n "$m" ] && [ -n "$a" ] || { echo "bench_memory: no ms_per_step/activation_mb in: $line" >&2; exit 1; }
      key=$t/$c
      if [ -z "${ms[$key]:-}" ] || awk -v a="$m" -v b="${ms[$key]}" 'BEGIN { exit !(a < b) }'; then ms[$key]=$m; fi
      mb[$key]=$a
    done
  done
  awk -v t="$t" -v n="${mb[$t/none]}" -v s="${mb[$t/selective]}" -v f="${mb[$t/full]}" -v a="${mb[$t/accum4]}" \
      -v tn="${ms[$t/none]}" -v ts="${ms[$t/selective]}" -v tf="${ms[$t/full]}" -v ta="${ms[$t/accum4]}" 'BEGIN {
    printf "RESULT bench=memory seq=%d none_mb=%.1f selective_mb=%.1f full_mb=%.1f accum4_mb=%.1f " \
           "full_saving=%.3f full_time_ratio=%.3f selective_saving=%.3f selective_time_ratio=%.3f " \
           "accum4_factor=%.2f accum4_time_ratio=%.3f\n", t, n, s, f, a, 1 - f / n, tf / tn, 1 - s / n, ts / tn,
           n / a, ta / tn
  }'
done
