"""A 2-rank CPU DDP job (gloo) in which rank 1 pauses in garbage collection every step.

Both ranks hold many long-lived Python objects (a "dataset index" of small records built at setup, as
real jobs do); rank 1 alone also keeps a rolling cache of linked records (reference cycles) in its
loop, so the threshold collector runs full collections on it that walk every long-lived object:
~100 ms every few steps, which the other rank does not pay.  Nothing in the loop names GC: the time is lost
in C code that holds the GIL, where a Python stack sampler cannot run.

Usage: torchrun --nproc_per_node=2 THIS [STEPS]
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Node:
    __slots__ = ("peer", "payload", "__weakref__")

    def __init__(self, payload):
        self.payload = payload
        self.peer = None


def build_index(n: int) -> list:
    """Long-lived, GC-tracked records (dicts and lists), the kind a dataset index holds."""
    return [{"id": i, "tags": [i, i + 1], "meta": {"k": i}} for i in range(n)]


def step_cache(rank: int, cache: list) -> None:
    """Rank 1 builds a graph of linked records every step and keeps the last two (a rolling cache):
    they live long enough to be promoted, so the threshold collector runs full (generation 2)
    collections that walk every long-lived object, the index included."""
    if rank != 1:
        return
    nodes = [Node(i) for i in range(30_000)]
    for a, b in zip(nodes, nodes[1:] + nodes[:1]):
        a.peer = b
    cache.append(nodes)
    del cache[:-2]


def main(steps: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    index = build_index(150_000)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    cache: list = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step_cache(rank, cache)
    dist.barrier()
    dist.destroy_process_group()
    del index


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 14)
