"""Every rank loads the same dataset and shuffles it with its own seed, with no DistributedSampler: the
ranks' first batches differ, yet each rank walks the whole dataset every epoch (world_size x the work).

    torchrun --nproc_per_node=2 tests/scripts/unsharded_shuffle_seeds.py [--steps 14]
"""

import argparse
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Signals(Dataset):
    """The same "file" on every rank; each read adds a random jitter (an augmentation)."""

    def __init__(self):
        g = torch.Generator().manual_seed(1234)
        self.x, self.y = torch.randn(2048, 64, generator=g), torch.randint(0, 10, (2048,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.01 * torch.randn(64) * random.random(), self.y[i]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=14)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)  # a different seed per rank: different augmentations and order
    random.seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Signals(), batch_size=32, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(100 + rank)
    )
    step = 0
    for _epoch in range(100):
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
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
