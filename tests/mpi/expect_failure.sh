#!/usr/bin/env bash
# expect_failure.sh — run a command that must fail quickly and say why.
#
#   expect_failure.sh SECONDS REGEX command args…
#
# Passes when the command exits non-zero within SECONDS (not killed by the
# timeout: that would be a hang) and its output matches the extended REGEX.
set -uo pipefail
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
echo "ok: failed as expected"
