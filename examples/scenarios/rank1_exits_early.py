# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: rank 1
"""Cause: each rank computes its own stopping point from its local shard: ``max_steps =
epochs * len(loader)`` over a per-rank shard whose sizes differ (rank 0 holds 1536 samples,
rank 1 only 896: 12 vs 7 steps at batch 128). Rank 1 reaches its ``max_steps`` after 7
steps, leaves the loop, saves its final log line and exits normally (exit code 0, after
``destroy_process_group()``). Rank 0 goes on to its 8th step and fails in that step's
gradient all-reduce because its peer is gone; torchrun reports rank 0 as the failure.

Verify (plain torchrun, no ddpdoctor): rank 1 prints "reached max_steps=7, exiting" and
exits 0; rank 0 then dies in ``loss.backward()`` with a gloo connection error. ``--steps N``
(ablation) gives every rank the same explicit budget and the job ends normally.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/rank1_exits_early.py
"""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

SHARD_SIZES = {0: 1536, 1: 896}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="explicit step budget for every rank (0: from the shard)")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    n = SHARD_SIZES[rank]
    shard = TensorDataset(torch.randn(n, 512, generator=g), torch.randint(0, 10, (n,), generator=g))
    loader = DataLoader(shard, batch_size=128, shuffle=True, drop_last=True, generator=g)
    max_steps = args.steps or args.epochs * len(loader)
    step = 0
    while step < max_steps:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            print(f"rank {rank}: step {step} loss {loss.item():.3f}", flush=True)
            if step >= max_steps:
                break
    print(f"rank {rank}: reached max_steps={max_steps}, exiting", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
