#!/usr/bin/env bash
# Install the build tree into a scratch prefix, then configure, build and run
# tests/embed against it with find_package(ringgrad): what a user embedding us does.
set -euo pipefail
build_dir=$1
source_dir=$2
work="$build_dir/embed-test"
rm -rf "$work"
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/tests/embed" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/embed"
