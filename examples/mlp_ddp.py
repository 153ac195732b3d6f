"""Train an MLP with DistributedDataParallel on a generated dataset (the README's main job).

    python -m cddp.launch --nproc_per_node=2 examples/mlp_ddp.py [--epochs 10] [--out ckpt_dir]

Every rank builds the same dataset (four interleaved spirals, 4096 points, a fixed seed),
takes its share through DistributedSampler, and trains the same MLP; DDP averages gradients,
so every rank holds identical weights. Rank 0 prints the mean loss and the accuracy over the
whole dataset after each epoch and saves a checkpoint (model.module.state_dict(), written
atomically) at the end; then every rank prints how much it trained and a checksum of its
weights (the same on every rank). Runs unchanged on one process: `python examples/mlp_ddp.py`.
"""
import argparse
import math
import os
import socket
import time

import numpy as np

import cddp as torch
import cddp.distributed as dist
import cddp.nn as nn
from cddp.nn.parallel import DistributedDataParallel as DDP
from cddp.utils.data import DataLoader, TensorDataset
from cddp.utils.data.distributed import DistributedSampler


def spirals(n=4096, classes=4, features=16, seed=0):
    """Points on `classes` noisy spirals, lifted to `features` dims by a fixed random map."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    r = rng.random(n)
    theta = 1.5 * r * math.pi + 2 * math.pi * y / classes + rng.normal(0, 0.1, n)
    xy = np.stack([r * np.cos(theta), r * np.sin(theta)], 1)
    lift = rng.standard_normal((2, features))
    x = np.tanh(xy @ lift) + rng.normal(0, 0.05, (n, features))
    return torch.tensor(x.astype(np.float32)), torch.tensor(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--out", default="mlp_ddp_out")
    ap.add_argument("--local_rank", "--local-rank", type=int, default=0)  # legacy launcher
    args = ap.parse_args()

    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:                                    # a world of one, no launcher
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()

    X, Y = spirals()
    dataset = TensorDataset(X, Y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(rank)                  # different inits: DDP broadcasts rank 0's
    model = DDP(nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                              nn.Linear(128, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    criterion = nn.CrossEntropyLoss()

    t0 = time.perf_counter()
    steps = samples = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = torch.zeros(2, dtype=torch.float64)     # (loss sum, samples)
        for x, y in loader:
            opt.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            opt.step()
            steps, samples = steps + 1, samples + len(y)
            total += torch.tensor([loss.item() * len(y), len(y)], dtype=torch.float64)
        sched.step()
        dist.all_reduce(total)
        model.eval()
        with torch.no_grad():
            acc = (model(X).argmax(1) == Y).float().mean().item()
        if rank == 0:
            print(f"epoch {epoch}  loss {total[0].item() / total[1].item():.4f}  "
                  f"accuracy {acc:.3f}  ({time.perf_counter() - t0:.1f}s, {world} ranks)",
                  flush=True)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "mlp.pt")
        torch.save(model.module.state_dict(), path)
        print(f"saved {path}", flush=True)
    checksum = sum(float(p.detach().numpy().astype(np.float64).sum()) for p in model.parameters())
    print(f"rank {rank} of {world}: {steps} steps on {samples} samples, "
          f"weights checksum {checksum:.9g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
