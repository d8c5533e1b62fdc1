#!/usr/bin/env bash
# check_paths.sh — every repository path the docs name must exist.
#
#   tests/check_paths.sh [SOURCE_DIR]     (default: this checkout; ctest runs it as `doc_paths`)
#
# Checks two kinds of mention, and prints each one that names nothing:
#   - in every README and .md file, a word in `backticks` that is a path under one of the
#     top folders (core/, autograd/, …; `<ringgrad/core/tensor.h>` counts as core/tensor.h);
#   - in the comments of every source file (C++/CUDA `//`, shell and CMake `#`), the same.
# A path may be relative to the repository root or to the file's own folder. Patterns
# (`core/ops_*.cpp`), placeholders (`<dir>`) and git-ignored paths (made by a script on first
# use) are skipped.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

tops='core|autograd|data|nn|optim|parallel|examples|bench|tests|scripts|cmake'
bad=0

# check FILE WORD: WORD, stripped of quotes, brackets and trailing punctuation, is a path
# under one of the top folders that exists (from the root or from FILE's folder)?
check() {
  local file=$1 word=$2
  word=${word#[<\"(\']}
  word=${word%%[>\"\')]*}
  word=${word%%[,.:;]}
  word=${word%%[,.:;]}
  word=${word#ringgrad/}
  [[ $word =~ ^($tops)/[A-Za-z0-9_./-]*$ ]] || return 0
  [ -e "$word" ] || [ -e "$(dirname "$file")/$word" ] && return 0
  # A git-ignored path (bench/.venv, made on first use) is named before it exists.
  git check-ignore -q --no-index "${word%/}/x" 2>/dev/null && return 0
  echo "PATH: $file names \`$word\`, which does not exist"
  bad=1
}

# The files to read: in a git checkout those git tracks or would (not what .gitignore
# hides: build trees, bench/.venv with its thousands of third-party headers).
files_under() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- "$@"
  else
    find "$@" -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||'
  fi
}

for file in $(files_under . | grep -E '\.md$' | grep -v '^build' | sort); do
  file=${file#./}
  while read -r span; do
    for word in $span; do check "$file" "$word"; done
  done < <(grep -oE '`[^`]+`' "$file" | tr -d '`')
done

present=$(for p in $(echo "$tops" | tr '|' ' ') ringgrad.h CMakeLists.txt; do
             if [ -e "$p" ]; then echo "$p"; fi
           done)
sources=$(for f in $(files_under $present); do
            case "$f" in
              *.h | *.cpp | *.cu | *.cuh | *.sh | *.cmake | */CMakeLists.txt | CMakeLists.txt) echo "$f" ;;
              *) [ -f "$f" ] && [ -x "$f" ] && echo "$f" ;;
            esac
          done | grep -v '^build' | sort -u)
for file in $sources; do
  case "$file" in
    *.h | *.cpp | *.cu | *.cuh) comments=$(grep -oE '//.*' "$file" || true) ;;
    *) comments=$(grep -oE '#.*' "$file" || true) ;;
  esac
  [ -z "$comments" ] && continue
  for word in $(echo "$comments" |
                grep -oE "(^|[^A-Za-z0-9_/.<-])<?(ringgrad/)?($tops)/[A-Za-z0-9_./*<>-]*" |
                sed -E 's/^[^A-Za-z<]//'); do
    case "$word" in *'*'* | *'<'*'>'*) continue ;; esac
    check "$file" "$word"
  done
done

if [ $bad -ne 0 ]; then
  echo "doc_paths: FAILED (fix the path, or the file it names)"
  exit 1
fi
echo "doc_paths: ok (every path named in a README or a source comment exists)"
