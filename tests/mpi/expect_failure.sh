#!/usr/bin/env bash
# expect_failure.sh — run a command that must fail quickly and say why.
#
#   expect_failure.sh [--clean] SECONDS REGEX command args…
#
# Passes when the command exits non-zero within SECONDS (not killed by the
# timeout: that would be a hang) and its output matches the extended REGEX.
# --clean: and it ended as every program must end an error, with exit status 1
# and its message: no std::terminate, no signal.
set -uo pipefail
clean=0
if [ "${1:-}" = "--clean" ]; then clean=1; shift; fi
limit=$1 pattern=$2
shift 2
start=$(date +%s.%N)
output=$(timeout --kill-after=5 "$limit" "$@" 2>&1)
status=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "$output"
echo "-- exit status $status after $elapsed s"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "FAILED: still running after $limit s: the job hangs" >&2
  exit 1
fi
if [ "$status" -eq 0 ]; then
  echo "FAILED: expected a non-zero exit status" >&2
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$output"; then
  echo "FAILED: expected the output to match: $pattern" >&2
  exit 1
fi
if [ "$clean" = 1 ]; then
  if [ "$status" -ne 1 ] || grep -Eq -- "terminate called|Signal: |exited on signal" <<<"$output"; then
    echo "FAILED: expected a clean end (exit status 1, no std::terminate, no signal), got status $status" >&2
    exit 1
  fi
fi
echo "ok: failed as expected"
