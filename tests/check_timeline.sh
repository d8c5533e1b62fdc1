#!/usr/bin/env bash
# check_timeline.sh — scripts/timeline draws a real 2-rank trace as a PNG, and says no clearly.
#
#   tests/check_timeline.sh MNIST_DDP|BIN_DIR WORKDIR
#
# Traces 3 steps of mnist_ddp on 2 ranks (scripts/rgrun, one bucket per parameter), draws
# the merged trace whole, with --ranks, with --steps and one rank's own file, and checks
# that each PNG is a PNG of some size and that the summary line counts 2 ranks (1 for one
# rank) and at least 4 tracks. Then each bad input (a missing file, not JSON, JSON that is
# not a trace, a bad --ranks, a rank not in the trace, a bad --steps, an unwritable output)
# must exit 1 with one `timeline: error:` line naming the problem, and no traceback. Says
# SKIPPED (ctest: Skipped) when matplotlib is not installed. ctest runs it as timeline.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 MNIST_DDP|BIN_DIR WORKDIR" >&2; exit 2; }
program=$1 work=$2
[ -d "$program" ] && program=$program/mnist_ddp
root=$(cd "$(dirname "$0")/.." && pwd)
timeline=$root/scripts/timeline
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }

"$root/scripts/rgrun" -n 2 "$program" --epochs 1 --max-steps 5 --trace-steps 3 --bucket-cap-mb 0.01 \
  --device cpu --trace "$work/t.json" > "$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "mnist_ddp --trace"; }
[ -s "$work/t.json" ] && [ -s "$work/t.rank1.json" ] || { cat "$work/run.txt"; fail "no trace files"; }

# draw OUT.png RANKS ARGS…: run timeline, check the PNG and the summary's rank and track counts.
draw() {
  local png=$1 ranks=$2 out; shift 2
  out=$("$timeline" "$@" -o "$work/$png" 2>&1) || {
    if grep -q "needs matplotlib" <<< "$out"; then echo "SKIPPED: $out"; exit 0; fi
    echo "$out"; fail "scripts/timeline $*"
  }
  echo "$out"
  local re="\($ranks ranks?, ([0-9]+) tracks, ([0-9]+) slices, [0-9.]+ ms\)\$"
  [[ $out == *"timeline: wrote $work/$png ("* && $out =~ $re ]] ||
    fail "expected 'timeline: wrote $work/$png ($ranks rank(s), T tracks, E slices, X ms)'"
  (( BASH_REMATCH[1] >= 2 * ranks && BASH_REMATCH[2] >= 20 )) || fail "too few tracks or slices: $out"
  local f=$work/$png
  [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$f is not a PNG"
  (( $(stat -c %s "$f") > 8000 )) || fail "$f is only $(stat -c %s "$f") bytes"
}
draw all.png 2 "$work/t.json"
draw rank1.png 1 "$work/t.json" --ranks 1
draw step1.png 2 "$work/t.json" --ranks 0-1 --steps 1 --title "mnist_ddp, step 1"
draw own.png 1 "$work/t.rank1.json"
# --steps 1 draws less time than the whole trace.
whole=$("$timeline" "$work/t.json" -o "$work/all.png" | grep -o '[0-9.]* ms')
step=$("$timeline" "$work/t.json" --steps 1 -o "$work/step1.png" | grep -o '[0-9.]* ms')
awk -v a="${step% ms}" -v b="${whole% ms}" 'BEGIN { exit !(a < b) }' || fail "--steps 1: $step, not less than $whole"
# The default output: the trace's name with .png.
"$timeline" "$work/t.json" > /dev/null && [ -s "$work/t.png" ] || fail "no default $work/t.png"

# Bad inputs: exit 1, one clear line, no traceback.
echo '{"traceEvents": [{"ph": "X", "ts": 1' > "$work/cut.json"    # a trace cut off mid-write
echo '{"displayTimeUnit": "ms"}' > "$work/notrace.json"
mkdir -p "$work/ro" && chmod a-w "$work/ro"
# bad PATTERN ARGS…
bad() {
  local pattern=$1 status=0; shift
  "$timeline" "$@" > "$work/out.txt" 2> "$work/err.txt" || status=$?
  [ "$status" -eq 1 ] || { cat "$work/err.txt"; fail "expected exit 1 from timeline $*, got $status"; }
  grep -q "^timeline: error: .*$pattern" "$work/err.txt" && ! grep -q Traceback "$work/err.txt" &&
    [ "$(wc -l < "$work/err.txt")" -eq 1 ] || { cat "$work/err.txt"; fail "timeline $*: expected one line 'timeline: error: …$pattern'"; }
  echo "ok ($*): $(cat "$work/err.txt")"
}
bad "$work/none.json: no such file" "$work/none.json"
bad "cut.json: not JSON" "$work/cut.json"
bad "notrace.json: not a Chrome trace" "$work/notrace.json"
bad "--ranks 'x-1': expected ranks" "$work/t.json" --ranks x-1
bad "--ranks '3-1': expected ranks" "$work/t.json" --ranks 3-1
bad "--ranks 0,5: rank(s) 5 not in" "$work/t.json" --ranks 0,5
bad "--ranks 0: rank(s) 0 not in .*t.rank1.json" "$work/t.rank1.json" --ranks 0
bad "--steps '0': expected a positive integer" "$work/t.json" --steps 0
bad "--steps 'two': expected a positive integer" "$work/t.json" --steps two
bad "$work/nodir/x.png: cannot write it" "$work/t.json" -o "$work/nodir/x.png"
if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere
  bad "$work/ro/x.png: cannot write it" "$work/t.json" -o "$work/ro/x.png"
fi
echo "TIMELINE PASSED"
