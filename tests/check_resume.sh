#!/usr/bin/env bash
# check_resume.sh — kill -9 a training run at a random step, resume it, and compare the
# result with a run never interrupted: the final checkpoints must be the same bytes.
#
#   tests/check_resume.sh WORKDIR STEPS [--kill-rank] -- COMMAND...
#
# COMMAND is the training program with its arguments (for DDP: `scripts/rgrun -n 2
# build/bin/mnist_ddp …`); this script adds --max-steps STEPS, --save and --resume.
#   1. COMMAND --max-steps STEPS --save WORKDIR/straight.ckpt          (uninterrupted)
#   2. COMMAND --max-steps STEPS --save WORKDIR/run.ckpt --save-every K, killed with
#      SIGKILL at a random moment after its first checkpoint (--kill-rank: one rank,
#      chosen at random, as when a machine dies; otherwise the process itself)
#   3. COMMAND --max-steps STEPS --resume WORKDIR/run.ckpt --save WORKDIR/run.ckpt
# and checks: run 2 really died before the end, the checkpoint it left loads, run 3
# ends with a file byte-identical to run 1's (model, optimizer, progress, generator),
# and no WORKDIR/run.ckpt.tmp.* is left. Two rounds, so that kills land at different steps
# (mid-epoch included). ctest runs it as resume_mnist_mlp, resume_mnist_mlp_fp16 (the
# GradScaler's state resumed too) and resume_mnist_ddp_2.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 WORKDIR STEPS [--kill-rank] -- COMMAND..." >&2; exit 2; }
work=$1 steps=$2
shift 2
kill_rank=0
[ "$1" = --kill-rank ] && { kill_rank=1; shift; }
[ "$1" = -- ] || { echo "usage: $0 WORKDIR STEPS [--kill-rank] -- COMMAND..." >&2; exit 2; }
shift
rm -rf "$work" && mkdir -p "$work"
every=$(( steps / 20 + 1 ))

echo "== straight: $* --max-steps $steps"
"$@" --max-steps "$steps" --save "$work/straight.ckpt" > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; echo "FAILED: the uninterrupted run" >&2; exit 1; }
program=$(basename "$(grep -oE '[^ ]*/(mnist_mlp|mnist_ddp|transformer_reverse|gpt)' <<< "$*" | head -1)")

# Every process below PID (children, their children, …).
descendants() {
  local child
  for child in $(pgrep -P "$1" || true); do echo "$child"; descendants "$child"; done
}

for round in 1 2; do
  rm -f "$work/run.ckpt"
  "$@" --max-steps "$steps" --save "$work/run.ckpt" --save-every "$every" > "$work/killed.log" 2>&1 &
  job=$!
  # Wait for the first checkpoint, then a random while longer (0-0.7 s).
  for _ in $(seq 600); do [ -e "$work/run.ckpt" ] || ! kill -0 $job 2>/dev/null && break; sleep 0.05; done
  sleep "0.$(( RANDOM % 8 ))"
  if [ $kill_rank = 1 ]; then
    # The ranks: this job's descendants named after the program (not mpirun or rgrun, and
    # not another job's ranks — ctest runs tests side by side).
    mapfile -t ranks < <(descendants $job | while read -r p; do
                           [ "$(cat /proc/$p/comm 2>/dev/null)" = "$program" ] && echo "$p"; done)
    [ ${#ranks[@]} -gt 0 ] && kill -9 "${ranks[RANDOM % ${#ranks[@]}]}" 2>/dev/null || true
  else
    kill -9 $job 2>/dev/null || true
  fi
  status=0
  wait $job || status=$?
  [ $status -ne 0 ] || { cat "$work/killed.log"; echo "FAILED: round $round finished before the kill (make STEPS larger)" >&2; exit 1; }
  [ -e "$work/run.ckpt" ] || { cat "$work/killed.log"; echo "FAILED: no checkpoint before the kill" >&2; exit 1; }
  echo "== round $round: killed (exit $status), $(ls "$work" | grep -c 'run.ckpt.tmp' || true) temporary file(s) left by the kill"
  "$@" --max-steps "$steps" --resume "$work/run.ckpt" --save "$work/run.ckpt" > "$work/resumed.log" 2>&1 ||
    { cat "$work/resumed.log"; echo "FAILED: the resumed run" >&2; exit 1; }
  grep -m1 "resumed from" "$work/resumed.log"
  if ! cmp "$work/straight.ckpt" "$work/run.ckpt"; then
    echo "FAILED: round $round: the resumed run's checkpoint differs from the uninterrupted run's" >&2
    exit 1
  fi
  if ls "$work" | grep -q 'run.ckpt.tmp'; then
    ls -l "$work"; echo "FAILED: temporary files left after the resumed run" >&2; exit 1
  fi
  echo "   resumed run ends byte-identical to the uninterrupted one"
done
echo "PASSED"
