# shellcheck shell=bash
# bench/torch_python.sh — find the two sides of a comparison for the bench/compare*.sh
# scripts: the Python that has PyTorch 2.x, and the ringgrad program. Not run by itself:
# each compare script sources it and calls
#
#   source "$(dirname "$0")/torch_python.sh"   # (from the repository root, cwd = its root)
#   ringgrad_program bench_mlp                 # sets $ringgrad_bin, or stops the script
#   find_torch_python                          # sets $torch_python, or stops the script
#
# ringgrad itself never uses PyTorch: this is only the yardstick the benchmarks compare
# against. Which interpreter, in this order:
#   1. $RINGGRAD_TORCH_PYTHON, when set: any Python with torch >= 2.0 (a conda env,
#      a venv of your own, …). Nothing is installed into it.
#   2. bench/.venv/bin/python: a project-local virtual environment (git-ignored),
#      made on first use with `python3 -m venv bench/.venv` and filled with
#      `bench/.venv/bin/pip install torch` from PyPI (MKL + oneDNN inside the wheel).
#      RINGGRAD_TORCH_PIP_ARGS replaces "torch" in that pip command, e.g.
#      RINGGRAD_TORCH_PIP_ARGS="torch==2.5.1" or, for the smaller CPU-only wheel,
#      RINGGRAD_TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu torch".
# Either way a torch older than 2.0 is refused (Debian's python3-torch is 1.13; point
# RINGGRAD_TORCH_PYTHON=/usr/bin/python3 at it and the refusal says so).

# The venv lives beside this file, whatever the caller's directory.
torch_venv_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.venv"

# Make bench/.venv and install torch into it. Called only when no interpreter was given.
make_torch_venv() {
  if [ ! -x "$torch_venv_dir/bin/python" ]; then
    echo "torch_python: creating $torch_venv_dir (one time; delete it to start over)" >&2
    if ! python3 -m venv "$torch_venv_dir"; then
      # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a separate package.
      local v
      v=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' \
          2>/dev/null || echo 3)
      rm -rf "$torch_venv_dir"  # a half-made venv would be mistaken for a good one next time
      echo "torch_python: 'python3 -m venv' failed. On Debian/Ubuntu install venv support:" >&2
      echo "    apt-get install python3-venv      (or python$v-venv)" >&2
      echo "  or point RINGGRAD_TORCH_PYTHON at a Python that already has torch >= 2.0." >&2
      exit 2
    fi
  fi
  # Also reached when an earlier pip install was interrupted: the venv is there, torch is not.
  if ! "$torch_venv_dir/bin/python" -c "import torch" 2>/dev/null; then
    local pip_args=${RINGGRAD_TORCH_PIP_ARGS:-torch}
    echo "torch_python: installing PyTorch from PyPI: pip install $pip_args" \
         "(a large download, once)" >&2
    # $pip_args unquoted on purpose: it may hold several words (flags and a package).
    # shellcheck disable=SC2086
    if ! "$torch_venv_dir/bin/pip" install $pip_args >&2; then
      echo "torch_python: 'pip install $pip_args' into $torch_venv_dir failed (see above)." >&2
      echo "  Fix the cause and run again (the venv is kept), or set RINGGRAD_TORCH_PYTHON" \
           "to a Python that has torch >= 2.0." >&2
      exit 2
    fi
  fi
}

# Sets torch_python (the interpreter) and torch_version, or exits with a message.
find_torch_python() {
  if [ -n "${RINGGRAD_TORCH_PYTHON:-}" ]; then
    torch_python=$RINGGRAD_TORCH_PYTHON
    if ! command -v "$torch_python" >/dev/null; then
      echo "torch_python: RINGGRAD_TORCH_PYTHON=$torch_python is not an executable." >&2
      echo "  Set it to a Python with torch >= 2.0, or unset it to use bench/.venv." >&2
      exit 2
    fi
  else
    make_torch_venv
    torch_python=$torch_venv_dir/bin/python
  fi
  # The version, e.g. "2.5.1+cpu"; only major >= 2 passes.
  if ! torch_version=$("$torch_python" -W ignore -c "import torch; print(torch.__version__)" \
                       2>/dev/null); then
    echo "torch_python: $torch_python cannot 'import torch'." >&2
    echo "  Install torch >= 2.0 there, set RINGGRAD_TORCH_PYTHON to a Python that has it," \
         "or unset RINGGRAD_TORCH_PYTHON to use bench/.venv (made on first use)." >&2
    exit 2
  fi
  if ! [[ $torch_version =~ ^([0-9]+)\. ]] || [ "${BASH_REMATCH[1]}" -lt 2 ]; then
    echo "torch_python: $torch_python has torch $torch_version; the comparisons need" \
         "PyTorch 2.x (MKL + oneDNN, as on PyPI)." >&2
    echo "  Unset RINGGRAD_TORCH_PYTHON to use bench/.venv (made on first use with" \
         "pip install torch), or set it to a Python with torch >= 2.0." >&2
    exit 2
  fi
  echo "torch_python: $torch_python (torch $torch_version)" >&2
}

# ringgrad's side: ringgrad_program NAME sets $ringgrad_bin to NAME in the build tree
# ($RINGGRAD_BUILD_DIR, default build), or stops the script saying how to build it.
ringgrad_program() {
  local build=${RINGGRAD_BUILD_DIR:-build}
  ringgrad_bin=$build/bin/$1
  if [ ! -x "$ringgrad_bin" ]; then
    echo "${0##*/}: $ringgrad_bin is missing: build it first" \
         "(cmake --build $build --target $1), or set RINGGRAD_BUILD_DIR" >&2
    exit 2
  fi
}
