#!/usr/bin/env python3
"""torch_mlp.py — the mnist_mlp recipe in PyTorch, for bench/compare_mlp.sh.

Same model (Linear 784-256, ReLU, Linear 256-10), Adam lr 1e-3, batch 64,
shuffled, one epoch over the same Fashion-MNIST training set (read from the
same IDX files, already in memory as a float tensor, as ringgrad does).
Needs PyTorch 2.x (bench/compare_mlp.sh finds it: bench/torch_python.sh); ringgrad
itself never uses PyTorch.

  bench/.venv/bin/python bench/torch_mlp.py [--threads N] [--data DIR] [--epochs 1]
Prints: RESULT bench=torch_mlp samples_per_s=… peak_rss_mb=… torch=… blas=… onednn=…
        threads=N interop=… isa=…   (one line; the last six: bench/torch_info.py)
"""
import argparse, gzip, os, resource, struct, time

from torch_info import settings  # first: it imports torch quietly
import torch


def read_idx(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(dims)


def find(directory, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise FileNotFoundError(f"{stem}(.gz) in {directory}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    x = read_idx(find(args.data, "train-images-idx3-ubyte")).float().div_(255)
    y = read_idx(find(args.data, "train-labels-idx1-ubyte")).long()
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    samples, seconds = 0, 0.0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x))
        start = time.perf_counter()
        for i in range(0, len(x), 64):
            idx = order[i : i + 64]
            xb, yb = x[idx], y[idx]
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            samples += len(idx)
        seconds += time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"RESULT bench=torch_mlp samples_per_s={samples / seconds:.0f} "
          f"peak_rss_mb={rss_mb:.0f} {settings()}")


if __name__ == "__main__":
    main()
