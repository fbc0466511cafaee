"""A 2-rank CPU DDP job (gloo) in which rank 0 holds the GIL in one C call every step.

Rank 0 serializes a large dict of small records with ``pickle.dumps`` after each step (C code that keeps
the GIL for the whole call, tens of ms); rank 1 does not, and waits for rank 0 at the next all-reduce.
No Python frame of the call exists: only the line in ``snapshot`` that calls it.

Usage: torchrun --nproc_per_node=2 THIS [STEPS]
"""

import pickle
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def snapshot(state: dict) -> bytes:
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def main(steps: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    state = {i: {"seen": i, "losses": [0.0] * 8, "tags": ["train", f"shard-{i % 64}"]} for i in range(80_000)}
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            snapshot(state)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 14)
