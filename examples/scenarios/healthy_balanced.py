# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
"""Healthy: a balanced job. In-memory data sharded by DistributedSampler (set_epoch called),
a moderate MLP (2.6 M parameters) and a batch that keeps the step compute-bound; gradients
are all-reduced in DDP's default 25 MB buckets, overlapping backward.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/healthy_balanced.py
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
                              torch.nn.ReLU(), torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    model = DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(8192, 512), torch.randint(0, 10, (8192,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=256, sampler=sampler, drop_last=True)
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
