#!/usr/bin/env bash
# per_rank.sh — start each rank of an MPI job in its own directory with its own arguments,
# to test what a program does when its ranks were not started alike.
#
#   scripts/rgrun -n 2 tests/per_rank.sh DIR0 DIR1 "ARGS0" "ARGS1" PROGRAM [COMMON ARGS...]
#
# Rank r changes to DIRr and runs PROGRAM ARGSr COMMON ARGS (ARGSr split on spaces).
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
dir0=$1 dir1=$2 args0=$3 args1=$4 program=$5
shift 5
if [ "$rank" = 0 ]; then cd "$dir0"; mine=$args0; else cd "$dir1"; mine=$args1; fi
# shellcheck disable=SC2086  # the rank's arguments are meant to be split
exec "$program" $mine "$@"
