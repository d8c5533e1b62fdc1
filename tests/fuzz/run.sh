#!/usr/bin/env bash
# tests/fuzz/run.sh — build the libFuzzer harnesses and run each for a bounded time.
#
#   tests/fuzz/run.sh [SECONDS]     (default 60 per harness; `scripts/test --fuzz` runs this)
#
# Configures build-fuzz/ with clang (RINGGRAD_FUZZ=ON: libFuzzer + ASan + UBSan, no CUDA),
# builds every harness tests/fuzz/fuzz_*.cpp and runs it on a copy of its seeds
# tests/fuzz/corpus/<harness>/ in build-fuzz/corpus/<harness>/, where new inputs go (never
# into the git tree; the copy grows from run to run). A crash, sanitizer report, exception
# other than ringgrad::Error, hang (-timeout) or out-of-memory fails the run: the reproducer
# is kept in build-fuzz/findings/<harness>/, and its path, bytes and the command that
# replays it are printed. RINGGRAD_BUILD_JOBS sets the build's -j (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: tests/fuzz/run.sh [SECONDS]" >&2; exit 2; }
build=build-fuzz

echo "== libFuzzer + ASan + UBSan build ($build/)"
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DRINGGRAD_FUZZ=ON -DRINGGRAD_CUDA=OFF \
      -DRINGGRAD_MPI=OFF -DRINGGRAD_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${RINGGRAD_BUILD_JOBS:-$(nproc)}" --target fuzz

# One thread per fuzzer: the inputs are tiny, and a pool only adds noise to exec/s.
export OMP_NUM_THREADS=1 RINGGRAD_NUM_THREADS=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

failed=()
for source in tests/fuzz/fuzz_*.cpp; do
  name=$(basename "$source" .cpp)
  corpus=$build/corpus/$name findings=$build/findings/$name log=$build/logs/$name.log
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  if [ -d tests/fuzz/corpus/"$name" ]; then cp tests/fuzz/corpus/"$name"/* "$corpus"/; fi
  dict=()
  if [ -f tests/fuzz/"$name".dict ]; then dict=(-dict=tests/fuzz/"$name".dict); fi
  echo "== $name: ${seconds}s"
  status=0
  "$build"/bin/"$name" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -artifact_prefix="$findings"/ \
    -print_final_stats=1 >"$log" 2>&1 || status=$?
  stat_of() { sed -n "s/^stat::$1: *//p" "$log"; }
  if [ "$status" -eq 0 ]; then
    echo "$name: ok, $(stat_of number_of_executed_units) runs, $(stat_of average_exec_per_sec) exec/s," \
         "$(stat_of new_units_added) new inputs, peak RSS $(stat_of peak_rss_mb) MB"
    continue
  fi
  failed+=("$name")
  # The artifact libFuzzer wrote for this run (crash-, leak-, timeout-, oom-…).
  repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  echo "FUZZ FINDING in $name (exit $status); the end of its log ($log):"
  tail -n 60 "$log"
  if [ -n "$repro" ] && [ -f "$repro" ]; then
    echo "reproducer: $repro ($(wc -c <"$repro") bytes)"
    echo "reproduce:  $build/bin/$name $repro"
    echo "its bytes (base64 -d to recreate it):"
    base64 -w 100 "$repro" | head -c 8000
    echo
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]}" >&2
  exit 1
fi
