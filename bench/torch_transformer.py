#!/usr/bin/env python3
"""torch_transformer.py — bench/bench_transformer.cpp in PyTorch, for compare_transformer.sh.

One torch.nn.TransformerEncoderLayer (d_model 256, nhead 4, dim_feedforward 1024,
dropout 0, batch_first), input (16, 128, 256); each step: forward, backward of a
fixed random upstream gradient, gradients cleared. Needs PyTorch 2.x
(bench/compare_transformer.sh finds it: bench/torch_python.sh); ringgrad itself never
uses PyTorch.

  bench/.venv/bin/python bench/torch_transformer.py [--threads N] [--steps 20]
Prints: RESULT bench=torch_transformer tokens_per_s=… gflops=… ms_per_step=… peak_rss_mb=…
        torch=… blas=… onednn=… threads=N interop=… isa=…   (one line; bench/torch_info.py)
"""
import argparse, resource, time

from torch_info import settings  # first: it imports torch quietly
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d_model, nhead, ff = 256, 4, 1024
    layer = torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=ff, dropout=0.0,
                                             batch_first=True)
    x = torch.randn(args.batch, args.seq, d_model, requires_grad=True)
    upstream = torch.randn(args.batch, args.seq, d_model)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).backward(upstream)

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    tokens = args.batch * args.seq
    fwd = 2 * tokens * (4 * d_model * d_model + 2 * d_model * ff) + \
        2 * 2 * args.batch * args.seq * args.seq * d_model
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"RESULT bench=torch_transformer "
          f"tokens_per_s={tokens * args.steps / seconds:.0f} "
          f"gflops={3 * fwd * args.steps / seconds / 1e9:.1f} "
          f"ms_per_step={1e3 * seconds / args.steps:.1f} peak_rss_mb={rss:.0f} {settings()}")


if __name__ == "__main__":
    main()
