#!/usr/bin/env bash
# check_log.sh — a training example's --log FILE.jsonl holds sane JSON lines.
#
#   tests/check_log.sh LOG LINES FIELDS LAST_FIELDS [--kill] -- COMMAND...
#
# Runs COMMAND --log LOG (COMMAND carries its own --log-every and a short run), then parses
# every line of LOG with python3's json and checks: exactly LINES lines (rank 0 alone
# writes: under N ranks no line is doubled; with --kill, at least LINES); every line has
# each field of FIELDS (comma-separated) and the last line also those of LAST_FIELDS (-:
# none); step rises from line to line, elapsed_s does not fall; losses are finite and in
# (0, 20), rates positive, lr in (0, 1), accuracy in [0, 1].
# --kill: the program is killed with SIGKILL once LOG has LINES lines, and what it wrote
# must still be whole lines (each is flushed as it is written).
# ctest runs it as example_mnist_mlp_log, example_mnist_mlp_log_killed, example_mnist_ddp_log_2
# and example_gpt_log_2.
set -euo pipefail
[ $# -ge 6 ] || { echo "usage: $0 LOG LINES FIELDS LAST_FIELDS [--kill] -- COMMAND..." >&2; exit 2; }
log=$1 lines=$2 fields=$3 last_fields=$4
shift 4
kill=0
[ "$1" = --kill ] && { kill=1; shift; }
[ "$1" = -- ] || { echo "usage: $0 LOG LINES FIELDS LAST_FIELDS [--kill] -- COMMAND..." >&2; exit 2; }
shift
rm -f "$log"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

if [ $kill = 1 ]; then
  "$@" --log "$log" > "$out" 2>&1 &
  job=$!
  for _ in $(seq 1200); do
    [ -e "$log" ] && [ "$(wc -l < "$log")" -ge "$lines" ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.05
  done
  kill -9 $job 2>/dev/null || { cat "$out"; echo "FAILED: the program ended before it was killed" >&2; exit 1; }
  wait $job 2>/dev/null || true
  echo "killed with SIGKILL after $(wc -l < "$log") line(s)"
else
  "$@" --log "$log" > "$out" 2>&1 || { cat "$out"; echo "FAILED: $*" >&2; exit 1; }
  tail -3 "$out"
fi

python3 - "$log" "$lines" "$fields" "$last_fields" "$kill" <<'EOF'
import json, math, sys
path, want, fields, last_fields, killed = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] == "1"
fields = [f for f in fields.split(",") if f and f != "-"]
last_fields = [f for f in last_fields.split(",") if f and f != "-"]
with open(path) as f:
    text = f.read()
problems = []
if not text.endswith("\n"):
    problems.append("the file does not end with a whole line")
rows = []
for i, line in enumerate(text.splitlines(), 1):
    try:
        rows.append(json.loads(line))
    except ValueError as e:
        problems.append(f"line {i} is not JSON ({e}): {line!r}")
if killed:
    if len(rows) < want:
        problems.append(f"expected at least {want} lines before the kill, got {len(rows)}")
elif len(rows) != want:
    problems.append(f"expected {want} lines, got {len(rows)}")
for i, row in enumerate(rows, 1):
    need = fields + (last_fields if i == len(rows) and not killed else [])
    missing = [f for f in need if f not in row]
    if missing:
        problems.append(f"line {i} lacks {missing}: {row}")
    for key, value in row.items():
        bad = False
        if key in ("loss", "val_loss"):
            bad = not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value < 20)
        elif key in ("samples_per_s", "tokens_per_s"):
            bad = not (isinstance(value, (int, float)) and value > 0)
        elif key == "lr":
            bad = not (isinstance(value, (int, float)) and 0 < value < 1)
        elif key == "accuracy":
            bad = not (isinstance(value, (int, float)) and 0 <= value <= 1)
        elif key in ("step", "epoch"):
            bad = not (isinstance(value, int) and value >= 1)
        elif key == "elapsed_s":
            bad = not (isinstance(value, (int, float)) and value >= 0)
        if bad:
            problems.append(f"line {i}: {key} = {value!r} is not sane")
for i in range(1, len(rows)):
    a, b = rows[i - 1], rows[i]
    if b.get("step", 0) <= a.get("step", 0):
        problems.append(f"line {i + 1}: step {b.get('step')} does not rise from {a.get('step')}")
    if b.get("elapsed_s", 0) < a.get("elapsed_s", 0):
        problems.append(f"line {i + 1}: elapsed_s falls")
if rows:
    print("first:", json.dumps(rows[0]))
    print("last: ", json.dumps(rows[-1]))
if problems:
    for p in problems:
        print("FAILED:", p, file=sys.stderr)
    sys.exit(1)
print(f"PASSED: {len(rows)} JSON lines with {', '.join(fields + last_fields)}")
EOF
