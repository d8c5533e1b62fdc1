#!/usr/bin/env python3
"""torch_transformer_reverse.py — examples/transformer_reverse.cpp in PyTorch 2.x, end to
end, for bench/compare_transformer_reverse.sh.

The same recipe, step for step (the random streams differ, the distributions do not):
  data    source: 8 to 24 random digits (tokens 3..12), padded with 0 to the batch's
          longest; target: <bos>=1 + the digits reversed (decoder input) and the digits
          reversed + <eos>=2 (what it must predict); a fresh batch every step
  model   Embedding(13, d, padding_idx=0) + sinusoidal positions (not scaled by sqrt(d),
          as the C++ does) -> torch.nn.Transformer(d, nhead 4, L+L layers, ff 4d,
          dropout, batch_first) -> Linear(d, 13); key padding masks on source and
          target, a causal mask on the decoder (teacher forcing)
  loss    cross-entropy over every target position, padding ignored
  optim   AdamW(lr, betas (0.9, 0.98), eps 1e-8), weight decay 0.01 on tensors of
          2+ dimensions only (ringgrad's weight_decay_groups), global grad-norm clip,
          linear warmup over steps/10 then cosine decay to 0 at `steps` (WarmupCosine)
  test    greedy decoding, one token at a time, of 1,000 held-out strings; a string
          counts only when every token up to and including <eos> is right
Timed as the C++ times it: each training step from making the batch to the schedule's
step (loss.item() and logging outside); tokens = real source + target tokens.

  bench/.venv/bin/python bench/torch_transformer_reverse.py [--steps 1500] [--threads N]
      [--batch-size 64] [--d-model 64] [--layers 2] [--lr 1e-3] [--dropout 0] [--clip 1]
      [--eval-size 1000] [--seed 0] [--fused-adamw]
Prints: RESULT bench=torch_transformer_reverse exact_match=… tokens_per_s=… steps=…
        adamw=<for-loop|fused> torch=… blas=… onednn=… threads=N interop=… isa=…
"""
import argparse, math, time, warnings

from torch_info import settings  # first: it imports torch quietly
import torch

# In eval mode torch's encoder takes its nested-tensor fast path and says it is a prototype.
warnings.filterwarnings("ignore", message=r"The PyTorch API of nested tensors")

PAD, BOS, EOS, FIRST_DIGIT, VOCAB = 0, 1, 2, 3, 13
MIN_LEN, MAX_LEN = 8, 24


def make_batch(batch, gen):
    """A batch of reversal problems as in the C++ make_batch, built with tensor ops."""
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (batch,), generator=gen)
    s = int(lengths.max())
    digits = torch.randint(0, 10, (batch, s), generator=gen)
    j = torch.arange(s)
    real = j[None, :] < lengths[:, None]                       # (B, S): inside the string
    src = torch.where(real, digits + FIRST_DIGIT, PAD)
    back = (lengths[:, None] - 1 - j[None, :]).clamp(min=0)    # position n-1-j
    rev = torch.where(real, src.gather(1, back), PAD)          # the digits reversed
    tgt_in = torch.cat([torch.full((batch, 1), BOS), rev], 1)  # <bos> + reversed
    tgt_out = torch.cat([rev, torch.zeros(batch, 1, dtype=torch.long)], 1)
    tgt_out.scatter_(1, lengths[:, None], EOS)                 # reversed + <eos>
    tokens = int((2 * lengths + 1).sum())
    return src, src == PAD, tgt_in, tgt_out, tgt_in == PAD, tokens


def causal_mask(t):
    """(t, t) bool, True above the diagonal: position i may not look at j > i."""
    return torch.ones(t, t, dtype=torch.bool).triu(1)


class Reverser(torch.nn.Module):
    def __init__(self, d, layers, dropout):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d, padding_idx=PAD)
        pos = torch.arange(MAX_LEN + 2, dtype=torch.float64)[:, None]
        angle = pos * torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)
        pe = torch.zeros(MAX_LEN + 2, d, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle[:, : d // 2])
        self.register_buffer("pe", pe.float())
        self.pos_dropout = torch.nn.Dropout(dropout)
        self.transformer = torch.nn.Transformer(
            d_model=d, nhead=4, num_encoder_layers=layers, num_decoder_layers=layers,
            dim_feedforward=4 * d, dropout=dropout, batch_first=True)
        self.head = torch.nn.Linear(d, VOCAB)

    def embed_tokens(self, tokens):
        return self.pos_dropout(self.embed(tokens) + self.pe[: tokens.shape[1]])

    def encode(self, src, src_pad):
        return self.transformer.encoder(self.embed_tokens(src), src_key_padding_mask=src_pad)

    def decode(self, memory, tgt_in, src_pad, tgt_pad):
        t = tgt_in.shape[1]
        h = self.transformer.decoder(
            self.embed_tokens(tgt_in), memory, tgt_mask=causal_mask(t), tgt_is_causal=True,
            tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.head(h)


@torch.no_grad()
def exact_match(model, src, src_pad, tgt_out):
    model.eval()
    batch, steps = src.shape[0], tgt_out.shape[1]
    memory = model.encode(src, src_pad)
    out = torch.full((batch, 1), BOS)
    for t in range(steps):
        pad = torch.zeros(batch, t + 1, dtype=torch.bool)
        logits = model.decode(memory, out, src_pad, pad)        # (B, t+1, V)
        out = torch.cat([out, logits[:, t].argmax(-1, keepdim=True)], 1)
    model.train()
    got = out[:, 1:]
    # Right up to and including <eos>: positions after it don't count.
    upto_eos = torch.arange(steps)[None, :] <= (tgt_out == EOS).int().argmax(1)[:, None]
    ok = ((got == tgt_out) | ~upto_eos).all(1)
    return ok.float().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500, help="optimizer steps (the schedule's length)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-size", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (default: torch's)")
    ap.add_argument("--fused-adamw", action="store_true",
                    help="AdamW(fused=True) instead of the default for-loop update")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = Reverser(args.d_model, args.layers, args.dropout)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01,
                            fused=True if args.fused_adamw else None)
    warmup, total = args.steps // 10, args.steps

    def factor(step):  # ringgrad's WarmupCosine (min_factor 0)
        if step < warmup:
            return step / warmup
        progress = (min(step, total) - warmup) / (total - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    data_gen = torch.Generator().manual_seed(args.seed + 1)
    eval_gen = torch.Generator().manual_seed(args.seed + 1000003)  # disjoint streams
    held_src, held_src_pad, _, held_out, _, _ = make_batch(args.eval_size, eval_gen)
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters, d_model "
          f"{args.d_model}, {args.layers}+{args.layers} layers, {torch.get_num_threads()} "
          f"thread(s), torch {torch.__version__}", flush=True)

    tokens, seconds, losses = 0, 0.0, []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        src, src_pad, tgt_in, tgt_out, tgt_pad, n = make_batch(args.batch_size, data_gen)
        opt.zero_grad()
        logits = model.decode(model.encode(src, src_pad), tgt_in, src_pad, tgt_pad)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1),
                                                 ignore_index=PAD)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        schedule.step()
        seconds += time.perf_counter() - start
        tokens += n
        losses.append(loss.item())
        if step % max(1, args.steps // 10) == 0 or step == args.steps:
            print(f"train {step}/{args.steps} loss {sum(losses) / len(losses):.4f} "
                  f"{tokens / seconds:.0f} tokens/s", flush=True)
            losses = []
    eval_start = time.perf_counter()
    match = exact_match(model, held_src, held_src_pad, held_out)
    print(f"held-out: {args.eval_size} strings, greedy decoding in "
          f"{time.perf_counter() - eval_start:.1f} s, exact match {match:.4f}")
    print(f"RESULT bench=torch_transformer_reverse exact_match={match:.4f} "
          f"tokens_per_s={tokens / seconds:.0f} steps={args.steps} "
          f"adamw={'fused' if args.fused_adamw else 'for-loop'} {settings()}")


if __name__ == "__main__":
    main()
