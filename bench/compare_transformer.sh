#!/usr/bin/env bash
# compare_transformer.sh — ringgrad vs PyTorch 2.x, one TransformerEncoderLayer
# forward+backward, at 1 and 2 threads, in one go; each side's best thread setting counts.
#
#   bench/compare_transformer.sh  (build/ must be built; RINGGRAD_BUILD_DIR picks another)
# PyTorch: $RINGGRAD_TORCH_PYTHON, else bench/.venv, made on first use (bench/torch_python.sh).
# Ends with: RESULT bench=transformer ours_tokens_per_s=… torch_tokens_per_s=… ratio=… torch=… …
exec "$(dirname "$0")/compare.sh" transformer tokens
