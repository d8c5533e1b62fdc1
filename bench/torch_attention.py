#!/usr/bin/env python3
"""torch_attention.py — bench/bench_attention.cpp's cases through PyTorch, for comparison.

For each case T:d:causal:H, q, k, v of shape (1, H, T, d) float32 on CPU; one step is
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=…) forward and its
backward through autograd (out.backward(dout)). FLOPs counted as bench_attention counts
them: 14·T²·d·H, causal half. Best of --rounds rounds. bench_attention runs this itself
(with $RINGGRAD_TORCH_PYTHON, default bench/.venv/bin/python); ringgrad never uses PyTorch.

  python bench/torch_attention.py --threads 1 --cases 4096:64:0:8,4096:64:1:8 [--rounds 3]
Prints per case:
  RESULT bench=torch_attention T=… d=… causal=… threads=… heads=… gflops=… torch=…
"""
import argparse, time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=15.0, help="seconds per case, at most")
    ap.add_argument("--cases", required=True, help="T:d:causal:H,…")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for spec in args.cases.split(","):
        t, d, causal, h = (int(x) for x in spec.split(":"))
        q, k, v = (torch.randn(1, h, t, d, requires_grad=True) for _ in range(3))
        dout = torch.randn(1, h, t, d)

        def step():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            out.backward(dout)
            q.grad = k.grad = v.grad = None

        start = time.perf_counter()
        step()  # warm-up
        once = time.perf_counter() - start
        spent, best = once, (once if once > args.budget / 2 else float("inf"))
        for _ in range(args.rounds):
            if spent >= args.budget:
                break
            start = time.perf_counter()
            step()
            s = time.perf_counter() - start
            spent += s
            best = min(best, s)
        flops = 14.0 * t * t * d * h * (0.5 if causal else 1.0)
        print(f"RESULT bench=torch_attention T={t} d={d} causal={causal} threads={args.threads} "
              f"heads={h} gflops={flops / best / 1e9:.1f} torch={torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
