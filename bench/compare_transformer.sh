#!/usr/bin/env bash
# compare_transformer.sh — ringgrad vs PyTorch, one TransformerEncoderLayer forward+backward,
# at 1 and 2 threads, in one go; each side's best thread setting counts.
#
#   bench/compare_transformer.sh          (build/ must be built; needs python3-torch)
# Ends with: RESULT bench=transformer ours_tokens_per_s=… torch_tokens_per_s=… ratio=…
exec "$(dirname "$0")/compare.sh" transformer tokens
