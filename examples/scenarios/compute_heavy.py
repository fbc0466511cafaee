# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
"""Healthy: a small convolutional network on 64x64 images with a batch large enough that
the step is spent in convolutions; 0.1 M parameters, so the one all-reduce per step is cheap
and overlaps backward. Nothing avoidable dominates (any compute fix is acceptable).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/compute_heavy.py
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
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 64, 3, padding=1, stride=2), torch.nn.ReLU(),
                              torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(512, 3, 64, 64), torch.randint(0, 10, (512,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=48, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
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
