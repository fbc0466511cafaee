# expect-verdict: compute
# expect-rule: CF001
# expect-first-fix: DistributedSampler
"""Cause: the DataLoader is built with ``shuffle=True`` and no DistributedSampler, over one
dataset every rank loads identically (same file, same seed). Every rank iterates the same
samples, so two ranks do the work of one; the step itself looks healthy (compute-bound).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/no_distributed_sampler.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def load_dataset():
    g = torch.Generator().manual_seed(1234)                    # the same "file" on every rank
    return TensorDataset(torch.randn(4096, 512, generator=g), torch.randint(0, 10, (4096,), generator=g))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)                                       # same seed: same shuffle order on every rank
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),             # each sample: a 512-point signal
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(load_dataset(), batch_size=384, shuffle=True, drop_last=True)
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
