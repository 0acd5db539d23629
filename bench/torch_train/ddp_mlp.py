#!/usr/bin/python3
"""The Python DDP baseline for bench/torch_train: the same Fashion-MNIST MLP, optimizer,
global batch and sharding as `ddprun-train --model mlp`, trained for one epoch under
torch.nn.parallel.DistributedDataParallel (gloo). Launch with torchrun; rank 0 prints one
JSON line with samples_per_sec (training loop only, like ddprun-train's metrics)."""
import argparse
import gzip
import json
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims])
    return torch.frombuffer(bytearray(data[4 + 4 * ndims:]), dtype=torch.uint8).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    d = args.data_dir
    x = read_idx(os.path.join(d, "train-images-idx3-ubyte.gz")).reshape(-1, 784).float()
    x = (x / 255.0 - 0.2860) / 0.3530
    y = read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).long()

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(x.shape[0]), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    sampler.set_epoch(0)
    idx = torch.tensor(list(sampler), dtype=torch.long)
    per_rank = args.batch_size // world

    dist.barrier()
    t0 = time.perf_counter()
    cpu0 = time.process_time()  # all threads of this process
    samples = 0
    loss_sum = 0.0
    for b in range(0, idx.numel(), per_rank):
        bi = idx[b:b + per_rank]
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x[bi]), y[bi])
        loss.backward()
        opt.step()
        loss_sum += loss.item() * bi.numel()
        samples += bi.numel()
    secs = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    tot = torch.tensor([float(samples), loss_sum, cpu], dtype=torch.float64)
    dist.all_reduce(tot)
    if rank == 0:
        print(json.dumps({"impl": "python-ddp", "world_size": world,
                          "samples_per_sec": tot[0].item() / secs,
                          "loss": tot[1].item() / tot[0].item(), "epoch_seconds": secs,
                          "cpu_seconds": tot[2].item()}),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
