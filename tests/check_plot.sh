#!/usr/bin/env bash
# check_plot.sh — scripts/plot turns two runs' --log files into one PNG.
#
#   tests/check_plot.sh WORKDIR
#
# Writes two small logs (the lines examples/metrics_log.h writes, the second run with a
# partial last line, as a killed run leaves), plots their losses and their accuracies,
# and checks that each PNG is written and is a PNG. Says SKIPPED (ctest: Skipped) when
# matplotlib is not installed (Debian's python3-matplotlib; scripts/setup installs it).
# ctest runs it as scripts_plot.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
work=$1
plot=$(cd "$(dirname "$0")/.." && pwd)/scripts/plot
rm -rf "$work" && mkdir -p "$work"
python3 - "$work" <<'PY'
import json, math, sys
work = sys.argv[1]
for name, lr in (("run-a", 1e-3), ("run-b", 3e-3)):
    with open(f"{work}/{name}.jsonl", "w") as f:
        for step in range(10, 210, 10):
            row = {"step": step, "epoch": 1 + step // 100, "loss": 2.3 * math.exp(-step * lr * 10) + 0.3,
                   "samples_per_s": 50000.0, "lr": lr, "elapsed_s": step / 100}
            if step % 100 == 0:
                row["accuracy"] = 0.8 + step / 2000
            f.write(json.dumps(row) + "\n")
        if name == "run-b":
            f.write('{"step": 210, "lo')  # killed mid-line
PY
out=$("$plot" "$work/run-a.jsonl" "$work/run-b.jsonl" -o "$work/loss.png" 2>&1) || {
  if grep -q "needs matplotlib" <<< "$out"; then echo "SKIPPED: $out"; exit 0; fi
  echo "$out"; echo "FAILED: scripts/plot" >&2; exit 1
}
echo "$out"
"$plot" "$work/run-a.jsonl" "$work/run-b.jsonl" --y accuracy --label "lr 1e-3" --label "lr 3e-3" \
  -o "$work/accuracy.png"
# A field no line has: a clear error, no PNG.
if "$plot" "$work/run-a.jsonl" --y tokens_per_s -o "$work/none.png" 2> "$work/err.txt"; then
  echo "FAILED: expected an error for a field no line has" >&2; exit 1
fi
grep -q "has both step and tokens_per_s" "$work/err.txt" || { cat "$work/err.txt"; echo "FAILED: the error" >&2; exit 1; }
for png in loss accuracy; do
  f=$work/$png.png
  [ -s "$f" ] && [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    { echo "FAILED: $f is not a PNG" >&2; exit 1; }
  echo "$f: $(stat -c %s "$f") bytes"
done
[ ! -e "$work/none.png" ] || { echo "FAILED: a PNG without curves" >&2; exit 1; }
echo "PASSED"
