#!/usr/bin/env bash
# compare_mlp.sh — ringgrad vs PyTorch 2.x on the mnist_mlp recipe, one epoch each,
# at 1 and 2 threads, in one go; each side's best thread setting counts.
#
#   bench/compare_mlp.sh          (build/ must be built; RINGGRAD_BUILD_DIR picks another)
# PyTorch: $RINGGRAD_TORCH_PYTHON, else bench/.venv, made on first use (bench/torch_python.sh).
# Ends with: RESULT bench=mlp ours_samples_per_s=… torch_samples_per_s=… ratio=… torch=… …
exec "$(dirname "$0")/compare.sh" mlp samples
