#!/usr/bin/env bash
# check_layers.sh — who includes whom, between ringgrad's folders; fails on an include
# that goes up a layer or reaches into a backend's internals.
#
#   tests/check_layers.sh [SOURCE_DIR]     (default: this checkout; ctest runs it as `layers`)
#
# Prints the include graph (count of `#include "ringgrad/…"` lines from each folder into
# each folder), then one line per broken rule. The layers, lowest first (docs/architecture.md,
# "Layers"):
#
#   core ⇄ autograd    tensors and ops; ops record their backward (autograd's node/engine)
#   data, nn, optim    each builds on core and autograd; optim may use nn's modules
#   parallel           builds on all of the above
#   examples, bench, tests, ringgrad.h   on top
#
# A backend's internals (core/cpu/ with core/cpu/onednn/, core/cuda/) are included only inside core/, and by
# parallel/nccl/, the NCCL communicator backend, which runs on the CUDA backend's stream.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# Which folders each folder may include (a folder's own name always may be included).
allowed() {
  case "$1" in
    core | core/cpu | core/cpu/onednn | core/cuda) echo "core core/cpu core/cpu/onednn core/cuda autograd" ;;
    autograd) echo "core autograd" ;;
    data | nn) echo "core autograd" ;;
    optim) echo "core autograd nn" ;;
    parallel | parallel/mpi) echo "core autograd data nn optim parallel parallel/mpi parallel/nccl" ;;
    parallel/nccl) echo "core core/cuda autograd data nn optim parallel parallel/mpi" ;;
    *) echo "ANY" ;;  # examples, bench, tests, ringgrad.h: anything but backend internals
  esac
}

# "source_folder target_folder file" for every ringgrad include, where target_folder is the
# included header's folder under ringgrad/ ("ringgrad.h" for the umbrella header).
edges=$(
  for p in core autograd data nn optim parallel examples bench tests ringgrad.h; do
    if [ -e "$p" ]; then echo "$p"; fi
  done | xargs -I{} find {} -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) |
    sort |
    while read -r file; do
      src=$(dirname "$file")
      [ "$src" = . ] && src=ringgrad.h
      case "$src" in tests/*) src=tests ;; esac
      sed -nE 's@^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]ringgrad/([^">]+)[">].*@\1@p' "$file" |
        while read -r inc; do
          dst=$(dirname "$inc")
          [ "$dst" = . ] && dst=ringgrad.h
          echo "$src $dst $file $inc"
        done
    done
)

echo "Includes between folders (count of #include lines):"
for src in core autograd data nn optim parallel examples bench tests; do
  line=$(echo "$edges" | awk -v s="$src" '$1 == s || index($1, s "/") == 1 { n[$2]++ }
           END { for (d in n) printf "%s(%d) ", d, n[d] }' | tr ' ' '\n' | sort | tr '\n' ' ')
  printf "  %-9s ->  %s\n" "$src" "$line"
done

bad=0
while read -r src dst file inc; do
  [ -z "$src" ] && continue
  [ "$src" = "$dst" ] && continue
  ok=$(allowed "$src")
  if [ "$ok" = ANY ]; then
    case "$dst" in core/cpu | core/cpu/onednn | core/cuda) ;; *) continue ;; esac
    echo "LAYERS: $file includes ringgrad/$inc: a backend's internals (core/cpu/, core/cuda/) stay inside core/"
    bad=1
    continue
  fi
  case " $ok " in *" $dst "*) continue ;; esac
  echo "LAYERS: $file includes ringgrad/$inc: $src/ may include only $ok"
  bad=1
done <<<"$edges"

if [ $bad -ne 0 ]; then
  echo "layers: FAILED (docs/architecture.md, \"Layers\", says which folder may include which)"
  exit 1
fi
echo "layers: ok (no include goes up a layer, no backend internals outside core/)"
