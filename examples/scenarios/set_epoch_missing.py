# expect-verdict: compute
# expect-rule: CF002
# expect-first-fix: set_epoch
"""Cause: ``DistributedSampler(shuffle=True)`` but ``sampler.set_epoch(epoch)`` is never
called, so every epoch replays the same order. The dataset is small (4 steps per epoch per rank), so
the recorded window spans several epochs. The step itself is healthy (compute-bound).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/set_epoch_missing.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                              torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=512, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        for x, y in loader:                      # no sampler.set_epoch(epoch) before the loop
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
