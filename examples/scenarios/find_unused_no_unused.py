# expect-verdict: compute
# expect-rule: CF003
# expect-first-fix: find_unused_parameters
"""Cause: ``DDP(model, find_unused_parameters=True)`` copied from another project although
every parameter of this model gets a gradient in every step. DDP then traverses the autograd
graph after each forward to look for unused parameters, for nothing. Otherwise a healthy,
compute-bound job: the configuration finding must name the setting.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/find_unused_no_unused.py
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
    net = torch.nn.Sequential(torch.nn.Conv1d(16, 64, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(64, 64, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    model = DDP(net, find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(2048, 16, 512), torch.randint(0, 10, (2048,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=160, sampler=sampler, drop_last=True)
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
