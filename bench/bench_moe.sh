#!/usr/bin/env bash
# bench_moe.sh — a Mixture of Experts GPT against the dense GPT of the same compute per
# token, at world 2: speed, what it learns, how evenly its experts work, what it sends.
#
#   bench/bench_moe.sh                      (build/ must be built; RINGGRAD_BUILD_DIR picks another)
#   RINGGRAD_MOE_STEPS=600 RINGGRAD_MOE_ROUNDS=2 bench/bench_moe.sh
#   bench/bench_moe.sh --d-model 256 --heads 8      (flags go to every run)
#
# Four runs of examples/gpt.cpp on 2 ranks (rgrun), the same batches, steps and schedule:
#   dense    the GPT as it is (every block's MLP 4·d wide)
#   moe      8 experts of that MLP's shape in every block, 1 per token (the same active
#            parameters per token, 8 times the MLP parameters), split over the 2 ranks (--ep 2)
#   moe_ep1  the same MoE with every expert on every rank (data parallelism only)
#   noaux    the MoE of `moe` without the load-balance loss (--aux-loss-coef 0)
# Each prints its validation loss after the same tokens, its tokens/s (rounds interleave the
# four; the best counts), and the MoE runs their load: the busiest expert's rows over the
# mean, rank 0's tokens, in the last step and averaged over every evaluation from half-way.
# `moe` also prints its all-to-all bytes in the second step beside the dropless,
# evenly-routed formula (gpt/budget.h: moe_all_to_all_bytes).
# RESULT bench=moe steps=… dense_val=… moe_val=… moe_ep1_val=… noaux_val=…
#        dense_tokens_per_s=… moe_tokens_per_s=… moe_ep1_tokens_per_s=… noaux_tokens_per_s=…
#        moe_balance=… noaux_balance=… a2a_predicted_mb=… a2a_measured_mb=…
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_python.sh
ringgrad_program gpt  # sets $ringgrad_bin

steps=${RINGGRAD_MOE_STEPS:-300}
rounds=${RINGGRAD_MOE_ROUNDS:-1}
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "bench_moe: RINGGRAD_MOE_STEPS must be a positive integer, got '$steps'" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_moe: RINGGRAD_MOE_ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p"; }  # the number after " KEY=" on a line
moe=(--experts 8 --experts-per-token 1)
flags_of() {
  case $1 in
    dense) echo "" ;;
    moe) echo "${moe[*]} --ep 2" ;;
    moe_ep1) echo "${moe[*]}" ;;
    noaux) echo "${moe[*]} --ep 2 --aux-loss-coef 0" ;;
  esac
}
configs=(dense moe moe_ep1 noaux)
declare -A rate val balance late
for ((r = 1; r <= rounds; ++r)); do
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2046
    scripts/rgrun -n 2 "$ringgrad_bin" --steps "$steps" --eval-every $((steps / 6 > 0 ? steps / 6 : 1)) \
      --sample-length 0 --log "$work/$c.jsonl" $(flags_of "$c") "$@" > "$work/$c.out" 2>&1 ||
      { cat "$work/$c.out" >&2; echo "bench_moe: the $c run failed" >&2; exit 1; }
    line=$(grep '^RESULT example=gpt' "$work/$c.out")
    t=$(echo "$line" | field tokens_per_s) v=$(echo "$line" | field val_loss)
    echo "round $r $c: val_loss=$v tokens_per_s=$t$(echo "$line" | grep -o ' expert_balance=[0-9.]*' || true)"
    if [ -z "${rate[$c]:-}" ] || awk -v a="$t" -v b="${rate[$c]}" 'BEGIN { exit !(a > b) }'; then rate[$c]=$t; fi
    val[$c]=$v
    balance[$c]=$(echo "$line" | field expert_balance)
    # The mean busiest/mean load over the evaluations from half-way on.
    late[$c]=$(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
late = [r["expert_balance"] for r in rows if "expert_balance" in r and r["step"] >= int(sys.argv[2]) // 2]
print("%.3f" % (sum(late) / len(late)) if late else "")' "$work/$c.jsonl" "$steps")
  done
done
check=$(grep '^CHECK moe_all_to_all_mb' "$work/moe.out")
echo "$check"
echo "load (busiest expert's rows / mean, from step $((steps / 2)) on): moe ${late[moe]}, without the balance loss ${late[noaux]}"
printf 'RESULT bench=moe steps=%s dense_val=%s moe_val=%s moe_ep1_val=%s noaux_val=%s dense_tokens_per_s=%s moe_tokens_per_s=%s moe_ep1_tokens_per_s=%s noaux_tokens_per_s=%s moe_balance=%s noaux_balance=%s a2a_predicted_mb=%s a2a_measured_mb=%s\n' \
  "$steps" "${val[dense]}" "${val[moe]}" "${val[moe_ep1]}" "${val[noaux]}" "${rate[dense]}" "${rate[moe]}" \
  "${rate[moe_ep1]}" "${rate[noaux]}" "${late[moe]}" "${late[noaux]}" \
  "$(echo "$check" | field predicted)" "$(echo "$check" | field measured)"
