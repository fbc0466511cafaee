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
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),             # each sample: a 512-point signal
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(3072, 512), torch.randint(0, 10, (3072,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=384, sampler=sampler, drop_last=True)
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
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
