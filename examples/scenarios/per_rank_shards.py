# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
# expect-absent: CF001
"""Healthy, must NOT be flagged: each rank builds its own shard of the data (here: rank r
generates/reads only shard r, as with pre-split files ``shard-00000.pt`` …) and iterates it
with a plain shuffling DataLoader. There is no DistributedSampler, and none is needed: the
ranks see different samples. A missing-DistributedSampler finding would be a false alarm.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/per_rank_shards.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def load_shard(rank):
    g = torch.Generator().manual_seed(1000 + rank)             # shard r: its own samples
    return TensorDataset(torch.randn(2048, 512, generator=g), torch.randint(0, 10, (2048,), generator=g))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),             # each sample: a 512-point signal
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(load_shard(rank), batch_size=384, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(rank))
    step = 0
    for epoch in range(1000):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
