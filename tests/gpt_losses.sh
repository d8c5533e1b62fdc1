# gpt_losses.sh — helpers for the GPT example's equivalence checks (sourced by
# check_gpt_strategies.sh and check_gpt_memory.sh, which set rgrun, gpt and small=(…)).

# "train val" losses of one run, from its "step 20 train loss" and RESULT lines
# (world 2, or the world given first as -n N).
losses() {
  local n=2 out
  if [ "$1" = "-n" ]; then n=$2; shift 2; fi
  out=$("$rgrun" -n "$n" "$gpt" "${small[@]}" "$@" 2>&1) || { echo "$out" >&2; echo "FAILED: $*" >&2; return 1; }
  local train val
  train=$(echo "$out" | sed -nE 's/^step +20  train loss ([0-9.]+)$/\1/p' | tail -1)
  val=$(echo "$out" | sed -nE 's/^RESULT example=gpt .* val_loss=([0-9.]+) .*/\1/p' | tail -1)
  [ -n "$train" ] && [ -n "$val" ] || { echo "$out" >&2; echo "FAILED: no losses from $*" >&2; return 1; }
  echo "$train $val"
}

close() {  # name, reference "train val", other "train val"
  awk -v name="$1" -v a="$2" -v b="$3" 'BEGIN {
    split(a, x, " "); split(b, y, " "); worst = 0
    for (i = 1; i <= 2; ++i) { d = (x[i] - y[i]) / x[i]; if (d < 0) d = -d; if (d > worst) worst = d }
    printf "%-28s train %s  val %s   (largest relative difference from ddp %.2e)\n", name, y[1], y[2], worst
    exit (worst <= 1e-4 ? 0 : 1)
  }'
}

