#!/usr/bin/env python3
"""torch_gpt.py — bench/bench_gpt.cpp in PyTorch, written as nanoGPT writes its model.

The GPT of examples/gpt/model.h: a vocabulary of 256 bytes, token and learned position
embeddings, pre-norm blocks (LayerNorm, causal self-attention with one fused qkv Linear
and scaled_dot_product_attention(is_causal=True), LayerNorm, a GELU MLP of 4·d_model), a
final LayerNorm and an LM head tied to the token embedding; GPT-2's init (normal 0.02).
Each step: random tokens (a fixed generator, a new batch each step), forward,
cross-entropy, backward, clip_grad_norm_ to 1, AdamW (lr 1e-3, weight decay 0.01). Eager
mode, as a PyTorch user runs nanoGPT without torch.compile. Needs PyTorch 2.x
(bench/compare_gpt.sh finds it: bench/torch_python.sh); ringgrad never uses PyTorch.

  bench/.venv/bin/python bench/torch_gpt.py [--threads N] [--steps 20] [--layers 4
      --d-model 128 --heads 4 --seq 128 --batch-size 32]
Prints: RESULT bench=torch_gpt tokens_per_s=… ms_per_step=… mfu=… model_gflops=…
        gemm_gflops=… params=… torch=… blas=… onednn=… threads=N interop=… isa=…
(mfu as bench_gpt counts it: nanoGPT's FLOPs per token over torch.mm's rate.)
"""
import argparse
import time

from torch_info import settings  # first: it imports torch quietly
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, layers, d, heads, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, tokens):
        t = tokens.size(1)
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gemm_rate():
    """torch.mm's float32 FLOP/s on the current threads: the fastest of 1024 x 1024 x 1024
    and twice as long in m or in n, each the best of 5 (as bench_gpt.cpp measures its own)."""
    best = 0.0
    for m, n in ((1024, 1024), (2048, 1024), (1024, 2048)):
        a, b = torch.randn(m, 1024), torch.randn(1024, n)
        torch.mm(a, b)
        for _ in range(5):
            start = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * m * n * 1024 / (time.perf_counter() - start))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gemm = gemm_rate()
    torch.manual_seed(0)
    model = GPT(args.layers, args.d_model, args.heads, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    data = torch.Generator().manual_seed(1)

    def step():
        shape = (args.batch_size, args.seq)
        tokens = torch.randint(0, VOCAB, shape, generator=data)
        targets = torch.randint(0, VOCAB, shape, generator=data)
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    tokens_per_s = args.batch_size * args.seq * args.steps / seconds
    params = sum(p.numel() for p in model.parameters())  # the tied weight once
    flops_per_token = 6 * (params - model.wpe.weight.numel()) + 12 * args.layers * args.d_model * args.seq
    flops = flops_per_token * tokens_per_s
    print(f"RESULT bench=torch_gpt tokens_per_s={tokens_per_s:.0f} "
          f"ms_per_step={1e3 * seconds / args.steps:.1f} mfu={flops / gemm:.3f} "
          f"model_gflops={flops / 1e9:.1f} gemm_gflops={gemm / 1e9:.1f} params={params} "
          f"{settings()}")


if __name__ == "__main__":
    main()
