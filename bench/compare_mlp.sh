#!/usr/bin/env bash
# compare_mlp.sh — ringgrad vs PyTorch on the mnist_mlp recipe, one epoch each,
# at 1 and 2 threads, in one go; each side's best thread setting counts.
#
#   bench/compare_mlp.sh          (build/ must be built; needs python3-torch)
# Ends with: RESULT bench=mlp ours_samples_per_s=… torch_samples_per_s=… ratio=…
exec "$(dirname "$0")/compare.sh" mlp samples
