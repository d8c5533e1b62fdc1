#!/usr/bin/env bash
# check_elastic.sh — ranks killed at random moments, the job restarted by rgrun, the result
# the same as never failing.
#
#   tests/check_elastic.sh WORKDIR KILLS RGRUN -n N PROGRAM ARGS...
#
# PROGRAM is one of the training examples (its ARGS without --save/--resume), run by
# `RGRUN -n N`:
#   1. uninterrupted: ARGS --save WORKDIR/straight.ckpt
#   2. elastic: RGRUN --max-restarts KILLS -n N PROGRAM ARGS --save WORKDIR/run.ckpt
#      --save-every K --auto-resume, while this script kills one rank, chosen at random,
#      with SIGKILL at a random moment (0.1-0.9 s after each start of the job), KILLS times
#      or until the job ends (as when machines die during a long run);
# and checks: the elastic job ends with status 0, rgrun said a restart for every kill
# (with its cause), each restart after the first checkpoint resumed from it, and the final
# checkpoint is byte for byte the uninterrupted run's. ctest runs it as elastic_gpt_2.
# RINGGRAD_ELASTIC_DIRECTORY=1: the checkpoints are sharded directories (--save PATH/): each
# rank's pieces, the manifest committed last; the final directories compared file by file
# (ctest elastic_gpt_sharded_2, with --save-async).
set -euo pipefail
[ $# -ge 6 ] || { echo "usage: $0 WORKDIR KILLS RGRUN -n N PROGRAM ARGS..." >&2; exit 2; }
work=$1 kills=$2 rgrun=$3
[ "$4" = -n ] || { echo "usage: $0 WORKDIR KILLS RGRUN -n N PROGRAM ARGS..." >&2; exit 2; }
ranks=$5 program=$6
shift 6
rm -rf "$work" && mkdir -p "$work"
name=$(basename "$program")
slash=""
[ "${RINGGRAD_ELASTIC_DIRECTORY:-0}" = 1 ] && slash=/

"$rgrun" -n "$ranks" "$program" "$@" --save "$work/straight.ckpt$slash" > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; echo "FAILED: the uninterrupted run" >&2; exit 1; }

# Every process below PID (children, their children, …).
descendants() {
  local child
  for child in $(pgrep -P "$1" || true); do echo "$child"; descendants "$child"; done
}
# This job's ranks: its descendants named after the program (not mpirun or rgrun, and not
# another job's ranks: ctest runs tests side by side).
ranks_of() {
  descendants "$1" | while read -r p; do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$name" ] && echo "$p"; done
}

"$rgrun" --max-restarts "$kills" -n "$ranks" "$program" "$@" --save "$work/run.ckpt$slash" --save-every 10 \
  --auto-resume > "$work/elastic.log" 2>&1 &
job=$!
killed=0
declare -A seen=()  # ranks already alive when counted: a start is new when its ranks are
while [ $killed -lt "$kills" ] && kill -0 $job 2>/dev/null; do
  mapfile -t now < <(ranks_of $job)
  if [ ${#now[@]} -lt "$ranks" ] || [ -n "${seen[${now[0]}]:-}" ]; then sleep 0.05; continue; fi
  for p in "${now[@]}"; do seen[$p]=1; done
  sleep "0.$(( 1 + RANDOM % 9 ))"
  victim=${now[RANDOM % ${#now[@]}]}
  kill -9 "$victim" 2>/dev/null && killed=$((killed + 1))
done
status=0
wait $job || status=$?
[ $status -eq 0 ] || { cat "$work/elastic.log"; echo "FAILED: the elastic job ended with status $status" >&2; exit 1; }
restarts=$(grep -c '^rgrun: the job failed (exit status [0-9]*; first error: .*); restart [0-9]* of' "$work/elastic.log" || true)
resumed=$(grep -c 'resumed' "$work/elastic.log" || true)
grep -E '^rgrun: |resumed' "$work/elastic.log" | cut -c1-160
echo "$killed kills, $restarts restarts, $resumed resumed from a checkpoint"
[ "$restarts" -eq "$killed" ] || { echo "FAILED: $killed ranks killed but $restarts restarts said" >&2; exit 1; }
[ "$killed" -ge 1 ] || { echo "FAILED: the job ended before any kill (make the run longer)" >&2; exit 1; }
if diff -r "$work/straight.ckpt" "$work/run.ckpt" > /dev/null; then
  echo "the final checkpoint is the uninterrupted run's, byte for byte"
else
  echo "FAILED: the elastic job's final checkpoint differs from the uninterrupted run's" >&2
  exit 1
fi
[ -z "$(find "$work" -name '*.tmp.*')" ] || { echo "FAILED: a killed save's temporary file is left" >&2; exit 1; }
echo "PASSED"
