#!/usr/bin/env python3
"""torch_ddp.py — the mnist_ddp recipe in PyTorch DDP (gloo, CPU), for bench/compare_ddp.sh.

Spawns WORLD processes itself (torch.multiprocessing), each with one thread per
rank as ringgrad's rgrun gives it, per-rank batch 64, DistributedSampler,
Adam 1e-3, one epoch timed. Needs PyTorch 2.x (bench/compare_ddp.sh finds it:
bench/torch_python.sh); never a dependency of ringgrad.
    bench/.venv/bin/python bench/torch_ddp.py --world 2
Prints: RESULT bench=torch_ddp world=N threads_per_rank=T samples_per_s=… torch=… blas=…
        onednn=… threads=T interop=… isa=…   (one line; the settings are rank 0's,
        bench/torch_info.py)
"""
import argparse, os, sys, time

sys.path.insert(0, os.path.dirname(__file__))
from torch_info import settings  # noqa: E402  first: it imports torch quietly
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_mlp import find, read_idx  # noqa: E402


def run(rank, world, data_dir, threads, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = read_idx(find(data_dir, "train-images-idx3-ubyte")).float().div_(255)
    y = read_idx(find(data_dir, "train-labels-idx1-ubyte")).long()
    data = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(data, world, rank)
    loader = torch.utils.data.DataLoader(data, batch_size=64, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    sampler.set_epoch(0)
    dist.barrier()
    start, samples = time.perf_counter(), 0
    for xb, yb in loader:
        opt.zero_grad()
        loss_fn(ddp(xb), yb).backward()
        opt.step()
        samples += len(xb) * world
    seconds = time.perf_counter() - start
    if rank == 0:  # the rate, and the settings as a rank saw them (its threads, not the parent's)
        out.put((samples / seconds, settings()))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads per rank (default: the cores shared out, as rgrun does)")
    args = ap.parse_args()
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.world)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(run, args=(args.world, args.data, threads, args.port, out), nprocs=args.world,
                       start_method="spawn")
    rate, torch_settings = out.get()
    print(f"RESULT bench=torch_ddp world={args.world} threads_per_rank={threads} "
          f"samples_per_s={rate:.0f} {torch_settings}")


if __name__ == "__main__":
    main()
